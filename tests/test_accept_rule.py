"""One acceptance rule (issue 16): `rvqspec.core.verify.accept` is the function every decoding path
runs (eager decoder, compiled decoder, export host loop, whole-round graph), its tensor-form warper
equals the eager one bit for bit, and bad noise is refused with one clear message.

The distributional checks of the rule itself are in tests/test_verify_stats.py (chi-square against
exact enumeration, with negative controls); tests/test_graphs.py runs them on the ONNX host loop.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402

import rvqspec.core.speculative as speculative  # noqa: E402
import rvqspec.core.verify as verify  # noqa: E402
import rvqspec.export.host as host  # noqa: E402
from rvqspec.core.drafters import PositionOffsets  # noqa: E402
from rvqspec.core.sampling import Sampling, sampling_tensors, warp_logits, warp_tensor  # noqa: E402
from rvqspec.core.tree import SparseTree  # noqa: E402
from rvqspec.export.wrappers import fused_graph, spec_round_graph  # noqa: E402

TREE = SparseTree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1)])
SETTINGS = [Sampling(), Sampling(temperature=1.0, top_k=0, top_p=1.0), Sampling(temperature=0.7, top_k=4, top_p=0.9),
            Sampling(temperature=1.3, top_k=5000, top_p=0.5), Sampling(temperature=0.9, top_k=1, top_p=0.95)]


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world():
    cp = tiny_code_predictor(vocab=4, hidden=32, layers=2, seed=2, head_scale=10.0)
    drafter = randomize_drafter(PositionOffsets(3, 32, 4), seed=3, scale=0.5)
    return cp, drafter


def counting(monkeypatch, module):
    """Wrap `module.accept` (the name the module calls) so that each call is counted; the wrapper
    calls the one rule, so the decoding result is unchanged."""
    calls = []
    assert module.accept is verify.accept  # the module's name is THE rule, not a copy

    def wrapped(*a, **k):
        calls.append(1)
        return verify.accept(*a, **k)

    monkeypatch.setattr(module, "accept", wrapped)
    return calls


def test_every_path_imports_the_one_rule():
    import rvqspec.export.wrappers as wrappers

    assert speculative.accept is verify.accept
    assert host.accept is verify.accept
    assert wrappers.accept is verify.accept  # the whole-round graph's forward
    # the inline copies are gone: no other module recomputes "token equals its parent's sample"
    root = Path(verify.__file__).parents[1]
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "verify.py" and ("y[pl.parent]" in p.read_text() or "y[:, parent]" in p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("sampling", [Sampling.greedy(), Sampling(temperature=1.0, top_k=3)])
def test_each_path_calls_the_rule(monkeypatch, world, sampling):
    cp, drafter = world
    th, c0 = torch.randn(1, 1, 32, generator=torch.Generator().manual_seed(4)), 1
    calls = counting(monkeypatch, speculative)
    _, st = speculative.SpeculativeCodePredictor(cp, drafter, TREE).generate_frame(
        th, torch.tensor([[c0]]), sampling, torch.Generator().manual_seed(0))
    assert len(calls) == len(st.accepted_lengths) >= 1  # one rule call per verify round
    calls = counting(monkeypatch, host)
    f = fused_graph(cp, TREE, drafter)
    _, n = host.spec_frame(host.torch_call(f), f, cp, th, c0, sampling=sampling, generator=torch.Generator())
    assert len(calls) == n - 1  # every round after round 0
    # the whole-round graph calls verify.accept inside its forward
    import rvqspec.export.wrappers as wrappers

    calls = counting(monkeypatch, wrappers)
    rg = spec_round_graph(cp, TREE, drafter)
    _, n = host.graph_spec_frame(host.module_call(rg), rg, th, c0, sampling, torch.Generator())
    assert len(calls) == n


def test_compiled_decoder_runs_the_same_rule(monkeypatch, world):
    """`SpeculativeCodePredictor(compile=...)` (the compiled path) keeps the rule in the same frame
    loop; only the decoder stack is compiled. Needs Inductor's C++ toolchain."""
    from rvqspec.core.compiled import CompileConfig

    cp, drafter = world
    th = torch.randn(1, 1, 32, generator=torch.Generator().manual_seed(8))
    calls = counting(monkeypatch, speculative)
    spec = speculative.SpeculativeCodePredictor(cp, drafter, TREE, compile=CompileConfig(max_autotune=False))
    s = Sampling(temperature=1.0, top_k=3)
    got, st = spec.generate_frame(th, torch.tensor([[2]]), s, torch.Generator().manual_seed(3))
    assert len(calls) == len(st.accepted_lengths)
    want, _ = speculative.SpeculativeCodePredictor(cp, drafter, TREE).generate_frame(
        th, torch.tensor([[2]]), s, torch.Generator().manual_seed(3))
    assert torch.equal(got, want)  # same noise -> same codes (fp32 kernels differ only by rounding)


