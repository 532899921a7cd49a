"""Device export of the code predictor (seed 000 §3.4): static graphs (`wrappers`), Core ML
(`coreml`), ONNX (`onnx`), host-side frame loops (`host`). Light on purpose: the CLI imports the
config below without loading torch or coremltools."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CoreMLConfig:
    """Core ML conversion settings (defaults here only; `export_coreml` and the CLI read them)."""

    quantize: str | None = "w8a16"   # "w8a16" (per-channel int8 weights) or None (fp16 weights)
    multifunction: bool = True       # one package (iOS 18 / macOS 15) or two (iOS 17 / macOS 14)
    weight_threshold: int = 2048     # consts with fewer elements (norm weights, offsets) stay fp16
    heads: str = "window"            # LM head access: "window" (gather 2D+1 heads) | "all" (wrappers docstring)
