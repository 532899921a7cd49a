"""Exactly lossless verification of a tree of deterministic drafts (seed 000 §2.2, §3.2).

At every tree node the verifier gives p, the distribution of the next code after the deployed
warpers (`rvqspec.core.sampling.probs`: temperature -> top-k -> top-p). A drafted child is a point mass
(q(x) = 1), so the speculative-sampling rule of Leviathan et al. / Chen et al. becomes, along the tree:

    r = p
    for child x in rank order:  accept x with probability r(x) / sum(r)   (strict u < r(x))
                                if accepted: descend into x and restart with r = p(x's node)
                                else: r(x) = 0                            (residual; renormalised lazily)
    all children rejected: emit y ~ r and stop;  no children (a leaf): emit the bonus y ~ p and stop

Reaching child k and accepting it has probability p(x_k); every other token comes out with
probability p(y): node by node this is autoregressive sampling. Two forms are implemented:

* `verify_walk`: the sibling walk above (the reference form, vectorised over B rows, a Python loop
  over depth x siblings). Duplicate sibling tokens are harmless here: after the first one is
  rejected r(x) = 0 and the strict test never accepts the second.
* `verify_sampled`: the equivalent "sample y ~ p once at every node, descend into the child equal to
  y" form (references.md), fully vectorised with no loop and no host sync, used by the decoder.
  Duplicate siblings are removed (only the first of equal tokens can match).

Both give the same joint law (tests/test_verify_stats.py checks both by chi-square against exact
enumeration). Greedy decoding (do_sample=False) is y = argmax p at every node: accept a child iff it
equals the argmax, emit the argmax.

Nodes flagged invalid (drafts past c15, seed 000 §2.2 "never past c15") are never accepted.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rvqspec.core.tree import TreeBuffers


@dataclass
class VerifyResult:
    """Outcome of one verify round for B independent rows."""

    last: torch.Tensor       # (B,) long: index of the deepest accepted node (0 = root, nothing accepted)
    accepted: torch.Tensor   # (B,) long: number of accepted drafted nodes (= depth of `last`)
    token: torch.Tensor      # (B,) long: the token emitted after `last` (residual sample or bonus)
    path: torch.Tensor       # (B, max_depth + 1) long: node indices root..last, padded with -1


def _check(p: torch.Tensor, tokens: torch.Tensor, buffers: TreeBuffers, valid: torch.Tensor | None) -> torch.Tensor:
    if p.dim() != 3:
        raise ValueError(f"verifier probabilities must have shape (B, q, V), got {tuple(p.shape)}")
    B, q, _ = p.shape
    if q != buffers.q:
        raise ValueError(f"verifier probabilities have q={q} entries but the tree has q=N+1={buffers.q}")
    if tokens.shape != (B, q):
        raise ValueError(f"draft tokens must have shape (B, q)=({B}, {q}), got {tuple(tokens.shape)}")
    if valid is None:
        return torch.ones(B, q, dtype=torch.bool, device=p.device)
    if valid.shape != (B, q) and valid.shape != (q,):
        raise ValueError(f"valid must have shape (B, q) or (q,), got {tuple(valid.shape)}")
    return valid.expand(B, q).to(torch.bool)


def draw(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of non-negative, not necessarily normalised weights (..., V) -> (...,) long.

    Inverse-CDF in float64 with one uniform per row; a zero-weight token can never be drawn because its
    CDF step is empty (u * total < cdf strictly picks the first index whose CDF exceeds the draw).
    """
    lead = weights.shape[:-1]
    w = weights.reshape(-1, weights.shape[-1]).to(torch.float64)  # (R, V)
    cdf = w.cumsum(-1)  # (R, V)
    u = torch.rand(w.shape[0], 1, generator=generator, dtype=torch.float64, device=w.device) * cdf[:, -1:]  # (R, 1)
    idx = (cdf <= u).sum(-1)  # (R,) first index with cdf > u
    # u * total can round up to total with probability ~2^-53; fall back to the heaviest token then
    idx = torch.where(idx >= w.shape[-1], w.argmax(-1), idx)
    return idx.view(lead)


