"""Whether one shared shift can carry a code-predictor hidden state to the next position (seed 000
§2.2 (iii), "Training the offsets"): the geometry of h_1..h_15 across positions.

The offsets draft c_{p+j} by reading h_p + o_j with the frozen LM head p+j-1: one shift per lookahead,
shared by every position p. The frozen head can only read the shifted state if h_{p+j} is close to
h_p plus a position-independent vector. Three measures per consecutive pair (p, p+1), p = 1..14,
on the frames of a shard folder (`rvqspec spec extract`), say how close:

- the cosine of the position means mu_p and mu_{p+1}: near 1, the positions share a subspace;
  near 0, each keeps its own;
- the R^2 of h_{p+1} predicted by h_p + (mu_{p+1} - mu_p), the best single shift for that pair (a
  shared offset can do no better than the best shift of every pair at once);
- the R^2 of an affine map h_p -> h_{p+1} fitted on a random half of the frames and scored on the
  other half: what a full per-position map (the per-position and low-rank drafters' reach) expresses.

The R^2 are held out (scored on the half the affine map was not fitted on) and can be negative: a
shift that moves h_p further from h_{p+1} than the mean mu_{p+1} is explains less than nothing.

Frames stream one batch at a time into float64 sums (never all in memory), so a real checkpoint's
width (1,024) and tens of thousands of frames fit: the affine fit keeps (H + 1) x (H + 1) and
(H + 1) x H sums per pair and half.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

FIT_FRACTION = 0.5  # share of frames the affine map is fitted on; the rest scores all three R^2-style figures


class GeometryError(ValueError):
    """Hidden states that cannot be measured (message names the shape or count)."""


@dataclass(frozen=True)
class Geometry:
    frames: int
    hidden_size: int
    position_mean_cosine: list  # (14,) pairs (p, p+1), p = 1..14
    shift_r2: list              # (14,) held out
    affine_r2_heldout: list     # (14,)

    def to_json(self) -> dict:
        mean = lambda xs: round(sum(xs) / len(xs), 4)  # noqa: E731
        return {"frames": self.frames, "hidden_size": self.hidden_size,
                "position_mean_cosine_mean": mean(self.position_mean_cosine),
                "shift_r2_mean": mean(self.shift_r2), "affine_r2_mean": mean(self.affine_r2_heldout),
                "reading": reading(mean(self.position_mean_cosine), mean(self.shift_r2), mean(self.affine_r2_heldout)),
                "position_mean_cosine": [round(x, 4) for x in self.position_mean_cosine],
                "shift_r2": [round(x, 4) for x in self.shift_r2],
                "affine_r2_heldout": [round(x, 4) for x in self.affine_r2_heldout]}


def reading(cosine: float, shift_r2: float, affine_r2: float) -> str:
    """One sentence for a person: what the three means say, with no thresholds of its own."""
    return (f"consecutive position means: cosine {cosine:.2f}; held-out R^2 of h_(p+1) (1 exact, 0 no better "
            f"than its mean): one shift per pair {shift_r2:.2f}, an affine map per pair {affine_r2:.2f}")


@torch.no_grad()
def hidden_geometry(batches: Iterable, frames: int, seed: int = 0) -> Geometry:
    """Measure the geometry of `frames` hidden states streamed as batches.

    batches: (hidden (b, P, H), ...) tuples in a fixed order (a `ShardDataset` with shuffle=False);
    the extra elements (codes) are ignored. frames: their total count (the shard manifest's), which
    fixes the fit / held-out split: a permutation of range(frames) from `seed`, its first half fitted."""
    if frames < 4:
        raise GeometryError(f"need at least 4 frames to fit on one half and score on the other, got {frames}")
    perm = torch.randperm(frames, generator=torch.Generator().manual_seed(seed))
    is_fit = torch.zeros(frames, dtype=torch.bool)
    is_fit[perm[: int(frames * FIT_FRACTION)]] = True
    acc = None
    seen = 0
    for batch in batches:
        h = batch[0] if isinstance(batch, (tuple, list)) else batch
        if h.dim() != 3 or h.shape[1] < 2:
            raise GeometryError(f"hidden states must be (frames, positions >= 2, hidden), got {tuple(h.shape)}")
        if seen + h.shape[0] > frames:
            raise GeometryError(f"the batches hold more than the stated {frames} frames")
        if acc is None:
            acc = _Sums(h.shape[1], h.shape[2])
        acc.add(h.double(), is_fit[seen: seen + h.shape[0]])
        seen += h.shape[0]
    if seen != frames or acc is None:
        raise GeometryError(f"the batches hold {seen} frames, the stated count is {frames}")
    return acc.result(frames)


class _Sums:
    """float64 sufficient statistics of all frames (means) and of each half (shift and affine R^2)."""

    def __init__(self, positions: int, hidden: int):
        P, H = positions, hidden
        self.P, self.H = P, H
        self.sum_all = torch.zeros(P, H, dtype=torch.float64)
        # held-out half: sums of h_p and ||h_p||^2 (the shift's cross terms h_p . h_{p+1} are the
        # traces of the affine sums X^T Y below)
        self.n_test = 0
        self.sum_t = torch.zeros(P, H, dtype=torch.float64)
        self.sq_t = torch.zeros(P, dtype=torch.float64)
        # affine: X = [h_p, 1] (n, H + 1), Y = h_{p+1} (n, H); X^T X and X^T Y per pair, per half
        self.xx = {half: torch.zeros(P - 1, H + 1, H + 1, dtype=torch.float64) for half in ("fit", "test")}
        self.xy = {half: torch.zeros(P - 1, H + 1, H, dtype=torch.float64) for half in ("fit", "test")}

    def add(self, h: torch.Tensor, fit: torch.Tensor) -> None:
        if h.shape[1:] != (self.P, self.H):
            raise GeometryError(f"a batch of shape {tuple(h.shape)} after batches of (n, {self.P}, {self.H})")
        self.sum_all += h.sum(0)
        test = h[~fit]  # (n_t, P, H)
        self.n_test += test.shape[0]
        self.sum_t += test.sum(0)
        self.sq_t += test.pow(2).sum((0, 2))
        for half, part in (("fit", h[fit]), ("test", test)):
            x = torch.cat([part[:, :-1], torch.ones(part.shape[0], self.P - 1, 1, dtype=part.dtype)], -1)  # (n, P-1, H+1)
            self.xx[half] += torch.einsum("npi,npj->pij", x, x)
            self.xy[half] += torch.einsum("npi,npj->pij", x, part[:, 1:])

    def result(self, frames: int) -> Geometry:
        n_t = self.n_test
        mu = self.sum_all / frames  # (P, H)
        cos = torch.nn.functional.cosine_similarity(mu[:-1], mu[1:], dim=-1)  # (P - 1,)
        shift_r2, affine_r2 = [], []
        for p in range(self.P - 1):
            m1 = mu[p + 1]
            # sum over held-out frames of ||h_{p+1} - m1||^2, expanded into the kept sums
            sst = self.sq_t[p + 1] - 2 * m1 @ self.sum_t[p + 1] + n_t * m1 @ m1
            # ||h_{p+1} - h_p - s||^2 summed, with s the shift of the means
            s = mu[p + 1] - mu[p]
            cross = self.xy["test"][p][:self.H].diagonal().sum()  # sum of h_p . h_{p+1}
            sse_shift = (self.sq_t[p + 1] + self.sq_t[p] - 2 * cross
                         - 2 * s @ (self.sum_t[p + 1] - self.sum_t[p]) + n_t * s @ s)
            # least squares on the fitted half; lstsq (not solve) tolerates a rank-deficient X^T X
            w = torch.linalg.lstsq(self.xx["fit"][p], self.xy["fit"][p]).solution  # (H + 1, H)
            sse_affine = (self.sq_t[p + 1] - 2 * (w * self.xy["test"][p]).sum()
                          + (w * (self.xx["test"][p] @ w)).sum())
            shift_r2.append(float(1 - sse_shift / sst))
            affine_r2.append(float(1 - sse_affine / sst))
        return Geometry(frames=frames, hidden_size=self.H, position_mean_cosine=[float(c) for c in cos],
                        shift_r2=shift_r2, affine_r2_heldout=affine_r2)
