"""Pruned talker + speculative code predictor (rvqspec.spade.combined, `rvqspec spade combined`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.spade.combined import PIPELINES, projection_from_acceptance

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "data" / "mini"
# a `spade all` projection with tree timings at N = 16 and 32 (the v3 run; random full-size weights)
TIMINGS = json.loads((ROOT / "docs" / "measurements" / "world_v3" / "committed" / "spade" / "results.json").read_text())["projection"]


def _acceptance(tpc: dict[int, float], drafter="offsets"):
    return dict(drafters={drafter: dict(by_language={
        "en": {str(n): dict(tokens_per_call=v - 0.1) for n, v in tpc.items()},
        "de": {str(n): dict(tokens_per_call=v + 0.1) for n, v in tpc.items()}})})


def test_projection_from_acceptance_uses_the_mean_over_languages_per_tree_size():
    out = projection_from_acceptance(TIMINGS, _acceptance({16: 2.0, 32: 3.0, 7: 9.0}))
    assert out["acceptance"]["used_nodes"] == [16, 32]  # N=7 has no timing: left out, not guessed
    cp = TIMINGS["code_predictor"]
    spec = [v for v in out["variants"] if v["inner"] != "AR"]
    assert len(spec) == 2 * len(TIMINGS["talker"])
    for v in spec:
        k = 2.0 if v["tree_nodes"] == 16 else 3.0
        assert v["calls_per_frame"] == pytest.approx(15.0 / k)
        want = cp["prefill_call_ms"] + (15.0 / k - 1.0) * cp["tree_call_ms_by_nodes"][str(v["tree_nodes"])]
        assert v["inner_ms"] == pytest.approx(want)
    # more tokens per call never makes the projected frame slower (same timings, same N)
    lo = projection_from_acceptance(TIMINGS, _acceptance({16: 1.1}))
    hi = projection_from_acceptance(TIMINGS, _acceptance({16: 2.5}))
    f = lambda o: [v["frame_ms"] for v in o["variants"] if v["inner"] != "AR"]  # noqa: E731
    assert all(b < a for a, b in zip(f(lo), f(hi)))


@pytest.mark.parametrize("acc, timings, msg", [
    (_acceptance({16: 2.0}, "medusa"), TIMINGS, "no drafter 'offsets'"),
    (_acceptance({5: 2.0}), TIMINGS, "no tree size in both"),
    (_acceptance({16: 2.0}), {"talker": {}}, "code_predictor"),
])
def test_projection_from_acceptance_rejects_bad_input(acc, timings, msg):
    with pytest.raises(ValueError, match=msg):
        projection_from_acceptance(timings, acc, "offsets")


def test_combined_cli_bad_input_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["spade", "combined", "--student", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "nope" in r.output and "Traceback" not in r.output
    bad = tmp_path / "acc.json"
    bad.write_text("{not json")
    r = CliRunner().invoke(app, ["spade", "combined", "--student", str(MINI / "model"), "--acceptance", str(bad)])
    assert r.exit_code == 2 and "acc.json" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_combined_run_on_a_pruned_checkpoint(tmp_path):
    import rvqspec
    from rvqspec.spade.distill import save_student, student_code_predictor
    from rvqspec.spade.prune import prune_talker

    teacher = rvqspec.load_qwen3_tts(MINI / "model")
    student = prune_talker(teacher.talker, [1, 2])
    sdir = save_student(student, student_code_predictor(teacher.code_predictor, student), teacher.config,
                        tmp_path / "pruned", MINI / "model", {})
    out = tmp_path / "combined.json"
    r = CliRunner().invoke(app, ["spade", "combined", "--student", str(sdir), "--texts", "1", "--reps", "1",
                                 "--acceptance", str(MINI / "bench" / "acceptance.json"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    rows = {row["name"]: row for row in res["rows"]}
    assert list(rows) == list(PIPELINES)
    assert rows["teacher / AR"]["speedup_vs_teacher_ar"] == 1.0
    assert rows["teacher / AR"]["talker_layers"] == teacher.config.talker.num_hidden_layers
    assert rows["pruned / speculative"]["talker_layers"] == 2
    for row in rows.values():  # the split adds up, every pipeline saw the same frames
        assert row["ms_per_frame"] == pytest.approx(row["talker_ms_per_frame"] + row["inner_ms_per_frame"])
        assert row["frames"] == rows["teacher / AR"]["frames"]
    assert res["projection"]["acceptance"]["drafter"] == "offsets"
    assert "/work/" not in json.dumps(res) and str(tmp_path) not in res["speculative"]["drafter"]


def test_committed_combined_run_is_consistent():
    """data/spade/combined.json (the 50% student of data/spade/ablation.json with Medusa): the
    speed-ups are the teacher-AR frame time over each row's, and the verdict follows from them."""
    res = json.loads((ROOT / "data" / "spade" / "combined.json").read_text())
    rows = {r["name"]: r for r in res["rows"]}
    assert {"teacher / AR", "teacher / speculative", "pruned / AR", "pruned / speculative"} == set(rows)
    assert rows["teacher / AR"]["talker_layers"] == 8 and rows["pruned / speculative"]["talker_layers"] == 4
    base = rows["teacher / AR"]["ms_per_frame"]
    for r in rows.values():
        assert r["speedup_vs_teacher_ar"] == pytest.approx(base / r["ms_per_frame"], rel=1e-6), r["name"]
    assert res["pruned_speculative_beats_teacher_ar"] == (rows["pruned / speculative"]["speedup_vs_teacher_ar"] > 1)


def test_combined_figure_stacks_talker_and_inner_loop_and_names_slowdowns():
    from rvqspec.spade.combined import combined_figure

    res = json.loads((ROOT / "data" / "spade" / "combined.json").read_text())
    talker, inner = combined_figure(res).data
    assert list(talker.x) == [r["name"] for r in res["rows"]]
    for k, r in enumerate(res["rows"]):
        assert talker.y[k] == r["talker_ms_per_frame"] and inner.y[k] == r["inner_ms_per_frame"]
        assert inner.text[k].startswith(f"{r['speedup_vs_teacher_ar']:.2f}x")
        assert ("slowdown" in inner.text[k]) == (r["speedup_vs_teacher_ar"] < 1)


def test_spade_distill_options_reach_the_recipe(monkeypatch, tmp_path):
    """--kd-weight / --cp-kd / --seed / --steps land in the DistillConfig that `distill` runs (the
    distillation itself is replaced: its arithmetic is tests/test_spade.py's)."""
    import importlib

    distill_mod = importlib.import_module("rvqspec.spade.distill")  # the package re-exports a function of that name
    seen = {}

    def fake(talker, cp, keep, corpus, config):
        seen["config"], seen["keep"] = config, keep
        raise RuntimeError("stop after the recipe")

    monkeypatch.setattr(distill_mod, "distill", fake)
    r = CliRunner().invoke(app, ["spade", "distill", "--keep", "0,1,3,6", "--steps", "7", "--kd-weight", "0.75",
                                 "--cp-kd", "0.5", "--seed", "3", "--out-dir", str(tmp_path / "s")])
    assert isinstance(r.exception, RuntimeError), r.output
    c = seen["config"]
    assert seen["keep"] == [0, 1, 3, 6]
    assert (c.steps, c.kd_weight, c.w_cp, c.seed) == (7, 0.75, 0.5, 3)
    assert distill_mod.DistillConfig().w_cp == 0.0  # the seed's recipe stays the default