@pytest.mark.parametrize("sampling", SETTINGS)
def test_warp_tensor_equals_warp_logits(sampling):
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        x = torch.randn(6, 2048, generator=g) * 3
        x[0, :7] = x[0, 7]  # ties at the top
        x[1, 100:140] = x[1, 3]  # ties around the k-th value
        assert torch.equal(warp_tensor(x, *sampling_tensors(sampling)), warp_logits(x, sampling))


def test_warp_tensor_greedy_is_argmax():
    x = torch.randn(9, 300, generator=torch.Generator().manual_seed(2))
    x[0, :3] = x[0].max() + 1  # a tie for the maximum: the first index wins, as argmax
    s = warp_tensor(x, *sampling_tensors(Sampling.greedy()))
    assert torch.equal(verify.gumbel_max(s, torch.zeros_like(s)), x.argmax(-1))


def test_accept_greedy_chain_and_strictness():
    """Zero noise: accept exactly the chain whose tokens equal the argmax at their parents; a
    draft outside the support (score -inf) is never accepted even with extreme noise."""
    b = TREE.buffers()
    t = verify.AcceptTables.of(b)
    V, q = 5, b.q
    scores = torch.full((1, q, V), -5.0)
    tokens = torch.zeros(1, q, dtype=torch.long)
    # root argmax 3; node 1 = (0,) carries 3; its argmax 4; node (0,0) carries 4; node (0,0,0) carries 1 != argmax
    kids = {p: i for i, p in enumerate(TREE.paths, start=1)}
    scores[0, 0, 3] = 1.0
    tokens[0, kids[(0,)]] = 3
    scores[0, kids[(0,)], 4] = 1.0
    tokens[0, kids[(0, 0)]] = 4
    scores[0, kids[(0, 0)], 2] = 1.0
    tokens[0, kids[(0, 0, 0)]] = 1
    tokens[0, kids[(0, 0, 1)]] = 2
    valid = torch.ones(q, dtype=torch.bool)
    y, ok, last, token = verify.accept(scores, torch.zeros(1, q, V), tokens, valid, t.parent, t.strict_anc, t.depth,
                                       t.sibling_before)
    assert int(last) == kids[(0, 0, 1)] and ok[0].nonzero().flatten().tolist() == [0, kids[(0,)], kids[(0, 0)],
                                                                                   kids[(0, 0, 1)]]
    assert int(token) == int(y[0, kids[(0, 0, 1)]])
    # -inf at the parent for the drafted token: never accepted, whatever the (finite) noise
    scores[0, kids[(0, 0)], 2] = float("-inf")
    big = torch.zeros(1, q, V)
    big[0, kids[(0, 0)], 2] = 600.0
    _, ok, last, _ = verify.accept(scores, big, tokens, valid, t.parent, t.strict_anc, t.depth, t.sibling_before)
    assert int(last) == kids[(0, 0)]
    # an invalid node (past c15) is never accepted
    valid[kids[(0, 0)]] = False
    _, ok, last, _ = verify.accept(scores, torch.zeros(1, q, V), tokens, valid, t.parent, t.strict_anc, t.depth,
                                   t.sibling_before)
    assert int(last) == kids[(0,)]


def test_gumbel_noise_is_finite_and_seeded():
    a = verify.gumbel_noise((4, 1000), torch.Generator().manual_seed(5))
    b = verify.gumbel_noise((4, 1000), torch.Generator().manual_seed(5))
    assert a.dtype == torch.float32 and torch.isfinite(a).all() and torch.equal(a, b)
    assert abs(float(a.mean()) - 0.5772) < 0.05  # Euler-Mascheroni: the Gumbel mean (sd/sqrt(4000) = 0.02)


def test_bad_noise_errors():
    b = TREE.buffers()
    p = torch.full((2, b.q, 6), 1 / 6)
    tok = torch.zeros(2, b.q, dtype=torch.long)
    with pytest.raises(ValueError, match=r"noise must have shape \(2, 8, 6\), got \(2, 8, 5\)"):
        verify.verify_sampled(p, tok, b, noise=torch.zeros(2, b.q, 5))
    bad = torch.zeros(2, b.q, 6)
    bad[1, 3, 2] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        verify.verify_sampled(p, tok, b, noise=bad)
    with pytest.raises(ValueError, match="float tensor"):
        verify.check_noise(torch.zeros(2, 3, dtype=torch.long), (2, 3))
