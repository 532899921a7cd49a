"""Evaluation of pruned talkers as in seed 001's tables: intelligibility (WER/CER of English
held-out texts through the recognizer, several seeds), parameters, real-time factor, per-frame
latency and memory; the composition with the speculative code predictor (seed 000); and a
projection to the full-size 0.6B talker / code predictor from timings measured here.

Real-time factor (RTF) here = synthesis seconds / audio seconds (lower is faster; seed 001 reports
it this way), synthesis = the talker + code-predictor frame loop (codec decoding excluded, it is
the same for every variant). Audio seconds = frames / frame rate (12.5 Hz, Qwen3-TTS-12Hz).
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import torch
from plotly.subplots import make_subplots
from tqdm.auto import tqdm

from rvqspec.core.checkpoint import model_hash
from rvqspec.core.config import CodePredictorConfig, TalkerConfig
from rvqspec.core.defaults import K
from rvqspec.core.drafters import PositionOffsets, load_drafter
from rvqspec.core.jsonfile import portable_path, write_json_atomic
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder, Rope
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.measure.stats import paired_rate_difference
from rvqspec.mini.pipeline import MiniTTS, intelligibility
from rvqspec.real.asr import DEFAULT_RECOGNIZER, load_recognizer
from rvqspec.spade.importance import heldout_texts

FRAME_RATE = 12.5  # Hz: Qwen3-TTS-Tokenizer-12Hz (and the mini codec) emit 12.5 frames per second


@dataclass(frozen=True)
class EvalConfig:
    split: str = "eval"           # disjoint from the WLI subset ("validation")
    language: str = "en"
    texts: int = 40
    seeds: tuple[int, ...] = (0, 1)
    timing_texts: int = 4          # latency benchmark: first texts, every variant interleaved
    timing_reps: int = 3           # repetitions; the fastest per text counts (shared CPU)


# ---------------------------------------------------------------------------------------------
# measurement helpers
# ---------------------------------------------------------------------------------------------
class RssPeak:
    """Peak resident set size over a block, sampled from /proc/self/statm by a thread (torch's CPU
    allocator bypasses tracemalloc). `delta_mb` = peak - RSS at entry."""

    def __init__(self, interval: float = 0.002):
        self.interval = interval
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.interval)

    def __enter__(self) -> "RssPeak":
        gc.collect()
        self.start = self.peak = self.rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.peak = max(self.peak, self.rss())
        self._stop.set()
        self._thread.join()

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.start) / 2**20


class TimedInner:
    """Wraps a frame completer (AR code predictor or speculative one) and accumulates its time."""

    def __init__(self, inner):
        self.inner = inner
        self.seconds = 0.0
        self.frames = 0

    def generate_frame(self, talker_hidden, c0, **kw):
        t0 = time.perf_counter()
        out = self.inner.generate_frame(talker_hidden, c0, **kw)
        self.seconds += time.perf_counter() - t0
        self.frames += 1
        return out


def parameters(talker, code_predictor) -> dict:
    """Parameter counts (seed 001 Table 1): the talker's decoder layers, the whole talker, the code
    predictor and the total."""
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    layers = sum(p.numel() for p in talker.model.layers.parameters())
    return dict(talker_layers=talker.config.num_hidden_layers, talker_layer_params=layers, talker=n(talker),
                code_predictor=n(code_predictor), total=n(talker) + n(code_predictor))


def static_memory_bytes(talker, code_predictor, frames: int, dtype_bytes: int = 4) -> dict:
    """Exact resident bytes of what scales with the model: weights + the talker's KV cache for
    `frames` frames + the code predictor's 16-slot cache."""
    t, c = talker.config, code_predictor.config
    w = sum(p.numel() for p in talker.parameters()) + sum(p.numel() for p in code_predictor.parameters())
    kv_t = 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim * frames
    kv_c = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * c.num_code_groups
    return dict(weights_mb=w * dtype_bytes / 2**20, kv_cache_mb=(kv_t + kv_c) * dtype_bytes / 2**20,
                total_mb=(w + kv_t + kv_c) * dtype_bytes / 2**20)


