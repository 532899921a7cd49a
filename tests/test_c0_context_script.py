"""scripts/c0_context_predictability.py: how much of c0 the surrounding text tokens fix (docs/design.md,
"Intelligibility gates on the v4 recipe")."""
from __future__ import annotations

import numpy as np

from _scripts import load_script


def test_contexts_are_the_tokens_either_side_padded_at_the_ends():
    ctx = load_script("c0_context_predictability").contexts
    tokens = np.array([7, 8, 9])  # (T,)
    assert ctx(tokens, 0) == [(7,), (8,), (9,)]
    assert ctx(tokens, 1) == [(-1, 7, 8), (7, 8, 9), (8, 9, -1)]
    assert ctx(tokens, 2)[0] == (-1, -1, 7, 8, 9) and len(ctx(tokens, 2)) == 3


def test_one_token_apart_makes_another_context():
    ctx = load_script("c0_context_predictability").contexts
    a, b = ctx(np.array([1, 2, 3]), 1), ctx(np.array([1, 2, 4]), 1)
    assert a[0] == b[0] and a[1] != b[1]  # negative control: the centre frame sees the changed neighbour
