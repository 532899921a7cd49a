"""The c0 codebook grouped by sound, and the talker's loss on the sound its c0 law names
(issue 14, intelligibility; docs/design.md "A sound-level term in the talker's c0 loss").

Level 0 is phonetic (CodecConfig.level0_lda), so a c0 code nearly names a sound: sampling another
code of the same sound costs detail, a code of another sound costs a phoneme. Cross-entropy on c0
splits into the sound part and the code-within-sound part; `sound_group_loss` is the first alone
(the log of the c0 law's mass on the true code's group), which MiniModelConfig.c0_sound_weight adds
to the talker's loss to weigh getting the sound right above getting the exact code right. Groups
come from the training data only: a code's sound is the majority centre phoneme of the training
frames it takes (`rvqspec.mini.phonemes.centre_phoneme`). Measured at gate scale, the term moves
mass between codes of one sound and does not make free-running speech more intelligible (the
talker's draws already carry the frame's sound as often as the corpus's codes do); it stays off
(weight 0) in the build.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import torch

from rvqspec.mini.phonemes import centre_phoneme


def code_sound_counts(texts: Sequence[np.ndarray], codes: Sequence[np.ndarray], tokens: Sequence[str],
                      codebook_size: int) -> list[Counter]:
    """Per c0 code (K of them), how many frames of each centre phoneme take it: frame tokens (T,) and
    codes (T, 16) per utterance, `tokens` the tokenizer's token strings."""
    sound = np.array([centre_phoneme(t) for t in tokens], dtype=object)  # token id -> sound
    counts = [Counter() for _ in range(codebook_size)]
    for t, c in zip(texts, codes):  # (T,), (T, 16)
        for s, c0 in zip(sound[np.asarray(t)], np.asarray(c)[:, 0]):
            counts[int(c0)][s] += 1
    return counts


def code_sound_groups(texts: Sequence[np.ndarray], codes: Sequence[np.ndarray], tokens: Sequence[str],
                      codebook_size: int) -> torch.Tensor:
    """(K,) long group id per c0 code: codes whose training frames' majority centre phoneme is the
    same share a group; a code no training frame takes is a group of its own."""
    counts = code_sound_counts(texts, codes, tokens, codebook_size)
    names = [cnt.most_common(1)[0][0] if cnt else f"<unused {k}>" for k, cnt in enumerate(counts)]
    ids = {n: i for i, n in enumerate(dict.fromkeys(names))}
    return torch.tensor([ids[n] for n in names], dtype=torch.long)  # (K,)


def sound_group_loss(logits: torch.Tensor, target: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Mean -log of the c0 law's mass on the target code's group: logits (N, V) over the talker's
    vocabulary (the K codes first, then control tokens), target (N,) codes < K, groups (K,)."""
    K = groups.shape[0]
    p = logits.float().log_softmax(-1)[:, :K].exp()  # (N, K)
    mass = torch.zeros(p.shape[0], int(groups.max()) + 1, dtype=p.dtype).index_add_(1, groups, p)  # (N, S)
    return -mass.gather(1, groups[target].view(-1, 1)).clamp_min(1e-12).log().mean()
