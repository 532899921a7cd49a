"""scripts/codec_language_gate.py: the clip selection that gives English a share of the codec fit
(docs/design.md, "Candidate v5")."""
from __future__ import annotations

import numpy as np

from _scripts import load_script


def test_english_share_and_equal_others():
    select = load_script("codec_language_gate").select_clips
    langs = ["en"] * 60 + ["de"] * 100 + ["zh"] * 100
    pick = select(langs, 0.5, np.random.default_rng(0))
    chosen = np.asarray(langs)[pick]
    assert (chosen == "en").sum() == 60 and (chosen == "de").sum() == 30 and (chosen == "zh").sum() == 30
    assert np.all(np.diff(pick) > 0)  # sorted, no repeats
    # a share below the languages' own gives the others more clips, capped at what they have
    wide = np.asarray(langs)[select(langs, 0.2, np.random.default_rng(0))]
    assert (wide == "en").sum() == 60 and (wide == "de").sum() == 100


def test_equal_share_control_draws_english_too():
    select = load_script("codec_language_gate").select_clips
    langs = ["en"] * 60 + ["de"] * 100 + ["zh"] * 100
    chosen = np.asarray(langs)[select(langs, 1 / 3, np.random.default_rng(0), en_clips=40)]
    assert (chosen == "en").sum() == 40 and (chosen == "de").sum() == 40 and (chosen == "zh").sum() == 40
