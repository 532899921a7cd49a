"""espeak-ng synthesis (rvqspec.mini.speech) and frame-aligned phoneme tokens (rvqspec.mini.phonemes)."""
import json

import numpy as np
import pytest

from rvqspec.mini.phonemes import (SIL, SPECIAL_TOKENS, UNK, PhonemeTokenizer, TokenizerError, frame_phonemes,
                                   frame_quarters, num_frames)
from rvqspec.mini.speech import LANGUAGES, SpeechConfig, synthesize

SAMPLES = {
    "en": "The old man found a red book.",
    "de": "Der Lehrer kauft heute einen Apfel.",
    "es": "Mi hermana lee un libro en casa.",
    "ru": "Мой брат читает книгу дома.",
    "ja": "わたしはきのうほんをかいます。",
    "zh": "我今天在商店买了一本书。",
}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_synthesize_every_language(lang):
    utt = synthesize(SAMPLES[lang], lang)
    assert utt.audio.dtype == np.float32 and utt.audio.ndim == 1 and utt.sample_rate == 16000
    assert 0.8 < utt.duration < 6.0
    assert np.abs(utt.audio).max() > 0.05 and np.abs(utt.audio).max() <= 1.0
    starts = [s for s, _ in utt.phonemes]
    assert len(utt.phonemes) >= 8 and starts == sorted(starts)
    assert all(0 <= s <= utt.duration + 1e-3 for s in starts) and all(name for _, name in utt.phonemes)


def test_synthesis_is_deterministic_regardless_of_history():
    a = synthesize(SAMPLES["en"], "en")
    synthesize(SAMPLES["ru"], "ru")  # another voice in between must not change the next result
    synthesize("Something else entirely, spoken first.", "en")
    b = synthesize(SAMPLES["en"], "en")
    assert np.array_equal(a.audio, b.audio) and a.phonemes == b.phonemes


def test_slower_rate_is_longer():
    slow = synthesize(SAMPLES["en"], "en", SpeechConfig(rate_wpm=120))
    fast = synthesize(SAMPLES["en"], "en", SpeechConfig(rate_wpm=220))
    assert slow.duration > 1.3 * fast.duration


def test_bad_language_and_empty_text():
    with pytest.raises(ValueError, match="'xx'"):
        synthesize("hello", "xx")
    with pytest.raises(ValueError, match="empty"):
        synthesize("   ", "en")


def test_num_frames_counts_partial_frames():
    assert num_frames(1280) == 1 and num_frames(1281) == 2 and num_frames(0) == 1
    assert num_frames(16000) == 13  # 1 s = 12.5 frames -> 13


def test_frame_phonemes_quarter_points():
    events = [(0.0, "a"), (0.05, "b"), (0.2, "c")]
    fp = frame_phonemes(events, 4)  # frames at 0-80, 80-160, 160-240, 240-320 ms
    assert fp[0] == ("a", "b", "a")  # 20 ms -> a, 60 ms -> b, centre 40 ms -> a
    assert fp[1] == ("b", "b", "b") and fp[2] == ("b", "c", "c") and fp[3] == ("c", "c", "c")
    assert frame_phonemes([(0.1, "x")], 2)[0] == (None, None, None)


def _toy_tokenizer():
    utts = [("en", [(0.0, "a"), (0.05, "b"), (0.2, "c")], 4)] * 3 + [("de", [(0.0, "a"), (0.1, "d")], 3)]
    return PhonemeTokenizer.fit(utts, min_pair_count=3)


def test_tokenizer_pairs_fallbacks_and_language_tags():
    tok = _toy_tokenizer()
    assert tuple(tok.tokens[:len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS
    assert {"en:a", "en:b", "en:c", "de:a", "de:d"} <= set(tok.tokens)
    assert "en:a b" in tok.index  # seen 3 times: kept as a pair token
    assert "en:b c" in tok.index
    ids = tok.frame_tokens([(0.0, "a"), (0.05, "b"), (0.2, "c")], 4, "en")
    assert tok.decode(ids) == ["en:a b", "en:b", "en:b c", "en:c"]
    # de pair "a d" seen once (< 3): falls back to the centre phoneme; unseen phoneme -> <unk>
    ids = tok.frame_tokens([(0.0, "a"), (0.03, "d")], 1, "de")  # 20 ms a, 40 ms d, 60 ms d
    assert tok.decode(ids) == ["de:d"]
    assert tok.frame_tokens([(0.0, "zz")], 2, "en").tolist() == [UNK, UNK]
    assert tok.frame_tokens([(0.5, "a")], 2, "en").tolist() == [SIL, SIL]


def test_tokenizer_save_load_and_errors(tmp_path):
    tok = _toy_tokenizer()
    path = tok.save(tmp_path)
    assert PhonemeTokenizer.load(path).tokens == tok.tokens
    assert PhonemeTokenizer.load(tmp_path).tokens == tok.tokens
    with pytest.raises(TokenizerError, match="no phoneme tokenizer"):
        PhonemeTokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match="bad.json"):
        PhonemeTokenizer.load(bad)
    bad.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(TokenizerError, match="format"):
        PhonemeTokenizer.load(bad)
    with pytest.raises(TokenizerError, match="special tokens"):
        PhonemeTokenizer(tokens=["a", "b"])


def test_quarter_tokens_say_where_the_boundary_falls_and_fall_back_to_pairs(tmp_path):
    events = [(0.0, "a"), (0.05, "b"), (0.2, "c")]
    # quarter centres of frame 0 at 10, 30, 50, 70 ms: the boundary at 50 ms sits after the second
    assert frame_quarters(events, 4)[:2] == [("a", "a", "b", "b"), ("b", "b", "b", "b")]
    early = [(0.0, "a"), (0.025, "b"), (0.2, "c")]  # boundary at 25 ms: after the first quarter
    assert frame_quarters(early, 1)[0] == ("a", "b", "b", "b")
    tok = PhonemeTokenizer.fit([("en", events, 4)] * 3 + [("en", early, 4)], min_pair_count=3, points=4)
    assert tok.decode(tok.frame_tokens(events, 4, "en")) == ["en:a a b b", "en:b", "en:b b c c", "en:c"]
    # the early boundary was seen once (< 3): its frame falls back to the pair token, which the
    # two-point tokenizer gives both frames (a negative control: pairs cannot tell them apart)
    assert tok.decode(tok.frame_tokens(early, 1, "en")) == ["en:a b"]
    pairs = PhonemeTokenizer.fit([("en", events, 4)] * 3 + [("en", early, 4)], min_pair_count=3)
    assert pairs.frame_tokens(events, 1, "en").tolist() == pairs.frame_tokens(early, 1, "en").tolist()
    assert PhonemeTokenizer.load(tok.save(tmp_path)).points == 4
    with pytest.raises(TokenizerError, match="points"):
        PhonemeTokenizer(tokens=list(SPECIAL_TOKENS), points=3)


def test_phonemize_matches_synthesis():
    utt = synthesize(SAMPLES["de"], "de")
    tok = PhonemeTokenizer.fit([("de", utt.phonemes, num_frames(len(utt.audio)))], min_pair_count=1)
    ids, dur = tok.phonemize(SAMPLES["de"], "de")
    assert dur == pytest.approx(utt.duration)
    assert len(ids) == num_frames(len(utt.audio)) and (ids != UNK).all()
