"""Acceptance statistics and tokens per call (seed 000 §2.2 tree calibration, §3.3, Table 2).

* `acceptance_table`: acc[d, r] = how often the drafter's rank-r candidate for depth d + 1 equals the
  code the verifier emits, over all valid start positions. On free-running shards (the model's own
  samples under the deployed sampling, `rvqspec.measure.extract` source="free_running") this is the seed's
  calibration statistic; on teacher-forced shards it is the teacher-forced variant.
* `replay_tokens_per_call`: tokens per call of a (drafter, tree) replayed exactly on free-running
  frames. With the sample-once-per-node verification rule, a round starting after c_m accepts the
  longest prefix of the AR samples c_{m+1}, c_{m+2}, .. whose drafter ranks form a path of the tree;
  since free-running samples have exactly the AR law, this has exactly the decoder's distribution of
  accepted lengths (no model calls needed).
* `oracle_tokens_per_call`: the same replay with drafts = the verifier's own top-m at each depth
  (ranks of the samples under the verifier's distribution): the ceiling for a tree shape.
* `measure_tokens_per_call`: runs the `SpeculativeCodePredictor` itself on (talker hidden, c0) frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
import torch.nn.functional as F

from rvqspec.core.drafters import NUM_POSITIONS, Drafter
from rvqspec.core.sampling import Sampling
from rvqspec.core.tree import SparseTree


def rank_of(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Rank of target (...,) under logits (..., V): the number of tokens with a strictly larger logit
    (0 = top-1), ties broken toward the smaller token id as `topk` on CPU does in practice."""
    t = logits.gather(-1, target.unsqueeze(-1))  # (..., 1)
    ids = torch.arange(logits.shape[-1], device=logits.device)
    ahead = (logits > t) | ((logits == t) & (ids < target.unsqueeze(-1)))
    return ahead.sum(-1)


