"""CUDA-graph capture of the three calls that make a frame: the talker step, the whole AR frame of
the code predictor, and the fused speculative round (seed 000 §3.4 measures per-call cost on the
device; on a GPU, launch overhead dominates small calls unless the call is one graph replay, which
is what faster-qwen3-tts does for Qwen3-TTS's talker and predictor).

Every capture has static shapes and owns its buffers: inputs are pre-allocated tensors the caller
fills through `StaticGraph.__call__` (a copy into the buffer, then `CUDAGraph.replay()`), the KV
cache is pre-allocated inside, and sampling in the AR-frame graph is Gumbel-max on noise passed in
as an input (`gumbel_noise`, drawn by the host from the caller's generator), so the graph is a pure
function of its inputs: argmax(warped logits + G) with G ~ Gumbel(0, 1) is an exact draw from
softmax(warped logits) (the deployed temperature / top-k / top-p warping, `warp_logits`), and
every backend can be checked bit for bit against the eager code on the same noise.

Off CUDA the same objects run eagerly on the same static buffers: that is how the CPU tests check
the capture logic (buffer shapes, the static cache, outputs equal to the eager model). The
speculative round is captured over `rvqspec.export.wrappers.fused_graph` as it stands (explicit
KV in and out, acceptance on the host); `capture_module` takes any module with `example_inputs`,
so a round graph with in-graph acceptance drops in the same way.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from rvqspec.core.defaults import BUDGET, NUM_CODES
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder, causal_mask
from rvqspec.core.sampling import Sampling, warp_logits
from rvqspec.core.tree import SparseTree
from rvqspec.export.wrappers import ar_graph, fused_graph


class StaticGraph:
    """`fn(**inputs)` over static input buffers: captured as one CUDA graph when the buffers live on
    a CUDA device, run eagerly otherwise. `graph(**new_values)` copies the values into the buffers
    and returns the (static) outputs."""

    def __init__(self, fn: Callable[..., object], inputs: dict[str, torch.Tensor], warmup: int = 3) -> None:
        self.fn, self.inputs = fn, inputs
        self.device = next(iter(inputs.values())).device
        self.captured = self.device.type == "cuda"
        self.graph = None
        if self.captured:
            # warm-up on a side stream (allocator and cuBLAS workspaces settle), then capture
            s = torch.cuda.Stream(self.device)
            s.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(s), torch.inference_mode():
                for _ in range(warmup):
                    fn(**inputs)
            torch.cuda.current_stream(self.device).wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph), torch.inference_mode():
                self.outputs = fn(**inputs)
        else:
            with torch.inference_mode():
                self.outputs = fn(**inputs)

    def __call__(self, **values: torch.Tensor):
        unknown = set(values) - set(self.inputs)
        if unknown:
            raise KeyError(f"StaticGraph: unknown inputs {sorted(unknown)}; known: {sorted(self.inputs)}")
        for name, v in values.items():
            buf = self.inputs[name]
            if tuple(v.shape) != tuple(buf.shape):
                raise ValueError(f"StaticGraph input {name!r}: shape {tuple(v.shape)}, the graph has {tuple(buf.shape)}")
            buf.copy_(v)
        if self.captured:
            self.graph.replay()
        else:
            with torch.inference_mode():
                self.outputs = self.fn(**self.inputs)
        return self.outputs

    def replay(self) -> None:
        """Run once on whatever the buffers hold (timing)."""
        if self.captured:
            self.graph.replay()
        else:
            with torch.inference_mode():
                self.outputs = self.fn(**self.inputs)


def gumbel_noise(shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
    """Gumbel(0, 1) noise of `shape`, float32, from `generator` (on the host)."""
    u = torch.rand(shape, generator=generator).clamp_(1e-20, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))


def gumbel_sample(logits: torch.Tensor, sampling: Sampling, noise: torch.Tensor) -> torch.Tensor:
    """logits (B, V), noise (B, V) Gumbel -> codes (B,) long: argmax(warp_logits + noise), an exact
    draw from probs(logits, sampling); greedy ignores the noise."""
    if not sampling.do_sample:
        return logits.argmax(dim=-1)
    return (warp_logits(logits, sampling) + noise).argmax(dim=-1)


# ---- the three captures ---------------------------------------------------------------------------

def _param(m: torch.nn.Module) -> torch.Tensor:
    return next(m.parameters())


def capture_talker_step(talker: CodeDecoder, max_len: int, warmup: int = 3) -> StaticGraph:
    """One talker step (q = 1) over a pre-allocated cache of `max_len` slots. Inputs: `x` (1, 1, E)
    the frame's input embedding, `position` (1, 1) long, `slot` (1,) long (the cache column
    written), `mask` (1, 1, 1, max_len) additive (0 on the visible slots). Outputs (hidden
    (1, 1, E), codec logits (1, 1, V))."""
    p = _param(talker)
    E = talker.config.hidden_size
    cache = talker.new_cache(1, max_len, p.dtype, p.device)
    inputs = {"x": torch.zeros(1, 1, E, dtype=p.dtype, device=p.device),  # (1, 1, E)
              "position": torch.zeros(1, 1, dtype=torch.long, device=p.device),  # (1, 1)
              "slot": torch.zeros(1, dtype=torch.long, device=p.device),  # (1,)
              "mask": torch.zeros(1, 1, 1, max_len, dtype=p.dtype, device=p.device)}  # (1, 1, 1, L)

    def fn(x, position, slot, mask):
        return talker(x, position, cache, slot, mask)

    g = StaticGraph(fn, inputs, warmup)
    g.cache = cache
    return g


def step_mask(p: int, max_len: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(1, 1, 1, max_len) additive mask of a step at slot p: slots 0..p visible."""
    m = torch.full((1, 1, 1, max_len), float("-inf"), dtype=dtype)
    m[..., :p + 1] = 0
    return m


