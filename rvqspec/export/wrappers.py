"""Static-shape export graphs of the code predictor: the AR step and the fused speculative round
(host-side sampling), and, at the end of this module, the whole AR frame (`FrameGraph`) and the
whole speculative round (`SpecRoundGraph`) with sampling and acceptance in the graph (issue 16).

One module, `RoundGraph`, covers both: the AR step is the round of the empty tree (q = 1, no
drafts), the fused call (seed 000 Figure 3) is the round of a tree of N nodes (q = N + 1).

Cache layout (Argmax TTSKit / whisperkittools style, explicit KV in and out, no Core ML state):

* ``key_cache`` / ``value_cache`` (L, n_kv, S, head_dim): the committed prefix, S = 16 static
  slots (positions 0..15 of one frame). The host owns the cache; slot s holds position s; keys
  are stored as the graph returns them (after k-norm and RoPE), so they are never recomputed.
* ``key_padding_mask`` (1, S) additive: 0 on filled slots 0..cache_length-1, -1e4 elsewhere.
* ``cache_length`` (1,) int32: the number of committed slots = the position of query 0 (the
  committed token; AR: the only token). Node i of the tree sits at position cache_length + depth_i.
* outputs ``key_update`` / ``value_update`` (L, n_kv, q, head_dim): the K/V columns of the q
  queries. The host writes the columns it keeps: AR the single column at slot cache_length; a
  speculative round the root plus the accepted path at cache_length, cache_length+1, ... (this is
  also the KV compaction of Figure 2: rejected nodes are simply never written).

Why this layout: the attention of a query reads [cache (S), this call's q columns] concatenated,
under [key_padding_mask, tree mask]; no one-hot blend is needed because new columns never go
through the cache inside the call (a blend works only for q = 1), the graph has no state
(``ct.StateType`` models have been reported to fall off the ANE, docs references), every shape is
static, and every tensor has rank <= 4 with the head axis first. Host work is a row copy.

Heads. Verifier head of node i = cache_length - 1 + depth_i (LM head i reads position i+1,
docs/design.md); drafts of the next round from node i read heads cache_length - 1 + depth_i + j,
j = 1..D (seed 000 §2.2: c_{p+j} = LMH_{p-1+j}(h_p + b_j)). All heads of a round lie in a window
of 2D + 1 consecutive heads starting at cache_length - 1, gathered once per call from the stacked
(15, V, H) head weights (indices clamped to 0..14: rows past c15 are computed for static shapes and
ignored by the host, as the AR step at position 0). Rows that share a head are concatenated so
each head matrix is read once per call (memory-bound regime, seed 000 §3.4). That is
``heads="window"`` (the default: reads 2D + 1 head matrices per call). ``heads="all"`` instead runs
every row through all 15 heads in one matmul and picks each row's head with a one-hot mask, the
drafts' offsets entering as constant logits LMH(b_j) (heads have no bias): no data-dependent
gather of weights, like TTSKit's `all_logits`, at the price of reading all 15 heads and q x 15 x V
logits per call. Which is faster on the ANE needs a Mac to tell; both are exported and tested.

Drafts. ``draft_tokens`` (1, q, N) int32: row r = the next round's N tree-node tokens if node r is
the last accepted one (top-R of LMH(h_r + b_j), picked by the tree's (depth, rank) paths); the host
takes the row of the last accepted node: no separate drafting call (seed 000 Figure 3). Offsets
b_j come from a `PositionOffsets` drafter, baked as constants (zeros = reused heads, drafter (i)).
A `SharedLowRankOffsets` drafter (v') also bakes its rank-r maps: a draft row reads
h + b_j + U_j (V_j^T h), two small matmuls per lookahead (heads="all": V_j^T h times the
constant logits LMH(U_j), computed once at export).
The whole-round graph (`SpecRoundGraph`) runs acceptance before drafting, so it drafts from the
accepted node alone (`rvqspec.export.drafts.AcceptedDrafts`, ``draft_rows=False`` here): every
drafter of Table 2, Medusa heads and the per-position drafters included, because one position's
parameters are a gather by one index per call.

ANE / Core ML numerics (docs/references.md, environment notes):
* GQA by hand: the n_rep query heads of a KV head are folded into the query axis (no K/V copy);
  Core ML ignores SDPA's ``enable_gqa``.
* q is pre-scaled by head_dim**-0.5 and attention is written as matmul + softmax (an explicit
  ``scale=`` disables Core ML's fused SDPA op, which needs iOS 18 anyway).
* additive masks use -1e4, not -inf (fp16 safe; exp(-1e4) is exactly 0 in fp32 and fp16, so the
  softmax, hence the argmax, is unchanged: tested).
* RMSNorm as LayerNorm of [x, -x] (mean 0, so LayerNorm's variance is mean(x^2)): the same
  value, but the fused layer_norm op keeps its statistics safe in fp16, where x.pow(2) of a
  residual-stream entry above 256 overflows (Apple ml-ane-transformers practice).
* RoPE cos/sin are a constant table over positions 0..S+D-1 computed in float32, gathered by
  position (no fp16 cos/sin of large angles in the graph).

onnxruntime numerics and speed: on this CPU a graph call of the mini predictor costs about 3.5 us
per executed node, not per FLOP (a whole AR frame executes some 5,500 nodes), so the ONNX export
traces RMSNorm in the plain form x / sqrt(mean(x^2) + eps) * w (`rms_form("pow")`, used by
`rvqspec.export.onnx`), which onnxruntime fuses into one SimplifiedLayerNormalization node instead
of the five of the LayerNorm form (measured: whole AR frame 20.3 -> 14.9 ms, whole round 2.58 ->
1.95 ms, 1 thread). onnxruntime computes in fp32 on the CPU, where x^2 does not overflow.
"""
from __future__ import annotations

