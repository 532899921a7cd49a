"""SPADE's pruning ratios and ablations with intervals (seed 001 Tables 1-2 and its ablation study).

One run, on one teacher, with one evaluation set (held-out English texts x seeds, the same clips for
every variant so comparisons are paired):

* pruning ratios: keep `keep_count(L, r)` layers for r in `RATIOS` (75%, 50%, 37.5%; rounded half
  up, the count is stated per row), each selected by WLI and distilled with the full multi-level
  loss (skew KL on c0 logits, latent, attention, embedding; dynamic targets);
* ablations at 50%: each distillation term removed in turn (its weight set to 0), supervised
  fine-tuning only (no KD part), index-matched targets, cosine and random importance instead of
  WLI, and no distillation at all (the pruned copy);
* per variant: WER/CER and the paired bootstrap 95% interval of the difference to the teacher
  (`rvqspec.measure.stats.paired_rate_difference`, resampling texts), and for the distilled ones
  the training data used as a share of the teacher's (`data_share`);
* optionally (`steps_sweep`), the 50% student distilled for longer: the same recipe at other step
  counts, to show how much of the gap to the teacher is the distillation budget;
* the talker / inner-loop frame time of the teacher and of each ratio's student, measured
  interleaved (`rvqspec.spade.evaluate.timing_benchmark`), as ratios to the teacher.

Students are cached under the runs folder by their recipe (`experiment.make_student`), so a variant
whose recipe equals another's (37.5% and 50% of a 4-layer talker both keep 2) is distilled once.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from rvqspec.core.checkpoint import load_qwen3_tts, model_hash
from rvqspec.core.jsonfile import portable_path
from rvqspec.measure.stats import paired_rate_difference
from rvqspec.mini.pipeline import MiniTTS, default_data_dir
from rvqspec.real.asr import load_recognizer
from rvqspec.spade.distill import VALIDATION_UTTERANCES, DistillConfig
from rvqspec.spade.evaluate import (EvalConfig, evaluate_models, fingerprint, speedup_text, timing_benchmark,
                                    write_json)
from rvqspec.spade.experiment import make_student
from rvqspec.spade.importance import ImportanceConfig, heldout_texts, layer_importance, select_by

RATIOS = (0.75, 0.5, 0.375)     # shares of the teacher's layers kept (the three; seed 001 uses 0.5)
TERMS = ("logit", "latent", "attn", "emb")  # the KD terms of `distill.kd_terms`, each removable
# the DistillConfig fields that name a student's recipe in a study row (`recipe_of`)
RECIPE_FIELDS = ("targets", "kd_weight", *(f"w_{t}" for t in TERMS), "w_cp", "steps", "lr", "seed")


def keep_count(num_layers: int, ratio: float) -> int:
    """Layers kept at `ratio` of `num_layers`: rounded half up (37.5% of 4 = 1.5 -> 2), at least 1."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"pruning ratio must be in (0, 1], got {ratio}")
    return max(1, min(num_layers, math.floor(num_layers * ratio + 0.5)))


def ratio_name(ratio: float) -> str:
    return f"keep_{100 * ratio:g}%"


def teacher_training_data(manifest: dict) -> dict:
    """What the teacher was trained on, from the mini world's build record (data/mini/manifest.json,
    steps.model): the frames of its training splits, and an upper bound of the frames it processed
    (steps x utterances per batch x min(mean utterance frames, crop)) since E[min(X, c)] <= min(E[X], c)."""
    try:
        cfg = manifest["steps"]["model"]["config"]
        splits = manifest["steps"]["corpus"]["result"]["splits"]
    except (KeyError, TypeError):
        raise ValueError("manifest: keys steps.model.config and steps.corpus.result.splits are needed "
                         "(the mini world's build record)") from None
    frames = samples = 0
    for split in cfg["train_splits"]:
        if split not in splits:
            raise ValueError(f"manifest: training split {split!r} is not in steps.corpus.result.splits")
        for lang in splits[split].values():
            frames += int(lang["frames"])
            samples += int(lang.get("samples", 0))
    mean = frames / samples if samples else float(cfg["max_frames"])
    bound = int(cfg["steps"]) * int(cfg["batch_utterances"]) * min(mean, float(cfg["max_frames"]))
    return dict(train_splits=list(cfg["train_splits"]), train_set_frames=frames, train_set_utterances=samples,
                steps=int(cfg["steps"]), batch_utterances=int(cfg["batch_utterances"]),
                max_frames=int(cfg["max_frames"]), frames_processed_upper_bound=bound)


