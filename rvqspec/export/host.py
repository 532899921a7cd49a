"""The host side of the exported graphs: greedy frames driven through any backend.

A backend is a callable ``feeds: dict[str, np.ndarray] -> dict[str, np.ndarray]`` (torch module,
onnxruntime session, Core ML model). These loops are the reference protocol for a device runtime
(see `rvqspec.export.wrappers` for the cache layout) and the end-to-end check of the exports: the
AR loop must give `MultiCodeDecoder.generate_frame`'s greedy codes, and so must the speculative
loop (greedy acceptance is exact: a node is kept iff its token is the verifier's argmax at its
parent, seed 000 §2.2), in 1 + rounds calls instead of 16.

Embedding lookups are host-side (the graphs take ``input_embeds``): position 0 = talker hidden,
code c_g (g >= 0) at position g + 1 through table g (0: the talker's codec embedding, g >= 1:
predictor table g - 1), docs/design.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from rvqspec.export.wrappers import MASK_VALUE, ExportError, RoundGraph
from rvqspec.core.tree import SparseTree

Call = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def torch_call(graph: RoundGraph) -> Call:
    """A RoundGraph (eager or traced) as a numpy-in, numpy-out backend."""
    spec = graph.spec("torch")
    names, out_names = list(spec.inputs), list(spec.outputs)
    dtype = graph.head_stack.dtype

    @torch.inference_mode()
    def call(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.asarray(feeds[n])) for n in names]
        args = [a if a.dtype == torch.int32 else a.to(dtype) for a in args]
        outs = graph(*args)
        return {n: o.float().numpy() if o.is_floating_point() else o.numpy() for n, o in zip(out_names, outs)}

    return call


@dataclass
class HostCache:
    """The host-owned KV cache (L, n_kv, S, head_dim) for one frame, filled slots 0..length-1."""

    k: np.ndarray
    v: np.ndarray
    length: int = 0

    @classmethod
    def empty(cls, graph: RoundGraph) -> "HostCache":
        shape = graph.spec("x").inputs["key_cache"][0]
        return cls(np.zeros(shape, np.float32), np.zeros(shape, np.float32))

    def feeds(self, embeds: np.ndarray) -> dict[str, np.ndarray]:
        S = self.k.shape[2]
        kpm = np.full((1, S), MASK_VALUE, np.float32)
        kpm[:, :self.length] = 0
        return {"input_embeds": embeds.astype(np.float32), "cache_length": np.array([self.length], np.int32),
                "key_padding_mask": kpm, "key_cache": self.k, "value_cache": self.v}

    def commit(self, out: dict[str, np.ndarray], columns: list[int]) -> None:
        """Write the K/V columns `columns` of this call's queries to the next slots."""
        n = len(columns)
        self.k[:, :, self.length:self.length + n] = out["key_update"][:, :, columns]
        self.v[:, :, self.length:self.length + n] = out["value_update"][:, :, columns]
        self.length += n


def _embed(code_predictor, code: int, group: int) -> np.ndarray:
    """(E,) embedding of code c_group (group 0: the talker's codec table)."""
    table = code_predictor.c0_embedding if group == 0 else code_predictor.model.codec_embedding[group - 1]
    return table.weight[int(code)].detach().float().numpy()


@torch.inference_mode()
def ar_frame(call: Call, graph: RoundGraph, code_predictor, talker_hidden: torch.Tensor, c0: int) -> list[int]:
    """Greedy c1..c15 with the AR graph: 16 calls (positions 0..15), one column committed each."""
    n = code_predictor.config.num_code_groups
    cache = HostCache.empty(graph)
    codes = [int(c0)]
    for p in range(n):
        x = talker_hidden.reshape(-1).float().numpy() if p == 0 else _embed(code_predictor, codes[p - 1], p - 1)
        out = call(cache.feeds(x.reshape(1, 1, -1)))
        cache.commit(out, [0])
        if p >= 1:  # LM head p-1 at position p emits c_p
            codes.append(int(out["logits"][0, 0].argmax()))
    return codes[1:]


@torch.inference_mode()
def spec_frame(call: Call, graph: RoundGraph, code_predictor, talker_hidden: torch.Tensor, c0: int,
               paths: list | None = None) -> tuple[list[int], int]:
    """Greedy c1..c15 with the fused graph -> (codes, calls); `paths` collects each round's
    accepted node indices.

    Round 0 (cache_length 0): root = talker hidden at position 0, tree node (0,) = c0 at position 1
    (its row gives c1 and the first drafts); other nodes are padding and never committed. Round
    with committed c_m (cache_length m + 1): root = c_m, node i = draft for c_{m+d_i}; accept the
    deepest chain whose tokens equal the argmax at their parents; emit the argmax at the last
    accepted node; commit root + path columns; next drafts = draft_tokens row of that node."""
    tree: SparseTree = graph.tree
    if not tree.paths or tree.paths[0] != (0,):
        raise ExportError("spec_frame needs a tree containing the node (0,) (round 0 places c0 there)")
    b = tree.buffers()
    depth, parent = b.depth.tolist(), b.parent.tolist()
    n = code_predictor.config.num_code_groups - 1  # 15 codes
    q, E = graph.q, code_predictor.config.talker_hidden_size
    cache = HostCache.empty(graph)
    # round 0
    x = np.zeros((1, q, E), np.float32)
    x[0, 0] = talker_hidden.reshape(-1).float().numpy()
    x[0, 1] = _embed(code_predictor, c0, 0)
    out = call(cache.feeds(x))
    cache.commit(out, [0, 1])
    codes = [int(c0), int(out["logits"][0, 1].argmax())]  # c0, c1
    drafts = out["draft_tokens"][0, 1].tolist()  # (N,) next round's node tokens
    calls, m = 1, 1
    while m < n:
        tokens = [codes[m]] + drafts  # (q,)
        x = np.stack([_embed(code_predictor, t, min(m + d, n)) for t, d in zip(tokens, depth)])[None]  # (1, q, E)
        out = call(cache.feeds(x))
        calls += 1
        y = out["logits"][0].argmax(-1)  # (q,) verifier argmax per node
        ok = [True] + [False] * (q - 1)
        for i in range(1, q):  # canonical order: parents come before children
            ok[i] = ok[parent[i]] and m + depth[i] <= n and tokens[i] == int(y[parent[i]])
        last = max((i for i in range(q) if ok[i]), key=lambda i: depth[i])
        path = []
        node = last
        while node != 0:
            path.append(node)
            node = parent[node]
        path.reverse()
        if paths is not None:
            paths.append(path)  # accepted node indices of this round (tests check compaction cases)
        codes.extend(tokens[i] for i in path)  # c_{m+1}..c_{m+a}
        m += len(path)
        if m < n:
            codes.append(int(y[last]))  # c_{m+1} from the last accepted node
        m += 1
        if m >= n:
            break  # frame complete; nothing more to cache
        cache.commit(out, [0] + path)  # root + accepted path -> slots m_old+1.. (the Figure 2 compaction)
        drafts = out["draft_tokens"][0, last].tolist()
    return codes[1:n + 1], calls
