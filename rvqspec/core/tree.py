"""Sparse draft trees as lists of rank paths (seed 000 §2.2 "sparse tree attention", Figure 2).

A tree is a set of rank paths such as ``[(0,), (0, 0), (1,)]``: the path ``(r1, ..., rd)`` is the node
at depth d whose token is the drafter's rank-``rd`` candidate for the d-th drafted code, reached
through the rank-``r1`` candidate at depth 1, and so on (Medusa's representation). Nodes are kept in
canonical order, sorted by (length, value); node index 0 is the committed root token and tree node
``i`` (in canonical order) gets index ``i + 1``, so a verify call has query length q = N + 1.

Everything decoding needs is derived once, by the pure function `tree_buffers` (Medusa's
``generate_medusa_buffers`` idea), and the greedy growth follows the Medusa recipe: node score =
product of per-(depth, rank) acceptance along its path, candidates = each node's first child and
next sibling, add the best until the budget N is reached, depth capped at K.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from rvqspec.core.defaults import K
from rvqspec.core.jsonfile import atomic_path

Path_ = tuple[int, ...]


class TreeError(ValueError):
    """A tree specification is malformed (message names the offending path, key or value)."""


def _canonical(paths: Iterable[Sequence[int]], source: str = "paths") -> tuple[Path_, ...]:
    out: list[Path_] = []
    for i, p in enumerate(paths):
        if isinstance(p, (str, bytes)) or not isinstance(p, (list, tuple)):
            raise TreeError(f"{source}[{i}] must be a list of ranks, got {p!r}")
        if len(p) == 0:
            raise TreeError(f"{source}[{i}] is empty; the root is implicit, list only drafted nodes")
        for r in p:
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
                raise TreeError(f"{source}[{i}] = {list(p)!r} holds a non-integer rank {r!r}")
            if r < 0:
                raise TreeError(f"{source}[{i}] = {list(p)!r} holds a negative rank {r}")
        out.append(tuple(int(r) for r in p))
    seen: set[Path_] = set()
    for p in out:
        if p in seen:
            raise TreeError(f"{source} holds the path {list(p)} twice")
        seen.add(p)
    for p in out:
        if len(p) > 1 and p[:-1] not in seen:
            raise TreeError(f"{source} holds {list(p)} but not its prefix {list(p[:-1])}")
    return tuple(sorted(out, key=lambda p: (len(p), p)))


@dataclass(frozen=True)
class TreeBuffers:
    """Tensors for one tree, q = N + 1 entries, index 0 = committed root (see `tree_buffers`)."""

    paths: tuple[Path_, ...]
    mask: torch.Tensor            # (q, q) bool: mask[i, j] = j is an ancestor of i or i itself
    depth: torch.Tensor           # (q,) long: 0 for the root; also the position offset from the root
    parent: torch.Tensor          # (q,) long: -1 for the root
    rank: torch.Tensor            # (q,) long: candidate rank of the node's token, -1 for the root
    first_child: torch.Tensor     # (q,) long: -1 when none (children in rank order)
    next_sibling: torch.Tensor    # (q,) long: -1 when none
    retrieve: torch.Tensor        # (L, max_depth + 1) long: root-to-leaf node indices, padded with -1
    sibling_before: torch.Tensor  # (q, q) bool: [j, k] = k is a sibling of j visited before j
    max_depth: int
    max_rank: int                 # largest rank + 1 at any depth (top-m needed from the drafter)
    expected_length: float | None  # 1 + sum of node scores under the table given, else None

    @property
    def q(self) -> int:
        return int(self.depth.shape[0])


def tree_buffers(paths: Sequence[Sequence[int]], acceptance: np.ndarray | torch.Tensor | None = None) -> TreeBuffers:
    """Derive every tensor a verify round needs from rank paths (pure; no state).

    ``acceptance`` (K, R): acc[d, r] = probability that the rank-r candidate at depth d + 1 is the
    token the verifier emits; the expected accepted length is then 1 + sum over nodes of the product
    of acc along the node's path (Medusa; the 1 counts the token every round emits).
    """
    ps = _canonical(paths)
    q = len(ps) + 1
    index = {p: i + 1 for i, p in enumerate(ps)}
    depth = torch.zeros(q, dtype=torch.long)  # (q,)
    parent = torch.full((q,), -1, dtype=torch.long)  # (q,)
    rank = torch.full((q,), -1, dtype=torch.long)  # (q,)
    mask = torch.zeros(q, q, dtype=torch.bool)  # (q, q)
    mask[0, 0] = True
    children: list[list[int]] = [[] for _ in range(q)]
    for p, i in index.items():
        depth[i] = len(p)
        rank[i] = p[-1]
        par = index[p[:-1]] if len(p) > 1 else 0
        parent[i] = par
        children[par].append(i)
        mask[i, 0] = True
        for d in range(1, len(p) + 1):
            mask[i, index[p[:d]]] = True
    first_child = torch.full((q,), -1, dtype=torch.long)  # (q,)
    next_sibling = torch.full((q,), -1, dtype=torch.long)  # (q,)
    for i, ch in enumerate(children):
        ch.sort(key=lambda c: int(rank[c]))  # canonical order already sorts siblings by rank
        if ch:
            first_child[i] = ch[0]
        for a, b in zip(ch, ch[1:]):
            next_sibling[a] = b
    sibling_before = torch.zeros(q, q, dtype=torch.bool)  # (q, q)
    for ch in children:
        for a, j in enumerate(ch):
            sibling_before[j, ch[:a]] = True
    max_depth = max((len(p) for p in ps), default=0)
    leaves = [i for i in range(q) if not children[i]]
    retrieve = torch.full((len(leaves), max_depth + 1), -1, dtype=torch.long)  # (L, D + 1)
    for row, leaf in enumerate(leaves):
        chain = []
        node = leaf
        while node != -1:
            chain.append(node)
            node = int(parent[node])
        retrieve[row, : len(chain)] = torch.tensor(chain[::-1])
    max_rank = max((p[-1] + 1 for p in ps), default=0)
    expected = None
    if acceptance is not None:
        acc = _check_table(acceptance)
        need_d, need_r = max_depth, max_rank
        if ps and (acc.shape[0] < need_d or acc.shape[1] < need_r):
            raise TreeError(f"acceptance table of shape {acc.shape} is too small for a tree of depth "
                            f"{need_d} with ranks up to {need_r - 1}")
        expected = 1.0 + sum(_score(p, acc) for p in ps)
    return TreeBuffers(paths=ps, mask=mask, depth=depth, parent=parent, rank=rank, first_child=first_child,
                       next_sibling=next_sibling, retrieve=retrieve,
                       sibling_before=sibling_before, max_depth=max_depth, max_rank=max_rank,
                       expected_length=expected)


def _check_table(acceptance: np.ndarray | torch.Tensor) -> np.ndarray:
    acc = np.asarray(acceptance.detach().cpu() if isinstance(acceptance, torch.Tensor) else acceptance, dtype=np.float64)
    if acc.ndim != 2:
        raise TreeError(f"acceptance table must be 2-D (depth, rank), got shape {acc.shape}")
    if not np.all(np.isfinite(acc)) or acc.min(initial=0.0) < 0 or acc.max(initial=0.0) > 1:
        raise TreeError("acceptance table entries must be probabilities in [0, 1]")
    return acc


def _score(path: Path_, acc: np.ndarray) -> float:
    s = 1.0
    for d, r in enumerate(path):
        s *= float(acc[d, r])
    return s


class SparseTree:
    """A validated tree of rank paths in canonical (length, value) order."""

    def __init__(self, paths: Iterable[Sequence[int]]):
        self.paths: tuple[Path_, ...] = _canonical(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SparseTree) and self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)

    def __repr__(self) -> str:
        return f"SparseTree(N={len(self)}, depth={self.max_depth}, paths={[list(p) for p in self.paths]})"

    @property
    def num_nodes(self) -> int:
        return len(self.paths)

    @property
    def max_depth(self) -> int:
        return max((len(p) for p in self.paths), default=0)

    @classmethod
    def chain(cls, depth: int) -> "SparseTree":
        """The top-1 chain [(0,), (0, 0), ...] of the given depth (plain Medusa-1 style drafting)."""
        return cls([(0,) * d for d in range(1, depth + 1)])

    @classmethod
    def grow(cls, acceptance: np.ndarray | torch.Tensor, budget: int, max_depth: int = K) -> "SparseTree":
        """Greedy Medusa growth (seed 000 §2.2): add the best-scoring candidate until ``budget`` nodes.

        Candidates are each node's first child (rank 0 one level deeper, if depth < max_depth and the
        table has that depth) and its next sibling (rank + 1, if the table has that rank). Ties break
        by canonical order, so growth is deterministic and tree(N) is a subset of tree(N + 1).
        """
        acc = _check_table(acceptance)
        if budget < 0:
            raise TreeError(f"budget must be >= 0, got {budget}")
        if max_depth < 1:
            raise TreeError(f"max_depth must be >= 1, got {max_depth}")
        depth_cap = min(max_depth, acc.shape[0])
        ranks = acc.shape[1]
        chosen: list[Path_] = []
        frontier: dict[Path_, float] = {}
        if depth_cap >= 1 and ranks >= 1:
            frontier[(0,)] = float(acc[0, 0])
        while len(chosen) < budget and frontier:
            best = min(frontier, key=lambda p: (-frontier[p], len(p), p))
            del frontier[best]
            chosen.append(best)
            score = _score(best, acc)
            if len(best) < depth_cap:
                frontier[best + (0,)] = score * float(acc[len(best), 0])
            if best[-1] + 1 < ranks:
                sib = best[:-1] + (best[-1] + 1,)
                frontier[sib] = _score(sib, acc)
        return cls(chosen)

    def buffers(self, acceptance: np.ndarray | torch.Tensor | None = None) -> TreeBuffers:
        return tree_buffers(self.paths, acceptance)

    def expected_length(self, acceptance: np.ndarray | torch.Tensor) -> float:
        """1 + sum over nodes of the product of acc[d, r] along the path (Medusa's estimate)."""
        out = tree_buffers(self.paths, acceptance).expected_length
        assert out is not None
        return out

    def to_json(self) -> str:
        return json.dumps([list(p) for p in self.paths])

    @classmethod
    def from_json(cls, text: str, source: str = "tree JSON") -> "SparseTree":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise TreeError(f"{source}: not valid JSON ({e})") from e
        if isinstance(obj, dict):
            if "paths" not in obj:
                raise TreeError(f"{source}: object has no key 'paths' (keys: {sorted(obj)})")
            obj = obj["paths"]
        if not isinstance(obj, list):
            raise TreeError(f"{source}: expected a list of rank paths, got {type(obj).__name__}")
        return cls(_canonical(obj, source=source))

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:  # a crash leaves the old tree or the whole new one
            tmp.write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "SparseTree":
        return cls.from_json(Path(path).read_text(), source=str(path))