def data_share(distill_frames: int, teacher: dict) -> dict:
    """Distillation data as a share of the teacher's: frames distilled on / frames of the teacher's
    training set, and / the teacher's processed frames (a lower bound: the denominator is an upper one)."""
    return dict(distill_frames=int(distill_frames), teacher_train_set_frames=teacher["train_set_frames"],
                share_of_train_set=distill_frames / teacher["train_set_frames"],
                share_of_teacher_frames_processed_at_least=distill_frames / teacher["frames_processed_upper_bound"])


@dataclass(frozen=True)
class AblationConfig:
    ratios: tuple[float, ...] = RATIOS
    ablation_ratio: float = 0.5
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(texts=40, seeds=(0, 1), timing_texts=4))
    bootstrap: int = 2000           # paired resamples of texts per interval
    bootstrap_seed: int = 0
    validation_utterances: int = VALIDATION_UTTERANCES  # distillation's before/after validation losses (students' metrics)
    ablations: bool = True          # False: the ratio rows (and any steps sweep) only
    steps_sweep: tuple[int, ...] = ()  # extra step counts of the full recipe at `ablation_ratio` (group "steps")

    @classmethod
    def quick(cls) -> "AblationConfig":
        """Seconds-to-minutes scale for tests and a smoke run: every variant, tiny samples."""
        return cls(importance=ImportanceConfig(wli_texts=2, wli_seeds=(0,), cosine_utterances=4, bootstrap=50),
                   distill=DistillConfig(steps=2, batch_utterances=2, warmup_steps=1, cp_frames=16),
                   eval=EvalConfig(texts=3, seeds=(0,), timing_texts=1, timing_reps=1), bootstrap=100,
                   validation_utterances=4)


def plan(importance: dict, num_layers: int, cfg: AblationConfig) -> dict[str, dict]:
    """The variants: name -> dict(keep, distill (a DistillConfig or None), selection, ratio, group)."""
    full = replace(cfg.distill, targets="dynamic")
    out: dict[str, dict] = {}
    for r in cfg.ratios:
        depth = keep_count(num_layers, r)
        out[ratio_name(r)] = dict(keep=select_by("wli", importance, depth), distill=full, selection="wli", ratio=r,
                                  group="ratio")
    depth = keep_count(num_layers, cfg.ablation_ratio)
    wli_keep = select_by("wli", importance, depth)
    for n in cfg.steps_sweep:
        if n < 1:
            raise ValueError(f"steps_sweep: step counts must be >= 1, got {n}")
        out[f"{ratio_name(cfg.ablation_ratio)}_{n}_steps"] = dict(
            keep=wli_keep, distill=replace(full, steps=n), selection="wli", ratio=cfg.ablation_ratio, group="steps")
    if not cfg.ablations:
        return out
    ab = dict(ratio=cfg.ablation_ratio, group="ablation")
    for t in TERMS:
        out[f"no_{t}"] = dict(keep=wli_keep, distill=replace(full, **{f"w_{t}": 0.0}), selection="wli", **ab)
    out["no_kd"] = dict(keep=wli_keep, distill=replace(full, kd_weight=0.0), selection="wli", **ab)
    out["index_targets"] = dict(keep=wli_keep, distill=replace(full, targets="index"), selection="wli", **ab)
    for crit in ("cosine", "random"):
        out[f"{crit}_importance"] = dict(keep=select_by(crit, importance, depth), distill=full, selection=crit, **ab)
    out["no_distillation"] = dict(keep=wli_keep, distill=None, selection="wli", **ab)
    return out


