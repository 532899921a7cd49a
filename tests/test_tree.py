"""SparseTree: invariants of the derived buffers, greedy growth, JSON and bad input (seed 000 §2.2)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rvqspec.core.tree import SparseTree, TreeError, tree_buffers


def random_table(seed: int, K: int = 3, R: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    acc = np.sort(rng.uniform(0, 0.6, size=(K, R)), axis=1)[:, ::-1]  # decreasing in rank, like real tables
    return acc.copy()


def random_tree(seed: int, n: int = 12) -> SparseTree:
    return SparseTree.grow(random_table(seed), n)


TREES = [SparseTree([(0,)]), SparseTree.chain(3), random_tree(0, 20), random_tree(1, 40),
         SparseTree([(2,), (0,), (0, 3), (0, 1)])]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: f"N{len(t)}")
def test_buffer_invariants(tree):
    b = tree.buffers()
    q = len(tree) + 1
    assert b.q == q and b.mask.shape == (q, q)
    nodes = [()] + list(tree.paths)
    # canonical order: (length, value)
    assert list(tree.paths) == sorted(tree.paths, key=lambda p: (len(p), p))
    for i, p in enumerate(nodes):
        assert int(b.depth[i]) == len(p)
        assert int(b.rank[i]) == (p[-1] if p else -1)
        par = nodes.index(p[:-1]) if p else -1
        assert int(b.parent[i]) == par
        for j, pj in enumerate(nodes):
            is_anc = p[:len(pj)] == pj  # ancestor-or-self (root () is everyone's ancestor)
            assert bool(b.mask[i, j]) == is_anc, (p, pj)
    assert torch.equal(b.mask, b.mask.tril())  # lower-triangular in canonical order
    assert bool(b.mask.diagonal().all())
    # first child / next sibling enumerate exactly the children in rank order
    for i in range(q):
        ch, c = [], int(b.first_child[i])
        while c != -1:
            ch.append(c)
            c = int(b.next_sibling[c])
        expect = sorted((j for j in range(1, q) if int(b.parent[j]) == i), key=lambda j: int(b.rank[j]))
        assert ch == expect
    # retrieve rows: root-to-leaf chains that end at leaves, one per leaf
    leaves = {i for i in range(q) if int(b.first_child[i]) == -1}
    ends = set()
    for row in b.retrieve.tolist():
        chain = [x for x in row if x >= 0]
        assert chain[0] == 0
        for a, c in zip(chain, chain[1:]):
            assert int(b.parent[c]) == a
        assert chain[-1] in leaves
        ends.add(chain[-1])
    assert ends == leaves
    assert b.max_depth == tree.max_depth


def brute_expected_length(tree: SparseTree, acc: np.ndarray) -> float:
    total = 1.0
    for p in tree.paths:
        total += float(np.prod([acc[d, r] for d, r in enumerate(p)]))
    return total


@pytest.mark.parametrize("seed", range(5))
def test_growth_budget_depth_monotone_and_expected_length(seed):
    acc = random_table(seed)
    prev = set()
    for n in range(0, 40):
        t = SparseTree.grow(acc, n, max_depth=3)
        assert len(t) == n
        assert t.max_depth <= 3
        assert prev <= set(t.paths), "tree(N) must be a subset of tree(N + 1)"
        prev = set(t.paths)
        assert t.expected_length(acc) == pytest.approx(brute_expected_length(t, acc))
    assert SparseTree.grow(acc, 10, max_depth=1).max_depth == 1


def test_growth_picks_best_candidate_and_beats_alternatives():
    acc = np.array([[0.3, 0.25, 0.1], [0.9, 0.1, 0.0], [0.5, 0.1, 0.0]])
    t = SparseTree.grow(acc, 2)
    # after (0,) [0.3], candidates (0,0)=0.27 and (1,)=0.25: the best one is taken first
    assert t.paths == ((0,), (0, 0))
    # greedy equals the exhaustive optimum over all valid 3-node trees of this small table
    best = max(all_trees(3, 3, 3), key=lambda tr: tr.expected_length(acc))
    assert SparseTree.grow(acc, 3).expected_length(acc) == pytest.approx(best.expected_length(acc))


def all_trees(n, K, R):
    cand = [p for d in range(1, K + 1) for p in itertools.product(range(R), repeat=d)]
    for combo in itertools.combinations(cand, n):
        try:
            yield SparseTree(combo)
        except TreeError:
            continue


def test_expected_length_matches_monte_carlo():
    """1 + sum of node scores equals the mean accepted+1 of the longest accepted prefix when each depth
    accepts rank r independently with probability acc[d, r] (one rank per depth), tolerance 5 sigma."""
    acc = random_table(3, K=3, R=4)
    acc = acc / acc.sum(1, keepdims=True).clip(min=1.0)  # at most one accepted rank per depth
    tree = SparseTree.grow(acc, 10)
    rng = np.random.default_rng(0)
    n = 100_000
    paths = set(tree.paths)
    lens = np.ones(n)
    probs_full = np.concatenate([acc, 1 - acc.sum(1, keepdims=True)], 1)  # last column: no rank accepted
    draws = np.stack([rng.choice(acc.shape[1] + 1, size=n, p=probs_full[d]) for d in range(3)], 1)
    for i in range(n):
        p = ()
        for d in range(3):
            p = p + (int(draws[i, d]),)
            if p not in paths:
                break
            lens[i] += 1
    est, se = lens.mean(), lens.std() / n ** 0.5
    assert abs(est - tree.expected_length(acc)) < 5 * se


def test_json_roundtrip(tmp_path):
    t = random_tree(2, 16)
    assert SparseTree.from_json(t.to_json()) == t
    assert SparseTree.from_json('{"paths": [[0], [0, 0]]}') == SparseTree.chain(2)
    t.save(tmp_path / "t.json")
    assert SparseTree.load(tmp_path / "t.json") == t
    # input order does not matter: canonical order
    assert SparseTree([(1,), (0, 0), (0,)]).paths == ((0,), (1,), (0, 0))


@pytest.mark.parametrize("paths, msg", [
    ([(0,), (0, 0), (1, 0)], r"\[1, 0\] but not its prefix \[1\]"),
    ([(0,), (0,)], r"\[0\] twice"),
    ([(0,), (0, -1)], "negative rank -1"),
    ([()], "empty"),
    ([(0,), (0.5,)], "non-integer rank"),
    (["01"], "must be a list of ranks"),
])
def test_bad_paths(paths, msg):
    with pytest.raises(TreeError, match=msg):
        SparseTree(paths)


@pytest.mark.parametrize("text, msg", [
    ("[[0], [0, 0", "not valid JSON"),
    ('{"nodes": [[0]]}', "no key 'paths'"),
    ('"abc"', "expected a list of rank paths"),
    ('[[0], [2, 1]]', r"tree JSON holds \[2, 1\] but not its prefix \[2\]"),
    ('[[0], [true]]', "non-integer rank True"),
])
def test_bad_json(text, msg):
    with pytest.raises(TreeError, match=msg):
        SparseTree.from_json(text)


def test_bad_tables():
    with pytest.raises(TreeError, match="2-D"):
        SparseTree.grow(np.zeros(3), 4)
    with pytest.raises(TreeError, match=r"\[0, 1\]"):
        SparseTree.grow(np.full((3, 3), 1.5), 4)
    with pytest.raises(TreeError, match="too small"):
        tree_buffers([(0,), (0, 0)], np.ones((1, 1)) * 0.5)