import copy
import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rvqspec.core.drafters import PositionOffsets, SharedLowRankOffsets
from rvqspec.core.sampling import warp_tensor
from rvqspec.core.tree import SparseTree
from rvqspec.core.verify import AcceptTables, accept, gumbel_max
from rvqspec.export.drafts import AcceptedDrafts, check_drafter
from rvqspec.export.errors import ExportError

MASK_VALUE = -1e4  # additive "not visible" (fp16 safe; see module docstring)
HEAD_MODES = ("window", "all")  # how a graph reaches the LM heads (module docstring, "Heads")


@dataclass(frozen=True)
class GraphSpec:
    """Static description of one exported graph: names, shapes, dtypes of its inputs and outputs."""

    name: str
    q: int
    inputs: dict[str, tuple[tuple[int, ...], str]]    # name -> (shape, "float" | "int32")
    outputs: dict[str, tuple[tuple[int, ...], str]]


def offsets_from_drafter(drafter, code_predictor, depth: int) -> torch.Tensor:
    """The (depth, H) float32 offsets b_1..b_depth baked into the fused graph.

    None -> zeros (drafter (i), reused heads). `PositionOffsets` (shared b_j, seed 000 §2.2) and
    `SharedLowRankOffsets` (b_j plus a rank-r map, `low_rank_from_drafter`) are exportable as
    constants; the other drafters depend on the start position or add layers."""
    H = code_predictor.config.hidden_size
    if drafter is None:
        return torch.zeros(depth, H)  # (D, H)

    if type(drafter) not in (PositionOffsets, SharedLowRankOffsets):
        raise ExportError(f"only offsets and shared_low_rank drafters can be exported (position-independent "
                          f"constants); got kind={getattr(drafter, 'kind', type(drafter).__name__)!r}")
    check_drafter(drafter, H, code_predictor.config.vocab_size, depth)
    return drafter.offsets.detach()[:depth].to(torch.float32).cpu().clone()  # (D, H)


