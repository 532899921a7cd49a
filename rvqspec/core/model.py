"""Qwen3-TTS talker (CodeDecoder) and code predictor (MultiCodeDecoder), numerically the official ones.

Both are stacks of Qwen3 decoder layers (pre-RMSNorm, q/k RMSNorm per head, RoPE, GQA, SwiGLU).
Unlike the HF classes they take *explicit* positions, an explicit additive mask and the static
cache columns to write, so that one call can verify a tree of drafts (seed 000 §2.3) and the
graph traces with static shapes (no `.item()`, no branching on tensor values, no shape unpacking
in `forward`).

Parameter names equal the official checkpoint keys minus the prefix `talker.` (CodeDecoder) or
`talker.code_predictor.` (MultiCodeDecoder), so `load_state_dict` takes the official tensors.

Numerics follow `qwen_tts/core/models/modeling_qwen3_tts.py` (0.1.1):
- RMSNorm in float32, cast back, then times the weight (`Qwen3TTSRMSNorm`).
- RoPE cos/sin computed in float32 from the positions and cast to the activation dtype. The talker's
  multimodal RoPE (`apply_multimodal_rotary_pos_emb`, interleaved or not) picks, for each frequency,
  the cos/sin of one of three position ids; TTS always passes the same id to all three
  (`get_rope_index` expands one 1-D position), so it *is* plain RoPE, which is what we compute.
- Attention scale head_dim**-0.5 (the SDPA default), softmax over an additive mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rvqspec.core.config import CodePredictorConfig, TalkerConfig
from rvqspec.core.sampling import Sampling, sample_logits

NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------
# Static KV cache
# --------------------------------------------------------------------------------------------
@dataclass
class KVCache:
    """Preallocated keys/values: k, v of shape (num_layers, B, num_kv_heads, max_len, head_dim).

    Columns are *slots*; which slots a query sees is decided only by the additive mask, so the
    speculative decoder may write a whole draft tree and later compact the accepted path with
    `move` / `move_rows`.
    """

    k: torch.Tensor
    v: torch.Tensor

    @classmethod
    def empty(cls, num_layers: int, batch: int, num_kv_heads: int, max_len: int, head_dim: int,
              dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> "KVCache":
        shape = (num_layers, batch, num_kv_heads, max_len, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def clone(self) -> "KVCache":
        return KVCache(self.k.clone(), self.v.clone())

    def zero_(self) -> "KVCache":
        self.k.zero_()
        self.v.zero_()
        return self

    def move(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Copy columns src_slots (n,) -> dst_slots (n,) in every layer and row (gather first, so
        overlapping source and destination are safe)."""
        if src_slots.shape != dst_slots.shape or src_slots.dim() != 1:
            raise ValueError(f"KVCache.move: src_slots {tuple(src_slots.shape)} and dst_slots "
                             f"{tuple(dst_slots.shape)} must both be (n,)")
        for t in (self.k, self.v):
            t.index_copy_(3, dst_slots, t.index_select(3, src_slots))

    def move_rows(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Per-row variant: src_slots, dst_slots (B, n) long; row b copies its own columns."""
        if src_slots.shape != dst_slots.shape or src_slots.dim() != 2 or src_slots.shape[0] != self.batch:
            raise ValueError(f"KVCache.move_rows: src_slots {tuple(src_slots.shape)} and dst_slots "
                             f"{tuple(dst_slots.shape)} must both be (B={self.batch}, n)")
        L, B, Hkv, _, D = self.k.shape
        n = src_slots.shape[1]
        src = src_slots.view(1, B, 1, n, 1).expand(L, B, Hkv, n, D)  # (L, B, Hkv, n, D)
        dst = dst_slots.view(1, B, 1, n, 1).expand(L, B, Hkv, n, D)
        for t in (self.k, self.v):
            t.scatter_(3, dst, torch.gather(t, 3, src))


def causal_mask(q_positions: torch.Tensor, max_len: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive mask (B, 1, q, max_len): query at position p sees slots 0..p (the plain AR layout
    where slot == position). q_positions (B, q) long."""
    slots = torch.arange(max_len, device=q_positions.device)  # (L,)
    allowed = slots.view(1, 1, -1) <= q_positions.unsqueeze(-1)  # (B, q, L)
    return torch.zeros(allowed.shape, dtype=dtype, device=q_positions.device).masked_fill(~allowed, NEG_INF).unsqueeze(1)


# --------------------------------------------------------------------------------------------
# Qwen3 decoder layer (shared by talker and code predictor; official submodule names)
# --------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # As Qwen3TTSRMSNorm: statistics in float32, cast back to the input dtype, then * weight (two
    # roundings in bf16, as the official). Not F.rms_norm: its normalized_shape would be read from a
    # tensor shape, which a trace records as an int op.
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float, bias: bool):
        super().__init__()
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                 eps: float, bias: bool):
        super().__init__()
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim, eps, bias)
        self.mlp = MLP(hidden, intermediate)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rope(nn.Module):
    """cos/sin (B, 1, q, head_dim) for explicit positions, computed in float32 as the official
    rotary embedding does (inv_freq of the HF 'default' rope), then cast to the activation dtype.

    inv_freq is deliberately *not* a buffer: `module.to(torch.bfloat16)` would round it to bf16
    (the official module has that quirk after `.to(bf16)`; its `from_pretrained(dtype=bf16)` path,
    the deployed one, keeps it in float32, as we always do)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = int(head_dim), float(theta)
        self._inv_freq: dict = {}  # device -> (hd/2,) float32

    def inv_freq_on(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """(hd/2,) float32 inverse frequencies on `device` (made once per device)."""
        key = torch.device(device)
        t = self._inv_freq.get(key)
        if t is None:
            with torch.inference_mode(False):
                idx = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=key).to(torch.float32)
                t = 1.0 / (self.theta ** (idx / self.head_dim))  # (hd/2,)
            self._inv_freq[key] = t
        return t

    @property
    def inv_freq(self) -> torch.Tensor:
        """The float32 table on the CPU (kept for code written when it was a buffer)."""
        return self.inv_freq_on("cpu")

    @inv_freq.setter
    def inv_freq(self, value: torch.Tensor) -> None:
        self._inv_freq = {value.device: value.detach().to(torch.float32)}

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq_on(positions.device)  # (B, q, hd/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, q, hd)
        return emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)  # (B, 1, q, hd) each

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta}"


def attention_qkv(att: nn.Module, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Qwen3 attention inputs from the normed hidden h (B, q, H): q (B, nh, q, hd) and k (B, nkv, q, hd)
    with per-head RMSNorm and RoPE, v (B, nkv, q, hd). Shared by decoder_stack and the SPADE trace."""
    q = rms_norm(F.linear(h, att.q_proj.weight, att.q_proj.bias).unflatten(-1, (-1, head_dim)),
                 att.q_norm.weight, eps).transpose(1, 2)  # (B, nh, q, hd)
    k = rms_norm(F.linear(h, att.k_proj.weight, att.k_proj.bias).unflatten(-1, (-1, head_dim)),
                 att.k_norm.weight, eps).transpose(1, 2)  # (B, nkv, q, hd)
    v = F.linear(h, att.v_proj.weight, att.v_proj.bias).unflatten(-1, (-1, head_dim)).transpose(1, 2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def mlp_residual(layer: nn.Module, x: torch.Tensor, eps: float, dropout: float = 0.0) -> torch.Tensor:
    """x + SwiGLU MLP of the post-attention-normed x (the second half of a Qwen3 decoder layer).
    `dropout` > 0 drops the MLP's output before the residual add (training only)."""
    h = rms_norm(x, layer.post_attention_layernorm.weight, eps)
    m = layer.mlp
    out = F.linear(F.silu(F.linear(h, m.gate_proj.weight)) * F.linear(h, m.up_proj.weight), m.down_proj.weight)
    return x + (F.dropout(out, dropout) if dropout else out)


def decoder_stack(layers: nn.ModuleList, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  cache: KVCache, slots: torch.Tensor, attn_mask: torch.Tensor | None,
                  n_kv: int, n_rep: int, head_dim: int, eps: float, kv_len: int | None = None,
                  dropout: float = 0.0) -> torch.Tensor:
    """Run Qwen3 decoder layers on x (B, q, H); writes k/v of the q tokens into cache columns
    `slots` (q,) and attends over the whole cache under the additive `attn_mask` (B|1, 1, q, L).

    GQA without `enable_gqa` (Core ML ignores it): the n_rep query heads that share a KV head are
    folded into the query axis, (B, nh, q, hd) -> (B, nkv, n_rep*q, hd), which is the official
    `repeat_kv` arithmetic (head h uses kv head h // n_rep) without copying K/V. Shapes change only
    through flatten/unflatten with -1 or config constants (n_kv, n_rep, head_dim), never by
    unpacking `x.shape`, so a trace has no int ops.

    `kv_len` (a Python int) restricts attention to slots [0, kv_len) (`attn_mask` may then be
    (.., kv_len) or full length), and `attn_mask=None` lets every such slot be seen. The AR loop
    passes the number of filled slots and, for q=1, no mask: masked slots add exact zeros in
    fp32, but in bf16 the CPU SDPA kernel rounds differently with a longer key axis or a mask, so
    this is what keeps the bf16 AR loop close to bit-identical with the official one.

    `dropout` > 0 (training only; 0 leaves the graph unchanged) drops each sublayer's output before
    its residual add, the usual residual dropout of a transformer.
    """
    if kv_len is not None and attn_mask is not None:
        attn_mask = attn_mask[..., :kv_len]
    for i, layer in enumerate(layers):
        att = layer.self_attn
        q, k, v = attention_qkv(att, rms_norm(x, layer.input_layernorm.weight, eps), cos, sin, head_dim, eps)
        kc, vc = cache.k[i], cache.v[i]  # (B, nkv, L, hd) views into the static cache
        kc.index_copy_(2, slots, k.to(kc.dtype))
        vc.index_copy_(2, slots, v.to(vc.dtype))
        if kv_len is not None:
            kc, vc = kc[:, :, :kv_len], vc[:, :, :kv_len]  # (B, nkv, kv_len, hd)
        qg = q.unflatten(1, (n_kv, n_rep)).flatten(2, 3)  # (B, nkv, n_rep*q, hd)
        mask = (None if attn_mask is None  # None: every slot visible (the AR step over filled slots)
                else attn_mask.unsqueeze(2).expand(-1, -1, n_rep, -1, -1).flatten(2, 3))  # (B|1, 1, n_rep*q, L)
        o = F.scaled_dot_product_attention(qg, kc, vc, attn_mask=mask)  # (B, nkv, n_rep*q, hd); scale hd**-0.5
        o = o.unflatten(2, (n_rep, -1)).flatten(1, 2)  # (B, nh, q, hd)
        o = o.transpose(1, 2).flatten(2)  # (B, q, nh*hd)
        o = F.linear(o, att.o_proj.weight, att.o_proj.bias)  # (B, q, H)
        x = x + (F.dropout(o, dropout) if dropout else o)
        x = mlp_residual(layer, x, eps, dropout)
    return x


def _stack_dims(cfg: CodePredictorConfig | TalkerConfig) -> tuple[int, int, int, float]:
    """(n_kv, n_rep, head_dim, eps): the static constants decoder_stack needs."""
    return (cfg.num_key_value_heads, cfg.num_attention_heads // cfg.num_key_value_heads, cfg.head_dim,
            cfg.rms_norm_eps)


def param_dtype_device(module: nn.Module) -> tuple[torch.dtype, torch.device]:
    p = next(module.parameters())
    return p.dtype, p.device


class _StackedCache:
    """A lazily built stack of several weight matrices (for tensor-indexed heads/tables), rebuilt
    whenever any source tensor changes (new storage, dtype, device or an in-place update)."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.value: torch.Tensor | None = None

    def get(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        key = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in tensors)
        if key != self.key:
            # a normal (not inference-mode) tensor, so a stack first built inside generate-time
            # inference_mode is still usable later in autograd code
            with torch.inference_mode(False), torch.no_grad():
                self.value = torch.cat([t.detach() for t in tensors], dim=0)
            self.key = key
        return self.value


# --------------------------------------------------------------------------------------------
# MultiCodeDecoder: the code predictor
# --------------------------------------------------------------------------------------------
class _CPModel(nn.Module):
    def __init__(self, cfg: CodePredictorConfig):
        super().__init__()
        self.layers = nn.ModuleList([
            DecoderLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                         cfg.head_dim, cfg.rms_norm_eps, cfg.attention_bias) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # codebooks 1..15 (table g-1 embeds code c_g); width = talker hidden (official)
        self.codec_embedding = nn.ModuleList(
            [nn.Embedding(cfg.vocab_size, cfg.talker_hidden_size) for _ in range(cfg.num_code_groups - 1)])


class MultiCodeDecoder(nn.Module):
    """The code predictor: emits c1..c15 of one frame from the talker hidden state and c0.

    Sequence layout (docs/design.md, seed 000 Figure 1): position 0 = talker hidden, position 1 =
    talker codec embedding of c0, position p >= 2 = table p-2 embedding of c_{p-1}; LM head i reads
    the hidden state at position i+1 and emits c_{i+1}.
    """

    def __init__(self, config: CodePredictorConfig):
        super().__init__()
        self.config = config
        self.model = _CPModel(config)
        self.lm_head = nn.ModuleList(
            [nn.Linear(config.hidden_size, config.vocab_size, bias=False) for _ in range(config.num_code_groups - 1)])
        # Official: a Linear(talker_hidden -> hidden, bias) only when the widths differ (1.7B).
        self.small_to_mtp_projection = (nn.Linear(config.talker_hidden_size, config.hidden_size, bias=True)
                                        if config.has_projection else nn.Identity())
        self.rope = Rope(config.head_dim, config.rope_theta)
        self.stack_dims = _stack_dims(config)  # (kv heads, query groups, head dim, rms eps) of decoder_stack
        # The c0 table is the *talker's* codec embedding: referenced, never registered (so that the
        # state_dict keys stay the official ones); the loader wires it with set_c0_embedding.
        object.__setattr__(self, "_c0_embedding", None)
        self._head_stack = _StackedCache()
        self._table_stack = _StackedCache()
        self._frame_state: dict = {}

    # ---- wiring ------------------------------------------------------------------------------
    def set_c0_embedding(self, emb: nn.Embedding) -> None:
        if not isinstance(emb, nn.Embedding) or emb.embedding_dim != self.config.talker_hidden_size:
            raise ValueError(f"set_c0_embedding expects nn.Embedding(*, {self.config.talker_hidden_size}), got {emb!r}")
        object.__setattr__(self, "_c0_embedding", emb)

    @property
    def c0_embedding(self) -> nn.Embedding:
        if self._c0_embedding is None:
            raise RuntimeError("MultiCodeDecoder has no c0 embedding: call "
                               "set_c0_embedding(talker.model.codec_embedding) (load_qwen3_tts does this)")
        return self._c0_embedding

    def new_cache(self, batch: int, max_len: int | None = None, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None) -> KVCache:
        pdtype, pdevice = param_dtype_device(self)
        c = self.config
        return KVCache.empty(c.num_hidden_layers, batch, c.num_key_value_heads, max_len or c.num_code_groups,
                             c.head_dim, dtype or pdtype, device or pdevice)

    # ---- embeddings and heads ------------------------------------------------------------------
    def embed_codes(self, codes: torch.Tensor, groups: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """codes (B, q) long, groups (q,) in 0..15 -> (B, q, talker_hidden). Group 0 uses the talker
        codec embedding, group g > 0 the predictor table g-1.

        `groups` as a Python sequence looks each group up in its own table (fast, no copies); as a
        tensor it indexes one concatenated table (traceable; built once and cached). Codes out of
        a table's range are not checked on the tensor path (that would need `.item()`)."""
        tables = [self.c0_embedding.weight] + [e.weight for e in self.model.codec_embedding]
        dtype = self.model.norm.weight.dtype
        if not torch.is_tensor(groups):
            groups = [int(g) for g in groups]
            if len(groups) != codes.shape[1]:
                raise ValueError(f"embed_codes: {len(groups)} groups for codes of shape {tuple(codes.shape)}")
            cols = [F.embedding(codes[:, j], tables[g]) for j, g in enumerate(groups)]  # q x (B, E)
            return torch.stack(cols, dim=1).to(dtype)  # (B, q, E)
        sizes = torch.tensor([t.shape[0] for t in tables], device=codes.device)
        offsets = torch.cumsum(sizes, 0) - sizes  # (16,) start row of each table
        big = self._table_stack.get(tables)  # (Vt + 15 V, E)
        return F.embedding(codes + offsets[groups].unsqueeze(0), big).to(dtype)  # (B, q, E)

    def lm_logits(self, hidden: torch.Tensor, heads: torch.Tensor | Sequence[int] | int) -> torch.Tensor:
        """hidden (B, q, H) -> logits (B, q, V), query j read by LM head heads[j].

        An int applies one head to all q. A Python sequence groups the queries by head (each head
        matrix read once: the fast path for tree verification). A tensor (q,) gathers the q head
        matrices and does one batched matmul (static, traceable)."""
        if isinstance(heads, int):
            return F.linear(hidden, self.lm_head[heads].weight)
        if not torch.is_tensor(heads):
            heads = [int(h) for h in heads]
            if len(heads) != hidden.shape[1]:
                raise ValueError(f"lm_logits: {len(heads)} heads for hidden of shape {tuple(hidden.shape)}")
            out = hidden.new_empty(hidden.shape[0], hidden.shape[1], self.config.vocab_size)  # (B, q, V)
            for h in sorted(set(heads)):
                idx = [j for j, hj in enumerate(heads) if hj == h]
                if len(idx) == len(heads):
                    return F.linear(hidden, self.lm_head[h].weight)
                it = torch.tensor(idx, device=hidden.device)
                out[:, it] = F.linear(hidden[:, it], self.lm_head[h].weight)
            return out
        V = self.config.vocab_size
        stack = self._head_stack.get([m.weight for m in self.lm_head]).unflatten(0, (-1, V))  # (15, V, H)
        w = stack.index_select(0, heads)  # (q, V, H)
        return torch.bmm(hidden.transpose(0, 1), w.transpose(1, 2)).transpose(0, 1)  # (B, q, V)

    # ---- forward -------------------------------------------------------------------------------
    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, cache: KVCache, slots: torch.Tensor,
                attn_mask: torch.Tensor, heads: torch.Tensor | Sequence[int] | int | None = None,
                kv_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """inputs_embeds (B, q, talker_hidden), positions (B, q) long, slots (q,) long (cache columns
        written), attn_mask (B|1, 1, q, max_len) additive -> (hidden (B, q, H) after the final
        norm, logits (B, q, V) or None when heads is None). `kv_len`: see `decoder_stack`."""
        x = self.small_to_mtp_projection(inputs_embeds)  # (B, q, H)
        cos, sin = self.rope(positions, x.dtype)
        mask = None if attn_mask is None else attn_mask.to(x.dtype)
        x = decoder_stack(self.model.layers, x, cos, sin, cache, slots, mask, *self.stack_dims, kv_len=kv_len)
        hidden = rms_norm(x, self.model.norm.weight, self.config.rms_norm_eps)  # (B, q, H)
        return hidden, (None if heads is None else self.lm_logits(hidden, heads))

    # ---- AR baseline ---------------------------------------------------------------------------
    def frame_buffers(self, batch: int, dtype: torch.dtype, device: torch.device) -> dict:
        """Per (B, dtype, device): a static cache of num_code_groups slots, cos/sin of positions
        0..15, the causal mask rows and slot indices, all made once and reused by every frame."""
        key = (batch, dtype, device)
        st = self._frame_state.get(key)
        if st is None:
            n = self.config.num_code_groups
            pos = torch.arange(n, device=device)  # (n,)
            cos, sin = self.rope(pos.unsqueeze(0), dtype)  # (1, 1, n, hd)
            mask = causal_mask(pos.unsqueeze(0), n, dtype)  # (1, 1, n, n)
            st = dict(cache=self.new_cache(batch, n, dtype, device), cos=cos, sin=sin, mask=mask,
                      slots=[pos[p:p + 1] for p in range(n)], prefill_slots=pos[:2])
            self._frame_state = {key: st}  # keep one entry: frames of one stream share it
        return st

    @torch.inference_mode()
    def generate_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = Sampling(),
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """Autoregressive c1..c15 (B, 15) long: prefill [h_talker, emb(c0)] (q=2), then 14 single
        steps on a static cache of 16 slots. Matches the official `code_predictor.generate`."""
        B = talker_hidden.shape[0]
        dtype, device = param_dtype_device(self)
        st = self.frame_buffers(B, dtype, device)
        cache, cos, sin, mask = st["cache"], st["cos"], st["sin"], st["mask"]
        layers, norm_w, eps = self.model.layers, self.model.norm.weight, self.config.rms_norm_eps

        def prefill(x: torch.Tensor) -> torch.Tensor:  # (B, 2, E) at positions 0, 1 -> (B, H)
            x = decoder_stack(layers, self.small_to_mtp_projection(x), cos[:, :, :2], sin[:, :, :2], cache,
                              st["prefill_slots"], mask[:, :, :2], *self.stack_dims, kv_len=2)
            return rms_norm(x[:, -1], norm_w, eps)

        def step(x: torch.Tensor, p: int) -> torch.Tensor:  # (B, 1, E) at position p -> (B, H)
            x = decoder_stack(layers, self.small_to_mtp_projection(x), cos[:, :, p:p + 1], sin[:, :, p:p + 1],
                              cache, st["slots"][p], None, *self.stack_dims, kv_len=p + 1)  # sees all p+1 filled slots
            return rms_norm(x[:, 0], norm_w, eps)

        return self.ar_frame(talker_hidden, c0, sampling, generator, prefill, step)

    def ar_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling,
                 generator: torch.Generator | None, prefill: Callable[[torch.Tensor], torch.Tensor],
                 step: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
        """The AR recipe around a decoder stack (the eager loop above and `rvqspec.core.compiled` share
        it): `prefill` maps the embedded [h_talker, c0] (B, 2, E) to the normed hidden (B, H) at
        position 1, `step` maps the embedding (B, 1, E) of c_{p-1} at position p to the hidden
        (B, H) there; LM head p-1 and `sampling` then give c_p. Returns c1..c15 (B, 15) long."""
        dtype = self.model.norm.weight.dtype
        n = self.config.num_code_groups
        out = torch.empty(c0.shape[0], n - 1, dtype=torch.long, device=c0.device)  # (B, 15)
        x = torch.cat([talker_hidden.to(dtype), self.c0_embedding(c0).to(dtype)], dim=1)  # (B, 2, E)
        code = sample_logits(F.linear(prefill(x), self.lm_head[0].weight), sampling, generator)  # (B,)
        out[:, 0] = code
        for p in range(2, n):  # position p embeds c_{p-1} with table p-2, head p-1 emits c_p
            x = F.embedding(code, self.model.codec_embedding[p - 2].weight).unsqueeze(1)  # (B, 1, E)
            code = sample_logits(F.linear(step(x, p), self.lm_head[p - 1].weight), sampling, generator)
            out[:, p - 1] = code
        return out


# --------------------------------------------------------------------------------------------
# CodeDecoder: the talker
# --------------------------------------------------------------------------------------------
class _ResizeMLP(nn.Module):
    """Official `Qwen3TTSTalkerResizeMLP`: text_hidden -> text_hidden -> talker hidden, SiLU, biases."""

    def __init__(self, n_in: int, n_mid: int, n_out: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(n_in, n_mid, bias=True)
        self.linear_fc2 = nn.Linear(n_mid, n_out, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class _TalkerModel(nn.Module):
    def __init__(self, cfg: TalkerConfig):
        super().__init__()
        self.layers = nn.ModuleList([
            DecoderLayer(cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                         cfg.head_dim, cfg.rms_norm_eps, cfg.attention_bias) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class CodeDecoder(nn.Module):
    """The talker: Qwen3 layers over (text + codec) embeddings; emits c0 and the hidden state that
    conditions the code predictor. Same static-cache calling convention as MultiCodeDecoder."""

    def __init__(self, config: TalkerConfig):
        super().__init__()
        self.config = config
        self.model = _TalkerModel(config)
        self.text_projection = _ResizeMLP(config.text_hidden_size, config.text_hidden_size, config.hidden_size)
        self.codec_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rope = Rope(config.head_dim, config.rope_theta)
        self.stack_dims = _stack_dims(config)  # (kv heads, query groups, head dim, rms eps) of decoder_stack
        # Residual dropout while training (a training recipe's knob, not a checkpoint field: the
        # official talker has none); applied only in train mode.
        self.residual_dropout = 0.0

    def new_cache(self, batch: int, max_len: int, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None) -> KVCache:
        pdtype, pdevice = param_dtype_device(self)
        c = self.config
        return KVCache.empty(c.num_hidden_layers, batch, c.num_key_value_heads, max_len, c.head_dim,
                             dtype or pdtype, device or pdevice)

    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, cache: KVCache, slots: torch.Tensor,
                attn_mask: torch.Tensor, logits: bool = True, kv_len: int | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """inputs_embeds (B, q, H), positions (B, q) long (the text position id the official
        `get_rope_index` gives), slots (q,), attn_mask (B|1, 1, q, max_len) additive ->
        (hidden (B, q, H) after the final norm, codec logits (B, q, V) or None). `kv_len`: attend
        only over slots [0, kv_len) (see `decoder_stack`; also saves work on a long cache)."""
        x = inputs_embeds
        cos, sin = self.rope(positions, x.dtype)
        mask = None if attn_mask is None else attn_mask.to(x.dtype)
        drop = self.residual_dropout if self.training else 0.0
        x = decoder_stack(self.model.layers, x, cos, sin, cache, slots, mask, *self.stack_dims, kv_len=kv_len,
                          dropout=drop)
        hidden = rms_norm(x, self.model.norm.weight, self.config.rms_norm_eps)
        return hidden, (F.linear(hidden, self.codec_head.weight) if logits else None)

    def text_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Text token ids (B, T) -> (B, T, H): text_projection(text_embedding(ids)), as the official
        prompt builder does for every text token (incl. tts_bos / tts_eos / tts_pad)."""
        return self.text_projection(self.model.text_embedding(ids))

    def codec_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Codec ids of group 0 / control tokens (B, T) -> (B, T, H)."""
        return self.model.codec_embedding(ids)

    def frame_embedding(self, codes: torch.Tensor, code_predictor: MultiCodeDecoder) -> torch.Tensor:
        """codes (B, 16) long -> (B, 1, H): talker codec_embedding(c0) + sum_g predictor table g-1 (c_g),
        summed over the 16 stacked embeddings as the official talker forward does."""
        n = self.config.num_code_groups
        if codes.dim() != 2 or codes.shape[1] != n:
            raise ValueError(f"frame_embedding expects codes of shape (B, {n}), got {tuple(codes.shape)}")
        parts = [self.model.codec_embedding(codes[:, :1])] + [
            code_predictor.model.codec_embedding[g - 1](codes[:, g:g + 1]) for g in range(1, n)]  # 16 x (B, 1, H)
        return torch.cat(parts, dim=1).sum(1, keepdim=True)  # (B, 1, H)

    def next_input(self, codes: torch.Tensor, code_predictor: MultiCodeDecoder, text_hidden: torch.Tensor) -> torch.Tensor:
        """The talker input of the next step (official streaming generate): this frame's codec sum plus
        the next trailing text embedding (B, 1, H), or the tts_pad embedding once the text ran out."""
        return self.frame_embedding(codes, code_predictor) + text_hidden
