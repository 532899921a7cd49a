"""`rvqspec mini ...`: build and check the embedded mini world (corpus, codec, recognizer, model)."""
from __future__ import annotations

from pathlib import Path

import typer

from rvqspec.commands import options as opt
from rvqspec.mini.paths import DEFAULT_DATA_DIR, DEFAULT_RUNS_DIR

mini_app = typer.Typer(help="The embedded mini world: synthetic speech corpus, RVQ codec, recognizer, model.",
                       no_args_is_help=True)
_THREADS = opt.threads(1, "torch threads (0: torch's default).")  # build and evaluate


@mini_app.command("build")
def build_command(
    toy: bool = typer.Option(False, "--toy", help="A few sentences and tiny codebooks: a CI smoke build."),
    out: Path = opt.out_dir(DEFAULT_DATA_DIR, "Folder of the committed artifacts (codes, codec, manifest)."),
    runs: Path = typer.Option(DEFAULT_RUNS_DIR, "--runs", help="Folder of the uncommitted artifacts (corpus with audio)."),
    steps: str = typer.Option("corpus,codec,recognizer,model", "--steps",
                              help="Comma-separated steps, run in dependency order."),
    threads: int = _THREADS,
    reuse_codec: bool = typer.Option(False, "--reuse-codec",
                                     help="Codec step: keep the fitted codec in <out>/codec if its config matches."),
    level0_lda: int = typer.Option(None, "--level0-lda", min=0,
                                   help="Codec step: assign level 0 in this many phoneme-discriminant "
                                        "directions (0: plain residual k-means; default: BuildConfig's, 64)."),
    cp_refine_steps: int = typer.Option(None, "--cp-refine-steps", min=0,
                                        help="Model step: train the code predictor alone this many steps on the "
                                             "frozen talker's states after the joint training (default: "
                                             "MiniModelConfig's, 0)."),
    codebook_size: int = typer.Option(None, "--codebook-size", min=2,
                                      help="Codec step: codes per level (default: CodecConfig's, 1,024; the toy's 16)."),
    level0_codebook_size: int = typer.Option(
        None, "--level0-codebook-size", min=2,
        help="Codec step: codes at level 0 alone, the talker's c0 vocabulary (default: as many as the other levels)."),
    points: int = typer.Option(None, "--points",
                               help="Corpus step: phonemes per frame in the talker's tokens, 2 (pairs) or 4 "
                                    "(quarter-resolved) (default: CorpusConfig's, 4)."),
    text_parts: bool = typer.Option(None, "--text-parts/--text-table",
                                    help="Model step: train the text table as quarter-frame phoneme parts, or "
                                         "one free row per token (default: MiniModelConfig's, the parts)."),
    model_steps: int = typer.Option(None, "--model-steps", min=1,
                                    help="Model step: joint training steps (default: MiniModelConfig's, 6000)."),
    model_threads: int = typer.Option(None, "--model-threads", min=1,
                                      help="Model step: torch threads (default: MiniModelConfig's, 1, so the "
                                           "recognizer trains beside it on the other core)."),
    model_train_sentences: list[str] = typer.Option(
        None, "--model-train-sentences", metavar="LANG=N",
        help="Corpus step: model_train sentences of one language (repeatable; default: CorpusConfig's, 3,000 each)."),
    language_share: list[str] = typer.Option(
        None, "--language-share", metavar="LANG=W",
        help="Model step: share of each step's draws for one language (repeatable; the others split the rest "
             "in proportion to their utterances; default: every utterance equally likely)."),
    codec_share: list[str] = typer.Option(
        None, "--codec-share", metavar="LANG=S",
        help="Codec step: one language's share of the fit clips (all its model_train clips, the others drawn "
             "equally; default: every model_train clip)."),
) -> None:
    """Build the mini world's artifacts and record them in <out>/manifest.json."""
    from rvqspec.mini.build import BuildConfig, BuildError, build, parse_steps
    from rvqspec.mini.paths import MiniPaths

    try:
        sizes = _lang_values(model_train_sentences, "--model-train-sentences", int)
        shares = _lang_values(language_share, "--language-share", float)
        fit_share = _lang_values(codec_share, "--codec-share", float)
        cfg = BuildConfig(toy=toy, steps=parse_steps(steps), threads=threads or None, reuse_codec=reuse_codec,
                          **({} if level0_lda is None else {"level0_lda": level0_lda}),
                          **({} if cp_refine_steps is None else {"cp_refine_steps": cp_refine_steps}),
                          codebook_size=codebook_size, level0_codebook_size=level0_codebook_size,
                          tokenizer_points=points, text_parts=text_parts,
                          model_steps=model_steps, model_threads=model_threads,
                          model_train_by_language=sizes, language_share=shares, codec_share=fit_share)
        manifest = build(MiniPaths.at(out, runs), cfg, log=typer.echo)
    except (BuildError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    typer.echo(f"manifest: {Path(out) / 'manifest.json'} ({manifest['total_bytes'] / 1e6:.1f} MB of artifacts)")


def _lang_values(items: list[str] | None, flag: str, cast) -> dict | None:
    """["en=6000", ...] -> {"en": 6000, ...}; None when the flag was not given."""
    if not items:
        return None
    out = {}
    for item in items:
        lang, _, value = item.partition("=")
        try:
            number = cast(value)
        except ValueError:
            number = -1
        if not lang.strip() or number < 0:
            raise ValueError(f"{flag} {item!r}: expected LANG=VALUE with a non-negative number, e.g. en=0.5")
        out[lang.strip()] = number
    return out


@mini_app.command("refine")
def refine_command(
    model: Path = opt.model(DEFAULT_DATA_DIR / "model", "Trained mini model folder to refine (not overwritten)."),
    corpus: Path = typer.Option(DEFAULT_DATA_DIR / "corpus", "--corpus",
                                help="Corpus with the model's training splits (codes and phoneme frames)."),
    steps: int = typer.Option(..., "--steps", min=1, help="Code-predictor steps on the frozen talker's states."),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate (default: MiniModelConfig.cp_refine_lr)."),
    out: Path = opt.out_dir(..., "Folder for the refined model (written whole, then renamed)."),
    threads: int = _THREADS,
) -> None:
    """Train a trained model's code predictor alone on its frozen talker's states (the build's
    --cp-refine-steps, applied after the fact); the talker is copied unchanged."""
    from rvqspec.mini.talker_train import refine_saved_model

    for path, what in ((model / "mini_model.json", "--model"), (corpus, "--corpus")):
        if not path.exists():
            typer.echo(f"error: {what}: {path} does not exist", err=True)
            raise typer.Exit(2)
    try:
        metrics = refine_saved_model(model, corpus, out, steps, lr=lr, threads=threads or None)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    typer.echo(f"wrote {out}: val_loss_cp {metrics.get('val_loss_cp', float('nan')):.4f} "
               f"after {metrics['cp_refine_steps']} refinement steps")


@mini_app.command("cast")
def cast_command(
    model: Path = opt.model(DEFAULT_DATA_DIR / "model", "Checkpoint folder to copy (not overwritten)."),
    dtype: str = opt.cast_dtype(),
    out: Path = opt.out_dir(..., "Folder for the copy (written whole, then renamed)."),
    codec: Path = typer.Option(None, "--codec", help="Copy this codec folder instead of the checkpoint: its "
                                                     "codebooks stored in --dtype (float16 halves them)."),
) -> None:
    """Copy a checkpoint with its weights stored in another dtype (bfloat16 halves data/; the
    loaders cast back to float32), or with --codec a codec with its codebooks so stored."""
    from rvqspec.core.checkpoint import cast_checkpoint
    from rvqspec.mini.codec import cast_codec

    if codec is not None:
        cast_codec(codec, out, opt.torch_dtype(dtype))  # a CodecError: one line, exit 2 (cli._Group)
    else:
        cast_checkpoint(model, out, opt.torch_dtype(dtype))  # a CheckpointError: one line, exit 2 (cli._Group)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    typer.echo(f"wrote {out}: {size / 1e6:.1f} MB, weights in {dtype}")


@mini_app.command("verify")
def verify_command(
    data: Path = typer.Option(DEFAULT_DATA_DIR, "--data", help="Directory with manifest.json."),
) -> None:
    """Check every artifact's size and sha256 (and the codec config) against the manifest."""
    from rvqspec.mini.build import ArtifactError, verify_artifacts

    try:
        manifest = verify_artifacts(data)
    except ArtifactError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    typer.echo(f"ok: {len(manifest['artifacts'])} files match {Path(data) / 'manifest.json'}")


@mini_app.command("say")
def say_command(
    text: str = typer.Argument(..., help="Text to speak (Japanese in kana, Mandarin in hanzi)."),
    lang: str = opt.lang(),
    out: Path = opt.out(Path("say.wav"), "WAV file to write."),
    codec: Path = typer.Option(None, "--codec", help="Codec directory: write the codec round trip instead."),
) -> None:
    """Speak text with espeak-ng (optionally through the codec: encode, decode) into a 16 kHz WAV."""
    import soundfile as sf

    from rvqspec.mini.speech import synthesize

    utt = synthesize(text, lang)
    audio = utt.audio
    if codec is not None:
        from rvqspec.mini.codec import RVQCodec
        c = RVQCodec.load(codec)
        audio = c.decode(c.encode(audio))
    sf.write(str(out), audio, utt.sample_rate)
    typer.echo(f"wrote {out} ({len(audio) / utt.sample_rate:.2f} s)")


@mini_app.command("evaluate")
def evaluate_command(
    data: Path = typer.Option(DEFAULT_DATA_DIR, "--data", help="Mini-world directory."),
    sentences: int = typer.Option(12, "--sentences", help="Held-out eval sentences per language."),
    seeds: int = typer.Option(1, "--seeds", help="Seeds per sentence."),
    langs: list[str] = opt.langs(),
    out: Path = opt.out_dir(None, "Write mini_eval.json and the depth-entropy plot (HTML) into this folder."),
    as_json: bool = opt.as_json(),
    threads: int = _THREADS,
    temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
    greedy: bool = opt.greedy(),
) -> None:
    """Intelligibility (CER/WER by the recognizer) of free-running AR synthesis per language, and the
    code predictor's entropy per codebook (the RVQ depth structure)."""
    import json

    import torch

    sampling = opt.sampling(temperature, top_k, top_p, greedy)
    if threads < 0:
        raise typer.BadParameter(f"--threads must be >= 0, got {threads}")
    if threads:
        # torch's default (one thread per core) ran 8x slower per sentence on the shared 2-core
        # machine while two other single-thread jobs were running (measured: 12.8 s vs 1.0 s)
        torch.set_num_threads(threads)
    from rvqspec.core.jsonfile import write_json_atomic
    from rvqspec.mini.evaluate import LANGUAGES, MiniEvalConfig, entropy_figure, evaluate_mini
    from rvqspec.mini.pipeline import MiniTTS
    from rvqspec.real.asr import load_recognizer

    bad = [x for x in langs or () if x not in LANGUAGES]
    if bad:
        typer.echo(f"error: --lang {bad[0]!r} is not a mini-world language ({', '.join(LANGUAGES)})", err=True)
        raise typer.Exit(2)
    tts = MiniTTS.load(data)
    rec = load_recognizer(Path(data) / "recognizer")
    res = evaluate_mini(tts, rec, Path(data) / "corpus",
                        MiniEvalConfig(sentences_per_language=sentences, seeds=tuple(range(seeds)),
                                       languages=tuple(dict.fromkeys(langs)) if langs else LANGUAGES),
                        sampling=sampling)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "mini_eval.json", res, indent=2)
        entropy_figure(res["depth_entropy"]).write_html(str(out / "depth_entropy.html"), include_plotlyjs=True)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
    else:
        for lang, r in res["intelligibility"].items():
            per = "-" if r.get("per") is None else f"{100 * r['per']:.1f}%"
            typer.echo(f"{lang}: n={r['n']} PER={per} CER={100 * r['cer']:.1f}% WER={100 * r['wer']:.1f}%")
        typer.echo("entropy per codebook (nats, tempered softmax): "
                   + " ".join(f"{e:.2f}" for e in res["depth_entropy"]["softmax"]))


def register(app: typer.Typer) -> None:
    app.add_typer(mini_app, name="mini")