@torch.no_grad()
def drafter_ranks(drafter: Drafter, code_predictor, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """(B, 15, K) rank of c_{p+j} under the drafter at h_p; -1 where p + j > 15."""
    logits, valid = drafter.all_draft_logits(code_predictor, hidden.to(next(code_predictor.parameters()).dtype))
    K = drafter.num_offsets
    p = torch.arange(1, NUM_POSITIONS + 1).view(-1, 1)
    idx = (p + torch.arange(1, K + 1).view(1, -1)).clamp(max=NUM_POSITIONS)  # (15, K)
    r = rank_of(logits, codes[:, idx])  # (B, 15, K)
    return torch.where(valid.to(r.device), r, torch.full_like(r, -1))


@torch.no_grad()
def verifier_ranks(code_predictor, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """(B, 15): rank of c_p under the verifier LM head p-1 at h_p (p = 1..15)."""
    cp = code_predictor
    h = hidden.to(next(cp.parameters()).dtype)
    cols = [rank_of(F.linear(h[:, p - 1], cp.lm_head[p - 1].weight), codes[:, p]) for p in range(1, NUM_POSITIONS + 1)]
    return torch.stack(cols, 1)


@dataclass
class AcceptanceTable:
    counts: np.ndarray       # (K, R) hits of rank r at depth d+1
    totals: np.ndarray       # (K,) valid (position, depth) pairs
    source: str = ""

    @property
    def acc(self) -> np.ndarray:
        """(K, R) acceptance probabilities."""
        return self.counts / np.maximum(self.totals[:, None], 1)

    def to_json(self) -> dict:
        return {"acc": self.acc.round(6).tolist(), "counts": self.counts.tolist(), "totals": self.totals.tolist(),
                "source": self.source}

    @classmethod
    def from_json(cls, d: dict, where: str = "acceptance JSON") -> "AcceptanceTable":
        for k in ("counts", "totals"):
            if k not in d:
                raise ValueError(f"{where}: missing key {k!r}")
        return cls(np.asarray(d["counts"], dtype=np.int64), np.asarray(d["totals"], dtype=np.int64), d.get("source", ""))


@torch.no_grad()
def acceptance_table(drafter: Drafter, code_predictor, data: Iterable, max_rank: int = 16,
                     source: str = "") -> AcceptanceTable:
    """data: iterable of (hidden (b, 15, H), codes (b, 16)) batches (e.g. a `ShardDataset`)."""
    K = drafter.num_offsets
    counts = np.zeros((K, max_rank), dtype=np.int64)
    totals = np.zeros(K, dtype=np.int64)
    for hidden, codes in data:
        r = drafter_ranks(drafter, code_predictor, hidden, codes)  # (b, 15, K)
        for j in range(K):
            rj = r[:, :, j]
            rj = rj[rj >= 0]
            totals[j] += rj.numel()
            counts[j] += np.bincount(rj[rj < max_rank].numpy(), minlength=max_rank)[:max_rank]
    return AcceptanceTable(counts, totals, source)


@dataclass
class TokensPerCall:
    frames: int = 0
    calls: int = 0
    accepted: list[int] = field(default_factory=list)

    @property
    def tokens_per_call(self) -> float:
        return 15 * self.frames / max(self.calls, 1)

    def to_json(self) -> dict:
        hist = np.bincount(np.asarray(self.accepted, dtype=np.int64), minlength=4).tolist() if self.accepted else []
        return {"frames": self.frames, "calls": self.calls, "tokens_per_call": round(self.tokens_per_call, 4),
                "accepted_hist": hist}


def _rounds(draft_rank, paths: set[tuple[int, ...]], K: int, n: int = NUM_POSITIONS) -> tuple[int, list[int]]:
    """Replay one frame: draft_rank(m, j) = rank of c_{m+j} among the drafts of the round after c_m."""
    calls, acc = 1, []  # the prefill call emits c1
    m = 1
    while m < n:
        a, path = 0, ()
        while a < K and m + a + 1 <= n:
            path = path + (int(draft_rank(m, a + 1)),)
            if path not in paths:
                break
            a += 1
        calls += 1
        acc.append(a)
        m = m + a + 1
    return calls, acc


@torch.no_grad()
def replay_tokens_per_call(drafter: Drafter, code_predictor, tree: SparseTree, data: Iterable) -> TokensPerCall:
    """Exact tokens per call of (drafter, tree) on free-running frames (see module docstring)."""
    paths = set(tree.paths)
    K = min(tree.max_depth, drafter.num_offsets)
    out = TokensPerCall()
    for hidden, codes in data:
        r = drafter_ranks(drafter, code_predictor, hidden, codes).numpy()  # (b, 15, K): r[:, p-1, j-1]
        for row in r:
            calls, acc = _rounds(lambda m, j: row[m - 1, j - 1], paths, K)
            out.frames += 1
            out.calls += calls
            out.accepted.extend(acc)
    return out


@torch.no_grad()
def oracle_tokens_per_call(code_predictor, tree: SparseTree, data: Iterable) -> TokensPerCall:
    """Ceiling: drafts are the verifier's own top-m at each depth, replayed on free-running frames."""
    paths = set(tree.paths)
    K = tree.max_depth
    out = TokensPerCall()
    for hidden, codes in data:
        vr = verifier_ranks(code_predictor, hidden, codes).numpy()  # (b, 15): vr[:, p-1] rank of c_p
        for row in vr:
            calls, acc = _rounds(lambda m, j: row[m + j - 1], paths, K)
            out.frames += 1
            out.calls += calls
            out.accepted.extend(acc)
    return out


@torch.no_grad()
def measure_tokens_per_call(spec, frames: Iterable[tuple[torch.Tensor, torch.Tensor]], sampling: Sampling = Sampling(),
                            generator: torch.Generator | None = None, max_frames: int | None = None) -> TokensPerCall:
    """Run the speculative decoder on frames: iterable of (talker_hidden (T, E), c0 (T,)) per utterance."""
    out = TokensPerCall()
    for th, c0 in frames:
        for t in range(th.shape[0]):
            if max_frames is not None and out.frames >= max_frames:
                return out
            _, st = spec.generate_frame(th[t:t + 1].unsqueeze(1), c0[t:t + 1].view(1, 1), sampling, generator)
            out.frames += 1
            out.calls += st.calls
            out.accepted.extend(st.accepted_lengths)
    return out
