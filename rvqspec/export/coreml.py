"""Core ML export of the code predictor's AR step and fused speculative round (W8A16, fp16 compute).

Path (docs/environment notes, "Core ML export on Linux"): `torch.jit.trace` of the static
`RoundGraph` modules -> `ct.convert(..., compute_precision=FLOAT16)` -> optional
`linear_quantize_weights` (per-channel symmetric int8 = W8A16, the ANE choice the seed uses for
every figure, seed 000 §3.4) -> `.mlpackage`.

Packaging: by default ONE multifunction package with functions ``ar`` and ``fused`` (as Argmax
TTSKit ships `stepped` and `fused` in one asset; shared weights are stored once). Multifunction
models need iOS 18 / macOS 15; ``multifunction=False`` writes two packages at iOS 17 / macOS 14
(per-channel int8 weights need iOS 16+; iOS 17 keeps `constexpr_affine_dequantize`, iOS 18 uses
`constexpr_blockwise_shift_scale`).

Predictions need macOS (no Core ML framework on Linux): `CoreMLGraph` runs them there; on Linux the
checks are structural (names, shapes, dtypes in the spec; quantized-weight ops in the MIL program;
save and reload; size against an fp16 export) plus the numerics of the traced torch module.
"""
from __future__ import annotations

import json
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.checkpoint import model_hash
from rvqspec.core.tree import SparseTree
from rvqspec.export import CoreMLConfig
from rvqspec.export.files import MANIFEST, atomic_dir, manifest
from rvqspec.export.onnx import example_feeds
from rvqspec.export.wrappers import (
    ExportError,
    RoundGraph,
    ar_graph,
    as_float32,
    frame_graph,
    fused_graph,
    spec_round_graph,
)

QUANT_OPS = ("constexpr_affine_dequantize", "constexpr_blockwise_shift_scale")
PACKAGE = "CodePredictor.mlpackage"            # multifunction: functions "ar", "fused"
AR_PACKAGE = "CodePredictorAR.mlpackage"       # two-package layout
FUSED_PACKAGE = "CodePredictorFused.mlpackage"


@dataclass
class CoreMLExport:
    out_dir: Path
    packages: dict[str, Path]          # function name -> package path
    functions: dict[str, str]          # function name -> function name inside its package ("main" or itself)
    manifest: dict = field(default_factory=dict)


def _ct():
    import coremltools as ct

    return ct


def convert_graph(graph: RoundGraph, name: str, target, quantize: str | None,
                  weight_threshold: int = CoreMLConfig.weight_threshold):
    """Trace and convert one RoundGraph -> ct.models.MLModel (not loaded: Linux has no runtime)."""
    ct = _ct()
    spec = graph.spec(name)
    example = graph.example_inputs(cache_length=1, dtype=torch.float32)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python ints baked as constants: intended
        traced = torch.jit.trace(graph, example)
    f = lambda kind: np.int32 if kind == "int32" else np.float16  # noqa: E731  fp16 I/O for the ANE
    inputs = [ct.TensorType(name=k, shape=shape, dtype=f(kind)) for k, (shape, kind) in spec.inputs.items()]
    outputs = [ct.TensorType(name=k, dtype=f(kind)) for k, (shape, kind) in spec.outputs.items()]
    model = ct.convert(traced, inputs=inputs, outputs=outputs, convert_to="mlprogram",
                       compute_precision=ct.precision.FLOAT16, minimum_deployment_target=target,
                       skip_model_load=True)
    if quantize is None:
        return model
    if quantize != "w8a16":
        raise ExportError(f"quantize must be 'w8a16' or None, got {quantize!r}")
    from coremltools.optimize.coreml import OpLinearQuantizerConfig, OptimizationConfig, linear_quantize_weights

    cfg = OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                  weight_threshold=weight_threshold)
    return linear_quantize_weights(model, OptimizationConfig(global_config=cfg))