def low_rank_from_drafter(drafter, depth: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(V (D, H, r), U (D, r, H)) float32 of a `SharedLowRankOffsets` drafter, else None."""
    if type(drafter) is not SharedLowRankOffsets:
        return None
    return (drafter.down.detach()[:depth].to(torch.float32).cpu().clone(),
            drafter.up.detach()[:depth].to(torch.float32).cpu().clone())


RMS_FORMS = ("layer_norm", "pow")
_rms_form = ["layer_norm"]  # how `_ln_rms` is traced; set by `rms_form`


@contextlib.contextmanager
def rms_form(form: str):
    """Inside the block graphs trace RMSNorm as `form`: "layer_norm" (LayerNorm of [x, -x], the
    Core ML form) or "pow" (the plain form onnxruntime fuses into one node); module docstring."""
    if form not in RMS_FORMS:
        raise ExportError(f"rms form must be one of {RMS_FORMS}, got {form!r}")
    old = _rms_form[0]
    _rms_form[0] = form
    try:
        yield
    finally:
        _rms_form[0] = old


def _ln_rms(x: torch.Tensor, weight: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """RMSNorm over the last axis (width n, a Python int: reading weight.shape would trace an int op
    Core ML cannot convert) as LayerNorm of [x, -x], or in the plain form under `rms_form("pow")`
    (see module docstring)."""
    if _rms_form[0] == "pow":
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    y = F.layer_norm(torch.cat([x, -x], dim=-1), (2 * n,), eps=eps)  # (..., 2n): mean 0, var mean(x^2)
    return y[..., :n] * weight


class RoundGraph(nn.Module):
    """One static graph: the AR step (tree None or empty) or the fused round of `tree`.

    forward(input_embeds (1, q, E), cache_length (1,) int32, key_padding_mask (1, S),
            key_cache (L, n_kv, S, hd), value_cache (L, n_kv, S, hd))
      -> logits (1, q, V), key_update (L, n_kv, q, hd), value_update (L, n_kv, q, hd)
         [, draft_tokens (1, q, N) int32 when the tree is not empty]

    input_embeds are the host's embedding lookups (position 0: talker hidden; position 1: talker
    codec embedding of c0; position p >= 2: table p-2 of c_{p-1}; tree node i: the table of its
    code), so the 15 embedding tables stay out of the graph, as in TTSKit's stepped decoder.
    The graph reads the code predictor's weights at export time (they are constants after trace).
    """

    def __init__(self, code_predictor, tree: SparseTree | None = None, offsets: torch.Tensor | None = None,
                 cache_len: int | None = None, mask_value: float = MASK_VALUE,
                 head_stack: torch.Tensor | None = None, heads: str = "window",
                 low_rank: tuple[torch.Tensor, torch.Tensor] | None = None, draft_rows: bool = True):
        super().__init__()
        c = code_predictor.config
        if heads not in HEAD_MODES:
            raise ExportError(f"heads must be one of {HEAD_MODES}, got {heads!r}")
        self.heads_mode = heads
        # False: no drafts here; forward returns the final hidden states (and all heads' logits) so
        # that the caller drafts from the accepted node alone (`rvqspec.export.drafts`)
        self.draft_rows = bool(draft_rows)
        # Only the modules the graph reads are registered (tracing walks submodules, and the
        # predictor's c0-embedding property raises when unwired; the c0 lookup is host-side).
        object.__setattr__(self, "cp", code_predictor)
        self.layers = code_predictor.model.layers
        self.norm = code_predictor.model.norm
        self.proj = code_predictor.small_to_mtp_projection
        self.tree = tree if tree is not None else SparseTree([])
        self.q = len(self.tree) + 1
        self.S = int(cache_len or c.num_code_groups)
        if self.S < 2:
            raise ExportError(f"cache_len must be >= 2, got {self.S}")
        b = self.tree.buffers()
        self.D = b.max_depth                       # drafted depth = lookaheads the next round needs
        self.R = max(b.max_rank, 1)                # top-R candidates per drafted depth
        self.n_heads_out = c.num_code_groups - 1   # 15 LM heads
        self.n_kv, self.hd = c.num_key_value_heads, c.head_dim
        self.n_rep = c.num_attention_heads // c.num_key_value_heads  # query heads per KV head (GQA)
        self.eps = c.rms_norm_eps
        self.mask_value = float(mask_value)
        # depth spans: canonical tree order keeps each depth contiguous (rvqspec.core.tree)
        depth = b.depth
        self.spans = []
        for d in range(self.D + 1):
            idx = (depth == d).nonzero().flatten()
            self.spans.append((int(idx.min()), int(idx.max()) + 1))
        self.register_buffer("depth", depth.to(torch.int32), persistent=False)  # (q,)
        tree_mask = torch.zeros(self.q, self.q).masked_fill(~b.mask, self.mask_value)  # (q, q) additive
        self.register_buffer("tree_mask", tree_mask, persistent=False)
        # RoPE table for positions 0..S+D-1 in float32 (as the model's Rope), gathered by position
        P = self.S + self.D
        pos = torch.arange(P).view(1, P)  # CPU; `.to(device)` moves the tables with the graph
        cos, sin = code_predictor.rope(pos, torch.float32)  # (1, 1, P, hd) each
        self.register_buffer("rope_cos", cos[0, 0].clone(), persistent=False)  # (P, hd)
        self.register_buffer("rope_sin", sin[0, 0].clone(), persistent=False)  # (P, hd)
        self.P = P
        # (15, V, H) stacked LM heads; several graphs of one predictor may share one stack
        if head_stack is None:
            head_stack = torch.stack([m.weight.detach() for m in code_predictor.lm_head])
        self.register_buffer("head_stack", head_stack, persistent=False)
        # head window: verify depths 0..D plus (draft rows) lookaheads 1..D
        self.W = 2 * self.D + 1 if self.draft_rows else self.D + 1
        self.register_buffer("window", torch.arange(self.W, dtype=torch.int32), persistent=False)  # (W,)
        if self.D:
            # next-round node i takes rank r_i of the depth-d_i drafts: flat index (d_i - 1) * R + r_i
            tok = (b.depth[1:] - 1) * self.R + b.rank[1:]  # (N,)
            self.register_buffer("tok_index", tok.to(torch.int32), persistent=False)
        if self.D and not self.draft_rows:
            if (offsets is not None and offsets.numel()) or low_rank is not None:
                raise ExportError("offsets given to a round graph without draft rows")
        elif self.D:
            off = offsets if offsets is not None else torch.zeros(self.D, c.hidden_size)
            if tuple(off.shape) != (self.D, c.hidden_size):
                raise ExportError(f"offsets must have shape (tree depth {self.D}, H {c.hidden_size}), "
                                  f"got {tuple(off.shape)}")
            self.register_buffer("offsets", off.to(head_stack.dtype).clone(), persistent=False)  # (D, H)
        elif offsets is not None and offsets.numel():
            raise ExportError("offsets given for the AR step (empty tree)")
        self.low_rank = low_rank is not None
        if self.low_rank:
            down, up = low_rank
            if not self.D:
                raise ExportError("a low-rank drafter map given for the AR step (empty tree)")
            r = down.shape[-1]
            if tuple(down.shape) != (self.D, c.hidden_size, r) or tuple(up.shape) != (self.D, r, c.hidden_size):
                raise ExportError(f"low-rank maps must have shapes (D {self.D}, H {c.hidden_size}, r) and (D, r, H), "
                                  f"got {tuple(down.shape)} and {tuple(up.shape)}")
            self.register_buffer("lr_down", down.to(head_stack.dtype).clone(), persistent=False)  # (D, H, r)
            self.register_buffer("lr_up", up.to(head_stack.dtype).clone(), persistent=False)  # (D, r, H)
        if heads == "all":
            # LM heads have no bias, so LMH(h + b_j) = LMH(h) + LMH(b_j): the offsets become constant
            # logits per (j, head), computed once here in float32 (seed 000 §2.2 drafts, no matmul).
            self.register_buffer("head_ids", torch.arange(self.n_heads_out, dtype=torch.int32), persistent=False)
            if self.D and self.draft_rows:
                off_logits = torch.einsum("hvk,jk->jhv", head_stack.float(), self.offsets.float())  # (D, 15, V)
                self.register_buffer("offset_logits", off_logits.to(head_stack.dtype), persistent=False)
            if self.low_rank:  # LMH(U_j z) = z^T LMH(U_j): constant (D, r, 15, V) logits per rank direction
                lr_logits = torch.einsum("hvk,jrk->jrhv", head_stack.float(), self.lr_up.float())
                self.register_buffer("lr_logits", lr_logits.to(head_stack.dtype), persistent=False)

    # ---- static description ------------------------------------------------------------------
    def spec(self, name: str) -> GraphSpec:
        c = self.cp.config
        L, q, S = c.num_hidden_layers, self.q, self.S
        kv = (L, self.n_kv, S, self.hd)
        inputs = {"input_embeds": ((1, q, c.talker_hidden_size), "float"), "cache_length": ((1,), "int32"),
                  "key_padding_mask": ((1, S), "float"), "key_cache": (kv, "float"), "value_cache": (kv, "float")}
        outputs = {"logits": ((1, q, c.vocab_size), "float"),
                   "key_update": ((L, self.n_kv, q, self.hd), "float"),
                   "value_update": ((L, self.n_kv, q, self.hd), "float")}
        if self.D and self.draft_rows:
            outputs["draft_tokens"] = ((1, q, len(self.tree)), "int32")
        return GraphSpec(name=name, q=q, inputs=inputs, outputs=outputs)

    def example_inputs(self, cache_length: int = 1, generator: torch.Generator | None = None,
                       dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
        """Random inputs of the right shapes (filled slots 0..cache_length-1), for tracing and tests."""
        if not 0 <= cache_length <= self.S:
            raise ExportError(f"cache_length must be in 0..{self.S}, got {cache_length}")
        dtype = dtype or self.head_stack.dtype
        g = generator or torch.Generator().manual_seed(0)
        spec = self.spec("x").inputs
        emb = torch.randn(spec["input_embeds"][0], generator=g).to(dtype)
        kc = torch.randn(spec["key_cache"][0], generator=g).to(dtype)
        vc = torch.randn(spec["value_cache"][0], generator=g).to(dtype)
        kpm = padding_mask(cache_length, self.S, dtype)
        return emb, torch.tensor([cache_length], dtype=torch.int32), kpm, kc, vc

    # ---- graph -------------------------------------------------------------------------------
    def forward(self, input_embeds: torch.Tensor, cache_length: torch.Tensor, key_padding_mask: torch.Tensor,
                key_cache: torch.Tensor, value_cache: torch.Tensor):
        H = self.cp.config.hidden_size
        q, S, hd, n_kv, n_rep = self.q, self.S, self.hd, self.n_kv, self.n_rep
        dt = self.head_stack.dtype
        x = self.proj(input_embeds[0].to(dt))  # (q, H)
        pos = (cache_length + self.depth).clamp(0, self.P - 1)  # (q,) int32
        cos = self.rope_cos.index_select(0, pos).to(dt).unsqueeze(0)  # (1, q, hd)
        sin = self.rope_sin.index_select(0, pos).to(dt).unsqueeze(0)
        mask = torch.cat([key_padding_mask.to(dt).expand(q, S), self.tree_mask.to(dt)], dim=-1)  # (q, S+q)
        mask = mask.repeat(n_rep, 1)  # (n_rep*q, S+q): folded query axis is (rep, q)
        k_new, v_new = [], []
        for i, layer in enumerate(self.layers):
            att = layer.self_attn
            h = _ln_rms(x, layer.input_layernorm.weight, H, self.eps)  # (q, H)
            qh = _ln_rms(F.linear(h, att.q_proj.weight, att.q_proj.bias).unflatten(-1, (-1, hd)),
                         att.q_norm.weight, hd, self.eps).transpose(0, 1)  # (nh, q, hd)
            kh = _ln_rms(F.linear(h, att.k_proj.weight, att.k_proj.bias).unflatten(-1, (-1, hd)),
                         att.k_norm.weight, hd, self.eps).transpose(0, 1)  # (nkv, q, hd)
            vh = F.linear(h, att.v_proj.weight, att.v_proj.bias).unflatten(-1, (-1, hd)).transpose(0, 1)  # (nkv, q, hd)
            half = hd // 2
            qh = qh * cos + torch.cat([-qh[..., half:], qh[..., :half]], -1) * sin
            kh = kh * cos + torch.cat([-kh[..., half:], kh[..., :half]], -1) * sin
            k_new.append(kh)
            v_new.append(vh)
            keys = torch.cat([key_cache[i].to(dt), kh], dim=1)  # (nkv, S+q, hd)
            vals = torch.cat([value_cache[i].to(dt), vh], dim=1)  # (nkv, S+q, hd)
            qg = (qh * hd ** -0.5).unflatten(0, (n_kv, n_rep)).flatten(1, 2)  # (nkv, n_rep*q, hd), pre-scaled
            scores = torch.matmul(qg, keys.transpose(1, 2)) + mask  # (nkv, n_rep*q, S+q)
            o = torch.matmul(scores.softmax(-1), vals)  # (nkv, n_rep*q, hd)
            o = o.unflatten(1, (n_rep, q)).flatten(0, 1).transpose(0, 1).flatten(1)  # (q, nh*hd)
            x = x + F.linear(o, att.o_proj.weight, att.o_proj.bias)
            h = _ln_rms(x, layer.post_attention_layernorm.weight, H, self.eps)
            m = layer.mlp
            act = F.silu(F.linear(h, m.gate_proj.weight)) * F.linear(h, m.up_proj.weight)  # (q, I) SwiGLU
            x = x + F.linear(act, m.down_proj.weight)
        hid = _ln_rms(x, self.norm.weight, H, self.eps)  # (q, H)
        key_update = torch.stack(k_new)  # (L, nkv, q, hd)
        value_update = torch.stack(v_new)
        all_logits = None
        if self.heads_mode == "all":
            n, V = self.n_heads_out, self.cp.config.vocab_size  # Python ints: no traced shape reads
            all_logits = F.linear(hid, self.head_stack.flatten(0, 1)).unflatten(-1, (n, V))  # (q, 15, V)
            verify, drafts = self._all_heads(hid, all_logits, cache_length)
        else:
            # heads of this round: window cache_length-1 .. cache_length-1+2D, clamped to 0..14
            win = (cache_length - 1 + self.window).clamp(0, self.n_heads_out - 1)  # (W,) on the graph's device
            heads = self.head_stack.index_select(0, win)  # (W, V, H)
            verify, drafts = self._heads(hid, heads)
        logits = verify.unsqueeze(0)  # (1, q, V)
        if not self.D:
            return logits, key_update, value_update
        if not self.draft_rows:
            return logits, key_update, value_update, hid, all_logits
        top = drafts.topk(self.R, dim=-1).indices  # (q, D, R)
        draft_tokens = top.flatten(1).index_select(1, self.tok_index).to(torch.int32).unsqueeze(0)  # (1, q, N)
        return logits, key_update, value_update, draft_tokens

    def _draft_state(self, h: torch.Tensor, j: int) -> torch.Tensor:
        """The drafter's state for lookahead j: h + b_j (+ U_j V_j^T h for drafter (v')). h (n, H)."""
        out = h + self.offsets[j - 1]
        if self.low_rank:
            out = out + (h @ self.lr_down[j - 1]) @ self.lr_up[j - 1]  # (n, r) @ (r, H)
        return out

    def _heads(self, hid: torch.Tensor, heads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hid (q, H), heads (W, V, H) -> verifier logits (q, V), draft logits (q, D, V) or None.

        Piece (d, j) = rows of depth d read by window head d + j (j = 0: verify, no offset; j >= 1:
        draft with offset b_j). Pieces sharing a head are concatenated: one matmul per head."""
        pieces: dict[tuple[int, int], torch.Tensor] = {}
        for w in range(self.W):
            parts, keys = [], []
            for d in range(self.D + 1):
                j = w - d
                if 0 <= j <= (self.D if self.draft_rows else 0):
                    lo, hi = self.spans[d]
                    parts.append(hid[lo:hi] if j == 0 else self._draft_state(hid[lo:hi], j))  # (n_d, H)
                    keys.append((d, j, hi - lo))
            if not parts:
                continue
            y = F.linear(torch.cat(parts, 0), heads[w])  # (rows, V)
            start = 0
            for d, j, n in keys:
                pieces[(d, j)] = y[start:start + n]
                start += n
        verify = torch.cat([pieces[(d, 0)] for d in range(self.D + 1)], 0)  # (q, V)
        if not self.D or not self.draft_rows:
            return verify, None
        drafts = torch.stack([torch.cat([pieces[(d, j)] for d in range(self.D + 1)], 0)
                              for j in range(1, self.D + 1)], dim=1)  # (q, D, V)
        return verify, drafts


    def _all_heads(self, hid: torch.Tensor, all_logits: torch.Tensor,
                   cache_length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """heads="all" (Argmax TTSKit's `all_logits` idea): every row through all 15 heads in one
        matmul (all_logits (q, 15, V)), then each row's head picked by a one-hot mask (compare +
        multiply + sum: no dynamic gather of weight matrices, which the ANE may not run).
        hid (q, H) -> (q, V), (q, D, V)."""
        n = self.n_heads_out
        dt = hid.dtype

        def pick(j: int) -> torch.Tensor:  # (q, 15) one-hot of head cache_length - 1 + depth + j
            head = (cache_length - 1 + self.depth + j).clamp(0, n - 1)  # (q,)
            return (head.unsqueeze(1) == self.head_ids.unsqueeze(0)).to(dt)

        verify = (pick(0).unsqueeze(-1) * all_logits).sum(1)  # (q, V)
        if not self.D or not self.draft_rows:
            return verify, None
        def draft_logits(j: int) -> torch.Tensor:  # (q, 15, V) all heads' draft logits at lookahead j
            out = all_logits + self.offset_logits[j - 1]
            if self.low_rank:
                z = hid @ self.lr_down[j - 1]  # (q, r)
                out = out + torch.einsum("qr,rhv->qhv", z, self.lr_logits[j - 1])
            return out

        drafts = torch.stack([(pick(j).unsqueeze(-1) * draft_logits(j)).sum(1)
                              for j in range(1, self.D + 1)], dim=1)  # (q, D, V)
        return verify, drafts


def padding_mask(cache_length: int, cache_len: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(1, S) additive key padding mask: 0 on slots 0..cache_length-1, MASK_VALUE elsewhere."""
    m = torch.full((1, cache_len), MASK_VALUE, dtype=dtype)
    m[:, :cache_length] = 0
    return m


def ar_graph(code_predictor, cache_len: int | None = None, **kw) -> RoundGraph:
    """The AR step (q = 1): seed 000 §3.4's baseline call."""
    return RoundGraph(code_predictor, None, None, cache_len, **kw).eval()


def fused_graph(code_predictor, tree: SparseTree, drafter=None, cache_len: int | None = None, **kw) -> RoundGraph:
    """The fused draft+verify round for `tree` (q = N + 1), offsets from `drafter` (None: zeros)."""
    if len(tree) == 0:
        raise ExportError("the fused graph needs a non-empty tree (the empty tree is the AR step)")
    off = offsets_from_drafter(drafter, code_predictor, tree.max_depth)
    low = low_rank_from_drafter(drafter, tree.max_depth)  # None unless drafter (v')
    return RoundGraph(code_predictor, tree, off, cache_len, low_rank=low, **kw).eval()


def as_float32(code_predictor):
    """The predictor itself when it is float32, else a float32 copy (never converts in place: the
    graphs register the predictor's own layers)."""
    if next(code_predictor.parameters()).dtype == torch.float32:
        return code_predictor

    return copy.deepcopy(code_predictor).float()


def psnr(reference: torch.Tensor, test: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB of `test` against `reference` (peak = max |reference|), the
    whisperkittools parity measure; inf when identical."""
    ref = reference.detach().to(torch.float64)
    err = (test.detach().to(torch.float64) - ref).pow(2).mean().sqrt()
    if float(err) == 0.0:
        return float("inf")
    return float(20 * torch.log10(ref.abs().max() / err))


# --------------------------------------------------------------------------------------------
# Whole-frame and whole-round graphs: sampling and acceptance in the graph, noise as an input
# --------------------------------------------------------------------------------------------
# The settings inputs every sampling graph takes (rvqspec.core.sampling.sampling_tensors makes them).
SAMPLING_INPUTS = {"temperature": ((1,), "float"), "top_k": ((1,), "int32"), "top_p_tail": ((1,), "float")}


def _c0_table(code_predictor) -> torch.Tensor:
    """(V0, E) the talker's codec embedding (c0's table), read once at export."""
    try:
        return code_predictor.c0_embedding.weight.detach()
    except RuntimeError as err:
        raise ExportError(f"the sampling graphs embed c0 in-graph: {err}") from None


def _iclip(x: torch.Tensor, lo: int | None = None, hi: int | None = None) -> torch.Tensor:
    """Integer clamp by maximum/minimum with constants: Core ML's clip is float-only, and a float
    index fails the gather it feeds."""
    if lo is not None:
        x = torch.maximum(x, torch.full((1,), lo, dtype=x.dtype, device=x.device))
    if hi is not None:
        x = torch.minimum(x, torch.full((1,), hi, dtype=x.dtype, device=x.device))
    return x


class FrameGraph(nn.Module):
    """The whole AR frame as ONE static call: c1..c15 from (talker hidden, c0, noise), sampling in
    the graph by Gumbel-max (`rvqspec.core.verify.gumbel_max` over `rvqspec.core.sampling.warp_tensor`),
    the TTSKit "fused" decoder with the noise passed in so the call is a pure function.

    forward(talker_hidden (1, E), c0 (1,) int32, noise (15, V) float (row p-1 draws c_p; zeros =
            greedy), temperature (1,), top_k (1,) int32, top_p_tail (1,))
      -> codes (1, 15) int32

    Inside: 16 unrolled q=1 passes of the AR `RoundGraph` (positions 0..15) over an in-graph cache
    of 16 slots (each pass's K/V column blended in at its slot by a constant one-hot), embedding
    tables as constants (position p >= 2 reads table p-2 at c_{p-1})."""

    def __init__(self, code_predictor, head_stack: torch.Tensor | None = None, heads: str = "window"):
        super().__init__()
        c = code_predictor.config
        self.step = RoundGraph(code_predictor, None, None, None, head_stack=head_stack, heads=heads)
        self.n = c.num_code_groups - 1  # 15
        self.V, self.E = c.vocab_size, c.talker_hidden_size
        dt = self.step.head_stack.dtype
        self.register_buffer("c0_table", _c0_table(code_predictor).to(dt).clone(), persistent=False)  # (V0, E)
        self.register_buffer("tables", torch.stack([e.weight.detach() for e in code_predictor.model.codec_embedding]
                                                   ).to(dt).clone(), persistent=False)  # (15, V, E)
        S = self.step.S
        self.register_buffer("positions", torch.arange(S, dtype=torch.int32), persistent=False)  # (S,)
        self.register_buffer("slot_onehot", torch.eye(S, dtype=torch.bool).view(S, 1, 1, S, 1), persistent=False)
        self.register_buffer("pad_masks", torch.stack([padding_mask(p, S) for p in range(S)]).to(dt),
                             persistent=False)  # (S, 1, S) additive, p slots visible

    def spec(self, name: str = "frame") -> GraphSpec:
        inputs = {"talker_hidden": ((1, self.E), "float"), "c0": ((1,), "int32"),
                  "noise": ((self.n, self.V), "float"), **SAMPLING_INPUTS}
        return GraphSpec(name=name, q=1, inputs=inputs, outputs={"codes": ((1, self.n), "int32")})

    def forward(self, talker_hidden: torch.Tensor, c0: torch.Tensor, noise: torch.Tensor, temperature: torch.Tensor,
                top_k: torch.Tensor, top_p_tail: torch.Tensor) -> torch.Tensor:
        st = self.step
        dt = st.head_stack.dtype
        kshape = (self.step.cp.config.num_hidden_layers, st.n_kv, st.S, st.hd)
        kc = torch.zeros(kshape, dtype=dt, device=talker_hidden.device)  # (L, nkv, S, hd)
        vc = torch.zeros(kshape, dtype=dt, device=talker_hidden.device)
        x = talker_hidden.to(dt).view(1, 1, self.E)  # (1, 1, E) position 0
        codes = []
        for p in range(self.n + 1):
            logits, ku, vu = st(x, self.positions[p:p + 1], self.pad_masks[p], kc, vc)  # (1, 1, V), (L, nkv, 1, hd)
            kc = torch.where(self.slot_onehot[p], ku, kc)  # column p <- this pass (broadcast over S)
            vc = torch.where(self.slot_onehot[p], vu, vc)
            if p == 0:  # position 1 embeds c0 with the talker's codec table
                x = self.c0_table.index_select(0, c0.to(torch.int64)).view(1, 1, self.E)
                continue
            scores = warp_tensor(logits[0], temperature, top_k, top_p_tail)  # (1, V) LM head p-1 -> c_p
            code = gumbel_max(scores, noise[p - 1:p].to(torch.float32))  # (1,)
            codes.append(code)
            if p < self.n:  # position p+1 embeds c_p with table p-1
                x = self.tables[p - 1].index_select(0, code).view(1, 1, self.E)
        return torch.stack(codes, 1).to(torch.int32)  # (1, 15)


class SpecRoundGraph(nn.Module):
    """The whole speculative round as ONE static call (seed 000 §2.2, Figures 2-3): in-graph
    embedding of [c_m, drafts], the fused draft+verify pass over the tree mask (`RoundGraph`),
    warping, THE acceptance rule (`rvqspec.core.verify.accept`: residual/bonus sample included),
    KV-cache compaction (root + accepted path written to the next slots) and the next drafts. The
    host loop only feeds the state back and fresh noise.

    forward(tokens (1, q) int32 [c_m, drafts], cache_length (1,) int32, key_cache, value_cache
            (L, n_kv, S, hd), talker_hidden (1, E), noise (1, q, V), temperature, top_k, top_p_tail)
      -> codes (1, D + 1) int32 (the first `count` are this round's new codes), count (1,) int32,
         next_tokens (1, q) int32, next_cache_length (1,) int32, next_key_cache, next_value_cache

    Round 0 of a frame (cache_length 0, tokens = [any, c0, any...]): root = talker hidden at
    position 0 and node (0,) = c0 at position 1; the root's scores are a point mass on c0, so
    (0,) is accepted whatever the noise and the code after it is c1 ~ p(h_1): the same protocol as
    `rvqspec.export.host.spec_frame`, with no special case for the host."""

    def __init__(self, code_predictor, tree: SparseTree, drafter=None, head_stack: torch.Tensor | None = None,
                 heads: str = "window"):
        super().__init__()

        if len(tree) == 0 or tree.paths[0] != (0,):
            raise ExportError("the round graph needs a tree containing the node (0,) (round 0 places c0 there)")
        c = code_predictor.config
        self.round = RoundGraph(code_predictor, tree, head_stack=head_stack, heads=heads, draft_rows=False).eval()
        r = self.round
        self.drafts = AcceptedDrafts(drafter, r.head_stack, r.D, heads)  # the next round's, from the accepted node
        self.q, self.D, self.S, self.n = r.q, r.D, r.S, c.num_code_groups - 1
        self.V, self.E, self.L = c.vocab_size, c.talker_hidden_size, c.num_hidden_layers
        dt = r.head_stack.dtype
        self.register_buffer("c0_table", _c0_table(code_predictor).to(dt).clone(), persistent=False)  # (V0, E)
        self.V0 = self.c0_table.shape[0]
        self.register_buffer("tables", torch.stack([e.weight.detach() for e in code_predictor.model.codec_embedding]
                                                   ).to(dt).flatten(0, 1).clone(), persistent=False)  # (15 V, E)
        t = AcceptTables.of(tree.buffers())
        self.register_buffer("parent", t.parent, persistent=False)  # (q,)
        self.register_buffer("strict_anc", t.strict_anc, persistent=False)  # (q, q)
        self.register_buffer("depth_l", t.depth, persistent=False)  # (q,) long
        self.register_buffer("sibling_before", t.sibling_before, persistent=False)  # (q, q)
        self.register_buffer("nodes", torch.arange(self.q), persistent=False)  # (q,)
        self.register_buffer("vocab", torch.arange(self.V), persistent=False)  # (V,)
        self.register_buffer("slots", torch.arange(self.S), persistent=False)  # (S,)
        self.register_buffer("levels", torch.arange(self.D + 1), persistent=False)  # (D+1,)

    def spec(self, name: str = "round") -> GraphSpec:
        kv = ((self.L, self.round.n_kv, self.S, self.round.hd), "float")
        inputs = {"tokens": ((1, self.q), "int32"), "cache_length": ((1,), "int32"), "key_cache": kv,
                  "value_cache": kv, "talker_hidden": ((1, self.E), "float"), "noise": ((1, self.q, self.V), "float"),
                  **SAMPLING_INPUTS}
        outputs = {"codes": ((1, self.D + 1), "int32"), "count": ((1,), "int32"), "next_tokens": ((1, self.q), "int32"),
                   "next_cache_length": ((1,), "int32"), "next_key_cache": kv, "next_value_cache": kv}
        return GraphSpec(name=name, q=self.q, inputs=inputs, outputs=outputs)

    def forward(self, tokens, cache_length, key_cache, value_cache, talker_hidden, noise, temperature, top_k,
                top_p_tail):
        r, q, V, n, D = self.round, self.q, self.V, self.n, self.D
        dt = r.head_stack.dtype
        tok = tokens[0].to(torch.int64)  # (q,)
        cl = cache_length.to(torch.int64)  # (1,)
        first = cl == 0  # (1,) round 0 of the frame
        m = cl - 1  # (1,) index of the committed code c_m (-1 in round 0)
        g = _iclip(m + self.depth_l, hi=n)  # (q,) code index each node carries (table g; c0: talker table)
        e = self.tables.index_select(0, _iclip(g - 1, lo=0) * V + _iclip(tok, 0, V - 1))  # (q, E)
        e0 = self.c0_table.index_select(0, _iclip(tok, 0, self.V0 - 1))  # (q, E)
        e = torch.where((g == 0).unsqueeze(1), e0, e)
        root = (self.nodes == 0).unsqueeze(1)  # (q, 1)
        e = torch.where(root & first, talker_hidden.to(dt).expand(q, self.E), e)  # round 0 root: talker hidden
        kpm = torch.where(self.slots < cl, 0.0, MASK_VALUE).to(dt).unsqueeze(0)  # (1, S)
        logits, ku, vu, hid, all_logits = r(e.unsqueeze(0), cache_length, kpm, key_cache, value_cache)
        scores = warp_tensor(logits[0], temperature, top_k, top_p_tail)  # (q, V)
        # round 0: the root "samples" c0, as a point mass on code 0 of the residual vocabulary against
        # which node (0,) is matched as code 0: c0 itself may lie outside it (level 0 has its own
        # codebook: 2,048 codes against 1,024 in the mini world v6). The embedding above used c0.
        point = torch.where(self.vocab == 0, 0.0, float("-inf"))  # (V,)
        scores = torch.where(root & first, point.unsqueeze(0), scores)
        drafted = torch.where(first & (self.nodes == 1), torch.zeros_like(tok), tok)  # (q,) tokens matched
        # (q,) never past c15; round 0: only (0,) (logical ops: onnxruntime has no boolean Where,
        # Core ML's converter no `|`)
        valid = torch.logical_or(first & (self.nodes == 1), ~first & (m + self.depth_l <= n))
        _, ok, last, token = accept(scores.unsqueeze(0), noise.to(torch.float32), drafted.unsqueeze(0), valid,
                                    self.parent, self.strict_anc, self.depth_l, self.sibling_before)
        a = self.depth_l.index_select(0, last)  # (1,) accepted drafted nodes
        # cols[k] = the accepted node at depth k (0 = root); at most one per depth (one chain)
        on = ok[0].unsqueeze(0) & (self.depth_l.unsqueeze(0) == self.levels.unsqueeze(1))  # (D+1, q)
        cols = (on.to(torch.int64) * self.nodes.unsqueeze(0)).sum(-1)  # (D+1,)
        seq = torch.cat([tok.index_select(0, cols[1:]), token])  # (D+1,) path tokens, then the emitted code
        seq = torch.where(self.levels == a, token, seq)
        shift = first.to(torch.int64)  # round 0 emits c0 (known) then c1: drop c0
        codes = seq.index_select(0, _iclip(self.levels + shift, hi=D))  # (D+1,)
        remaining = torch.where(first, torch.full_like(m, n), n - m)  # (1,) codes still to emit
        count = torch.minimum(a + 1 - shift, remaining)
        # KV compaction (Figure 2): slots cl..cl+a <- columns of the root and the accepted path
        j = self.slots - cl  # (S,)
        sel = ((j >= 0) & (j <= a)).view(1, 1, self.S, 1)
        col = cols.index_select(0, _iclip(j, 0, D))  # (S,)
        next_k = torch.where(sel, ku.index_select(2, col), key_cache.to(dt))  # (L, nkv, S, hd)
        next_v = torch.where(sel, vu.index_select(2, col), value_cache.to(dt))
        # drafts of the last accepted node: position cl + a, verifier head cl - 1 + a
        head = _iclip(cl - 1 + a, 0, n - 1)  # (1,)
        drafts = self.drafts(hid.index_select(0, last), None if all_logits is None else all_logits.index_select(0, last)[0], head)
        top = drafts.topk(r.R, dim=-1).indices.flatten()  # (D R,)
        next_tokens = torch.cat([token.to(torch.int32), top.index_select(0, r.tok_index).to(torch.int32)])  # (q,)
        return (codes.to(torch.int32).unsqueeze(0), count.to(torch.int32), next_tokens.unsqueeze(0),
                (cl + a + 1).to(torch.int32), next_k, next_v)


def frame_graph(code_predictor, **kw) -> FrameGraph:
    return FrameGraph(code_predictor, **kw).eval()


def spec_round_graph(code_predictor, tree: SparseTree, drafter=None, **kw) -> SpecRoundGraph:
    return SpecRoundGraph(code_predictor, tree, drafter, **kw).eval()
