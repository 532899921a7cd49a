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

* `accept` (THE rule every decoding path runs: the eager decoder `rvqspec.core.speculative`, its
  compiled form, the export host loop `rvqspec.export.host` and the exported round graph
  `rvqspec.export.wrappers`): the equivalent "sample y ~ p once at every node, descend into the child
  equal to y" form (references.md), written as pure tensor code with static shapes and no host sync.
  The randomness enters as an explicit Gumbel noise tensor G (B, q, V) that the host draws from the
  caller's `torch.Generator` (`gumbel_noise`): y = argmax(scores + G) is Gumbel-max sampling from
  softmax(scores) (scores = warped logits, or log p). So a graph running `accept` is a pure function
  and every backend gives the same codes for the same noise up to its float rounding. Greedy decoding
  passes G = 0 (y = argmax). Duplicate siblings are removed (only the first of equal tokens can match).
* `verify_sampled`: `accept` on probabilities with the noise drawn from a generator (the entry point
  of the statistical tests).
* `verify_walk`: the sibling walk above with the residual rule, an independent reference form (a
  Python loop over depth x siblings) that the statistical tests check next to `accept`, and that
  carries the tests' deliberately wrong negative controls. No decoding path runs it by default.
  Duplicate sibling tokens are harmless here: after the first one is rejected r(x) = 0 and the
  strict test never accepts the second.

Both forms give the same joint law (tests/test_verify_stats.py checks both by chi-square against exact
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


def gumbel_max(scores: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """(..., V) scores and Gumbel noise -> (...,) long: argmax(scores + G), a sample ~ softmax(scores)
    (greedy: G = 0). The one sampling expression of `accept`, the AR frame graph and the decoders."""
    return (scores + noise).argmax(-1)


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


@dataclass(frozen=True)
class AcceptTables:
    """The per-tree constants `accept` reads, as tensors (a graph registers them as buffers)."""

    parent: torch.Tensor          # (q,) long: parent node, the root's clamped to 0
    strict_anc: torch.Tensor      # (q, q) bool: [j, k] = k is an ancestor-or-self of j and not the root
    depth: torch.Tensor           # (q,) long
    sibling_before: torch.Tensor  # (q, q) bool: [j, k] = k is a sibling of j visited before j

    @classmethod
    def of(cls, buffers: TreeBuffers, device=None) -> "AcceptTables":
        strict = buffers.mask.clone()
        strict[:, 0] = False
        return cls(parent=buffers.parent.clamp(min=0).to(device), strict_anc=strict.to(device),
                   depth=buffers.depth.to(device), sibling_before=buffers.sibling_before.to(device))


def gumbel_noise(shape, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Standard Gumbel noise (float32, `shape`) from `generator`: G = -log(-log U), U uniform drawn in
    float64 and clamped away from 0, so G is always finite (-6.6 < G < 37; an infinite G would turn a
    -inf score, a token outside the support, into NaN). Uniforms, not `exponential_`: drawing them
    is several times cheaper, and the noise is drawn on the host every round."""
    u = torch.rand(tuple(shape), generator=generator, dtype=torch.float64, device=device).clamp_(min=1e-300)
    return (-(-u.log()).log()).to(torch.float32)


def check_noise(noise: torch.Tensor, shape) -> None:
    """Host-side check of caller-given noise (graphs cannot raise): shape and finiteness."""
    if tuple(noise.shape) != tuple(shape):
        raise ValueError(f"noise must have shape {tuple(shape)}, got {tuple(noise.shape)}")
    if not noise.is_floating_point():
        raise ValueError(f"noise must be a float tensor, got dtype {noise.dtype}")
    if not bool(torch.isfinite(noise).all()):
        raise ValueError("noise holds a non-finite value (NaN or inf); Gumbel noise must be finite")


def accept(scores: torch.Tensor, noise: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor,
           parent: torch.Tensor, strict_anc: torch.Tensor, depth: torch.Tensor, sibling_before: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """THE lossless tree acceptance rule (seed 000 §2.2; references.md "sample once per node" form).

    scores (B, q, V) float: the verifier's warped logits at every node (-inf outside the kept support;
    log p works too), index 0 = the committed root; noise (B, q, V) float: Gumbel noise (zeros:
    greedy); tokens (B, q) long: each node's draft token (index 0 ignored); valid (B, q) or (q,) bool:
    nodes that may be accepted; parent, strict_anc, depth, sibling_before: `AcceptTables`.

    Returns y (B, q) long, the sample at every node; ok (B, q) bool, the accepted nodes (root
    included: they form one chain); last (B,) long, the deepest accepted node; token (B,) long, the
    code emitted after it (residual sample after a rejection, bonus at a leaf: both are y[last]).

    Pure tensor code, static shapes: it runs unchanged in eager PyTorch, under torch.compile, and
    traced into ONNX / Core ML."""
    y = gumbel_max(scores, noise)  # (B, q): one sample ~ softmax(scores) per node
    match = (tokens == y.index_select(1, parent)) & valid  # (B, q): node token == its parent's sample
    same = tokens.unsqueeze(2) == tokens.unsqueeze(1)  # (B, q, q)
    match = match & ~(same & sibling_before).any(-1)  # only the first of equal sibling tokens can match
    # a node is accepted iff every non-root ancestor-or-self matched (root row: nothing to match)
    ok = ~(strict_anc & ~match.unsqueeze(1)).any(-1)  # (B, q)
    # accepted nodes form a single chain (one matching child per node), so the deepest is unique
    last = (ok.to(depth.dtype) * (depth + 1)).argmax(-1)  # (B,)
    token = y.gather(1, last.unsqueeze(1)).squeeze(1)  # (B,)
    return y, ok, last, token


def verify_sampled(p: torch.Tensor, tokens: torch.Tensor, buffers: TreeBuffers, valid: torch.Tensor | None = None,
                   generator: torch.Generator | None = None, greedy: bool = False,
                   noise: torch.Tensor | None = None) -> VerifyResult:
    """`accept` on probabilities p (B, q, V) (log p as the scores); tokens (B, q) long; valid (B, q)
    or (q,) bool. The Gumbel noise is ``noise`` if given (checked), else zeros when ``greedy``, else
    drawn from ``generator``."""
    valid = _check(p, tokens, buffers, valid)
    B, q, V = p.shape
    dev = p.device
    if noise is not None:
        check_noise(noise, (B, q, V))
        noise = noise.to(device=dev, dtype=torch.float32)
    elif greedy:
        noise = torch.zeros(B, q, V, device=dev)
    else:
        noise = gumbel_noise((B, q, V), generator, dev)
    t = AcceptTables.of(buffers, dev)
    _, _, last, token = accept(p.to(torch.float32).log(), noise, tokens, valid, t.parent, t.strict_anc, t.depth,
                               t.sibling_before)
    return VerifyResult(last=last, accepted=t.depth[last], token=token, path=_path(buffers, last))


def verify_walk(p: torch.Tensor, tokens: torch.Tensor, buffers: TreeBuffers, valid: torch.Tensor | None = None,
                generator: torch.Generator | None = None, greedy: bool = False,
                _control: str | None = None) -> VerifyResult:
    """Lossless tree acceptance, sibling-walk form with the residual rule (see module docstring).

    Same arguments as `verify_sampled` (without ``noise``). ``_control`` is for tests only and makes the rule WRONG on
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