def race(p: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of p (..., V) by the exponential race: argmax p / E with E ~ Exp(1) i.i.d.

    Exact (index i wins with probability p_i / sum p; Gumbel-max in another form), three tensor ops,
    so cheaper per call than `torch.multinomial` for many small rows. E is clamped away from 0 so a
    zero-probability token scores exactly 0 and can never win against a positive one."""
    e = torch.empty_like(p, dtype=torch.float32).exponential_(generator=generator).clamp_(min=1e-30)
    return (p.to(torch.float32) / e).argmax(-1)


def _path(buffers: TreeBuffers, last: torch.Tensor) -> torch.Tensor:
    """(B,) last node -> (B, D + 1) node indices root..last padded with -1 (ordered by depth)."""
    B = last.shape[0]
    D = buffers.max_depth
    anc = buffers.mask.to(last.device)[last]  # (B, q) ancestor-or-self of last
    depth = buffers.depth.to(last.device)
    col = torch.where(anc, depth.expand_as(anc), torch.full_like(anc, D + 1, dtype=torch.long))  # (B, q)
    nodes = torch.arange(buffers.q, device=last.device).expand(B, -1)  # (B, q)
    out = torch.full((B, D + 2), -1, dtype=torch.long, device=last.device)
    out.scatter_(1, col, nodes)
    return out[:, : D + 1]


def verify_sampled(p: torch.Tensor, tokens: torch.Tensor, buffers: TreeBuffers, valid: torch.Tensor | None = None,
                   generator: torch.Generator | None = None, greedy: bool = False,
                   y: torch.Tensor | None = None) -> VerifyResult:
    """Lossless tree acceptance, sample-once-per-node form (vectorised, no host sync).

    p (B, q, V): verifier distribution at every node (index 0 = committed root); tokens (B, q) long:
    each node's draft token (index 0 ignored); valid (B, q) or (q,) bool: nodes that may be accepted.
    ``y`` (B, q) may pass pre-drawn per-node samples (e.g. from in-graph sampling); otherwise they are
    drawn here with ``generator`` (or taken as argmax when ``greedy``).
    """
    valid = _check(p, tokens, buffers, valid)
    B, q, _ = p.shape
    dev = p.device
    if y is None:
        y = p.argmax(-1) if greedy else race(p, generator)  # (B, q) one sample per node (the decoder's sampler)
    parent = buffers.parent.clamp(min=0).to(dev)
    match = (tokens == y[:, parent]) & valid  # (B, q): node's token equals its parent's sample
    if bool(buffers.sibling_before.any()):
        same = tokens[:, :, None] == tokens[:, None, :]  # (B, q, q)
        dup = (same & buffers.sibling_before.to(dev)).any(-1)  # (B, q) an earlier sibling has this token
        match = match & ~dup
    match[:, 0] = True
    ok = ~(buffers.mask.to(dev) & ~match[:, None, :]).any(-1)  # (B, q): every ancestor-or-self matched
    depth = buffers.depth.to(dev)
    # accepted nodes form a single chain (one matching child per node), so the deepest is unique
    last = (ok * (depth + 1)).argmax(-1)  # (B,)
    token = y.gather(1, last[:, None]).squeeze(1)  # (B,)
    return VerifyResult(last=last, accepted=depth[last], token=token, path=_path(buffers, last))


def verify_walk(p: torch.Tensor, tokens: torch.Tensor, buffers: TreeBuffers, valid: torch.Tensor | None = None,
                generator: torch.Generator | None = None, greedy: bool = False,
                _control: str | None = None) -> VerifyResult:
    """Lossless tree acceptance, sibling-walk form with the residual rule (see module docstring).

    Same arguments as `verify_sampled`. ``_control`` is for tests only and makes the rule WRONG on
    purpose (negative controls that the statistical tests must reject):
    ``"always_accept"`` accepts the first valid child unconditionally; ``"full_p"`` samples the token
    after a rejection from the full p instead of the residual.
    """
    if _control not in (None, "always_accept", "full_p"):
        raise ValueError(f"unknown _control {_control!r}")
    valid = _check(p, tokens, buffers, valid)
    if greedy:
        return verify_sampled(p, tokens, buffers, valid, greedy=True)
    B, q, V = p.shape
    dev = p.device
    rows = torch.arange(B, device=dev)
    first_child = buffers.first_child.to(dev)
    next_sibling = buffers.next_sibling.to(dev)
    max_children = int((buffers.parent[1:, None] == torch.arange(q)).sum(0).max()) if q > 1 else 0
    cur = torch.zeros(B, dtype=torch.long, device=dev)
    active = torch.ones(B, dtype=torch.bool, device=dev)
    rejected_any = torch.zeros(B, dtype=torch.bool, device=dev)
    r = p[:, 0].to(torch.float64).clone()  # (B, V) residual at the current node
    for _level in range(buffers.max_depth):
        child = first_child[cur]  # (B,)
        searching = active & (child >= 0)
        descended = torch.zeros(B, dtype=torch.bool, device=dev)
        for _s in range(max_children):
            c = child.clamp(min=0)
            ok = searching & valid[rows, c]
            x = tokens[rows, c]  # (B,)
            rx = r[rows, x]  # (B,)
            u = torch.rand(B, generator=generator, dtype=torch.float64, device=dev)
            acc = ok & (u * r.sum(-1) < rx)  # strict: a zero-residual token is never accepted
            if _control == "always_accept":
                acc = ok
            rej = ok & ~acc
            r[rows, x] = torch.where(rej, torch.zeros_like(rx), rx)  # residual: remove the rejected token
            rejected_any |= rej
            cur = torch.where(acc, c, cur)
            descended |= acc
            searching = searching & ~acc
            child = torch.where(searching, next_sibling[c], child)
            searching = searching & (child >= 0)
        r = torch.where(descended[:, None], p[rows, cur].to(torch.float64), r)  # fresh p at the new node
        rejected_any &= ~descended
        active = descended
    if _control == "full_p":
        r = torch.where(rejected_any[:, None], p[rows, cur].to(torch.float64), r)
    token = draw(r, generator)  # residual after rejections, or the bonus ~ p at a leaf
    depth = buffers.depth.to(dev)
    return VerifyResult(last=cur, accepted=depth[cur], token=token, path=_path(buffers, cur))
