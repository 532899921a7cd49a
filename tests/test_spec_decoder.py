"""The speculative code predictor on tiny random MultiCodeDecoders (seed 000 §2.2, Figures 2-3).

(a) greedy: identical codes to the AR `generate_frame` for every drafter kind and several trees;
(b) sampled: the joint of (c1, c2) from full frames matches the exact AR joint by enumeration
    (chi-square over cells with expected count >= 5, the rest pooled; fails at p < 1e-6; a cell of
    exact probability 0 must never appear), and an always-accept control fails the same test;
(c) the fused call's verifier logits equal AR logits at the same prefixes (tree mask and positions);
(d) after a frame the cache holds exactly the accepted path (compaction).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _tiny_cp import randomize_drafter, teacher_forced, tiny_code_predictor
from rvqspec.core.drafters import make_drafter
from rvqspec.measure.lossless import pooled_chisquare
from rvqspec.core.sampling import Sampling, probs
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree

TREES = {
    "n1": SparseTree([(0,)]),
    "chain3": SparseTree.chain(3),
    "wide": SparseTree([(0,), (1,), (2,), (3,), (0, 0), (0, 1), (1, 0), (2, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0),
                        (1, 0, 0)]),
}
KINDS = ["reused", "offsets", "per_position", "low_rank", "shared_low_rank", "medusa"]


@pytest.fixture(scope="module")
def cp():
    torch.set_num_threads(1)
    return tiny_code_predictor(vocab=16, hidden=32, layers=2, talker_hidden=48, seed=0)


def drafter_of(kind, cp):
    d = make_drafter(kind, cp)
    return d if kind == "reused" else randomize_drafter(d, seed=len(kind))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tree", sorted(TREES))
def test_greedy_identical_to_ar(cp, kind, tree):
    spec = SpeculativeCodePredictor(cp, drafter_of(kind, cp), TREES[tree])
    g = torch.Generator().manual_seed(0)
    accepted = 0
    for i in range(6):
        th = torch.randn(1, 1, 48, generator=g)
        c0 = torch.randint(0, 16, (1, 1), generator=g)
        ar = cp.generate_frame(th, c0, Sampling.greedy())
        out, st = spec.generate_frame(th, c0, Sampling.greedy())
        assert torch.equal(out, ar), f"frame {i}: {out.tolist()} != AR {ar.tolist()}"
        assert st.calls == 1 + len(st.accepted_lengths)
        assert sum(a + 1 for a in st.accepted_lengths) >= 14  # 14 codes after c1 (the last round may end at c15)
        accepted += sum(st.accepted_lengths)
    assert accepted > 0  # drafts were actually accepted, so the test covers tree paths


def test_batch_rows_and_shape_errors(cp):
    spec = SpeculativeCodePredictor(cp, drafter_of("offsets", cp), TREES["wide"])
    th = torch.randn(3, 1, 48)
    c0 = torch.tensor([[1], [2], [3]])
    out, st = spec.generate_frame(th, c0, Sampling.greedy())
    assert torch.equal(out, cp.generate_frame(th, c0, Sampling.greedy()))
    assert st.frames == 3
    with pytest.raises(ValueError, match="c0 must be"):
        spec.generate_frame(th, c0[:2], Sampling.greedy())
    with pytest.raises(ValueError, match="exceeds the drafter"):
        SpeculativeCodePredictor(cp, make_drafter("offsets", cp, num_offsets=2), TREES["chain3"])


@torch.no_grad()
def exact_joint_c1_c2(cp, th, c0, sampling):
    V = cp.config.vocab_size
    h, _ = teacher_forced(cp, th, c0, [])
    p1 = probs(torch.nn.functional.linear(h[:, 1], cp.lm_head[0].weight), sampling)[0].double()  # (V,)
    p2 = torch.zeros(V, V, dtype=torch.float64)
    for c1 in range(V):
        h, _ = teacher_forced(cp, th, c0, [c1])
        p2[c1] = probs(torch.nn.functional.linear(h[:, 2], cp.lm_head[1].weight), sampling)[0].double()
    return (p1[:, None] * p2).numpy()


def chi2(codes, joint):
    V = joint.shape[0]
    obs = np.bincount((codes[:, 0] * V + codes[:, 1]).numpy(), minlength=V * V)
    pval, impossible, _ = pooled_chisquare(obs, joint)
    return pval, impossible


N_FRAMES = 2000  # about 20-40 s on this shared 2-core machine


def sample_frames(spec, th, c0, sampling, n, seed):
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, 2, dtype=torch.long)
    acc = 0
    for i in range(n):
        codes, st = spec.generate_frame(th, c0, sampling, g)
        out[i] = codes[0, :2]
        acc += sum(st.accepted_lengths)
    return out, acc / n


@pytest.mark.slow
def test_sampled_joint_matches_exact_ar(cp):
    """2,000 full frames; chi-square p >= 1e-6 on (c1, c2) and no probability-0 cell observed;
    the always-accept control on the same frames count must give p < 1e-6 (or an impossible cell)."""
    sampling = Sampling(temperature=1.0, top_k=4, top_p=1.0)  # drafts outside the top-4 have p = 0
    th = torch.randn(1, 1, 48, generator=torch.Generator().manual_seed(5))
    c0 = torch.tensor([[7]])
    joint = exact_joint_c1_c2(cp, th, c0, sampling)
    spec = SpeculativeCodePredictor(cp, drafter_of("offsets", cp), TREES["wide"])
    codes, mean_acc = sample_frames(spec, th, c0, sampling, N_FRAMES, seed=1)
    pval, impossible = chi2(codes, joint)
    assert impossible == 0
    assert pval >= 1e-6, f"p = {pval:.3g}"
    assert mean_acc > 1.0  # accepted drafts per frame: the rounds really speculate
    bad = SpeculativeCodePredictor(cp, drafter_of("offsets", cp), TREES["wide"], rule="walk",
                                   _control="always_accept")
    codes, _ = sample_frames(bad, th, c0, sampling, N_FRAMES // 3, seed=2)
    pval, impossible = chi2(codes, joint)
    assert pval < 1e-6 or impossible > 0


def test_walk_rule_decoder_matches_exact_ar_small(cp):
    """The sibling-walk rule inside the decoder, 300 frames (weaker, same thresholds)."""
    sampling = Sampling(temperature=1.0, top_k=4, top_p=1.0)
    th = torch.randn(1, 1, 48, generator=torch.Generator().manual_seed(6))
    c0 = torch.tensor([[2]])
    joint = exact_joint_c1_c2(cp, th, c0, sampling)
    spec = SpeculativeCodePredictor(cp, drafter_of("low_rank", cp), TREES["wide"], rule="walk")
    codes, _ = sample_frames(spec, th, c0, sampling, 300, seed=3)
    pval, impossible = chi2(codes, joint)
    assert impossible == 0 and pval >= 1e-6


@pytest.mark.parametrize("m", [1, 5, 13])
@torch.no_grad()
def test_fused_call_logits_equal_ar(cp, m):
    """Verifier logits of every valid tree node = AR logits for the same prefix (1e-4 abs)."""
    tree = TREES["wide"]
    spec = SpeculativeCodePredictor(cp, drafter_of("offsets", cp), tree)
    g = torch.Generator().manual_seed(m)
    th = torch.randn(1, 1, 48, generator=g)
    c0 = torch.randint(0, 16, (1, 1), generator=g)
    prefix = torch.randint(0, 16, (m - 1,), generator=g).tolist()  # c1..c_{m-1}
    _, cache0 = teacher_forced(cp, th, c0, prefix)  # slots 0..m
    cache = cp.new_cache(1, spec._plan(torch.float32, torch.device("cpu")).max_len)
    cache.k[:, :, :, :m + 1] = cache0.k
    cache.v[:, :, :, :m + 1] = cache0.v
    tokens = torch.randint(0, 16, (1, tree.num_nodes + 1), generator=g)  # [c_m, nodes]
    hidden, logits = spec.verify_call(cache, m, tokens)
    b = spec.buffers
    checked = 0
    for i in range(b.q):
        d = int(b.depth[i])
        if m + d > 14:  # no LM head after c15
            assert torch.all(logits[0, i] == 0)
            continue
        chain, node = [], i
        while node > 0:
            chain.append(int(tokens[0, node]))
            node = int(b.parent[node])
        codes = prefix + [int(tokens[0, 0])] + chain[::-1]
        h, _ = teacher_forced(cp, th, c0, codes)
        ref = torch.nn.functional.linear(h[:, -1], cp.lm_head[m + d].weight)
        torch.testing.assert_close(logits[0, i], ref[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(hidden[0, i], h[0, -1], atol=1e-4, rtol=1e-4)
        checked += 1
    assert checked >= 4


def test_cache_compaction_keeps_accepted_path(cp):
    """After each frame the cache slots 0..filled-1 equal a teacher-forced run over the codes
    (the accepted path only), including frames whose accepted path needed moving."""
    spec = SpeculativeCodePredictor(cp, drafter_of("per_position", cp), TREES["wide"])
    g = torch.Generator().manual_seed(11)
    moved = 0
    for i in range(30):
        th = torch.randn(1, 1, 48, generator=g)
        c0 = torch.randint(0, 16, (1, 1), generator=g)
        rounds = []
        codes, st = spec.generate_frame(th, c0, Sampling(temperature=1.0, top_k=4), g, callback=rounds.append)
        moved += sum(r.path != list(range(1, r.accepted + 1)) for r in rounds)
        filled = spec.last_filled
        fed = codes[0, :filled - 2].tolist()  # slots hold h, c0, c1..c_{filled-2}
        _, ref = teacher_forced(cp, th, c0, fed)
        torch.testing.assert_close(spec.last_cache.k[:, :, :, :filled], ref.k, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(spec.last_cache.v[:, :, :, :filled], ref.v, atol=1e-5, rtol=1e-5)
        # the callback saw every emitted code exactly once
        assert [c for r in rounds for c in r.tokens] == codes[0, 1:].tolist()
    assert moved > 0, "no round needed compaction; the test would not cover it"