def _recipe_dir(runs: Path, v: dict) -> Path:
    """One folder per recipe, so equal recipes share a student (and its distillation)."""
    key = json.dumps(dict(keep=v["keep"], distill=asdict(v["distill"]) if v["distill"] else None), sort_keys=True)
    return runs / "students" / f"keep{'-'.join(map(str, v['keep']))}_{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _link(link: Path, target: Path) -> None:
    """runs/.../variants/<name> -> the recipe's student folder (a stable name for `spade combined`)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.tmp-link")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)
    os.replace(tmp, link)


def run_ablation(data_dir: str | Path | None = None, runs_dir: str | Path = "runs/spade/ablation",
                 config: AblationConfig = AblationConfig(), progress: bool = True, fresh: bool = False) -> dict:
    """The whole table (see the module docstring); returns the JSON-ready result."""
    c = config
    torch.set_num_threads(c.distill.threads)
    data = Path(data_dir or default_data_dir())
    corpus, teacher_dir, rec_dir = data / "corpus", data / "model", data / "recognizer"
    manifest_path = data / "manifest.json"
    if not manifest_path.is_file():
        raise ValueError(f"{manifest_path}: no build record (the teacher's training data is read from it)")
    teacher_data = teacher_training_data(json.loads(manifest_path.read_text()))
    runs = Path(runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    teacher = load_qwen3_tts(teacher_dir)
    L = teacher.talker.config.num_hidden_layers
    teacher_hash = model_hash(teacher.talker)

    # 1. importance (cached by teacher, recognizer and config)
    imp_path = runs / "importance.json"
    want = dict(teacher_hash=teacher_hash, recognizer=fingerprint(rec_dir),
                config=json.loads(json.dumps(asdict(c.importance))), depth=keep_count(L, c.ablation_ratio))
    imp = json.loads(imp_path.read_text()) if imp_path.exists() and not fresh else {}
    if any(imp.get(k) != v for k, v in want.items()):
        tts = MiniTTS.load(data)
        imp = layer_importance(tts, corpus, load_recognizer(rec_dir), c.importance, want["depth"], progress)
        imp.update(want)
        write_json(imp, imp_path)

    # 2. students
    variants = plan(imp, L, c)
    students = {}
    for name, v in variants.items():
        d = _recipe_dir(runs, v)
        students[name] = dict(make_student(name, teacher, v["keep"], v["distill"], corpus, d, teacher_dir, fresh,
                                           v["selection"], c.validation_utterances), dir=d)
        _link(runs / "variants" / name, d)

    # 3. WER/CER of every variant on the same texts x seeds (no timing here: see 4)
    first = {}  # student folder -> the first variant that uses it (equal recipes are scored once)
    for name, s in students.items():
        first.setdefault(str(s["dir"]), name)
    models = {"teacher": teacher_dir, **{name: Path(d) for d, name in first.items()}}
    ev = evaluate_models(models, corpus, rec_dir, replace(c.eval, timing_texts=0), data_dir=data,
                         progress=progress, cache_dir=runs / "eval_cache")
    scored = {r["model"]: r for r in ev["rows"]}
    by_name = {"teacher": scored["teacher"], **{n: scored[first[str(s["dir"])]] for n, s in students.items()}}
    ref = by_name["teacher"]["clips"]

    # 4. talker / inner-loop time of the teacher and each distinct ratio student, interleaved
    timing = {}
    if c.eval.timing_texts > 0:
        texts = heldout_texts(corpus, c.eval.split, c.eval.language, c.eval.timing_texts)
        pipes = {"teacher": (MiniTTS.load(data, model_dir=teacher_dir), None)}
        for name, v in variants.items():
            if v["group"] == "ratio":
                pipes.setdefault(str(students[name]["dir"]), (MiniTTS.load(data, model_dir=students[name]["dir"]), None))
        raw = timing_benchmark(pipes, texts, c.eval.language, c.eval.timing_reps, progress=progress)
        timing = {("teacher" if k == "teacher" else portable_path(k)): t for k, t in raw.items()}

    rows = []
    for name in ["teacher", *variants]:
        r = by_name[name]
        v = variants.get(name, dict(keep=list(range(L)), distill=None, selection="-", ratio=1.0, group="teacher"))
        s = students.get(name, {})
        row = dict(name=name, group=v["group"], ratio=v["ratio"], layers=len(v["keep"]), keep=v["keep"],
                   selection=v["selection"], distilled=v["distill"] is not None,
                   targets=s.get("targets"), wer=r["wer"], cer=r["cer"], clips=r["n"],
                   params=r["params"]["total"], talker_layer_params=r["params"]["talker_layer_params"])
        if v["distill"] is not None:
            d = v["distill"]
            row["recipe"] = recipe_of(asdict(d))
            frames = (s.get("metrics") or {}).get("frames")
            if frames is not None:
                row["data"] = data_share(frames, teacher_data)
        if name != "teacher":
            row.update(paired_rate_difference(ref, r["clips"], c.bootstrap, c.bootstrap_seed))
        t = timing.get("teacher" if name == "teacher" else portable_path(s.get("dir")))
        if t is not None:
            row["timing"] = dict(t, talker_speedup=timing["teacher"]["talker_ms_per_frame"] / t["talker_ms_per_frame"],
                                 frame_speedup=timing["teacher"]["ms_per_frame"] / t["ms_per_frame"])
        row["dir"] = portable_path(s.get("dir")) if s else portable_path(teacher_dir)
        rows.append(row)
    return dict(teacher_layers=L, teacher_dir=portable_path(teacher_dir), teacher_training=teacher_data,
                eval=dict(split=c.eval.split, language=c.eval.language, texts=ev["texts"], seeds=list(c.eval.seeds)),
                importance=dict(keep=imp["keep"], bootstrap=imp.get("bootstrap"),
                                wli=[dict(layer=x["layer"], d_wer=x["d_wer"], d_cer=x["d_cer"]) for x in imp["wli"]["layers"]],
                                cosine=imp["cosine"]["scores"], random=imp["random"]["scores"]),
                rows=rows, config=json.loads(json.dumps(asdict(c), default=str)),
                recognizer=ev["recognizer"])


def _ci(row: dict, m: str) -> str:
    if f"{m}_diff" not in row:
        return "-"
    lo, hi = row[f"{m}_diff_ci95"]
    return f"{100 * row[f'{m}_diff']:+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}]"


def recipe_of(config: dict) -> dict:
    """A study row's `recipe`: the RECIPE_FIELDS of a distillation config (as `asdict` or a student's
    spade.json gives it), DistillConfig's default where a field is missing."""
    default = asdict(DistillConfig())
    return {k: config.get(k, default[k]) for k in RECIPE_FIELDS}


