"""rvqspec: RVQ position-aware speculative decoding and SPADE pruning for Qwen3-TTS.

Public names are resolved lazily, so `import rvqspec` stays cheap and the command line starts fast.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Sampling": "rvqspec.sampling",
    "load_qwen3_tts": "rvqspec.checkpoint",
    "Qwen3TTS": "rvqspec.checkpoint",
    "CodePredictorConfig": "rvqspec.config",
    "TalkerConfig": "rvqspec.config",
    "MultiCodeDecoder": "rvqspec.model",
    "CodeDecoder": "rvqspec.model",
    "KVCache": "rvqspec.model",
    "SparseTree": "rvqspec.tree",
    "PositionOffsets": "rvqspec.drafters",
    "SpeculativeCodePredictor": "rvqspec.spec",
    "CompiledCodePredictor": "rvqspec.compiled",
    "CompileConfig": "rvqspec.compiled",
    "accelerate": "rvqspec.official_accel",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rvqspec' has no attribute {name!r}")
