"""`rvqspec real ...`: the runbook with real Qwen3-TTS weights and real datasets (docs/real_weights.md).

    extract         dataset on disk -> teacher-forced hidden-state shards (data-parallel, resumable)
    train-offsets   shards -> trained position offsets (gradient all-reduce across processes)
    evaluate        dataset -> seed Table 3 (tokens/step and WER/CER, AR vs speculative)
    mini-datasets   the mini corpus in the three real layouts (to rehearse the runbook)

Every command runs the same under plain `python` (one process) and under `accelerate launch`
(`rvqspec.real.distributed`). Heavy imports happen inside the commands.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.core import defaults

real_app = typer.Typer(help="Real Qwen3-TTS checkpoints and datasets: extract, train offsets, calibrate, "
                            "evaluate (works under `accelerate launch`).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(real_app, name="real")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


CODEC_HELP = ("official:DIR (12 Hz speech tokenizer; default <MODEL>/speech_tokenizer), mini:DIR (the mini "
              "world's codec), or FILE.py:NAME (an object with encode(audio, rate) and decode(codes))")
TEXT_HELP = "FILE.py:NAME callable str -> (1, L) ids; default: the checkpoint's own text tokenizer"
DEVICE_HELP = ("model, speech tokenizer and recognizer device (default: this process's accelerator as "
               "`accelerate launch` assigns it, cuda:LOCAL_RANK; else cpu)")
DTYPE_HELP = "model and speech tokenizer dtype: bfloat16, float16 or float32 (default: bfloat16 on CUDA, else float32)"


def _bad_input(exc: Exception) -> None:
    """Bad input: one line naming the file, key or value, exit code 2 (no traceback)."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def _input_errors() -> tuple[type[Exception], ...]:
    from rvqspec.core.drafters import DrafterError
    from rvqspec.measure.extract import ExtractError
    from rvqspec.real.datasets import DatasetError
    from rvqspec.real.distributed import ScaleError

    return DatasetError, ScaleError, ExtractError, DrafterError, FileNotFoundError


