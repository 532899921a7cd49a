"""A text-embedding table trained as a sum of quarter-frame phoneme parts (a training-time option).

The talker's input token is a whole frame's phonemes: `en:k w` (the pair at 1/4 and 3/4 of the
frame) or, with `points = 4`, `en:k k w w`. Each token gets its own row in `text_embedding`, so a
pair seen a handful of times gets a row trained on a handful of frames, while its two phonemes were
each heard thousands of times. The real talker does not have this problem: its text embedding comes
from a pretrained language model, where related tokens already sit near each other.

Here the (V, D) table is parametrized while training as

    row(token) = sum over quarters q of E[q, phoneme of the token at quarter q]

with E (4, P, D) learned: a single `en:k` is k in all four quarters, a pair `en:k w` is (k, k, w, w),
a quarter token is itself, and each special token is its own part. After training the sum is
written back into the plain table (`materialize`), so the checkpoint keeps the official layout and
every later consumer sees an ordinary embedding.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.utils import parametrize

from rvqspec.mini.phonemes import SPECIAL_TOKENS

QUARTERS = 4
NO_PHONEME = "-"  # a quarter before the first phoneme (PhonemeTokenizer._quad_key writes "-")


def quarter_parts(token: str) -> tuple[str, str, str, str]:
    """The part at each quarter of a token's frame: `en:k` -> (en:k,) * 4, `en:k w` -> (en:k, en:k,
    en:w, en:w), `en:k k w -` -> itself with `-` as `en:-`; a special token is its own part."""
    if token in SPECIAL_TOKENS or ":" not in token:
        return (token,) * QUARTERS
    lang, names = token.split(":", 1)
    names = names.split(" ")
    if len(names) == 1:
        names = names * QUARTERS
    elif len(names) == 2:
        names = [names[0], names[0], names[1], names[1]]
    elif len(names) != QUARTERS:
        raise ValueError(f"token {token!r}: expected 1, 2 or {QUARTERS} phonemes")
    return tuple(f"{lang}:{n}" for n in names)


def part_index(tokens: list[str]) -> tuple[torch.Tensor, list[str]]:
    """(V, 4) row of the part table for each token's quarter q (quarter q's parts are offset by
    q * P, so a phoneme at 1/8 and the same phoneme at 7/8 are different rows), and the P part names."""
    parts = [quarter_parts(t) for t in tokens]
    names = sorted({p for ps in parts for p in ps})
    at = {n: i for i, n in enumerate(names)}
    P = len(names)
    idx = torch.tensor([[q * P + at[p] for q, p in enumerate(ps)] for ps in parts], dtype=torch.long)  # (V, 4)
    return idx, names


class QuarterSum(nn.Module):
    """Parametrization (4 * P, D) -> (V, D): each token's row is the sum of its four quarter parts."""

    def __init__(self, index: torch.Tensor, generator: torch.Generator):
        super().__init__()
        self.register_buffer("index", index)  # (V, 4)
        self.generator = generator

    def forward(self, parts: torch.Tensor) -> torch.Tensor:
        return parts[self.index].sum(1)  # (V, 4, D) -> (V, D)

    def right_inverse(self, table: torch.Tensor) -> torch.Tensor:
        # a fresh part table whose sums have the table's scale (four parts per row: half the std each)
        n_parts = int(self.index.max()) + 1
        std = float(table.std()) / 2
        return torch.randn(n_parts, table.shape[1], generator=self.generator, dtype=table.dtype) * std  # (4P, D)


def factorize(embedding: nn.Embedding, tokens: list[str], generator: torch.Generator) -> int:
    """Train `embedding` (V = len(tokens) rows) through quarter parts from now on. Returns P."""
    if embedding.num_embeddings != len(tokens):
        raise ValueError(f"text embedding has {embedding.num_embeddings} rows for {len(tokens)} tokens")
    index, names = part_index(tokens)
    parametrize.register_parametrization(embedding, "weight", QuarterSum(index, generator))
    return len(names)


def materialize(embedding: nn.Embedding) -> None:
    """Write the parts' sums into the plain (V, D) table and drop the parametrization (a no-op if none)."""
    if parametrize.is_parametrized(embedding, "weight"):
        parametrize.remove_parametrizations(embedding, "weight", leave_parametrized=True)
