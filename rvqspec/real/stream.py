"""`rvqspec.stream`: audio chunks while the frames are still being decoded, for the mini pipeline
and for an official Qwen3-TTS model under `rvqspec.accelerate`.

The official pipeline (qwen_tts 0.1.1) decodes the whole utterance at the end
(`Qwen3TTSTokenizerV2Decoder.chunked_decode`: windows of 300 frames, each decoded with the 25
frames before it as left context and only its own samples kept). Streaming uses the same causal
window at chunk size: every `chunk_frames` frames, the speech tokenizer decodes the new frames with
`left_context` frames before them and keeps the new frames' samples (`WindowDecoder`). With the
official defaults (left_context 25) a stream therefore equals the official `chunked_decode` with
chunk_size = chunk_frames, and equals a whole-utterance forward exactly when the decoder's
receptive field reaches back at most `left_context` frames (`tests/test_stream_official.py`
checks both with a decoder of known receptive field, and a negative control that must differ).

The frames come from the accelerated code predictor (`AcceleratedModel.frame_listeners`): the
official generate call runs in a producer thread and the caller's thread decodes and yields.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

from rvqspec.core.sampling import Sampling
from rvqspec.mini.pipeline import MiniTTS
from rvqspec.mini.stream import AudioChunk, ChunkTiming, StreamConfig, StreamTrace, stream_mini
from rvqspec.real.official_pipeline import AcceleratedModel

LEFT_CONTEXT = 25  # frames; the official chunked_decode's left_context_size


class WindowDecoder:
    """Causal-window incremental decode with a speech tokenizer's public `decode` API
    (`decode([{"audio_codes": (W, 16)}]) -> ([wav (W * spf,)], sample_rate)`)."""

    def __init__(self, speech_tokenizer: Any, left_context: int = LEFT_CONTEXT) -> None:
        if left_context < 0:
            raise ValueError(f"left_context must be >= 0, got {left_context}")
        self.tokenizer, self.left_context = speech_tokenizer, left_context
        self.codes = torch.empty(0, 16, dtype=torch.long)  # (frames, 16)
        self.sample_rate: int | None = None
        self.emitted = 0  # samples handed out

    def push(self, codes: torch.Tensor) -> np.ndarray:
        """codes (n, 16) of the next n frames -> their samples."""
        codes = torch.as_tensor(codes).long()
        if codes.ndim != 2 or codes.shape[1] != 16:
            raise ValueError(f"codes must have shape (n, 16), got {tuple(codes.shape)}")
        if not codes.shape[0]:
            return np.zeros(0, dtype=np.float32)
        start = self.codes.shape[0]
        self.codes = torch.cat([self.codes, codes])
        lo = max(0, start - self.left_context)
        wavs, sr = self.tokenizer.decode([{"audio_codes": self.codes[lo:]}])
        wav = np.asarray(wavs[0], dtype=np.float32).ravel()
        W = self.codes.shape[0] - lo
        if len(wav) % W:
            raise ValueError(f"speech tokenizer returned {len(wav)} samples for {W} frames (not a whole number per frame)")
        spf = len(wav) // W
        self.sample_rate = int(sr)
        out = wav[(start - lo) * spf:]
        self.emitted += len(out)
        return out


def stream_official(handle: AcceleratedModel, call: Callable[[], Any], *, chunk_frames: int = 4,
                    left_context: int = LEFT_CONTEXT, speech_tokenizer: Any = None,
                    trace: StreamTrace | None = None) -> Iterator[AudioChunk]:
    """Chunks of what `call()` (one official generate call on the accelerated model, batch 1, e.g.
    `lambda: wrapper.generate_custom_voice(text, speaker=..., language=...)`) speaks, decoded every
    `chunk_frames` frames by the speech tokenizer (default: the model's `speech_tokenizer`).
    Frames from the codec EOS on are dropped, as the official generate drops them. The call's own
    return value lands in `trace.result`."""
    if chunk_frames < 1:
        raise ValueError(f"chunk_frames must be >= 1, got {chunk_frames}")
    if not handle.active:
        raise ValueError("stream_official: the accelerate handle has been restored; accelerate the model again")
    trace = trace if trace is not None else StreamTrace()
    tok = speech_tokenizer if speech_tokenizer is not None else _speech_tokenizer(handle.model)
    eos = int(handle.talker.config.codec_eos_token_id)
    dec = WindowDecoder(tok, left_context)
    q: queue.Queue = queue.Queue()
    t0 = time.perf_counter()
    ended = [False]

    def on_frame(c0: torch.Tensor, codes: torch.Tensor) -> None:
        if c0.numel() != 1:
            raise ValueError(f"stream_official streams batch 1, the call generates {c0.numel()} at once")
        if ended[0] or int(c0[0]) == eos:
            ended[0] = True
            return
        q.put((torch.cat([c0.view(1), codes.view(-1)]).long(), time.perf_counter() - t0))

    def produce() -> None:
        try:
            trace.__dict__["result"] = call()
            q.put(None)
        except BaseException as e:  # handed to the consumer, which raises it
            q.put(e)

    handle.frame_listeners.append(on_frame)
    th = threading.Thread(target=produce, daemon=True)
    th.start()
    pending: list[torch.Tensor] = []

    def chunk(audio: np.ndarray, final: bool) -> AudioChunk:
        ready = time.perf_counter() - t0
        start = dec.emitted - len(audio)
        trace.chunks.append(ChunkTiming(start, len(audio), len(trace.frames), ready))
        return AudioChunk(audio, start, len(trace.frames), ready, dec.sample_rate or 0, final)

    try:
        while True:
            got = q.get()
            if got is None:
                break
            if isinstance(got, BaseException):
                raise got
            frame, ready = got  # (16,)
            trace.frames.append(frame)
            trace.frame_ready_s.append(ready)
            pending.append(frame)
            if len(pending) == chunk_frames:
                audio = dec.push(torch.stack(pending))
                pending.clear()
                yield chunk(audio, False)
        yield chunk(dec.push(torch.stack(pending)) if pending else np.zeros(0, np.float32), True)
    finally:
        th.join()
        handle.frame_listeners.remove(on_frame)


def _speech_tokenizer(model: Any) -> Any:
    for obj in (model, getattr(model, "model", None)):
        tok = getattr(obj, "speech_tokenizer", None)
        if tok is not None:
            return tok
    raise ValueError(f"stream_official: {type(model).__name__} has no speech_tokenizer; pass speech_tokenizer=")


def stream(tts: Any, text: str | None = None, lang: str = "en", *, chunk_frames: int = StreamConfig.chunk_frames,
           seed: int = 0, sampling: Sampling = Sampling(), inner: Any = None, call: Callable[[], Any] | None = None,
           left_context: int = LEFT_CONTEXT, config: StreamConfig | None = None,
           trace: StreamTrace | None = None, talker_steps: Any = None) -> Iterator[AudioChunk]:
    """A generator of `AudioChunk`s (audio, start sample, frames decoded, seconds since the start).

    - `tts` a `MiniTTS`: speaks `text` in `lang` (AR, or speculative with inner=SpeculativeCodePredictor),
      decoding `chunk_frames` frames at a time (`rvqspec.mini.stream`); on the onnx backends pass
      inner=`rvqspec.export.backends.make_inner(...)` and talker_steps=`rvqspec.export.talker.make_talker_steps(...)`.
    - `tts` an `rvqspec.accelerate` handle: runs `call()` (one official generate call) and streams
      its frames through the model's speech tokenizer (`stream_official`).
    """
    if isinstance(tts, MiniTTS):
        if text is None:
            raise ValueError("stream: the mini pipeline needs text")
        cfg = dataclasses.replace(config or StreamConfig(), chunk_frames=chunk_frames)
        return stream_mini(tts, text, lang, seed=seed, sampling=sampling, inner=inner, config=cfg, trace=trace,
                           talker_steps=talker_steps)
    if isinstance(tts, AcceleratedModel):
        if call is None:
            raise ValueError("stream: an accelerated official model needs call= (a zero-argument generate call)")
        return stream_official(tts, call, chunk_frames=chunk_frames, left_context=left_context, trace=trace)
    raise TypeError(f"stream: expected a MiniTTS or an rvqspec.accelerate handle, got {type(tts).__name__}")
