"""corrupt_history: the talker-input noise against exposure bias (MiniModelConfig.history_noise)."""
from __future__ import annotations

import torch

from rvqspec.mini.talker_train import corrupt_history


def test_corrupt_history_rates_and_structure() -> None:
    g = torch.Generator().manual_seed(0)
    codes = torch.zeros(64, 50, 16, dtype=torch.long)  # all zeros: any non-zero code was replaced
    out = corrupt_history(codes, 256, residual_p=0.5, c0_p=0.1, generator=g)
    assert out.shape == codes.shape and torch.equal(codes, torch.zeros_like(codes))  # input untouched
    changed = out != 0  # (B, T, 16); a random code is 0 with prob 1/256, negligible here
    frames_hit = changed[..., 1:].any(-1).float().mean().item()
    assert 0.45 < frames_hit < 0.55, frames_hit  # per-frame probability 0.5
    assert 0.07 < changed[..., 0].float().mean().item() < 0.13  # c0 probability 0.1
    # replaced residual levels are a suffix k0..15: once a level is hit, all deeper ones are
    # (a random code equal to the old one, p = 1/256, shows as unchanged: hence > 0.99, not == 1)
    res = changed[..., 1:]  # (B, T, 15)
    first = res.float().argmax(-1, keepdim=True)  # (B, T, 1): first replaced level
    suffix = torch.arange(15).view(1, 1, 15) >= first  # (B, T, 15)
    any_hit = res.any(-1)  # (B, T)
    assert (suffix == res)[any_hit].float().mean().item() > 0.99
    # deeper levels are replaced more often than shallow ones (k0 uniform in 1..15)
    rate = changed[..., 1:].float().mean((0, 1))
    assert rate[-1] > 2 * rate[0]
    # negative control: zero probabilities leave the codes as they are
    assert torch.equal(corrupt_history(codes, 256, 0.0, 0.0, g), codes)
