"""The learning-rate schedule every mini training recipe uses (the joint model, the predictor's
refinement on a frozen talker, SPADE's distillation): linear warm-up, then cosine decay to 0."""
from __future__ import annotations

import math
from typing import Callable


def warmup_cosine(warmup: int, steps: int) -> Callable[[int], float]:
    """The LambdaLR factor of step s: min(1, (s + 1) / warmup), times a cosine from 1 at s = 0 to 0
    at s = steps (held at 0 after)."""
    return lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
