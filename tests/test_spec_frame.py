"""The whole speculative frame in one onnxruntime call (`rvqspec.export.spec_frame`): the ONNX Loop
over the round graph returns, for the same per-round noise, the round-by-round host loop's codes
and acceptance, greedy and sampled, on several trees; its (c1, c2) follow the exact AR law
(chi-square, with a control that must fail); bad noise is refused; the `onnx-loop` backend's stats."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rvqspec.core.drafters import PositionOffsets
from rvqspec.core.sampling import Sampling
from rvqspec.core.tree import SparseTree
from rvqspec.core.verify import gumbel_noise
from rvqspec.export.backends import make_inner
from rvqspec.export.host import graph_spec_frame
from rvqspec.export.onnx import OnnxGraph, export_module
from rvqspec.export.spec_frame import SpecFrameInner, export_spec_frame
from rvqspec.export.wrappers import ExportError, spec_round_graph

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402
from test_graphs import N_FRAMES, P_FAIL, sample_c1_c2  # noqa: E402
from test_graphs import TREES as GRAPH_TREES  # noqa: E402
from test_spec_decoder import chi2, exact_joint_c1_c2  # noqa: E402

TREES = {"chain": [(0,), (0, 0), (0, 0, 0)],
         "wide": [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]}


def _offsets(cp, seed=0):
    d = PositionOffsets.zeros(num_offsets=3, hidden_size=cp.config.hidden_size)
    with torch.no_grad():
        d.offsets.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    return d


@pytest.mark.parametrize("tree_name", sorted(TREES))
@pytest.mark.parametrize("sampling", [Sampling.greedy(), Sampling(temperature=0.9, top_k=8),
                                      Sampling(temperature=1.2, top_k=0, top_p=0.8)], ids=["greedy", "topk", "topp"])
def test_loop_frame_equals_the_round_by_round_frame(tree_name, sampling, tmp_path):
    cp = tiny_code_predictor()
    tree, drafter = SparseTree(TREES[tree_name]), _offsets(cp)
    graph = spec_round_graph(cp, tree, drafter)
    loop = SpecFrameInner(graph, export_spec_frame(graph, tmp_path / "frame.onnx"))
    export_module(graph, tmp_path / "round.onnx")
    rounds = OnnxGraph(tmp_path / "round.onnx")
    E = cp.config.talker_hidden_size
    agree, multi = 0, 0
    for i in range(12):
        g = torch.Generator().manual_seed(i)
        h = torch.randn(1, 1, E, generator=g)
        c0 = int(torch.randint(0, cp.config.vocab_size, (1,), generator=g))
        noise = (gumbel_noise((15, 1, graph.q, graph.V), g) if sampling.do_sample
                 else torch.zeros(15, 1, graph.q, graph.V))
        codes, accepted = loop.frame(h, c0, sampling, noise=noise)
        acc_ref: list[int] = []
        ref, calls = graph_spec_frame(rounds, graph, h, c0, sampling, noises=[noise[k] for k in range(15)],
                                      accepted=acc_ref)
        assert len(codes) == 15 and all(0 <= c < graph.V for c in codes)
        agree += codes == ref and accepted == acc_ref and calls == len(accepted) + 1
        multi += any(a > 0 for a in accepted)
    assert agree == 12
    if not sampling.do_sample or tree_name == "chain":
        return
    assert multi > 0  # some rounds accepted drafts, so the loop's multi-code scatter was exercised


def test_loop_frame_negative_control_other_noise_rows_differ(tmp_path):
    """Feeding the rounds in another order must change the codes: equality above is not vacuous."""
    cp = tiny_code_predictor()
    tree = SparseTree(TREES["wide"])
    graph = spec_round_graph(cp, tree, _offsets(cp))
    loop = SpecFrameInner(graph, export_spec_frame(graph, tmp_path / "frame.onnx"))
    s = Sampling(temperature=1.5, top_k=0)
    differ = 0
    for i in range(6):
        g = torch.Generator().manual_seed(100 + i)
        h = torch.randn(1, 1, cp.config.talker_hidden_size, generator=g)
        noise = gumbel_noise((15, 1, graph.q, graph.V), g)
        a, _ = loop.frame(h, 3, s, noise=noise)
        b, _ = loop.frame(h, 3, s, noise=noise.flip(0))
        differ += a != b
    assert differ >= 5


def test_loop_frame_refuses_bad_noise(tmp_path):
    cp = tiny_code_predictor()
    graph = spec_round_graph(cp, SparseTree(TREES["chain"]), _offsets(cp))
    loop = SpecFrameInner(graph, export_spec_frame(graph, tmp_path / "frame.onnx"))
    h = torch.zeros(1, 1, cp.config.talker_hidden_size)
    with pytest.raises((ValueError, ExportError), match="noise"):
        loop.frame(h, 0, Sampling(), noise=torch.zeros(3, 1, graph.q, graph.V))
    with pytest.raises(ValueError, match="talker_hidden"):
        loop.generate_frame(torch.zeros(1, cp.config.talker_hidden_size), torch.zeros(1, 1, dtype=torch.long))


def test_onnx_loop_backend_reports_rounds(tmp_path):
    cp = tiny_code_predictor()
    tree, drafter = SparseTree(TREES["wide"]), _offsets(cp)
    inner = make_inner("onnx-loop", cp, drafter, tree, workdir=tmp_path)
    assert isinstance(inner, SpecFrameInner) and (tmp_path / "code_predictor_spec_frame.onnx").is_file()
    assert not list(tmp_path.glob("*.partial"))
    h = torch.randn(2, 1, cp.config.talker_hidden_size, generator=torch.Generator().manual_seed(0))
    codes, stats = inner.generate_frame(h, torch.tensor([[1], [2]]), Sampling(), torch.Generator().manual_seed(1))
    assert codes.shape == (2, 15) and stats.frames == 2
    assert 2 * 15 / 4 <= stats.calls <= 2 * 15 and len(stats.accepted_lengths) == stats.calls - 2
    assert len(inner.call.times) == 2  # one graph call per frame
    assert np.all(np.asarray(stats.accepted_lengths) >= 0)


@pytest.mark.slow
def test_loop_frame_is_lossless_and_the_control_fails(tmp_path):
    """Chi-square of (c1, c2) from the loop graph against the exact AR law (the test_graphs setting:
    top-k 4, so drafts outside it have p = 0); the control gives every round after round 0 zero
    noise (greedy there), which must fail."""
    torch.set_num_threads(1)
    cp = tiny_code_predictor(vocab=16, hidden=32, layers=2, seed=2, head_scale=3.0)
    drafter = randomize_drafter(PositionOffsets(3, 32, 16), seed=3, scale=0.5)
    graph = spec_round_graph(cp, GRAPH_TREES["wide"], drafter)
    loop = SpecFrameInner(graph, export_spec_frame(graph, tmp_path / "frame.onnx"))
    s = Sampling(temperature=1.0, top_k=4, top_p=1.0)
    th, c0 = torch.randn(1, 1, 32, generator=torch.Generator().manual_seed(5)), 7
    joint = exact_joint_c1_c2(cp, th, torch.tensor([[c0]]), s)
    shape = (15, 1, graph.q, graph.V)
    codes = sample_c1_c2(lambda g: loop.frame(th, c0, s, noise=gumbel_noise(shape, g))[0], N_FRAMES, 4)
    pval, impossible = chi2(codes, joint)
    assert impossible == 0 and pval >= P_FAIL, f"loop graph: p = {pval:.3g}, impossible cells {impossible}"

    def first_round_only(g):
        noise = gumbel_noise(shape, g)
        noise[1:] = 0.0
        return loop.frame(th, c0, s, noise=noise)[0]

    pval, impossible = chi2(sample_c1_c2(first_round_only, N_FRAMES, 5), joint)
    assert pval < P_FAIL or impossible > 0, f"the control passed: p = {pval:.3g}"
