"""Statistical tests of lossless tree verification (seed 000 §2.2 / §3.2; references.md "Testing losslessness").

Setting: an explicit tiny "model" (vocab V = 8, fixed random logits for every prefix up to length 3)
plays the verifier. One speculative round runs over a draft tree; the codes it emits, completed by
exact autoregressive sampling where the round emitted fewer than 3, give (c1, c2, c3). Their joint
law must equal the exact AR joint P(c1) P(c2|c1) P(c3|c1,c2) computed by enumeration (after the
deployed warpers, `rvqspec.core.sampling.probs`).

Thresholds: N = 100,000 samples per setting; Pearson chi-square over the cells with positive exact
probability; a correct rule FAILS if p < 1e-6, and a cell of exact probability 0 (e.g. a draft
outside the top-k) must never be observed. Each negative control (always accept; resample from the
full p instead of the residual; one independent sample per root-to-leaf path) must produce p < 1e-6
on the same test. Greedy decoding must equal the AR argmax chain exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from rvqspec.core.sampling import Sampling, probs
from rvqspec.core.tree import SparseTree
from rvqspec.core.verify import draw, verify_sampled, verify_walk

V = 8
L = 3  # codes whose joint is tested
N_SAMPLES = 100_000
P_FAIL = 1e-6


class TinyLM:
    """prefix (B, d) -> logits (B, V) for d = 0..3 (fixed random tables, seed-fixed)."""

    def __init__(self, seed: int = 0, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        self.tables = [torch.randn((V,) * (d + 1), generator=g) * scale for d in range(4)]  # d-th: (V,)*d x V

    def logits(self, prefix: torch.Tensor) -> torch.Tensor:
        d = prefix.shape[1]
        t = self.tables[d]
        if d == 0:
            return t.expand(prefix.shape[0], V)
        flat = t.reshape(-1, V)  # (V^d, V)
        idx = torch.zeros(prefix.shape[0], dtype=torch.long)
        for k in range(d):
            idx = idx * V + prefix[:, k]
        return flat[idx]  # (B, V)

    def exact_joint(self, sampling: Sampling) -> np.ndarray:
        p1 = probs(self.tables[0], sampling).double()  # (V,)
        p2 = probs(self.tables[1], sampling).double()  # (V, V)
        p3 = probs(self.tables[2], sampling).double()  # (V, V, V)
        return (p1[:, None, None] * p2[:, :, None] * p3).numpy()


def node_prefixes(buffers):
    """For each node j: the node indices on its path (root excluded), in depth order."""
    out = []
    for j in range(buffers.q):
        chain = []
        node = j
        while node > 0:
            chain.append(node)
            node = int(buffers.parent[node])
        out.append(chain[::-1])
    return out


def draft_tokens(buffers, n, mode, g):
    """(n, q) draft tokens: 'perm' = rank r at depth d is a fixed permutation's r-th token (distinct
    siblings, like top-m drafting); 'iid' = independent uniform tokens (duplicate siblings happen)."""
    q = buffers.q
    if mode == "perm":
        perms = [torch.randperm(V, generator=g) for _ in range(4)]
        tok = torch.zeros(q, dtype=torch.long)
        for j in range(1, q):
            tok[j] = perms[int(buffers.depth[j])][int(buffers.rank[j])]
        return tok.expand(n, q).clone()
    tok = torch.randint(0, V, (n, q), generator=g)
    tok[:, 0] = 0
    return tok


def run_round(lm, tree, sampling, mode, rule, g, n=N_SAMPLES, depth_limit=None):
    """Emit (n, 3) codes: one verify round over `tree`, then exact AR completion."""
    b = tree.buffers()
    tokens = draft_tokens(b, n, mode, g)  # (n, q)
    pref = node_prefixes(b)
    p = torch.stack([probs(lm.logits(tokens[:, pref[j]]), sampling) for j in range(b.q)], 1)  # (n, q, V)
    valid = None
    if depth_limit is not None:
        valid = b.depth <= depth_limit  # (q,)
    if rule == "sampled":
        res = verify_sampled(p, tokens, b, valid, generator=g, greedy=not sampling.do_sample)
    elif rule == "walk":
        res = verify_walk(p, tokens, b, valid, generator=g, greedy=not sampling.do_sample)
    elif rule in ("always_accept", "full_p"):
        res = verify_walk(p, tokens, b, valid, generator=g, _control=rule)
    elif rule == "per_path":
        res = per_path_control(p, tokens, b, g)
    else:
        raise AssertionError(rule)
    path_nodes = res.path.clamp(min=0)  # (n, D+1)
    path_tokens = tokens.gather(1, path_nodes)[:, 1:]  # (n, D) tokens of accepted nodes (valid up to accepted)
    codes = torch.zeros(n, L, dtype=torch.long)
    for k in range(L):
        if k < path_tokens.shape[1]:
            from_path = path_tokens[:, k]
        else:
            from_path = torch.zeros(n, dtype=torch.long)
        pk = probs(lm.logits(codes[:, :k]), sampling)  # (n, V)
        ar = pk.argmax(-1) if not sampling.do_sample else draw(pk, g)
        codes[:, k] = torch.where(res.accepted > k, from_path, torch.where(res.accepted == k, res.token, ar))
    return codes, res


def per_path_control(p, tokens, b, g):
    """WRONG on purpose (Medusa-style): one independent sample per root-to-leaf path, keep the longest."""
    from rvqspec.core.verify import VerifyResult, _path
    n = p.shape[0]
    retrieve = b.retrieve  # (P, D+1)
    best_len = torch.full((n,), -1, dtype=torch.long)
    last = torch.zeros(n, dtype=torch.long)
    token = torch.zeros(n, dtype=torch.long)
    for row in retrieve:
        nodes = [int(x) for x in row if x >= 0]
        ys = [draw(p[:, j], g) for j in nodes]  # fresh samples for this path
        length = torch.zeros(n, dtype=torch.long)
        alive = torch.ones(n, dtype=torch.bool)
        for k in range(1, len(nodes)):
            alive = alive & (tokens[:, nodes[k]] == ys[k - 1])
            length = length + alive.long()
        better = length > best_len
        best_len = torch.where(better, length, best_len)
        node_at = torch.tensor(nodes)[length]
        y_at = torch.stack(ys, 1).gather(1, length[:, None]).squeeze(1)
        last = torch.where(better, node_at, last)
        token = torch.where(better, y_at, token)
    return VerifyResult(last=last, accepted=b.depth[last], token=token, path=_path(b, last))


def chi2_pvalue(codes, joint):
    n = codes.shape[0]
    idx = (codes[:, 0] * V + codes[:, 1]) * V + codes[:, 2]
    obs = np.bincount(idx.numpy(), minlength=V ** L).astype(np.float64)
    exp = joint.reshape(-1) * n
    zero = exp == 0
    impossible = obs[zero].sum()
    exp_nz, obs_nz = exp[~zero], obs[~zero]
    exp_nz = exp_nz * obs_nz.sum() / exp_nz.sum()
    return stats.chisquare(obs_nz, exp_nz).pvalue, impossible


TREES = {
    "chain3": SparseTree.chain(3),
    "wide": SparseTree([(0,), (1,), (2,), (3,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0)]),
    "n1": SparseTree([(0,)]),
}

SETTINGS = [
    # (sampling, tree, draft mode, depth limit)
    (Sampling(temperature=1.0, top_k=0, top_p=1.0), "wide", "perm", None),
    (Sampling(temperature=0.9, top_k=3, top_p=1.0), "wide", "perm", None),   # drafts outside top-3: p = 0
    (Sampling(temperature=0.7, top_k=0, top_p=0.8), "chain3", "perm", None),
    (Sampling(temperature=1.3, top_k=5, top_p=0.9), "wide", "iid", None),    # duplicate siblings
    (Sampling(temperature=1.0, top_k=4, top_p=1.0), "wide", "perm", 1),      # codebook limit at depth 1
    (Sampling(temperature=1.0, top_k=0, top_p=1.0), "n1", "perm", None),
]


@pytest.mark.parametrize("rule", ["walk", "sampled"])
@pytest.mark.parametrize("setting", range(len(SETTINGS)))
def test_joint_matches_exact_ar(rule, setting):
    """Joint of (c1, c2, c3) = exact AR joint: chi-square p >= 1e-6, no probability-0 cell observed."""
    sampling, tree, mode, limit = SETTINGS[setting]
    lm = TinyLM(seed=setting)
    g = torch.Generator().manual_seed(1000 + setting)
    codes, res = run_round(lm, TREES[tree], sampling, mode, rule, g, depth_limit=limit)
    pval, impossible = chi2_pvalue(codes, lm.exact_joint(sampling))
    assert impossible == 0, f"{impossible} samples fell in cells of exact probability 0"
    assert pval >= P_FAIL, f"chi-square p = {pval:.3g} < {P_FAIL}"
    # the rounds must actually accept drafts, else the test would only check AR sampling
    assert res.accepted.float().mean() > 0.1
    if limit is not None:
        assert int(res.accepted.max()) <= limit


@pytest.mark.parametrize("control", ["always_accept", "full_p", "per_path"])
def test_negative_controls_fail(control):
    """Each deliberately wrong rule must be rejected by the same test: chi-square p < 1e-6."""
    sampling = Sampling(temperature=1.0, top_k=0, top_p=1.0)
    lm = TinyLM(seed=0)
    g = torch.Generator().manual_seed(7)
    codes, _ = run_round(lm, TREES["wide"], sampling, "perm", control, g)
    pval, impossible = chi2_pvalue(codes, lm.exact_joint(sampling))
    assert pval < P_FAIL or impossible > 0, f"negative control {control} passed (p = {pval:.3g})"


def test_control_always_accept_hits_topk_zero_cells():
    """Always-accept takes drafts outside the top-k: samples land in cells of exact probability 0."""
    sampling = Sampling(temperature=0.9, top_k=3, top_p=1.0)
    lm = TinyLM(seed=1)
    g = torch.Generator().manual_seed(8)
    codes, _ = run_round(lm, TREES["wide"], sampling, "iid", "always_accept", g, n=20_000)
    _, impossible = chi2_pvalue(codes, lm.exact_joint(sampling))
    assert impossible > 0


@pytest.mark.parametrize("rule", ["walk", "sampled"])
@pytest.mark.parametrize("tree", sorted(TREES))
def test_greedy_exact(rule, tree):
    """Greedy: every row's codes equal the AR argmax chain exactly."""
    lm = TinyLM(seed=3)
    g = torch.Generator().manual_seed(3)
    sampling = Sampling.greedy()
    codes, res = run_round(lm, TREES[tree], sampling, "iid", rule, g, n=5000)
    ref = torch.zeros(L, dtype=torch.long)
    for k in range(L):
        ref[k] = lm.logits(ref[None, :k]).argmax(-1)[0]
    assert torch.equal(codes, ref.expand_as(codes))
    # iid random drafts include the argmax at depth 1 often enough to exercise acceptance
    assert res.accepted.max() >= 1