# ---------------------------------------------------------------------------------------------
# the mini world
# ---------------------------------------------------------------------------------------------
def evaluate_variant(tts, texts: Sequence[str], recognizer, seeds: Sequence[int] = (0, 1), language: str = "en",
                     inner=None, name: str = "", progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """WER/CER, RTF, per-frame latency split, parameters and memory of one pipeline variant."""
    timed = TimedInner(inner if inner is not None else tts.code_predictor)
    tts.synthesize(texts[0], language, seed=12345, sampling=sampling, inner=timed, decode=False)  # warm-up
    timed.seconds, timed.frames = 0.0, 0
    with RssPeak() as mem:
        r = intelligibility(tts, texts, language, recognizer, seeds=seeds, sampling=sampling, inner=timed,
                            progress=progress)
    frames = sum(c["frames"] for c in r["clips"])
    synth = sum(c["seconds"] for c in r["clips"])
    audio = frames / FRAME_RATE
    mean_frames = frames / max(len(r["clips"]), 1)
    return dict(name=name, wer=r["wer"], cer=r["cer"], n=r["n"], seeds=list(seeds), language=language,
                tokens_per_call=r["tokens_per_call"], frames=frames, synth_seconds=synth, audio_seconds=audio,
                rtf=synth / audio, ms_per_frame=1e3 * synth / frames,
                inner_ms_per_frame=1e3 * timed.seconds / frames,
                talker_ms_per_frame=1e3 * (synth - timed.seconds) / frames,
                params=parameters(tts.talker, tts.code_predictor),
                memory=dict(**static_memory_bytes(tts.talker, tts.code_predictor, int(round(mean_frames))),
                            rss_delta_mb=mem.delta_mb),
                clips=r["clips"])


def load_inner(code_predictor, drafter_path: str | Path | None, tree_path: str | Path | None, num_offsets: int = K):
    """A SpeculativeCodePredictor over `code_predictor` with the saved drafter and tree, or (when
    none are given) zero position offsets and a small chain tree. Returns (inner, description)."""
    c = code_predictor.config
    if drafter_path:
        drafter = load_drafter(drafter_path, code_predictor)
        d_desc = portable_path(drafter_path)
    else:
        drafter = PositionOffsets.zeros(num_offsets, c.hidden_size, c.vocab_size)
        d_desc = f"PositionOffsets.zeros(K={num_offsets})"
    if tree_path:
        tree = SparseTree.load(tree_path)
        t_desc = portable_path(tree_path)
    else:
        tree = SparseTree.chain(min(3, drafter.num_offsets))
        t_desc = f"SparseTree.chain({min(3, drafter.num_offsets)})"
    return SpeculativeCodePredictor(code_predictor, drafter, tree), dict(drafter=d_desc, tree=t_desc,
                                                                         tree_nodes=len(tree))


def fingerprint(path: str | Path | None) -> str | None:
    """Short sha256 over the files of a directory (or one file): cached results name the exact
    recognizer they were scored with, so a retrained recognizer invalidates them."""
    if path is None:
        return None
    p = Path(path)
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def timing_benchmark(pipelines: dict, texts: Sequence[str], language: str = "en", reps: int = 3, seed: int = 0,
                     progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """Per-frame latency of several pipelines {name: (tts, inner or None)}, interleaved: every
    repetition runs each text through every pipeline in turn, so load from other processes on a
    shared CPU hits all variants alike; the minimum over repetitions is the uncontended estimate.
    Frames per text are the same for every variant (the text stream is frame-aligned)."""
    for name, (tts, inner) in pipelines.items():  # warm-up
        tts.synthesize(texts[0], language, seed=seed, sampling=sampling, inner=TimedInner(inner or tts.code_predictor),
                       decode=False)
    bar = tqdm(total=reps * len(texts) * len(pipelines), desc="latency (interleaved)", disable=not progress)
    per_text: dict[str, list[list[tuple[float, float, int]]]] = {n: [[] for _ in texts] for n in pipelines}
    for _ in range(reps):
        for i, text in enumerate(texts):
            for name, (tts, inner) in pipelines.items():
                timed = TimedInner(inner or tts.code_predictor)
                syn = tts.synthesize(text, language, seed=seed, sampling=sampling, inner=timed, decode=False)
                per_text[name][i].append((syn.seconds, timed.seconds, syn.stats.frames))
                bar.update()
    bar.close()
    out = {}
    for name, texts_runs in per_text.items():
        best = [min(r, key=lambda x: x[0]) for r in texts_runs]  # fastest repetition per text
        frames = sum(b[2] for b in best)
        total, inner_s = sum(b[0] for b in best), sum(b[1] for b in best)
        med = sum(statistics.median(x[0] for x in r) for r in texts_runs)
        out[name] = dict(ms_per_frame=1e3 * total / frames, inner_ms_per_frame=1e3 * inner_s / frames,
                         talker_ms_per_frame=1e3 * (total - inner_s) / frames, rtf=total / (frames / FRAME_RATE),
                         ms_per_frame_median=1e3 * med / frames, frames=frames, texts=len(texts), reps=reps)
    return out


# what a row keeps of a student's spade.json (written by `save_student`): how it was made
DISTILLATION_KEYS = ("keep_layers", "targets", "selection", "steps", "seconds", "config", "validation_before",
                     "validation_after")


def distillation_of(model_dir: str | Path) -> dict | None:
    """The recipe of a distilled student (its spade.json, `DISTILLATION_KEYS`), None for a model
    that is not one (the teacher) or whose spade.json says it was not distilled."""
    f = Path(model_dir) / "spade.json"
    if not f.is_file():
        return None
    info = json.loads(f.read_text())
    return {k: info[k] for k in DISTILLATION_KEYS if k in info} if info.get("distilled") else None


def evaluate_models(models: dict[str, str | Path], corpus_dir: str | Path, recognizer_dir: str | Path | None,
                    config: EvalConfig = EvalConfig(), spec: Sequence[str] = (), drafter: str | Path | None = None,
                    tree: str | Path | None = None, data_dir: str | Path | None = None,
                    progress: bool = True, cache_dir: str | Path | None = None,
                    sampling: Sampling = Sampling()) -> dict:
    """Evaluate each named model directory with the AR code predictor, and those named in `spec`
    also with the speculative one: WER/CER (all texts x seeds), then latency/RTF from an
    interleaved timing benchmark (`timing_benchmark`) on the first `config.timing_texts` texts.
    Returns dict(config, rows=[...]); a row's `rtf`/`ms_per_frame` come from the benchmark and
    the timings of the WER pass are kept as `*_wer_pass`."""
    texts = heldout_texts(corpus_dir, config.split, config.language, config.texts)

    rec_id = fingerprint(recognizer_dir or DEFAULT_RECOGNIZER)
    rec = load_recognizer(recognizer_dir)
    pipelines, meta, inner_desc = {}, {}, None
    for name, model_dir in models.items():
        tts = MiniTTS.load(data_dir, model_dir=model_dir)
        pipelines[f"{name} / AR"] = (tts, None)
        meta[f"{name} / AR"] = dict(model=name, model_dir=portable_path(model_dir), inner="AR")
        made = distillation_of(model_dir)
        if made is not None:
            meta[f"{name} / AR"]["distillation"] = made
        if name in spec:
            inner, inner_desc = load_inner(tts.code_predictor, drafter, tree)
            pipelines[f"{name} / speculative"] = (tts, inner)
            meta[f"{name} / speculative"] = dict(model=name, model_dir=portable_path(model_dir), inner="speculative")

    rows = []
    for label, (tts, inner) in pipelines.items():
        # a WER pass is reused from cache_dir when model weights, inner loop and config all match
        key = dict(label=label, talker=model_hash(tts.talker), code_predictor=model_hash(tts.code_predictor),
                   recognizer=rec_id,
                   inner=inner_desc if meta[label]["inner"] == "speculative" else "AR",
                   config={k: v for k, v in asdict(config).items() if not k.startswith("timing_")}, texts=texts,
                   sampling=asdict(sampling))
        f = Path(cache_dir) / (label.replace(" / ", "__").replace("/", "_") + ".json") if cache_dir else None
        cached = json.loads(f.read_text()) if f is not None and f.exists() else None
        if cached is not None and cached.get("key") == json.loads(json.dumps(key)):
            row = cached["row"]
        else:
            row = evaluate_variant(tts, texts, rec, config.seeds, config.language, inner=inner, name=label,
                                   progress=progress, sampling=sampling)
            for k in ("rtf", "ms_per_frame", "inner_ms_per_frame", "talker_ms_per_frame"):
                row[f"{k}_wer_pass"] = row.pop(k)
            if f is not None:
                write_json(dict(key=key, row=row), f)
        rows.append(dict(row, **meta[label]))
    timing = {}
    if config.timing_texts > 0:
        timing = timing_benchmark(pipelines, texts[:config.timing_texts], config.language, config.timing_reps,
                                  progress=progress, sampling=sampling)
    for row in rows:
        t = timing.get(row["name"])
        if t is None:  # no benchmark: the WER pass's own timings
            row.update({k: row[f"{k}_wer_pass"] for k in ("rtf", "ms_per_frame", "inner_ms_per_frame",
                                                          "talker_ms_per_frame")})
            continue
        row.update(rtf=t["rtf"], ms_per_frame=t["ms_per_frame"], inner_ms_per_frame=t["inner_ms_per_frame"],
                   talker_ms_per_frame=t["talker_ms_per_frame"], ms_per_frame_median=t["ms_per_frame_median"])
    return dict(config=asdict(config), sampling=asdict(sampling), texts=len(texts), speculative=inner_desc,
                timing=timing, rows=rows,
                recognizer=dict(path=portable_path(recognizer_dir or DEFAULT_RECOGNIZER), fingerprint=rec_id))


# ---------------------------------------------------------------------------------------------
# full-size projection
# ---------------------------------------------------------------------------------------------
def _random_module(cls, cfg, seed: int = 0):
    """A module with N(0, 0.02) weights and unit norms, built without the slow default init."""
    with torch.device("meta"):
        m = cls(cfg)
    m = m.to_empty(device="cpu")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif "text_embedding" in name:
                continue  # never read by a decoding step
            else:
                p.normal_(0.0, 0.02, generator=g)
        for mod in m.modules():
            if isinstance(mod, Rope):
                mod.inv_freq = Rope(mod.inv_freq.shape[0] * 2, cfg.rope_theta).inv_freq
    return m.eval()


def _count_meta(cls, cfg) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in cls(cfg).parameters())


@torch.inference_mode()
def project_full_size(preset: str = "0.6b", keep_layers: int = 14, context: int = 300, tree_nodes: int = 8,
                      tokens_per_call: dict | None = None, reps: int = 10, threads: int = 1,
                      progress: bool = True, talker_config=None, cp_config=None) -> dict:
    """Time, in one run, a single-token talker step (KV cache of `context` positions) of the full
    talker and of one with `keep_layers` layers, the full-size code predictor's AR frame
    (`generate_frame`: prefill + 14 steps) and its speculative frame projected from the calls per
    frame measured on the mini world (prefill + rounds of one tree call of q = tree_nodes + 1
    tokens each); projected RTF per variant = frame seconds * 12.5 frames/s. All calls are timed
    round robin, `reps` rounds, and the fastest round of each counts (shared CPU).

    `tokens_per_call` maps a variant label ('teacher', 'student') to the mini world's tokens per
    call of the speculative code predictor (15 / calls per frame)."""
    torch.set_num_threads(threads)
    full = talker_config or TalkerConfig.from_name(preset)  # (configs given: tests on tiny sizes)
    cpc = cp_config or CodePredictorConfig.from_name(preset)
    depths = {"full": full.num_hidden_layers, "pruned": keep_layers}
    out: dict = dict(preset=preset, context=context, threads=threads, reps=reps, frame_rate=FRAME_RATE,
                     tree_nodes=tree_nodes, talker={}, code_predictor={})
    steps = tqdm(total=3, desc=f"full-size {preset} timings", disable=not progress)
    talkers, calls = {}, {}
    for label, L in depths.items():
        cfg = replace(full, num_hidden_layers=L)
        params = _count_meta(CodeDecoder, cfg)
        with RssPeak() as mem:
            talker = _random_module(CodeDecoder, replace(cfg, text_vocab_size=16))  # text table unused by a step
            cache = talker.new_cache(1, context + 1)
            cache.k.normal_()
            cache.v.normal_()
            x = torch.randn(1, 1, cfg.hidden_size) * 0.02  # (1, 1, H)
            pos = torch.tensor([[context]])
            slots = torch.tensor([context])
            mask = torch.zeros(1, 1, 1, context + 1)  # the step sees all context + 1 slots
            call = (lambda t=talker, c=cache: t(x, pos, c, slots, mask))
            call()
        talkers[label], calls[label] = (talker, cache), call
        layer_params = params - _count_meta(CodeDecoder, replace(cfg, num_hidden_layers=0))
        kv_mb = 2 * L * cfg.num_key_value_heads * cfg.head_dim * context * 4 / 2**20
        out["talker"][label] = dict(layers=L, params=params, layer_params=layer_params,
                                    weights_mb_fp32=params * 4 / 2**20, kv_cache_mb_fp32=kv_mb,
                                    rss_delta_mb=mem.delta_mb,
                                    rss_note="build + one step, measured without the text embedding table "
                                             "(not read by a step; counted in params/weights_mb)")
        steps.update()
    # code predictor: AR frame, prefill, single step and tree calls at every query length needed
    cp = _random_module(MultiCodeDecoder, cpc, seed=1)
    emb = torch.nn.Embedding(full.vocab_size, full.hidden_size)
    cp.set_c0_embedding(emb)
    h = torch.randn(1, 1, full.hidden_size) * 0.02
    c0 = torch.tensor([[5]])
    g = torch.Generator().manual_seed(0)
    nodes_needed = sorted({int(tree_nodes)} | {int(v[1]) for v in (tokens_per_call or {}).values()
                                                if isinstance(v, (list, tuple))})
    Lc = 16 + max(nodes_needed) + 1
    ccache = cp.new_cache(1, Lc)

    def cp_call(q: int, start: int):
        x = torch.randn(1, q, full.hidden_size) * 0.02  # (1, q, H)
        mask = torch.zeros(1, 1, q, Lc)
        pos, sl = (torch.arange(q) + start).view(1, q), torch.arange(start, start + q)
        heads = [min(start + i, 14) for i in range(q)]
        return lambda: cp(x, pos, ccache, sl, mask, heads=heads)

    calls["cp AR frame"] = lambda: cp.generate_frame(h, c0, Sampling(), g)
    calls["cp prefill"] = cp_call(2, 0)
    calls["cp single step"] = cp_call(1, 3)
    for n in nodes_needed:
        calls[f"cp tree {n}"] = cp_call(n + 1, 3)
    for call in calls.values():
        call()  # warm-up
    steps.update()
    # Round robin over every timed call, `reps` rounds: load from other processes on a shared CPU
    # hits all of them alike; the fastest round of each is its least disturbed estimate.
    times = {label: [] for label in calls}
    for _ in range(reps):
        for label, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - t0)
    fastest = {label: 1e3 * min(ts) for label, ts in times.items()}
    median = {label: 1e3 * statistics.median(ts) for label, ts in times.items()}
    for label in depths:
        out["talker"][label].update(step_ms=fastest[label], step_ms_median=median[label])
    tree_ms = {str(n): fastest[f"cp tree {n}"] for n in nodes_needed}
    steps.update()
    steps.close()
    out["code_predictor"] = dict(params=sum(p.numel() for p in cp.parameters()), ar_frame_ms=fastest["cp AR frame"],
                                 ar_frame_ms_median=median["cp AR frame"], prefill_call_ms=fastest["cp prefill"],
                                 single_step_call_ms=fastest["cp single step"],
                                 tree_call_ms=tree_ms[str(int(tree_nodes))], tree_call_q=int(tree_nodes) + 1,
                                 tree_call_ms_by_nodes=tree_ms)
    del talkers, calls
    gc.collect()
    return project_variants(out, tokens_per_call or {})


