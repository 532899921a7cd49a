"""`rvqspec spec extract|train|cast|calibrate|geometry|grow-tree` and `rvqspec bench acceptance|spec` (seed 000).

Frames come from a frames function given as ``module:function`` (``--frames-fn``), called as
``fn(model_dir=Path, split=str, language=str | None, max_utterances=int | None)`` and yielding
``(talker_hidden (T, E), codes (T, 16))`` per utterance (for the mini world: the talker run with
teacher forcing over a corpus split). Heavy imports stay inside the command bodies.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.commands.bench import bench_app
from rvqspec.core.defaults import K
from rvqspec.core.jsonfile import read_json, write_json_atomic


@dataclass(frozen=True)
class SpecCLIDefaults:
    """The one place the spec command defaults live (library defaults are read from their configs)."""

    kind: str = "offsets"
    source: str = "teacher_forced"
    max_rank: int = 16
    budget: int = 16
    max_depth: int = K
    budgets: tuple = (4, 8, 16, 32, 64)
    run_frames: int = 200
    timing_frames: int = 200
    seed: int = 0
    frames_fn: str = "rvqspec.mini.frames:mini_frames"  # the mini world's corpus + teacher-forced talker


_D = SpecCLIDefaults()
spec_app = typer.Typer(help="RVQ position-aware speculative decoding: extraction, drafter training, trees.",
                       no_args_is_help=True)


def _load_cp(model_dir: Path):
    from rvqspec.core.checkpoint import load_qwen3_tts

    return load_qwen3_tts(model_dir, parts=("code_predictor",)).code_predictor


def _frames_fn(spec: Optional[str]):
    import importlib

    if not spec or ":" not in spec:
        raise typer.BadParameter(f"--frames-fn must be 'module:function', got {spec!r}; the function is called "
                                 "fn(model_dir=, split=, language=, max_utterances=) and yields "
                                 "(talker_hidden (T, E), codes (T, 16)) per utterance")
    mod, name = spec.split(":", 1)
    try:
        return getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise typer.BadParameter(f"--frames-fn {spec!r}: {e}") from e


def _check_acceptance(acc, source: Path, drafter_name: str) -> None:
    """A `bench acceptance` result with an entry for `drafter_name`, or an error naming what is missing."""
    if not isinstance(acc, dict) or not isinstance(acc.get("drafters"), dict):
        raise ValueError(f"{source}: not a `bench acceptance` result (needs a 'drafters' object)")
    if drafter_name not in acc["drafters"]:
        raise ValueError(f"{source}: no drafter {drafter_name!r} under 'drafters' (has {sorted(acc['drafters'])}); "
                         f"pick one with --acceptance-drafter")


def _tree_from_acceptance(acc: dict, source: Path, drafter_name: str, budget: int):
    """The budget-N tree of one drafter in a `bench acceptance` result (keys are str after JSON); a
    budget the bench did not sweep (e.g. N = 3, a cheaper call than N = 4 on a compute-bound device)
    is grown from the drafter's recorded acceptance table exactly as the bench grows its own trees."""
    from rvqspec.core.tree import SparseTree, TreeError
    from rvqspec.measure.acceptance import AcceptanceTable

    _check_acceptance(acc, source, drafter_name)
    entry = acc.get("drafters", {}).get(drafter_name)
    if entry is not None and str(budget) in entry["trees"]:
        return SparseTree(entry["trees"][str(budget)])
    if entry is None or "acceptance" not in entry:
        raise typer.BadParameter(f"{source}: no tree for drafter {drafter_name!r} at N={budget} "
                                 "and no acceptance table to grow one from")
    try:
        table = AcceptanceTable.from_json(entry["acceptance"], f"{source}: drafters.{drafter_name}.acceptance")
        # one table row per drafted depth: the drafter's num_offsets, the depth the bench grew with
        return SparseTree.grow(table.acc, budget, max_depth=len(table.totals))
    except (ValueError, TreeError) as e:
        raise typer.BadParameter(f"{source}: drafters.{drafter_name}: cannot grow a tree of N={budget}: {e}") from e


def _emit(result: dict, as_json: bool, out: Optional[Path]) -> None:
    opt.emit(result, as_json, out, opt.summary(result, out))


