"""Entropy-constrained RVQ sweep for the mini codec: per-level code entropy, top-1 code share and
feature SNR against `CodecConfig.rate_lambda`, printed as one JSON line per lambda.

    .venv/bin/python scripts/codec_rate_sweep.py --corpus runs/mini/corpus --fit-clips 1200 \
        --lambdas 0,0.0005,0.001,0.002

Codecs are fitted on `--fit-clips` random `model_train` clips of the audio corpus (`rvqspec mini build`
writes it to runs/mini/corpus) and measured on 150 other clips. Entropy and top-1 share are of the
marginal code distribution per level on the held-out clips (nats; what a code predictor without any
context could reach), SNR is 10 log10 |x|^2 / |x - x_q|^2 in standardized feature space with the
first q codebooks. See docs/design.md ("Why the mini drafts are hard") for a recorded run.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

import numpy as np
import torch


def level_stats(codes: np.ndarray, codebook_size: int) -> tuple[list[float], list[float]]:
    """codes (N, Q) -> (entropy in nats per level, share of the most frequent code per level)."""
    ent, top1 = [], []
    for q in range(codes.shape[1]):
        p = np.bincount(codes[:, q], minlength=codebook_size) / len(codes)  # (K,)
        nz = p[p > 0]
        ent.append(round(float(-(nz * np.log(nz)).sum()), 3))
        top1.append(round(float(p.max()), 3))
    return ent, top1


def main(argv: list[str] | None = None) -> None:
    from tqdm.auto import tqdm

    from rvqspec.mini.codec import CodecConfig, RVQCodec
    from rvqspec.mini.corpus import load_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="runs/mini/corpus", help="the audio corpus (rvqspec mini build)")
    ap.add_argument("--fit-clips", type=int, default=1200)
    ap.add_argument("--heldout-clips", type=int, default=150)
    ap.add_argument("--lambdas", default="0,0.0005,0.001,0.002")
    ap.add_argument("--kmeans-iters", type=int, default=10)
    ap.add_argument("--fit-max-frames", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    lambdas = [float(x) for x in a.lambdas.split(",")]
    if any(lam < 0 for lam in lambdas):
        raise SystemExit(f"--lambdas must be >= 0, got {a.lambdas!r}")
    torch.set_num_threads(1)
    ds = load_corpus(a.corpus, need_audio=True)["model_train"].with_format("numpy")
    if a.fit_clips + a.heldout_clips > len(ds):
        raise SystemExit(f"{a.corpus}: model_train has {len(ds)} clips, fewer than "
                         f"--fit-clips + --heldout-clips = {a.fit_clips + a.heldout_clips}")
    order = np.random.default_rng(a.seed).permutation(len(ds))
    fit = [ds[int(i)]["audio"] for i in order[:a.fit_clips]]
    held = [ds[int(i)]["audio"] for i in order[-a.heldout_clips:]]
    for lam in tqdm(lambdas, desc="rate_lambda"):
        t0 = time.perf_counter()
        cfg = replace(CodecConfig(), rate_lambda=lam, kmeans_iters=a.kmeans_iters, fit_max_frames=a.fit_max_frames,
                      seed=a.seed)
        codec = RVQCodec(cfg).fit(fit, progress=False)
        feats = [codec.features(x) for x in held]  # each (T, D)
        codes = torch.cat([codec.encode_features(f) for f in feats]).numpy()  # (N, Q)
        x = torch.cat([(f - codec.mean) / codec.std for f in feats])  # (N, D)
        ent, top1 = level_stats(codes, cfg.codebook_size)
        snr = {}
        for q in (1, 2, 4, 8, cfg.num_codebooks):
            xq = (codec.decode_features(torch.as_tensor(codes[:, :q])) - codec.mean) / codec.std
            snr[str(q)] = round(10 * math.log10(x.pow(2).sum().item() / (x - xq).pow(2).sum().item()), 2)
        print(json.dumps(dict(rate_lambda=lam, entropy_nats=ent, top1_share=top1, feature_snr_db=snr,
                              total_entropy_nats=round(sum(ent), 2), frames=int(codes.shape[0]),
                              seconds=round(time.perf_counter() - t0, 1))), flush=True)


if __name__ == "__main__":
    main()
