"""rvqspec.mini.corpus.clips_with_share: the clip selection that gives one language a share of the
codec fit (scripts/codec_language_gate.py, BuildConfig.codec_share; docs/design.md, "Candidate v5")."""
from __future__ import annotations

import numpy as np
import pytest

from rvqspec.mini.build import BuildConfig
from rvqspec.mini.corpus import clips_with_share


def select(languages, share, rng, en_clips=None):
    return clips_with_share(languages, "en", share, rng, en_clips)


def test_english_share_and_equal_others():
    langs = ["en"] * 60 + ["de"] * 100 + ["zh"] * 100
    pick = select(langs, 0.5, np.random.default_rng(0))
    chosen = np.asarray(langs)[pick]
    assert (chosen == "en").sum() == 60 and (chosen == "de").sum() == 30 and (chosen == "zh").sum() == 30
    assert np.all(np.diff(pick) > 0)  # sorted, no repeats
    # a share below the languages' own gives the others more clips, capped at what they have
    wide = np.asarray(langs)[select(langs, 0.2, np.random.default_rng(0))]
    assert (wide == "en").sum() == 60 and (wide == "de").sum() == 100


def test_equal_share_control_draws_english_too():
    langs = ["en"] * 60 + ["de"] * 100 + ["zh"] * 100
    chosen = np.asarray(langs)[select(langs, 1 / 3, np.random.default_rng(0), en_clips=40)]
    assert (chosen == "en").sum() == 40 and (chosen == "de").sum() == 40 and (chosen == "zh").sum() == 40


def test_another_language_can_take_the_share():
    langs = ["en"] * 60 + ["de"] * 100 + ["zh"] * 100
    chosen = np.asarray(langs)[clips_with_share(langs, "de", 0.5, np.random.default_rng(0))]
    assert (chosen == "de").sum() == 100 and (chosen == "en").sum() == 50 and (chosen == "zh").sum() == 50


@pytest.mark.parametrize("share", [{"en": 0.5, "de": 0.2}, {"en": 1.0}, {"en": 0.0}])
def test_build_codec_share_names_one_language_inside_0_1(share):
    with pytest.raises(ValueError, match="codec share must name one language"):
        BuildConfig(codec_share=share)
