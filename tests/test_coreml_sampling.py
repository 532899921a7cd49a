"""Core ML package of the sampling graphs (issue 16): ONE multifunction W8A16 package holding the
whole AR frame ("frame") and the whole speculative round ("round"), checked structurally on Linux
(names, shapes and dtypes against the GraphSpec; int8 weight ops in both ML programs; the manifest),
and the traced module (what Core ML converts) against the eager module for the same noise.
Predictions need macOS (rvqspec.export.coreml.CoreMLGraph) and are not run here."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402

ct = pytest.importorskip("coremltools")

from rvqspec.core.drafters import PositionOffsets  # noqa: E402
from rvqspec.core.sampling import Sampling  # noqa: E402
from rvqspec.core.tree import SparseTree  # noqa: E402
from rvqspec.export.coreml import MANIFEST, QUANT_OPS, export_coreml_sampling, package_io, package_ops  # noqa: E402
from rvqspec.export.host import graph_ar_frame, graph_spec_frame, module_call  # noqa: E402
from rvqspec.export.onnx import example_feeds  # noqa: E402
from rvqspec.export.wrappers import frame_graph, spec_round_graph  # noqa: E402

TREE = SparseTree([(0,), (1,), (0, 0), (0, 0, 0)])
NP = {"float": "float16", "int32": "int32"}


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)
    # one layer, 64 wide, 64 codes: every matrix is above the quantizer threshold given below
    cp = tiny_code_predictor(vocab=64, hidden=64, layers=1, seed=0)
    return cp, randomize_drafter(PositionOffsets(3, 64, 64), seed=1, scale=2.0)


@pytest.fixture(scope="module")
def package(world, tmp_path_factory):
    cp, drafter = world
    return export_coreml_sampling(cp, TREE, tmp_path_factory.mktemp("cml") / "s", drafter, weight_threshold=1024)


@pytest.mark.slow
def test_one_package_both_functions_w8a16(world, package):
    cp, drafter = world
    assert package.packages["frame"] == package.packages["round"]  # one multifunction package
    graphs = {"frame": frame_graph(cp), "round": spec_round_graph(cp, TREE, drafter)}
    for name, g in graphs.items():
        io = package_io(package.packages[name], name)
        spec = g.spec()
        assert {k: (s, NP[d]) for k, (s, d) in spec.inputs.items()} == io["inputs"], name
        assert set(io["outputs"]) == set(spec.outputs), name
        ops = package_ops(package.packages[name], name)
        assert sum(ops.get(op, 0) for op in QUANT_OPS) >= 7, (name, ops)  # int8 weights (W8A16)
        assert ops.get("reduce_argmax", 0) >= 1  # sampling and acceptance are in the graph
    man = json.loads((package.out_dir / MANIFEST).read_text())
    assert man["functions"] == ["frame", "round"] and man["quantize"] == "w8a16"
    assert man["tree"] == [list(p) for p in TREE.paths]


def test_traced_modules_equal_eager(world):
    """torch.jit.trace (the graph Core ML converts) gives the eager module's codes for the same noise."""
    cp, drafter = world
    s = Sampling(temperature=1.0, top_k=8, top_p=0.9)
    fg, rg = frame_graph(cp), spec_round_graph(cp, TREE, drafter)
    with torch.no_grad():
        tf, tr = torch.jit.trace(fg, example_feeds(fg.spec())), torch.jit.trace(rg, example_feeds(rg.spec()))
    g = torch.Generator().manual_seed(0)
    for i in range(4):
        th, c0 = torch.randn(1, 1, 64, generator=g), int(torch.randint(0, 64, (1,), generator=g))
        assert (graph_ar_frame(module_call(fg, tf), fg, th, c0, s, torch.Generator().manual_seed(i))
                == graph_ar_frame(module_call(fg), fg, th, c0, s, torch.Generator().manual_seed(i)))
        assert (graph_spec_frame(module_call(rg, tr), rg, th, c0, s, torch.Generator().manual_seed(i))
                == graph_spec_frame(module_call(rg), rg, th, c0, s, torch.Generator().manual_seed(i)))
