"""`rvqspec asr ...`: train and evaluate the mini recognizer, transcribe files, score transcripts.

Defaults come from `RecognizerConfig` and the paths in `rvqspec.mini.recognizer`; heavy imports
happen inside the commands so that `rvqspec --help` stays instant.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from rvqspec.commands import options as opt

asr_app = typer.Typer(help="The mini recognizer and WER/CER: train, eval, transcribe.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(asr_app, name="asr")


def _default(name: str) -> Path:
    from rvqspec.mini import recognizer

    return getattr(recognizer, name)


@asr_app.command("train")
def train(
    corpus: Optional[Path] = typer.Option(None, help="mini corpus (HF dataset dir); default runs/mini/corpus"),
    codec: Optional[Path] = typer.Option(None, help="mini codec dir for resynthesis augmentation; "
                                                    "default data/mini/codec if present"),
    out: Optional[Path] = opt.out_dir(None, "Artifact folder; default data/mini/recognizer."),
    toy: bool = typer.Option(False, help="RecognizerConfig.toy(): trains in seconds, for smoke tests"),
    epochs: Optional[int] = typer.Option(None, help="override RecognizerConfig.epochs"),
    max_minutes: Optional[float] = typer.Option(None, help="override RecognizerConfig.max_minutes"),
    threads: int = opt.threads(),
) -> None:
    """Train the CTC recognizer on the corpus's model_train split (six languages) and save it."""
    import dataclasses

    import torch

    from rvqspec.mini.recognizer import RecognizerConfig, train_recognizer

    torch.set_num_threads(threads)
    config = RecognizerConfig.toy() if toy else RecognizerConfig()
    overrides = {k: v for k, v in {"epochs": epochs, "max_minutes": max_minutes}.items() if v is not None}
    config = dataclasses.replace(config, **overrides)
    corpus = corpus or _default("DEFAULT_CORPUS")
    if codec is None and _default("DEFAULT_CODEC").exists():
        codec = _default("DEFAULT_CODEC")
    out = out or _default("DEFAULT_OUT")
    metrics = train_recognizer(corpus, codec, out, config)
    typer.echo(json.dumps(metrics, indent=2, ensure_ascii=False))
    typer.echo(f"saved {out}", err=True)


@asr_app.command("eval")
def evaluate(
    recognizer: Optional[Path] = typer.Option(None, help="mini recognizer dir or local transformers "
                                                         "model; default data/mini/recognizer"),
    corpus: Optional[Path] = typer.Option(None, help="mini corpus; default runs/mini/corpus"),
    codec: Optional[Path] = typer.Option(None, help="also score codec-resynthesized audio (codec dir)"),
    split: str = typer.Option("eval", help="corpus split"),
    language: Optional[list[str]] = opt.langs(None, "Restrict to these languages (repeatable)."),
    max_per_language: Optional[int] = typer.Option(None, help="at most this many utterances per language"),
    as_json: bool = opt.as_json("JSON rows on stdout instead of a table."),
    threads: int = opt.threads(),
    decoding: str = typer.Option("auto", "--decoding", help="mini recognizer text decoding: auto (lexicon "
                                 "for en/de/es/ru with a phoneme head, else greedy), lexicon, greedy"),
) -> None:
    """Per-language WER/CER of a recognizer on clean (and codec-resynthesized) corpus audio."""
    import torch

    from rvqspec.mini.recognizer import evaluate_recognizer, format_table
    from rvqspec.real.asr import load_recognizer

    torch.set_num_threads(threads)
    rec = load_recognizer(recognizer, decoding=decoding)
    table = evaluate_recognizer(rec, corpus or _default("DEFAULT_CORPUS"), codec=codec, split=split,
                                languages=language or None, max_per_language=max_per_language)
    typer.echo(json.dumps(table, indent=2) if as_json else format_table(table))


@asr_app.command("transcribe")
def transcribe(
    files: list[Path] = typer.Argument(..., help="audio files (any rate soundfile reads)"),
    language: str = opt.lang(),
    recognizer: Optional[Path] = typer.Option(None, help="mini recognizer dir or transformers model"),
) -> None:
    """Print one transcript per audio file."""
    import numpy as np
    import soundfile as sf

    from rvqspec.real.asr import load_recognizer

    rec = load_recognizer(recognizer)
    for f in files:
        try:
            audio, rate = sf.read(str(f), dtype="float32")
        except Exception as exc:  # soundfile's errors do not always name the file
            typer.echo(f"error: cannot read audio file {f}: {' '.join(str(exc).split())}", err=True)
            raise typer.Exit(2)
        if audio.ndim == 2:
            audio = audio.mean(axis=1).astype(np.float32)
        typer.echo(f"{f}\t{rec.transcribe([audio], rate, language)[0]}")
    sys.stdout.flush()


@asr_app.command("testset")
def testset(
    recognizer: Optional[Path] = typer.Option(None, "--recognizer", help="mini recognizer dir; default "
                                                                         "data/mini/recognizer"),
    codec: Optional[Path] = typer.Option(None, "--codec", help="also score codec resynthesis (codec dir)"),
    lang: Optional[list[str]] = opt.langs(None, "Restrict to these languages (repeatable); default: all."),
    out: Optional[Path] = opt.out(None, "Write the rows and the command as JSON here."),
    as_json: bool = opt.as_json("JSON rows on stdout instead of a table."),
    threads: int = opt.threads(),
    decoding: str = typer.Option("auto", "--decoding", help="mini recognizer text decoding: auto (lexicon "
                                 "for en/de/es/ru with a phoneme head, else greedy), lexicon, greedy"),
) -> None:
    """PER/WER/CER on the hand-written test set (data/testset), clean espeak-ng speech and codec resynthesis."""
    import torch

    from rvqspec.core.jsonfile import write_json_atomic
    from rvqspec.mini.speech import LANGUAGES
    from rvqspec.mini.testset import evaluate_testset
    from rvqspec.real.asr import load_recognizer

    torch.set_num_threads(threads)
    langs = tuple(lang) if lang else LANGUAGES
    bad = [x for x in langs if x not in LANGUAGES]
    if bad:
        typer.echo(f"error: --lang {bad[0]!r}: the test set has {', '.join(LANGUAGES)}", err=True)
        raise typer.Exit(2)
    if codec is not None and not codec.is_dir():
        typer.echo(f"error: --codec {codec}: no such codec directory", err=True)
        raise typer.Exit(2)
    try:
        rec = load_recognizer(recognizer, decoding=decoding)
    except FileNotFoundError as exc:
        typer.echo(str(exc).splitlines()[0], err=True)
        raise typer.Exit(2)
    rows = evaluate_testset(rec, codec=codec, languages=langs, progress=not as_json)
    if out is not None:
        command = "rvqspec asr testset " + " ".join(
            f"--{k} {v}" for k, v in (("recognizer", recognizer), ("codec", codec), ("threads", threads),
                                      ("decoding", None if decoding == "auto" else decoding)) if v)
        write_json_atomic(out, {"command": command, "rows": rows}, indent=1, ensure_ascii=False)
    if as_json:
        typer.echo(json.dumps(rows, indent=1, ensure_ascii=False))
    else:
        for r in rows:
            per = "-" if r["per"] is None else f"{100 * r['per']:.2f}"
            typer.echo(f"{r['language']:<3} {r['condition']:<6} n={r['n']:<3} PER={per}% "
                       f"WER={100 * r['wer']:.2f}% CER={100 * r['cer']:.2f}% ({r.get('decoding') or '-'})")