def project_variants(proj: dict, tokens_per_call: dict) -> dict:
    """(Re)compute the projected variants of `project_full_size` timings for the given speculative
    tokens per call: frame = talker step + inner loop, inner loop AR = measured generate_frame,
    speculative = prefill call + (calls - 1) tree calls with calls = 15 / tokens per call."""
    cp = proj["code_predictor"]
    variants = []
    for label, t in proj["talker"].items():
        variants.append(dict(talker=label, layers=t["layers"], inner="AR", talker_ms=t["step_ms"],
                             inner_ms=cp["ar_frame_ms"], calls_per_frame=15.0))
        for who, k in tokens_per_call.items():
            # k: tokens per call measured with the default tree, or [tokens per call, tree nodes]
            k, nodes = (float(k[0]), int(k[1])) if isinstance(k, (list, tuple)) else (float(k), proj["tree_nodes"])
            by_nodes = cp.get("tree_call_ms_by_nodes", {})
            if str(nodes) not in by_nodes:
                raise ValueError(f"project_variants: no tree-call timing for {nodes} nodes (have {sorted(by_nodes)}); "
                                 "rerun project_full_size with that tree size")
            calls = 15.0 / k
            sp_ms = cp["prefill_call_ms"] + max(calls - 1.0, 0.0) * by_nodes[str(nodes)]
            variants.append(dict(talker=label, layers=t["layers"], inner=f"speculative ({who}: {k:.2f} tokens/call, "
                                                                         f"N={nodes})",
                                 talker_ms=t["step_ms"], inner_ms=sp_ms, calls_per_frame=calls, tree_nodes=nodes))
    for v in variants:
        v["frame_ms"] = v["talker_ms"] + v["inner_ms"]
        v["projected_rtf"] = v["frame_ms"] / 1e3 * proj["frame_rate"]
    base = variants[0]["frame_ms"]
    for v in variants:
        v["speedup_vs_full_ar"] = base / v["frame_ms"]
    return dict(proj, tokens_per_call=dict(tokens_per_call), variants=variants)


