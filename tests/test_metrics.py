"""rvqspec.measure.metrics: normalization and corpus-level WER/CER on hand-checked cases."""
from __future__ import annotations

import math

import pytest

from rvqspec.measure.metrics import aggregate, is_character_language, normalize, score


def test_normalize_case_punctuation_brackets_width():
    assert normalize("Hello, World!  (aside) [noise]  <unk> it's") == "hello world it s"
    # NFKC folds full-width letters; lowercase after folding.
    assert normalize("ＡＢＣ　Def") == "abc def"
    assert normalize("¿Qué tal?", "es") == "qué tal"
    assert normalize("Привет, мир!", "ru") == "привет мир"
    # ja/zh drop all spaces: their scores are per character.
    assert normalize("今天 天气、很好。", "zh") == "今天天气很好"
    assert normalize("きょう は いい てんき です。", "ja") == "きょうはいいてんきです"
    assert is_character_language("zh-CN") and is_character_language("ja")
    assert not is_character_language("en")


def test_insertion_deletion_substitution_by_hand():
    # one inserted word against a 3-word reference: 1/3
    s = score(["the cat sat"], ["the cat sat down"], "en")
    assert s["wer"] == pytest.approx(1 / 3)
    assert s["metric"] == "wer" and s["error"] == s["wer"] and s["n"] == 1
    # one deleted word: 1/3
    assert score(["the cat sat"], ["the sat"], "en")["wer"] == pytest.approx(1 / 3)
    # two substituted words out of four: 2/4
    assert score(["a b c d"], ["a x c y"], "en")["wer"] == pytest.approx(0.5)
    # characters: "abc d" has 5 characters (the space counts); one substitution -> 1/5
    assert score(["abc d"], ["abd d"], "en")["cer"] == pytest.approx(1 / 5)


def test_case_and_punctuation_do_not_count():
    s = score(["Hello, World!"], ["hello world"], "en")
    assert s["wer"] == 0.0 and s["cer"] == 0.0


def test_corpus_level_aggregation_is_not_a_mean_of_rates():
    refs, hyps = ["a b", "c d e f"], ["a", "c d e f"]
    s = score(refs, hyps, "en")
    # 1 deleted word over 6 reference words, not (1/2 + 0/4) / 2
    assert s["wer"] == pytest.approx(1 / 6)
    assert s["word_errors"] == 1 and s["ref_words"] == 6
    parts = [score(refs[:1], hyps[:1], "en"), score(refs[1:], hyps[1:], "en")]
    combined = aggregate(parts, "en")
    assert combined["wer"] == pytest.approx(s["wer"]) and combined["n"] == 2
    assert combined["cer"] == pytest.approx(s["cer"])


def test_cjk_scores_characters():
    # "今天天气很好" has 6 characters; "汽" for "气" is one substitution -> 1/6
    s = score(["今天 天气很好。"], ["今天天汽很好"], "zh")
    assert s["cer"] == pytest.approx(1 / 6)
    assert s["wer"] == s["cer"] and s["metric"] == "cer" and s["error"] == s["cer"]
    # kana: "きょうはいいてんきです" (11 characters) with one character dropped -> 1/11
    s = score(["きょう は いい てんき です"], ["きょうはいてんきです"], "ja")
    assert s["cer"] == pytest.approx(1 / 11)


def test_empty_hypothesis_is_all_deletions():
    s = score(["one two three"], [""], "en")
    assert s["wer"] == 1.0 and s["cer"] == 1.0


def test_bad_input_errors_name_the_problem():
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        score(["a", "b"], ["a"], "en")
    with pytest.raises(ValueError, match="reference 1"):
        score(["a", "?!"], ["a", "b"], "en")
    with pytest.raises(ValueError, match="no utterances"):
        score([], [], "en")
    assert math.isnan(aggregate([{"word_errors": 0, "char_errors": 0, "ref_words": 0,
                                  "ref_chars": 0, "n": 0}], "en")["wer"])
