"""Core ML export (rvqspec.export.coreml): package structure on any platform, predictions on macOS.

On Linux there is no Core ML runtime: these tests check what can be checked (input/output names,
shapes, dtypes in the spec; quantized-weight ops in the ML program; save and reload; W8A16 size
against fp16). The numerics of the traced module are tests/test_export.py. Prediction tests run on
macOS only and are skipped elsewhere with the reason.
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

ct = pytest.importorskip("coremltools")

from rvqspec.core.drafters import PositionOffsets  # noqa: E402
from rvqspec.export.coreml import (QUANT_OPS, export_coreml, package_bytes, package_io,  # noqa: E402
                                   package_ops)
from rvqspec.export.wrappers import ar_graph, fused_graph, psnr  # noqa: E402
from rvqspec.core.tree import SparseTree  # noqa: E402

TREE = SparseTree([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])
NP = {"float": "float16", "int32": "int32"}  # Core ML I/O dtypes: fp16 for the ANE, int32 indices
macos = pytest.mark.skipif(sys.platform != "darwin", reason="Core ML predictions need macOS "
                           f"(no Core ML framework on {sys.platform})")


@pytest.fixture(scope="module")
def cp():
    torch.set_num_threads(1)
    # one layer, 128 wide: every weight is above the quantizer's 2048-element threshold
    return tiny_code_predictor(vocab=128, hidden=128, layers=1, seed=0)


@pytest.fixture(scope="module")
def drafter():
    return randomize_drafter(PositionOffsets(3, 128, 128), seed=1, scale=2.0)


@pytest.fixture(scope="module")
def w8a16(cp, drafter, tmp_path_factory):
    return export_coreml(cp, TREE, tmp_path_factory.mktemp("cml") / "q", drafter=drafter)


@pytest.fixture(scope="module")
def fp16(cp, drafter, tmp_path_factory):
    """fp16 weights, two packages at iOS 17 (the other packaging path)."""
    return export_coreml(cp, TREE, tmp_path_factory.mktemp("cml") / "f", quantize=None, drafter=drafter,
                         multifunction=False)


def test_package_io_matches_graph_spec(cp, drafter, w8a16):
    assert w8a16.packages["ar"] == w8a16.packages["fused"]  # one multifunction package
    for name, g in (("ar", ar_graph(cp)), ("fused", fused_graph(cp, TREE, drafter))):
        io = package_io(w8a16.packages[name], w8a16.functions[name])
        spec = g.spec(name)
        assert list(io["inputs"]) == list(spec.inputs)
        assert list(io["outputs"]) == list(spec.outputs)
        for k, (shape, kind) in {**spec.inputs, **spec.outputs}.items():
            got = io["inputs"].get(k) or io["outputs"][k]
            assert got == (tuple(shape), NP[kind]), k
    man = json.loads((w8a16.out_dir / "manifest.json").read_text())
    assert man["quantize"] == "w8a16" and man["minimum_deployment_target"] == "iOS18"
    assert man["tree"] == [list(p) for p in TREE.paths]


def test_quantized_ops_and_size(w8a16, fp16):
    for fn in ("ar", "fused"):
        q_ops = package_ops(w8a16.packages[fn], fn)
        f_ops = package_ops(fp16.packages[fn], fp16.functions[fn])
        assert sum(q_ops.get(k, 0) for k in QUANT_OPS) >= 7   # 7 linear weights / layer + head stack
        assert sum(f_ops.get(k, 0) for k in QUANT_OPS) == 0
        assert q_ops.get("layer_norm", 0) >= 3 and q_ops.get("softmax", 0) >= 1
    assert package_ops(w8a16.packages["fused"], "fused").get("topk", 0) == 1
    # the multifunction package stores the shared weights once: compare with one fp16 package.
    # int8 weights are half of fp16; per-channel scales and the small fp16 consts add a little.
    ratio = package_bytes(w8a16.packages["ar"]) / package_bytes(fp16.packages["ar"])
    assert 0.4 < ratio < 0.7, ratio


def test_all_heads_graph_has_no_weight_gather(cp, drafter, tmp_path):
    """heads="all": the round's heads are picked by a one-hot mask, not a gather of weights."""
    from rvqspec.export.coreml import convert_graph

    f_win = convert_graph(fused_graph(cp, TREE, drafter), "fused", ct.target.iOS18, "w8a16")
    f_all = convert_graph(fused_graph(cp, TREE, drafter, heads="all"), "fused", ct.target.iOS18, "w8a16")
    f_all.save(str(tmp_path / "all.mlpackage"))
    ops_all = package_ops(tmp_path / "all.mlpackage")
    ops_win = {}
    for op in f_win._mil_program.functions["main"].operations:
        ops_win[op.op_type] = ops_win.get(op.op_type, 0) + 1
    assert ops_all.get("gather", 0) == ops_win.get("gather", 0) - 1  # only rope tables and draft ranks remain
    assert ops_all.get("reduce_sum", 0) >= 1 + 3                     # verify pick + one per lookahead
    assert sum(ops_all.get(k, 0) for k in QUANT_OPS) > 0


