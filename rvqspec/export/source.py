"""Where an export or a profile gets its code predictor, drafter and tree from (CLI arguments)."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rvqspec.core.config import CodePredictorConfig, TalkerConfig
from rvqspec.core.model import MultiCodeDecoder
from rvqspec.export.wrappers import ExportError


def load_code_predictor(spec: str | Path, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A checkpoint directory (official layout) or a preset name ("0.6b", "1.7b": full-size random
    weights, std 0.02 as HF initialisation, norms at 1; latency and export do not depend on values)."""
    p = Path(spec)
    if p.exists():
        from rvqspec.core.checkpoint import load_qwen3_tts

        return load_qwen3_tts(p, dtype=dtype, parts=("code_predictor",)).code_predictor.eval()

    try:
        cfg = CodePredictorConfig.from_name(str(spec))
        talker = TalkerConfig.from_name(str(spec))
    except ValueError:
        raise ExportError(f"model {str(spec)!r} is neither a checkpoint directory nor a preset (0.6b, 1.7b)") from None
    g = torch.Generator().manual_seed(seed)
    cp = MultiCodeDecoder(cfg).eval()
    with torch.no_grad():
        for t in cp.parameters():
            if t.dim() >= 2:
                t.copy_(torch.randn(t.shape, generator=g) * 0.02)
    c0 = nn.Embedding(talker.vocab_size, cfg.talker_hidden_size)
    with torch.no_grad():
        c0.weight.copy_(torch.randn(c0.weight.shape, generator=g) * 0.02)
    cp.set_c0_embedding(c0)
    return cp.to(dtype)