def export_coreml(code_predictor, tree: SparseTree, out_dir: str | Path,
                  quantize: str | None = CoreMLConfig.quantize, drafter=None,
                  multifunction: bool = CoreMLConfig.multifunction,
                  weight_threshold: int = CoreMLConfig.weight_threshold, heads: str = CoreMLConfig.heads,
                  overwrite: bool = False) -> CoreMLExport:
    """Export the AR step and the fused round of `tree` (offsets from `drafter`) to `out_dir`.

    Writes `CodePredictor.mlpackage` (functions "ar", "fused") or, with multifunction=False,
    `CodePredictorAR.mlpackage` + `CodePredictorFused.mlpackage`, and `manifest.json`. Built in a
    temporary directory and renamed into place when complete."""
    ct = _ct()
    out = Path(out_dir)
    code_predictor = as_float32(code_predictor)  # trace in fp32; Core ML computes in fp16
    ar = ar_graph(code_predictor, heads=heads)
    fused = fused_graph(code_predictor, tree, drafter, heads=heads)
    target = ct.target.iOS18 if multifunction else ct.target.iOS17
    with atomic_dir(out, overwrite) as tmp:
        models = {name: convert_graph(g, name, target, quantize, weight_threshold)
                  for name, g in (("ar", ar), ("fused", fused))}
        if multifunction:
            from coremltools.models.utils import MultiFunctionDescriptor, save_multifunction

            parts = tmp / ".parts"
            parts.mkdir()
            desc = MultiFunctionDescriptor()
            for name, m in models.items():
                m.save(str(parts / f"{name}.mlpackage"))
                desc.add_function(str(parts / f"{name}.mlpackage"), src_function_name="main", target_function_name=name)
            desc.default_function_name = "ar"
            save_multifunction(desc, str(tmp / PACKAGE))
            shutil.rmtree(parts)
            packages = {"ar": PACKAGE, "fused": PACKAGE}
            functions = {"ar": "ar", "fused": "fused"}
        else:
            models["ar"].save(str(tmp / AR_PACKAGE))
            models["fused"].save(str(tmp / FUSED_PACKAGE))
            packages = {"ar": AR_PACKAGE, "fused": FUSED_PACKAGE}
            functions = {"ar": "main", "fused": "main"}
        man = manifest(code_predictor, tree, {"ar": ar, "fused": fused}, drafter, format="coreml",
                       packages=packages, functions=functions, quantize=quantize,
                       minimum_deployment_target=target.name, compute_precision="float16", heads=heads,
                       coremltools=ct.__version__)
        (tmp / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    return CoreMLExport(out, {k: out / v for k, v in packages.items()}, functions, man)


# --------------------------------------------------------------------------------------------
# inspection (works on Linux: reads the protobuf spec, no Core ML runtime)
# --------------------------------------------------------------------------------------------
_DTYPES = {65552: "float16", 65568: "float32", 131104: "int32"}


def package_io(package: str | Path, function: str = "main") -> dict[str, dict[str, tuple[tuple[int, ...], str]]]:
    """{"inputs": {name: (shape, dtype)}, "outputs": {...}} of one function of a saved package."""
    ct = _ct()
    spec = ct.utils.load_spec(str(package))
    desc = spec.description
    if len(desc.functions):
        fns = {f.name: f for f in desc.functions}
        if function == "main":
            function = desc.defaultFunctionName
        if function not in fns:
            raise ExportError(f"{package}: no function {function!r} (has {sorted(fns)})")
        fin, fout = fns[function].input, fns[function].output
    else:
        fin, fout = desc.input, desc.output

    def arr(features) -> dict:
        return {x.name: (tuple(int(s) for s in x.type.multiArrayType.shape),
                         _DTYPES.get(x.type.multiArrayType.dataType, str(x.type.multiArrayType.dataType)))
                for x in features}

    return {"inputs": arr(fin), "outputs": arr(fout)}


def package_ops(package: str | Path, function: str = "main") -> dict[str, int]:
    """Op type -> count in one function of the saved package's ML program."""
    ct = _ct()
    spec = ct.utils.load_spec(str(package))
    fns = spec.mlProgram.functions
    if function == "main" and "main" not in fns and spec.description.defaultFunctionName:
        function = spec.description.defaultFunctionName
    if function not in fns:
        raise ExportError(f"{package}: ML program has no function {function!r} (has {sorted(fns)})")
    counts: dict[str, int] = {}

    def walk(block) -> None:
        for op in block.operations:
            counts[op.type] = counts.get(op.type, 0) + 1
            for b in op.blocks:
                walk(b)

    for block in fns[function].block_specializations.values():
        walk(block)
    return counts


def package_bytes(package: str | Path) -> int:
    """Total size on disk of a package directory (weights dominate)."""
    return sum(p.stat().st_size for p in Path(package).rglob("*") if p.is_file())


class CoreMLGraph:
    """A loaded Core ML function (macOS only): feeds dict[name -> np.ndarray] -> dict of outputs."""

    def __init__(self, package: str | Path, function: str = "main", compute_units: str = "ALL"):
        if sys.platform != "darwin":
            raise ExportError("Core ML predictions need macOS (no Core ML framework on this platform)")
        ct = _ct()
        kw = {} if function == "main" else {"function_name": function}
        self.model = ct.models.MLModel(str(package), compute_units=getattr(ct.ComputeUnit, compute_units), **kw)
        io = package_io(package, function)
        self.input_specs = io["inputs"]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        cast = {n: np.asarray(feeds[n], dtype=np.int32 if k == "int32" else np.float16)
                for n, (_, k) in self.input_specs.items()}
        return {k: np.asarray(v) for k, v in self.model.predict(cast).items()}


# --------------------------------------------------------------------------------------------
# the whole-frame and whole-round sampling graphs (wrappers.FrameGraph / SpecRoundGraph)
# --------------------------------------------------------------------------------------------
SAMPLING_PACKAGE = "CodePredictorSampling.mlpackage"  # functions "frame", "round"


def convert_module(graph, target, quantize: str | None, weight_threshold: int = CoreMLConfig.weight_threshold):
    """Trace and convert a FrameGraph / SpecRoundGraph (fp16 compute, fp16 float I/O, int32 ints;
    W8A16 when quantize="w8a16") -> ct.models.MLModel, not loaded."""
    ct = _ct()
    spec = graph.spec()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(graph, example_feeds(spec))
    f = lambda kind: np.int32 if kind == "int32" else np.float16  # noqa: E731
    inputs = [ct.TensorType(name=k, shape=shape, dtype=f(kind)) for k, (shape, kind) in spec.inputs.items()]
    outputs = [ct.TensorType(name=k, dtype=f(kind)) for k, (shape, kind) in spec.outputs.items()]
    model = ct.convert(traced, inputs=inputs, outputs=outputs, convert_to="mlprogram",
                       compute_precision=ct.precision.FLOAT16, minimum_deployment_target=target, skip_model_load=True)
    if quantize is None:
        return model
    if quantize != "w8a16":
        raise ExportError(f"quantize must be 'w8a16' or None, got {quantize!r}")
    from coremltools.optimize.coreml import OpLinearQuantizerConfig, OptimizationConfig, linear_quantize_weights

    cfg = OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                  weight_threshold=weight_threshold)
    # only the weights of matrix products and embedding lookups: the sampling graphs also hold large
    # constant fills of -inf (masked scores), which a global int8 pass would turn into NaN
    return linear_quantize_weights(model, OptimizationConfig(op_type_configs={op: cfg for op in QUANTIZED_OP_TYPES}))


