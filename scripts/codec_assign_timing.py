"""Time the codec's nearest-code assignment (rvqspec.mini.codec._assign, one fused product per
chunk) against the three-term distance it replaced, on real frames of a mini world, and check that
both give the same codes (docs/design.md, "Adopting v6: the build within two hours").

usage: python scripts/codec_assign_timing.py [--codec DIR] [--corpus DIR] [--clips N] [--repeats R]
Prints JSON: frames, seconds per call of each (best of R, one thread, interleaved), their ratio and
the share of frames given the same code. The level timed is level 1 with its rate cost.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from rvqspec.mini.codec import RVQCodec, _assign, rate_cost
from rvqspec.mini.corpus import load_corpus


def three_term_assign(x: torch.Tensor, c: torch.Tensor, cost: torch.Tensor | None,
                      chunk: int = 65536) -> torch.Tensor:
    """The earlier assignment: full squared distances (N, K) per 65,536-row chunk, plus the cost."""
    out = []
    for s in range(0, x.shape[0], chunk):
        xs = x[s:s + chunk]
        d = ((xs * xs).sum(1, keepdim=True) - 2.0 * xs @ c.T + (c * c).sum(1)[None, :]).clamp_min(0)  # (n, K)
        out.append((d if cost is None else d + cost).argmin(1))
    return torch.cat(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--codec", default="data/mini/codec")
    ap.add_argument("--corpus", default="runs/mini/corpus", help="corpus with audio (rvqspec mini build's --runs)")
    ap.add_argument("--clips", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    codec = RVQCodec.load(a.codec)
    ds = load_corpus(a.corpus, need_audio=True)["model_train"]
    ds = ds.select(range(min(a.clips, len(ds)))).with_format("numpy")
    feats = torch.cat([codec.features(np.asarray(au, dtype=np.float32)) for au in ds["audio"]])  # (N, S*M)
    level0 = codec.encode_features(feats)[:, 0]  # (N,): the codec's own level-0 assignment
    x = codec.standardize(feats)  # (N, D)
    resid = x - codec.codebooks[0].float()[level0]  # (N, D): what level 1 quantizes
    cb = codec.codebooks[1].float()  # (K, D)
    cost = rate_cost(codec.log_prior[1].float(), codec.config.rate_lambda, x.shape[1])
    fused, old = [], []
    for _ in range(a.repeats):  # interleaved, best of each
        t = time.perf_counter(); new_idx = _assign(resid, cb, cost=cost)[0]; fused.append(time.perf_counter() - t)
        t = time.perf_counter(); old_idx = three_term_assign(resid, cb, cost); old.append(time.perf_counter() - t)
    print(json.dumps({"codec": a.codec, "frames": int(x.shape[0]), "codes": int(cb.shape[0]),
                      "fused_seconds": round(min(fused), 3), "three_term_seconds": round(min(old), 3),
                      "speedup": round(min(old) / min(fused), 2),
                      "same_code_share": float((new_idx == old_idx).float().mean()),
                      "command": "python scripts/codec_assign_timing.py " + " ".join(
                          f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items())}, indent=1))


if __name__ == "__main__":
    main()
