"""MiniModelConfig.language_share: each training step's draws give a language its share
(rvqspec.mini.talker_train.draw_probabilities), and `mini build --language-share` parses it."""
from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.mini.talker_train import draw_probabilities

# a training set shaped like the six-language world with English enlarged: 7,000 English, 3,000 of
# each other language (shrunk 10x to keep the test fast)
LANGS = ["en"] * 700 + [lang for lang in ("de", "es", "ru", "ja", "zh") for _ in range(300)]


def test_shares_are_exact_and_uniform_within_a_language():
    p = draw_probabilities(LANGS, {"en": 0.5})
    langs = np.asarray(LANGS)
    assert p.shape == (len(LANGS),) and np.isclose(p.sum(), 1.0)
    assert np.isclose(p[langs == "en"].sum(), 0.5)
    for lang in ("de", "es", "ru", "ja", "zh"):  # the rest in proportion to utterances: equal here
        assert np.isclose(p[langs == lang].sum(), 0.1)
    assert np.ptp(p[langs == "en"]) == 0 and np.ptp(p[langs == "de"]) == 0


def test_sampled_batches_follow_the_share_and_uniform_draws_do_not():
    """Batches of 8 drawn without replacement as the training loop draws them: over 2,000 steps
    (16,000 draws) English's share is within 0.02 of 0.5 (binomial sd 0.004); the negative control,
    uniform draws, gives English's utterance share 700/2200 = 0.32 instead."""
    langs = np.asarray(LANGS)
    p = draw_probabilities(LANGS, {"en": 0.5})

    def english_share(probs):
        rng = np.random.default_rng(0)
        idx = np.concatenate([rng.choice(len(LANGS), size=8, replace=False, p=probs) for _ in range(2000)])
        return float((langs[idx] == "en").mean())

    assert abs(english_share(p) - 0.5) < 0.02
    assert abs(english_share(None) - 700 / 2200) < 0.02


@pytest.mark.parametrize("share, match", [({"xx": 0.5}, r"names \['xx'\]"), ({"en": 1.2}, "at most 1"),
                                          ({"en": -0.1}, ">= 0")])
def test_bad_shares_are_named(share, match):
    with pytest.raises(ValueError, match=match):
        draw_probabilities(LANGS, share)


def test_all_languages_named_must_sum_to_one():
    with pytest.raises(ValueError, match="sums to 0.5"):
        draw_probabilities(["en", "de"], {"en": 0.25, "de": 0.25})
    assert np.allclose(draw_probabilities(["en", "de", "de"], {"en": 0.5, "de": 0.5}), [0.5, 0.25, 0.25])


@pytest.mark.parametrize("flag, value", [("--language-share", "en=lots"), ("--language-share", "=0.5"),
                                         ("--model-train-sentences", "en=-3"), ("--codec-share", "en=x")])
def test_cli_bad_value_is_one_line_and_exit_2(tmp_path, flag, value):
    res = CliRunner().invoke(app, ["mini", "build", "--toy", "--out-dir", str(tmp_path / "mini"),
                                   "--runs", str(tmp_path / "runs"), flag, value])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"error: {flag} {value!r}: expected LANG=VALUE with a non-negative number, e.g. en=0.5"]
    assert not (tmp_path / "mini").exists()
