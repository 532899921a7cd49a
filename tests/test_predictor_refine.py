"""rvqspec.mini.predictor_refine: the code predictor trained alone on cached talker states."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from _tiny_cp import tiny_code_predictor
from rvqspec.core.frame_loop import teacher_forced_inner
from rvqspec.mini.predictor_refine import refine_code_predictor

V = 16


def frames(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (n, 32) random, codes (n, 16): c0 random, c_k = (c0 + k) mod V, learnable from c0."""
    g = torch.Generator().manual_seed(seed)
    c0 = torch.randint(0, V, (n, 1), generator=g)  # (n, 1)
    codes = (c0 + torch.arange(16).view(1, 16)) % V  # (n, 16)
    return torch.randn(n, 32, generator=g), codes


def ce(cp, hidden, codes) -> float:
    with torch.no_grad():
        lg = cp.lm_logits(teacher_forced_inner(cp, hidden, codes), torch.arange(15))  # (n, 15, V)
        return F.cross_entropy(lg.reshape(-1, V), codes[:, 1:].reshape(-1)).item()


def test_refinement_learns_the_codes_and_touches_only_the_predictor():
    cp = tiny_code_predictor(vocab=V, hidden=32, layers=1, head_scale=1.0)
    c0_table = cp.c0_embedding.weight.clone()
    hidden, codes = frames(256, seed=0)
    held_h, held_c = frames(128, seed=1)
    before = ce(cp, held_h, held_c)
    out = refine_code_predictor(cp, hidden, codes, steps=150, frames=64, lr=3e-3, weight_decay=0.0,
                                generator=torch.Generator().manual_seed(0), progress=False)
    after = ce(cp, held_h, held_c)
    assert before > 0.5 * math.log(V) and after < 0.4 * before, (before, after)
    assert out["cp_refine_steps"] == 150 and out["cp_refine_frames"] == 256
    assert out["cp_refine_final_train_loss"] < 0.4 * before
    assert torch.equal(cp.c0_embedding.weight, c0_table)  # the talker's table is not the predictor's to train
    assert not cp.training


def test_refinement_cannot_learn_labels_that_carry_nothing():
    """Negative control: c1..c15 drawn independently of the inputs stay near log V on held-out frames."""
    cp = tiny_code_predictor(vocab=V, hidden=32, layers=1, head_scale=1.0)
    g = torch.Generator().manual_seed(2)
    hidden, held_h = torch.randn(256, 32, generator=g), torch.randn(128, 32, generator=g)
    codes, held_c = torch.randint(0, V, (256, 16), generator=g), torch.randint(0, V, (128, 16), generator=g)
    refine_code_predictor(cp, hidden, codes, steps=150, frames=64, lr=3e-3, weight_decay=0.0,
                          generator=torch.Generator().manual_seed(0), progress=False)
    assert ce(cp, held_h, held_c) > 0.9 * math.log(V)


def test_bad_arguments_name_the_shapes():
    cp = tiny_code_predictor(vocab=V, hidden=32, layers=1)
    hidden, codes = frames(8, seed=0)
    with pytest.raises(ValueError, match="steps >= 1"):
        refine_code_predictor(cp, hidden, codes, 0, 4, 1e-3, 0.0, torch.Generator())
    with pytest.raises(ValueError, match=r"\(8, 32\).*\(7, 16\)"):
        refine_code_predictor(cp, hidden, codes[:7], 1, 4, 1e-3, 0.0, torch.Generator())
