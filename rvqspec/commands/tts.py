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


PLAYERS = (("aplay", "-q", "-t", "raw", "-f", "FLOAT_LE", "-c", "1", "-r", "{rate}"),
           ("paplay", "--raw", "--format=float32le", "--channels=1", "--rate={rate}"),
           ("ffplay", "-nodisp", "-autoexit", "-loglevel", "quiet", "-f", "f32le", "-ar", "{rate}", "-ch_layout", "mono",
            "-i", "-"))


def _player(rate: int):
    """A raw float32 PCM player on stdin (the first of PLAYERS found on PATH), or None."""
    import shutil
    import subprocess

    for cmd in PLAYERS:
        if shutil.which(cmd[0]):
            return subprocess.Popen([a.format(rate=rate) for a in cmd], stdin=subprocess.PIPE)
    return None


def _synthesize_stream(tts, text, lang, seed, sampling, inner, out: Path, chunk_frames: int, play: bool) -> None:
    """Write (and optionally play) the chunks of `rvqspec.stream` as they come; one JSON line at the end."""
    import os

    import soundfile as sf

    from rvqspec.mini.stream import StreamConfig, StreamTrace, stream_mini

    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".partial")
    rate = int(tts.codec.config.sample_rate)
    player = _player(rate) if play else None
    trace = StreamTrace()
    n = 0
    try:
        with sf.SoundFile(str(part), "w", samplerate=rate, channels=1, format="WAV", subtype="PCM_16") as f:
            for ch in stream_mini(tts, text, lang, seed=seed, sampling=sampling, inner=inner,
                                  config=StreamConfig(chunk_frames=chunk_frames), trace=trace):
                f.write(ch.audio)
                f.flush()
                n += len(ch.audio)
                if player is not None and player.stdin is not None:
                    player.stdin.write(ch.audio.astype("<f4").tobytes())
                    player.stdin.flush()
        os.replace(part, out)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    finally:
        if player is not None and player.stdin is not None:
            player.stdin.close()
            player.wait()
    first = next((c for c in trace.chunks if c.samples), None)
    typer.echo(json.dumps(dict(out=str(out), seconds_audio=round(n / rate, 3), frames=trace.stats.frames,
                               tokens_per_call=round(trace.stats.tokens_per_call, 3), chunks=len(trace.chunks),
                               ttfa_ms=round(1e3 * first.ready_s, 1) if first else None,
                               synthesis_seconds=round(trace.chunks[-1].ready_s, 3),
                               played=player is not None if play else None)))


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
                   stream: bool = typer.Option(False, "--stream", help="Decode and write audio chunk by chunk while "
                                               "frames are generated (OUT grows as OUT.partial, renamed when done)."),
                   chunk_frames: int = typer.Option(4, "--chunk-frames", help="Frames (80 ms) per streamed chunk."),
                   play: bool = typer.Option(False, "--play", help="With --stream: also play chunks through aplay, "
                                             "paplay or ffplay when one is installed.")):
        """Synthesize TEXT with the mini model and write a WAV file."""
        import soundfile as sf

        from rvqspec.mini.pipeline import MiniTTS
        from rvqspec.core.sampling import Sampling

        if chunk_frames < 1:
            typer.echo(f"error: --chunk-frames must be >= 1, got {chunk_frames}", err=True)
            raise typer.Exit(2)
        tts = MiniTTS.load(data, model_dir=model)
        if stream:
            _synthesize_stream(tts, text, lang, seed, Sampling.greedy() if greedy else Sampling(),
                               _inner(tts, drafter, tree), out, chunk_frames, play)
            return
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
