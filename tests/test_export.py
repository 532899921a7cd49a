"""The static export graphs (rvqspec.export.wrappers) against the eager MultiCodeDecoder, the host
frame loops through them, and the ONNX export run by onnxruntime.

Thresholds: fp32 traced graph vs eager logits PSNR > PSNR_FP32 dB (measured ~140 dB: only float
rounding differs, e.g. LayerNorm-form RMSNorm) and identical argmax; ONNX vs torch max abs logit
difference < ONNX_TOL and identical argmax / draft tokens; greedy frames through the graphs equal
`generate_frame`'s greedy codes exactly.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402

from rvqspec.core.drafters import MedusaHeads, PositionOffsets, SharedLowRankOffsets  # noqa: E402
from rvqspec.export.host import ar_frame, spec_frame, torch_call  # noqa: E402
from rvqspec.export.wrappers import (HEAD_MODES, MASK_VALUE, ExportError, RoundGraph, ar_graph, fused_graph,  # noqa: E402
                                     offsets_from_drafter, padding_mask, psnr)
from rvqspec.core.sampling import Sampling  # noqa: E402
from rvqspec.core.tree import SparseTree  # noqa: E402

PSNR_FP32 = 60.0
ONNX_TOL = 1e-4
TREE = SparseTree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1)])  # depth 3, ranks 0..1


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cp():
    return tiny_code_predictor(vocab=64, hidden=64, layers=2, seed=0)


@pytest.fixture(scope="module")
def drafter(cp):
    return randomize_drafter(PositionOffsets(3, 64, 64), seed=1, scale=2.0)


@pytest.fixture(scope="module")
def lr_drafter(cp):
    """Drafter (v'): shared offsets plus a rank-2 map per lookahead, all non-zero."""
    return randomize_drafter(SharedLowRankOffsets(3, 64, 64, rank=2), seed=2, scale=2.0)


def eager(cp, graph: RoundGraph, inputs):
    """The eager MultiCodeDecoder on the same call: cache slots 0..S-1 = the given cache, the q
    queries written to slots S..S+q-1, -inf masks, heads cache_length - 1 + depth (clamped)."""
    emb, cl, kpm, kc, vc = inputs
    S, q = graph.S, graph.q
    b = graph.tree.buffers()
    cache = cp.new_cache(1, S + q)
    cache.k[:, 0, :, :S] = kc
    cache.v[:, 0, :, :S] = vc
    pad = torch.zeros(q, S).masked_fill(kpm.expand(q, S) < 0, float("-inf"))  # (q, S)
    tree = torch.zeros(q, q).masked_fill(~b.mask, float("-inf"))  # (q, q)
    mask = torch.cat([pad, tree], -1).view(1, 1, q, S + q)
    pos = (int(cl) + b.depth).view(1, q)
    heads = (int(cl) - 1 + b.depth).clamp(0, cp.config.num_code_groups - 2)
    with torch.no_grad():
        hidden, logits = cp(emb, pos, cache, torch.arange(S, S + q), mask, heads)
    return hidden, logits, cache.k[:, 0, :, S:], cache.v[:, 0, :, S:]


def traced(graph: RoundGraph):
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # Python ints baked as constants: intended
        return torch.jit.trace(graph, graph.example_inputs(1), check_trace=False)


@pytest.mark.parametrize("heads", HEAD_MODES)
@pytest.mark.parametrize("cache_length", [0, 1, 7, 15])
def test_ar_graph_matches_eager(cp, cache_length, heads):
    g = ar_graph(cp, heads=heads)
    x = g.example_inputs(cache_length, torch.Generator().manual_seed(cache_length))
    _, logits, k, v = eager(cp, g, x)
    with torch.no_grad():
        out = traced(g)(*x)
    assert [tuple(o.shape) for o in out] == [s for s, _ in g.spec("ar").outputs.values()]
    assert psnr(logits, out[0]) > PSNR_FP32
    assert torch.equal(logits.argmax(-1), out[0].argmax(-1))
    assert psnr(k, out[1]) > PSNR_FP32 and psnr(v, out[2]) > PSNR_FP32


@pytest.mark.parametrize("kind", ["drafter", "lr_drafter"])
@pytest.mark.parametrize("heads", HEAD_MODES)
@pytest.mark.parametrize("cache_length", [1, 6, 13])
def test_fused_graph_matches_eager_and_drafter(cp, request, kind, cache_length, heads):
    drafter = request.getfixturevalue(kind)
    g = fused_graph(cp, TREE, drafter, heads=heads)
    x = g.example_inputs(cache_length, torch.Generator().manual_seed(10 + cache_length))
    hidden, logits, k, v = eager(cp, g, x)
    with torch.no_grad():
        out = traced(g)(*x)
    assert psnr(logits, out[0]) > PSNR_FP32
    assert torch.equal(logits.argmax(-1), out[0].argmax(-1))
    assert psnr(k, out[1]) > PSNR_FP32 and psnr(v, out[2]) > PSNR_FP32
    # drafts: row r = next-round node tokens from the drafter at h_r, position p = cache_length + depth_r
    b = TREE.buffers()
    R = b.max_rank
    tok = (b.depth[1:] - 1) * R + b.rank[1:]
    checked = 0
    for r in range(g.q):
        p = cache_length + int(b.depth[r])
        if p > 15:
            continue
        with torch.no_grad():
            dl = drafter.draft_logits(cp, hidden[:, r:r + 1], p)[0]  # (K, V)
        want = dl.topk(R, -1).indices.flatten()[tok]  # (N,)
        valid = p + b.depth[1:] <= 15  # drafts past c15 are ignored by the host
        assert torch.equal(want[valid], out[3][0, r].long()[valid]), f"row {r}"
        checked += int(valid.sum())
    assert checked > 0


def test_fused_verifier_equals_ar_at_same_prefix(cp, drafter):
    """Node i's verifier logits in the fused call = the AR step's logits after its ancestors."""
    f, a = fused_graph(cp, TREE, drafter), ar_graph(cp)
    start = 4
    x = f.example_inputs(start, torch.Generator().manual_seed(3))
    emb, _, _, kc, vc = x
    with torch.no_grad():
        fused = f(*x)
        b = TREE.buffers()
        for i in range(f.q):
            chain = [j for j in range(f.q) if b.mask[i, j]]  # ancestors then i (canonical order)
            k, v = kc.clone(), vc.clone()
            for step, j in enumerate(chain):
                n = start + step
                out = a(emb[:, j:j + 1], torch.tensor([n], dtype=torch.int32), padding_mask(n, a.S), k, v)
                k[:, :, n:n + 1], v[:, :, n:n + 1] = out[1], out[2]
            assert psnr(out[0][0, 0], fused[0][0, i]) > PSNR_FP32, f"node {i}"
            assert int(out[0][0, 0].argmax()) == int(fused[0][0, i].argmax())


def test_mask_value_does_not_change_logits(cp, drafter):
    """-1e4 instead of -inf (fp16 safety): exp underflows to exactly 0, logits bit-identical."""
    g = fused_graph(cp, TREE, drafter)
    ginf = RoundGraph(cp, TREE, g.offsets, mask_value=float("-inf")).eval()
    x = g.example_inputs(5)
    xinf = list(x)
    xinf[2] = x[2].masked_fill(x[2] == MASK_VALUE, float("-inf"))
    with torch.no_grad():
        assert torch.equal(g(*x)[0], ginf(*xinf)[0])


def test_fp16_graph_keeps_argmax(cp, drafter):
    """The graph computed in fp16 (as Core ML does) keeps the fp32 argmax on this model."""
    import copy

    g = fused_graph(cp, TREE, drafter)
    h = fused_graph(copy.deepcopy(cp).half(), TREE, drafter)
    x = g.example_inputs(6)
    with torch.no_grad():
        ref = g(*x)[0]
        got = h(*[t if t.dtype == torch.int32 else t.half() for t in x])[0].float()
    assert psnr(ref, got) > 40.0
    assert torch.equal(ref.argmax(-1), got.argmax(-1))


@pytest.mark.parametrize("heads", HEAD_MODES)
def test_trace_is_static(cp, heads):
    """No shape reads in the traced graph (an int op Core ML cannot convert, environment notes)."""
    g = fused_graph(cp, TREE, heads=heads)
    with torch.no_grad():
        graph = str(traced(g).inlined_graph)
    assert "aten::size" not in graph and "aten::Int" not in graph


def test_export_errors(cp):
    with pytest.raises(ExportError, match="non-empty tree"):
        fused_graph(cp, SparseTree([]))
    with pytest.raises(ExportError, match="only offsets and shared_low_rank drafters"):
        offsets_from_drafter(MedusaHeads(3, 64, 64), cp, 2)
    with pytest.raises(ExportError, match="low-rank maps must have shapes"):
        RoundGraph(cp, TREE, torch.zeros(3, 64), low_rank=(torch.zeros(3, 64, 2), torch.zeros(3, 3, 64)))
    with pytest.raises(ExportError, match="AR step"):
        RoundGraph(cp, None, None, low_rank=(torch.zeros(0, 64, 2), torch.zeros(0, 2, 64)))
    with pytest.raises(ExportError, match="exceeds the drafter's K=2"):
        fused_graph(cp, TREE, PositionOffsets(2, 64, 64))
    with pytest.raises(ExportError, match="cache_length must be in 0..16"):
        ar_graph(cp).example_inputs(17)
    with pytest.raises(ExportError, match="heads must be one of"):
        ar_graph(cp, heads="some")


@pytest.mark.parametrize("heads", HEAD_MODES)
def test_host_frames_equal_generate_frame(heads):
    """Greedy frames through the AR graph and through the fused graph (round 0 from the talker
    hidden, compaction by committing the accepted path) equal generate_frame's greedy codes. A
    4-token vocabulary makes drafts accepted often, including paths through rank-1 nodes."""
    cp = tiny_code_predictor(vocab=4, hidden=32, layers=2, seed=2, head_scale=10.0)
    drafter = randomize_drafter(PositionOffsets(3, 32, 4), seed=3, scale=0.5)
    a, f = ar_graph(cp, heads=heads), fused_graph(cp, TREE, drafter, heads=heads)
    g = torch.Generator().manual_seed(0)
    calls, paths = [], []
    for _ in range(12):
        th = torch.randn(1, 1, 32, generator=g)
        c0 = int(torch.randint(0, 4, (1,), generator=g))
        want = cp.generate_frame(th, torch.tensor([[c0]]), Sampling(do_sample=False))[0].tolist()
        assert ar_frame(torch_call(a), a, cp, th, c0) == want
        got, n = spec_frame(torch_call(f), f, cp, th, c0, paths)
        assert got == want
        calls.append(n)
    ranks = TREE.buffers().rank.tolist()
    assert max(len(p) for p in paths) >= 2                     # multi-node accepted paths
    assert any(ranks[i] >= 1 for p in paths for i in p)        # paths off the top-1 chain (compaction)
    assert np.mean(calls) < 15                                 # fewer calls than AR (16)


# --------------------------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def onnx_export(cp, drafter, tmp_path_factory):
    from rvqspec.export.onnx import export_onnx

    return export_onnx(cp, TREE, tmp_path_factory.mktemp("onnx") / "out", drafter=drafter)


def test_onnx_matches_torch(cp, drafter, onnx_export):
    from rvqspec.export.onnx import OnnxGraph

    for name, g, path in (("ar", ar_graph(cp), onnx_export.ar), ("fused", fused_graph(cp, TREE, drafter),
                                                                onnx_export.fused)):
        for cl in (1, 9):
            x = g.example_inputs(cl, torch.Generator().manual_seed(cl))
            feeds = {k: v.numpy() for k, v in zip(g.spec(name).inputs, x)}
            ref, got = torch_call(g)(feeds), OnnxGraph(path)(feeds)
            assert set(got) == set(g.spec(name).outputs)
            assert np.abs(ref["logits"] - got["logits"]).max() < ONNX_TOL
            assert (ref["logits"].argmax(-1) == got["logits"].argmax(-1)).all()
            assert np.abs(ref["key_update"] - got["key_update"]).max() < ONNX_TOL
            if name == "fused":
                assert got["draft_tokens"].dtype == np.int32
                assert (ref["draft_tokens"] == got["draft_tokens"]).all()


def test_onnx_low_rank_drafter_matches_torch(cp, lr_drafter, tmp_path):
    """Drafter (v') through ONNX: its rank-2 maps are baked, and the draft tokens match torch."""
    from rvqspec.export.onnx import OnnxGraph, export_onnx

    res = export_onnx(cp, TREE, tmp_path / "lr", drafter=lr_drafter)
    g = fused_graph(cp, TREE, lr_drafter)
    for cl in (2, 8):
        x = g.example_inputs(cl, torch.Generator().manual_seed(20 + cl))
        feeds = {k: v.numpy() for k, v in zip(g.spec("fused").inputs, x)}
        ref, got = torch_call(g)(feeds), OnnxGraph(res.fused)(feeds)
        assert np.abs(ref["logits"] - got["logits"]).max() < ONNX_TOL
        assert (ref["draft_tokens"] == got["draft_tokens"]).all()


def test_onnx_frames_and_manifest(cp, drafter, onnx_export):
    from rvqspec.export.onnx import OnnxGraph

    man = json.loads((onnx_export.out_dir / "manifest.json").read_text())
    assert man["tree"] == [list(p) for p in TREE.paths] and man["cache_len"] == 16
    assert man["graphs"]["fused"]["outputs"]["draft_tokens"]["shape"] == [1, len(TREE) + 1, len(TREE)]
    a, f = ar_graph(cp), fused_graph(cp, TREE, drafter)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        th, c0 = torch.randn(1, 1, 64, generator=g), int(torch.randint(0, 64, (1,), generator=g))
        want = cp.generate_frame(th, torch.tensor([[c0]]), Sampling(do_sample=False))[0].tolist()
        assert ar_frame(OnnxGraph(onnx_export.ar), a, cp, th, c0) == want
        assert spec_frame(OnnxGraph(onnx_export.fused), f, cp, th, c0)[0] == want


def test_onnx_export_is_atomic(cp, tmp_path, monkeypatch):
    import rvqspec.export.onnx as ox

    out = tmp_path / "exp"
    ox.export_onnx(cp, SparseTree([(0,)]), out)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ExportError, match="not empty"):
        ox.export_onnx(cp, SparseTree([(0,)]), out)

    def boom(graph, path, name, dynamo=False):
        raise RuntimeError("simulated exporter failure")

    monkeypatch.setattr(ox, "export_graph", boom)
    with pytest.raises(RuntimeError, match="simulated"):
        ox.export_onnx(cp, SparseTree([(0,)]), out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == before          # old export untouched
    assert [p.name for p in tmp_path.iterdir()] == ["exp"]           # no temporary leftovers


@pytest.mark.parametrize("heads", HEAD_MODES)
@pytest.mark.parametrize("kind", [PositionOffsets, SharedLowRankOffsets])
def test_spec_frame_matches_speculative_code_predictor(kind, heads):
    """The exported round protocol and rvqspec.core.speculative's eager decoder agree round by round: same
    greedy codes and the same number of calls per frame (same accepted lengths)."""
    from rvqspec.core.speculative import SpeculativeCodePredictor

    cp = tiny_code_predictor(vocab=4, hidden=32, layers=2, seed=4, head_scale=10.0)
    drafter = randomize_drafter(kind(3, 32, 4), seed=5, scale=0.5)
    f = fused_graph(cp, TREE, drafter, heads=heads)
    spec = SpeculativeCodePredictor(cp, drafter, TREE)
    g = torch.Generator().manual_seed(1)
    for _ in range(8):
        th, c0 = torch.randn(1, 1, 32, generator=g), int(torch.randint(0, 4, (1,), generator=g))
        codes, stats = spec.generate_frame(th, torch.tensor([[c0]]), Sampling(do_sample=False))
        got, calls = spec_frame(torch_call(f), f, cp, th, c0)
        assert got == codes[0].tolist() and calls == stats.calls


def test_export_cli_errors(tmp_path):
    from typer.testing import CliRunner

    from rvqspec.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["export", "onnx", "--tree", str(tmp_path / "none.json"), "--out-dir", str(tmp_path / "o")])
    assert res.exit_code == 2 and "no such tree file" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("[[0], [1, 0, 0]]")
    res = runner.invoke(app, ["export", "coreml", "--tree", str(bad), "--out-dir", str(tmp_path / "o")])
    assert res.exit_code == 2 and "prefix" in res.output
    assert not (tmp_path / "o").exists()