def rows_from_evaluation(result: dict, group: str = "recipe") -> list[dict]:
    """The distilled students of a `spade evaluate --against` result as study rows (the fields
    `markdown`, `ablation_figure` and the report read), in `group`; their recipe comes from each
    student's spade.json (`evaluate.distillation_of`). Rows without a paired difference or without a
    recipe (the teacher, an undistilled copy) are left out."""
    rows = [r for r in result["rows"] if r.get("distillation") and "wer_diff" in r]
    most = max((r["params"]["talker_layers"] for r in result["rows"]), default=1)
    out = []
    for r in rows:
        d, c = r["distillation"], r["distillation"].get("config", {})
        layers = r["params"]["talker_layers"]
        out.append(dict(name=r["model"], group=group, ratio=layers / most, layers=layers, keep=d["keep_layers"],
                        selection=d.get("selection", "-"), distilled=True, targets=d.get("targets"),
                        recipe=recipe_of(c),
                        wer=r["wer"], cer=r["cer"], clips=r["n"],
                        **{k: r[k] for k in ("wer_diff", "wer_diff_ci95", "cer_diff", "cer_diff_ci95")}))
    return out


def markdown(result: dict) -> str:
    """The ratio table and the ablation table (differences to the teacher in points, paired 95% CI)."""
    e = result["eval"]
    lines = [f"Teacher: {result['teacher_layers']} talker layers; evaluation on {e['texts']} `{e['split']}`-split "
             f"{e['language']} texts x seeds {e['seeds']} (the same clips for every row; intervals: paired bootstrap "
             f"over texts, {result['config']['bootstrap']} resamples).", ""]
    head = ("| variant | layers (kept) | selection | distillation | WER % | CER % | dWER pts [95% CI] "
            "| dCER pts [95% CI] | data (share of teacher's train set) | talker speed-up | frame speed-up |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    at = f"{100 * result['config']['ablation_ratio']:g}% of the layers"
    for group, title in (("ratio", "Pruning ratios (WLI selection, full loss, dynamic targets)"),
                         ("steps", f"Distillation length at {at} (the full recipe, more steps)"),
                         ("ablation", f"Ablations at {at}")):
        if not any(r["group"] == group for r in result["rows"]):
            continue
        lines += [f"## {title}", "", head]
        for r in result["rows"]:
            base = group == "steps" and r["group"] == "ratio" and r["ratio"] == result["config"]["ablation_ratio"]
            if r["group"] not in (group, "teacher") and not base:
                continue
            rec = r.get("recipe")
            how = ("none" if not r["distilled"] else
                   f"{rec['targets']}, kd {rec['kd_weight']:g}, "
                   + "/".join(f"{t} {rec['w_' + t]:g}" for t in TERMS) + f", {rec['steps']} steps")
            if r["group"] == "teacher":
                how = "(teacher)"
            data = f"{100 * r['data']['share_of_train_set']:.2f}%" if r.get("data") else "-"
            t = r.get("timing")
            sp = (speedup_text(t["talker_speedup"]), speedup_text(t["frame_speedup"])) if t else ("-", "-")
            lines.append(f"| {r['name']} | {r['layers']} {r['keep']} | {r['selection']} | {how} | {100 * r['wer']:.2f} "
                         f"| {100 * r['cer']:.2f} | {_ci(r, 'wer')} | {_ci(r, 'cer')} | {data} | {sp[0]} | {sp[1]} |")
        lines.append("")
    lines.append("Speed-ups are the teacher's ms per frame over the variant's, measured interleaved in one run "
                 "(below 1 is a slowdown); ablation and distillation-length rows share the 50% row's architecture and speed.")
    return "\n".join(lines) + "\n"


def ablation_figure(result: dict) -> go.Figure:
    """The study at a glance: per variant, the WER and CER difference to the teacher (points) with
    the paired 95% interval as error bars, variants grouped as in the tables (ratios, distillation
    length, other recipes (`rows_from_evaluation`), ablations); a dashed line at +2 WER points (the issue's parity margin)."""
    rows = [r for g in ("ratio", "steps", "recipe", "ablation") for r in result["rows"] if r["group"] == g]
    names = [r["name"] for r in rows]
    color = {"ratio": "#1f77b4", "steps": "#2ca02c", "recipe": "#9467bd"}
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("WER - teacher (points)", "CER - teacher (points)"))
    for col, m in ((1, "wer"), (2, "cer")):
        x = [100 * r[f"{m}_diff"] for r in rows]
        lo = [100 * (r[f"{m}_diff"] - r[f"{m}_diff_ci95"][0]) for r in rows]
        hi = [100 * (r[f"{m}_diff_ci95"][1] - r[f"{m}_diff"]) for r in rows]
        fig.add_scatter(x=x, y=names, mode="markers", name=m.upper(), row=1, col=col,
                        error_x=dict(type="data", symmetric=False, array=hi, arrayminus=lo),
                        marker=dict(color=[color.get(r["group"], "#d62728") for r in rows]),
                        hovertext=[f"{r['layers']} layers {r['keep']}, {r['selection']}" for r in rows])
        fig.add_vline(x=0, line=dict(color="grey", width=1), row=1, col=col)
    fig.add_vline(x=2, line=dict(color="black", dash="dash", width=1), row=1, col=1)
    t = next(r for r in result["rows"] if r["group"] == "teacher")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=160 + 26 * len(rows), showlegend=False, margin=dict(t=110),
                      title=dict(font=dict(size=14),
                                 text=f"SPADE variants against the {result['teacher_layers']}-layer teacher (WER "
                                      f"{100 * t['wer']:.1f}%, CER {100 * t['cer']:.1f}%), paired 95% CI<br><sup>blue: "
                                      f"ratios, green: longer distillation, purple: other recipes, red: ablations at "
                                      f"{100 * result['config']['ablation_ratio']:g}%; dashed: +2 WER points</sup>"))
    return fig
