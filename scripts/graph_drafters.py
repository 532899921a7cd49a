"""Every drafter of seed 000 Table 2 in the whole-frame onnxruntime loop (`onnx-loop`), against the
whole AR frame graph: paired frame times on the committed mini predictor, 1 thread, interleaved
frame by frame on the talker states of real English sentences (deployed sampling, seed i for frame
i), with each drafter's tree at N = 4 and N = 16 as committed in data/mini/bench/acceptance.json
(`drafters.<kind>.trees`, grown from its acceptance table; the same as data/mini/trees/<kind>_n<N>.json
where that file exists).

Why: the drafts of the accepted node alone (`rvqspec.export.drafts`) give the position-dependent
drafters (Medusa heads, per-position offsets, per-position low rank) a graph form; this measures
whether their higher acceptance pays for their per-round cost in the graph (docs/streaming.md).

    python scripts/graph_drafters.py --out docs/measurements/streaming/graph_drafters.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from rvqspec.core.drafters import load_drafter
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.tree import SparseTree
from rvqspec.export.backends import make_inner
from rvqspec.mini.bench_stream import SENTENCES
from rvqspec.mini.pipeline import MiniTTS

# sibling script: scripts/ is on sys.path when this file runs as a script
from graph_levers import frame_times, talker_states

KINDS = ("offsets", "per_position", "low_rank", "shared_low_rank", "medusa")
ACCEPTANCE = "data/mini/bench/acceptance.json"


def summary(inners: dict, states, repeats: int) -> dict:
    """Medians and each loop's median per-frame speed-up against "ar_frame" (`frame_times`)."""
    t, calls = frame_times(inners, states, repeats, progress=True)
    res = {}
    for k, v in t.items():
        res[k] = {"frame_ms_median": round(1e3 * statistics.median(v), 3),
                  "tokens_per_call": round(15 * len(v) / calls[k], 4)}
        if k != "ar_frame":
            r = statistics.median(a / b for a, b in zip(t["ar_frame"], v))
            res[k]["speedup_vs_ar_frame_paired"] = round(r, 4)
            res[k]["label"] = "speed-up" if r >= 1 else "slowdown"
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget", type=int, action="append", help="tree sizes N (default 4 and 16)")
    args = ap.parse_args(argv)
    budgets = args.budget or [4, 16]
    torch.set_num_threads(1)
    tts = MiniTTS.load()
    cp = tts.code_predictor
    states = talker_states(tts, [t for t, _ in SENTENCES[:2]])
    out: dict = {"states": len(states), "repeats": args.repeats, "threads": 1, "sampling": "deployed (top-k 50, T 0.9)",
                 "trees": f"{ACCEPTANCE}: drafters.<kind>.trees", "drafters": "data/mini/drafters/<kind>.safetensors"}
    trees = {k: v["trees"] for k, v in json.loads(Path(ACCEPTANCE).read_text())["drafters"].items()}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        inners = {"ar_frame": make_inner("onnx", cp, workdir=d / "ar")}
        for kind in KINDS:
            drafter = load_drafter(f"data/mini/drafters/{kind}.safetensors", cp)
            for n in budgets:
                tree = SparseTree([tuple(p) for p in trees[kind][str(n)]])
                print(f"export {kind} N={n}", file=sys.stderr)
                inners[f"{kind}_n{n}"] = make_inner("onnx-loop", cp, drafter, tree, workdir=d / f"{kind}_{n}")
        out["frames"] = summary(inners, states, args.repeats)
    write_json_atomic(args.out, out, indent=2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
