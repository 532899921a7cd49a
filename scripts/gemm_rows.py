"""Cost of a q-row matrix product against a one-row one, at the mini code predictor's widths.

Why the graph backends gain little from speculation on the v4 world (docs/streaming.md): a verify
call pushes q = N + 1 rows through the same weights an AR step pushes one row through. When the
product is bound by reading the weights, q rows cost about what one costs; when it is bound by
arithmetic, they cost about q times as much. This times `torch.nn.functional.linear` for each
(rows, weight) pair, interleaved (every repeat visits every pair once, in a shuffled order), one
thread, and reports the median microseconds and the ratio to q = 1 for each weight shape.

    python scripts/gemm_rows.py --out docs/measurements/world_v4/gemm_rows.json
"""
import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from rvqspec.core.jsonfile import write_json_atomic

# (out, in) of the mini code predictor's weights (rvqspec/mini/talker_train.py: 192 wide, MLP 576):
# q/k/v/o projections, the MLP's up and down projections, and one codebook head of 256 (v3) or
# 1,024 (v4) codes
SHAPES = {"attn_192x192": (192, 192), "mlp_up_576x192": (576, 192), "mlp_down_192x576": (192, 576),
          "head_256x192": (256, 192), "head_1024x192": (1024, 192)}
ROWS = (1, 2, 3, 5, 17)  # AR step, then verify calls at N = 1, 2, 4, 16


def measure(repeats: int, inner: int, dtype: torch.dtype, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    order = random.Random(seed)
    weights = {k: torch.randn(o, i, generator=g).to(dtype) for k, (o, i) in SHAPES.items()}  # (out, in)
    inputs = {(k, q): torch.randn(q, SHAPES[k][1], generator=g).to(dtype) for k in SHAPES for q in ROWS}  # (q, in)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in inputs}
    keys = list(inputs)
    for key in keys:  # warm-up: first calls pick kernels and fault pages in
        torch.nn.functional.linear(inputs[key], weights[key[0]])
    for _ in range(repeats):
        order.shuffle(keys)
        for k, q in keys:
            x, w = inputs[(k, q)], weights[k]
            t0 = time.perf_counter()
            for _ in range(inner):
                torch.nn.functional.linear(x, w)
            times[(k, q)].append((time.perf_counter() - t0) / inner * 1e6)
    out = {}
    for k in SHAPES:
        med = {q: statistics.median(times[(k, q)]) for q in ROWS}
        out[k] = {"us": {str(q): round(med[q], 2) for q in ROWS},
                  "over_one_row": {str(q): round(med[q] / med[1], 3) for q in ROWS}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--inner", type=int, default=20, help="calls per timed block")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), action="append")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.inner < 1 or a.threads < 1:
        print(f"error: --repeats, --inner and --threads must be >= 1, got {a.repeats}, {a.inner}, {a.threads}",
              file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    res = {"command": "python scripts/gemm_rows.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "threads": a.threads, "repeats": a.repeats, "inner": a.inner, "torch": torch.__version__,
           "shapes": {k: list(v) for k, v in SHAPES.items()}, "rows": list(ROWS),
           "by_dtype": {d: measure(a.repeats, a.inner, getattr(torch, d)) for d in (a.dtype or ["float32"])}}
    if a.out:
        write_json_atomic(a.out, res, indent=1)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
