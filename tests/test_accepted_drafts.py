"""Drafts of the accepted node in graph form (`rvqspec.export.drafts`): every drafter of seed 000
Table 2 gets the eager drafter's logits at every start position, both head modes; the whole-round
graph with each drafter (torch and onnxruntime) gives `SpeculativeCodePredictor`'s codes for the
same generator; Medusa runs in the whole-frame ONNX loop. Negative controls: the drafts read at a
neighbouring position differ from the eager drafter's, and drafters with no graph form are refused.

Tolerance: the graph computes the eager drafter's fp32 arithmetic in another order (gathered
matmuls, constant logits LMH(b) under heads="all"), so logits agree to 1e-4; codes must be equal."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from rvqspec.core.drafters import PositionOffsets, make_drafter
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.core.verify import gumbel_noise
from rvqspec.export.drafts import AcceptedDrafts, DraftExportError
from rvqspec.export.host import graph_spec_frame, module_call
from rvqspec.export.wrappers import ExportError, spec_round_graph

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402

V, H, D = 16, 32, 3
KINDS = ("reused", "offsets", "per_position", "low_rank", "shared_low_rank", "medusa")
TREE = SparseTree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
TOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cp():
    return tiny_code_predictor(vocab=V, hidden=H, layers=2, seed=2, head_scale=3.0)


def drafter_of(kind, cp, seed=5):
    d = make_drafter(kind, cp, num_offsets=D)
    return d if kind == "reused" else randomize_drafter(d, seed=seed, scale=2.0)  # reused: zero offsets


def head_stack(cp):
    return torch.stack([m.weight.detach() for m in cp.lm_head])  # (15, V, H)


def eager_drafts(drafter, cp, h, p):
    """(D, V) the eager drafter's logits for c_{p+1..p+D} from h (1, H) at position p."""
    return drafter.draft_logits(cp, h.view(1, 1, H), p)[0]


@torch.no_grad()
@pytest.mark.parametrize("heads", ["window", "all"])
@pytest.mark.parametrize("kind", KINDS)
def test_accepted_drafts_equal_the_eager_drafter_at_every_position(cp, kind, heads):
    drafter = drafter_of(kind, cp)
    mod = AcceptedDrafts(drafter, head_stack(cp), D, heads).eval()
    g = torch.Generator().manual_seed(0)
    worst, shifted = 0.0, 0
    for p in range(1, 16):
        h = torch.randn(1, H, generator=g)
        all_row = torch.stack([m(h)[0] for m in cp.lm_head])  # (15, V) what the round graph passes
        got = mod(h, all_row, torch.tensor([p - 1]))  # (D, V)
        want = eager_drafts(drafter, cp, h, p)
        valid = [j - 1 for j in range(1, D + 1) if p + j <= 15]
        if valid:
            worst = max(worst, float((got[valid] - want[valid]).abs().max()))
        # negative control: the drafts read at the neighbouring position's parameters and heads
        if p <= 12 and kind in ("per_position", "low_rank", "medusa"):
            other = mod(h, all_row, torch.tensor([p]))
            shifted += float((other[0] - want[0]).abs().max()) > 1e-2
    assert worst < TOL, f"{kind}/{heads}: max |graph - eager| = {worst:.2e}"
    if kind in ("per_position", "low_rank", "medusa"):
        assert shifted == 12  # position-dependent: another position's parameters draft differently


@torch.no_grad()
def test_no_drafter_is_the_reused_heads(cp):
    """drafter None bakes the reused LM heads (drafter (i)): the zero-offset drafter's drafts."""
    a = AcceptedDrafts(None, head_stack(cp), D, "window")
    b = AcceptedDrafts(make_drafter("reused", cp, num_offsets=D), head_stack(cp), D, "window")
    h = torch.randn(1, H, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a(h, None, torch.tensor([5])), b(h, None, torch.tensor([5])))


