"""rvqspec.measure.lossless: the model-scale lossless check (its statistics, its exact enumeration, and a
decoder run that must pass while the wrong acceptance rules fail it)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from _tiny_cp import randomize_drafter, teacher_forced, tiny_code_predictor
from rvqspec.core.drafters import make_drafter
from rvqspec.measure.lossless import (LosslessConfig, check_context, exact_prefix_law, lossless_report, pooled_chisquare,
                              two_sample_chisquare)
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree

SAMPLING = Sampling(temperature=1.0, top_k=4, top_p=1.0)
TREE = SparseTree([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])


@pytest.fixture(scope="module")
def cp():
    torch.set_num_threads(1)
    return tiny_code_predictor(vocab=16, hidden=32, layers=2, talker_hidden=48, seed=3)


@pytest.fixture(scope="module")
def context():
    g = torch.Generator().manual_seed(11)
    return torch.randn(1, 1, 48, generator=g), torch.tensor([[5]])


def test_pooled_chisquare_accepts_a_fair_sample_and_rejects_a_biased_one():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.04, 0.01, 0.0])
    fair = np.bincount(rng.choice(6, 20000, p=p), minlength=6)
    pv, impossible, dof = pooled_chisquare(fair, p)
    assert pv > 1e-3 and impossible == 0 and dof >= 3
    q = np.array([0.45, 0.35, 0.15, 0.04, 0.01, 0.0])  # 5 points of mass moved: the negative control
    assert pooled_chisquare(np.bincount(rng.choice(6, 20000, p=q), minlength=6), p)[0] < 1e-6
    # one observation in a cell of probability 0 is counted whatever the p-value
    assert pooled_chisquare(fair + np.array([0, 0, 0, 0, 0, 1]), p)[1] == 1
    with pytest.raises(ValueError, match="shape"):
        pooled_chisquare(fair[:5], p)
    # every observation impossible (a wrong rule at few frames): p = 0, finite, never NaN
    pv, impossible, _ = pooled_chisquare(np.array([0, 0, 0, 0, 0, 40]), p)
    assert pv == 0.0 and impossible == 40


def test_two_sample_chisquare_same_law_passes_shifted_law_fails():
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(40))
    a = np.bincount(rng.choice(40, 20000, p=p), minlength=40)
    b = np.bincount(rng.choice(40, 15000, p=p), minlength=40)
    assert two_sample_chisquare(a, b)[0] > 1e-3
    q = p.copy()
    q[np.argmax(p)] *= 1.3
    q /= q.sum()
    c = np.bincount(rng.choice(40, 15000, p=q), minlength=40)
    assert two_sample_chisquare(a, c)[0] < 1e-6
    with pytest.raises(ValueError, match="shape"):
        two_sample_chisquare(a, b[:10])


@torch.no_grad()
def test_exact_prefix_law_matches_sequential_enumeration(cp, context):
    """The batched enumeration against one plain teacher-forced forward per prefix."""
    from rvqspec.core.sampling import probs

    th, c0 = context
    joint, p3 = exact_prefix_law(cp, th, c0, SAMPLING)
    V = cp.config.vocab_size
    assert joint.shape == (V, V) and p3.shape == (V,)
    assert abs(joint.sum() - 1) < 1e-6 and abs(p3.sum() - 1) < 1e-6  # float32 softmax
    assert (joint > 0).sum(1).max() <= 4  # top-k 4: at most 4 c2 per c1

    def p_next(prefix):
        h, _ = teacher_forced(cp, th, c0, prefix)
        return probs(torch.nn.functional.linear(h[:, -1], cp.lm_head[len(prefix)].weight), SAMPLING)[0].double()

    p1 = p_next([])
    ref_p3 = torch.zeros(V, dtype=torch.float64)
    for c1 in p1.nonzero().flatten().tolist():
        p2 = p_next([c1])
        assert np.allclose(joint[c1], (p1[c1] * p2).numpy(), atol=1e-6)
        for c2 in p2.nonzero().flatten().tolist():
            ref_p3 += p1[c1] * p2[c2] * p_next([c1, c2])
    assert np.allclose(p3, ref_p3.numpy(), atol=1e-6)


@pytest.mark.slow
def test_decoder_passes_and_wrong_rules_fail(cp, context, tmp_path):
    """1,200 frames of the deployed decoder pass (every p >= 1e-6 / 17, no impossible cell); the
    always-accept (300 frames) and full-p (600 frames) controls against the same AR reference fail."""
    th, c0 = context
    d = randomize_drafter(make_drafter("offsets", cp), seed=4)
    spec = SpeculativeCodePredictor(cp, d, TREE)
    controls = {c: SpeculativeCodePredictor(cp, d, TREE, rule="walk", _control=c) for c in ("always_accept", "full_p")}
    rep = lossless_report(cp, spec, [(th, c0)], SAMPLING, LosslessConfig(frames=1200, seed=2), controls=controls,
                          control_frames={"always_accept": 300, "full_p": 600}, progress=False)
    ctx = rep["contexts"][0]
    dec = ctx["decoder"]
    assert len(dec["tests"]) == 17 and dec["threshold"] == pytest.approx(1e-6 / 17)
    assert dec["accepted_per_frame"] > 1.0  # the rounds really speculate
    assert dec["passed"], dec["tests"]
    assert ctx["control_always_accept"]["frames"] == 300 and ctx["control_full_p"]["frames"] == 600
    assert not ctx["control_always_accept"]["passed"]
    assert not ctx["control_full_p"]["passed"], ctx["control_full_p"]["tests"]
    assert rep["all_passed"] and rep["controls_all_failed"]
    # the main job's report shows the verdicts and the figure
    from rvqspec.workbench.report import lossless_rows, render_report

    rows = {r["run"]: r["verdict"] for r in lossless_rows(rep)}
    assert rows == {"decoder": "pass", "control_always_accept": "FAIL", "control_full_p": "FAIL"}
    page = render_report({"lossless": rep}, tmp_path).read_text()
    assert "fig-lossless" in page and "lossless-table" in page


def test_check_context_shape_errors(cp, context):
    th, c0 = context
    spec = SpeculativeCodePredictor(cp, make_drafter("reused", cp), TREE)
    with pytest.raises(ValueError, match="talker_hidden"):
        check_context(cp, spec, th[0], c0, SAMPLING, LosslessConfig(frames=2), progress=False)
    with pytest.raises(ValueError, match="c0"):
        check_context(cp, spec, th, c0.view(1), SAMPLING, LosslessConfig(frames=2), progress=False)


_ROOT = Path(__file__).resolve().parents[1]
# the committed world's runs, and the v1 world's (docs/design.md keeps its figures for comparison)
COMMITTED_LOSSLESS = sorted((_ROOT / "data" / "mini" / "bench").glob("lossless_*_n16.json")) + sorted(
    (_ROOT / "docs" / "measurements" / "world_v1").glob("lossless_*_n16.json"))


def test_the_committed_world_has_a_lossless_run():
    assert any(p.parent.name == "bench" for p in COMMITTED_LOSSLESS)


@pytest.mark.parametrize("path", COMMITTED_LOSSLESS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_committed_mini_lossless_benchmark(path):
    """The recorded `rvqspec bench lossless` runs on the mini model (README, docs/design.md): 2
    contexts x 20,000 frames passed, every control failed, and the figures are self-consistent."""
    import json

    rep = json.loads(path.read_text())
    assert rep["all_passed"] and rep["controls_all_failed"] and len(rep["contexts"]) == 2
    for ctx in rep["contexts"]:
        dec = ctx["decoder"]
        assert dec["frames"] == 20000 and dec["impossible"] == 0
        assert dec["min_p"] == min(t["p"] for t in dec["tests"].values()) >= dec["threshold"]
        assert dec["accepted_per_frame"] > 0.5  # drafts were accepted: the tree paths were exercised
        for name in ("control_always_accept", "control_full_p"):
            assert ctx[name]["min_p"] < ctx[name]["threshold"] or ctx[name]["impossible"] > 0