def capture_ar_frame(code_predictor: MultiCodeDecoder, sampling: Sampling = Sampling(), warmup: int = 3) -> StaticGraph:
    """The whole AR frame of the code predictor as one graph: the q = 2 prefill and 14 single steps
    unrolled on a static 16-slot cache, sampling by Gumbel-max. Inputs: `talker_hidden` (1, 1, E),
    `c0` (1, 1) long, `noise` (15, V) float32 Gumbel noise (row i draws c_{i+1}). Output: codes
    (1, 15) long, the same recipe as `MultiCodeDecoder.generate_frame` (prefill [h, emb(c0)], LM
    head p-1 at position p)."""
    cp = code_predictor
    p0 = _param(cp)
    c = cp.config
    n = c.num_code_groups
    cache = cp.new_cache(1, n, p0.dtype, p0.device)
    pos = torch.arange(n, device=p0.device).view(1, n)  # (1, 16)
    mask = causal_mask(pos, n, p0.dtype)  # (1, 1, 16, 16)
    slots = pos[0]  # (16,)
    inputs = {"talker_hidden": torch.zeros(1, 1, c.talker_hidden_size, dtype=p0.dtype, device=p0.device),
              "c0": torch.zeros(1, 1, dtype=torch.long, device=p0.device),
              "noise": torch.zeros(n - 1, c.vocab_size, dtype=torch.float32, device=p0.device)}  # (15, V)

    def fn(talker_hidden, c0, noise):
        out = []
        x = torch.cat([talker_hidden, cp.c0_embedding(c0).to(p0.dtype)], dim=1)  # (1, 2, E)
        h, _ = cp(x, pos[:, :2], cache, slots[:2], mask[:, :, :2])  # (1, 2, H)
        code = gumbel_sample(F.linear(h[:, -1], cp.lm_head[0].weight), sampling, noise[0:1])  # (1,)
        out.append(code)
        for p in range(2, n):  # position p embeds c_{p-1} with table p-2; head p-1 emits c_p
            x = F.embedding(code, cp.model.codec_embedding[p - 2].weight).unsqueeze(1)  # (1, 1, E)
            h, _ = cp(x, pos[:, p:p + 1], cache, slots[p:p + 1], mask[:, :, p:p + 1])  # (1, 1, H)
            code = gumbel_sample(F.linear(h[:, 0], cp.lm_head[p - 1].weight), sampling, noise[p - 1:p])
            out.append(code)
        return torch.stack(out, dim=1)  # (1, 15)

    g = StaticGraph(fn, inputs, warmup)
    g.cache = cache
    return g


def capture_module(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], names: list[str],
                   warmup: int = 3) -> StaticGraph:
    """Any static-shape module (e.g. an export `RoundGraph`) with its example inputs as the buffers."""
    inputs = {n: t.clone() for n, t in zip(names, example_inputs)}
    return StaticGraph(lambda **kw: module(*(kw[n] for n in names)), inputs, warmup)


