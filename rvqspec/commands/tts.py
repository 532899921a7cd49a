"""`rvqspec synthesize` and `rvqspec wer`: speech from the mini model or an official Qwen3-TTS
checkpoint (a directory with `speech_tokenizer/`), AR or speculative."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def _inner(tts, drafter: Optional[Path], tree: Optional[Path]):
    """The inner loop: AR (no drafter/tree) or speculative over the same weights."""
    if drafter is None and tree is None:
        return None
    if drafter is None or tree is None:
        raise typer.BadParameter("speculative mode needs both --drafter and --tree")
    from rvqspec.core.drafters import load_drafter
    from rvqspec.core.speculative import SpeculativeCodePredictor
    from rvqspec.core.tree import SparseTree

    return SpeculativeCodePredictor(tts.code_predictor, load_drafter(drafter), SparseTree.from_json(tree.read_text()))


SPEAKER_HELP = "CustomVoice speaker (official checkpoints)"
DEVICE_HELP = "official checkpoints: model and speech tokenizer device (default: the accelerator, else cpu)"
DTYPE_HELP = "official checkpoints: bfloat16, float16 or float32 (default: bfloat16 on CUDA, else float32)"


def _official(model: Path, drafter, tree, seeds, greedy: bool, device, dtype, speaker):
    """An official checkpoint's synthesizer; bad input is one line and exit code 2."""
    from rvqspec.core.drafters import DrafterError
    from rvqspec.core.tree import TreeError
    from rvqspec.real.datasets import DatasetError
    from rvqspec.real.distributed import ScaleError
    from rvqspec.real.wer import official_synthesizer

    try:
        return official_synthesizer(model, drafter, tree, seeds=seeds, greedy=greedy, device=device, dtype=dtype,
                                    speaker=speaker)
    except (DatasetError, DrafterError, ScaleError, TreeError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command()
    def synthesize(text: str = typer.Argument(..., help="Text to speak."),
                   lang: str = typer.Option("en", "--lang", help="en, de, es, ru, ja (kana), zh"),
                   out: Path = typer.Option(Path("out.wav"), "--out", help="WAV file to write (16 kHz)."),
                   seed: int = typer.Option(0, "--seed"),
                   data: Optional[Path] = typer.Option(None, "--data", help="Mini-world dir (default data/mini)."),
                   model: Optional[Path] = typer.Option(None, "--model", help="Model dir (default DATA/model)."),
                   drafter: Optional[Path] = typer.Option(None, "--drafter", help="Drafter .safetensors: speculative mode."),
                   tree: Optional[Path] = typer.Option(None, "--tree", help="Tree JSON: speculative mode."),
                   greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of top-k sampling "
                                               "(official checkpoints: the code predictor's)."),
                   speaker: Optional[str] = typer.Option(None, "--speaker", help=SPEAKER_HELP),
                   device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
                   dtype: Optional[str] = typer.Option(None, "--dtype", help=DTYPE_HELP)):
        """Synthesize TEXT with the mini model or an official checkpoint and write a WAV file."""
        import soundfile as sf

        from rvqspec.mini.pipeline import MiniTTS
        from rvqspec.core.sampling import Sampling
        from rvqspec.real.wer import TextItem, is_official_checkpoint

        if is_official_checkpoint(model):
            synth = _official(model, drafter, tree, [seed], greedy, device, dtype, speaker)
            res = synth(TextItem(text, lang), seed, "spec" if drafter or tree else "ar")
            out.parent.mkdir(parents=True, exist_ok=True)
            sf.write(str(out), res.audio, res.rate)
            typer.echo(json.dumps(dict(out=str(out), seconds_audio=round(len(res.audio) / res.rate, 3),
                                       frames=int(res.codes.shape[0]),
                                       tokens_per_call=round(15 * res.codes.shape[0] / max(res.calls, 1), 3))))
            return
        tts = MiniTTS.load(data, model_dir=model)
        syn = tts.synthesize(text, lang, seed=seed, sampling=Sampling.greedy() if greedy else Sampling(),
                             inner=_inner(tts, drafter, tree))
        out.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(out), syn.audio, syn.sample_rate)
        typer.echo(json.dumps(dict(out=str(out), seconds_audio=round(len(syn.audio) / syn.sample_rate, 3),
                                   frames=syn.stats.frames, tokens_per_call=round(syn.stats.tokens_per_call, 3),
                                   synthesis_seconds=round(syn.seconds, 3))))

    @app.command()
    def wer(texts: Path = typer.Option(..., "--texts", help="UTF-8 file, one sentence per line."),
            lang: str = typer.Option("en", "--lang"),
            seeds: int = typer.Option(1, "--seeds", help="Seeds per sentence (0..seeds-1)."),
            data: Optional[Path] = typer.Option(None, "--data"),
            model: Optional[Path] = typer.Option(None, "--model"),
            recognizer: Optional[Path] = typer.Option(None, "--recognizer",
                                                      help="Recognizer dir: ours, or a transformers ASR model path."),
            drafter: Optional[Path] = typer.Option(None, "--drafter"),
            tree: Optional[Path] = typer.Option(None, "--tree"),
            speaker: Optional[str] = typer.Option(None, "--speaker", help=SPEAKER_HELP),
            device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
            dtype: Optional[str] = typer.Option(None, "--dtype", help=DTYPE_HELP),
            as_json: bool = typer.Option(False, "--json")):
        """Synthesize each line, transcribe it, report WER and CER (CER is the headline for ja/zh)."""
        from rvqspec.real.asr import load_recognizer
        from rvqspec.mini.pipeline import MiniTTS, default_data_dir, intelligibility
        from rvqspec.real.wer import is_official_checkpoint, official_intelligibility

        if not texts.exists():
            raise typer.BadParameter(f"{texts}: no such file")
        lines = [ln.strip() for ln in texts.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if not lines:
            raise typer.BadParameter(f"{texts}: no non-empty lines")
        rec = load_recognizer(recognizer or (Path(data) if data else default_data_dir()) / "recognizer")
        if is_official_checkpoint(model):
            synth = _official(model, drafter, tree, range(seeds), False, device, dtype, speaker)
            res = official_intelligibility(synth, lines, lang, rec, "spec" if drafter or tree else "ar")
        else:
            tts = MiniTTS.load(data, model_dir=model)
            res = intelligibility(tts, lines, lang, rec, seeds=range(seeds), inner=_inner(tts, drafter, tree))
        if as_json:
            typer.echo(json.dumps(res, indent=2, ensure_ascii=False))
        else:
            typer.echo(f"{lang}: n={res['n']} WER={100 * res['wer']:.2f}% CER={100 * res['cer']:.2f}% "
                       f"tokens/call={res['tokens_per_call']:.2f}")
