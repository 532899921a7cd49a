"""`rvqspec bench stream`: streaming synthesis with AR and speculative decoding side by side, and the
seed's real-time budget (seed 000 §1: >= 200 sequential model calls per second of audio, 12.5
talker + 187.5 code-predictor calls; ~88 with speculation at 2.47 tokens per call).

Per stream (one sentence, one mode) it records:
* ttfa_ms: time to first audio, from the call to the first chunk (text front end included);
* rtf: wall-clock of the whole stream / seconds of audio (< 1 is faster than real time);
* talker_calls_per_audio_s, predictor_calls_per_audio_s: model calls counted at the decoder stack
  (`rvqspec.core.model.decoder_stack`, the one function every talker and code-predictor pass runs
  through), per second of audio;
* host_ms_per_frame: wall-clock per frame outside those decoder-stack passes (embeddings, LM heads,
  sampling, acceptance and tree bookkeeping, codec decoding, chunking).
AR and speculative streams alternate sentence by sentence (and which goes first alternates too), so
a change in machine load hits both; p50 / p95 are over all streams of a mode.

`full_size_projection` covers the full-size architecture (random weights, 0.6B talker and code
predictor): acceptance cannot be measured on random weights, so it times the talker step, the q = 1
predictor step and the q = N + 1 verify call interleaved and projects per-frame cost, RTF and TTFA
from a stated tokens-per-call figure (a committed acceptance table or the seed's), labelled as such.
No codec runs at full size (the 12 Hz speech tokenizer's weights are not available here).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

import rvqspec.core.model as core_model
import rvqspec.core.speculative as core_spec
from rvqspec.core.config import CodePredictorConfig, TalkerConfig
from rvqspec.core.defaults import BUDGET, NUM_CODES
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder, causal_mask
from rvqspec.core.sampling import Sampling
from rvqspec.export.backends import GraphInner
from rvqspec.export.host import timed_call
from rvqspec.mini.stream import StreamConfig, StreamTrace, stream_mini

FRAME_RATE = 12.5  # Hz, Qwen3-TTS 12 Hz tokenizer
SEED_TOKENS_PER_CALL = 2.47  # seed 000 abstract and Table 2 (iii), position offsets
SEED_CALLS_PER_S = {"ar": 200.0, "spec": 88.0}  # seed 000 §1

SENTENCES = (("The quick brown fox jumps over the lazy dog.", "en"),
             ("I would like a cup of tea, please.", "en"),
             ("Where is the nearest train station?", "en"),
             ("She sells sea shells by the sea shore.", "en"))


@contextlib.contextmanager
def model_clock(talker: CodeDecoder, code_predictor: MultiCodeDecoder) -> Iterator[dict]:
    """Count and time every decoder-stack pass of `talker` and `code_predictor` while active."""
    orig = core_model.decoder_stack
    acc = {"talker_calls": 0, "predictor_calls": 0, "model_s": 0.0}
    t_layers, p_layers = talker.model.layers, code_predictor.model.layers

    def timed(layers, *args, **kwargs):
        t0 = time.perf_counter()
        out = orig(layers, *args, **kwargs)
        acc["model_s"] += time.perf_counter() - t0
        if layers is t_layers:
            acc["talker_calls"] += 1
        elif layers is p_layers:
            acc["predictor_calls"] += 1
        return out

    core_model.decoder_stack = core_spec.decoder_stack = timed
    try:
        yield acc
    finally:
        core_model.decoder_stack = core_spec.decoder_stack = orig


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q))


def _sequential_passes(inner, stats) -> int:
    """Code-predictor forward passes in sequence (the seed's budget counts these): the eager decoders
    count theirs; a whole-frame AR graph call holds 15 passes, a whole-round graph call one."""
    if isinstance(inner, GraphInner) and not inner.speculative:
        return NUM_CODES * stats.frames
    return stats.inner_calls


def run_stream(tts, text: str, lang: str, inner, config: StreamConfig, seed: int, sampling: Sampling,
               talker_steps=None) -> dict:
    """One stream, measured: the row `summarize` aggregates, plus its chunk timeline. Eager passes are
    counted and timed at the decoder stack (`model_clock`), graph calls by their `TimedCall`."""
    tr = StreamTrace()
    inner_call, talker_call = timed_call(inner), timed_call(talker_steps)
    graphs = [c for c in (inner_call, talker_call) if c is not None]
    before = {id(c): len(c.times) for c in graphs}

    def new_calls(c) -> list[float]:
        return [] if c is None else c.times[before[id(c)]:]

    with model_clock(tts.talker, tts.code_predictor) as clock:
        t0 = time.perf_counter()
        n = 0
        first = None
        for ch in stream_mini(tts, text, lang, seed=seed, sampling=sampling, inner=inner, config=config, trace=tr,
                              talker_steps=talker_steps):
            if first is None and len(ch.audio):
                first = time.perf_counter() - t0
            n += len(ch.audio)
        wall = time.perf_counter() - t0
    audio_s = n / tts.codec.config.sample_rate
    frames = tr.stats.frames
    passes = _sequential_passes(inner, tr.stats)  # the decoder's own count
    return {"text": text, "lang": lang, "frames": frames, "audio_s": audio_s, "wall_s": wall,
            "ttfa_ms": 1e3 * (first if first is not None else wall), "rtf": wall / audio_s,
            "talker_calls": clock["talker_calls"] + len(new_calls(talker_call)),
            "predictor_calls": clock["predictor_calls"] if inner_call is None else passes,
            "predictor_calls_reported": passes,  # a cross-check of the decoder-stack count (eager)
            "graph_calls": sum(len(new_calls(c)) for c in graphs),
            "host_ms_per_frame": 1e3 * (wall - clock["model_s"] - sum(sum(new_calls(c)) for c in graphs)) / frames,
            "tokens_per_call": NUM_CODES * frames / max(passes, 1),
            "timeline": [{"start_s": c.start / tts.codec.config.sample_rate,
                          "seconds": c.samples / tts.codec.config.sample_rate, "ready_s": c.ready_s,
                          "frames": c.frames} for c in tr.chunks]}


def summarize(rows: list[dict]) -> dict:
    audio = sum(r["audio_s"] for r in rows)
    frames = sum(r["frames"] for r in rows)
    ttfa = [r["ttfa_ms"] for r in rows]
    rtf = [r["rtf"] for r in rows]
    return {"streams": len(rows), "frames": frames, "audio_s": round(audio, 3),
            "ttfa_ms_p50": round(_pct(ttfa, 50), 2), "ttfa_ms_p95": round(_pct(ttfa, 95), 2),
            "rtf": round(sum(r["wall_s"] for r in rows) / audio, 4),
            "rtf_p50": round(_pct(rtf, 50), 4), "rtf_p95": round(_pct(rtf, 95), 4),
            "talker_calls_per_audio_s": round(sum(r["talker_calls"] for r in rows) / audio, 2),
            "predictor_calls_per_audio_s": round(sum(r["predictor_calls"] for r in rows) / audio, 2),
            "predictor_calls": sum(r["predictor_calls"] for r in rows),
            "predictor_calls_reported": sum(r["predictor_calls_reported"] for r in rows),
            "calls_per_audio_s": round(sum(r["talker_calls"] + r["predictor_calls"] for r in rows) / audio, 2),
            "host_ms_per_frame": round(sum(r["host_ms_per_frame"] * r["frames"] for r in rows) / frames, 3),
            "graph_calls_per_frame": round(sum(r["graph_calls"] for r in rows) / frames, 3),
            "tokens_per_call": round(NUM_CODES * frames / max(1, sum(r["predictor_calls"] for r in rows)), 4)}


def bench_stream(tts, spec, sentences: Sequence[tuple[str, str]] = SENTENCES, repeats: int = 2,
                 config: StreamConfig = StreamConfig(), seed: int = 0, sampling: Sampling = Sampling(),
                 warmup: bool = True, progress: bool = True, ar=None, talker_steps=None,
                 backend: str = "eager") -> dict:
    """AR and `spec` (the speculative inner loop: a SpeculativeCodePredictor, or a whole-round graph of
    `rvqspec.export.backends.make_inner`) streamed side by side. `ar`: the AR inner loop (None: the
    eager code predictor; or a whole-frame graph); `talker_steps`: the talker on a graph backend
    (`rvqspec.export.talker.make_talker_steps`), shared by both modes; `backend` labels the result."""
    modes = {"ar": ar, "spec": spec}
    if warmup:  # first calls pay allocation and the text front end's cache; not measured
        for inner in modes.values():
            run_stream(tts, sentences[0][0], sentences[0][1], inner, config, seed, sampling, talker_steps)
    rows: dict[str, list] = {"ar": [], "spec": []}
    jobs = [(r, i) for r in range(repeats) for i in range(len(sentences))]
    for k, (r, i) in enumerate(tqdm(jobs, desc="bench stream", disable=not progress)):
        order = ("ar", "spec") if k % 2 == 0 else ("spec", "ar")
        text, lang = sentences[i]
        for mode in order:
            rows[mode].append(run_stream(tts, text, lang, modes[mode], config, seed + r, sampling, talker_steps))
    out = {mode: summarize(rs) for mode, rs in rows.items()}
    out["backend"] = backend
    out["spec_over_ar_rtf"] = round(out["ar"]["rtf"] / out["spec"]["rtf"], 4)  # > 1: speculative is faster
    out["spec_over_ar_label"] = "speedup" if out["spec_over_ar_rtf"] >= 1 else "slowdown"
    out["timeline"] = {mode: rows[mode][0]["timeline"] for mode in rows}  # the first sentence, first repeat
    out["timeline_sentence"] = rows["ar"][0]["text"]
    out["seed_calls_per_audio_s"] = dict(SEED_CALLS_PER_S)
    return out


# ---- full-size projection ------------------------------------------------------------------------

def full_size_projection(tokens_per_call: dict[str, float], name: str = "0.6b", budget: int = BUDGET,
                         dtype: torch.dtype = torch.float32, repeats: int = 10, warmup: int = 3,
                         chunk_frames: int = StreamConfig.chunk_frames, seed: int = 0,
                         configs: tuple[TalkerConfig, CodePredictorConfig] | None = None) -> dict:
    """Random-weight full-size talker + code predictor: median time of a talker step (q = 1 at
    position 64), a predictor step (q = 1) and a verify call (q = budget + 1), interleaved, and
    per acceptance source the projected stream:

        AR frame   = talker + 15 * step
        spec frame = talker + step (the q = 2 prefill, timed as a step) + (15 / tpc - 1) * verify
        rtf = frame / 80 ms,  ttfa = chunk_frames * frame (codec not included)

    tokens_per_call: label -> tokens per call (e.g. {"seed 000 Table 2 (iii)": 2.47}); `configs`
    overrides the preset (smoke tests)."""
    torch.manual_seed(seed)
    tcfg, ccfg = configs or (TalkerConfig.from_name(name), CodePredictorConfig.from_name(name))
    talker = CodeDecoder(tcfg).to(dtype).eval()
    cp = MultiCodeDecoder(ccfg).to(dtype).eval()
    L, P = 128, 64
    tcache = talker.new_cache(1, L)
    tpos = torch.arange(L).view(1, L)
    tmask = causal_mask(tpos, L, dtype)
    q = budget + 1
    S = ccfg.num_code_groups + q
    ccache = cp.new_cache(1, S)
    cpos = torch.arange(S).view(1, S)
    cmask = causal_mask(cpos, S, dtype)
    x_t = torch.randn(1, 1, tcfg.hidden_size, dtype=dtype)  # (1, 1, E)
    x_1 = torch.randn(1, 1, ccfg.talker_hidden_size, dtype=dtype)  # (1, 1, E)
    x_q = torch.randn(1, q, ccfg.talker_hidden_size, dtype=dtype)  # (1, q, E)
    m = 5  # a mid-frame round

    def talker_step():
        talker(x_t, tpos[:, P:P + 1], tcache, tpos[0, P:P + 1], tmask[:, :, P:P + 1])

    def cp_step():
        cp(x_1, cpos[:, m:m + 1], ccache, cpos[0, m:m + 1], cmask[:, :, m:m + 1], heads=[m])

    def verify():
        cp(x_q, cpos[:, m:m + q], ccache, cpos[0, m:m + q], cmask[:, :, m:m + q], heads=[m] * q)

    fns = {"talker_step": talker_step, "predictor_step": cp_step, "verify": verify}
    ts: dict[str, list] = {k: [] for k in fns}
    with torch.inference_mode():
        for _ in range(warmup):
            for f in fns.values():
                f()
        for _ in range(repeats):  # interleaved: load changes hit all three
            for k, f in fns.items():
                t0 = time.perf_counter()
                f()
                ts[k].append(time.perf_counter() - t0)
    med = {k: 1e3 * statistics.median(v) for k, v in ts.items()}
    ar_frame = med["talker_step"] + NUM_CODES * med["predictor_step"]
    out = {"model": name if configs is None else "custom", "dtype": str(dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
           "budget": budget, "verify_q": q, "repeats": repeats, "weights": "random",
           "measured_ms": {k: round(v, 3) for k, v in med.items()},
           "ar": _projected(ar_frame, NUM_CODES, chunk_frames, "measured per-call times, AR: 15 predictor calls"),
           "spec": {}}
    for label, tpc in tokens_per_call.items():
        calls = NUM_CODES / tpc
        frame = med["talker_step"] + med["predictor_step"] + (calls - 1) * med["verify"]
        out["spec"][label] = _projected(frame, calls, chunk_frames,
                                        f"projected: acceptance {tpc:.3f} tokens/call from {label}")
        out["spec"][label]["tokens_per_call"] = tpc
    return out


def _projected(frame_ms: float, predictor_calls_per_frame: float, chunk_frames: int, source: str) -> dict:
    return {"source": source, "frame_ms": round(frame_ms, 3), "rtf": round(frame_ms / (1e3 / FRAME_RATE), 4),
            "ttfa_ms_p50": round(chunk_frames * frame_ms, 2), "ttfa_ms_p95": None,
            "talker_calls_per_audio_s": FRAME_RATE,
            "predictor_calls_per_audio_s": round(FRAME_RATE * predictor_calls_per_frame, 2),
            "host_ms_per_frame": None}
