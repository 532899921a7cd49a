"""Sentence grammars and split construction of the mini world (rvqspec.mini.text)."""
import re

import numpy as np
import pytest

from rvqspec.mini.text import CorpusConfig, LANGUAGES, make_texts, sentence, sentence_length_ok

SCRIPT = {  # a character every sentence of the language must contain
    "ru": re.compile(r"[\u0400-\u04FF]"),
    "ja": re.compile(r"[\u3040-\u30FF]"),
    "zh": re.compile(r"[\u4E00-\u9FFF]"),
}
KANJI_OR_LATIN = re.compile(r"[\u4E00-\u9FFFA-Za-z]")


def test_sentences_are_deterministic_and_seed_dependent():
    for lang in LANGUAGES:
        a = [sentence(lang, np.random.default_rng(3)) for _ in range(1)]
        b = [sentence(lang, np.random.default_rng(3)) for _ in range(1)]
        assert a == b
        r1, r2 = np.random.default_rng(1), np.random.default_rng(2)
        s1 = [sentence(lang, r1) for _ in range(20)]
        s2 = [sentence(lang, r2) for _ in range(20)]
        assert s1 != s2


@pytest.mark.parametrize("lang", LANGUAGES)
def test_sentences_respect_length_script_and_variety(lang):
    rng = np.random.default_rng(0)
    sents = [sentence(lang, rng) for _ in range(400)]
    assert all(sentence_length_ok(s, lang) for s in sents)
    assert len(set(sents)) > 350  # the grammar is far from exhausted at this size
    if lang in SCRIPT:
        assert all(SCRIPT[lang].search(s) for s in sents)
    if lang == "ja":  # espeak-ng's ja voice reads kana only
        assert not any(KANJI_OR_LATIN.search(s) for s in sents)
    if lang not in ("ja", "zh"):
        words = {w.strip(".,?¿!").lower() for s in sents for w in s.split()}
        assert len(words) > 150, f"{lang}: only {len(words)} distinct words"
        lengths = [len(s.split()) for s in sents]
        assert 4 <= min(lengths) and max(lengths) <= 12
    else:
        chars = {ch for s in sents for ch in s}
        assert len(chars) > 100


def test_unknown_language_is_named():
    with pytest.raises(ValueError, match="'fr'"):
        sentence("fr", np.random.default_rng(0))


def test_splits_sizes_languages_and_disjoint_texts():
    cfg = CorpusConfig(model_train_per_language=30, train=20, validation=5, calibration=5, eval_per_language=4)
    items = make_texts(cfg)
    ids = [i.id for i in items]
    assert len(ids) == len(set(ids))
    for lang in LANGUAGES:
        per_split = {}
        for i in items:
            if i.language == lang:
                per_split.setdefault(i.split, set()).add(i.text)
        assert len(per_split["model_train"]) == 30 and len(per_split["eval"]) == 4
        if lang == "en":
            assert len(per_split["train"]) == 20 and len(per_split["calibration"]) == 5
        else:
            assert set(per_split) == {"model_train", "eval"}  # drafter/calibration splits are English only
        splits = list(per_split.values())
        for a in range(len(splits)):
            for b in range(a + 1, len(splits)):
                assert not (splits[a] & splits[b]), f"{lang}: texts shared between splits"
    assert make_texts(cfg) == items  # deterministic given the config seed
    assert make_texts(CorpusConfig(**{**cfg.__dict__, "seed": 1})) != items


def test_resizing_model_train_keeps_held_out_splits():
    small = make_texts(CorpusConfig.toy())
    big = make_texts(CorpusConfig(**{**CorpusConfig.toy().__dict__, "model_train_per_language": 20}))
    held = lambda items: [(i.id, i.text) for i in items if i.split != "model_train"]
    assert held(small) == held(big)


def test_one_language_resized_keeps_the_rest():
    """CorpusConfig.model_train_by_language: English's model_train grows, its first sentences and
    every held-out split stay, the other languages do not move; an unknown language is named."""
    base = CorpusConfig.toy()
    small = make_texts(base)
    big = make_texts(CorpusConfig(**{**base.__dict__, "model_train_by_language": {"en": 15}}))
    rows = lambda items, pred: [(i.id, i.text) for i in items if pred(i)]
    assert rows(small, lambda i: i.split != "model_train" or i.language != "en") == \
        rows(big, lambda i: i.split != "model_train" or i.language != "en")
    en_small = rows(small, lambda i: i.split == "model_train" and i.language == "en")
    en_big = rows(big, lambda i: i.split == "model_train" and i.language == "en")
    assert len(en_small) == base.model_train_per_language and len(en_big) == 15
    assert en_big[:len(en_small)] == en_small
    with pytest.raises(ValueError, match=r"names \['xx'\]"):
        CorpusConfig(model_train_by_language={"xx": 5})
