"""A compiled AR code predictor: the same `generate_frame`, with the decoder stack built by
TorchInductor into static-shape kernels whose weights are frozen and prepacked.

Why: a q=1 code-predictor call is a chain of matrix-vector products that must stream every weight
once (the weights' bandwidth floor). On the 2-core CPU box, eager ATen GEMV reads weights at about
20 GB/s (fp32) and 15 GB/s (bf16) against about 38 GB/s of single-thread read bandwidth; Inductor
with `freezing` (weights become constants, so they can be prepacked) and `max_autotune` (its
own CPU GEMM templates and oneDNN's bf16 kernels are benchmarked per shape) reaches 35-40 GB/s on
the same matrices. Nothing about the arithmetic changes: same layers, same order of ops.

Static shapes: every frame uses the same 16-slot cache and full-length additive causal masks
(masked slots get exact zero weight), so there are exactly two graphs per (batch, dtype): the
q=2 prefill and the q=1 step. The LM head (one of 15 matrices, chosen per step) and sampling stay
eager, which keeps the graph count at two.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rvqspec.core.model import KVCache, MultiCodeDecoder, param_dtype_device, decoder_stack, rms_norm
from rvqspec.core.sampling import Sampling


@dataclass(frozen=True)
class CompileConfig:
    """How the decoder stack is compiled (defaults: the fastest measured on the CPU box)."""

    max_autotune: bool = True   # benchmark Inductor's GEMM templates against oneDNN/MKL per shape
    freezing: bool = True       # weights as constants: prepacked once (inference only)
    fullgraph: bool = True      # fail loudly instead of silently falling back to eager pieces

    def inductor_options(self) -> dict:
        # Applied with `torch._inductor.config.patch` around the compiling calls: torch 2.13 does
        # not honour `freezing` passed as torch.compile(options=...) (measured: the weights stay
        # graph inputs and every GEMM is an extern ATen mm).
        return {"max_autotune": self.max_autotune, "freezing": self.freezing}


class _Backbone(nn.Module):
    """projection -> Qwen3 layers (writing the static cache) -> final norm. Shares the predictor's
    parameters (no copies), so the compiled graph freezes exactly the model's weights."""

    def __init__(self, cp: MultiCodeDecoder):
        super().__init__()
        self.proj = cp.small_to_mtp_projection
        self.layers = cp.model.layers
        self.norm = cp.model.norm
        self.dims = cp.stack_dims

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """x (B, q, E), cos/sin (1, 1, q, hd), mask (1, 1, q, 16), slots (q,), k/v the static cache
        (L, B, nkv, 16, hd), written in place -> normed hidden (B, q, H)."""
        h = decoder_stack(self.layers, self.proj(x), cos, sin, KVCache(k, v), slots, mask, *self.dims)
        return rms_norm(h, self.norm.weight, self.dims[3])


class CompiledBackbone:
    """`_Backbone` compiled with static shapes (one graph per input shape: q, batch, cache length,
    dtype), every call under the Inductor options. Used by the AR frame below and by the
    speculative decoder's fused verify call (`SpeculativeCodePredictor(..., compile=...)`)."""

    def __init__(self, code_predictor: MultiCodeDecoder, config: CompileConfig = CompileConfig()):
        self.config = config
        # Dynamo counts graphs per code object: every instance compiles _Backbone.forward again
        # (one graph per shape), so the default limit of 8 runs out after a few instances.
        import torch._dynamo.config as dynamo_config

        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 256)
        # dynamic=False: the prefill (q=2) and the step (q=1) get two static graphs instead of
        # one graph with a symbolic q after the second shape is seen
        self._fn = torch.compile(_Backbone(code_predictor), fullgraph=config.fullgraph, dynamic=False)

    def options(self):
        """The Inductor options as a context: every call runs under it, so that a recompile (a
        guard that fails on some new input) is compiled with the same options."""
        import torch._inductor.config as inductor_config

        return inductor_config.patch(self.config.inductor_options())

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                 slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Same arguments and result as `_Backbone.forward`."""
        with self.options():
            return self._fn(x, cos, sin, mask, slots, k, v)


class CompiledCodePredictor:
    """Drop-in for `MultiCodeDecoder.generate_frame` (same arguments, same result distribution;
    greedy codes identical up to kernel rounding) with a compiled decoder stack.

    The first frame for a new (batch, dtype) compiles (seconds; several with max_autotune) and
    the weights are frozen into the compiled graphs: after changing the predictor's weights build
    a new CompiledCodePredictor. Needs a C++ compiler (Inductor's CPU backend)."""

    def __init__(self, code_predictor: MultiCodeDecoder, config: CompileConfig = CompileConfig()):
        self.code_predictor = code_predictor.eval()
        self.config = config
        self._backbone = CompiledBackbone(self.code_predictor, config)
        self._state: dict = {}

    def _buffers(self, batch: int, dtype: torch.dtype, device: torch.device) -> dict:
        key = (batch, dtype, device)
        st = self._state.get(key)
        if st is None:
            cp = self.code_predictor
            n = cp.config.num_code_groups
            base = cp.frame_buffers(batch, dtype, device)  # the eager loop's cos/sin/mask/slots
            cos, sin, mask, slots = base["cos"], base["sin"], base["mask"], base["slots"]
            # per-call inputs as separate contiguous tensors (no views at varying offsets); an own
            # cache, so the eager and the compiled loop never share state
            st = dict(cache=cp.new_cache(batch, n, dtype, device),
                      prefill=(cos[:, :, :2].clone(), sin[:, :, :2].clone(), mask[:, :, :2].clone(),
                               base["prefill_slots"].clone()),
                      step=[(cos[:, :, p:p + 1].clone(), sin[:, :, p:p + 1].clone(), mask[:, :, p:p + 1].clone(),
                             slots[p].clone()) for p in range(n)])
            self._state = {key: st}
        return st

    @torch.inference_mode()
    def step_logits(self, x: torch.Tensor, position: int) -> torch.Tensor:
        """One compiled q=1 call: x (B, 1, E) embedded at `position` (2..15; its k/v written to that
        slot) -> logits (B, V) of LM head position-1. The unit the benchmark times."""
        cp = self.code_predictor
        dtype, device = param_dtype_device(cp)
        st = self._buffers(x.shape[0], dtype, device)
        h = self._backbone(x.to(dtype), *st["step"][position], st["cache"].k, st["cache"].v)[:, 0]  # (B, H)
        return F.linear(h, cp.lm_head[position - 1].weight)

    @torch.inference_mode()
    def generate_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = Sampling(),
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """c1..c15 (B, 15) long, exactly the AR recipe of `MultiCodeDecoder.generate_frame`
        (`MultiCodeDecoder.ar_frame` around the compiled stack)."""
        cp = self.code_predictor
        dtype, device = param_dtype_device(cp)
        st = self._buffers(talker_hidden.shape[0], dtype, device)
        k, v = st["cache"].k, st["cache"].v
        with self._backbone.options():  # one context for the whole frame (the calls re-enter it cheaply)
            return cp.ar_frame(talker_hidden, c0, sampling, generator,
                               lambda x: self._backbone(x, *st["prefill"], k, v)[:, -1],
                               lambda x, p: self._backbone(x, *st["step"][p], k, v)[:, 0])
