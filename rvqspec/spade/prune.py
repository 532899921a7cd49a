"""Structured depth pruning of the talker (seed 001 §2: drop whole decoder layers).

`prune_talker(talker, keep_layers)` builds a new `CodeDecoder` holding only the kept layers (in
their original order) with every other weight (embeddings, text projection, final norm, codec
head) copied; `select_layers(scores, depth)` keeps the `depth` most important layers under a
criterion (WLI or cosine, `rvqspec.spade.importance`). No adapters or new parameters are added
(seed 001: distillation only heals the retained weights).
"""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Mapping, Sequence

import torch

from rvqspec.core.model import CodeDecoder, Rope


def _check_keep(keep_layers: Sequence[int], num_layers: int) -> list[int]:
    keep = [int(i) for i in keep_layers]
    if not keep:
        raise ValueError("keep_layers is empty: a talker needs at least one decoder layer")
    bad = [i for i in keep if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"keep_layers {keep}: indices {bad} are outside 0..{num_layers - 1} "
                         f"(the talker has {num_layers} layers)")
    if len(set(keep)) != len(keep):
        raise ValueError(f"keep_layers {keep} has duplicates")
    if keep != sorted(keep):
        raise ValueError(f"keep_layers {keep} must be increasing (layers keep their original order)")
    return keep


def prune_talker(talker: CodeDecoder, keep_layers: Sequence[int]) -> CodeDecoder:
    """A new CodeDecoder with decoder layers `keep_layers` (increasing teacher indices) of `talker`;
    config.num_hidden_layers = len(keep_layers); all weights copied (the input is left untouched)."""
    keep = _check_keep(keep_layers, talker.config.num_hidden_layers)
    cfg = replace(copy.deepcopy(talker.config), num_hidden_layers=len(keep))
    p = next(talker.parameters())
    with torch.device("meta"):  # no random init of weights we overwrite anyway
        student = CodeDecoder(cfg)
    sd = talker.state_dict()
    new_sd = {}
    for name, value in student.state_dict().items():
        src = name
        if name.startswith("model.layers."):
            j, rest = name[len("model.layers."):].split(".", 1)
            src = f"model.layers.{keep[int(j)]}.{rest}"
        new_sd[name] = sd[src].detach().clone()  # (same shape as in the teacher)
    student.load_state_dict(new_sd, strict=True, assign=True)
    # non-persistent RoPE buffer: rebuild on the real device

    student.rope = Rope(cfg.head_dim, cfg.rope_theta).to(p.device)
    student.train(talker.training)
    return student.to(device=p.device)


def select_layers(scores: Sequence | Mapping[int, object], depth: int) -> list[int]:
    """Keep the `depth` layers with the highest importance (ties: the earlier layer is kept);
    returned in increasing order. `scores[i]` is layer i's importance (higher = more important)."""
    s = dict(scores) if isinstance(scores, Mapping) else dict(enumerate(scores))
    n = len(s)
    if sorted(s) != list(range(n)):
        raise ValueError(f"importance scores must cover layers 0..{n - 1}, got keys {sorted(s)}")
    if not 1 <= depth <= n:
        raise ValueError(f"target depth {depth} must be in 1..{n}")
    # Python's sort is stable, also with reverse=True: equal scores keep the earlier layer first.
    # A score may be a tuple, compared lexicographically (WLI: (WER increase, CER increase)).
    ranked = sorted(range(n), key=lambda i: s[i], reverse=True)
    return sorted(ranked[:depth])


def default_depth(num_layers: int) -> int:
    """Seed 001 halves the depth (24 -> 12 for CosyVoice 2, 16 -> 8 for LLaSA)."""
    return max(1, num_layers // 2)


def count_parameters(module: torch.nn.Module) -> int:
    return sum(t.numel() for t in module.parameters())
