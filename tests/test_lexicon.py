"""Lexicon-constrained spelling (`rvqspec.mini.lexicon`): hand-made decoding cases, the out-of-lexicon
fallback, deterministic building from general word lists only, and the recognizer's decoding switch."""
from __future__ import annotations

import ast
import builtins
import dataclasses
import gzip
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import rvqspec.mini.lexicon as lexmod
from rvqspec.mini.lexicon import (DecoderConfig, Lexicon, LexiconDecoder, Token, align_fallback, build_lexicon,
                                  greedy_tokens, load_lexicon, word_frequencies)

torch.set_num_threads(1)


def _lex() -> Lexicon:
    # (word, ln frequency, pronunciations) in espeak-ng's English mnemonics
    entries = [
        ("the", math.log(0.05), (("D", "@2"), ("D", "I2", ";"))),
        ("weather", math.log(1e-4), (("w", "E", "D", "3"),)),
        ("whether", math.log(5e-5), (("w", "E", "D", "3"),)),  # homophone, rarer: never chosen
        ("was", math.log(5e-3), (("w", "V", "z"),)),
        ("warm", math.log(1e-4), (("w", "O@", "m"),)),
        ("spring", math.log(5e-5), (("s", "p", "r", "I", "N"),)),
        ("ring", math.log(4e-5), (("r", "I", "N"),)),
    ]
    return Lexicon("en", entries)


def test_exact_words_recovered_from_a_slightly_corrupted_phoneme_string():
    dec = LexiconDecoder(_lex())
    clean = ["D", "@2", "w", "E", "D", "3", "w", "V", "z", "w", "O@", "m"]
    assert dec.decode(clean) == "the weather was warm"
    # one substitution (E -> I), one deletion (z) and one insertion (extra "t" in "spring")
    corrupted = ["D", "@2", "w", "I", "D", "3", "w", "V", "s", "p", "r", "t", "I", "N"]
    assert dec.decode(corrupted) == "the weather was spring"


def test_candidates_are_within_edit_distance_one():
    lex = _lex()
    got = dict(lex.candidates(("s", "p", "r", "I")))  # "spring" lacks its last phoneme
    assert got == {("s", "p", "r", "I", "N"): 1}
    assert dict(lex.candidates(("w", "V", "z"))) == {("w", "V", "z"): 0}
    assert lex.candidates(("k", "k", "k", "k")) == []


def test_out_of_lexicon_span_is_spelled_by_the_character_head():
    dec = LexiconDecoder(_lex())
    heard = ["D", "@2", "k", "u:", "k", "u:", "b", "a", "x"]  # "the" + a word no entry is near
    fallback = ["th", "e ", "k", "u", "c", "u", "b", "a", "ch"]
    words = dec.decode_words(heard, fallback)
    assert words[0] == "the"
    assert "".join(words[1:]) == "kucubach"  # characters, not a far lexicon word
    assert not set(words[1:]) & _lex().words
    # without a fallback the span is dropped (costed as out-of-lexicon), never forced onto a word
    assert dec.decode(heard) == "the"


def test_language_model_weight_picks_the_common_homophone_and_segmentation():
    dec = LexiconDecoder(_lex())
    assert dec.decode(["w", "E", "D", "3"]) == "weather"
    # "s p r I N" is one common word rather than an edit + "ring"
    assert dec.decode(["s", "p", "r", "I", "N"]) == "spring"
    heavy = LexiconDecoder(_lex(), DecoderConfig(edit_weight=0.1))
    assert heavy.decode(["s", "p", "r", "I", "N"]) == "spring"


def test_greedy_tokens_keep_frames_and_fallback_alignment():
    symbols = ["<blank>", "a", "b", "c"]
    seq = [0, 1, 1, 0, 2, 0, 0, 3, 3]
    lp = np.full((len(seq), 4), -10.0, np.float32)
    lp[np.arange(len(seq)), seq] = 0.0
    toks = greedy_tokens(lp, symbols)
    assert [(t.symbol, t.frame) for t in toks] == [("a", 1), ("b", 4), ("c", 7)]
    allowed = np.array([True, True, False, True])
    assert [t.symbol for t in greedy_tokens(lp, symbols, allowed)] == ["a", "c"]
    chars = [Token("x", 0), Token("y", 2), Token("z", 5), Token("w", 8)]
    assert align_fallback(toks, chars) == ["xy", "z", "w"]
    assert align_fallback([], chars) == []


def test_building_is_deterministic_and_round_trips(tmp_path):
    a = build_lexicon("en", words=400, passes=2)
    b = build_lexicon("en", words=400, passes=2)
    assert a.entries == b.entries and len(a) > 300
    pa, pb = a.save(tmp_path / "a.tsv.gz"), b.save(tmp_path / "b.tsv.gz")
    assert pa.read_bytes() == pb.read_bytes()  # gzip without a timestamp
    c = Lexicon.load(pa)
    assert [(w, round(f, 4), p) for w, f, p in a.entries] == c.entries
    the = {w: p for w, _, p in a.entries}["the"]
    assert ("D", "@2") in the  # isolated form; a context form may follow
    assert all(";" not in w for w in c.words)
    # palatalization ";" is a phoneme: it must survive the file format
    ru = build_lexicon("ru", words=200, passes=1)
    path = ru.save(tmp_path / "ru.tsv.gz")
    assert Lexicon.load(path).entries == [(w, round(f, 4), p) for w, f, p in ru.entries]
    assert any(";" in ph for _, _, prons in ru.entries for p in prons for ph in p)


