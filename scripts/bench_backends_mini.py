"""Issue 16's mini-model backend run: the speculative frame on eager, compiled (torch.compile of the
whole-round graph) and ONNX, interleaved in one run, JSON to data/mini/bench/ (or argv[1]).

    PYTHONPATH=$PWD python scripts/bench_backends_mini.py [OUT.json] [FRAMES] [MODES] [DRAFTER] [N] [BACKENDS]

MODES: comma list of spec,ar (default spec); DRAFTER a committed drafter (default offsets) and N its
committed tree's budget (default 16); BACKENDS a comma list of eager,compiled,onnx (default all;
onnx exports offsets and shared_low_rank drafters only). Inductor runs with frozen weights and without
max_autotune here (autotuning every GEMM shape takes tens of minutes on the shared 2-core box)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from rvqspec.core.compiled import CompileConfig
from rvqspec.core.drafters import load_drafter
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.tree import SparseTree
from rvqspec.measure.bench_backends import BACKENDS, bench_backends
from rvqspec.measure.bench_spec import frames_for_timing
from rvqspec.mini.frames import mini_frames
from rvqspec.mini.pipeline import MiniTTS

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "data" / "mini"


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else MINI / "bench" / "backends_offsets_n16.json"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    modes = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("spec",)
    kind = sys.argv[4] if len(sys.argv) > 4 else "offsets"
    budget = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    backends = tuple(sys.argv[6].split(",")) if len(sys.argv) > 6 else BACKENDS
    torch.set_num_threads(1)

    cp = MiniTTS.load(MINI).code_predictor
    drafter = load_drafter(MINI / "drafters" / f"{kind}.safetensors", cp)
    tree = SparseTree.load(MINI / "trees" / f"{kind}_n{budget}.json")
    frames = frames_for_timing(mini_frames(model_dir=MINI / "model", split="eval", language="en", max_utterances=None), n)
    result = bench_backends(cp, drafter, tree, frames, modes=modes, threads=1, backends=backends,
                            compile_config=CompileConfig(max_autotune=False))
    result["command"] = "PYTHONPATH=$PWD python scripts/bench_backends_mini.py " + " ".join(sys.argv[1:])
    write_json_atomic(out, result, indent=1)
    print(out)


if __name__ == "__main__":
    main()
