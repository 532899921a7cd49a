"""The host side of the exported graphs: frames driven through any backend, greedy or sampled.

A backend is a callable ``feeds: dict[str, np.ndarray] -> dict[str, np.ndarray]`` (torch module,
onnxruntime session, Core ML model). These loops are the reference protocol for a device runtime
(see `rvqspec.export.wrappers` for the cache layout) and the end-to-end check of the exports: the
AR loop must give `MultiCodeDecoder.generate_frame`'s greedy codes, and so must the speculative
loop (greedy acceptance is exact: a node is kept iff its token is the verifier's argmax at its
parent, seed 000 §2.2), in 1 + rounds calls instead of 16.

Sampling (seed 000 §2.3, the deployed top-k): the host warps the returned logits (temperature ->
top-k -> top-p) and draws Gumbel noise from the caller's generator; the speculative loop decides
with THE acceptance rule `rvqspec.core.verify.accept`, the AR loop with its Gumbel-max sample.

Embedding lookups are host-side (the graphs take ``input_embeds``): position 0 = talker hidden,
code c_g (g >= 0) at position g + 1 through table g (0: the talker's codec embedding, g >= 1:
predictor table g - 1), docs/design.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from rvqspec.core.sampling import Sampling, sampling_tensors, warp_logits
from rvqspec.core.tree import SparseTree
from rvqspec.core.verify import AcceptTables, accept, check_noise, gumbel_max, gumbel_noise
from rvqspec.export.wrappers import MASK_VALUE, ExportError, FrameGraph, RoundGraph, SpecRoundGraph

Call = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class TimedCall:
    """A backend call that records the wall time of each call (the benches split a frame into graph
    calls and host work with it)."""

    def __init__(self, call: Call):
        self.call = call
        self.times: list[float] = []

    def __call__(self, feeds):
        t0 = time.perf_counter()
        out = self.call(feeds)
        self.times.append(time.perf_counter() - t0)
        return out


def timed_call(inner) -> TimedCall | None:
    """The timed graph call of a graph-backend inner loop or talker (`GraphInner`, `SpecFrameInner`,
    `TalkerSteps`); None for the eager ones, whose passes the benches count at the decoder stack."""
    call = getattr(inner, "call", None)
    return call if isinstance(call, TimedCall) else None


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


class _Sampler:
    """Host-side scores and noise for one frame: warped logits, Gumbel noise (zeros when greedy)."""

    def __init__(self, sampling: Sampling, generator: torch.Generator | None):
        self.sampling, self.generator = sampling, generator

    def scores(self, logits: np.ndarray) -> torch.Tensor:
        return warp_logits(torch.from_numpy(np.asarray(logits, np.float32)), self.sampling)

    def noise(self, *shape: int) -> torch.Tensor:
        if not self.sampling.do_sample:
            return torch.zeros(shape)
        return gumbel_noise(shape, self.generator)


@torch.inference_mode()
def ar_frame(call: Call, graph: RoundGraph, code_predictor, talker_hidden: torch.Tensor, c0: int,
             sampling: Sampling = Sampling.greedy(), generator: torch.Generator | None = None) -> list[int]:
    """c1..c15 with the AR graph: 16 calls (positions 0..15), one column committed each; greedy by
    default (the argmax), else Gumbel-max sampling with noise from `generator`."""
    n = code_predictor.config.num_code_groups
    V = code_predictor.config.vocab_size
    noise = _Sampler(sampling, generator).noise(n - 1, V)  # (15, V): row p-1 draws c_p, as `FrameGraph`
    sampler = _Sampler(sampling, generator)
    cache = HostCache.empty(graph)
    codes = [int(c0)]
    for p in range(n):
        x = talker_hidden.reshape(-1).float().numpy() if p == 0 else _embed(code_predictor, codes[p - 1], p - 1)
        out = call(cache.feeds(x.reshape(1, 1, -1)))
        cache.commit(out, [0])
        if p >= 1:  # LM head p-1 at position p emits c_p
            codes.append(int(gumbel_max(sampler.scores(out["logits"][0, 0]), noise[p - 1])))
    return codes[1:]


@torch.inference_mode()
def spec_frame(call: Call, graph: RoundGraph, code_predictor, talker_hidden: torch.Tensor, c0: int,
               paths: list | None = None, sampling: Sampling = Sampling.greedy(),
               generator: torch.Generator | None = None, _control: str | None = None) -> tuple[list[int], int]:
    """c1..c15 with the fused graph -> (codes, calls); `paths` collects each round's accepted node
    indices. Greedy by default; a sampled `sampling` draws its Gumbel noise from `generator`.

    Round 0 (cache_length 0): root = talker hidden at position 0, tree node (0,) = c0 at position 1
    (its row gives c1 and the first drafts); other nodes are padding and never committed. Round
    with committed c_m (cache_length m + 1): root = c_m, node i = draft for c_{m+d_i}; THE acceptance
    rule (`rvqspec.core.verify.accept`) over the returned logits picks the accepted chain and the
    code after it; commit root + path columns; next drafts = draft_tokens row of the last node.

    ``_control="fresh_token"`` is for tests only and makes the loop WRONG on purpose (the negative
    control of the chi-square test): the code after the accepted chain is drawn with fresh noise,
    i.e. from the full p instead of the residual left by the rejected children."""
    if _control not in (None, "fresh_token"):
        raise ValueError(f"unknown _control {_control!r}")
    tree: SparseTree = graph.tree
    if not tree.paths or tree.paths[0] != (0,):
        raise ExportError("spec_frame needs a tree containing the node (0,) (round 0 places c0 there)")
    b = tree.buffers()
    t = AcceptTables.of(b)
    depth = b.depth.tolist()
    n = code_predictor.config.num_code_groups - 1  # 15 codes
    q, E = graph.q, code_predictor.config.talker_hidden_size
    V = code_predictor.config.vocab_size
    sampler = _Sampler(sampling, generator)
    cache = HostCache.empty(graph)
    # round 0
    x = np.zeros((1, q, E), np.float32)
    x[0, 0] = talker_hidden.reshape(-1).float().numpy()
    x[0, 1] = _embed(code_predictor, c0, 0)
    out = call(cache.feeds(x))
    cache.commit(out, [0, 1])
    # round 0 draws a whole (1, q, V) noise block and uses node (0,)'s row for c1: the same draws as
    # the whole-round graph (`graph_spec_frame`) and the eager decoder, so all three agree per seed
    c1 = gumbel_max(sampler.scores(out["logits"][0, 1]), sampler.noise(1, q, V)[0, 1])
    codes = [int(c0), int(c1)]  # c0, c1
    drafts = out["draft_tokens"][0, 1].tolist()  # (N,) next round's node tokens
    calls, m = 1, 1
    while m < n:
        tokens = [codes[m]] + drafts  # (q,)
        x = np.stack([_embed(code_predictor, t_, min(m + d, n)) for t_, d in zip(tokens, depth)])[None]  # (1, q, E)
        out = call(cache.feeds(x))
        calls += 1
        valid = b.depth + m <= n  # (q,) never accept a draft past c15
        _, ok, last_t, tok = accept(sampler.scores(out["logits"]), sampler.noise(1, q, V),
                                    torch.tensor(tokens).view(1, q), valid, t.parent, t.strict_anc, t.depth,
                                    t.sibling_before)
        okl = ok[0].tolist()
        path = [i for i in range(1, q) if okl[i]]  # canonical order: the accepted chain by depth
        last = int(last_t[0])
        if _control == "fresh_token":
            tok = gumbel_max(sampler.scores(out["logits"][0, last]), sampler.noise(V)).view(1)
        if paths is not None:
            paths.append(path)  # accepted node indices of this round (tests check compaction cases)
        codes.extend(tokens[i] for i in path)  # c_{m+1}..c_{m+a}
        m += len(path)
        if m < n:
            codes.append(int(tok[0]))  # c_{m+1}: residual sample or bonus at the last accepted node
        m += 1
        if m >= n:
            break  # frame complete; nothing more to cache
        cache.commit(out, [0] + path)  # root + accepted path -> slots m_old+1.. (the Figure 2 compaction)
        drafts = out["draft_tokens"][0, last].tolist()
    return codes[1:n + 1], calls


# ---- the whole-frame and whole-round graphs: the host only feeds state and noise -----------------
def module_call(graph: FrameGraph | SpecRoundGraph, fn=None) -> Call:
    """A FrameGraph / SpecRoundGraph (or any graph with `spec()`, e.g. the talker's `TalkerStepGraph`;
    or `fn`, e.g. its torch.compile form) as a numpy backend."""
    spec = graph.spec()
    names, out_names = list(spec.inputs), list(spec.outputs)
    fn = graph if fn is None else fn

    @torch.inference_mode()
    def call(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = fn(*[torch.from_numpy(np.asarray(feeds[k])) for k in names])
        outs = outs if isinstance(outs, tuple) else (outs,)
        return {k: o.float().numpy() if o.is_floating_point() else o.numpy() for k, o in zip(out_names, outs)}

    return call


def sampling_feeds(sampling: Sampling) -> dict[str, np.ndarray]:
    """The graphs' sampling inputs (temperature, top_k, top_p_tail) for `sampling`."""
    t, k, tail = sampling_tensors(sampling)
    return {"temperature": t.numpy(), "top_k": k.numpy(), "top_p_tail": tail.numpy()}


