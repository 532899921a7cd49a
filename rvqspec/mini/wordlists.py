"""Broad-vocabulary sentences for the mini corpus: frequency word lists instead of small grammars.

The template grammars of `rvqspec.mini.text` use a few hundred words per language, and a
recognizer trained on them learns their vocabulary: on ordinary sentences outside the grammar it
spells badly (issue 14). The cure is coverage of each language's spelling and phonology, which a
large word list gives without a tagger or a grammar:

* Words: the `wordfreq` package's frequency lists (shipped inside the wheel; version pinned in
  pyproject.toml, since the list decides the corpus). Ranked words are filtered to the language's
  own script (Latin letters of en/de/es, Cyrillic for ru, kana only for ja, because espeak-ng's ja
  voice does not read kanji, hanzi for zh) and to words with a vowel letter (abbreviations such as
  "lg" are spelled out letter by letter, so their characters would not match their sound).
* Speakable: a ja or zh word is kept only if espeak-ng reads it in that voice: for a character it
  cannot read (e.g. a lone prolonged-sound mark "ー", or "ヶ") it switches to another voice (a
  "(en)" phoneme) and says the character's name. The check asks espeak-ng for phonemes without
  synthesizing audio (`speech.text_to_phonemes`, ~15 us a word).
* Sentences: `broad_sentence(lang, rng)` draws 4-12 words (ja/zh: enough words for the character
  bounds of `text.sentence_length_ok`); each word is a function word (the `FUNCTION_WORDS` most
  frequent ones) with probability `FUNCTION_SHARE`, else a content word of rank up to
  `WordListConfig.words`, drawn with weight rank^-`RANK_EXPONENT` so that the whole list is covered
  while common words stay more common. The word order is not grammatical: the recognizer has no
  language model, and what it must learn is how letters sound.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from rvqspec.mini.speech import text_to_phonemes

FUNCTION_WORDS = 100  # the most frequent words of a list: articles, particles, pronouns
FUNCTION_SHARE = 0.35  # share of function words in a sentence (about that of running text)
RANK_EXPONENT = 0.5  # content words: P(rank r) ~ r^-0.5 (flatter than Zipf's r^-1)
DEFAULT_WORDS = 20000  # ranks read from each list (before filtering)

_VOWELS = {
    "en": "aeiouy", "de": "aeiouyäöü", "es": "aeiouáéíóúü", "ru": "аеёиоуыэюя",
}
_SCRIPT = {
    "en": re.compile(r"^[a-z]+$"),
    "de": re.compile(r"^[a-zäöüß]+$"),
    "es": re.compile(r"^[a-záéíóúüñ]+$"),
    "ru": re.compile(r"^[а-яё]+$"),
    # hiragana, katakana and the prolonged-sound mark
    "ja": re.compile(r"^[\u3041-\u3096\u30a1-\u30fa\u30fc]+$"),
    "zh": re.compile(r"^[\u4e00-\u9fff]+$"),
}
CHARACTER_SCRIPT = ("ja", "zh")  # no spaces between words; espeak-ng reads them per character


@dataclass(frozen=True)
class WordList:
    language: str
    function: tuple[str, ...]  # the most frequent words, in rank order
    content: tuple[str, ...]  # the rest, in rank order
    content_cdf: np.ndarray  # (len(content),) cumulative sampling probabilities, last = 1


def _is_word(word: str, lang: str) -> bool:
    if not _SCRIPT[lang].match(word):
        return False
    if lang in _VOWELS:
        return any(ch in _VOWELS[lang] for ch in word)
    return not (lang == "ja" and word.startswith("ー"))  # a word never starts with a length mark


def speakable(word: str, lang: str) -> bool:
    """espeak-ng reads `word` in the `lang` voice: phonemes come out and no voice switch happens."""
    names = text_to_phonemes(word, lang)
    switched = any(n.startswith("(") for n in names)  # "(en)": espeak-ng changed voice
    return not switched and any(not n.startswith("_") for n in names)


@functools.lru_cache(maxsize=None)
def word_list(lang: str, words: int = DEFAULT_WORDS) -> WordList:
    """The filtered frequency list of `lang`: `words` ranks of wordfreq's list, then the filters."""
    if lang not in _SCRIPT:
        raise ValueError(f"no word list for language {lang!r}; lists exist for {', '.join(_SCRIPT)}")
    import wordfreq

    kept = [w for w in wordfreq.top_n_list(lang, words) if _is_word(w, lang)]
    if lang in CHARACTER_SCRIPT:
        kept = [w for w in kept if speakable(w, lang)]
    function = tuple(kept[:FUNCTION_WORDS])
    # content words of two letters and more (single letters are function words or spelled out)
    content = tuple(w for w in kept[FUNCTION_WORDS:] if len(w) >= (2 if lang in CHARACTER_SCRIPT else 3))
    if not function or not content:
        raise RuntimeError(f"the {lang} word list is empty after filtering (wordfreq installed?)")
    weights = np.arange(1, len(content) + 1, dtype=np.float64) ** -RANK_EXPONENT  # (C,)
    cdf = np.cumsum(weights / weights.sum())  # (C,)
    return WordList(lang, function, content, cdf / cdf[-1])


def _draw_word(wl: WordList, rng: np.random.Generator) -> str:
    if rng.random() < FUNCTION_SHARE:
        return wl.function[int(rng.integers(len(wl.function)))]
    # inverse-CDF draw from one uniform: what `rng.choice(C, p=p)` does, without its O(C) set-up per call
    return wl.content[int(wl.content_cdf.searchsorted(rng.random(), side="right"))]


def broad_sentence(lang: str, rng: np.random.Generator, words: int = DEFAULT_WORDS,
                   min_words: int = 4, max_words: int = 12) -> str:
    """One sentence of frequency-list words in `lang` (see the module docstring); deterministic in `rng`."""
    wl = word_list(lang, words)
    if lang in CHARACTER_SCRIPT:
        n = int(rng.integers(3, 9))
        body = "".join(_draw_word(wl, rng) for _ in range(n))
        return body + ("？" if rng.random() < 0.15 else "。")
    n = int(rng.integers(min_words, max_words + 1))
    parts = []
    for k in range(n):
        w = _draw_word(wl, rng)
        if k < n - 1 and k > 0 and rng.random() < 0.08:
            w += ","  # espeak-ng pauses at a comma: the recognizer hears phrase breaks
        parts.append(w)
    question = rng.random() < 0.15
    s = " ".join(parts)
    s = s[:1].upper() + s[1:]
    if question:
        return ("¿" + s + "?") if lang == "es" else s + "?"
    return s + "."
