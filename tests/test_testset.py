"""The hand-written test set (data/testset): present, large enough, in the right scripts, spoken by
espeak-ng in each language's own voice, and outside every corpus generator."""
from __future__ import annotations

import re

import pytest

from rvqspec.measure.metrics import normalize
from rvqspec.mini.phonemes import text_phonemes
from rvqspec.mini.speech import LANGUAGES, text_to_phonemes
from rvqspec.mini.testset import MIN_SENTENCES, TESTSET_DIR, load_testset
from rvqspec.mini.text import CorpusConfig, make_texts

KANJI_OR_LATIN = re.compile(r"[\u4e00-\u9fffA-Za-z0-9]")
HANZI = re.compile(r"[\u4e00-\u9fff]")


def test_counts_scripts_and_uniqueness():
    sets = load_testset()
    assert set(sets) == set(LANGUAGES)
    for lang, texts in sets.items():
        assert len(texts) >= MIN_SENTENCES[lang], lang
        assert len({normalize(t, lang) for t in texts}) == len(texts), f"{lang}: duplicate sentences"
    assert MIN_SENTENCES["en"] >= 30 and all(MIN_SENTENCES[x] >= 10 for x in LANGUAGES)
    assert not any(KANJI_OR_LATIN.search(t) for t in sets["ja"])  # kana only
    assert all(HANZI.search(t) and not re.search(r"[A-Za-z0-9]", t) for t in sets["zh"])
    assert all(len(t.split()) >= 6 for t in sets["en"])  # ordinary sentences, not phrases


def test_espeak_reads_every_sentence_in_its_language():
    for lang, texts in load_testset().items():
        for t in texts:
            names = text_to_phonemes(t, lang)
            assert not any(n.startswith("(") for n in names), (lang, t, names)  # no voice switch
            assert len(text_phonemes(t, lang)) >= 10, (lang, t)


@pytest.mark.slow
def test_no_sentence_comes_from_the_corpus_generator():
    # the default corpus (every split, grammar and word-list sentences) never produces a test sentence
    corpus = {(i.language, normalize(i.text, i.language)) for i in make_texts(CorpusConfig())}
    assert len(corpus) > 19000
    for lang, texts in load_testset().items():
        for t in texts:
            assert (lang, normalize(t, lang)) not in corpus, (lang, t)


def test_missing_file_is_named(tmp_path):
    (tmp_path / "en.txt").write_text("A sentence.\n")
    with pytest.raises(FileNotFoundError, match="de.txt"):
        load_testset(tmp_path, ("en", "de"))
    assert load_testset(tmp_path, ("en",)) == {"en": ["A sentence."]}
    assert TESTSET_DIR.name == "testset"
