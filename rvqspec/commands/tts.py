"""`rvqspec synthesize` and `rvqspec wer`: speech from the mini model (AR or speculative)."""
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
                   greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of top-k sampling.")):
        """Synthesize TEXT with the mini model and write a WAV file."""
        import soundfile as sf

        from rvqspec.mini.pipeline import MiniTTS
        from rvqspec.core.sampling import Sampling

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
            as_json: bool = typer.Option(False, "--json")):
        """Synthesize each line, transcribe it, report PER, WER and CER.

        PER (phoneme error rate against espeak-ng's phonemes of the text) is the mini world's
        headline; it needs a recognizer with a phoneme head (null otherwise). CER is the headline
        for ja/zh among the text scores."""
        from rvqspec.real.asr import load_recognizer
        from rvqspec.mini.pipeline import MiniTTS, default_data_dir, intelligibility

        if not texts.exists():
            raise typer.BadParameter(f"{texts}: no such file")
        lines = [ln.strip() for ln in texts.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if not lines:
            raise typer.BadParameter(f"{texts}: no non-empty lines")
        tts = MiniTTS.load(data, model_dir=model)
        rec = load_recognizer(recognizer or (Path(data) if data else default_data_dir()) / "recognizer")
        res = intelligibility(tts, lines, lang, rec, seeds=range(seeds), inner=_inner(tts, drafter, tree))
        if as_json:
            typer.echo(json.dumps(res, indent=2, ensure_ascii=False))
        else:
            per = "n/a (no phoneme head)" if res["per"] is None else f"{100 * res['per']:.2f}%"
            typer.echo(f"{lang}: n={res['n']} PER={per} WER={100 * res['wer']:.2f}% CER={100 * res['cer']:.2f}% "
                       f"tokens/call={res['tokens_per_call']:.2f}")
