"""rvqspec.core.sampling reproduces HF's warpers (temperature -> top-k -> top-p) exactly; sample() draws
from the given p (chi-square, with a negative control)."""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

from rvqspec.core.sampling import Sampling, probs, sample, sample_logits, warp_logits


def hf_probs(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """What HF generate computes for do_sample=True (same processor selection rules)."""
    scores = logits.to(torch.float32)
    ids = torch.zeros(logits.shape[0], 1, dtype=torch.long)
    if s.temperature != 1.0:
        scores = TemperatureLogitsWarper(s.temperature)(ids, scores)
    if s.top_k:
        scores = TopKLogitsWarper(top_k=s.top_k)(ids, scores)
    if s.top_p < 1.0:
        scores = TopPLogitsWarper(top_p=s.top_p)(ids, scores)
    return scores.softmax(-1)


SETTINGS = [Sampling(), Sampling(top_k=5, temperature=0.7), Sampling(top_k=1), Sampling(top_k=500),
            Sampling(top_k=0, top_p=0.8), Sampling(top_k=20, top_p=0.5, temperature=1.3),
            Sampling(top_k=0, top_p=1.0, temperature=1.0), Sampling(top_k=3, top_p=0.05)]


@pytest.mark.parametrize("s", SETTINGS, ids=str)
@pytest.mark.parametrize("ties", [False, True])
def test_probs_match_hf_warpers(s: Sampling, ties: bool) -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(128, 64, generator=g) * 3  # (B, V)
    if ties:  # integer logits: many ties at the k-th value, which HF keeps
        logits = logits.round()
    ours, ref = probs(logits, s), hf_probs(logits, s)
    assert torch.equal(ours > 0, ref > 0), "kept support differs from HF"
    assert torch.allclose(ours, ref, rtol=0, atol=1e-7)
    assert torch.allclose(ours.sum(-1), torch.ones(128), atol=1e-5)


def test_ties_are_kept_and_filters_really_filter() -> None:
    logits = torch.tensor([[3.0, 3.0, 3.0, 1.0, 0.0]])
    p = probs(logits, Sampling(top_k=2, temperature=1.0))
    assert (p > 0).sum().item() == 3  # the k-th value is tied three ways: all three stay
    p = probs(torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0]]), Sampling(top_k=2, temperature=1.0))
    assert (p > 0).tolist() == [[True, True, False, False, False]]
    # bf16 logits are processed in float32, as HF casts them
    assert probs(logits.bfloat16(), Sampling()).dtype == torch.float32


def test_greedy_is_one_hot_at_raw_argmax() -> None:
    logits = torch.randn(16, 32, generator=torch.Generator().manual_seed(2))
    p = probs(logits, Sampling.greedy())
    assert torch.equal(p.argmax(-1), logits.argmax(-1))
    assert torch.equal(p.sum(-1), torch.ones(16)) and torch.equal((p > 0).sum(-1), torch.ones(16, dtype=torch.long))
    assert torch.equal(sample_logits(logits, Sampling.greedy()), logits.argmax(-1))
    assert torch.equal(warp_logits(logits, Sampling.greedy()), logits)


def test_sample_is_reproducible_with_generator() -> None:
    p = torch.softmax(torch.randn(4, 10, generator=torch.Generator().manual_seed(3)), -1)
    a = sample(p, torch.Generator().manual_seed(7))
    b = sample(p, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.shape == (4,) and a.dtype == torch.long


def test_sample_follows_p_chi_square_with_negative_control() -> None:
    """200k draws match p (chi-square p > 1e-6); the same draws tested against a slightly different
    distribution must fail (p < 1e-6), so the test has power."""
    V, N = 8, 200_000
    p = torch.softmax(torch.randn(V, generator=torch.Generator().manual_seed(4)), -1)
    draws = sample(p.expand(N, V).contiguous(), torch.Generator().manual_seed(5))
    counts = torch.bincount(draws, minlength=V).double().numpy()
    expected = lambda d: (d.double() / d.double().sum() * counts.sum()).numpy()  # noqa: E731
    assert chisquare(counts, expected(p)).pvalue > 1e-6
    q = p.clone()
    i, j = int(p.argmax()), int(p.argmin())
    q[i], q[j] = p[i] * 0.95, p[j] + p[i] * 0.05  # move 5% of the likeliest token's mass
    assert chisquare(counts, expected(q)).pvalue < 1e-6


@pytest.mark.parametrize("bad", [dict(temperature=0.0), dict(top_k=-1), dict(top_p=1.5)])
def test_invalid_sampling_is_rejected(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Sampling(**bad)


def test_sample_rejects_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        sample(torch.ones(3))
