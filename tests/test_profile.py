"""The device profiler (rvqspec.measure.profile), device profile files, and Figure 4 (rvqspec.workbench.plots)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import tiny_code_predictor  # noqa: E402

from rvqspec.measure.profile import (Acceptance, BackendUnavailable, ProfileConfig, ProfileError,  # noqa: E402
                             default_acceptance_table, load_acceptance, load_device_profile, profile,
                             save_device_profile, time_calls, tokens_per_call_from_table, tree_for_profile)
from rvqspec.core.tree import SparseTree  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------
# tokens per call from an acceptance table
# --------------------------------------------------------------------------------------------
def test_tokens_per_call_limits():
    zero = np.zeros((3, 4))
    assert tokens_per_call_from_table(SparseTree.chain(3), zero) == pytest.approx(1.0)  # 15 calls
    one = np.ones((3, 1))
    # chain of 3, always accepted: rounds after c1, c5, c9 accept 3, after c13 accept 2 -> 1 + 4 calls
    assert tokens_per_call_from_table(SparseTree.chain(3), one) == pytest.approx(15 / 5)


def _simulate(tree: SparseTree, table: np.ndarray, frames: int, rng: np.random.Generator) -> float:
    """Monte Carlo of the table model: at each depth the verifier's token is the rank-r candidate
    with probability table[d, r] (else none); a round accepts while the rank path is in the tree."""
    paths = set(tree.paths)
    K = table.shape[0]
    calls = 0
    for _ in range(frames):
        calls += 1  # prefill
        m = 1
        while m < 15:
            a, path = 0, ()
            while a < K and m + a + 1 <= 15:
                p = table[a]
                r = rng.choice(len(p) + 1, p=np.append(p, 1 - p.sum()))
                path = path + (int(r),)
                if path not in paths:
                    break
                a += 1
            calls += 1
            m += a + 1
    return 15 * frames / calls


def test_tokens_per_call_matches_simulation():
    table = default_acceptance_table(ranks=4)
    tree = SparseTree.grow(table, budget=8, max_depth=3)
    want = tokens_per_call_from_table(tree, table)
    got = _simulate(tree, table, 4000, np.random.default_rng(0))
    assert abs(got - want) < 0.02, (got, want)  # ~4 standard errors at 4000 frames


def test_default_table_is_seed_fitted():
    t = default_acceptance_table()
    tpc = {n: tokens_per_call_from_table(SparseTree.grow(t, n, 3), t) for n in (16, 64)}
    assert abs(tpc[16] - 2.25) < 0.05 and abs(tpc[64] - 2.60) < 0.05  # seed 000 §3.4


def test_load_acceptance_formats(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps({"N": {"1": 1.3, "4": 1.8}, "source": "mini world"}))
    a = load_acceptance(p)
    assert a.curve == {1: 1.3, 4: 1.8} and "mini world" in a.source
    assert a.tokens_per_call(SparseTree.chain(1)) == (1.3, "measured")
    assert a.tokens_per_call(SparseTree.chain(2))[0] is None
    p.write_text(json.dumps({"acc": [[0.5, 0.2], [0.4, 0.1]]}))
    a = load_acceptance(p)
    assert a.curve == {} and a.table.shape == (2, 2)
    for bad, msg in (({"x": 1}, "no acceptance data"), ({"N": {"4": 20.0}}, "outside"),
                     ({"N": [1, 2]}, "must map"), ({"acc": [[1.5]]}, "probabilities")):
        p.write_text(json.dumps(bad))
        with pytest.raises(ProfileError, match=msg):
            load_acceptance(p)
    with pytest.raises(ProfileError, match="no such"):
        load_acceptance(tmp_path / "missing.json")


# --------------------------------------------------------------------------------------------
# timing and the profile
# --------------------------------------------------------------------------------------------
def test_time_calls_budget():
    t = time_calls(lambda: time.sleep(0.002), calls=200, warmup=4, budget_s=0.1)
    assert 20 <= t["calls"] < 200 and t["warmup"] == 4
    assert t["p10"] <= t["p50"] <= t["p90"] and t["p50"] >= 2.0


@pytest.mark.parametrize("backend,heads", [("torch-cpu", "window"), ("onnx", "window"), ("torch-cpu", "all")])
def test_profile_tiny(backend, heads, tmp_path):
    cp = tiny_code_predictor(vocab=64, hidden=64, layers=1)
    cfg = ProfileConfig(backend=backend, calls=10, warmup=2, sizes=(1, 4, 8), heads=heads)
    r = profile(cfg, code_predictor=cp, progress=False)
    assert set(r["verify"]) == {"1", "4", "8"} and r["verify"]["8"]["q"] == 9 and r["heads"] == heads
    for n in ("1", "4", "8"):
        assert r["overhead"][n] == pytest.approx(r["verify"][n]["p50"] / r["ar"]["p50"] - 1)
        assert r["speedup"][n] == pytest.approx(r["tokens_per_call"][n] / (1 + r["overhead"][n]))
        assert len(r["verify"][n]["tree"]) == int(n)
    assert r["speedup"][str(r["n_star"])] == max(r["speedup"].values())
    path = save_device_profile(r, tmp_path / "p.json")
    prof = load_device_profile(path)
    assert prof.n_star == r["n_star"] and prof.backend == backend
    tree = tree_for_profile(prof)
    assert len(tree) == prof.n_star
    assert tree == SparseTree.grow(np.asarray(r["acceptance_table"]), prof.n_star, 3)
    from rvqspec.measure.profile import load_tree

    assert load_tree(path) == tree  # `rvqspec export ... --tree PROFILE.json` exports the N* tree


def test_profile_uses_measured_curve():
    cp = tiny_code_predictor(vocab=64, hidden=64, layers=1)
    acc = Acceptance(default_acceptance_table(), {1: 1.1, 2: 5.0}, "test curve")
    r = profile(ProfileConfig(calls=5, warmup=1, sizes=(1, 2, 4)), acc, code_predictor=cp, progress=False)
    assert r["tokens_per_call"] == {"1": 1.1, "2": 5.0, "4": None} and r["speedup"]["4"] is None
    assert r["n_star"] == 2 and r["acceptance_source"] == "test curve"


def test_unavailable_backends_skip_cleanly():
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable, match="cuda"):
            profile(ProfileConfig(backend="torch-cuda", calls=1, warmup=0, sizes=(1,)), progress=False)
    if sys.platform != "darwin":
        with pytest.raises(BackendUnavailable, match="macOS"):
            profile(ProfileConfig(backend="coreml", dtype="fp16", calls=1, warmup=0, sizes=(1,)), progress=False)
        with pytest.raises(BackendUnavailable, match="mps"):
            profile(ProfileConfig(backend="mps", calls=1, warmup=0, sizes=(1,)), progress=False)
    with pytest.raises(ProfileError, match="backend must be"):
        ProfileConfig(backend="tpu")


def test_cli_skip_and_errors():
    from rvqspec.cli import app

    runner = CliRunner()
    if sys.platform != "darwin":
        res = runner.invoke(app, ["profile", "--backend", "coreml", "--dtype", "fp16", "--json"])
        # nothing measured: exit 2 (a script must not read it as success), the skip still recorded in the JSON
        assert res.exit_code == 2 and json.loads(res.stdout.strip().splitlines()[-1])["skipped"]
    res = runner.invoke(app, ["profile", "--backend", "onnx", "--dtype", "bf16"])
    assert res.exit_code == 2 and "fp32" in res.output
    res = runner.invoke(app, ["profile", "--model", "/nonexistent/ckpt", "--calls", "1", "--warmup", "0",
                              "--budget", "1"])
    assert res.exit_code == 2 and "preset" in res.output


def test_device_profile_errors(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ProfileError, match="schema"):
        load_device_profile(p)
    p.write_text(json.dumps({"schema": "rvqspec.device_profile/1", "device": "x"}))
    with pytest.raises(ProfileError, match="missing keys"):
        load_device_profile(p)


def test_figure4(tmp_path):
    from rvqspec.workbench.plots import figure4, write_figure

    prof = {"backend": "torch-cpu", "dtype": "fp32", "device": "cpu", "n_star": 4,
            "speedup": {"1": 1.1, "4": 1.5, "16": None}, "tokens_per_call": {"1": 1.3, "4": 1.8, "16": 2.2}}
    fig = figure4([prof, dict(prof, dtype="bf16")])
    assert len(fig.data) == 3  # ceiling + two profiles
    assert fig.data[0].line.dash == "dash" and list(fig.data[0].y) == [1.3, 1.8, 2.2]
    assert list(fig.data[1].x) == [1, 4]  # None speed-ups left out
    out = write_figure(fig, tmp_path / "fig4.html")
    assert Path(out["html"]).read_text().count("plotly") > 0
    with pytest.raises(ValueError):
        figure4([])


def test_rescore_with_measured_curve(tmp_path):
    from rvqspec.measure.profile import rescore

    cp = tiny_code_predictor(vocab=64, hidden=64, layers=1)
    r = profile(ProfileConfig(calls=5, warmup=1, sizes=(1, 2, 4)), code_predictor=cp, progress=False)
    curve = {1: 1.2, 2: 1.3, 4: 3.0}
    new = rescore(r, Acceptance(np.asarray(r["acceptance_table"]), curve, "curve"))
    assert new["verify"] == r["verify"] and new["ar"] == r["ar"]      # latencies kept
    for n, t in curve.items():
        assert new["speedup"][str(n)] == pytest.approx(t / (1 + r["overhead"][str(n)]))
    assert new["acceptance_source"] == "curve" and "rescored" in new


def test_load_bench_acceptance_output(tmp_path):
    """`rvqspec bench acceptance --json` layout: one drafter's curve averaged over languages."""
    d = {"drafters": {
        "reused": {"acceptance": {"acc": [[0.3, 0.1]]}, "by_language": {"en": {"4": {"tokens_per_call": 1.2}}}},
        "offsets": {"acceptance": {"acc": [[0.6, 0.2], [0.5, 0.1]]},
                    "by_language": {"en": {"4": {"tokens_per_call": 1.8}, "16": {"tokens_per_call": 2.0}},
                                    "de": {"4": {"tokens_per_call": 2.0}, "16": {"tokens_per_call": 2.2}}}}}}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(d))
    a = load_acceptance(p)
    assert a.curve == {4: pytest.approx(1.9), 16: pytest.approx(2.1)} and a.table.shape == (2, 2)
    assert "offsets" in a.source
    assert load_acceptance(p, drafter="reused").curve == {4: 1.2}
    with pytest.raises(ProfileError, match="no drafter 'medusa'"):
        load_acceptance(p, drafter="medusa")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_cli_unavailable_backend_exits_nonzero(tmp_path):
    """`profile --backend torch-cuda` without CUDA exited 0 and wrote nothing: the runbook's next
    step then failed on a missing file. It exits 2 with one error line and writes no --out."""
    from rvqspec.cli import app

    out = tmp_path / "profile.json"
    res = CliRunner().invoke(app, ["profile", "--backend", "torch-cuda", "--dtype", "bf16", "--calls", "1",
                                   "--warmup", "0", "--budget", "1", "--out", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert res.output.strip().splitlines() == ["error: backend torch-cuda is not available here: torch-cuda: "
                                               "torch.cuda.is_available() is False on this machine"]


def test_grow_tree_and_profile_report_the_same_tokens_per_call(tmp_path):
    """One name per quantity: grow-tree printed Medusa's expected_length as the runbook's 'expected
    tokens per call' (2.087) where profile reports 15 / calls per frame (1.896) for the same table and
    N. grow-tree now prints tokens_per_call, equal to profile's; expected_length stays larger."""
    from rvqspec.cli import app
    from rvqspec.core.tree import SparseTree
    from rvqspec.measure.profile import load_acceptance

    counts = np.array([[4513, 1207, 611, 297], [3491, 1003, 497, 203], [2999, 811, 397, 199]])  # (K, R)
    totals = np.array([10007, 9973, 9967])  # not round: 'acc' (rounded to 6 places) differs from counts / totals
    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps({"acc": (counts / totals[:, None]).round(6).tolist(), "counts": counts.tolist(),
                                "totals": totals.tolist()}))
    res = CliRunner().invoke(app, ["spec", "grow-tree", "--acceptance", str(path), "--budget", "8",
                                   "--out", str(tmp_path / "tree.json")])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    source = load_acceptance(path, 3)
    tpc, kind = source.tokens_per_call(SparseTree.load(tmp_path / "tree.json"))
    assert kind == "table" and printed["tokens_per_call"] == pytest.approx(tpc, abs=1e-12)
    assert 1.0 < printed["tokens_per_call"] < printed["expected_length"]
