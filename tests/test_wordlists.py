"""Broad-vocabulary sentences (rvqspec.mini.wordlists) and their share of the corpus texts."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from rvqspec.mini.speech import LANGUAGES, text_to_phonemes
from rvqspec.mini.text import CorpusConfig, make_texts, sentence, sentence_length_ok
from rvqspec.mini.wordlists import broad_sentence, speakable, word_list

KANA = re.compile(r"^[\u3041-\u3096\u30a1-\u30fa\u30fc。？]+$")
HANZI = re.compile(r"^[\u4e00-\u9fff。？]+$")


def _words(sents, lang):
    if lang == "ja":  # a syllabary: kana pairs stand in for words
        return {s[i:i + 2] for s in sents for i in range(len(s) - 1)}
    if lang == "zh":
        return {ch for s in sents for ch in s}
    return {w.strip(".,?¿").lower() for s in sents for w in s.split()}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_broad_sentences_cover_far_more_vocabulary_than_the_grammar(lang):
    rng = np.random.default_rng(0)
    broad = [broad_sentence(lang, rng) for _ in range(300)]
    rng = np.random.default_rng(0)
    grammar = [sentence(lang, rng) for _ in range(300)]
    # the grammar is the negative control: its few hundred words repeat, the lists' do not
    b, g = _words(broad, lang), _words(grammar, lang)
    factor = 1.5 if lang == "zh" else 2 if lang == "ja" else 3
    assert len(b) > factor * len(g), (lang, len(b), len(g))
    if lang == "ja":
        assert all(KANA.match(s) for s in broad)  # espeak-ng's ja voice reads kana only
    if lang == "zh":
        assert all(HANZI.match(s) for s in broad)
    assert [broad_sentence(lang, np.random.default_rng(5)) for _ in range(3)] == \
           [broad_sentence(lang, np.random.default_rng(5)) for _ in range(3)]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_list_words_are_spoken_in_their_own_voice(lang):
    wl = word_list(lang)
    assert len(wl.content) > (4000 if lang == "ja" else 10000)
    sample = np.random.default_rng(1).choice(len(wl.content), 60, replace=False)
    for i in sample:
        names = text_to_phonemes(wl.content[i], lang)
        assert names and not any(n.startswith("(") for n in names), (wl.content[i], names)


def test_speakable_rejects_what_espeak_cannot_read():
    # negative controls: a lone length mark and "ヶ" make the ja voice switch to English
    assert not speakable("ー", "ja") and not speakable("ヶ", "ja")
    assert speakable("カメラ", "ja") and speakable("ねこ", "ja") and speakable("图书馆", "zh")


def test_corpus_mixes_grammar_and_word_list_sentences():
    cfg = dataclasses.replace(CorpusConfig.toy(), model_train_per_language=40)
    items = make_texts(cfg)
    grammar_only = make_texts(dataclasses.replace(cfg, broad_fraction=0.0))
    assert items == make_texts(cfg)  # deterministic
    en = [i.text for i in items if i.language == "en"]
    en_grammar = [i.text for i in grammar_only if i.language == "en"]
    assert all(sentence_length_ok(t, "en") for t in en)
    # about half the sentences come from the word lists: many more distinct words than the grammar
    assert len(_words(en, "en")) > 1.5 * len(_words(en_grammar, "en"))
    with pytest.raises(ValueError, match="'fr'"):
        word_list("fr")
