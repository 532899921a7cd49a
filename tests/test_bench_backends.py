"""`rvqspec.measure.bench_backends` on a tiny predictor (eager and ONNX): the JSON it reports, not the
speed. The speculative backends must decode the same codes on every timed frame (same seeds, one
rule), the counts must be consistent (tokens per call = 15 / calls per frame), and the host share
must be a fraction."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_cp import randomize_drafter, tiny_code_predictor  # noqa: E402

from rvqspec.core.drafters import PositionOffsets  # noqa: E402
from rvqspec.core.sampling import Sampling  # noqa: E402
from rvqspec.core.tree import SparseTree  # noqa: E402
from rvqspec.measure.bench_backends import bench_backends  # noqa: E402


def test_bench_backends_json():
    torch.set_num_threads(1)
    cp = tiny_code_predictor(vocab=8, hidden=32, layers=1, seed=2, head_scale=6.0)
    drafter = randomize_drafter(PositionOffsets(3, 32, 8), seed=3, scale=0.5)
    tree = SparseTree([(0,), (1,), (0, 0), (0, 0, 0)])
    g = torch.Generator().manual_seed(0)
    frames = [(torch.randn(1, 1, 32, generator=g), torch.randint(0, 8, (1, 1), generator=g)) for _ in range(4)]
    r = bench_backends(cp, drafter, tree, frames, Sampling(temperature=1.0, top_k=4), backends=("eager", "onnx"),
                       warmup=1, progress=False)
    assert r["frames"] == 4 and r["codes_agree_across_backends"]["spec"] == "4/4"
    for mode in ("spec", "ar"):
        for b in ("eager", "onnx"):
            row = r["modes"][mode][b]
            assert row["frame_ms"] > 0
            assert row["tokens_per_call"] == pytest.approx(15 / row["calls_per_frame"], rel=1e-3)
            if "host_overhead_share" in row:
                assert row["host_overhead_share"] < 1
        onnx = r["modes"][mode]["onnx"]
        assert onnx["speedup_vs_eager_label"] == ("speedup" if onnx["speedup_vs_eager"] >= 1 else "slowdown")
    assert r["modes"]["ar"]["onnx"]["calls_per_frame"] == 1  # the whole frame in one call
    assert r["modes"]["spec"]["onnx"]["calls_per_frame"] == r["modes"]["spec"]["eager"]["calls_per_frame"]
    with pytest.raises(ValueError, match="backend must be one of"):
        bench_backends(cp, drafter, tree, frames, backends=("eager", "tpu"), progress=False)