def register(app: typer.Typer) -> None:
    app.add_typer(spec_app, name="spec")

    @spec_app.command("extract")
    def extract_cmd(
        model_dir: Path = typer.Option(..., "--model", help="Checkpoint folder (official layout)."),
        out: Path = opt.out_dir(..., "Output shard folder (manifest.json + shard_*.safetensors)."),
        frames_fn: str = typer.Option(_D.frames_fn, help="module:function yielding (talker_hidden, codes) per utterance."),
        split: str = typer.Option("train", help="Corpus split passed to the frames function."),
        language: Optional[str] = opt.lang(None, "Language passed to the frames function (default: all)."),
        source: str = typer.Option(_D.source, help="teacher_forced | free_running."),
        max_utterances: Optional[int] = typer.Option(None, help="Cap on utterances."),
        seed: int = typer.Option(_D.seed, help="Generator seed (free-running sampling)."),
        temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
        greedy: bool = opt.greedy(),
    ) -> None:
        """Extract hidden states h_1..h_15 + codes into shards (seed 000 §2.2); free-running sources
        sample c1..c15 with the sampling options."""
        import torch

        from rvqspec.measure.extract import extract

        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        if source not in ("teacher_forced", "free_running"):  # checked before the progress bar starts
            raise typer.BadParameter(f"--source must be teacher_forced or free_running, got {source!r}")
        cp = _load_cp(model_dir)
        utts = _frames_fn(frames_fn)(model_dir=model_dir, split=split, language=language, max_utterances=max_utterances)
        path = extract(cp, utts, out, source=source, sampling=sampling, generator=torch.Generator().manual_seed(seed),
                       extra={"split": split, "language": language})
        typer.echo(str(path))

    @spec_app.command("train")
    def train_cmd(
        model_dir: Path = typer.Option(..., "--model", help="Checkpoint folder (official layout)."),
        shards: Path = typer.Option(..., help="Teacher-forced shard directory."),
        out: Path = opt.out(..., "Output drafter file (.safetensors)."),
        kind: str = typer.Option(_D.kind, help="offsets | per_position | low_rank | shared_low_rank | medusa."),
        epochs: Optional[int] = typer.Option(None, min=1, help="Epochs (default: the drafter's recipe, "
                                                                "rvqspec.measure.train_drafter.recipe_for)."),
        max_steps: Optional[int] = typer.Option(None, help="Stop after this many steps."),
        lr: Optional[float] = typer.Option(None, help="Adam learning rate (default: the drafter's recipe: the "
                                                       "seed's 1e-3 for Medusa, 1e-2 for the shift drafters)."),
        loss_out: Optional[Path] = typer.Option(None, help="Write the loss curve JSON here."),
        threads: int = opt.threads(),
    ) -> None:
        """Train a drafter over the frozen code predictor (Adam, batch 32: seed 000 §2.2). Medusa takes
        the seed's 1e-3 for one epoch; the shift drafters, which start at zero, 1e-2 for 3 epochs
        (docs/design.md, "The offsets' training budget")."""
        from dataclasses import replace

        import torch

        from rvqspec.core.drafters import make_drafter
        from rvqspec.measure.train_drafter import recipe_for, train_drafter

        if lr is not None and not lr > 0:
            raise typer.BadParameter(f"--lr must be > 0, got {lr}")
        torch.set_num_threads(threads)
        cp = _load_cp(model_dir)
        drafter = make_drafter(kind, cp)
        cfg = recipe_for(drafter)
        cfg = replace(cfg, epochs=epochs or cfg.epochs, max_steps=max_steps, lr=lr or cfg.lr)
        d, losses = train_drafter(drafter, cp, shards, cfg)
        d.save(out, cp)
        if loss_out:
            write_json_atomic(loss_out, {"kind": kind, "losses": losses})
        typer.echo(json.dumps({"out": str(out), "kind": kind, "steps": len(losses),
                               "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}))

    @spec_app.command("cast")
    def cast_cmd(
        drafter: Path = opt.drafter(..., "Drafter file to copy (not overwritten)."),
        out: Path = opt.out(..., "The copy (.safetensors; written whole, then renamed)."),
        dtype: str = opt.cast_dtype(),
    ) -> None:
        """Copy a drafter with its tensors stored in another dtype (bfloat16 halves Medusa's heads in
        data/; loading casts back to the drafter's float32 parameters)."""
        from rvqspec.core.drafters import cast_drafter

        cast_drafter(drafter, out, opt.torch_dtype(dtype))  # a DrafterError: one line, exit 2 (cli._Group)
        typer.echo(f"wrote {out}: {out.stat().st_size / 1e6:.1f} MB, tensors in {dtype}")

    @spec_app.command("calibrate")
    def calibrate_cmd(
        model_dir: Path = typer.Option(..., "--model", help="Checkpoint folder (official layout)."),
        shards: Path = typer.Option(..., help="Free-running calibration shard directory."),
        out: Path = opt.out(..., "Acceptance table JSON."),
        drafter: Optional[Path] = opt.drafter(None, "Drafter .safetensors (omit: reused heads)."),
        skip_hash_check: bool = opt.skip_hash_check(),
        max_rank: int = typer.Option(_D.max_rank, help="Ranks per depth in the table."),
    ) -> None:
        """Acceptance statistics acc(depth, rank) on a calibration set."""
        from rvqspec.core.drafters import load_drafter, make_drafter
        from rvqspec.measure.acceptance import acceptance_table
        from rvqspec.measure.extract import ShardDataset

        cp = _load_cp(model_dir)
        d = load_drafter(drafter, cp, check_hash=not skip_hash_check) if drafter else make_drafter("reused", cp)
        ds = ShardDataset(shards, batch_size=256, shuffle=False, code_predictor=cp)
        table = acceptance_table(d, cp, ds, max_rank=max_rank, source=ds.manifest["source"])
        write_json_atomic(out, table.to_json())
        typer.echo(json.dumps({"out": str(out), "acc_top1": table.acc[:, 0].round(4).tolist()}))

    @spec_app.command("geometry")
    def geometry_cmd(
        shards: Path = typer.Option(..., help="Shard directory (`spec extract`; free-running for the deployed states)."),
        out: Optional[Path] = opt.out(),
        as_json: bool = opt.as_json(),
        seed: int = typer.Option(_D.seed, help="Seed of the fit / held-out split of the frames."),
    ) -> None:
        """Can one shared shift carry h_p to h_(p+1)? Position-mean cosines and held-out R^2 of one
        shift and of an affine map per position pair (seed 000 §2.2 (iii); rvqspec.measure.geometry)."""
        from rvqspec.measure.extract import ShardDataset
        from rvqspec.measure.geometry import hidden_geometry

        ds = ShardDataset(shards, batch_size=1024, shuffle=False)  # the split follows the stored order
        geo = hidden_geometry(ds, ds.frames, seed=seed).to_json()
        _emit({"shards": str(shards), "source": ds.manifest["source"], "seed": seed, **geo}, as_json, out)

    @spec_app.command("grow-tree")
    def grow_tree_cmd(
        acceptance: Path = typer.Option(..., help="Acceptance table JSON (spec calibrate)."),
        out: Path = opt.out(..., "Tree JSON (list of rank paths)."),
        budget: int = opt.budget(),
        max_depth: int = typer.Option(_D.max_depth, help="Depth cap K."),
    ) -> None:
        """Greedy Medusa tree growth from an acceptance table. Prints tokens_per_call (codes c1..c15
        per code-predictor call, 15 / calls per frame, the number `profile` and the benches report)
        and Medusa's expected_length (tokens per verify round with no end of frame, what the growth
        maximises; larger, because the c15 boundary and the prefill call are not counted)."""
        from rvqspec.core.tree import SparseTree
        from rvqspec.measure.acceptance import AcceptanceTable
        from rvqspec.measure.profile import tokens_per_call_from_table

        table = AcceptanceTable.from_json(read_json(acceptance, ValueError, "no such acceptance table "
                                                    "(run `rvqspec spec calibrate`)"), where=str(acceptance))
        tree = SparseTree.grow(table.acc, budget, max_depth=max_depth)
        tree.save(out)
        typer.echo(json.dumps({"out": str(out), "N": len(tree), "tokens_per_call": tokens_per_call_from_table(tree, table.acc),
                               "expected_length": tree.expected_length(table.acc)}))

    @bench_app.command("acceptance")
    def bench_acceptance_cmd(
        model_dir: Path = typer.Option(..., "--model", help="Checkpoint folder (official layout)."),
        calibration: Path = typer.Option(..., help="Free-running calibration shard directory."),
        frames_fn: str = typer.Option(_D.frames_fn, help="module:function yielding (talker_hidden, codes) per utterance."),
        drafter: List[str] = opt.drafter([], "NAME=PATH of a trained drafter (repeatable); 'reused' is always added."),
        skip_hash_check: bool = opt.skip_hash_check(),
        split: str = typer.Option("eval", help="Evaluation split."),
        languages: List[str] = opt.langs(["en"], "Evaluation languages (repeatable)."),
        budgets: List[int] = opt.budgets(list(_D.budgets)),
        max_utterances: Optional[int] = typer.Option(None, help="Cap on utterances per language."),
        run_frames: int = typer.Option(_D.run_frames, help="Frames per (drafter, N, language) decoder run."),
        seed: int = typer.Option(_D.seed, help="Generator seed."),
        temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
        greedy: bool = opt.greedy(),
        as_json: bool = opt.as_json(),
        out: Optional[Path] = opt.out(),
    ) -> None:
        """Tokens per call per drafter x language x N, oracle ceiling, added parameters."""
        from rvqspec.core.drafters import load_drafter, make_drafter
        from rvqspec.measure.bench_spec import bench_acceptance
        from rvqspec.measure.extract import ShardDataset

        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        cp = _load_cp(model_dir)
        drafters = {"reused": make_drafter("reused", cp)}
        for item in drafter:
            if "=" not in item:
                raise typer.BadParameter(f"--drafter expects NAME=PATH, got {item!r}")
            name, path = item.split("=", 1)
            drafters[name] = load_drafter(path, cp, check_hash=not skip_hash_check)
        fn = _frames_fn(frames_fn)
        evaluation = {lang: list(fn(model_dir=model_dir, split=split, language=lang, max_utterances=max_utterances))
                      for lang in languages}
        calib = ShardDataset(calibration, batch_size=256, shuffle=False, code_predictor=cp)
        result = bench_acceptance(cp, drafters, calib, evaluation, budgets=tuple(budgets), sampling=sampling, seed=seed,
                                  run_frames=run_frames)
        _emit(result, as_json, out)

    @bench_app.command("spec")
    def bench_spec_cmd(
        acceptance_json: Path = typer.Option(..., "--acceptance", help="Output of `bench acceptance` (tokens per call per N)."),
        drafter_name: str = typer.Option(_D.kind, "--acceptance-drafter", help="Drafter entry of the acceptance JSON to project with."),
        model_dir: Optional[Path] = typer.Option(None, "--model", help="Mini checkpoint for the wall-clock AR vs spec run."),
        drafter: Optional[Path] = opt.drafter(None, "Drafter .safetensors for the wall-clock run."),
        skip_hash_check: bool = opt.skip_hash_check(),
        tree: Optional[Path] = opt.tree(None, "Tree JSON for the wall-clock run (default: the --budget tree of the JSON)."),
        budget: int = opt.budget(_D.budget, "N of the wall-clock run when no --tree is given."),
        frames_fn: str = typer.Option(_D.frames_fn, help="module:function for the wall-clock frames."),
        split: str = typer.Option("eval", help="Corpus split of the wall-clock frames."),
        language: str = opt.lang(),
        frames: int = typer.Option(_D.timing_frames, help="Timed frames (median)."),
        full_size: bool = typer.Option(True, help="Also time q=1 vs q=N+1 on a random full-size code predictor."),
        threads: Optional[int] = opt.threads(None, "torch threads for the full-size timing."),
        compiled: bool = typer.Option(False, help="Full size: also time the q=1 step and the verify calls with "
                                      "the Inductor-compiled decoder stack (rvqspec.core.compiled; about a minute per N)."),
        temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
        greedy: bool = opt.greedy(),
        as_json: bool = opt.as_json(),
        out: Optional[Path] = opt.out(),
        backend: List[str] = typer.Option([], "--backend", help="Wall-clock run per inner-loop backend, interleaved "
                                          "(repeatable: eager, compiled, onnx; rvqspec.measure.bench_backends)."),
    ) -> None:
        """Wall-clock inner loop AR vs speculative (mini) and the full-size verify overhead / projection."""
        from rvqspec.core.drafters import load_drafter
        from rvqspec.core.speculative import SpeculativeCodePredictor
        from rvqspec.core.tree import SparseTree
        from rvqspec.measure.bench_spec import (
            bench_full_size,
            bench_inner_loop,
            frames_for_timing,
            tokens_per_call_from_acceptance,
        )

        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        acc = read_json(acceptance_json, ValueError, "no such `bench acceptance` JSON")
        _check_acceptance(acc, acceptance_json, drafter_name)
        tpc = tokens_per_call_from_acceptance(acc, drafter_name)
        result: dict = {"acceptance_json": str(acceptance_json), "drafter": drafter_name}
        if model_dir is not None:
            if drafter is None:
                raise typer.BadParameter("the wall-clock run needs --drafter with --model")
            cp = _load_cp(model_dir)
            d = load_drafter(drafter, cp, check_hash=not skip_hash_check)
            t = SparseTree.load(tree) if tree is not None else _tree_from_acceptance(acc, acceptance_json,
                                                                                     drafter_name, budget)
            spec = SpeculativeCodePredictor(cp, d, t)
            utts = _frames_fn(frames_fn)(model_dir=model_dir, split=split, language=language, max_utterances=None)
            if backend:
                from rvqspec.export.backends import BACKENDS
                from rvqspec.measure.bench_backends import bench_backends

                bad = [b for b in backend if b not in BACKENDS]
                if bad:
                    raise typer.BadParameter(f"--backend must be one of {', '.join(BACKENDS)}, got {bad[0]!r}")
                names = ["eager"] + [b for b in dict.fromkeys(backend) if b != "eager"]  # eager: the ratios' base
                result["backends"] = bench_backends(cp, d, t, frames_for_timing(utts, frames), sampling=sampling,
                                                    backends=names, threads=threads or 1)
            else:
                result["mini"] = bench_inner_loop(cp, spec, frames_for_timing(utts, frames), sampling=sampling)
        if full_size:
            result["full_size"] = bench_full_size(tpc, threads=threads, compiled=compiled)
        _emit(result, as_json, out)

    @bench_app.command("lossless")
    def bench_lossless_cmd(
        model_dir: Path = typer.Option(..., "--model", help="Checkpoint folder (official layout)."),
        drafter: Path = opt.drafter(..., "Drafter .safetensors (its drafts are what gets verified)."),
        skip_hash_check: bool = opt.skip_hash_check(),
        tree: Optional[Path] = opt.tree(None, "Tree JSON; default: the --budget tree of --acceptance."),
        acceptance_json: Optional[Path] = typer.Option(None, "--acceptance", help="`bench acceptance` output holding the tree."),
        drafter_name: str = typer.Option(_D.kind, "--acceptance-drafter", help="Drafter entry of the acceptance JSON."),
        budget: int = opt.budget(_D.budget, "N of the tree taken from --acceptance."),
        contexts: int = typer.Option(2, help="Frame contexts (talker hidden, c0), evenly spaced over the split."),
        frames: Optional[int] = typer.Option(None, help="Speculative (and AR) frames per context "
                                             "(default: LosslessConfig.frames)."),
        control_frames: int = typer.Option(5000, help="Frames per negative control and context (0: no controls)."),
        frames_fn: str = typer.Option(_D.frames_fn, help="module:function for the contexts."),
        split: str = typer.Option("eval", help="Corpus split of the contexts."),
        language: str = opt.lang(),
        seed: int = typer.Option(_D.seed, help="Generator seed."),
        threads: Optional[int] = opt.threads(1),
        temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
        greedy: bool = opt.greedy(),
        as_json: bool = opt.as_json(),
        out: Optional[Path] = opt.out(),
    ) -> None:
        """Lossless check on a trained model: exact AR law of (c1, c2) and c3, and every code's marginal
        against AR frames, for the deployed sampling; negative controls must fail (rvqspec.measure.lossless)."""
        import torch

        from rvqspec.core.drafters import load_drafter
        from rvqspec.core.speculative import SpeculativeCodePredictor
        from rvqspec.core.tree import SparseTree
        from rvqspec.measure.bench_spec import frames_for_timing
        from rvqspec.measure.lossless import LosslessConfig, lossless_report

        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        if threads:
            torch.set_num_threads(threads)
        config = LosslessConfig(seed=seed) if frames is None else LosslessConfig(frames=frames, seed=seed)
        if contexts < 1 or config.frames < 1 or control_frames < 0:
            raise typer.BadParameter(f"need contexts >= 1, frames >= 1, control_frames >= 0; got {contexts}, "
                                     f"{config.frames}, {control_frames}")
        cp = _load_cp(model_dir)
        d = load_drafter(drafter, cp, check_hash=not skip_hash_check)
        if tree is not None:
            t = SparseTree.load(tree)
        elif acceptance_json is not None:
            t = _tree_from_acceptance(read_json(acceptance_json, ValueError, "no such `bench acceptance` JSON"),
                                      acceptance_json, drafter_name, budget)
        else:
            raise typer.BadParameter("give --tree or --acceptance")
        pool = frames_for_timing(_frames_fn(frames_fn)(model_dir=model_dir, split=split, language=language,
                                                       max_utterances=None), 40 * contexts)
        if not pool:
            raise typer.BadParameter(f"--frames-fn {frames_fn} gave no frames for split {split!r}, language {language!r}")
        picks = [pool[(2 * i + 1) * len(pool) // (2 * contexts)] for i in range(contexts)]
        spec = SpeculativeCodePredictor(cp, d, t)
        controls = {} if control_frames == 0 else {
            c: SpeculativeCodePredictor(cp, d, t, rule="walk", _control=c) for c in ("always_accept", "full_p")}
        result = lossless_report(cp, spec, picks, sampling=sampling, config=config,
                                 controls=controls, control_frames=control_frames or None)
        result.update(model_dir=str(model_dir), drafter=str(drafter), tree=[list(p) for p in t.paths],
                      split=split, language=language)
        _emit(result, as_json, out)