QUANTIZED_OP_TYPES = ("linear", "matmul", "gather", "gather_along_axis")


def export_coreml_sampling(code_predictor, tree: SparseTree, out_dir: str | Path, drafter=None,
                           quantize: str | None = CoreMLConfig.quantize,
                           weight_threshold: int = CoreMLConfig.weight_threshold, overwrite: bool = False) -> CoreMLExport:
    """ONE multifunction package (iOS 18 / macOS 15) with the whole AR frame ("frame") and the whole
    speculative round of `tree` ("round"), sampling and acceptance in the graph, noise as an input
    (rvqspec.export.wrappers); W8A16 by default. Built in a temporary directory, renamed when complete."""
    from coremltools.models.utils import MultiFunctionDescriptor, save_multifunction


    ct = _ct()
    out = Path(out_dir)
    code_predictor = as_float32(code_predictor)
    graphs = {"frame": frame_graph(code_predictor), "round": spec_round_graph(code_predictor, tree, drafter)}
    target = ct.target.iOS18
    with atomic_dir(out, overwrite) as tmp:
        parts = tmp / ".parts"
        parts.mkdir()
        desc = MultiFunctionDescriptor()
        for name, g in graphs.items():
            convert_module(g, target, quantize, weight_threshold).save(str(parts / f"{name}.mlpackage"))
            desc.add_function(str(parts / f"{name}.mlpackage"), src_function_name="main", target_function_name=name)
        desc.default_function_name = "frame"
        save_multifunction(desc, str(tmp / SAMPLING_PACKAGE))
        shutil.rmtree(parts)

        def io(g) -> dict:
            s = g.spec()
            return {"inputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in s.inputs.items()},
                    "outputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in s.outputs.items()}}

        man = {"format": "coreml", "package": SAMPLING_PACKAGE, "functions": list(graphs),
               "graphs": {k: io(g) for k, g in graphs.items()}, "tree": [list(p) for p in tree.paths],
               "drafter": None if drafter is None else getattr(drafter, "kind", type(drafter).__name__),
               "model_hash": model_hash(code_predictor), "quantize": quantize,
               "minimum_deployment_target": target.name, "compute_precision": "float16",
               "coremltools": ct.__version__}
        (tmp / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    pkg = out / SAMPLING_PACKAGE
    return CoreMLExport(out, {k: pkg for k in graphs}, {k: k for k in graphs}, man)