@torch.no_grad()
def test_shared_drafters_still_depend_on_the_head(cp):
    """Control for the shared-offset drafters: reading lookahead 1 through the next position's head
    changes the logits, so the position check above is not vacuous for them."""
    drafter = drafter_of("offsets", cp)
    mod = AcceptedDrafts(drafter, head_stack(cp), D, "window").eval()
    h = torch.randn(1, H, generator=torch.Generator().manual_seed(1))
    a, b = mod(h, None, torch.tensor([3])), mod(h, None, torch.tensor([4]))
    assert float((a[0] - b[0]).abs().max()) > 1e-2


@pytest.mark.parametrize("heads", ["window", "all"])
@pytest.mark.parametrize("kind", KINDS)
def test_round_graph_with_every_drafter_gives_the_decoders_codes(cp, kind, heads):
    drafter = drafter_of(kind, cp)
    rg = spec_round_graph(cp, TREE, drafter, heads=heads)
    spec = SpeculativeCodePredictor(cp, drafter, TREE)
    s = Sampling(temperature=0.9, top_k=6)
    g = torch.Generator().manual_seed(3)
    calls = []
    for i in range(6):
        th, c0 = torch.randn(1, 1, H, generator=g), int(torch.randint(0, V, (1,), generator=g))
        want, st = spec.generate_frame(th, torch.tensor([[c0]]), s, torch.Generator().manual_seed(i))
        got, n = graph_spec_frame(module_call(rg), rg, th, c0, s, torch.Generator().manual_seed(i))
        assert got == want[0].tolist(), f"frame {i}: graph {got} decoder {want[0].tolist()}"
        assert n == st.calls
        calls.append(n)
    assert min(calls) < 15  # drafts were accepted, so the drafts decided which paths were verified


def test_medusa_onnx_round_and_loop_equal_the_decoder(cp, tmp_path):
    from rvqspec.export.onnx import OnnxGraph, export_module
    from rvqspec.export.spec_frame import SpecFrameInner, export_spec_frame

    drafter = drafter_of("medusa", cp)
    rg = spec_round_graph(cp, TREE, drafter, heads="all")
    export_module(rg, tmp_path / "round.onnx")
    rounds = OnnxGraph(tmp_path / "round.onnx")
    loop = SpecFrameInner(rg, export_spec_frame(rg, tmp_path / "frame.onnx"))
    spec = SpeculativeCodePredictor(cp, drafter, TREE)
    s = Sampling(temperature=0.9, top_k=6)
    g = torch.Generator().manual_seed(4)
    for i in range(6):
        th, c0 = torch.randn(1, 1, H, generator=g), int(torch.randint(0, V, (1,), generator=g))
        want, _ = spec.generate_frame(th, torch.tensor([[c0]]), s, torch.Generator().manual_seed(i))
        got, _ = graph_spec_frame(rounds, rg, th, c0, s, torch.Generator().manual_seed(i))
        assert got == want[0].tolist()
        noise = gumbel_noise((15, 1, rg.q, rg.V), torch.Generator().manual_seed(100 + i))
        codes, accepted = loop.frame(th, c0, s, noise=noise)
        ref_acc: list[int] = []
        ref, _ = graph_spec_frame(rounds, rg, th, c0, s, noises=[noise[k] for k in range(15)], accepted=ref_acc)
        assert codes == ref and accepted == ref_acc


def test_drafts_refuse_what_they_cannot_bake(cp):
    with pytest.raises(DraftExportError, match="tree depth 3 exceeds"):
        AcceptedDrafts(make_drafter("medusa", cp, num_offsets=2), head_stack(cp), 3)
    with pytest.raises(DraftExportError, match="hidden_size=64"):
        AcceptedDrafts(PositionOffsets(3, 64, V), head_stack(cp), 3)
    with pytest.raises(ExportError, match="no graph form"):
        spec_round_graph(cp, TREE, torch.nn.Linear(2, 2))
