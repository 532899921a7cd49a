"""rvqspec: RVQ position-aware speculative decoding and SPADE pruning for Qwen3-TTS.

Public names are resolved lazily, so `import rvqspec` stays cheap and the command line starts fast.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Sampling": "rvqspec.core.sampling",
    "load_qwen3_tts": "rvqspec.core.checkpoint",
    "Qwen3TTS": "rvqspec.core.checkpoint",
    "CodePredictorConfig": "rvqspec.core.config",
    "TalkerConfig": "rvqspec.core.config",
    "MultiCodeDecoder": "rvqspec.core.model",
    "CodeDecoder": "rvqspec.core.model",
    "KVCache": "rvqspec.core.model",
    "SparseTree": "rvqspec.core.tree",
    "PositionOffsets": "rvqspec.core.drafters",
    "SpeculativeCodePredictor": "rvqspec.core.speculative",
    "CompiledCodePredictor": "rvqspec.core.compiled",
    "CompileConfig": "rvqspec.core.compiled",
    "accelerate": "rvqspec.real.official_pipeline",
    "Qwen3TTSModel": "rvqspec.real.official",  # qwen_tts.Qwen3TTSModel, importable without librosa
    "stream": "rvqspec.real.stream",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rvqspec' has no attribute {name!r}")
