"""Paired A/B timings of the onnxruntime graph levers behind the streaming figures (docs/streaming.md,
"On the graph backends"): on the committed mini predictor, 1 thread, interleaved frame by frame on
the talker states of real English sentences (seed 0 AR decoding), medians and paired ratios.

* rms_form: RMSNorm traced as LayerNorm of [x, -x] against the plain form onnxruntime fuses
  (`rvqspec.export.wrappers.rms_form`), for the whole AR frame and the round-by-round speculative frame;
* heads: the loop frame reading a window of head weights (gathered) against all 15 heads;
* loop: the whole speculative frame in one call (`onnx-loop`) against round by round (`onnx`) and
  against the whole AR frame;
* nodes: onnxruntime's own profile of the whole AR frame graph and of one round: executed nodes per
  call, and model-run microseconds per executed node (profiling adds its own cost, so the
  per-node figure is an upper bound);
* threaded: host work per frame of an `onnx-loop` stream with the codec in the same thread against
  a second thread (`rvqspec.mini.bench_stream`, 2 sentences x 1 repeat).

    python scripts/graph_levers.py --out docs/measurements/streaming/graph_levers.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

import rvqspec.export.wrappers as wrappers
from rvqspec.core.drafters import load_drafter
from rvqspec.core.frame_loop import iter_frames
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.sampling import Sampling
from rvqspec.core.tree import SparseTree
from rvqspec.export.backends import GraphInner, make_inner
from rvqspec.export.host import graph_ar_frame, graph_spec_frame
from rvqspec.export.onnx import OnnxGraph, export_module
from rvqspec.export.spec_frame import SpecFrameInner, export_spec_frame
from rvqspec.export.talker import make_talker_steps
from rvqspec.export.wrappers import frame_graph, spec_round_graph
from rvqspec.mini.bench_stream import SENTENCES, bench_stream
from rvqspec.mini.pipeline import MiniTTS
from rvqspec.mini.stream import StreamConfig

DRAFTER = "data/mini/drafters/shared_low_rank.safetensors"
TREE = "data/mini/trees/shared_low_rank_n4.json"


def talker_states(tts, texts) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cp, states = tts.code_predictor, []

    class Record:
        def generate_frame(self, h, c0, sampling=None, generator=None):
            states.append((h.clone(), c0.clone()))
            return cp.generate_frame(h, c0, sampling=sampling, generator=generator)

    for text in texts:
        for _ in iter_frames(tts.talker, cp, tts.text_ids(text, "en"), tts.codebook_size, Sampling(),
                             torch.Generator().manual_seed(0), Record()):
            pass
    return states


def frame_times(inners: dict, states, repeats: int, progress: bool = False) -> tuple[dict, dict]:
    """Each state decoded by every inner in a rotating order, the same seed (i) for all: per-frame
    seconds {name: [s, ...]} (frame i of every list is the same state) and model calls {name: n}."""
    keys = list(inners)
    t = {k: [] for k in keys}
    calls = {k: 0 for k in keys}
    work = list(enumerate(states * repeats))
    for i, (h, c0) in tqdm(work, desc="frames", file=sys.stderr, disable=not progress):
        for k in keys[i % len(keys):] + keys[:i % len(keys)]:
            g = torch.Generator().manual_seed(i)
            t0 = time.perf_counter()
            out = inners[k].generate_frame(h, c0, Sampling(), g)
            t[k].append(time.perf_counter() - t0)
            calls[k] += out[1].calls if isinstance(out, tuple) else 15
    return t, calls


def paired(inners: dict, states, repeats: int) -> dict:
    """`frame_times`' medians and every pair's median per-frame time ratio."""
    keys = list(inners)
    t, calls = frame_times(inners, states, repeats)
    res = {k: {"frame_ms_median": round(1e3 * statistics.median(v), 3),
               "tokens_per_call": round(15 * len(v) / calls[k], 4)} for k, v in t.items()}
    for a in keys:
        for b in keys:
            if a < b:
                res[f"{b}_over_{a}_time_paired"] = round(statistics.median(y / x for x, y in zip(t[a], t[b])), 4)
    return res


def node_profile(graph, path: Path, states, spec: bool) -> dict:
    """Executed nodes per call and model-run time per node from onnxruntime's profiler."""
    import onnxruntime as ort

    export_module(graph, path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = str(path.with_suffix(""))
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names, outs = [i.name for i in sess.get_inputs()], [o.name for o in sess.get_outputs()]

    def call(feeds):
        return dict(zip(outs, sess.run(outs, {n: feeds[n] for n in names})))

    for i, (h, c0) in enumerate(states[:20]):
        g = torch.Generator().manual_seed(i)
        (graph_spec_frame if spec else graph_ar_frame)(call, graph, h, int(c0), Sampling(), g)
    events = json.loads(Path(sess.end_profiling()).read_text())
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    nodes = sum(1 for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"))
    run_us = sum(e["dur"] for e in runs)
    return {"calls": len(runs), "nodes_per_call": round(nodes / len(runs), 1),
            "us_per_node_upper_bound": round(run_us / nodes, 2)}


def onnx_inner(graph, path: Path, loop: bool = False):
    if loop:
        return SpecFrameInner(graph, export_spec_frame(graph, path))
    export_module(graph, path)
    return GraphInner(graph, OnnxGraph(path), "onnx")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tts = MiniTTS.load()
    cp = tts.code_predictor
    drafter, tree = load_drafter(DRAFTER), SparseTree.load(TREE)
    states = talker_states(tts, [t for t, _ in SENTENCES[:2]])
    out: dict = {"states": len(states), "repeats": args.repeats, "threads": 1, "drafter": DRAFTER, "tree": TREE}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        inners = {}
        for form in ("layer_norm", "pow"):  # traced under each form, run side by side
            orig = wrappers._rms_form[0]
            wrappers._rms_form[0] = form
            try:
                inners[f"ar_{form}"] = onnx_inner(frame_graph(cp), d / f"ar_{form}.onnx")
                inners[f"round_{form}"] = onnx_inner(spec_round_graph(cp, tree, drafter), d / f"round_{form}.onnx")
            finally:
                wrappers._rms_form[0] = orig
        print("rms_form", file=sys.stderr)
        out["rms_form"] = paired(inners, states, args.repeats)
        print("heads / loop", file=sys.stderr)
        inners = {"loop_window": onnx_inner(spec_round_graph(cp, tree, drafter, heads="window"), d / "lw.onnx", True),
                  "loop_all": make_inner("onnx-loop", cp, drafter, tree, workdir=d / "la"),
                  "rounds": make_inner("onnx", cp, drafter, tree, workdir=d / "r"),
                  "ar_frame": make_inner("onnx", cp, workdir=d / "a")}
        out["heads_and_loop"] = paired(inners, states, args.repeats)
        print("nodes", file=sys.stderr)
        with wrappers.rms_form("pow"):
            out["nodes"] = {"ar_frame": node_profile(frame_graph(cp), d / "prof_ar.onnx", states, False),
                            "round": node_profile(spec_round_graph(cp, tree, drafter), d / "prof_round.onnx",
                                                  states, True)}
        out["nodes"]["round_over_ar_pass_nodes"] = round(
            out["nodes"]["round"]["nodes_per_call"] / (out["nodes"]["ar_frame"]["nodes_per_call"] / 16), 3)
        print("threaded", file=sys.stderr)
        spec = make_inner("onnx-loop", cp, drafter, tree, workdir=d / "s")
        ar = make_inner("onnx", cp, workdir=d / "s2")
        steps = make_talker_steps("onnx", tts.talker, workdir=d / "t")
        out["threaded"] = {}
        for threaded in (False, True):
            b = bench_stream(tts, spec, SENTENCES[:2], repeats=1, config=StreamConfig(threaded=threaded), ar=ar,
                             talker_steps=steps, backend="onnx-loop", progress=False)
            out["threaded"]["threaded" if threaded else "sequential"] = {
                m: {k: b[m][k] for k in ("rtf", "ttfa_ms_p50", "host_ms_per_frame")} for m in ("ar", "spec")}
    write_json_atomic(args.out, out, indent=2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
