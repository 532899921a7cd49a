"""PER (phoneme error rate): the edit alignment by hand, corpus aggregation, espeak-ng references,
and negative controls (unrelated or shuffled phonemes score high; homophones score zero)."""
from __future__ import annotations

import numpy as np
import pytest

from rvqspec.measure.metrics import aggregate, edit_counts, phoneme_score, score
from rvqspec.mini.phonemes import clean_phonemes, text_phonemes


def test_edit_counts_by_hand():
    c = edit_counts(list("kitten"), list("sitting"))  # the textbook case: 2 substitutions, 1 insertion
    assert (c.substitutions, c.deletions, c.insertions, c.length) == (2, 0, 1, 6)
    assert edit_counts(["a", "b"], ["a", "c"]).substitutions == 1  # a substitution, not del + ins
    assert edit_counts(["a", "b", "c"], []).deletions == 3
    assert edit_counts([], ["x", "y"]).insertions == 2
    assert edit_counts(["aI", "n"], ["aI", "n"]).errors == 0
    # multi-character symbols are single tokens: "aI" vs "a" "I" is 1 substitution + 1 insertion
    c = edit_counts(["aI"], ["a", "I"])
    assert c.errors == 2 and c.length == 1


def test_edit_counts_matches_a_brute_force_distance():
    rng = np.random.default_rng(0)

    def distance(a, b):  # plain Levenshtein, full matrix
        d = np.zeros((len(a) + 1, len(b) + 1), int)
        d[:, 0], d[0, :] = range(len(a) + 1), range(len(b) + 1)
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (a[i - 1] != b[j - 1]))
        return d[-1, -1]

    for _ in range(200):
        a = list(rng.choice(list("abcd"), int(rng.integers(0, 9))))
        b = list(rng.choice(list("abcd"), int(rng.integers(0, 9))))
        assert edit_counts(a, b).errors == distance(a, b)


def test_phoneme_score_is_corpus_level_and_aggregates():
    refs, hyps = [["a", "b"], ["c"]], [["a"], ["c", "d"]]
    s = phoneme_score(refs, hyps)
    assert s["per"] == pytest.approx(2 / 3) and s["phoneme_errors"] == 2 and s["ref_phonemes"] == 3
    # aggregate() combines PER like WER: summed errors over summed lengths
    parts = [{**score(["x y"], ["x y"], "en"), **phoneme_score(refs[:1], hyps[:1])},
             {**score(["x"], ["x"], "en"), **phoneme_score(refs[1:], hyps[1:])}]
    assert aggregate(parts, "en")["per"] == pytest.approx(2 / 3)


def test_phoneme_score_bad_input_is_named():
    with pytest.raises(ValueError, match="2 references but 1"):
        phoneme_score([["a"], ["b"]], [["a"]])
    with pytest.raises(ValueError, match="reference 1 has no phonemes"):
        phoneme_score([["a"], []], [["a"], []])
    with pytest.raises(TypeError, match="utterance 0 is a string"):
        phoneme_score(["ab"], [["a"]])


def test_clean_phonemes_drops_stress_pauses_switches_and_tones():
    assert clean_phonemes(["'aI", ",oU", "_:", "_", "_|", "(en)", "k"], "en") == ["aI", "oU", "k"]
    assert clean_phonemes(["_j", ";", "@2"], "ja") == ["_j", ";", "@2"]  # phonemes, not pauses
    assert clean_phonemes(["th", "'Au55", "@:11"], "zh") == ["th", "Au", "@:"]


def test_espeak_references_sound_not_spelling():
    # homophones: different words and letters, the same phonemes (PER 0, WER 1)
    a, b = text_phonemes("I knew their son.", "en"), text_phonemes("Eye new there sun.", "en")
    assert phoneme_score([a], [b])["per"] == 0.0
    assert score(["I knew their son."], ["Eye new there sun."], "en")["wer"] == 1.0
    for lang, text in [("en", "The weather is nice today."), ("de", "Das Wetter ist heute schön."),
                       ("ru", "Сегодня хорошая погода."), ("ja", "きょうはいいてんきです。"),
                       ("zh", "今天天气很好。"), ("es", "Hoy hace buen tiempo.")]:
        ref = text_phonemes(text, lang)
        assert len(ref) >= 8, (lang, ref)
        assert phoneme_score([ref], [ref])["per"] == 0.0


def test_negative_controls_score_high():
    ref = text_phonemes("The library lends laptops to students who need them.", "en")
    other = text_phonemes("A quiet fox swam across the frozen river at dawn.", "en")
    assert phoneme_score([ref], [other])["per"] > 0.6  # an unrelated sentence
    rng = np.random.default_rng(0)
    shuffled = [ref[i] for i in rng.permutation(len(ref))]
    assert phoneme_score([ref], [shuffled])["per"] > 0.5  # the right phonemes in the wrong order
    assert phoneme_score([ref], [[]])["per"] == 1.0  # silence: all deletions
    one_off = ref[:3] + ref[4:]
    assert phoneme_score([ref], [one_off])["per"] == pytest.approx(1 / len(ref))  # sensitivity