def frame_rows(talker_hidden: torch.Tensor, c0: torch.Tensor) -> int:
    """The batch B of a `generate_frame` call, after checking talker_hidden (B, 1, E) and c0 (B, 1);
    the graph backends decode the rows one by one."""
    if talker_hidden.dim() != 3 or talker_hidden.shape[1] != 1:
        raise ValueError(f"talker_hidden must be (B, 1, E), got {tuple(talker_hidden.shape)}")
    B = talker_hidden.shape[0]
    if c0.shape != (B, 1):
        raise ValueError(f"c0 must be (B, 1) = ({B}, 1), got {tuple(c0.shape)}")
    return B


def _frame_inputs(talker_hidden: torch.Tensor, E: int) -> np.ndarray:
    th = talker_hidden.detach().reshape(-1).float()
    if th.numel() != E:
        raise ExportError(f"talker_hidden must hold E={E} values (shape (1, 1, {E})), got {tuple(talker_hidden.shape)}")
    return th.numpy().reshape(1, E)


@torch.inference_mode()
def graph_ar_frame(call: Call, graph: FrameGraph, talker_hidden: torch.Tensor, c0: int,
                   sampling: Sampling = Sampling.greedy(), generator: torch.Generator | None = None,
                   noise: torch.Tensor | None = None) -> list[int]:
    """c1..c15 in ONE call of the whole-frame graph. noise (15, V): given (checked) or drawn from
    `generator` (zeros when greedy)."""
    shape = (graph.n, graph.V)
    if noise is None:
        noise = _Sampler(sampling, generator).noise(*shape)
    else:
        check_noise(noise, shape)
    feeds = {"talker_hidden": _frame_inputs(talker_hidden, graph.E), "c0": np.array([int(c0)], np.int32),
             "noise": noise.float().numpy(), **sampling_feeds(sampling)}
    return call(feeds)["codes"][0].tolist()


