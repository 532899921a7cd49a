"""The project's defaults, each defined once; the CLI, the benches and the workbench read them here.

Seed 000 (RVQ position-aware speculative decoding): the code predictor completes NUM_CODES codes
(c1..c15) after the talker's c0; drafts look K codes ahead (§2.2, K = 3 trained offsets); trees are
grown to a node budget N (§2.3), BUDGET by default and BUDGETS when a sweep is asked for.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

NUM_CODE_GROUPS = 16   # RVQ levels per 80 ms frame kept by the 12 Hz tokenizer (c0..c15)
NUM_CODES = NUM_CODE_GROUPS - 1  # codes the code predictor emits per frame (c1..c15)
K = 3                  # draft lookahead = trained offsets = maximum tree depth (seed 000 §2.2)
BUDGET = 16            # default tree node budget N (seed 000 Table 2's middle column)
BUDGETS = (4, 8, 16, 32, 64)  # budget sweep of the benches and profiles
TABLE2_BUDGETS = (4, 16, 64)  # the budgets Table 2 reports

# Drafter names (CLI and bench keys) -> seed 000 Table 2 label.
DRAFTER_LABELS = {"reused": "(i) reused LM heads", "medusa": "(ii) Medusa heads", "offsets": "(iii) position offsets",
                  "per_position": "(iv) per-position offsets", "low_rank": "(v) low-rank offsets (ours)",
                  "shared_low_rank": "(v') shared offsets + rank-1 map (ours)"}
# Which committed drafter a command uses when none is named: the seed's own method (iii) first.
DRAFTER_PREFERENCE = ("offsets", "shared_low_rank", "low_rank", "per_position", "medusa", "reused")

# The six languages of seed 000 Table 3 (Fleurs): the mini world speaks them, the CLI checks them.
LANGUAGES = ("en", "de", "es", "ru", "ja", "zh")

# Deployed code-predictor sampling (the checkpoint's subtalker_* generation config).
TEMPERATURE = 0.9
TOP_K = 50
TOP_P = 1.0


def choose_n_star(speedup: Mapping[int, float] | None, available: Iterable[int] | None = None,
                  default: int = BUDGET) -> int:
    """The operating tree budget N* (seed 000 §3.4: the device's fastest tree).

    With measured (or projected) speed-ups per budget: the budget of the highest finite speed-up among
    those `available` (ties go to the smaller N, the cheaper call). Without any: `default` when it is
    available, else the available budget nearest to it (the smaller on a tie)."""
    avail = None if available is None else {int(n) for n in available}
    scored = {int(n): float(s) for n, s in (speedup or {}).items()
              if s is not None and math.isfinite(s) and (avail is None or int(n) in avail)}
    if scored:
        return max(scored, key=lambda n: (scored[n], -n))
    if not avail or default in avail:
        return int(default)
    return min(avail, key=lambda n: (abs(n - default), n))
