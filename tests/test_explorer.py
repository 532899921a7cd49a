"""The tree-mask explorer's pure figure builders (rvqspec.workbench.explorer) against tree.buffers(), and the
round recorder against the real speculative decoder on a tiny random code predictor."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rvqspec.core.drafters import PositionOffsets
from rvqspec.workbench.explorer import (ACCEPTED, ATTENDS, HIDDEN, HIGHLIGHT, DrafterChoice, RecordingInner, Round,
                              TreeMaskExplorer, ancestors, mask_figure, mask_matrix, node_expectations,
                              record_rounds, rounds_figure, rounds_matrix, rounds_tokens_per_call, tree_figure)
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree

from _tiny_cp import randomize_drafter, tiny_code_predictor

torch.set_num_threads(1)

# a decreasing acceptance table acc[d, r] (depth 3, 4 ranks), as measured tables look
ACC = np.array([[0.6, 0.2, 0.1, 0.05], [0.5, 0.15, 0.08, 0.04], [0.4, 0.1, 0.05, 0.02]])


@pytest.fixture(params=[1, 5, 12])
def tree(request):
    return SparseTree.grow(ACC, budget=request.param, max_depth=3)


def _trace(fig, name):
    (tr,) = [t for t in fig.data if t.name == name]
    return tr


def test_tree_figure_has_one_point_per_node_and_edges(tree):
    fig = tree_figure(tree, ACC)
    q = tree.buffers().q
    assert len(_trace(fig, "nodes").x) == q
    xs = _trace(fig, "edges").x
    assert len(xs) == 3 * (q - 1)  # one segment (2 points + gap) per non-root node
    assert list(_trace(fig, "ancestors").x) == [] and list(_trace(fig, "accepted path").x) == []


def test_tree_node_colours_are_expected_acceptance(tree):
    fig = tree_figure(tree, ACC)
    colors = np.asarray(_trace(fig, "nodes").marker.color, dtype=float)
    exp = node_expectations(tree, ACC)
    assert np.allclose(colors, exp)
    # their sum is the tree's expected accepted length (Medusa's estimate, rvqspec.core.tree)
    assert exp.sum() == pytest.approx(tree.expected_length(ACC))
    # expectation never grows along a path: a child's product has one more factor <= 1
    b = tree.buffers()
    for i in range(1, b.q):
        assert exp[i] <= exp[int(b.parent[i])] + 1e-12


@pytest.mark.parametrize("budget", [5, 12])
def test_highlight_marks_exactly_the_ancestors_in_both_figures(budget):
    tree = SparseTree.grow(ACC, budget=budget, max_depth=3)
    b = tree.buffers()
    for node in range(b.q):
        anc = set(b.mask[node].nonzero().flatten().tolist())
        assert set(ancestors(tree, node)) == anc
        assert 0 in anc and node in anc
        # ancestors = the parent chain
        chain, i = {node}, node
        while int(b.parent[i]) >= 0:
            i = int(b.parent[i])
            chain.add(i)
        assert anc == chain
        z = mask_matrix(tree, highlight=node)
        hi = {(int(i), int(j)) for i, j in zip(*np.nonzero(z == HIGHLIGHT))}
        assert hi == {(node, j) for j in anc}
        # every other cell is the plain mask
        rest = z.copy()
        rest[z == HIGHLIGHT] = ATTENDS
        assert np.array_equal(rest, b.mask.numpy().astype(int))
        fig = mask_figure(tree, highlight=node)
        assert np.array_equal(np.asarray(fig.data[0].z), z)
        tf = tree_figure(tree, ACC, highlight=node)
        assert sorted(_trace(tf, "ancestors").customdata.tolist()) == sorted(anc)


def test_mask_matrix_accepted_path_and_errors():
    tree = SparseTree.grow(ACC, budget=8, max_depth=3)
    b = tree.buffers()
    leaf = int(b.retrieve[0, -1]) if int(b.retrieve[0, -1]) >= 0 else int(b.retrieve[0][b.retrieve[0] >= 0][-1])
    path = [i for i in b.retrieve[0].tolist() if i > 0]
    z = mask_matrix(tree, accepted=path)
    keep = [0] + path
    for i in keep:
        for j in keep:
            assert z[i, j] == (ACCEPTED if b.mask[i, j] else HIDDEN)
    assert leaf in path
    with pytest.raises(IndexError, match="outside"):
        mask_matrix(tree, accepted=[b.q])
    with pytest.raises(IndexError, match="outside the tree"):
        mask_matrix(tree, highlight=b.q + 3)


def test_rounds_matrix_and_figure():
    rounds = [Round(frame=0, start=1, accepted=2, path=[1, 2], tokens=[5, 6, 7]),
              Round(frame=0, start=4, accepted=0, path=[], tokens=[3]),
              Round(frame=0, start=5, accepted=3, path=[1, 2, 3], tokens=[1, 1, 1, 1]),
              Round(frame=0, start=9, accepted=3, path=[1, 2, 3], tokens=[2, 2, 2, 2]),
              Round(frame=0, start=13, accepted=2, path=[1, 2], tokens=[4, 4])]
    z = rounds_matrix(rounds)
    assert z.shape == (5, 15)
    # c1 comes from the prefill, every other code is committed by exactly one round
    assert (z[:, 0] == 0).all()
    assert ((z[:, 1:] > 0).sum(0) == 1).all()
    assert z[0].tolist()[1:4] == [1, 1, 2]
    assert z[4, 13:].tolist() == [1, 1]  # a = 2 reaches c15: no verifier sample past it
    assert rounds_tokens_per_call(rounds) == pytest.approx(15 / 6)
    fig = rounds_figure(rounds, current=2)
    assert np.array_equal(np.asarray(fig.data[0].z), z)
    assert len(fig.layout.shapes) == 1
    with pytest.raises(ValueError, match="at least one"):
        rounds_figure([])


def _spec(budget=6, seed=0):
    cp = tiny_code_predictor(seed=seed)
    drafter = randomize_drafter(PositionOffsets(3, cp.config.hidden_size, cp.config.vocab_size), seed=seed)
    return cp, drafter, SpeculativeCodePredictor(cp, drafter, SparseTree.grow(ACC, budget=budget, max_depth=3))


def _frames(cp, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 1, cp.config.talker_hidden_size, generator=g),
             torch.randint(0, cp.config.vocab_size, (1, 1), generator=g)) for _ in range(n)]


def test_record_rounds_covers_every_code_of_every_frame():
    cp, drafter, spec = _spec()
    frames = _frames(cp)
    rounds = record_rounds(spec, frames, seed=3)
    assert {r.frame for r in rounds} == {0, 1, 2}
    for f in range(3):
        z = rounds_matrix([r for r in rounds if r.frame == f])
        assert ((z[:, 1:] > 0).sum(0) == 1).all(), "codes c2..c15 are each committed by one round"
    tpc = rounds_tokens_per_call(rounds)
    assert 1.0 <= tpc <= 15 / 2
    # the same generator seed gives the same rounds (explicit generators)
    assert record_rounds(spec, frames, seed=3) == rounds
    # accepted paths are real root-to-node chains of the tree
    b = spec.tree.buffers()
    for r in rounds:
        for k, node in enumerate(r.path):
            assert int(b.depth[node]) == k + 1
            assert int(b.parent[node]) == (r.path[k - 1] if k else 0)


def test_recording_inner_matches_direct_decoding():
    cp, drafter, spec = _spec()
    frames = _frames(cp, n=2)
    inner = RecordingInner(spec)
    g = torch.Generator().manual_seed(1)
    outs = [inner.generate_frame(h, c0, generator=g)[0] for h, c0 in frames]
    g = torch.Generator().manual_seed(1)
    direct = [spec.generate_frame(h, c0, generator=g)[0] for h, c0 in frames]
    assert all(torch.equal(a, b) for a, b in zip(outs, direct))
    assert len(inner.frames) == 2 and {r.frame for r in inner.rounds} == {0, 1}


def test_widget_wires_figures():
    pytest.importorskip("ipywidgets")
    cp, drafter, _ = _spec()
    ex = TreeMaskExplorer({"offsets": DrafterChoice(drafter, ACC), "reused": DrafterChoice(
        PositionOffsets(3, cp.config.hidden_size, cp.config.vocab_size), ACC * 0.5)},
        budgets=(2, 6), code_predictor=cp, frames=_frames(cp, n=1))
    assert ex.w_n.value == 6
    q = ex.tree().buffers().q
    assert len(ex.fig_tree.data[1].x) == q and np.asarray(ex.fig_mask.data[0].z).shape == (q, q)
    ex.w_node.value = 3
    z = np.asarray(ex.fig_mask.data[0].z)
    assert set(np.nonzero(z[3] == HIGHLIGHT)[0].tolist()) == set(ancestors(ex.tree(), 3)) or ex.rounds
    assert ex.rounds, "one frame was decoded"
    ex.w_n.value = 2
    assert len(ex.fig_tree.data[1].x) == 3
    ex.w_drafter.value = "reused"
    assert "expected tokens/call" in ex.w_info.value
