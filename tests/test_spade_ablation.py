"""SPADE's pruning ratios and ablation table (rvqspec.spade.ablation, `rvqspec spade ablate`)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.measure.stats import paired_rate_difference
from rvqspec.spade.ablation import (RATIOS, TERMS, AblationConfig, data_share, keep_count, markdown, plan, ratio_name,
                                    teacher_training_data)

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "data" / "mini" / "manifest.json"


def test_keep_count_rounds_half_up_and_stays_in_range():
    assert [keep_count(4, r) for r in RATIOS] == [3, 2, 2]
    assert [keep_count(8, r) for r in RATIOS] == [6, 4, 3]
    assert [keep_count(28, r) for r in RATIOS] == [21, 14, 11]
    assert keep_count(24, 0.5) == 12  # seed 001's CosyVoice 2 setting
    assert keep_count(2, 0.1) == 1
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="ratio"):
            keep_count(8, bad)


def _importance(L=8):
    # WLI prefers the odd layers, cosine the first half, random its own permutation
    return dict(wli=dict(layers=[dict(layer=i, d_wer=0.1 * (i % 2) + 0.001 * i, d_cer=0.0) for i in range(L)]),
                cosine=dict(scores=[1.0 - 0.1 * i for i in range(L)]),
                random=dict(scores=[(3 * i) % L / L for i in range(L)]))


def test_plan_has_every_ratio_and_ablation():
    cfg = AblationConfig()
    p = plan(_importance(), 8, cfg)
    assert {n for n, v in p.items() if v["group"] == "ratio"} == {"keep_75%", "keep_50%", "keep_37.5%"}
    assert [len(p[n]["keep"]) for n in ("keep_75%", "keep_50%", "keep_37.5%")] == [6, 4, 3]
    assert p["keep_50%"]["keep"] == [1, 3, 5, 7]
    for t in TERMS:  # each term removed in turn, the others kept at their weight
        d = p[f"no_{t}"]["distill"]
        assert getattr(d, f"w_{t}") == 0.0
        assert all(getattr(d, f"w_{o}") == getattr(cfg.distill, f"w_{o}") for o in TERMS if o != t)
    assert p["no_kd"]["distill"].kd_weight == 0.0
    assert p["index_targets"]["distill"].targets == "index" and p["keep_50%"]["distill"].targets == "dynamic"
    assert p["cosine_importance"]["keep"] == [0, 1, 2, 3]
    assert p["random_importance"]["keep"] != p["keep_50%"]["keep"]
    assert p["no_distillation"]["distill"] is None
    assert all(len(v["keep"]) == 4 for v in p.values() if v["group"] == "ablation")


def test_plan_steps_sweep_and_no_ablations():
    from dataclasses import replace

    cfg = replace(AblationConfig(), ratios=(0.5,), ablations=False, steps_sweep=(1000, 4000))
    p = plan(_importance(), 8, cfg)
    assert list(p) == ["keep_50%", "keep_50%_1000_steps", "keep_50%_4000_steps"]
    for n in (1000, 4000):  # the full recipe at another length, on the 50% row's layers
        v = p[f"keep_50%_{n}_steps"]
        assert v["group"] == "steps" and v["keep"] == p["keep_50%"]["keep"]
        assert v["distill"] == replace(p["keep_50%"]["distill"], steps=n)
    assert "no_logit" in plan(_importance(), 8, replace(cfg, ablations=True))
    with pytest.raises(ValueError, match="steps_sweep"):
        plan(_importance(), 8, replace(cfg, steps_sweep=(0,)))


def test_ablation_figure_has_one_point_per_variant_with_its_interval():
    from rvqspec.spade.ablation import ablation_figure

    res = json.loads((STUDIES[0] / "ablation.json").read_text())
    fig = ablation_figure(res)
    variants = [r for r in res["rows"] if r["group"] != "teacher"]
    wer, cer = fig.data
    assert len(wer.y) == len(cer.y) == len(variants)
    half = next(r for r in variants if r["name"] == "keep_50%")
    k = list(wer.y).index("keep_50%")
    assert wer.x[k] == pytest.approx(100 * half["wer_diff"])
    assert wer.x[k] - wer.error_x.arrayminus[k] == pytest.approx(100 * half["wer_diff_ci95"][0])
    assert cer.x[k] + cer.error_x.array[k] == pytest.approx(100 * half["cer_diff_ci95"][1])


def test_teacher_training_data_from_the_build_record():
    m = json.loads(MANIFEST.read_text())
    t = teacher_training_data(m)
    splits = m["steps"]["corpus"]["result"]["splits"]
    want = sum(x["frames"] for s in m["steps"]["model"]["config"]["train_splits"] for x in splits[s].values())
    assert t["train_set_frames"] == want and want > 0
    assert t["frames_processed_upper_bound"] <= t["steps"] * t["batch_utterances"] * t["max_frames"]
    share = data_share(want // 20, t)
    assert share["share_of_train_set"] == pytest.approx(0.05, rel=1e-3)
    with pytest.raises(ValueError, match="steps.model.config"):
        teacher_training_data({"steps": {}})


def _clips(err_rate, n_texts=30, seeds=(0, 1), seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n_texts):
        words = int(rng.integers(6, 14))
        for s in seeds:
            e = int(rng.binomial(words, err_rate))
            out.append(dict(text=f"t{t}", seed=s, word_errors=e, ref_words=words, char_errors=2 * e,
                            ref_chars=5 * words))
    return out


def test_paired_difference_covers_zero_for_equal_models_and_not_for_a_worse_one():
    teacher = _clips(0.2, seed=0)
    same = paired_rate_difference(teacher, _clips(0.2, seed=0), n=500, seed=0)
    assert same["wer_diff"] == 0.0 and same["wer_diff_ci95"][0] <= 0.0 <= same["wer_diff_ci95"][1]
    worse = paired_rate_difference(teacher, _clips(0.5, seed=1), n=500, seed=0)  # negative control
    assert worse["wer_diff_ci95"][0] > 0.1 and worse["cer_diff_ci95"][0] > 0.1
    with pytest.raises(ValueError, match="not paired"):
        paired_rate_difference(teacher, [dict(c, text="other") for c in teacher], n=10)


def test_evaluate_rows_get_paired_differences_against_a_named_model():
    from rvqspec.spade.evaluate import add_paired_differences

    teacher, worse = _clips(0.2, seed=0), _clips(0.5, seed=1)
    rows = [dict(model="teacher", inner="AR", clips=teacher), dict(model="teacher", inner="speculative", clips=teacher),
            dict(model="student", inner="AR", clips=worse)]
    add_paired_differences(rows, "teacher", n=300)
    assert "wer_diff" not in rows[0]
    assert rows[1]["wer_diff"] == 0.0 and rows[1]["against"] == "teacher"
    assert rows[2] == dict(rows[2], **paired_rate_difference(teacher, worse, 300, 0))
    assert rows[2]["wer_diff_ci95"][0] > 0.1  # negative control: a worse model's interval excludes 0
    with pytest.raises(ValueError, match="no AR row of model 'nobody'"):
        add_paired_differences(rows, "nobody")


def test_evaluate_cli_rejects_an_unknown_against_name_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["spade", "evaluate", "--model", f"a={tmp_path}", "--against", "b"])
    assert r.exit_code == 2 and "--against 'b'" in r.output and "Traceback" not in r.output


def test_markdown_table_shows_intervals_and_data_share():
    res = dict(teacher_layers=4, eval=dict(split="eval", language="en", texts=3, seeds=[0]),
               config=dict(bootstrap=100, ablation_ratio=0.5),
               rows=[dict(name="teacher", group="teacher", layers=4, keep=[0, 1, 2, 3], selection="-", distilled=False,
                          wer=0.1, cer=0.05, timing=dict(talker_speedup=1.0, frame_speedup=1.0)),
                     dict(name="keep_50%", group="ratio", layers=2, keep=[1, 2], selection="wli", distilled=True,
                          recipe=dict(targets="dynamic", kd_weight=0.25, w_logit=1, w_latent=1, w_attn=1, w_emb=1,
                                      steps=200), wer=0.12, cer=0.06, wer_diff=0.02, wer_diff_ci95=[-0.01, 0.05],
                          cer_diff=0.01, cer_diff_ci95=[0.0, 0.02], data=dict(share_of_train_set=0.031),
                          timing=dict(talker_speedup=1.5, frame_speedup=0.9)),
                     dict(name="no_distillation", group="ablation", layers=2, keep=[1, 2], selection="wli",
                          distilled=False, wer=0.3, cer=0.2, wer_diff=0.2, wer_diff_ci95=[0.1, 0.3], cer_diff=0.15,
                          cer_diff_ci95=[0.1, 0.2])])
    md = markdown(res)
    assert "| keep_50% | 2 [1, 2] | wli | dynamic, kd 0.25" in md
    assert "+2.00 [-1.00, +5.00]" in md and "3.10%" in md and "1.50x | 0.90x (slowdown)" in md
    assert "| no_distillation | 2 [1, 2] | wli | none |" in md and "below 1 is a slowdown" in md


def test_ablate_cli_rejects_bad_ratio_in_one_line():
    r = CliRunner().invoke(app, ["spade", "ablate", "--ratios", "1.5"])
    assert r.exit_code == 2
    assert "ratios" in r.output and "Traceback" not in r.output


def test_ablate_cli_rejects_a_bad_sweep_step_in_one_line():
    r = CliRunner().invoke(app, ["spade", "ablate", "--sweep-steps", "0"])
    assert r.exit_code == 2
    assert "sweep-steps" in r.output and "Traceback" not in r.output


def test_ablate_cli_names_a_missing_build_record(tmp_path):
    (tmp_path / "model").mkdir()
    r = CliRunner().invoke(app, ["spade", "ablate", "--quick", "--data", str(tmp_path), "--runs", str(tmp_path / "r"),
                                 "--out", str(tmp_path / "a.json")])
    assert r.exit_code == 2 and "manifest.json" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "a.json").exists()


@pytest.mark.slow
def test_ablate_quick_end_to_end(tmp_path):
    """The whole table at the tiniest scale on the committed mini world: every variant present, each
    with a paired interval against the teacher, data shares, the interleaved timing of the ratio."""
    out = tmp_path / "ablation.json"
    r = CliRunner().invoke(app, ["spade", "ablate", "--quick", "--ratios", "0.5", "--texts", "2", "--runs",
                                 str(tmp_path / "runs"), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    names = [row["name"] for row in res["rows"]]
    assert names == ["teacher", "keep_50%", "no_logit", "no_latent", "no_attn", "no_emb", "no_kd", "index_targets",
                     "cosine_importance", "random_importance", "no_distillation"]
    teacher_layers = json.loads((ROOT / "data" / "mini" / "model" / "config.json").read_text())[
        "talker_config"]["num_hidden_layers"]
    for row in res["rows"][1:]:
        lo, hi = row["wer_diff_ci95"]
        assert lo <= row["wer_diff"] <= hi and row["layers"] == teacher_layers // 2
        assert (row.get("data") is not None) == row["distilled"]
    ratio = res["rows"][1]
    assert ratio["timing"]["talker_ms_per_frame"] > 0 and ratio["timing"]["talker_speedup"] > 0
    assert res["importance"]["bootstrap"]["wli"]["resamples"] == 50
    assert out.with_suffix(".md").read_text().count("| keep_50% |") == 1


def test_variant_links_point_at_the_recipe_folder_and_can_be_replaced(tmp_path):
    from rvqspec.spade.ablation import _link

    a, b = tmp_path / "students" / "a", tmp_path / "students" / "b"
    a.mkdir(parents=True)
    b.mkdir()
    (b / "config.json").write_text("{}")
    link = tmp_path / "variants" / "keep_50%"
    _link(link, a)
    assert link.resolve() == a.resolve()
    _link(link, b)  # a rerun with another recipe moves the name
    assert link.resolve() == b.resolve() and (link / "config.json").exists()
    assert not link.readlink().is_absolute()  # relative: the runs folder can move
    assert sorted(p.name for p in link.parent.iterdir()) == ["keep_50%"]  # no temporary left behind


# the study on the committed (v4) talker and the one on the v3 talker it replaced
STUDIES = (ROOT / "data" / "spade", ROOT / "docs" / "measurements" / "world_v3" / "committed" / "spade")
V3_STUDY = STUDIES[1]


@pytest.mark.parametrize("study", STUDIES, ids=("v4", "v3"))
def test_committed_ablation_is_the_plan_on_the_committed_teacher(study):
    """ablation.json (`spade ablate` on an 8-layer talker): every variant of the plan, each kept-layer
    set the one its criterion selects, intervals around their own point estimates."""
    res = json.loads((study / "ablation.json").read_text())
    assert res["teacher_dir"] == "data/mini/model" and res["teacher_layers"] == 8
    names = {r["name"]: r for r in res["rows"]}
    assert set(names) == {"teacher", *map(ratio_name, RATIOS), *(f"no_{t}" for t in TERMS), "no_kd", "index_targets",
                          "cosine_importance", "random_importance", "no_distillation"}
    teacher = names["teacher"]
    clips = res["eval"]["texts"] * len(res["eval"]["seeds"])
    keep = res["importance"]["keep"]
    for name, r in names.items():
        assert r["clips"] == clips, name
        if name == "teacher":
            continue
        assert r["layers"] == len(r["keep"]) == keep_count(8, r["ratio"]), name
        assert r["keep"] == (keep[r["selection"]] if r["layers"] == 4 else sorted(r["keep"])), name
        assert r["group"] != "ablation" or r["ratio"] == 0.5, name
        for m in ("wer", "cer"):
            lo, hi = r[f"{m}_diff_ci95"]
            assert r[f"{m}_diff"] == pytest.approx(r[m] - teacher[m]), (name, m)
            assert lo <= r[f"{m}_diff"] <= hi, (name, m)
    # the random control keeps another half than WLI, so the criterion ablation compares something
    # (WLI and cosine may agree: on the v4 talker both keep 0, 1, 2, 7)
    assert keep["random"] != keep["wli"]
    # the markdown table beside it is this JSON's
    table = (study / "ablation.md").read_text()
    assert f"| {100 * names['keep_50%']['wer']:.2f} | {100 * names['keep_50%']['cer']:.2f} |" in table


@pytest.mark.parametrize("study", STUDIES, ids=("v4", "v3"))
def test_committed_distillation_length_run_repeats_the_ablation_row_and_adds_longer_students(study):
    """length.json: the 50% student of ablation.json distilled longer. Its 200-step row is a control:
    the ablation's own recipe, which must read as it did there (same layers, CER within a point; the
    runs share nothing but the committed world)."""
    res = json.loads((study / "length.json").read_text())
    ab = {r["name"]: r for r in json.loads((study / "ablation.json").read_text())["rows"]}
    rows = {r["name"]: r for r in res["rows"]}
    sweep = [r for r in res["rows"] if r["group"] == "steps"]
    assert [r["recipe"]["steps"] for r in sweep] == list(res["config"]["steps_sweep"]) and sweep
    assert rows["keep_50%"]["keep"] == ab["keep_50%"]["keep"] and rows["keep_50%"]["recipe"] == ab["keep_50%"]["recipe"]
    assert abs(rows["keep_50%"]["cer"] - ab["keep_50%"]["cer"]) < 0.01
    assert abs(rows["teacher"]["cer"] - ab["teacher"]["cer"]) < 0.01
    for r in sweep:
        assert r["keep"] == rows["keep_50%"]["keep"]
        assert {k: v for k, v in r["recipe"].items() if k != "steps"} == \
            {k: v for k, v in rows["keep_50%"]["recipe"].items() if k != "steps"}
        assert r["data"]["distill_frames"] > rows["keep_50%"]["data"]["distill_frames"]
        for m in ("wer", "cer"):
            assert r[f"{m}_diff"] == pytest.approx(r[m] - rows["teacher"][m])
            lo, hi = r[f"{m}_diff_ci95"]
            assert lo <= r[f"{m}_diff"] <= hi
    table = (study / "length.md").read_text()
    assert "## Distillation length" in table and all(f"| {r['name']} |" in table for r in sweep)


def test_committed_iterative_run_is_paired_against_its_teacher():
    """iterative.json (v3 talker, `spade evaluate --against teacher`): 8 -> 6 -> 4 layers distilled in
    two stages against the one-shot 50% student at the same first-stage length."""
    res = json.loads((V3_STUDY / "iterative.json").read_text())
    rows = {r["model"]: r for r in res["rows"]}
    assert {"teacher", "oneshot_1000", "iterative_1000_1000", "s6_1000"} == set(rows)
    for name, r in rows.items():
        if name == "teacher":
            assert "wer_diff" not in r
            continue
        assert r["against"] == "teacher"
        assert r == dict(r, **paired_rate_difference(rows["teacher"]["clips"], r["clips"], r["bootstrap"], 0))


def _eval_row(model, layers, wer_diff=None, distillation=None):
    row = dict(name=f"{model} / AR", model=model, wer=0.5, cer=0.2, n=4, params=dict(talker_layers=layers))
    if wer_diff is not None:
        row.update(wer_diff=wer_diff, wer_diff_ci95=[wer_diff - 0.01, wer_diff + 0.01], cer_diff=0.0,
                   cer_diff_ci95=[-0.01, 0.01])
    if distillation is not None:
        row["distillation"] = distillation
    return row


def test_rows_from_evaluation_keeps_distilled_students_with_their_recipe():
    from rvqspec.spade.ablation import ablation_figure, rows_from_evaluation

    made = dict(keep_layers=[0, 1, 3, 6], targets=[0, 2, 5, 7], selection="explicit",
                config=dict(targets="dynamic", kd_weight=0.75, w_cp=1.0, steps=4000, seed=1, lr=1e-3))
    res = dict(rows=[_eval_row("teacher", 8), _eval_row("kd75", 4, 0.02, made),
                     _eval_row("pruned", 4, 0.3)])  # an undistilled copy: no recipe, left out
    rows = rows_from_evaluation(res)
    assert [r["name"] for r in rows] == ["kd75"]
    r = rows[0]
    assert r["group"] == "recipe" and r["ratio"] == 0.5 and r["keep"] == [0, 1, 3, 6] and r["clips"] == 4
    assert (r["recipe"]["kd_weight"], r["recipe"]["w_cp"], r["recipe"]["seed"], r["recipe"]["steps"]) == (0.75, 1.0, 1, 4000)
    assert r["recipe"]["w_logit"] == 1.0  # a key the student's config lacks falls back to DistillConfig's
    # the same recipe as a study row of the plan (`run_study`) names for that DistillConfig
    from dataclasses import asdict, replace

    from rvqspec.spade.ablation import RECIPE_FIELDS, recipe_of
    from rvqspec.spade.distill import DistillConfig
    plan = recipe_of(asdict(replace(DistillConfig(), kd_weight=0.75, w_cp=1.0, steps=4000, seed=1, lr=1e-3)))
    assert r["recipe"] == plan and tuple(plan) == RECIPE_FIELDS
    study = dict(teacher_layers=8, config=dict(ablation_ratio=0.5),
                 rows=[dict(name="teacher", group="teacher", wer=0.5, cer=0.2)] + rows)
    wer, _ = ablation_figure(study).data
    assert list(wer.y) == ["kd75"] and wer.x[0] == pytest.approx(2.0)


def test_distillation_of_reads_a_students_spade_json(tmp_path):
    from rvqspec.spade.evaluate import distillation_of

    assert distillation_of(tmp_path) is None  # the teacher: no spade.json
    (tmp_path / "spade.json").write_text(json.dumps(dict(keep_layers=[0, 3], distilled=False)))
    assert distillation_of(tmp_path) is None  # `spade prune`: a copy, not distilled
    (tmp_path / "spade.json").write_text(json.dumps(dict(keep_layers=[0, 3], distilled=True, steps=5,
                                                         config=dict(kd_weight=0.5), history=[1, 2])))
    assert distillation_of(tmp_path) == dict(keep_layers=[0, 3], steps=5, config=dict(kd_weight=0.5))


def test_committed_recipe_run_is_paired_against_its_teacher():
    """recipe.json (v3 talker, `spade evaluate --against teacher`): the 50% students of other
    distillation recipes, each row's interval recomputable from its clips, its recipe recorded."""
    from rvqspec.spade.ablation import rows_from_evaluation

    res = json.loads((V3_STUDY / "recipe.json").read_text())
    rows = {r["model"]: r for r in res["rows"]}
    assert "teacher" in rows and "wer_diff" not in rows["teacher"]
    students = [r for name, r in rows.items() if name != "teacher"]
    assert students
    for r in students:
        assert r["against"] == "teacher" and r["distillation"]["keep_layers"] == [0, 1, 3, 6]
        assert r == dict(r, **paired_rate_difference(rows["teacher"]["clips"], r["clips"], r["bootstrap"], 0))
    assert [x["name"] for x in rows_from_evaluation(res)] == [r["model"] for r in students]
