"""The next round's drafts from the accepted node alone, in graph form, for every drafter of seed 000
Table 2 (§2.2: c_{p+j} drafted from h_p through LMH_{p-1+j}; Medusa heads their own K heads per p).

Why: the fused round (`rvqspec.export.wrappers.RoundGraph`) drafts from every one of its q rows, so
the host can take the row of whichever node ends up last accepted. Inside the whole-round graph
(`SpecRoundGraph`) acceptance runs first, so only that one row is needed. Drafting one row instead
of q:
* makes the position-dependent drafters exportable: the drafter's parameters for position p are a
  gather by the accepted node's position (one index for the whole call), where q rows at different
  depths would need q different weight sets per lookahead. Medusa heads (ii), per-position offsets
  (iv) and per-position low rank (v) gain a graph form; before, only the shared offsets (iii) and
  ours (v') had one;
* runs fewer nodes and smaller tensors for the shared-offset drafters (D rows of V logits instead
  of q x D; onnxruntime pays per executed node on this CPU, docs/streaming.md).

Index convention (as `RoundGraph`): a node at depth a of a round with cache length cl sits at
position p = cl + a and is verified by head i = p - 1 = cl - 1 + a; its lookahead j reads head
min(i + j, 14), and drafter parameters of start position p (`PerPositionOffsets.offsets[p - 1]`,
`MedusaHeads._index(p, j)`). Positions past c15 (p + j > 15) give drafts the acceptance rule never
takes (they are outside the frame), computed for static shapes as in the rest of the graph.

forward(h (1, H) the accepted node's final hidden state, all_row (15, V) or None its logits through
all 15 heads (``heads="all"`` graphs), i (1,) int64 its verifier head) -> draft logits (D, V).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rvqspec.core.drafters import (NUM_POSITIONS, LowRankOffsets, MedusaHeads, PerPositionOffsets, PositionOffsets,
                                   SharedLowRankOffsets)
from rvqspec.export.errors import ExportError

EXPORTABLE = (PositionOffsets, PerPositionOffsets, LowRankOffsets, SharedLowRankOffsets, MedusaHeads)


class DraftExportError(ExportError):
    """A drafter (or a tree depth) the graph cannot bake."""


def check_drafter(drafter, H: int, V: int, depth: int) -> None:
    """Refuse a drafter no graph can bake for a predictor of width H, vocabulary V and a tree of `depth`
    (None, the reused heads, always fits)."""
    if drafter is None:
        return
    if type(drafter) not in EXPORTABLE:
        raise DraftExportError(f"no graph form for drafter kind={getattr(drafter, 'kind', type(drafter).__name__)!r}")
    if drafter.hidden_size != H:
        raise DraftExportError(f"drafter hidden_size={drafter.hidden_size} != code predictor hidden_size={H}")
    if type(drafter) is MedusaHeads and drafter.vocab_size != V:  # its own heads; the others read the LM heads
        raise DraftExportError(f"Medusa heads' vocab_size={drafter.vocab_size} != code predictor vocab_size={V}")
    if drafter.num_offsets < depth:
        raise DraftExportError(f"tree depth {depth} exceeds the drafter's K={drafter.num_offsets}")


class AcceptedDrafts(nn.Module):
    """D lookaheads' draft logits of the accepted node (module docstring). Constants are read from
    `drafter` (None: the reused heads, drafter (i)) and `head_stack` (15, V, H) at construction."""

    def __init__(self, drafter, head_stack: torch.Tensor, depth: int, heads: str = "window"):
        super().__init__()
        n, V, H = head_stack.shape
        check_drafter(drafter, H, V, depth)
        if depth < 1:
            raise DraftExportError(f"drafts need a tree depth >= 1, got {depth}")
        self.D, self.n, self.heads_mode = depth, n, heads
        self.medusa = type(drafter) is MedusaHeads
        dt = head_stack.dtype
        D = depth
        self.register_buffer("lookahead", torch.arange(1, D + 1), persistent=False)  # (D,) j = 1..D
        self.register_buffer("head_stack", head_stack, persistent=False)  # (15, V, H)
        # integer clamp by minimum with a constant: Core ML's clip is float-only
        self.register_buffer("last_head", torch.tensor([n - 1]), persistent=False)  # (1,)
        if self.medusa:  # (15 D, ...) row i * D + j - 1 = Medusa head (p = i + 1, j)
            idx = [drafter._index(i + 1, j) for i in range(NUM_POSITIONS) for j in range(1, D + 1)]
            blk = [drafter.blocks[k].linear for k in idx]
            self.register_buffer("res_w", torch.stack([b.weight.detach() for b in blk]).to(dt), persistent=False)  # (15D, H, H)
            self.register_buffer("res_b", torch.stack([b.bias.detach() for b in blk]).to(dt), persistent=False)  # (15D, H)
            self.register_buffer("med_heads", torch.stack([drafter.heads[k].weight.detach() for k in idx]).to(dt),
                                 persistent=False)  # (15D, V, H)
            return
        # offset family: state = h + b_{p,j} (+ U_j V_j^T h); b per (position, lookahead)
        if drafter is None:
            bias = torch.zeros(NUM_POSITIONS, D, H)
        elif type(drafter) in (PositionOffsets, SharedLowRankOffsets):
            bias = drafter.offsets.detach()[:D].unsqueeze(0).expand(NUM_POSITIONS, D, H)  # shared over p
        else:
            bias = drafter.offsets.detach()[:, :D]  # (15, D, H) per position
        bias = bias.to(torch.float32).reshape(NUM_POSITIONS * D, H)  # (15D, H)
        self.low_rank = isinstance(drafter, LowRankOffsets)
        if self.low_rank:
            self.register_buffer("lr_down", drafter.down.detach()[:D].to(dt).clone(), persistent=False)  # (D, H, r)
            up = drafter.up.detach()[:D].to(torch.float32)  # (D, r, H)
        if heads == "all":
            # LM heads have no bias: LMH(h + b) = LMH(h) + LMH(b), so b and U_j enter as constant logits
            # through the head each (position, lookahead) reads (seed 000 §2.2 drafts, no matmul of h).
            pos = torch.arange(NUM_POSITIONS).repeat_interleave(D)  # (15D,) i
            look = torch.arange(1, D + 1).repeat(NUM_POSITIONS)  # (15D,) j
            hsel = head_stack.float()[(pos + look).clamp(max=n - 1)]  # (15D, V, H)
            self.register_buffer("bias_logits", torch.einsum("fvk,fk->fv", hsel, bias).to(dt), persistent=False)  # (15D, V)
            if self.low_rank:  # row j * 15 + h: LMH_h(U_j), (D 15, r, V)
                lr = torch.einsum("hvk,jrk->jhrv", head_stack.float(), up).flatten(0, 1)
                self.register_buffer("lr_logits", lr.to(dt), persistent=False)
        else:
            self.register_buffer("bias", bias.to(dt), persistent=False)  # (15D, H)
            if self.low_rank:
                self.register_buffer("lr_up", up.to(dt), persistent=False)  # (D, r, H)

    def forward(self, h: torch.Tensor, all_row: torch.Tensor | None, i: torch.Tensor) -> torch.Tensor:
        D, n = self.D, self.n
        f = i * D + self.lookahead - 1  # (D,) rows of the (position, lookahead) tables
        hidx = torch.minimum(i + self.lookahead, self.last_head)  # (D,) heads read by lookaheads 1..D
        if self.medusa:  # x = h + SiLU(W h + c), then the (p, j) head (Medusa ResBlock, drafter (ii))
            w = self.res_w.index_select(0, f)  # (D, H, H)
            x = h + F.silu(torch.matmul(w, h.view(-1, 1)).squeeze(-1) + self.res_b.index_select(0, f))  # (D, H)
            return torch.matmul(self.med_heads.index_select(0, f), x.unsqueeze(-1)).squeeze(-1)  # (D, V)
        if self.heads_mode == "all":
            out = all_row.index_select(0, hidx) + self.bias_logits.index_select(0, f)  # (D, V)
            if self.low_rank:
                z = torch.matmul(h, self.lr_down).squeeze(1)  # (D, r): V_j^T h per lookahead (h (1, H) broadcast)
                lr = self.lr_logits.index_select(0, (self.lookahead - 1) * n + hidx)  # (D, r, V)
                out = out + (z.unsqueeze(-1) * lr).sum(1)
            return out
        state = h + self.bias.index_select(0, f)  # (D, H)
        if self.low_rank:
            z = torch.matmul(h, self.lr_down)  # (D, 1, r)
            state = state + torch.matmul(z, self.lr_up).squeeze(1)  # (D, H)
        return torch.matmul(self.head_stack.index_select(0, hidx), state.unsqueeze(-1)).squeeze(-1)  # (D, V)
