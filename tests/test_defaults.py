"""The one N* chooser and the defaults module."""
from __future__ import annotations

import pytest

from rvqspec.core import defaults
from rvqspec.core.defaults import BUDGET, choose_n_star


def test_fastest_budget_wins_ties_to_the_smaller():
    assert choose_n_star({4: 1.2, 8: 1.5, 16: 1.5, 32: 0.9}) == 8


def test_only_available_budgets_are_chosen():
    assert choose_n_star({4: 1.2, 8: 1.5}, available=[4, 16]) == 4


def test_without_speedups_the_default_or_the_nearest():
    assert choose_n_star(None, [4, 16, 64]) == BUDGET
    assert choose_n_star({}, [4, 8, 32], default=16) == 8  # |8-16| = 8 < |32-16| = 16
    assert choose_n_star(None, [12, 20], default=16) == 12  # a tie goes to the smaller N
    assert choose_n_star(None) == BUDGET


def test_none_speedups_are_ignored():
    assert choose_n_star({4: None, 8: 0.7}, [4, 8]) == 8


def test_defaults_are_consistent():
    assert defaults.NUM_CODES == defaults.NUM_CODE_GROUPS - 1 == 15
    assert defaults.BUDGET in defaults.BUDGETS and set(defaults.TABLE2_BUDGETS) <= set(defaults.BUDGETS)
    assert set(defaults.DRAFTER_PREFERENCE) == set(defaults.DRAFTER_LABELS)
    assert defaults.DRAFTER_PREFERENCE[0] == "offsets"  # the seed's own method first


@pytest.mark.parametrize("bad", [{4: float("nan")}])
def test_nan_speedup_is_not_a_winner(bad):
    # NaN compares false with everything: it must not be chosen over a real value
    assert choose_n_star({**bad, 8: 1.0}) == 8