# ---------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------
def markdown_table(rows: Sequence[dict]) -> str:
    """Seed 001 Table 1/2 analogue: one line per variant; changes relative to the teacher's AR row
    (the unmodified pipeline) when there is one. Memory = exact weights + KV cache bytes; the RSS
    delta of the WER pass stays in the JSON only (at a few MB it is below the allocator's noise)."""
    base = next((r for r in rows if r.get("model") == "teacher" and r.get("inner") == "AR"), None)
    head = ("| variant | layers | params (total) | params vs teacher | WER % | CER % | RTF | ms/frame (talker + inner) "
            "| speed-up | tokens/call | weights+KV MB |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        p, m = r["params"], r["memory"]
        dp = f"{100 * (p['total'] / base['params']['total'] - 1):+.1f}%" if base else "-"
        sp = speedup_text(base["ms_per_frame"] / r["ms_per_frame"]) if base else "-"
        lines.append(f"| {r['name']} | {p['talker_layers']} | {p['total'] / 1e6:.3f} M | {dp} "
                     f"| {100 * r['wer']:.2f} | {100 * r['cer']:.2f} | {r['rtf']:.3f} "
                     f"| {r['ms_per_frame']:.1f} ({r['talker_ms_per_frame']:.1f} + {r['inner_ms_per_frame']:.1f}) "
                     f"| {sp} | {r['tokens_per_call']:.2f} | {m['total_mb']:.2f} |")
    return head + "\n".join(lines) + "\n"


def projection_table(proj: dict) -> str:
    """Two markdown tables: the projected variants, then the talker sizes (seed 001 Table 1 columns)."""
    head = ("| talker | inner loop | talker ms/step | inner ms/frame | calls/frame | frame ms | projected RTF "
            "| speed-up |\n|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {v['layers']} layers | {v['inner']} | {v['talker_ms']:.1f} | {v['inner_ms']:.1f} "
             f"| {v['calls_per_frame']:.2f} | {v['frame_ms']:.1f} | {v['projected_rtf']:.3f} "
             f"| {speedup_text(v['speedup_vs_full_ar'])} |" for v in proj["variants"]]
    t = proj["talker"]
    full = t.get("full")
    size = ["", "| talker | params | params vs full | decoder-layer params | weights MB (fp32) "
                "| KV cache MB (fp32) | RSS delta MB (build + step) |", "|---|---|---|---|---|---|---|"]
    for label, r in t.items():
        rel = f"{100 * (r['params'] / full['params'] - 1):+.1f}%" if full else "-"
        size.append(f"| {r['layers']} layers | {r['params'] / 1e6:.1f} M | {rel} | {r['layer_params'] / 1e6:.1f} M "
                    f"| {r['weights_mb_fp32']:.0f} | {r['kv_cache_mb_fp32']:.1f} | {r['rss_delta_mb']:.0f} |")
    cp = proj["code_predictor"]
    trees = ", ".join(f"N={n}: {ms:.1f} ms" for n, ms in cp.get("tree_call_ms_by_nodes", {}).items())
    size.append(f"\nCode predictor: {cp['params'] / 1e6:.1f} M parameters; AR frame {cp['ar_frame_ms']:.1f} ms, "
                f"prefill call {cp['prefill_call_ms']:.1f} ms, single step {cp['single_step_call_ms']:.1f} ms, "
                f"tree call (q = N + 1) {trees}.")
    return head + "\n".join(lines) + "\n" + "\n".join(size) + "\n"


def speedup_text(ratio: float) -> str:
    """'1.54x', or '0.71x (slowdown)' below 1: a ratio under 1 is named a slowdown wherever shown."""
    return f"{ratio:.2f}x" + (" (slowdown)" if ratio < 1 else "")


def add_paired_differences(rows: list[dict], against: str, n: int = 2000, seed: int = 0) -> None:
    """Add to each row (but the reference) its WER/CER minus the AR row of model `against`, with
    paired bootstrap 95% intervals over the same clips (`measure.stats.paired_rate_difference`)."""
    ref = next((r for r in rows if r["model"] == against and r["inner"] == "AR"), None)
    if ref is None:
        raise ValueError(f"no AR row of model {against!r} to compare against")
    for r in rows:
        if r is not ref:
            r.update(paired_rate_difference(ref["clips"], r["clips"], n, seed), against=against)


def results_figure(rows: Sequence[dict]):
    """WER/CER and RTF per variant (bars)."""
    names = [r["name"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("WER / CER (%), English held-out", "real-time factor (lower = faster)"))
    fig.add_bar(x=names, y=[100 * r["wer"] for r in rows], name="WER", row=1, col=1)
    fig.add_bar(x=names, y=[100 * r["cer"] for r in rows], name="CER", row=1, col=1)
    fig.add_bar(x=names, y=[r["talker_ms_per_frame"] * FRAME_RATE / 1e3 for r in rows], name="RTF: talker", row=1, col=2)
    fig.add_bar(x=names, y=[r["inner_ms_per_frame"] * FRAME_RATE / 1e3 for r in rows], name="RTF: code predictor",
                row=1, col=2)
    fig.update_layout(barmode="group", height=480, title="SPADE on the mini talker (seed 001)")
    fig.update_layout(**{"xaxis2": dict(categoryorder="array", categoryarray=names)})
    fig.data[2].update(offsetgroup="rtf")
    fig.data[3].update(offsetgroup="rtf", base=[r["talker_ms_per_frame"] * FRAME_RATE / 1e3 for r in rows])
    return fig


def write_json(obj, path: str | Path) -> Path:
    """Write JSON via a temporary file and an atomic rename (numpy scalars as floats)."""
    return write_json_atomic(path, obj, indent=2, default=float)
