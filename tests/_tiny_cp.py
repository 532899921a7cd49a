"""Tiny random code predictors for the spec tests (no weights needed)."""
from __future__ import annotations

import torch

from rvqspec.core.config import CodePredictorConfig
from rvqspec.core.model import MultiCodeDecoder, causal_mask


def tiny_code_predictor(vocab: int = 16, hidden: int = 32, layers: int = 2, talker_hidden: int | None = None,
                        seed: int = 0, head_scale: float = 3.0, c0_vocab: int | None = None) -> MultiCodeDecoder:
    """Random MultiCodeDecoder with a random c0 embedding of `c0_vocab` codes (default: `vocab`; level 0
    may have its own codebook size); LM heads scaled so that distributions are peaked enough for
    drafts to be accepted sometimes."""
    torch.manual_seed(seed)
    cfg = CodePredictorConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                              num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=hidden // 4, talker_hidden_size=talker_hidden or hidden)
    cp = MultiCodeDecoder(cfg).eval()
    cp.set_c0_embedding(torch.nn.Embedding(c0_vocab or vocab, cfg.talker_hidden_size))
    with torch.no_grad():
        for h in cp.lm_head:
            h.weight.mul_(head_scale)
    return cp


def randomize_drafter(drafter, seed: int = 0, scale: float = 0.5):
    """Non-zero drafter parameters so that each kind drafts differently."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale / max(p.shape[-1], 1) ** 0.5)
    return drafter


def random_frames(model_dir=None, split="eval", language=None, max_utterances=None, vocab=16, talker_hidden=48):
    """A frames function for CLI tests: random (talker_hidden (T, E), codes (T, 16)) utterances,
    seeded by split and language so that different languages differ."""
    seed = sum(map(ord, f"{split}/{language}"))
    g = torch.Generator().manual_seed(seed)
    n = max_utterances or 3
    return [(torch.randn(8 + i, talker_hidden, generator=g), torch.randint(0, vocab, (8 + i, 16), generator=g))
            for i in range(n)]


@torch.no_grad()
def teacher_forced(cp, talker_hidden, c0, codes):
    """Run [h, c0, codes...] at positions 0..L-1, one plain forward (a reference independent of the
    decoders under test) -> (hidden (1, L, H), cache)."""
    codes = list(codes)
    L = 2 + len(codes)
    parts = [talker_hidden, cp.c0_embedding(c0)]
    for g, c in enumerate(codes, start=1):
        parts.append(cp.model.codec_embedding[g - 1](torch.tensor([[c]])))
    x = torch.cat(parts, 1)  # (1, L, E)
    pos = torch.arange(L).view(1, L)
    cache = cp.new_cache(1, L)
    hidden, _ = cp(x, pos, cache, torch.arange(L), causal_mask(pos, L))
    return hidden, cache
