"""Whole-frame and whole-round graphs with sampling in the graph (issue 16): every backend gives the
same codes for the same noise, and the ONNX loops are distributionally lossless.

Backends: the eager torch modules (`FrameGraph`, `SpecRoundGraph`), their ONNX exports run by
onnxruntime, and torch.compile (Inductor, CPU). Float tolerance: the backends compute the same fp32
graph with different kernels, so logits may differ by float rounding (tests/test_export.py bounds
that at ONNX_TOL = 1e-4 absolute); codes are equal unless two perturbed scores lie within that
distance of each other, so the tests require exact equality of codes on every frame tried.
They are also checked against the eager decoders: the AR frame against `generate_frame` (greedy)
and the host AR loop (sampled), the round graph against `SpeculativeCodePredictor` with the same
generator (the decoders draw the same noise blocks in the same order).

Chi-square (same thresholds as tests/test_spec_decoder.py): N_FRAMES frames from one context,
joint of (c1, c2) against the exact AR joint, fail at p < 1e-6, a cell of exact probability 0
must never be observed. Negative control: the ONNX host loop with ``_control="fresh_token"``
(the code after the accepted chain drawn from the full p instead of the residual) must fail it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402
from test_spec_decoder import chi2, exact_joint_c1_c2  # noqa: E402

from rvqspec.core.drafters import PositionOffsets  # noqa: E402
from rvqspec.core.sampling import Sampling  # noqa: E402
from rvqspec.core.speculative import SpeculativeCodePredictor  # noqa: E402
from rvqspec.core.tree import SparseTree  # noqa: E402
from rvqspec.export.host import (ar_frame, graph_ar_frame, graph_spec_frame, module_call, spec_frame,  # noqa: E402
                                 torch_call)
from rvqspec.export.wrappers import ExportError, ar_graph, frame_graph, fused_graph, spec_round_graph  # noqa: E402

V = 16
TREES = {"wide": SparseTree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1)]),
         "chain": SparseTree.chain(3)}
SETTINGS = {"greedy": Sampling.greedy(), "deployed": Sampling(), "topk_topp": Sampling(temperature=0.7, top_k=4, top_p=0.9),
            "full": Sampling(temperature=1.2, top_k=0, top_p=1.0)}
N_FRAMES = 2000
P_FAIL = 1e-6


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world():
    cp = tiny_code_predictor(vocab=V, hidden=32, layers=2, seed=2, head_scale=3.0)
    drafter = randomize_drafter(PositionOffsets(3, 32, V), seed=3, scale=0.5)
    return cp, drafter


@pytest.fixture(scope="module")
def onnx_graphs(world, tmp_path_factory):
    from rvqspec.export.onnx import OnnxGraph, export_graph, export_module

    cp, drafter = world
    d = tmp_path_factory.mktemp("graphs")
    out = {"frame": frame_graph(cp)}
    export_module(out["frame"], d / "frame.onnx")
    out["onnx_frame"] = OnnxGraph(d / "frame.onnx")
    for name in ("wide", "chain"):
        g = spec_round_graph(cp, TREES[name], drafter)
        export_module(g, d / f"round_{name}.onnx")
        out[f"round_{name}"], out[f"onnx_round_{name}"] = g, OnnxGraph(d / f"round_{name}.onnx")
    f = fused_graph(cp, TREES["wide"], drafter)
    export_graph(f, d / "fused.onnx", "fused")
    out["fused"], out["onnx_fused"] = f, OnnxGraph(d / "fused.onnx")
    return out


def contexts(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, 1, 32, generator=g), int(torch.randint(0, V, (1,), generator=g))) for _ in range(n)]


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_frame_graph_same_codes_on_every_backend(world, onnx_graphs, setting):
    cp, _ = world
    s = SETTINGS[setting]
    fg = onnx_graphs["frame"]
    a = ar_graph(cp)
    for i, (th, c0) in enumerate(contexts(6, 1)):
        want = ar_frame(torch_call(a), a, cp, th, c0, s, torch.Generator().manual_seed(i))  # host AR loop
        eager = graph_ar_frame(module_call(fg), fg, th, c0, s, torch.Generator().manual_seed(i))
        onnx = graph_ar_frame(onnx_graphs["onnx_frame"], fg, th, c0, s, torch.Generator().manual_seed(i))
        assert eager == want and onnx == want, f"frame {i}: eager {eager} onnx {onnx} host loop {want}"
        if not s.do_sample:
            assert want == cp.generate_frame(th, torch.tensor([[c0]]), s)[0].tolist()
    # the noise really decides the codes: other noise, other frame (15 codes of a 16-symbol vocab)
    if s.do_sample:
        th, c0 = contexts(1, 2)[0]
        draws = {tuple(graph_ar_frame(module_call(fg), fg, th, c0, s, torch.Generator().manual_seed(k))) for k in range(4)}
        assert len(draws) > 1


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("tree", ["wide", "chain"])
def test_round_graph_same_codes_on_every_backend(world, onnx_graphs, tree, setting):
    cp, drafter = world
    s = SETTINGS[setting]
    rg, org = onnx_graphs[f"round_{tree}"], onnx_graphs[f"onnx_round_{tree}"]
    spec = SpeculativeCodePredictor(cp, drafter, TREES[tree])
    calls = []
    for i, (th, c0) in enumerate(contexts(6, 3)):
        want, st = spec.generate_frame(th, torch.tensor([[c0]]), s, torch.Generator().manual_seed(i))
        eager, n = graph_spec_frame(module_call(rg), rg, th, c0, s, torch.Generator().manual_seed(i))
        onnx, n2 = graph_spec_frame(org, rg, th, c0, s, torch.Generator().manual_seed(i))
        assert eager == want[0].tolist() and onnx == eager, f"frame {i}: {eager} / {onnx} / decoder {want.tolist()}"
        assert n == n2 == st.calls  # the graph's rounds are the decoder's calls (its round 0 is the prefill)
        calls.append(n)
    assert min(calls) < 15  # drafts were accepted: the test covers paths, compaction and bonus tokens


def test_graphs_take_a_c0_outside_the_residual_vocabulary(tmp_path):
    """Level 0 may have more codes than the residual levels (the mini world v6: 2,048 against 1,024).
    Both graphs embed such a c0 with the talker's table and give the decoders' codes; the round graph
    once matched round 0 against a point mass on c0 itself and returned count 0 for every c0 >= V."""
    from rvqspec.export.onnx import OnnxGraph, export_module

    cp = tiny_code_predictor(vocab=V, hidden=32, layers=2, seed=2, head_scale=3.0, c0_vocab=4 * V)
    drafter = randomize_drafter(PositionOffsets(3, 32, V), seed=3, scale=0.5)
    rg, fg = spec_round_graph(cp, TREES["wide"], drafter), frame_graph(cp)
    export_module(rg, tmp_path / "round.onnx")
    export_module(fg, tmp_path / "frame.onnx")
    org, ofg = OnnxGraph(tmp_path / "round.onnx"), OnnxGraph(tmp_path / "frame.onnx")
    spec, a, s = SpeculativeCodePredictor(cp, drafter, TREES["wide"]), ar_graph(cp), Sampling()
    g = torch.Generator().manual_seed(5)
    for i, c0 in enumerate([V, 2 * V + 3, 4 * V - 1, 1]):
        th = torch.randn(1, 1, 32, generator=g)
        want, _ = spec.generate_frame(th, torch.tensor([[c0]]), s, torch.Generator().manual_seed(i))
        eager, _ = graph_spec_frame(module_call(rg), rg, th, c0, s, torch.Generator().manual_seed(i))
        onnx, _ = graph_spec_frame(org, rg, th, c0, s, torch.Generator().manual_seed(i))
        assert eager == want[0].tolist() and onnx == eager, f"c0 {c0}: {eager} / {onnx} / decoder {want.tolist()}"
        host = ar_frame(torch_call(a), a, cp, th, c0, s, torch.Generator().manual_seed(i))
        assert graph_ar_frame(ofg, fg, th, c0, s, torch.Generator().manual_seed(i)) == host, f"c0 {c0}"
    # the c0 reaches the codes: another c0 (same hidden state, same noise), other greedy frames
    th = torch.randn(1, 1, 32, generator=g)
    greedy = {tuple(graph_spec_frame(org, rg, th, c0, Sampling.greedy())[0]) for c0 in (V, 2 * V, 3 * V, 4 * V - 1)}
    assert len(greedy) > 1


def test_host_loop_over_onnx_equals_round_graph(world, onnx_graphs):
    """The ONNX host loop (fused graph + `accept` on the host) and the whole-round ONNX graph
    (`accept` in the graph) draw the same noise and give the same codes."""
    s = Sampling(temperature=1.0, top_k=4)
    cp, _ = world
    for i, (th, c0) in enumerate(contexts(6, 4)):
        host = spec_frame(onnx_graphs["onnx_fused"], onnx_graphs["fused"], cp, th, c0, sampling=s,
                          generator=torch.Generator().manual_seed(i))
        graph = graph_spec_frame(onnx_graphs["onnx_round_wide"], onnx_graphs["round_wide"], th, c0, s,
                                 torch.Generator().manual_seed(i))
        assert host == graph


def test_compiled_graphs_equal_eager(world, onnx_graphs):
    """torch.compile (Inductor, CPU) of both graphs: same codes as the eager modules."""
    cp, _ = world
    s = Sampling(temperature=1.0, top_k=4, top_p=0.9)
    fg, rg = onnx_graphs["frame"], onnx_graphs["round_wide"]
    cf, cr = torch.compile(fg, fullgraph=True, dynamic=False), torch.compile(rg, fullgraph=True, dynamic=False)
    for i, (th, c0) in enumerate(contexts(3, 5)):
        assert (graph_ar_frame(module_call(fg, cf), fg, th, c0, s, torch.Generator().manual_seed(i))
                == graph_ar_frame(module_call(fg), fg, th, c0, s, torch.Generator().manual_seed(i)))
        assert (graph_spec_frame(module_call(rg, cr), rg, th, c0, s, torch.Generator().manual_seed(i))
                == graph_spec_frame(module_call(rg), rg, th, c0, s, torch.Generator().manual_seed(i)))


def sample_c1_c2(frame, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.tensor([frame(g)[:2] for _ in range(n)])


@pytest.mark.slow
def test_onnx_loops_are_lossless_and_the_control_fails(world, onnx_graphs):
    cp, _ = world
    s = Sampling(temperature=1.0, top_k=4, top_p=1.0)  # drafts outside the top-4 have p = 0
    th, c0 = torch.randn(1, 1, 32, generator=torch.Generator().manual_seed(5)), 7
    joint = exact_joint_c1_c2(cp, th, torch.tensor([[c0]]), s)
    f, of = onnx_graphs["fused"], onnx_graphs["onnx_fused"]
    rg, org = onnx_graphs["round_wide"], onnx_graphs["onnx_round_wide"]
    host = sample_c1_c2(lambda g: spec_frame(of, f, cp, th, c0, sampling=s, generator=g)[0], N_FRAMES, 1)
    pval, impossible = chi2(host, joint)
    assert impossible == 0 and pval >= P_FAIL, f"ONNX host loop: p = {pval:.3g}, impossible cells {impossible}"
    graph = sample_c1_c2(lambda g: graph_spec_frame(org, rg, th, c0, s, g)[0], N_FRAMES, 2)
    pval, impossible = chi2(graph, joint)
    assert impossible == 0 and pval >= P_FAIL, f"ONNX round graph: p = {pval:.3g}, impossible cells {impossible}"
    bad = sample_c1_c2(lambda g: spec_frame(of, f, cp, th, c0, sampling=s, generator=g, _control="fresh_token")[0],
                       N_FRAMES, 3)
    pval, impossible = chi2(bad, joint)
    assert pval < P_FAIL or impossible > 0, f"the wrong rule passed: p = {pval:.3g}"


def test_bad_inputs(world, onnx_graphs):
    cp, drafter = world
    fg, rg = onnx_graphs["frame"], onnx_graphs["round_wide"]
    th = torch.randn(1, 1, 32)
    with pytest.raises(ValueError, match=r"noise must have shape \(15, 16\), got \(14, 16\)"):
        graph_ar_frame(module_call(fg), fg, th, 1, noise=torch.zeros(14, V))
    with pytest.raises(ValueError, match="non-finite"):
        graph_ar_frame(module_call(fg), fg, th, 1, noise=torch.full((15, V), float("inf")))
    with pytest.raises(ValueError, match=r"noise must have shape \(1, 8, 16\)"):
        graph_spec_frame(module_call(rg), rg, th, 1, noises=[torch.zeros(8, V)])
    with pytest.raises(ExportError, match=r"talker_hidden must hold E=32"):
        graph_ar_frame(module_call(fg), fg, torch.zeros(1, 1, 31), 1)
    with pytest.raises(ExportError, match=r"node \(0,\)"):
        spec_round_graph(cp, SparseTree([(1,)]), drafter)
