"""`rvqspec export coreml|onnx`: the AR step and the fused speculative round as device graphs."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.export import CoreMLConfig

_CML = CoreMLConfig()  # the one place the Core ML defaults live

export_app = typer.Typer(help="Export the code predictor's AR step and fused speculative round "
                              "(static shapes, explicit KV cache).", no_args_is_help=True)

_MODEL = typer.Option("0.6b", "--model", help="Checkpoint directory (official layout) or preset "
                                              "name (0.6b, 1.7b: full-size random weights).")
_TREE = opt.tree(..., "Tree JSON (rank paths) or a device profile JSON (its N* tree).")
_OUT = typer.Option(..., "--out-dir", help="Output folder (built in a temporary sibling, then renamed).")
_HEADS = typer.Option(_CML.heads, "--heads", help="LM head access in the graphs: window (gather the round's "
                                                 "heads) or all (15 heads + one-hot pick, no weight gather).")
_DRAFTER = opt.drafter(None, "offsets or shared_low_rank drafter file (safetensors); default zeros = reused LM heads.")


def _inputs(model: str, tree: Path, drafter: Optional[Path], check_hash: bool = True):
    from rvqspec.export.source import load_code_predictor
    from rvqspec.measure.profile import load_tree

    t = load_tree(tree)  # cheap checks first: a bad tree fails before the model loads
    cp = load_code_predictor(model)
    vocab = cp.config.vocab_size
    if t.buffers().max_rank > vocab:
        bad = max(t.paths, key=lambda p: max(p))
        raise ValueError(f"{tree}: path {list(bad)} has rank {max(bad)} but the code predictor has only {vocab} "
                         f"codes (ranks 0..{vocab - 1})")
    d = None
    if drafter is not None:
        from rvqspec.core.drafters import load_drafter

        d = load_drafter(drafter, cp, check_hash=check_hash)
    return cp, t, d


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")


def _run_export(model: str, tree: Path, drafter: Optional[Path], export, check_hash: bool = True):
    """What both exports share: the inputs, one thread, timing, and a clear error for bad input.
    `export(cp, tree, drafter)` -> result with .out_dir; returns (result, summary head, (cp, tree, drafter))."""
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        cp, t, d = _inputs(model, tree, drafter, check_hash)
        res = export(cp, t, d)
    except ValueError as exc:
        _fail(exc)
    return res, {"out": str(res.out_dir), "seconds": round(time.perf_counter() - t0, 1), "N": len(t)}, (cp, t, d)


@export_app.command("coreml")
def coreml(model: str = _MODEL, tree: Path = _TREE, out: Path = _OUT, drafter: Optional[Path] = _DRAFTER,
           skip_hash_check: bool = opt.skip_hash_check(),
           no_quantize: bool = typer.Option(False, "--no-quantize", help="fp16 weights instead of W8A16."),
           two_packages: bool = typer.Option(not _CML.multifunction, "--two-packages",
                                             help="Two packages at iOS 17 / macOS 14 instead of one "
                                                  "multifunction package (iOS 18 / macOS 15)."),
           heads: str = _HEADS,
           overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out.")) -> None:
    """Core ML .mlpackage(s): functions "ar" (q=1) and "fused" (q=N+1), fp16 compute, W8A16."""
    from rvqspec.export.coreml import QUANT_OPS, export_coreml, package_bytes, package_io, package_ops

    res, summary, _ = _run_export(model, tree, drafter, lambda cp, t, d: export_coreml(
        cp, t, out, quantize=None if no_quantize else _CML.quantize, drafter=d, multifunction=not two_packages,
        heads=heads, overwrite=overwrite), check_hash=not skip_hash_check)
    summary.update({"quantize": res.manifest["quantize"], "heads": heads, "target": res.manifest["minimum_deployment_target"],
                    "packages": {}})
    for fn, pkg in res.packages.items():
        ops = package_ops(pkg, res.functions[fn])
        io = {side: {k: f"{tuple(shape)} {dt}" for k, (shape, dt) in feats.items()}
              for side, feats in package_io(pkg, res.functions[fn]).items()}
        summary["packages"][fn] = {"path": str(pkg), "function": res.functions[fn], "bytes": package_bytes(pkg),
                                   "io": io,
                                   "quantized_weight_ops": sum(ops.get(k, 0) for k in QUANT_OPS)}
    typer.echo(json.dumps(summary, indent=1))


@export_app.command("onnx")
def onnx(model: str = _MODEL, tree: Path = _TREE, out: Path = _OUT, drafter: Optional[Path] = _DRAFTER,
         skip_hash_check: bool = opt.skip_hash_check(),
         dynamo: bool = typer.Option(False, "--dynamo", help="torch.export-based exporter (slower here)."),
         check: bool = typer.Option(True, "--check/--no-check", help="Run both graphs in onnxruntime and "
                                                                   "compare with torch (max abs diff, argmax)."),
         heads: str = _HEADS,
         overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out.")) -> None:
    """ONNX graphs (AR, fused) for onnxruntime; optional numeric check against torch."""
    from rvqspec.export.onnx import OnnxGraph, export_onnx

    res, summary, (cp, t, d) = _run_export(model, tree, drafter, lambda cp, t, d: export_onnx(
        cp, t, out, drafter=d, dynamo=dynamo, heads=heads, overwrite=overwrite), check_hash=not skip_hash_check)
    summary.update({"files": {"ar": str(res.ar), "fused": str(res.fused)},
                    "bytes": {"ar": res.ar.stat().st_size, "fused": res.fused.stat().st_size}})
    if check:
        from rvqspec.export.host import torch_call
        from rvqspec.export.wrappers import ar_graph, fused_graph

        summary["check"] = {}
        for name, g, path in (("ar", ar_graph(cp, heads=heads), res.ar),
                              ("fused", fused_graph(cp, t, d, heads=heads), res.fused)):
            feeds = {k: v.float().numpy() if v.is_floating_point() else v.numpy()
                     for k, v in zip(g.spec(name).inputs, g.example_inputs(cache_length=5))}
            ref, got = torch_call(g)(feeds), OnnxGraph(path)(feeds)
            summary["check"][name] = {
                "logits_max_abs_diff": float(abs(ref["logits"] - got["logits"]).max()),
                "argmax_equal": bool((ref["logits"].argmax(-1) == got["logits"].argmax(-1)).all()),
                "draft_tokens_equal": (bool((ref["draft_tokens"] == got["draft_tokens"]).all())
                                       if "draft_tokens" in ref else None)}
    typer.echo(json.dumps(summary, indent=1))
