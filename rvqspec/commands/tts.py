"""`rvqspec synthesize` and `rvqspec wer`: speech from the mini model (AR or speculative)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rvqspec.core import defaults as _D


def _inner(tts, drafter: Optional[Path], tree: Optional[Path], backend: str = "eager"):
    """The inner loop: AR (no drafter/tree) or speculative over the same weights, on `backend`
    (rvqspec.export.backends: eager | compiled | onnx)."""
    from rvqspec.export.backends import BACKENDS

    if backend not in BACKENDS:
        raise typer.BadParameter(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if (drafter is None) != (tree is None):
        raise typer.BadParameter("speculative mode needs both --drafter and --tree")
    if drafter is None and backend == "eager":
        return None
    from rvqspec.core.drafters import load_drafter
    from rvqspec.core.tree import SparseTree
    from rvqspec.export.backends import make_inner

    d = None if drafter is None else load_drafter(drafter)
    t = None if tree is None else SparseTree.from_json(tree.read_text())
    return make_inner(backend, tts.code_predictor, d, t)


def _sampling(greedy: bool, temperature: float, top_k: int, top_p: float):
    from rvqspec.core.sampling import Sampling

    if greedy:
        return Sampling.greedy()
    try:
        return Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


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
                   greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of top-k sampling."),
                   temperature: float = typer.Option(_D.TEMPERATURE, "--temperature", help="Code predictor temperature."),
                   top_k: int = typer.Option(_D.TOP_K, "--top-k", help="Code predictor top-k (0: off)."),
                   top_p: float = typer.Option(_D.TOP_P, "--top-p", help="Code predictor top-p (1: off)."),
                   backend: str = typer.Option("eager", "--backend",
                                               help="Inner loop: eager | compiled (torch.compile graphs) | onnx."),
                   codes_out: Optional[Path] = typer.Option(None, "--codes-out",
                                                            help="Also write the frame codes (T, 16) as JSON here.")):
        """Synthesize TEXT with the mini model and write a WAV file."""
        import soundfile as sf

        from rvqspec.core.jsonfile import write_json_atomic
        from rvqspec.mini.pipeline import MiniTTS

        sampling = _sampling(greedy, temperature, top_k, top_p)
        tts = MiniTTS.load(data, model_dir=model)
        syn = tts.synthesize(text, lang, seed=seed, sampling=sampling, inner=_inner(tts, drafter, tree, backend))
        out.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(out), syn.audio, syn.sample_rate)
        if codes_out is not None:
            from dataclasses import asdict

            write_json_atomic(codes_out, dict(text=text, lang=lang, seed=seed, backend=backend, sampling=asdict(sampling),
                                              drafter=None if drafter is None else str(drafter),
                                              tree=None if tree is None else str(tree),
                                              codes=[[int(c) for c in row] for row in syn.codes.tolist()]))
        typer.echo(json.dumps(dict(out=str(out), seconds_audio=round(len(syn.audio) / syn.sample_rate, 3),
                                   frames=syn.stats.frames, tokens_per_call=round(syn.stats.tokens_per_call, 3),
                                   synthesis_seconds=round(syn.seconds, 3), backend=backend,
                                   codes_out=None if codes_out is None else str(codes_out))))

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
        """Synthesize each line, transcribe it, report WER and CER (CER is the headline for ja/zh)."""
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
            typer.echo(f"{lang}: n={res['n']} WER={100 * res['wer']:.2f}% CER={100 * res['cer']:.2f}% "
                       f"tokens/call={res['tokens_per_call']:.2f}")
