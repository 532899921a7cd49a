"""Streaming synthesis on the mini world: audio chunks come out while later frames are still being
decoded (the real-time setting of seed 000 §1: 12.5 frames, i.e. 200 sequential model calls, per
second of audio).

Incremental codec decoding, a causal window with a crossfade (in the manner of RTISI-LA, Zhu,
Beauregard & Wyse 2007). The mini codec's synthesis has two stages:

* magnitude (`RVQCodec.magnitude`): exact. Synthesis column j (10 ms apart) reads two log-mel
  sub-frames and every later step is per column, so a column computed as soon as its sub-frames
  exist equals the same column of the whole-utterance decode (up to float rounding of the batched
  matmuls; `tests/test_stream.py` checks 1e-4 relative).
* phase (Griffin-Lim): windowed. Each push runs Griffin-Lim over the last `context_columns`
  columns before the emitted point plus every column known so far; columns seen by the previous
  window start from that window's final phase, new ones from random phase drawn from the codec's
  seed. Samples are emitted up to `lookahead_columns` columns before the last known column (a
  sample is shaped by the columns within n_fft / 2 on either side); the first `crossfade` samples
  after the emitted point blend the previous window's estimate into the new one, so no sample
  once emitted changes and chunk borders carry no step.

Whole-utterance Griffin-Lim is itself only defined up to its random initial phase, so the stream
cannot equal it sample for sample; the stated tolerance is spectral: the log-mel distance
(`reference_log_mel_db`, dB RMS) between the concatenated stream and the whole-utterance decode
stays within 1.5x the distance between two whole-utterance decodes that differ only in their
initial phase, plus 0.5 dB (`tests/test_stream.py`, with a negative control that must fail).
The whole-utterance decoder scales the waveform down by 0.99 / peak when its peak passes 0.99
(Griffin-Lim output of mini utterances often does), which needs the whole signal; the stream
applies the causal form of that rule, the gain for the largest peak so far, ramped across each chunk
(and limits samples to +-0.99 where a ramp still overshoots), so its level matches the whole decode
from the utterance's loudest chunk on and can be louder before it.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch

from rvqspec.core.frame_loop import FrameCompleter, SynthesisStats, TalkerSteps, iter_frames
from rvqspec.core.sampling import Sampling
from rvqspec.mini.codec import RVQCodec, griffin_lim_from

PEAK = 0.99  # the whole-utterance decoder's peak limit (RVQCodec.synthesize)
# the stated tolerance of the stream against the whole-utterance decode (module docstring)
TOLERANCE_FACTOR = 1.5
TOLERANCE_DB = 0.5


@dataclass(frozen=True)
class StreamConfig:
    chunk_frames: int = 4          # frames (80 ms each) decoded before the codec runs again
    context_columns: int = 16      # Griffin-Lim columns (10 ms) of left context re-estimated per window
    lookahead_columns: int = 4     # columns held back: a sample needs the columns within n_fft / 2
    crossfade: int = 320           # samples blended from the previous window's estimate into the new one
    # Griffin-Lim iterations per window; None: the codec's (48). Columns carried over start from the
    # previous window's phase, so fewer iterations suffice: on the 4 benchmark sentences the log-mel
    # distance to the whole decode was 1.10-1.21 dB at 16 and 0.99-1.08 dB at 48, against 0.96-1.07 dB
    # between two whole decodes that differ only in their initial phase (chunks of 4 frames;
    # scripts/stream_tolerance.py, data/mini/bench/stream_tolerance.json)
    griffin_lim_iters: int | None = 16
    peak_limit: bool = True        # the causal peak gain (module docstring); False: raw Griffin-Lim samples
    threaded: bool = False         # run the frame loop in a producer thread (decoding overlaps it)

    def validate(self, codec: RVQCodec) -> None:
        c = codec.config
        if self.chunk_frames < 1:
            raise ValueError(f"chunk_frames must be >= 1, got {self.chunk_frames}")
        reach = c.n_fft // (2 * c.synth_hop)  # columns on each side that shape one sample
        if self.lookahead_columns < reach or self.context_columns < reach:
            raise ValueError(f"lookahead_columns {self.lookahead_columns} and context_columns {self.context_columns} "
                             f"must be >= {reach} (n_fft / 2 / synth_hop)")
        if not 0 <= self.crossfade <= (self.lookahead_columns - 1) * c.synth_hop:
            raise ValueError(f"crossfade {self.crossfade} must lie in [0, (lookahead_columns - 1) * synth_hop] "
                             f"so the blended samples were estimated inside the previous window")


class StreamingDecoder:
    """Incremental `RVQCodec.decode`: `push(codes)` frames as they are decoded, get new samples
    back; `flush()` at the end returns the rest. The concatenation has exactly the whole decode's
    length (T * hop samples)."""

    def __init__(self, codec: RVQCodec, config: StreamConfig = StreamConfig()) -> None:
        config.validate(codec)
        codec._check_fitted()
        self.codec, self.config = codec, config
        c = codec.config
        self.H = c.synth_hop
        self.up = c.sub_hop // c.synth_hop
        self.iters = c.griffin_lim_iters if config.griffin_lim_iters is None else config.griffin_lim_iters
        self.generator = torch.Generator().manual_seed(c.seed)
        self.lm = torch.empty(0, c.n_mels)  # (frames * S, M) log-mel sub-frames so far
        self.mag = torch.empty(c.n_fft // 2 + 1, 0)  # (F, columns) exact magnitude so far
        self.phase = torch.empty(c.n_fft // 2 + 1, 0)  # (F, columns) latest phase estimate per column
        self.frames = 0
        self.emitted = 0  # samples handed out
        self.tail = np.zeros(0, dtype=np.float32)  # the last window's estimate of the next samples
        self.done = False
        self.peak = 0.0  # largest |sample| emitted so far, before the gain
        self.gain: float | None = None

    def _columns(self, final: bool) -> int:
        """Columns whose magnitude is final: all of them at the end, else those whose second
        sub-frame exists (column j reads sub-frames floor(j / up) and floor(j / up) + 1)."""
        if final:
            return self.codec.synthesis_columns(self.frames)
        return max(0, (self.frames * self.codec.config.subframes - 1) * self.up)

    def push(self, codes) -> np.ndarray:
        """codes (n, Q) of the next n frames -> the samples that are now final (maybe none)."""
        if self.done:
            raise RuntimeError("StreamingDecoder: push after flush")
        codes = self.codec.check_codes(codes)
        if codes.shape[0]:
            c = self.codec.config
            feats = self.codec.decode_features(codes)  # (n, D)
            self.lm = torch.cat([self.lm, feats.reshape(-1, c.n_mels)])  # (frames * S, M)
            self.frames += codes.shape[0]
        return self._advance(final=False)

    def flush(self) -> np.ndarray:
        """The remaining samples, up to the whole decode's length."""
        out = self._advance(final=True)
        self.done = True
        return out

    def _advance(self, final: bool) -> np.ndarray:
        cfg, c = self.config, self.codec.config
        n_cols = self._columns(final)
        total_sub = self.frames * c.subframes
        if n_cols > self.mag.shape[1]:  # columns already computed are final: they never change
            new = self.codec.magnitude(self.lm, self.mag.shape[1], n_cols, total_sub)  # (F, n)
            self.mag = torch.cat([self.mag, new], 1)  # (F, n_cols)
        end = self.frames * c.hop if final else (n_cols - cfg.lookahead_columns) * self.H
        if end <= self.emitted:
            return np.zeros(0, dtype=np.float32)
        w0 = max(0, self.emitted // self.H - cfg.context_columns)
        w1 = n_cols
        mag = self.mag[:, w0:w1]  # (F, w)
        known = min(self.phase.shape[1], w1)
        fresh = torch.rand(mag.shape[0], w1 - known, generator=self.generator) * (2 * np.pi)  # (F, w1 - known)
        phase = torch.cat([self.phase[:, w0:known], fresh], 1)  # (F, w)
        length = (w1 - w0 - 1) * self.H  # samples w0*H .. (w1-1)*H: column centres
        wav, spec = griffin_lim_from(mag, phase, c.n_fft, self.H, self.codec.window, self.iters,
                                     c.griffin_lim_momentum, length)  # (length,), (F, w)
        self.phase = torch.cat([self.phase[:, :w0], spec.angle()], 1)  # (F, w1)
        seg = wav.numpy().astype(np.float32)
        off = w0 * self.H  # sample index of seg[0]
        if final:
            seg = np.pad(seg, (0, max(0, end - off - len(seg))))  # the last half column past the centres
        out = seg[self.emitted - off:end - off].copy()
        n = min(len(self.tail), len(out))
        if n:  # blend the previous window's estimate into this one
            r = (np.arange(n, dtype=np.float32) + 0.5) / n
            out[:n] = self.tail[:n] * (1 - r) + out[:n] * r
        self.tail = seg[end - off:end - off + cfg.crossfade].copy()
        self.emitted = end
        # causal form of the whole decoder's peak rule: the gain it would apply to the samples so far,
        # ramped across the chunk from the previous gain so a new peak never makes a step
        if not cfg.peak_limit:
            return out
        self.peak = max(self.peak, float(np.abs(out).max(initial=0.0)))
        gain = min(1.0, PEAK / self.peak) if self.peak > 0 else 1.0
        start = gain if self.gain is None else self.gain  # the first chunk starts at its own gain
        ramp = np.linspace(start, gain, len(out), dtype=np.float32)
        self.gain = gain
        return np.clip(out * ramp, -PEAK, PEAK)


@dataclass
class AudioChunk:
    """One piece of a stream: `audio` (n,) float32 at `sample_rate` starting at sample `start`."""

    audio: np.ndarray
    start: int
    frames: int          # frames decoded when the chunk was ready
    ready_s: float       # seconds since the stream started (the first `next()`)
    sample_rate: int
    final: bool = False

    @property
    def start_s(self) -> float:
        return self.start / self.sample_rate

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass(frozen=True)
class ChunkTiming:
    start: int           # first sample
    samples: int
    frames: int          # frames decoded when the chunk was ready
    ready_s: float       # seconds since the stream started


@dataclass
class StreamTrace:
    """What a stream did: when each chunk and each frame was ready, and the frame loop's stats."""

    chunks: list[ChunkTiming] = field(default_factory=list)
    stats: SynthesisStats = field(default_factory=SynthesisStats)
    frame_ready_s: list[float] = field(default_factory=list)  # when each frame's codes were complete
    frames: list[torch.Tensor] = field(default_factory=list)  # the (16,) codes of each frame

    @property
    def codes(self) -> torch.Tensor:
        """(T, 16) long: the codes the stream spoke."""
        return torch.stack(self.frames) if self.frames else torch.empty(0, 16, dtype=torch.long)


def _frames(tts, ids, sampling, generator, inner, stats, trace, t0, threaded: bool, talker_steps=None):
    """(t, frame) pairs from the frame loop, directly or through a producer thread."""
    loop = iter_frames(tts.talker, tts.code_predictor, ids, tts.codebook_size, sampling, generator, inner,
                       stats=stats, talker_steps=talker_steps)
    if not threaded:
        for t, frame in loop:
            trace.frame_ready_s.append(time.perf_counter() - t0)
            yield t, frame
        return
    q: queue.Queue = queue.Queue()
    stop = threading.Event()

    def produce():
        try:
            for item in loop:
                if stop.is_set():
                    return
                q.put((item, time.perf_counter() - t0))
            q.put(None)
        except BaseException as e:  # handed to the consumer, which raises it
            q.put(e)

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    try:
        while True:
            got = q.get()
            if got is None:
                return
            if isinstance(got, BaseException):
                raise got
            (t, frame), ready = got
            trace.frame_ready_s.append(ready)
            yield t, frame
    finally:
        stop.set()
        th.join()


def stream_mini(tts, text: str, lang: str = "en", *, seed: int = 0, sampling: Sampling = Sampling(),
                inner: FrameCompleter | None = None, config: StreamConfig = StreamConfig(),
                trace: StreamTrace | None = None, talker_steps: TalkerSteps | None = None) -> Iterator[AudioChunk]:
    """Chunks of `text` spoken by the mini model (`rvqspec.mini.pipeline.MiniTTS`) as its frames are
    decoded: every `config.chunk_frames` frames the codec decodes incrementally (`StreamingDecoder`)
    and the new samples are yielded. `inner`: AR (None) or a `SpeculativeCodePredictor`; the codes
    are those of `tts.synthesize(text, lang, seed=seed, ...)` with the same arguments. `trace`
    (filled in place) records chunk timing without the audio, and the frame loop's stats.
    `talker_steps`: the talker on a graph backend (`rvqspec.export.talker.make_talker_steps`)."""
    trace = trace if trace is not None else StreamTrace()
    t0 = time.perf_counter()
    ids = tts.text_ids(text, lang)
    sr = int(tts.codec.config.sample_rate)
    dec = StreamingDecoder(tts.codec, config)
    g = torch.Generator().manual_seed(seed)
    pending: list[torch.Tensor] = []

    def chunk(audio: np.ndarray, final: bool) -> AudioChunk:
        start = dec.emitted - len(audio)
        ch = AudioChunk(audio, start, dec.frames, time.perf_counter() - t0, sr, final)
        trace.chunks.append(ChunkTiming(start, len(audio), ch.frames, ch.ready_s))
        return ch

    for t, frame in _frames(tts, ids, sampling, g, inner, trace.stats, trace, t0, config.threaded, talker_steps):
        pending.append(frame)  # (1, 16)
        trace.frames.append(frame[0])
        if len(pending) == config.chunk_frames:
            audio = dec.push(torch.cat(pending))
            pending.clear()
            if len(audio):
                yield chunk(audio, False)
    rest = dec.push(torch.cat(pending)) if pending else np.zeros(0, np.float32)
    yield chunk(np.concatenate([rest, dec.flush()]), True)
