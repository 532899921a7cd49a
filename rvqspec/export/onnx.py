"""ONNX export of the AR step and the fused round, run by onnxruntime on the CPU.

The second export target, the one that runs on this (Linux) machine (RMSNorm traced in the form
onnxruntime fuses, `rvqspec.export.wrappers.rms_form`): it checks that the static
graphs of `rvqspec.export.wrappers` are complete (numerics against eager in tests/test_export.py)
and gives the `onnx` profiler backend. The TorchScript exporter (``dynamo=False``) is the default:
with torch 2.13 both exporters give the same graph numerics here, and the TorchScript one is about
ten times faster to export (tiny model: 1.6 s vs 15 s), which keeps the tests short.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.checkpoint import model_hash
from rvqspec.core.tree import SparseTree
from rvqspec.export.files import MANIFEST, atomic_dir, manifest
from rvqspec.export.wrappers import (
    ExportError,
    RoundGraph,
    ar_graph,
    as_float32,
    frame_graph,
    fused_graph,
    rms_form,
    spec_round_graph,
)

OPSET = 18
AR_FILE = "code_predictor_ar.onnx"
FUSED_FILE = "code_predictor_fused.onnx"


@dataclass
class OnnxExport:
    out_dir: Path
    ar: Path
    fused: Path
    manifest: dict


def export_graph(graph: RoundGraph, path: str | Path, name: str, dynamo: bool = False) -> None:
    """Write one RoundGraph as ONNX (fp32 weights, static shapes) with the GraphSpec names."""
    spec = graph.spec(name)
    example = graph.example_inputs(cache_length=1)
    with torch.no_grad(), warnings.catch_warnings(), rms_form("pow"):
        warnings.simplefilter("ignore")  # tracer warnings about Python ints baked as constants: intended
        torch.onnx.export(graph, example, str(path), input_names=list(spec.inputs),
                          output_names=list(spec.outputs), opset_version=OPSET, dynamo=dynamo)


def export_onnx(code_predictor, tree: SparseTree, out_dir: str | Path, drafter=None, dynamo: bool = False,
                heads: str = "window", overwrite: bool = False) -> OnnxExport:
    """Export the AR step and the fused round of `tree` into `out_dir` (written to a temporary
    sibling directory, then renamed: nothing half-written is left behind)."""
    out = Path(out_dir)
    code_predictor = as_float32(code_predictor)  # fp32 graphs: onnxruntime's CPU kernels
    ar = ar_graph(code_predictor, heads=heads)
    fused = fused_graph(code_predictor, tree, drafter, heads=heads)
    with atomic_dir(out, overwrite) as tmp:
        export_graph(ar, tmp / AR_FILE, "ar", dynamo)
        export_graph(fused, tmp / FUSED_FILE, "fused", dynamo)
        man = manifest(code_predictor, tree, {"ar": ar, "fused": fused}, drafter, format="onnx",
                       files={"ar": AR_FILE, "fused": FUSED_FILE}, opset=OPSET, heads=heads)
        (tmp / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    return OnnxExport(out, out / AR_FILE, out / FUSED_FILE, man)


class OnnxGraph:
    """A callable onnxruntime session on the CPU: feeds dict[name -> np.ndarray] -> dict of outputs."""

    def __init__(self, path: str | Path, threads: int = 1):
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise ExportError(f"{path}: no such ONNX file")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # no busy-waiting between calls: ORT threads that spin steal the core the host loop and the
        # torch talker run on (measured: the talker step 6 -> 15 ms beside spinning ORT threads)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise ExportError(f"ONNX graph inputs missing from feeds: {missing}")
        outs = self.session.run(self.output_names, {n: feeds[n] for n in self.input_names})
        return dict(zip(self.output_names, outs))


# ---- the whole-frame and whole-round sampling graphs (rvqspec.export.wrappers.FrameGraph / SpecRoundGraph)
FRAME_FILE = "code_predictor_frame.onnx"
ROUND_FILE = "code_predictor_round.onnx"


@dataclass
class SamplingExport:
    out_dir: Path
    frame: Path
    round: Path
    manifest: dict


def example_feeds(spec) -> tuple[torch.Tensor, ...]:
    """Tracing inputs for a GraphSpec: small random floats, ones for int32 (a mid-frame state)."""
    g = torch.Generator().manual_seed(0)
    return tuple(torch.ones(shape, dtype=torch.int32) if dt == "int32" else torch.rand(shape, generator=g)
                 for shape, dt in spec.inputs.values())


def export_module(graph, path: str | Path, dynamo: bool = False) -> None:
    """Write a FrameGraph or SpecRoundGraph as ONNX (fp32, static shapes) with its GraphSpec names."""
    spec = graph.spec()
    with torch.no_grad(), warnings.catch_warnings(), rms_form("pow"):
        warnings.simplefilter("ignore")  # tracer warnings about Python ints baked as constants: intended
        torch.onnx.export(graph, example_feeds(spec), str(path), input_names=list(spec.inputs),
                          output_names=list(spec.outputs), opset_version=OPSET, dynamo=dynamo)


def export_sampling_onnx(code_predictor, tree: SparseTree, out_dir: str | Path, drafter=None,
                         overwrite: bool = False) -> SamplingExport:
    """Export the whole AR frame and the whole speculative round of `tree` (sampling and acceptance
    in the graph, noise as an input) into `out_dir`, atomically."""
    out = Path(out_dir)
    code_predictor = as_float32(code_predictor)
    frame, rnd = frame_graph(code_predictor), spec_round_graph(code_predictor, tree, drafter)

    def io(g) -> dict:
        s = g.spec()
        return {"inputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in s.inputs.items()},
                "outputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in s.outputs.items()}}

    with atomic_dir(out, overwrite) as tmp:
        export_module(frame, tmp / FRAME_FILE)
        export_module(rnd, tmp / ROUND_FILE)
        man = {"format": "onnx", "opset": OPSET, "files": {"frame": FRAME_FILE, "round": ROUND_FILE},
               "graphs": {"frame": io(frame), "round": io(rnd)}, "tree": [list(p) for p in tree.paths],
               "drafter": None if drafter is None else getattr(drafter, "kind", type(drafter).__name__),
               "model_hash": model_hash(code_predictor),
               "protocol": "rvqspec.export.host.graph_ar_frame / graph_spec_frame: feed the returned state "
                           "back with fresh Gumbel noise; sampling inputs from sampling_tensors"}
        (tmp / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    return SamplingExport(out, out / FRAME_FILE, out / ROUND_FILE, man)