def test_reload(w8a16):
    m = ct.models.MLModel(str(w8a16.packages["fused"]), skip_model_load=True, function_name="fused")
    fns = {f.name: f for f in m.get_spec().description.functions}
    assert sorted(fns) == ["ar", "fused"] and m.get_spec().description.defaultFunctionName == "ar"
    assert "draft_tokens" in [o.name for o in fns["fused"].output]
    assert "draft_tokens" not in [o.name for o in fns["ar"].output]


def test_two_packages_ios17(fp16):
    res = fp16
    assert res.packages["ar"] != res.packages["fused"] and res.functions == {"ar": "main", "fused": "main"}
    assert res.manifest["minimum_deployment_target"] == "iOS17" and res.manifest["quantize"] is None
    q = len(TREE) + 1
    assert package_io(res.packages["fused"])["outputs"]["draft_tokens"] == ((1, q, len(TREE)), "int32")
    assert package_io(res.packages["ar"])["outputs"]["logits"] == ((1, 1, 128), "float16")
    assert sorted(p.name for p in res.out_dir.parent.iterdir()) == ["f"]  # no temporary leftovers


@pytest.mark.slow
def test_full_size_coreml_export(tmp_path):
    """The 0.6B-size code predictor (random weights) exports; W8A16 package about half of fp16 bytes
    of its parameters (stacked heads + 5 layers)."""
    from rvqspec.export.source import load_code_predictor

    cp = load_code_predictor("0.6b")
    res = export_coreml(cp, SparseTree([(0,), (1,), (0, 0), (0, 0, 0)]), tmp_path / "full")
    io = package_io(res.packages["fused"], "fused")
    assert io["inputs"]["key_cache"] == ((5, 8, 16, 128), "float16")
    assert io["outputs"]["logits"] == ((1, 5, 2048), "float16")
    params = sum(p.numel() for n, p in cp.named_parameters() if "codec_embedding" not in n)  # tables stay on host
    size = package_bytes(res.packages["ar"])
    assert 0.8 * params < size < 1.3 * params, (size, params)  # ~1 byte per weight (int8), shared by both functions


# --------------------------------------------------------------------------------------------
# macOS: predictions against torch
# --------------------------------------------------------------------------------------------
@macos
@pytest.mark.parametrize("quant", ["fp16", "w8a16"])
def test_coreml_predictions_match_torch(cp, drafter, w8a16, fp16, quant):
    from rvqspec.export.coreml import CoreMLGraph
    from rvqspec.export.host import torch_call

    res = w8a16 if quant == "w8a16" else fp16
    for name, g in (("ar", ar_graph(cp)), ("fused", fused_graph(cp, TREE, drafter))):
        feeds = {k: v.numpy() for k, v in zip(g.spec(name).inputs, g.example_inputs(5))}
        ref = torch_call(g)(feeds)
        got = CoreMLGraph(res.packages[name], res.functions[name], compute_units="CPU_ONLY")(feeds)
        assert psnr(torch.from_numpy(ref["logits"]), torch.from_numpy(got["logits"].astype(np.float32))) > (
            35.0 if quant == "fp16" else 25.0)
        agree = (ref["logits"].argmax(-1) == got["logits"].argmax(-1)).mean()
        assert agree >= 0.9


@macos
def test_coreml_greedy_frames(cp, fp16):
    from rvqspec.export.coreml import CoreMLGraph
    from rvqspec.export.host import ar_frame
    from rvqspec.core.sampling import Sampling

    a = ar_graph(cp)
    call = CoreMLGraph(fp16.packages["ar"], fp16.functions["ar"], compute_units="CPU_ONLY")
    g = torch.Generator().manual_seed(0)
    same = 0
    for _ in range(4):
        th, c0 = torch.randn(1, 1, 128, generator=g), int(torch.randint(0, 128, (1,), generator=g))
        want = cp.generate_frame(th, torch.tensor([[c0]]), Sampling(do_sample=False))[0].tolist()
        same += ar_frame(call, a, cp, th, c0) == want
    assert same >= 3  # fp16 may flip a near-tie once


def test_low_rank_drafter_converts(cp, tmp_path):
    """Drafter (v')'s baked rank-1 maps convert to Core ML (fp16, both head modes) with the fused
    graph's declared inputs and outputs; predictions need macOS (tests above)."""
    from rvqspec.core.drafters import SharedLowRankOffsets

    d = randomize_drafter(SharedLowRankOffsets(3, 128, 128, rank=1), seed=3, scale=2.0)
    for heads in ("window", "all"):
        res = export_coreml(cp, TREE, tmp_path / heads, quantize=None, drafter=d, heads=heads)
        io = package_io(res.packages["fused"], res.functions["fused"])
        spec = fused_graph(cp, TREE, d, heads=heads).spec("fused")
        assert list(io["inputs"]) == list(spec.inputs) and list(io["outputs"]) == list(spec.outputs)