def test_cache_file_is_written_once_and_reused(tmp_path, monkeypatch):
    lexmod._LOADED.clear()
    monkeypatch.setattr(lexmod, "_cache_key", lambda *a: "k")
    first = load_lexicon("es", words=300, passes=1, cache_dir=tmp_path)
    files = list(tmp_path.glob("es-300-*.tsv.gz"))
    assert len(files) == 1
    lexmod._LOADED.clear()
    monkeypatch.setattr(lexmod, "build_lexicon", lambda *a, **k: pytest.fail("rebuilt despite the cache"))
    again = load_lexicon("es", words=300, passes=1, cache_dir=tmp_path)
    assert again.entries == [(w, round(f, 4), p) for w, f, p in first.entries]
    lexmod._LOADED.clear()


def test_the_test_set_is_not_the_source(monkeypatch):
    """The lexicon comes from wordfreq's general lists only: the test set is never read while
    building, the words are exactly the filtered frequency list, and test-set words outside that
    list stay out of the lexicon."""
    from rvqspec.mini.testset import TESTSET_DIR, load_testset

    sentences = load_testset()  # read before the guard
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if "testset" in str(file) or "corpus" in str(file):
            raise AssertionError(f"the lexicon build read {file}")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: pytest.fail(f"read_text({self})"))
    lex = build_lexicon("en", words=3000, passes=1)
    monkeypatch.undo()
    source = [w for w, _ in word_frequencies("en", 3000)]
    assert [w for w, _, _ in lex.entries] == [w for w in source if w in lex.words]
    assert len(lex) >= 0.95 * len(source)
    test_words = {w.strip(".,?!").lower() for s in sentences["en"] for w in s.split()}
    outside = test_words - set(source)
    assert outside and not (outside & lex.words)  # e.g. rarer words of the test set are not added
    # and the module itself never names the test set or the corpus as an input
    tree = ast.parse(Path(lexmod.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and ("testset" in m or "corpus" in m)}
    assert str(TESTSET_DIR.name) not in {n.value for n in ast.walk(tree)
                                         if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_lexicon_file_is_gzipped_tsv(tmp_path):
    path = _lex().save(tmp_path / "x.tsv.gz")
    lines = gzip.open(path, "rt", encoding="utf-8").read().splitlines()
    assert lines[0].startswith("#") and lines[1].split("\t")[0] == "the"
    assert lines[1].split("\t")[2:] == ["D @2", "D I2 ;"]


# ----------------------------------------------------------------------------- recognizer switch


@pytest.fixture()
def toy_recognizer(monkeypatch):
    from rvqspec.mini.recognizer import CTCModel, CTCRecognizer, RecognizerConfig, Vocab

    vocab = Vocab.build({"en": ["the weather"], "ja": ["ねこ"]})
    vocab = vocab.with_phonemes({"en": [["D", "@2", "w", "E", "3"]], "ja": [["n", "e", "k", "o"]]})
    config = dataclasses.replace(RecognizerConfig.toy(), conv_blocks=1)
    torch.manual_seed(0)
    model = CTCModel(config, len(vocab.tokens), len(vocab.phonemes))
    monkeypatch.setattr(lexmod, "load_lexicon", lambda lang, *a, **k: _lex())
    return CTCRecognizer(model, vocab)


def test_decoding_switch_and_record(toy_recognizer):
    rec = toy_recognizer
    assert rec.decoding_for("en") == "lexicon"
    assert rec.decoding_for("ja") == "greedy"  # kana keep the character head
    assert rec.decoding_for("en", "greedy") == "greedy"
    with pytest.raises(ValueError):
        rec.decoding_for("ja", "lexicon")
    with pytest.raises(ValueError):
        rec.decoding_for("en", "beam")
    audio = [np.zeros(16000, np.float32), 0.01 * np.random.default_rng(0).standard_normal(8000).astype(np.float32)]
    texts, ph = rec.transcribe_both(audio, "en")
    assert len(texts) == 2 and len(ph) == 2
    assert all(isinstance(t, str) for t in texts)
    greedy, ph2 = rec.transcribe_both(audio, "en", decoding="greedy")
    assert ph2 == ph  # phonemes do not depend on the text decoding
    assert rec.transcribe(audio, "en", decoding="greedy") == greedy


def test_no_phoneme_head_means_greedy():
    from rvqspec.mini.recognizer import CTCModel, CTCRecognizer, RecognizerConfig, Vocab

    vocab = Vocab.build({"en": ["the weather"]})
    rec = CTCRecognizer(CTCModel(RecognizerConfig.toy(), len(vocab.tokens)), vocab)
    assert rec.decoding_for("en") == "greedy"
    with pytest.raises(ValueError):
        rec.decoding_for("en", "lexicon")
