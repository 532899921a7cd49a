"""`rvqspec synthesize` and `rvqspec wer`: speech from the mini model or an official Qwen3-TTS
checkpoint (a directory with `speech_tokenizer/`), AR or speculative."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.core.defaults import NUM_CODES
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.export.talker import make_talker_steps


def _inner(tts, drafter: Optional[Path], tree: Optional[Path], skip_hash_check: bool = False, backend: str = "eager"):
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

    cp = tts.code_predictor
    d = None if drafter is None else load_drafter(drafter, cp, check_hash=not skip_hash_check)
    t = None if tree is None else SparseTree.load(tree)
    return make_inner(backend, cp, d, t)


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


def _synthesize_stream(tts, text, lang, seed, sampling, inner, out: Path, chunk_frames: int, play: bool,
                       talker_steps=None) -> None:
    """Write (and optionally play) the chunks of `rvqspec.stream` as they come; one JSON line at the end.
    `talker_steps`: the talker as an onnxruntime graph (`rvqspec.export.talker`) on the onnx backends."""
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
                                  config=StreamConfig(chunk_frames=chunk_frames), trace=trace,
                                  talker_steps=talker_steps):
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
                   lang: str = opt.lang(),
                   out: Path = opt.out(Path("out.wav"), "WAV file to write (16 kHz)."),
                   seed: int = typer.Option(0, "--seed", help="Seed of the sampling generator."),
                   data: Optional[Path] = typer.Option(None, "--data", help="Mini-world dir (default data/mini)."),
                   model: Optional[Path] = opt.model(None, "Model folder: the mini model (default DATA/model) or an "
                                                           "official checkpoint (a folder with speech_tokenizer/)."),
                   drafter: Optional[Path] = opt.drafter(None, "Drafter .safetensors: speculative mode."),
                   tree: Optional[Path] = opt.tree(None, "Tree JSON: speculative mode."),
                   skip_hash_check: bool = opt.skip_hash_check(),
                   threads: int = opt.threads(),
                   temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
                   greedy: bool = opt.greedy(),
                   speaker: Optional[str] = typer.Option(None, "--speaker", help=SPEAKER_HELP),
                   device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
                   dtype: Optional[str] = typer.Option(None, "--dtype", help=DTYPE_HELP),
                   stream: bool = typer.Option(False, "--stream", help="Decode and write audio chunk by chunk while "
                                               "frames are generated (OUT grows as OUT.partial, renamed when done)."),
                   chunk_frames: int = typer.Option(4, "--chunk-frames", help="Frames (80 ms) per streamed chunk."),
                   play: bool = typer.Option(False, "--play", help="With --stream: also play chunks through aplay, "
                                             "paplay or ffplay when one is installed."),
                   backend: str = typer.Option("eager", "--backend",
                                               help="Inner loop: eager | compiled (torch.compile graphs) | onnx | "
                                                    "onnx-loop (the whole speculative frame in one ONNX call); "
                                                    "with --stream the onnx backends run the talker step as a graph too."),
                   codes_out: Optional[Path] = typer.Option(None, "--codes-out",
                                                            help="Also write the frame codes (T, 16) as JSON here.")):
        """Synthesize TEXT with the mini model or an official checkpoint and write a WAV file."""
        import soundfile as sf
        import torch

        from rvqspec.mini.pipeline import MiniTTS
        from rvqspec.real.wer import TextItem, is_official_checkpoint

        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        opt.check_lang(lang)
        if not text.strip():
            raise typer.BadParameter("TEXT is empty: nothing to synthesize")
        torch.set_num_threads(threads)
        if is_official_checkpoint(model):
            if stream:
                raise typer.BadParameter("--stream: official checkpoints stream through rvqspec.stream(...) "
                                         "in Python; the command streams the mini model")
            # official checkpoints: the talker samples as its generation config says; --greedy makes
            # the code predictor greedy
            synth = _official(model, drafter, tree, [seed], not sampling.do_sample, device, dtype, speaker)
            res = synth(TextItem(text, lang), seed, "spec" if drafter or tree else "ar")
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(f".{out.name}.tmp")
            sf.write(str(tmp), res.audio, res.rate, format="WAV")
            tmp.replace(out)
            typer.echo(json.dumps(dict(out=str(out), seconds_audio=round(len(res.audio) / res.rate, 3),
                                       frames=int(res.codes.shape[0]),
                                       tokens_per_call=round(NUM_CODES * res.codes.shape[0] / max(res.calls, 1), 3))))
            return
        if chunk_frames < 1:
            raise typer.BadParameter(f"--chunk-frames must be >= 1, got {chunk_frames}")
        tts = MiniTTS.load(data, model_dir=model)
        inner = _inner(tts, drafter, tree, skip_hash_check, backend)
        if stream:
            steps = make_talker_steps(backend, tts.talker) if backend in ("onnx", "onnx-loop") else None
            _synthesize_stream(tts, text, lang, seed, sampling, inner, out, chunk_frames, play, steps)
            return
        syn = tts.synthesize(text, lang, seed=seed, sampling=sampling, inner=inner)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")  # a crash leaves no half-written WAV under the real name
        sf.write(str(tmp), syn.audio, syn.sample_rate, format="WAV")
        tmp.replace(out)
        if codes_out is not None:
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
            lang: str = opt.lang(),
            seeds: int = typer.Option(1, "--seeds", help="Seeds per sentence (0..seeds-1)."),
            data: Optional[Path] = typer.Option(None, "--data", help="Mini-world dir (default data/mini)."),
            model: Optional[Path] = opt.model(None, "Model folder (default DATA/model)."),
            recognizer: Optional[Path] = typer.Option(None, "--recognizer",
                                                      help="Recognizer dir: ours, or a transformers ASR model path."),
            drafter: Optional[Path] = opt.drafter(None, "Drafter .safetensors: speculative mode."),
            tree: Optional[Path] = opt.tree(None, "Tree JSON: speculative mode."),
            skip_hash_check: bool = opt.skip_hash_check(),
            threads: int = opt.threads(),
            temperature: float = opt.temperature(), top_k: int = opt.top_k(), top_p: float = opt.top_p(),
            greedy: bool = opt.greedy(),
            speaker: Optional[str] = typer.Option(None, "--speaker", help=SPEAKER_HELP),
            device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
            dtype: Optional[str] = typer.Option(None, "--dtype", help=DTYPE_HELP),
            out: Optional[Path] = opt.out(),
            as_json: bool = opt.as_json()):
        """Synthesize each line, transcribe it, report PER, WER and CER.

        PER (phoneme error rate against espeak-ng's phonemes of the text) is the mini world's
        headline; it needs a recognizer with a phoneme head (null otherwise). CER is the headline
        for ja/zh among the text scores."""
        import torch

        from rvqspec.mini.pipeline import MiniTTS, default_data_dir, intelligibility
        from rvqspec.real.asr import load_recognizer
        from rvqspec.real.wer import is_official_checkpoint, official_intelligibility

        sampling = opt.sampling(temperature, top_k, top_p, greedy)
        opt.check_lang(lang)
        if not texts.is_file():
            raise typer.BadParameter(f"{texts}: no such file")
        lines = [ln.strip() for ln in texts.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if not lines:
            raise typer.BadParameter(f"{texts}: no non-empty lines")
        torch.set_num_threads(threads)
        rec = load_recognizer(recognizer or (Path(data) if data else default_data_dir()) / "recognizer")
        if is_official_checkpoint(model):
            synth = _official(model, drafter, tree, range(seeds), not sampling.do_sample, device, dtype, speaker)
            res = official_intelligibility(synth, lines, lang, rec, "spec" if drafter or tree else "ar")
        else:
            tts = MiniTTS.load(data, model_dir=model)
            res = intelligibility(tts, lines, lang, rec, seeds=range(seeds), sampling=sampling,
                                  inner=_inner(tts, drafter, tree, skip_hash_check))
        per = "n/a (no phoneme head)" if res.get("per") is None else f"{100 * res['per']:.2f}%"
        opt.emit(res, as_json, out, f"{lang}: n={res['n']} PER={per} WER={100 * res['wer']:.2f}% "
                                    f"CER={100 * res['cer']:.2f}% tokens/call={res['tokens_per_call']:.2f}")