def test_zero_probability_draft_never_accepted():
    """A child with p = 0 (outside top-k) is never accepted, by either form, over many draws."""
    tree = SparseTree([(0,), (1,)])
    b = tree.buffers()
    n = 50_000
    p = torch.zeros(n, 3, V)
    p[:, :, 0] = 0.5
    p[:, :, 1] = 0.5
    tokens = torch.tensor([0, 5, 1]).expand(n, 3)  # first child token 5 has p = 0
    g = torch.Generator().manual_seed(0)
    for fn in (verify_walk, verify_sampled):
        res = fn(p, tokens, b, generator=g)
        assert not bool((res.last == 1).any())
        assert bool((res.last == 2).any())
        assert not bool((res.token == 5).any())


def test_duplicate_sibling_guard():
    """Two siblings with the same token: the second can never be accepted (its residual is 0)."""
    tree = SparseTree([(0,), (1,), (1, 0)])
    b = tree.buffers()
    n = 50_000
    p = torch.full((n, 4, V), 1.0 / V)
    tokens = torch.tensor([0, 3, 3, 4]).expand(n, 4)
    g = torch.Generator().manual_seed(0)
    for fn in (verify_walk, verify_sampled):
        res = fn(p, tokens, b, generator=g)
        assert not bool((res.last == 2).any()) and not bool((res.last == 3).any())
        frac = (res.last == 1).float().mean().item()
        assert abs(frac - 1.0 / V) < 5 * (1.0 / V / n) ** 0.5 + 0.005


def test_bad_shapes_raise():
    b = SparseTree.chain(2).buffers()
    with pytest.raises(ValueError, match="q=N\\+1=3"):
        verify_sampled(torch.rand(2, 4, V), torch.zeros(2, 4, dtype=torch.long), b)
    with pytest.raises(ValueError, match="draft tokens"):
        verify_walk(torch.rand(2, 3, V), torch.zeros(2, 4, dtype=torch.long), b)
