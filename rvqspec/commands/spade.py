"""`rvqspec spade ...`: SPADE on the talker (seed 001): importance, prune, distill, evaluate, project.

Every command works on a model dir + corpus + recognizer, defaulting to the mini world in data/mini;
results go to runs/spade/ (ignored) and the small final tables/plots to data/spade/. Defaults of the
recipes live in the config dataclasses (`ImportanceConfig`, `DistillConfig`, `EvalConfig`) and are
only overridden here when an option is given. Heavy imports happen inside the command bodies.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.core.jsonfile import portable_path, read_json

spade_app = typer.Typer(help="SPADE (seed 001): layer importance, pruning and distillation of the talker.",
                        no_args_is_help=True)

RUNS = Path("runs/spade")


def register(app: typer.Typer) -> None:
    app.add_typer(spade_app, name="spade")


def _data(data: Optional[Path]) -> Path:
    from rvqspec.mini.pipeline import default_data_dir

    return data or default_data_dir()


def _overrides(**kw) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def _keep(keep: Optional[str], criterion: Optional[str], importance: Optional[Path], depth: Optional[int],
          num_layers: int) -> tuple[list[int], str]:
    """Layers to keep: an explicit --keep list, or a criterion over a saved importance JSON."""
    from rvqspec.spade.importance import select_by
    from rvqspec.spade.prune import default_depth

    if keep:
        try:
            return [int(x) for x in keep.split(",") if x.strip()], "explicit"
        except ValueError:
            raise typer.BadParameter(f"--keep must be comma-separated layer indices, got {keep!r}")
    if not criterion or not importance:
        raise typer.BadParameter("give --keep 0,3 or --criterion wli|cosine with --importance FILE")
    imp = read_json(importance, ValueError, "no such importance JSON (run `rvqspec spade importance`)")
    for key in ("wli", "cosine"):
        if not isinstance(imp, dict) or key not in imp:
            raise typer.BadParameter(f"{importance}: key {key!r} is missing (keys: "
                                     f"{sorted(imp) if isinstance(imp, dict) else type(imp).__name__})")
    return select_by(criterion, imp, depth or default_depth(num_layers)), criterion


def _echo(obj: dict, as_json: bool, text: str) -> None:
    typer.echo(json.dumps(obj, indent=2, default=float) if as_json else text)


@spade_app.command("importance")
def importance_cmd(
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini)"),
    model_dir: Optional[Path] = opt.model(None, "Model folder (default DATA/model)."),
    corpus: Optional[Path] = typer.Option(None, help="corpus (default DATA/corpus)"),
    recognizer: Optional[Path] = typer.Option(None, help="recognizer (default DATA/recognizer)"),
    texts: Optional[int] = typer.Option(None, help="held-out texts for WLI (ImportanceConfig.wli_texts)"),
    seeds: Optional[int] = typer.Option(None, help="seeds per text (0..N-1)"),
    depth: Optional[int] = typer.Option(None, help="target depth for the selections (default half)"),
    out: Path = opt.out(RUNS / "importance.json", "JSON output."),
    html: Optional[Path] = typer.Option(RUNS / "importance.html", help="plotly HTML of both criteria"),
    threads: int = opt.threads(),
    temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
    greedy: bool = opt.greedy(),
    as_json: bool = opt.as_json(),
) -> None:
    """WLI (skip each layer, WER/CER increase) and cosine importance per talker layer."""
    import dataclasses

    import torch

    from rvqspec.mini.pipeline import MiniTTS
    from rvqspec.real.asr import load_recognizer
    from rvqspec.spade.evaluate import write_json
    from rvqspec.spade.importance import ImportanceConfig, importance_figure, layer_importance

    sampling = opt.sampling(temperature, top_k, top_p, greedy)
    torch.set_num_threads(threads)
    d = _data(data)
    cfg = dataclasses.replace(ImportanceConfig(), **_overrides(
        wli_texts=texts, wli_seeds=tuple(range(seeds)) if seeds else None))
    tts = MiniTTS.load(d, model_dir=model_dir)
    res = layer_importance(tts, corpus or d / "corpus", load_recognizer(recognizer or d / "recognizer"), cfg, depth,
                           sampling=sampling)
    res["model_dir"] = portable_path(model_dir or d / "model")
    res["config"] = dataclasses.asdict(cfg)
    write_json(res, out)
    if html:
        html.parent.mkdir(parents=True, exist_ok=True)
        importance_figure(res).write_html(str(html), include_plotlyjs="cdn")
    w = res["wli"]
    lines = [f"baseline WER {100 * w['baseline']['wer']:.2f}% CER {100 * w['baseline']['cer']:.2f}%"]
    lines += [f"layer {r['layer']}: dWER {100 * r['d_wer']:+.2f} dCER {100 * r['d_cer']:+.2f} "
              f"cosine {res['cosine']['scores'][r['layer']]:.4f}" for r in w["layers"]]
    lines.append(f"keep at depth {res['depth']}: {res['keep']}  -> {out}")
    _echo(res, as_json, "\n".join(lines))


@spade_app.command("prune")
def prune_cmd(
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini)"),
    model_dir: Optional[Path] = opt.model(None, "Teacher model folder (default DATA/model)."),
    keep: Optional[str] = typer.Option(None, help="layers to keep, e.g. 0,3"),
    criterion: Optional[str] = typer.Option(None, help="wli | cosine (with --importance)"),
    importance: Optional[Path] = typer.Option(RUNS / "importance.json", help="importance JSON"),
    depth: Optional[int] = typer.Option(None, help="target depth (default half)"),
    out: Path = opt.out_dir(RUNS / "pruned", "Checkpoint folder for the pruned (undistilled) model."),
    as_json: bool = opt.as_json(),
) -> None:
    """Prune the talker to the kept layers (no distillation) and save it in the official layout."""
    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.spade.distill import save_student, student_code_predictor
    from rvqspec.spade.prune import count_parameters, prune_talker

    teacher_dir = model_dir or _data(data) / "model"
    m = load_qwen3_tts(teacher_dir)
    layers, how = _keep(keep, criterion, importance, depth, m.talker.config.num_hidden_layers)
    student = prune_talker(m.talker, layers)
    info = dict(keep_layers=layers, selection=how, teacher=portable_path(teacher_dir), distilled=False,
                talker_params=count_parameters(student), teacher_talker_params=count_parameters(m.talker))
    save_student(student, student_code_predictor(m.code_predictor, student), m.config, out, teacher_dir, info)
    _echo(dict(info, out=str(out)), as_json, f"kept layers {layers} ({how}) -> {out}")


@spade_app.command("distill")
def distill_cmd(
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini)"),
    model_dir: Optional[Path] = opt.model(None, "Teacher model folder (default DATA/model)."),
    corpus: Optional[Path] = typer.Option(None, help="corpus (default DATA/corpus)"),
    keep: Optional[str] = typer.Option(None, help="layers to keep, e.g. 0,3"),
    criterion: Optional[str] = typer.Option(None, help="wli | cosine (with --importance)"),
    importance: Optional[Path] = typer.Option(RUNS / "importance.json", help="importance JSON"),
    depth: Optional[int] = typer.Option(None, help="target depth (default half)"),
    targets: Optional[str] = typer.Option(None, help="dynamic (seed 001) | index (ablation)"),
    steps: Optional[int] = typer.Option(None, help="DistillConfig.steps"),
    lr: Optional[float] = typer.Option(None, help="DistillConfig.lr"),
    kd_weight: Optional[float] = typer.Option(None, help="DistillConfig.kd_weight (w in (1-w) sup + w kd)"),
    cp_kd: Optional[float] = typer.Option(None, help="DistillConfig.w_cp: weight of the code predictor's "
                                                     "c1..c15 KD term (0, the seed's recipe)"),
    seed: Optional[int] = typer.Option(None, help="DistillConfig.seed (batches and frame draws)"),
    threads: Optional[int] = opt.threads(None, "torch CPU threads (default DistillConfig.threads)."),
    out: Path = opt.out_dir(RUNS / "student", "Student checkpoint folder."),
    as_json: bool = opt.as_json(),
) -> None:
    """Prune and heal the talker by multi-level distillation from the unpruned teacher."""
    import dataclasses

    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.spade.distill import DistillConfig, distill, save_student
    from rvqspec.spade.evaluate import write_json

    d = _data(data)
    teacher_dir = model_dir or d / "model"
    m = load_qwen3_tts(teacher_dir)
    layers, how = _keep(keep, criterion, importance, depth, m.talker.config.num_hidden_layers)
    cfg = dataclasses.replace(DistillConfig(), **_overrides(targets=targets, steps=steps, lr=lr, kd_weight=kd_weight,
                                                            w_cp=cp_kd, seed=seed, threads=threads))
    res = distill(m.talker, m.code_predictor, layers, corpus or d / "corpus", cfg)
    info = dict(res.summary(), selection=how, teacher=portable_path(teacher_dir), distilled=True)
    save_student(res.student, res.code_predictor, m.config, out, teacher_dir, info)
    write_json(dict(info, history=res.history), out.with_name(out.name + ".history.json"))
    s = res.metrics
    _echo(dict(info, out=str(out)), as_json,
          f"kept {layers} ({how}), targets {res.targets} ({cfg.targets}); {s['steps']} steps in {s['seconds']} s; "
          f"loss (mean of first vs last 20 steps) {s['first_mean']['total']:.3f} -> {s['last_mean']['total']:.3f}; validation "
          f"{s['validation_before']} -> {s['validation_after']}; saved {out}")


@spade_app.command("evaluate")
def evaluate_cmd(
    model: list[str] = typer.Option(..., help="NAME=MODEL_DIR (repeatable), e.g. teacher=data/mini/model"),
    spec: Optional[list[str]] = typer.Option(None, help="NAME of a --model to also run with the speculative "
                                                         "code predictor (repeatable)"),
    drafter: Optional[Path] = opt.drafter(None, "Drafter .safetensors (default: zero offsets)."),
    tree: Optional[Path] = opt.tree(None, "Tree JSON (default: a depth-3 chain)."),
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini; codec)"),
    corpus: Optional[Path] = typer.Option(None, help="corpus (default DATA/corpus)"),
    recognizer: Optional[Path] = typer.Option(None, help="recognizer (default DATA/recognizer)"),
    texts: Optional[int] = typer.Option(None, help="English held-out texts (EvalConfig.texts)"),
    seeds: Optional[int] = typer.Option(None, help="seeds per text (0..N-1)"),
    split: Optional[str] = typer.Option(None, help="EvalConfig.split"),
    timing_texts: Optional[int] = typer.Option(None, help="EvalConfig.timing_texts (0: no latency benchmark)"),
    cache: Optional[Path] = typer.Option(RUNS / "eval_cache", help="reuse WER passes cached here (same weights, "
                                                                    "inner loop, texts and config)"),
    against: Optional[str] = typer.Option(None, help="NAME of a --model: every other row gets its WER/CER "
                                                     "difference to it with a paired bootstrap 95% interval"),
    bootstrap: int = typer.Option(2000, help="paired bootstrap resamples (with --against)"),
    threads: int = opt.threads(),
    out: Path = opt.out(RUNS / "results.json", "Results JSON."),
    md: Optional[Path] = typer.Option(None, help="markdown table (default OUT with .md)"),
    html: Optional[Path] = typer.Option(None, help="plotly HTML (default OUT with .html)"),
    temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
    greedy: bool = opt.greedy(),
    as_json: bool = opt.as_json(),
) -> None:
    """WER/CER, parameters, RTF, per-frame latency and memory of each model (AR and speculative)."""
    import dataclasses

    import torch

    from rvqspec.spade.evaluate import (EvalConfig, add_paired_differences, evaluate_models, markdown_table,
                                        results_figure, write_json)

    sampling = opt.sampling(temperature, top_k, top_p, greedy)
    torch.set_num_threads(threads)
    d = _data(data)
    models = {}
    for item in model:
        if "=" not in item:
            raise typer.BadParameter(f"--model must be NAME=MODEL_DIR, got {item!r}")
        name, path = item.split("=", 1)
        models[name] = Path(path)
    if against is not None and against not in models:
        raise typer.BadParameter(f"--against {against!r} is not a --model NAME (names: {sorted(models)})")
    cfg = dataclasses.replace(EvalConfig(), **_overrides(texts=texts, split=split, timing_texts=timing_texts,
                                                          seeds=tuple(range(seeds)) if seeds else None))
    res = evaluate_models(models, corpus or d / "corpus", recognizer or d / "recognizer", cfg, spec or (),
                          drafter, tree, d, cache_dir=cache, sampling=sampling)
    if against is not None:
        add_paired_differences(res["rows"], against, bootstrap)
    write_json(res, out)
    table = markdown_table(res["rows"])
    (md or out.with_suffix(".md")).write_text(table)
    results_figure(res["rows"]).write_html(str(html or out.with_suffix(".html")), include_plotlyjs="cdn")
    _echo({k: v for k, v in res.items()}, as_json, table)


@spade_app.command("project")
def project_cmd(
    preset: str = opt.model("0.6b", "TalkerConfig preset name (random full-size weights)."),
    keep_layers: Optional[int] = typer.Option(None, help="pruned depth (default half)"),
    context: int = typer.Option(300, help="KV cache positions before the timed talker step"),
    tokens_per_call: Optional[list[str]] = typer.Option(None, help="LABEL=TOKENS_PER_CALL of the speculative "
                                                                   "code predictor (repeatable)"),
    results: Optional[Path] = typer.Option(None, help="take tokens/call of the speculative rows of this "
                                                      "`spade evaluate` JSON"),
    tree_nodes: int = typer.Option(8, help="tree nodes per speculative call (q = nodes + 1)"),
    timings: Optional[Path] = typer.Option(None, help="reuse the timings of an earlier projection JSON"),
    reps: int = typer.Option(10, help="Timed repetitions per step."),
    threads: int = opt.threads(),
    out: Path = opt.out(RUNS / "projection.json", "Projection JSON."),
    as_json: bool = opt.as_json(),
) -> None:
    """Full-size projection: talker step (28 vs 14 layers) and code-predictor frame (AR vs speculative)."""
    from rvqspec.core.config import TalkerConfig
    from rvqspec.spade.evaluate import project_full_size, project_variants, projection_table, write_json
    from rvqspec.spade.prune import default_depth

    tpc = {}
    for item in tokens_per_call or []:
        label, _, value = item.partition("=")
        try:
            tpc[label] = float(value)
        except ValueError:
            raise typer.BadParameter(f"--tokens-per-call must be LABEL=FLOAT, got {item!r}")
    if results:
        data = read_json(results, ValueError, "no such `spade evaluate` results JSON")
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise typer.BadParameter(f"{results}: not a `spade evaluate` result (needs a 'rows' list)")
        rows = data["rows"]
        tpc.update({r["model"]: float(r["tokens_per_call"]) for r in rows if r.get("inner") == "speculative"})
    if timings:
        res = project_variants(read_json(timings, ValueError, "no such projection JSON"), tpc)
    else:
        L = TalkerConfig.from_name(preset).num_hidden_layers
        res = project_full_size(preset, keep_layers or default_depth(L), context, tree_nodes, tpc, reps, threads)
    write_json(res, out)
    _echo(res, as_json, projection_table(res))


@spade_app.command("all")
def all_cmd(
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini)"),
    runs: Path = typer.Option(RUNS, help="intermediate artifacts (students, full results)"),
    results: Path = opt.out_dir(Path("data/spade"), "Folder of the small final results (JSON, markdown, HTML)."),
    wli_texts: Optional[int] = typer.Option(None, help="ImportanceConfig.wli_texts"),
    wli_seeds: Optional[int] = typer.Option(None, help="seeds for WLI (0..N-1)"),
    texts: Optional[int] = typer.Option(None, help="EvalConfig.texts"),
    seeds: Optional[int] = typer.Option(None, help="evaluation seeds (0..N-1)"),
    steps: Optional[int] = typer.Option(None, help="DistillConfig.steps"),
    drafter: Optional[Path] = opt.drafter(None, "Drafter (default: found under DATA/drafters)."),
    tree: Optional[Path] = opt.tree(None, "Tree (default: found under DATA/trees)."),
    project: bool = typer.Option(True, help="run the full-size projection"),
    fresh: bool = typer.Option(False, help="recompute everything (default: reuse runs/spade)"),
    as_json: bool = opt.as_json(),
) -> None:
    """The whole study: importance, students (SPADE + ablations), evaluation, projection."""
    import dataclasses

    from rvqspec.spade.experiment import ExperimentConfig, report_markdown, run_experiment

    base = ExperimentConfig()
    cfg = dataclasses.replace(
        base, data_dir=data, runs_dir=runs, results_dir=results, drafter=drafter, tree=tree, project=project,
        fresh=fresh,
        importance=dataclasses.replace(base.importance, **_overrides(
            wli_texts=wli_texts, wli_seeds=tuple(range(wli_seeds)) if wli_seeds else None)),
        eval=dataclasses.replace(base.eval, **_overrides(texts=texts, seeds=tuple(range(seeds)) if seeds else None)),
        distill=dataclasses.replace(base.distill, **_overrides(steps=steps)))
    out = run_experiment(cfg)
    _echo(out, as_json, report_markdown(out))


@spade_app.command("ablate")
def ablate_cmd(
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini)"),
    runs: Path = typer.Option(RUNS / "ablation", help="students, importance and WER caches"),
    quick: bool = typer.Option(False, help="tiny scale (AblationConfig.quick): a smoke run / the tests"),
    ratios: Optional[list[float]] = typer.Option(None, help="shares of the layers kept (repeatable; default "
                                                            "0.75 0.5 0.375)"),
    wli_texts: Optional[int] = typer.Option(None, help="ImportanceConfig.wli_texts"),
    wli_seeds: Optional[int] = typer.Option(None, help="seeds for WLI (0..N-1)"),
    texts: Optional[int] = typer.Option(None, help="evaluation texts (EvalConfig.texts)"),
    seeds: Optional[int] = typer.Option(None, help="evaluation seeds (0..N-1)"),
    steps: Optional[int] = typer.Option(None, help="DistillConfig.steps"),
    sweep_steps: Optional[list[int]] = typer.Option(None, help="also distill the 50% student for this many steps "
                                                               "(repeatable; AblationConfig.steps_sweep)"),
    ablations: bool = typer.Option(True, help="the ablations at 50% (--no-ablations: ratios and sweep only)"),
    timing_texts: Optional[int] = typer.Option(None, help="texts of the interleaved timing (0: none)"),
    bootstrap: Optional[int] = typer.Option(None, help="paired bootstrap resamples"),
    threads: Optional[int] = opt.threads(None, "torch CPU threads (default DistillConfig.threads)."),
    fresh: bool = typer.Option(False, help="recompute importance and students"),
    out: Path = opt.out(RUNS / "ablation.json", "Results JSON (a markdown table is written beside it)."),
    as_json: bool = opt.as_json(),
) -> None:
    """Pruning ratios and ablations at 50% (seed 001): WER/CER with paired 95% intervals against the teacher."""
    import dataclasses

    from rvqspec.spade.ablation import AblationConfig, markdown, run_ablation
    from rvqspec.spade.evaluate import write_json

    if ratios and any(not 0.0 < r <= 1.0 for r in ratios):
        raise typer.BadParameter(f"--ratios must be in (0, 1], got {ratios}")
    if sweep_steps and any(n < 1 for n in sweep_steps):
        raise typer.BadParameter(f"--sweep-steps must be >= 1, got {sweep_steps}")
    base = AblationConfig.quick() if quick else AblationConfig()
    cfg = dataclasses.replace(
        base, ablations=ablations,
        **_overrides(ratios=tuple(ratios) if ratios else None, bootstrap=bootstrap,
                     steps_sweep=tuple(sweep_steps) if sweep_steps else None),
        importance=dataclasses.replace(base.importance, **_overrides(
            wli_texts=wli_texts, wli_seeds=tuple(range(wli_seeds)) if wli_seeds else None)),
        eval=dataclasses.replace(base.eval, **_overrides(texts=texts, timing_texts=timing_texts,
                                                         seeds=tuple(range(seeds)) if seeds else None)),
        distill=dataclasses.replace(base.distill, **_overrides(steps=steps, threads=threads)))
    res = run_ablation(data, runs, cfg, progress=not as_json, fresh=fresh)
    write_json(res, out)
    table = markdown(res)
    md = out.with_suffix(".md")
    from rvqspec.core.jsonfile import atomic_path

    with atomic_path(md) as tmp:
        tmp.write_text(table)
    _echo(res, as_json, table + f"\n-> {out}, {md}")


@spade_app.command("combined")
def combined_cmd(
    student: Path = typer.Option(..., help="Pruned (SPADE) checkpoint folder."),
    model: Optional[Path] = opt.model(None, "Teacher model folder (default DATA/model)."),
    drafter: Optional[Path] = opt.drafter(None, "Drafter .safetensors (default: found under DATA/drafters)."),
    tree: Optional[Path] = opt.tree(None, "Tree JSON (default: found under DATA/trees)."),
    data: Optional[Path] = typer.Option(None, help="mini world dir (default data/mini)"),
    lang: str = opt.lang(),
    texts: int = typer.Option(4, help="held-out texts timed (eval split)"),
    reps: int = typer.Option(3, help="interleaved repetitions (the fastest per text counts)"),
    acceptance: Optional[Path] = typer.Option(None, help="`bench acceptance` JSON: also recompute the full-size "
                                                         "projection with its tokens per call"),
    acceptance_drafter: Optional[str] = typer.Option(None, help="drafter entry of --acceptance (default: the "
                                                                "preferred one present)"),
    timings: Path = typer.Option(Path("data/spade/projection.json"), help="projection timings: a `spade project` "
                                                                          "JSON or a results.json with 'projection'"),
    threads: int = opt.threads(),
    out: Path = opt.out(RUNS / "combined.json", "Results JSON."),
    as_json: bool = opt.as_json(),
) -> None:
    """Pruned talker + speculative code predictor against the teacher with AR, timed interleaved in one run."""
    import torch

    from rvqspec.core.jsonfile import read_json
    from rvqspec.spade.combined import combined_benchmark, projection_from_acceptance
    from rvqspec.spade.evaluate import write_json
    from rvqspec.spade.experiment import find_drafter_and_tree
    from rvqspec.spade.importance import heldout_texts

    torch.set_num_threads(threads)
    d = _data(data)
    for p in (student, model, drafter, tree, acceptance):
        if p is not None and not p.exists():
            raise typer.BadParameter(f"{p}: no such file or folder")
    if texts < 1 or reps < 1:
        raise typer.BadParameter(f"--texts and --reps must be >= 1, got {texts} and {reps}")
    if drafter is None and tree is None:
        drafter, tree = find_drafter_and_tree(d)
    proj = None
    if acceptance is not None:  # cheap input checks before the timed run
        tm = read_json(timings, ValueError, "no such timings JSON")
        tm = tm.get("projection", tm) if isinstance(tm, dict) else tm
        if not isinstance(tm, dict):
            raise typer.BadParameter(f"{timings}: not a projection JSON")
        proj = projection_from_acceptance(tm, read_json(acceptance, ValueError, "no such acceptance JSON"),
                                          acceptance_drafter)
        proj["acceptance"]["file"] = portable_path(acceptance)
        proj["timings_file"] = portable_path(timings)
    res = combined_benchmark(model or d / "model", student, drafter, tree,
                             heldout_texts(d / "corpus", "eval", lang, texts), d, lang, reps)
    res.update(threads=threads, projection=proj)
    write_json(res, out)
    lines = [f"{r['name']}: {r['talker_layers']} layers, RTF {r['rtf']:.3f}, {r['ms_per_frame']:.1f} ms/frame "
             f"(talker {r['talker_ms_per_frame']:.1f} + inner {r['inner_ms_per_frame']:.1f}), "
             f"{r['speedup_vs_teacher_ar']:.2f}x vs teacher / AR" for r in res["rows"]]
    if proj:
        from rvqspec.spade.evaluate import projection_table

        lines += ["", projection_table(proj)]
    _echo(res, as_json, "\n".join(lines) + f"\n-> {out}")
