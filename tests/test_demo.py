"""The main job's orchestration (rvqspec.workbench.demo): step records, missing modules shown as "not
available", failures recorded (and raised in strict/notebook mode), dependent steps skipped, and
the report re-rendered from results.json by `rvqspec report`. The real steps run in
tests/test_notebooks.py (papermill) and `rvqspec demo --quick`."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from rvqspec.workbench.demo import (NOT_AVAILABLE, Demo, DemoConfig, Step, StepUnavailable, _train_recipe,
                                    notebook_config)
from rvqspec.workbench.report import render_report


def _ok(d):
    return {"acceptance": {"budgets": [2, 4], "curves": {"offsets": [1.2, 1.5]}}, "_step": {"note": "fine"}}


def _missing(d):
    import rvqspec._no_such_module  # noqa: F401  (a module that is not installed)


def _boom(d):
    raise RuntimeError("disk full")


def _unavailable(d):
    raise StepUnavailable("needs a GPU")


def test_step_records_and_dependencies(tmp_path):
    d = Demo(DemoConfig.quick(out=str(tmp_path / "r"), work=str(tmp_path / "w"), threads=1), log=lambda m: None)
    steps = [Step("a", _ok), Step("b", _missing), Step("c", _boom), Step("d", _ok, needs=("b",)),
             Step("e", _unavailable), Step("f", _ok, needs=("a",))]
    res = d.run(steps)
    st = res["steps"]
    assert st["a"]["status"] == "ok" and st["a"]["note"] == "fine"
    assert st["b"]["status"] == NOT_AVAILABLE and "_no_such_module" in st["b"]["note"]
    assert st["c"]["status"] == "failed" and "disk full" in st["c"]["note"]
    assert st["d"]["status"] == NOT_AVAILABLE and "b" in st["d"]["note"]
    assert st["e"]["status"] == NOT_AVAILABLE and st["e"]["note"] == "needs a GPU"
    assert st["f"]["status"] == "ok"
    assert res["acceptance"]["curves"]["offsets"] == [1.2, 1.5]
    assert "RuntimeError" in d.state["tracebacks"]["c"]
    html = render_report(res, tmp_path / "r").read_text()
    for needle in ("disk full", "needs a GPU", "_no_such_module", "fig-acceptance"):
        assert needle in html


def test_strict_steps_raise_and_unknown_names(tmp_path):
    d = Demo(DemoConfig.quick(work=str(tmp_path)), log=lambda m: None)
    with pytest.raises(KeyError, match="unknown step"):
        d.step("nope")
    d.results["steps"] = {}
    with pytest.raises(RuntimeError, match="disk full"):
        d._run_step(Step("c", _boom), strict=True)


def test_configs_keep_defaults_in_one_place():
    q = DemoConfig.quick()
    assert q.mode == "quick" and q.main_drafter in q.drafters and q.default_N in q.budgets
    nb = notebook_config(out_dir="x", n_utterances=12, steps=7)
    assert nb.train_steps == 7 and nb.train_utterances == 12 and nb.work.endswith("work")
    assert nb.shift_train_steps == 7  # the notebooks' `steps` bounds every drafter's training
    full = DemoConfig()
    assert full.main_drafter in full.drafters and full.default_N in full.budgets
    # Medusa's heads start as the frozen heads: the seed's recipe; the shift drafters start at zero
    assert _train_recipe(full, "medusa") == (full.train_steps, 1e-3)
    assert _train_recipe(full, "offsets") == _train_recipe(full, "shared_low_rank") == (full.shift_train_steps,
                                                                                         full.shift_lr)
    assert full.shift_lr > 1e-3
    assert set(full.ab_languages) <= set(full.languages)


def test_report_command_rerenders(tmp_path):
    from rvqspec.cli import app

    res = {"steps": {"x": {"status": "ok", "seconds": 1.0, "note": ""}},
           "languages": [{"language": "en", "ar_wer": 0.1, "spec_wer": 0.1}]}
    (tmp_path / "results.json").write_text(json.dumps(res))
    out = CliRunner().invoke(app, ["report", str(tmp_path / "results.json")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "index.html").is_file() and "table3" in (tmp_path / "index.html").read_text()
    (tmp_path / "bad.json").write_text("{")
    out = CliRunner().invoke(app, ["report", str(tmp_path / "bad.json")])
    assert out.exit_code == 2 and "bad.json: not valid JSON" in out.output


def test_demo_command_explains_a_missing_world(tmp_path):
    from rvqspec.cli import app

    out = CliRunner().invoke(app, ["demo", "--quick", "--data", str(tmp_path), "--out-dir", str(tmp_path / "r")])
    assert out.exit_code == 2
    assert "lacks model, codec, corpus, recognizer" in out.output and "rvqspec mini build" in out.output


def test_spade_step_reads_the_committed_study_and_the_report_shows_it(tmp_path):
    from pathlib import Path

    from rvqspec.workbench.demo import step_spade

    root = Path(__file__).resolve().parents[1]
    # the committed v4 study, with the v3 talker's recipe run beside it (a study folder may hold one)
    study = tmp_path / "spade"
    shutil.copytree(root / "data" / "spade", study)
    shutil.copy(root / "docs" / "measurements" / "world_v3" / "committed" / "spade" / "recipe.json", study)
    out = step_spade(Demo(config=DemoConfig(spade_dir=str(study))))
    committed = json.loads((study / "combined.json").read_text())
    best = next(r for r in committed["rows"] if r["name"] == "pruned / speculative")
    assert f"{best['speedup_vs_teacher_ar']:.2f}x" in out["_step"]["note"]
    assert out["spade"]["source"] == {"ablation": "spade/ablation.json", "combined": "spade/combined.json",
                                      "length": "spade/length.json", "recipe": "spade/recipe.json"}
    recipe = json.loads((study / "recipe.json").read_text())
    students = [r["model"] for r in recipe["rows"] if r.get("distillation")]
    assert students and [r["name"] for r in out["spade"]["ablation"]["rows"] if r["group"] == "recipe"] == students
    length = json.loads((study / "length.json").read_text())
    steps = [r["name"] for r in length["rows"] if r["group"] == "steps"]
    assert steps and [r["name"] for r in out["spade"]["ablation"]["rows"] if r["group"] == "steps"] == steps
    html = render_report({"spade": out["spade"]}, tmp_path / "r").read_text()
    section = html.split("id='spade'")[1].split("</section>")[0]
    assert "fig-spade-ablation" in section and "fig-spade-combined" in section
    assert "spade/ablation.json" in section and "spade/recipe.json" in section
    assert all(f"Recipe {name} (" in section for name in students)
    # the committed folder alone: the optional runs it lacks are not listed
    plain = step_spade(Demo(config=DemoConfig(spade_dir=str(root / "data" / "spade"))))["spade"]["source"]
    assert plain == {k: f"spade/{f}" for k, f in (("ablation", "ablation.json"), ("combined", "combined.json"),
                                                   ("length", "length.json"), ("recipe", "recipe.json"))
                     if (root / "data" / "spade" / f).is_file()}
    with pytest.raises(StepUnavailable, match="no committed SPADE result"):
        step_spade(Demo(config=DemoConfig(spade_dir=str(tmp_path / "none"))))
