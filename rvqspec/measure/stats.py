"""Resampling statistics of the project's measurements: paired bootstrap intervals of a rate
difference (two decoders or two models scored on the same sentences and seeds), and bootstrap
intervals and rank stability of per-layer importance scores (seed 001 §2.1, WLI and cosine).

Every function takes an explicit `numpy.random.Generator`: the same generator seed gives the same
interval, and a test can check both an interval that must cover and one that must not.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.stats import kendalltau


def paired_bootstrap(ar: list[dict], spec: list[dict], key_err: str, key_ref: str, n: int,
                     rng: np.random.Generator) -> tuple[float, float, float]:
    """Clips of two systems (same texts x seeds; 'ar' is the reference side) -> (spec - ar rate,
    2.5%, 97.5%) resampling texts: the clips of one text (all its seeds) stay together, since they
    share the text's difficulty."""
    texts = sorted({c["text"] for c in ar})
    idx = {t: i for i, t in enumerate(texts)}
    missing = sorted({c["text"] for c in spec} - set(idx))
    if missing:
        raise ValueError(f"paired_bootstrap: {len(missing)} texts of the second system are not in the first "
                         f"(e.g. {missing[0]!r}): the comparison is not paired")
    err = np.zeros((2, len(texts)))
    ref = np.zeros((2, len(texts)))
    for side, clips in enumerate((ar, spec)):
        for c in clips:
            err[side, idx[c["text"]]] += c[key_err]
            ref[side, idx[c["text"]]] += c[key_ref]
    diff = err[1].sum() / ref[1].sum() - err[0].sum() / ref[0].sum()
    pick = rng.integers(0, len(texts), size=(n, len(texts)))  # (n, texts)
    e, r = err[:, pick].sum(-1), ref[:, pick].sum(-1)  # (2, n)
    boot = e[1] / r[1] - e[0] / r[0]
    return float(diff), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def paired_rate_difference(reference: list[dict], other: list[dict], n: int = 2000, seed: int = 0) -> dict:
    """WER and CER of `other` minus `reference` with paired bootstrap 95% intervals (clips carry
    the edit counts of `rvqspec.mini.pipeline.intelligibility`)."""
    rng = np.random.default_rng(seed)
    out = {}
    for m, (ke, kr) in (("wer", ("word_errors", "ref_words")), ("cer", ("char_errors", "ref_chars"))):
        d, lo, hi = paired_bootstrap(reference, other, ke, kr, n, rng)
        out[f"{m}_diff"], out[f"{m}_diff_ci95"] = d, [lo, hi]
    out["bootstrap"] = n
    return out


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two score vectors over the same items (1: same order, -1: reversed);
    NaN when either vector is constant."""
    return float(kendalltau(np.asarray(a, float), np.asarray(b, float)).statistic)


def _ranked_keep(primary: np.ndarray, secondary: np.ndarray | None, depth: int) -> np.ndarray:
    """Kept layers (depth highest scores; `secondary` breaks ties; then the earlier layer) for each
    row of primary (R, L) -> (R, L) bool."""
    R, L = primary.shape
    layer = np.broadcast_to(np.arange(L), (R, L))
    keys = (layer, -(secondary if secondary is not None else np.zeros_like(primary)), -primary)
    order = np.lexsort(keys, axis=-1)  # (R, L): most important first (lexsort sorts by the last key first)
    keep = np.zeros((R, L), bool)
    np.put_along_axis(keep, order[:, :depth], True, axis=-1)
    return keep


def bootstrap_ranking(num: np.ndarray, den: np.ndarray, depth: int, n: int, rng: np.random.Generator,
                      secondary_num: np.ndarray | None = None, secondary_den: np.ndarray | None = None) -> dict:
    """Bootstrap of per-layer importance scores that are ratios of sums over units.

    num (L, U): each layer's contribution per unit (e.g. the extra word errors of one sentence x seed
    clip when layer l is removed); den (U,): the unit's weight (its reference words). The score of
    layer l is sum_u num[l, u] / sum_u den[u]. Units are resampled with replacement `n` times and
    reported: the point score, a percentile 95% interval per layer, the mean Kendall tau between each
    resample's scores and the point scores, and the share of resamples that keep exactly the point
    estimate's `depth` layers. `secondary_*` (same shapes) breaks ties (CER behind WER)."""
    num = np.asarray(num, float)
    den = np.asarray(den, float)
    if num.ndim != 2 or den.shape != (num.shape[1],):
        raise ValueError(f"bootstrap_ranking: num must be (layers, units) and den (units,), got "
                         f"{num.shape} and {den.shape}")
    L, U = num.shape
    if not 1 <= depth <= L:
        raise ValueError(f"bootstrap_ranking: depth {depth} must be in 1..{L}")
    if U < 2:
        raise ValueError(f"bootstrap_ranking: {U} unit(s): a bootstrap needs at least 2")
    pick = rng.integers(0, U, size=(n, U))  # (n, U) resampled units
    boot = num[:, pick].sum(-1).T / den[pick].sum(-1)[:, None]  # (n, L)
    point = num.sum(-1) / den.sum()  # (L,)
    sec_point = sec_boot = None
    if secondary_num is not None:
        secondary_num = np.asarray(secondary_num, float)
        sden = np.asarray(secondary_den if secondary_den is not None else den, float)
        sec_point = secondary_num.sum(-1) / sden.sum()  # (L,)
        sec_boot = secondary_num[:, pick].sum(-1).T / sden[pick].sum(-1)[:, None]  # (n, L)
    keep_point = _ranked_keep(point[None], None if sec_point is None else sec_point[None], depth)[0]  # (L,)
    keep_boot = _ranked_keep(boot, sec_boot, depth)  # (n, L)
    taus = np.array([kendall_tau(b, point) for b in boot])  # (n,)
    lo, hi = np.quantile(boot, [0.025, 0.975], axis=0)  # (L,) each
    return dict(scores=point.tolist(), ci95=[[float(a), float(b)] for a, b in zip(lo, hi)],
                keep=np.flatnonzero(keep_point).tolist(), depth=depth, units=U, resamples=n,
                same_keep_share=float((keep_boot == keep_point).all(-1).mean()),
                kendall_tau_mean=float(np.nanmean(taus)) if np.isfinite(taus).any() else float("nan"),
                kendall_tau_ci95=[float(x) for x in np.nanquantile(taus, [0.025, 0.975])]
                if np.isfinite(taus).any() else [float("nan")] * 2)