@real_app.command("extract")
def extract_cmd(
    model: Path = opt.model(..., "Official Qwen3-TTS checkpoint folder (config.json, model.safetensors)."),
    dataset: Path = typer.Argument(..., help="dataset directory (save_to_disk, parquet folder, or audio folder)"),
    out: Path = opt.out_dir(..., "Output folder (unit_XXXXX/ shards + manifest.json)."),
    split: Optional[str] = typer.Option(None, help="split of a DatasetDict (e.g. train)"),
    language: Optional[str] = opt.lang(None, "Language of every item (LibriSpeech has no column)."),
    limit: Optional[int] = typer.Option(None, help="first N items only"),
    speaker: Optional[str] = typer.Option(None, help="CustomVoice speaker name for the prompt"),
    streaming: bool = typer.Option(False, help="streaming text layout instead of the wrappers' non-streaming one"),
    auto_language: bool = typer.Option(False, help="prompt with language 'auto' instead of the item's language"),
    codec: Optional[str] = typer.Option(None, help=CODEC_HELP),
    text_tokenizer: Optional[str] = typer.Option(None, help=TEXT_HELP),
    unit_items: int = typer.Option(64, help="items per work unit (the unit of resumption)"),
    strategy: str = typer.Option("strided", help="unit assignment: strided or hash"),
    shard_frames: int = typer.Option(8192, help="frames per shard file"),
    hidden_dtype: str = typer.Option("float16", help="hidden-state storage dtype (float16: about 30 KB per "
                                                      "frame at the 0.6B/1.7B code predictor's 1024 x 15)"),
    device: Optional[str] = typer.Option(None, help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    source: str = typer.Option("teacher_forced", help="teacher_forced (offset training) or free_running "
                                                       "(calibration: c1..c15 sampled by the model itself)"),
    seed: int = typer.Option(0, help="free-running sampling seed (per unit: seed + unit index)"),
    backend: str = typer.Option("official", help="official (official prompt builder) or mini (the mini world's "
                                                   "checkpoint and phoneme front end)"),
    threads: int = opt.threads(1, "torch CPU threads per process."),
) -> None:
    """Hidden states of a real dataset: teacher-forced for offset training (seed 000 §2.2), free-running
    for tree calibration (§3.3). Calibrate and grow trees with `rvqspec spec calibrate / grow-tree`."""
    import torch

    from rvqspec.real.datasets import codec_from_spec, text_ids_from_spec
    from rvqspec.real.distributed import (
        ExtractJob,
        ScaleConfig,
        extract_sharded,
        finish_distributed,
        merge_extraction,
        placement,
        topology,
        wait_for_everyone,
    )

    torch.set_num_threads(threads)
    topo = topology()
    try:
        cfg = ScaleConfig(unit_items=unit_items, strategy=strategy)
        job = ExtractJob(model=str(model), dataset=str(dataset), out=str(out), split=split, language=language,
                         limit=limit, speaker=speaker, non_streaming_mode=not streaming,
                         use_language=not auto_language, shard_frames=shard_frames, hidden_dtype=hidden_dtype,
                         source=source, seed=seed, backend=backend, device=device, dtype=dtype)
        dev, dt = placement(device, dtype)
        c = codec_from_spec(codec, model, device=dev, dtype=dt)
        text = text_ids_from_spec(text_tokenizer, model) if backend == "official" else None
        res = extract_sharded(job, c.encode, text, topo, cfg, log=_log)
    except _input_errors() as exc:
        _bad_input(exc)
    wait_for_everyone()
    if topo.is_main:
        man = merge_extraction(out, res["units"])
        summary = json.loads(man.read_text())
        typer.echo(json.dumps({"manifest": str(man), "frames": summary["frames"], "units": res["units"],
                               "items": res["items"], "world": topo.world,
                               "dataset_stats": summary["extra"]["dataset_stats"]}, indent=2))
    finish_distributed()


@real_app.command("train-offsets")
def train_offsets_cmd(
    model: Path = opt.model(..., "Official Qwen3-TTS checkpoint folder."),
    shards: Path = typer.Argument(..., help="merged extraction directory (manifest.json)"),
    out: Path = opt.out(..., "Drafter file to write (.safetensors)."),
    kind: str = typer.Option("offsets", help="drafter kind (rvqspec.core.drafters.make_drafter)"),
    num_offsets: int = typer.Option(defaults.K, help="K: trained offsets = draft lookahead (seed 000 §2.2)."),
    epochs: int = typer.Option(1, help="Passes over the shards."),
    batch_size: int = typer.Option(32, help="Per process: the effective batch is processes x this."),
    effective_batch: Optional[int] = typer.Option(None, help="The batch summed over processes (the seed's "
                                                             "32 on one GPU); sets the per-process batch to this / processes."),
    lr: float = typer.Option(1e-3, help="Adam learning rate."),
    max_steps: Optional[int] = typer.Option(None, help="Stop after this many steps."),
    seed: int = typer.Option(0, help="Shuffling and initialisation seed."),
    threads: int = opt.threads(),
) -> None:
    """Train the position offsets data-parallel (gradients averaged across processes)."""
    import torch

    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.core.drafters import make_drafter
    from rvqspec.real.distributed import (
        DistTrainConfig,
        finish_distributed,
        per_process_batch,
        train_offsets_distributed,
        train_plan,
        write_json_atomic,
    )

    torch.set_num_threads(threads)
    from accelerate import Accelerator

    acc = Accelerator(cpu=not torch.cuda.is_available())
    try:
        per_process = per_process_batch(effective_batch, batch_size, acc.num_processes)
        cp = load_qwen3_tts(model, parts=("code_predictor",)).code_predictor
        drafter = make_drafter(kind, cp, num_offsets)
        cfg = DistTrainConfig(lr=lr, batch_size=per_process, epochs=epochs, max_steps=max_steps, seed=seed)
        plan = train_plan(shards, per_process, acc.num_processes)
        drafter, losses = train_offsets_distributed(drafter, cp, shards, cfg, acc, log=_log)
    except _input_errors() as exc:
        _bad_input(exc)
    if acc.is_main_process:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        drafter.save(tmp, cp)
        tmp.replace(out)
        info = {"drafter": str(out), "kind": kind, "steps": len(losses), "world": acc.num_processes,
                "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                "parameters": drafter.num_parameters, "batch_per_process": per_process,
                "effective_batch": per_process * acc.num_processes, "steps_per_epoch": plan["steps_per_epoch"],
                "batches_per_rank": plan["batches_per_rank"], "dropped_batches_per_epoch": plan["dropped_batches"]}
        write_json_atomic(out.with_suffix(".json"), {**info, "losses": losses})
        typer.echo(json.dumps(info, indent=2))
    finish_distributed()  # why: its docstring (a rank could abort in C++ at interpreter exit)


@real_app.command("evaluate")
def evaluate_cmd(
    model: Path = opt.model(..., "Official Qwen3-TTS checkpoint folder (--backend mini: a mini model folder)."),
    dataset: Path = typer.Argument(..., help="evaluation dataset directory (Fleurs)"),
    out: Path = opt.out_dir(..., "Output folder: unit_XXXXX/, table3.json, table3.md."),
    drafter: Optional[Path] = opt.drafter(None, "Trained drafter (default: zero offsets)."),
    skip_hash_check: bool = opt.skip_hash_check(),
    tree: Optional[Path] = opt.tree(None, "Tree JSON (default: top-1 chain of depth K)."),
    asr: List[str] = typer.Option(..., help="recognizer: PATH or LANG=PATH, repeatable ('*' = fallback); PATH = "
                                            "a local transformers ASR dir, a mini recognizer dir, or FILE.py:NAME"),
    split: Optional[str] = typer.Option(None, help="Split of a DatasetDict (e.g. test)."),
    language: Optional[str] = opt.lang(None, "Language of every item (default: the dataset's column)."),
    limit: Optional[int] = typer.Option(None, help="First N items only."),
    seeds: int = typer.Option(1, help="seeds per system (the seed averages ten)"),
    speaker: Optional[str] = typer.Option(None, help="CustomVoice speaker name for the prompt."),
    max_new_tokens: int = typer.Option(2048, help="frames per utterance"),
    auto_language: bool = typer.Option(False, help="Prompt with language 'auto' instead of the item's language."),
    codec: Optional[str] = typer.Option(None, help=CODEC_HELP),
    text_tokenizer: Optional[str] = typer.Option(None, help=TEXT_HELP),
    unit_items: int = typer.Option(16, help="Items per work unit (the unit of resumption)."),
    backend: str = typer.Option("official", help="official (Qwen3-TTS generate) or mini (the mini world's "
                                                   "model, phoneme front end and codec)"),
    mini_codec: Path = typer.Option(Path("data/mini/codec"), help="--backend mini: the mini codec directory"),
    device: Optional[str] = typer.Option(None, help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    threads: int = opt.threads(),
    temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
    greedy: bool = opt.greedy(),
) -> None:
    """Seed Table 3: per language, tokens/step and WER/CER of AR vs speculative synthesis."""
    import torch

    from rvqspec.core.drafters import load_drafter
    from rvqspec.core.tree import SparseTree
    from rvqspec.real.datasets import DatasetSpec, codec_from_spec, count_items, iter_range, text_ids_from_spec
    from rvqspec.real.distributed import (
        ScaleConfig,
        finish_distributed,
        num_units,
        placement,
        run_units,
        topology,
        wait_for_everyone,
    )
    from rvqspec.real.distributed import unit_items as unit_range
    from rvqspec.real.official_pipeline import load_official_model, shared_code_predictor
    from rvqspec.real.wer import (
        EvalConfig,
        MiniSynthesizer,
        OfficialSynthesizer,
        RecognizerMap,
        evaluate_unit,
        merge_eval,
        parse_asr_for,
        run_items,
    )

    torch.set_num_threads(threads)
    topo = topology()
    try:
        dev, dt = placement(device, dtype)
        spec = DatasetSpec(str(dataset), split=split, language=language, limit=limit)
        n_items = count_items(spec)
        scfg = ScaleConfig(unit_items=unit_items)
    except _input_errors() as exc:
        _bad_input(exc)
    n_units = num_units(n_items, scfg)
    sampling = opt.sampling(temperature, top_k, top_p, greedy)
    cfg = EvalConfig(seeds=tuple(range(seeds)), max_new_tokens=max_new_tokens, speaker=speaker,
                     use_language=not auto_language, subtalker_dosample=sampling.do_sample,
                     subtalker_top_k=sampling.top_k, subtalker_top_p=sampling.top_p,
                     subtalker_temperature=sampling.temperature)
    state: dict = {}

    def work(u: int, tmp: Path) -> dict:
        if not state:
            t = SparseTree.load(tree) if tree else None
            if backend == "mini":
                synth = MiniSynthesizer(model, mini_codec, drafter, t, cfg, verify_hash=not skip_hash_check)
            elif backend == "official":
                m = load_official_model(model, dtype=dt, device=dev)
                ours = shared_code_predictor(m.talker.code_predictor, m.talker)
                # a bf16 copy has another hash than the float32 weights the drafter was trained on
                synth = OfficialSynthesizer(m, text_ids_from_spec(text_tokenizer, model),
                                            codec_from_spec(codec, model, device=dev, dtype=dt).decode,
                                            load_drafter(drafter, ours,
                                                         check_hash=not skip_hash_check and dt == torch.float32)
                                            if drafter else None, t, cfg)
            else:
                raise typer.BadParameter(f"--backend must be official or mini, got {backend!r}")
            state.update(synth=synth, asr=RecognizerMap(parse_asr_for(asr), device=str(dev)))
        items = [it for _, it in iter_range(spec, unit_range(u, n_items, scfg))]
        return evaluate_unit(tmp, run_items(state["synth"], items, state["asr"], cfg, log=_log))

    job = {"dataset": str(dataset.resolve()), "split": split, "language": language, "limit": limit, "items": n_items,
           "seeds": seeds, "backend": backend}
    try:
        run_units(out, n_units, work, topo, scfg, log=_log, job=job)
    except _input_errors() as exc:
        _bad_input(exc)
    wait_for_everyone()
    if topo.is_main:
        t = merge_eval(out, n_units, meta={"model": str(model), "backend": backend, "dataset": str(dataset),
                                           "drafter": str(drafter),
                                           "tree": str(tree), "asr": asr, "seeds": seeds, "world": topo.world})
        typer.echo(json.dumps({"table3": str(out / "table3.md"), "rows": t["rows"]}, indent=2))
    finish_distributed()


@real_app.command("mini-datasets")
def mini_datasets_cmd(
    corpus: Path = typer.Option(Path("runs/mini/corpus"), help="the mini corpus with audio"),
    out: Path = opt.out_dir(Path("runs/real_mini"), "Output folder: voxpopuli/, librispeech/, fleurs/."),
    train: Optional[int] = typer.Option(None, help="VoxPopuli-like items (default: the whole train split)"),
    calibration: Optional[int] = typer.Option(None, help="LibriSpeech-like items"),
    eval_per_language: Optional[int] = typer.Option(None, help="Fleurs-like items per language"),
) -> None:
    """The mini corpus written in the VoxPopuli / LibriSpeech / Fleurs layouts, to rehearse the runbook."""
    from rvqspec.real.datasets import write_mini_layouts

    typer.echo(json.dumps(write_mini_layouts(corpus, out, train, calibration, eval_per_language), indent=2))
