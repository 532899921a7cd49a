"""The talker step as one graph call, for the streaming frame loop on graph backends (issue 18).

Why: on the 2-core CPU box the mini talker's eager q = 1 step (8 layers x 192) costs about 6 ms, of
which the arithmetic is a small part: 57 tiny ATen GEMVs and some 400 more small ops, each paying
dispatcher overhead. A real-time stream needs the whole frame (talker + 15 codes + codec) inside
about 24 ms for RTF 0.3, so the talker step runs as one onnxruntime call (about 1.2 ms) like the
code predictor's whole-frame and whole-round graphs (`rvqspec.export.backends`).

`TalkerStepGraph` (the talker's weights as constants):

    forward(inputs_embeds (1, 1, E), position (1,) int32, key_padding_mask (1, S),
            key_cache (L, n_kv, S, hd), value_cache (L, n_kv, S, hd))
      -> hidden (1, 1, E) after the final norm, logits (1, 1, V) codec head,
         key_update (L, n_kv, 1, hd), value_update (L, n_kv, 1, hd)

The layout is the code predictor's `RoundGraph` (host-owned cache, the new column appended inside
the graph, the host writing it to its slot afterwards); S, the cache length, is a dynamic axis of
the ONNX graph, so one export serves every utterance length. The talker's RoPE is its own module's
(`CodeDecoder.rope`), evaluated in the graph at `position`; the mini world's positions are plain text
positions (the official multimodal RoPE with equal sections over identical position ids).

`TalkerSteps` is the frame loop's side (`rvqspec.core.frame_loop.iter_frames(talker_steps=...)`): a
per-utterance host cache and `prefill` / `step` in the eager talker's calling convention. c0 is
sampled on the host from the returned logits with the caller's generator, as in the eager loop, so
the codes follow the same law (equal codes up to float rounding of the logits).
"""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rvqspec.core.model import CodeDecoder, rotate_half
from rvqspec.export.host import TimedCall
from rvqspec.export.onnx import OPSET, OnnxGraph
from rvqspec.export.wrappers import MASK_VALUE, ExportError, GraphSpec, _ln_rms, as_float32, rms_form

TALKER_FILE = "talker_step.onnx"


