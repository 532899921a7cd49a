"""AR baseline latency of the code predictor: ours vs the official HF `generate` loop vs the
memory-bandwidth floor, on the same weights and dtype, in one run (the machine is shared and
noisy, so only same-run ratios mean much).

Measured per dtype in interleaved rounds (each round times one official frame, one of our frames,
a few single steps and one bandwidth sample, so all see the same load; medians over the rounds
after warm-up rounds, plus paired per-round ratios):
- `ours_step_ms`: one single-token `MultiCodeDecoder.forward` (q=1, 16-slot static cache, one head);
- `ours_frame_ms`: one whole `generate_frame` (prefill q=2 + 14 steps + sampling); per call = /15;
- `official_frame_ms`: `Qwen3TTSTalkerCodePredictorModelForConditionalGeneration.generate(
   max_new_tokens=15)` with the deployed subtalker sampling; per call = /15;
- `compiled_frame_ms` / `compiled_step_ms`: the same frame and single step through
  `rvqspec.core.compiled.CompiledCodePredictor` (Inductor, frozen prepacked weights; compiled before
  the timed rounds, compile seconds reported as `compile_s`);
- `onnx_frame_<v>_ms`: the whole frame (`FrameGraph`) as one onnxruntime call, fp32 weights or 8-bit
  weights with int8 dot products (`rvqspec.export.quantize.quantize_w8`), exported before the timed
  rounds; `onnx_frame_w8_greedy_codes_agree`: frames whose greedy codes equal the fp32 graph's;
- `matmul_stack_ms`: only the matmuls one q=1 call does (7 per layer + one head), same weights:
  what is left of a step once every other op is free (the kernels' own efficiency);
- `floor_ms`: weight bytes one call reads (`CodePredictorConfig.params_per_call`) / the read
  bandwidth measured in the same run (summing a float32 tensor much larger than the caches).
"""
from __future__ import annotations

import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from dataclasses import asdict, dataclass, field

import torch
from tqdm import tqdm

from rvqspec.core.checkpoint import build_from_state_dict
from rvqspec.core.compiled import CompileConfig, CompiledCodePredictor
from rvqspec.core.config import CodePredictorConfig
from rvqspec.core.model import MultiCodeDecoder, causal_mask
from rvqspec.core.sampling import Sampling
from rvqspec.export.backends import compiled_call
from rvqspec.export.host import graph_ar_frame
from rvqspec.export.onnx import OnnxGraph, export_module
from rvqspec.export.quantize import quantize_w8
from rvqspec.export.wrappers import frame_graph as make_frame_graph
from rvqspec.real.official import import_official

# Light at import time (the CLI reads BenchARConfig defaults): torch is imported in the functions.
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class BenchARConfig:
    preset: str = "0.6b"          # CodePredictorConfig.from_name(preset), random weights
    calls: int = 200              # timed single-step calls (spread over the rounds)
    frames: int = 20              # timed rounds = frames of ours and of the official loop each
    warmup: int = 3               # untimed rounds first
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    threads: int = 2
    batch: int = 1
    bandwidth_mib: int = 1024     # size of the tensor summed to measure read bandwidth
    official: bool = True         # also time the official generate loop
    compiled: bool = True         # also time the compiled predictor (needs a C++ compiler)
    compiled_autotune: bool = CompileConfig.max_autotune  # Inductor max_autotune for it (off: faster compile)
    frame_graph: bool = False     # also time the whole frame as ONE compiled graph call (FrameGraph)
    frame_graph_autotune: bool = False  # Inductor max_autotune for it (frozen weights either way)
    onnx_frame: tuple[str, ...] = ()  # also time the whole frame as ONE onnxruntime call: "fp32", "w8" (float32 only)
    seed: int = 0
    c0_vocab: int = 3072          # talker codec vocabulary (the c0 table)
    sampling: dict = field(default_factory=dict)  # Sampling(**sampling); {} = deployed subtalker defaults


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def make_bandwidth_probe(mib: int):
    """A function returning one read-bandwidth sample (bytes/s): sum a float32 tensor of `mib` MiB,
    far larger than the CPU caches, so the sum streams from DRAM."""
    x = torch.ones(mib * 2 ** 20 // 4, dtype=torch.float32)  # (N,)
    x.sum()
    return lambda: x.numel() * 4 / _timed(x.sum)


def _official_predictor(cfg: CodePredictorConfig, seed: int):
    """The official code predictor module (random init, fixed seed) for this config."""
    _, C = import_official()
    official_cfg = cfg.to_official()
    official_cfg.pop("model_type", None)
    cp_cfg = C.Qwen3TTSTalkerCodePredictorConfig(**official_cfg)
    talker_cfg = C.Qwen3TTSTalkerConfig(hidden_size=cfg.talker_hidden_size, code_predictor_config=cp_cfg,
                                        num_code_groups=cfg.num_code_groups,
                                        rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 1],
                                                      "interleaved": True})
    M, _ = import_official()
    torch.manual_seed(seed)
    return M.Qwen3TTSTalkerCodePredictorModelForConditionalGeneration(cp_cfg, talker_cfg).eval()