def capture_spec_round(code_predictor: MultiCodeDecoder, tree: SparseTree, drafter=None, cache_length: int = 6,
                       warmup: int = 3) -> StaticGraph:
    """The fused draft + verify round (seed 000 Figure 3) for `tree`, q = N + 1: the export graph
    (`rvqspec.export.wrappers.fused_graph`, explicit KV in and out) with its inputs as buffers."""
    p = _param(code_predictor)
    graph = fused_graph(code_predictor, tree, drafter).to(p.device)
    names = list(graph.spec("round").inputs)
    ex = [t.to(p.device) if t.dtype == torch.int32 else t.to(device=p.device, dtype=p.dtype)
          for t in graph.example_inputs(cache_length, torch.Generator().manual_seed(0), torch.float32)]
    g = capture_module(graph, tuple(ex), names, warmup)
    g.spec = graph.spec("round")
    return g


# ---- timing ----------------------------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_graphs(graphs: dict[str, StaticGraph], calls: int = 200, warmup: int = 20) -> dict[str, float]:
    """Median ms per replay of each graph, timed round-robin (one replay of every graph per sweep)
    so load changes hit all alike; seed 000 §3.4: p50 of 200 calls after 20 warm-ups."""
    dev = next(iter(graphs.values())).device
    ts: dict[str, list] = {k: [] for k in graphs}
    for i in range(warmup + calls):
        for k, g in graphs.items():
            _sync(dev)
            t0 = time.perf_counter()
            g.replay()
            _sync(dev)
            if i >= warmup:
                ts[k].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in ts.items()}


def bench_cuda_graphs(talker: CodeDecoder, code_predictor: MultiCodeDecoder, budgets=(BUDGET,),
                      tokens_per_call: dict[str, float] | None = None, calls: int = 200, warmup: int = 20,
                      max_len: int = 256) -> dict:
    """Captured talker step, AR frame, q = 1 round and q = N + 1 rounds, timed side by side, and the
    speculative frame projected per acceptance source: prefill (timed as the q = 1 round) +
    (15 / tpc - 1) rounds of q = N + 1, against the captured AR frame (seed 000 §3.4)."""
    p = _param(code_predictor)
    graphs = {"talker_step": capture_talker_step(talker, max_len),
              "ar_frame": capture_ar_frame(code_predictor)}
    g1 = ar_graph(code_predictor).to(p.device)
    names = list(g1.spec("ar").inputs)
    ex = [t.to(p.device) if t.dtype == torch.int32 else t.to(device=p.device, dtype=p.dtype)
          for t in g1.example_inputs(6, torch.Generator().manual_seed(0), torch.float32)]
    graphs["round_q1"] = capture_module(g1, tuple(ex), names)
    for N in budgets:
        graphs[f"round_q{N + 1}"] = capture_spec_round(code_predictor, SparseTree.grow(_chain_acc(N), N), None)
    ms = time_graphs(graphs, calls, warmup)
    out = {"device": torch.cuda.get_device_name(p.device) if p.device.type == "cuda" else str(p.device),
           "captured": all(g.captured for g in graphs.values()), "dtype": str(p.dtype).replace("torch.", ""),
           "calls": calls, "warmup": warmup, "ms": {k: round(v, 4) for k, v in ms.items()},
           "verify_over_step": {N: round(ms[f"round_q{N + 1}"] / ms["round_q1"], 4) for N in budgets},
           "spec": {}}
    for label, tpc in (tokens_per_call or {}).items():
        for N in budgets:
            frame = ms["round_q1"] + (NUM_CODES / tpc - 1) * ms[f"round_q{N + 1}"]
            out["spec"][f"{label}, N={N}"] = {"tokens_per_call": tpc, "frame_ms": round(frame, 4),
                                              "speedup_over_ar_frame": round(ms["ar_frame"] / frame, 4)}
    return out


def _chain_acc(N: int) -> torch.Tensor:
    """A made-up acceptance table (depth 3 x rank N) that grows a tree of N nodes; timing needs
    only the tree's size."""
    acc = torch.linspace(0.9, 0.1, N).repeat(3, 1)  # (3, N)
    return acc * torch.tensor([[1.0], [0.8], [0.6]])