@torch.inference_mode()
def graph_spec_frame(call: Call, graph: SpecRoundGraph, talker_hidden: torch.Tensor, c0: int,
                     sampling: Sampling = Sampling.greedy(), generator: torch.Generator | None = None,
                     noises: list | None = None, accepted: list | None = None) -> tuple[list[int], int]:
    """c1..c15 with the whole-round graph -> (codes, calls). Each call gets the state the last one
    returned and fresh noise (1, q, V) (from `noises[i]` if given, checked; else from `generator`).
    `accepted` collects the accepted drafted nodes of every round after round 0."""
    shape = (1, graph.q, graph.V)
    sampler = _Sampler(sampling, generator)
    kv = np.zeros(graph.spec().inputs["key_cache"][0], np.float32)
    tokens = np.zeros((1, graph.q), np.int32)
    tokens[0, 1] = int(c0)
    state = {"tokens": tokens, "cache_length": np.zeros(1, np.int32), "key_cache": kv, "value_cache": kv.copy()}
    fixed = {"talker_hidden": _frame_inputs(talker_hidden, graph.E), **sampling_feeds(sampling)}
    codes: list[int] = []
    calls = 0
    while len(codes) < graph.n:
        if noises is not None:  # caller-given noise is checked; our own draws are right by construction
            noise = noises[calls]
            check_noise(noise, shape)
        else:
            noise = sampler.noise(*shape)
        out = call({**state, **fixed, "noise": noise.float().numpy()})
        calls += 1
        count = int(out["count"][0])
        if count < 1:
            raise ExportError(f"round graph returned count={count} at cache_length={int(state['cache_length'][0])}")
        codes.extend(out["codes"][0, :count].tolist())
        if accepted is not None and calls > 1:  # a = cache growth - 1 (root + path committed)
            accepted.append(int(out["next_cache_length"][0]) - int(state["cache_length"][0]) - 1)
        state = {"tokens": out["next_tokens"], "cache_length": out["next_cache_length"],
                 "key_cache": out["next_key_cache"], "value_cache": out["next_value_cache"]}
    return codes[:graph.n], calls