def run_bench_ar(bc: BenchARConfig = BenchARConfig(), cfg: CodePredictorConfig | None = None,
                 progress: bool = True) -> dict:
    """Run the benchmark; returns a JSON-able dict (see module docstring for the fields)."""
    cfg = cfg or CodePredictorConfig.from_name(bc.preset)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(bc.threads)
    workdir = Path(tempfile.mkdtemp(prefix="rvqspec-bench-ar-")) if bc.onnx_frame else None  # ONNX exports
    try:
        probe = make_bandwidth_probe(bc.bandwidth_mib)
        per_call = cfg.params_per_call()
        result = {"config": asdict(cfg), "bench": {k: (list(v) if isinstance(v, tuple) else v)
                                                   for k, v in asdict(bc).items()},
                  "torch": torch.__version__, "machine": platform.machine(), "threads": bc.threads,
                  "params_per_call": per_call, "dtypes": {}}
        base = _official_predictor(cfg, bc.seed) if bc.official else None
        g = torch.Generator().manual_seed(bc.seed)
        c0_table = torch.nn.Embedding(bc.c0_vocab, cfg.talker_hidden_size)  # stands in for the talker table
        for name in bc.dtypes:
            if name not in DTYPES:
                raise ValueError(f"unknown dtype {name!r}; choose from {list(DTYPES)}")
            dtype = getattr(torch, name)
            if base is not None:
                off = base.to(dtype)
                ours = build_from_state_dict(MultiCodeDecoder, cfg, dict(off.state_dict()))  # the same tensors
            else:
                torch.manual_seed(bc.seed)
                ours = MultiCodeDecoder(cfg).to(dtype).eval()
            c0 = torch.nn.Embedding(c0_table.num_embeddings, cfg.talker_hidden_size).to(dtype)
            with torch.no_grad():
                c0.weight.copy_(c0_table.weight)
            ours.set_c0_embedding(c0)
            B = bc.batch
            th = torch.randn(B, 1, cfg.talker_hidden_size, generator=g).to(dtype)  # (B, 1, E)
            c0_ids = torch.randint(0, c0.num_embeddings, (B, 1), generator=g)

            # single step at position 8 (head 7), as inside the AR loop
            cache = ours.new_cache(B, cfg.num_code_groups)
            x = torch.randn(B, 1, cfg.talker_hidden_size, generator=g).to(dtype)
            pos = torch.full((B, 1), 8)
            mask = causal_mask(pos[:1], cfg.num_code_groups, dtype)
            slots = torch.tensor([8])
            frame_gen = torch.Generator().manual_seed(bc.seed + 1)
            s = Sampling(**bc.sampling)
            emb = torch.cat([th, c0(c0_ids)], 1)  # (B, 2, E)

            def step():
                with torch.inference_mode():
                    ours(x, pos, cache, slots, mask, heads=7)

            def frame():
                ours.generate_frame(th, c0_ids, s, frame_gen)

            # Reference: only the q=1 matmuls one call must do (same weights, no attention, norms or
            # bookkeeping): the best an eager PyTorch step could reach with these kernels.
            mats = [lin.weight for layer in ours.model.layers for lin in (
                layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
                layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)] + [ours.lm_head[7].weight]
            vecs = [torch.randn(B, 1, w.shape[1], generator=g).to(dtype) for w in mats]

            def matmul_stack():
                with torch.inference_mode():
                    for w, v in zip(mats, vecs):
                        torch.nn.functional.linear(v, w)

            compiled_frame = compiled_step = None
            compile_s = None
            if bc.compiled:
                comp = CompiledCodePredictor(ours, CompileConfig(max_autotune=bc.compiled_autotune))
                t0 = time.perf_counter()
                comp.generate_frame(th, c0_ids, s, frame_gen)  # compiles the prefill and step graphs
                compile_s = time.perf_counter() - t0

                def compiled_frame():
                    comp.generate_frame(th, c0_ids, s, frame_gen)

                def compiled_step():  # one q=1 call at position 8 (head 7), like `step`
                    comp.step_logits(x, 8)

            graph_frame = None
            if bc.frame_graph:
                if B != 1:
                    raise ValueError(f"frame_graph times one row per frame; got batch={B}")
                fg = make_frame_graph(ours)
                gcall = compiled_call(fg, CompileConfig(max_autotune=bc.frame_graph_autotune))
                t0 = time.perf_counter()
                graph_ar_frame(gcall, fg, th, int(c0_ids[0, 0]), s, frame_gen)  # compiles the frame graph
                graph_compile_s = time.perf_counter() - t0

                def graph_frame():  # c1..c15 in one compiled call, Gumbel noise drawn on the host
                    graph_ar_frame(gcall, fg, th, int(c0_ids[0, 0]), s, frame_gen)

            onnx_frames: dict = {}
            onnx_info: dict = {}
            if bc.onnx_frame and name == "float32":
                onnx_frames, onnx_info = _onnx_frames(ours, bc, th, int(c0_ids[0, 0]), s, frame_gen, workdir)

            def official_frame():
                with torch.inference_mode():
                    off.generate(inputs_embeds=emb, max_new_tokens=cfg.num_code_groups - 1, do_sample=s.do_sample,
                                 top_k=s.top_k, top_p=s.top_p, temperature=s.temperature)

            # Interleaved rounds: each round times one official frame, one of our frames, a few of
            # our single steps and one bandwidth sample, so all of them see the same machine load
            # (the machine is shared); per-round ratios are paired.
            steps_per_round = max(1, bc.calls // max(1, bc.frames))
            t = {"step": [], "frame": [], "official": [], "bw": [], "mm": [], "cframe": [], "cstep": [], "gframe": [],
                 **{f"oframe_{v}": [] for v in onnx_frames}}
            for rnd in tqdm(range(bc.warmup + bc.frames), desc=f"bench ar {name}", file=sys.stderr,
                            disable=not progress, leave=False):
                sample = {"official": _timed(official_frame) if base is not None else None,
                          "frame": _timed(frame),
                          "step": statistics.median(_timed(step) for _ in range(steps_per_round)),
                          "mm": _timed(matmul_stack), "bw": probe(),
                          "cframe": _timed(compiled_frame) if compiled_frame else None,
                          "cstep": (statistics.median(_timed(compiled_step) for _ in range(steps_per_round))
                                    if compiled_step else None),
                          "gframe": _timed(graph_frame) if graph_frame else None,
                          **{f"oframe_{v}": _timed(f) for v, f in onnx_frames.items()}}
                if rnd >= bc.warmup:
                    for k, v in sample.items():
                        t[k].append(v)
            med = {k: statistics.median(v) for k, v in t.items() if v and v[0] is not None}
            bytes_el = torch.empty(0, dtype=dtype).element_size()
            wbytes = per_call["total"] * bytes_el
            step_ms, frame_ms = 1e3 * med["step"], 1e3 * med["frame"]
            floor_ms = 1e3 * wbytes / med["bw"]
            r = {"rounds": bc.frames, "steps_per_round": steps_per_round,
                 "ours_step_ms": step_ms, "matmul_stack_ms": 1e3 * med["mm"],
                 "ours_step_over_matmul_stack": step_ms / (1e3 * med["mm"]), "ours_frame_ms": frame_ms, "ours_frame_per_call_ms": frame_ms / 15,
                 "read_bandwidth_GBps": med["bw"] / 1e9, "weight_bytes_per_call": wbytes, "floor_ms": floor_ms,
                 "ours_step_over_floor": step_ms / floor_ms,
                 "ours_frame_per_call_over_floor": frame_ms / 15 / floor_ms,
                 "ours_step_over_floor_paired": statistics.median(
                     st * b / wbytes for st, b in zip(t["step"], t["bw"]))}
            if base is not None:
                off_ms = 1e3 * med["official"]
                r.update(official_frame_ms=off_ms, official_per_call_ms=off_ms / 15,
                         speedup_frame_vs_official=off_ms / frame_ms,
                         speedup_frame_vs_official_paired=statistics.median(
                             o / f for o, f in zip(t["official"], t["frame"])),
                         speedup_step_vs_official_per_call=(off_ms / 15) / step_ms)
            if compiled_frame is not None:
                cf_ms, cs_ms = 1e3 * med["cframe"], 1e3 * med["cstep"]
                r.update(compile_s=compile_s, compiled_frame_ms=cf_ms, compiled_frame_per_call_ms=cf_ms / 15,
                         compiled_step_ms=cs_ms, compiled_step_over_floor=cs_ms / floor_ms,
                         compiled_frame_per_call_over_floor=cf_ms / 15 / floor_ms,
                         compiled_speedup_vs_eager_paired=statistics.median(
                             f / c for f, c in zip(t["frame"], t["cframe"])))
                if base is not None:
                    r.update(compiled_speedup_frame_vs_official=off_ms / cf_ms,
                             compiled_speedup_frame_vs_official_paired=statistics.median(
                                 o / c for o, c in zip(t["official"], t["cframe"])))
            if graph_frame is not None:
                gf_ms = 1e3 * med["gframe"]
                r.update(graph_compile_s=graph_compile_s, graph_frame_ms=gf_ms,
                         graph_speedup_vs_eager_paired=statistics.median(f / c for f, c in zip(t["frame"], t["gframe"])))
                if base is not None:
                    r.update(graph_speedup_frame_vs_official=off_ms / gf_ms,
                             graph_speedup_frame_vs_official_paired=statistics.median(
                                 o / c for o, c in zip(t["official"], t["gframe"])))
            for v in onnx_frames:
                of_ms = 1e3 * med[f"oframe_{v}"]
                r.update({f"onnx_frame_{v}_ms": of_ms,
                          f"onnx_frame_{v}_speedup_vs_eager_paired": statistics.median(
                              f / o for f, o in zip(t["frame"], t[f"oframe_{v}"]))})
                if base is not None:
                    r.update({f"onnx_frame_{v}_speedup_vs_official": off_ms / of_ms,
                              f"onnx_frame_{v}_speedup_vs_official_paired": statistics.median(
                                  o / f for o, f in zip(t["official"], t[f"oframe_{v}"]))})
            if onnx_info:
                r["onnx_frame_info"] = onnx_info
            result["dtypes"][name] = r
            del ours
        # Issue 2's targets, judged on our fastest AR path (compiled when timed, else eager).
        targets = {}
        for name, r in result["dtypes"].items():
            key = "compiled_speedup_frame_vs_official" if "compiled_speedup_frame_vs_official" in r else "speedup_frame_vs_official"
            if key in r:
                targets[f"{name}: generate_frame >= 1.5x official ({key})"] = r[key] >= 1.5
        for name, r in result["dtypes"].items():
            if "graph_speedup_frame_vs_official" in r:  # issue 16's target for the whole-frame graph
                targets[f"{name}: whole-frame graph >= 3x official (graph_speedup_frame_vs_official)"] = \
                    r["graph_speedup_frame_vs_official"] >= 3
        for name, r in result["dtypes"].items():
            for v in ("fp32", "w8"):
                if f"onnx_frame_{v}_speedup_vs_official" in r:
                    targets[f"{name}: whole-frame onnx {v} >= 3x official (onnx_frame_{v}_speedup_vs_official)"] = \
                        r[f"onnx_frame_{v}_speedup_vs_official"] >= 3
        if "bfloat16" in result["dtypes"]:
            r = result["dtypes"]["bfloat16"]
            key = "compiled_step_over_floor" if "compiled_step_over_floor" in r else "ours_step_over_floor"
            targets[f"bfloat16: step within 3x of bandwidth floor ({key})"] = r[key] <= 3
        result["targets_met"] = targets
        return result
    finally:
        torch.set_num_threads(prev_threads)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


ONNX_FRAME_VARIANTS = ("fp32", "w8")


def _onnx_frames(ours, bc: BenchARConfig, th, c0: int, s: Sampling, frame_gen, workdir: Path) -> tuple[dict, dict]:
    """The whole frame as one onnxruntime call per requested variant: {variant: frame function} and
    what the export and quantization recorded (seconds, counts, greedy agreement of w8 with fp32)."""
    bad = [v for v in bc.onnx_frame if v not in ONNX_FRAME_VARIANTS]
    if bad:
        raise ValueError(f"onnx_frame variants must be among {ONNX_FRAME_VARIANTS}, got {bad[0]!r}")
    if bc.batch != 1:
        raise ValueError(f"onnx_frame times one row per frame; got batch={bc.batch}")
    fg = make_frame_graph(ours)
    info: dict = {}
    t0 = time.perf_counter()
    fp32 = workdir / "frame_fp32.onnx"
    export_module(fg, fp32)
    info["export_s"] = round(time.perf_counter() - t0, 1)
    paths = {"fp32": fp32}
    if "w8" in bc.onnx_frame:
        t0 = time.perf_counter()
        paths["w8"] = workdir / "frame_w8.onnx"
        info["w8"] = quantize_w8(fp32, paths["w8"])
        info["w8"]["quantize_s"] = round(time.perf_counter() - t0, 1)
    calls = {v: OnnxGraph(p, threads=bc.threads) for v, p in paths.items()}
    if "w8" in calls:  # greedy codes of the 8-bit graph against the fp32 graph on random inputs
        g = torch.Generator().manual_seed(bc.seed + 2)
        same = 0
        for _ in range(8):
            h = torch.randn(th.shape, generator=g).to(th.dtype)
            same += graph_ar_frame(calls["w8"], fg, h, c0, Sampling.greedy()) == \
                graph_ar_frame(calls["fp32"], fg, h, c0, Sampling.greedy())
        info["w8_greedy_codes_agree"] = f"{same}/8"
    fns = {v: (lambda c=calls[v]: graph_ar_frame(c, fg, th, c0, s, frame_gen)) for v in bc.onnx_frame}
    for f in fns.values():
        f()  # first call: session warm-up
    return fns, info