class TalkerStepGraph(nn.Module):
    """One q = 1 talker step over a host-owned cache (module docstring). float32."""

    def __init__(self, talker: CodeDecoder):
        super().__init__()
        c = talker.config
        object.__setattr__(self, "talker", talker)  # not a submodule: only what the graph reads is registered
        self.layers = talker.model.layers
        self.norm = talker.model.norm
        self.head = talker.codec_head
        self.H, self.V, self.L = c.hidden_size, c.vocab_size, c.num_hidden_layers
        self.n_kv, self.hd = c.num_key_value_heads, c.head_dim
        self.n_rep = c.num_attention_heads // c.num_key_value_heads  # query heads per KV head (GQA)
        self.eps = c.rms_norm_eps
        self.register_buffer("inv_freq", talker.rope.inv_freq_on("cpu").clone(), persistent=False)  # (hd/2,)

    def spec(self, name: str = "talker_step") -> GraphSpec:
        kv = ((self.L, self.n_kv, "S", self.hd), "float")  # S: the cache length, a dynamic axis
        inputs = {"inputs_embeds": ((1, 1, self.H), "float"), "position": ((1,), "int32"),
                  "key_padding_mask": ((1, "S"), "float"), "key_cache": kv, "value_cache": kv}
        outputs = {"hidden": ((1, 1, self.H), "float"), "logits": ((1, 1, self.V), "float"),
                   "key_update": ((self.L, self.n_kv, 1, self.hd), "float"),
                   "value_update": ((self.L, self.n_kv, 1, self.hd), "float")}
        return GraphSpec(name=name, q=1, inputs=inputs, outputs=outputs)

    def example_inputs(self, cache_len: int = 4) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(0)
        kv = torch.randn(self.L, self.n_kv, cache_len, self.hd, generator=g)  # (L, n_kv, S, hd)
        kpm = torch.zeros(1, cache_len)
        kpm[:, cache_len // 2:] = MASK_VALUE
        return (torch.randn(1, 1, self.H, generator=g), torch.tensor([cache_len // 2], dtype=torch.int32), kpm,
                kv, kv.clone())

    def forward(self, inputs_embeds: torch.Tensor, position: torch.Tensor, key_padding_mask: torch.Tensor,
                key_cache: torch.Tensor, value_cache: torch.Tensor):
        hd, n_kv, n_rep, H = self.hd, self.n_kv, self.n_rep, self.H
        x = inputs_embeds[0]  # (1, H)
        freqs = position.to(torch.float32).view(1, 1) * self.inv_freq  # (1, hd/2)
        emb = torch.cat([freqs, freqs], -1)  # (1, hd)
        cos, sin = emb.cos().unsqueeze(0), emb.sin().unsqueeze(0)  # (1, 1, hd)
        mask = torch.cat([key_padding_mask, torch.zeros(1, 1)], -1)  # (1, S+1): the new key is always seen
        k_new, v_new = [], []
        for i, layer in enumerate(self.layers):
            att = layer.self_attn
            h = _ln_rms(x, layer.input_layernorm.weight, H, self.eps)  # (1, H)
            qh = _ln_rms(F.linear(h, att.q_proj.weight, att.q_proj.bias).unflatten(-1, (-1, hd)),
                         att.q_norm.weight, hd, self.eps).transpose(0, 1)  # (nh, 1, hd)
            kh = _ln_rms(F.linear(h, att.k_proj.weight, att.k_proj.bias).unflatten(-1, (-1, hd)),
                         att.k_norm.weight, hd, self.eps).transpose(0, 1)  # (nkv, 1, hd)
            vh = F.linear(h, att.v_proj.weight, att.v_proj.bias).unflatten(-1, (-1, hd)).transpose(0, 1)  # (nkv, 1, hd)
            qh = qh * cos + rotate_half(qh) * sin
            kh = kh * cos + rotate_half(kh) * sin
            k_new.append(kh)
            v_new.append(vh)
            keys = torch.cat([key_cache[i], kh], dim=1)  # (nkv, S+1, hd)
            vals = torch.cat([value_cache[i], vh], dim=1)  # (nkv, S+1, hd)
            qg = (qh * hd ** -0.5).unflatten(0, (n_kv, n_rep)).flatten(1, 2)  # (nkv, n_rep, hd), pre-scaled
            scores = torch.matmul(qg, keys.transpose(1, 2)) + mask  # (nkv, n_rep, S+1)
            o = torch.matmul(scores.softmax(-1), vals)  # (nkv, n_rep, hd)
            x = x + F.linear(o.flatten().view(1, -1), att.o_proj.weight, att.o_proj.bias)  # heads in (kv, rep) order
            h = _ln_rms(x, layer.post_attention_layernorm.weight, H, self.eps)
            m = layer.mlp
            x = x + F.linear(F.silu(F.linear(h, m.gate_proj.weight)) * F.linear(h, m.up_proj.weight), m.down_proj.weight)
        hid = _ln_rms(x, self.norm.weight, H, self.eps)  # (1, H)
        logits = F.linear(hid, self.head.weight)  # (1, V)
        return hid.unsqueeze(0), logits.unsqueeze(0), torch.stack(k_new), torch.stack(v_new)


def export_talker_onnx(talker: CodeDecoder, path: str | Path) -> Path:
    """Write the talker step as ONNX (float32, S a dynamic axis)."""
    graph = TalkerStepGraph(as_float32(talker).eval()).eval()
    path = Path(path)
    dyn = {"key_padding_mask": {1: "S"}, "key_cache": {2: "S"}, "value_cache": {2: "S"}}
    with torch.no_grad(), warnings.catch_warnings(), rms_form("pow"):
        warnings.simplefilter("ignore")  # tracer warnings about Python ints baked as constants: intended
        spec = graph.spec()
        torch.onnx.export(graph, graph.example_inputs(), str(path), input_names=list(spec.inputs),
                          output_names=list(spec.outputs), opset_version=OPSET, dynamic_axes=dyn, dynamo=False)
    return path


class TalkerSteps:
    """The frame loop's talker on a graph backend: `start(length)` opens a host cache of `length`
    slots, `prefill(x (1, q, E))` fills the next q slots (one graph call per token; causal attention
    makes that the q-token prefill), `step(x (1, 1, E))` -> (hidden (1, 1, E), logits (1, 1, V))."""

    def __init__(self, talker: CodeDecoder, call, backend: str):
        c = talker.config
        self.call = call if isinstance(call, TimedCall) else TimedCall(call)  # times read by `bench stream`
        self.backend = backend
        self.dims = (c.num_hidden_layers, c.num_key_value_heads, c.head_dim)  # (L, n_kv, hd) of the cache
        self.k = self.v = self.kpm = None  # set by start()
        self.length = 0

    def start(self, length: int) -> None:
        if length < 1:
            raise ValueError(f"talker cache length must be >= 1, got {length}")
        L, n_kv, hd = self.dims
        self.k = np.zeros((L, n_kv, length, hd), np.float32)
        self.v = np.zeros((L, n_kv, length, hd), np.float32)
        self.kpm = np.full((1, length), MASK_VALUE, np.float32)  # slots 0..length-1 hidden until filled
        self.length = 0

    def _one(self, x: np.ndarray) -> dict[str, np.ndarray]:
        if self.k is None:
            raise RuntimeError("TalkerSteps: start(length) before prefill/step")
        p = self.length
        if p >= self.k.shape[2]:
            raise ValueError(f"talker cache of {self.k.shape[2]} slots is full (step {p + 1})")
        out = self.call({"inputs_embeds": x.reshape(1, 1, -1), "position": np.array([p], np.int32),
                         "key_padding_mask": self.kpm, "key_cache": self.k, "value_cache": self.v})
        self.k[:, :, p] = out["key_update"][:, :, 0]
        self.v[:, :, p] = out["value_update"][:, :, 0]
        self.kpm[0, p] = 0.0
        self.length = p + 1
        return out

    def prefill(self, x: torch.Tensor) -> None:
        arr = x.detach().float().numpy()  # (1, q, E)
        for i in range(arr.shape[1]):
            self._one(arr[:, i])

    def step(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._one(x.detach().float().numpy())
        return torch.from_numpy(out["hidden"]), torch.from_numpy(out["logits"])


def make_talker_steps(backend: str, talker: CodeDecoder, workdir: str | Path | None = None,
                      threads: int = 1) -> TalkerSteps | None:
    """The talker for `backend`: None for eager (the frame loop calls the module itself), else
    `TalkerSteps` over the onnxruntime session of `TalkerStepGraph`. (Not for `compiled`: Inductor's
    CPU code for these tiny shapes measured slower than onnxruntime, a whole AR frame 37.8 ms against
    about 16 ms after a 262 s compile, so streaming offers the onnx backends.)"""
    if backend == "eager":
        return None
    if backend in ("onnx", "onnx-loop"):
        out = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="rvqspec-onnx-"))
        out.mkdir(parents=True, exist_ok=True)
        return TalkerSteps(talker, OnnxGraph(export_talker_onnx(talker, out / TALKER_FILE), threads=threads), backend)
    raise ExportError(f"backend must be one of eager, onnx, onnx-loop for the talker step graph, got {backend!r}")
