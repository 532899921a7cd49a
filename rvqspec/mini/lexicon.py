"""Lexicon-constrained spelling for the mini recognizer: phonemes heard -> words of a word list.

The recognizer's phoneme head hears English well (PER ~3% on the hand-written test set) but its
character head spells by sound ("the wether was mouchwor me thenen"). Real ASR systems spell with
a lexicon and a language model; this module is the mini world's version of both:

* Vocabulary (`build_lexicon`): the top `DEFAULT_WORDS` words of the `wordfreq` frequency list of
  a language (the same filters as `rvqspec.mini.wordlists`: the language's own script, a vowel
  letter), with wordfreq's unigram frequencies as the language model. Nothing else: the lexicon
  is a general word list, never the test set or the corpus texts (tests/test_lexicon.py checks).
* Pronunciations: espeak-ng's segmental phonemes in the recognizer's phoneme inventory
  (`phonemes.clean_phonemes`: stress dropped), for the word alone and as espeak-ng says it inside
  running text (`CONTEXT_PASSES` seeded shuffles of the word list read as text with word-separated
  output): function words there get their weak forms ("to" t@, "a" a#, "for" f@) and linking r.
  Building costs 3-5 s of CPU per language (one `espeak_TextToPhonemes` call per word alone and
  per chunk of `CONTEXT_CHUNK` words in context) and is deterministic; the result is cached as a
  gzipped TSV under `runs/lexicon/` (~0.45 MB per language, 1.75 MB for four), keyed by the word
  count, the build settings and the wordfreq / espeak-ng versions, and rebuilt at first use rather
  than committed: it is derived data that a change of settings would re-commit whole.
* Decoding (`LexiconDecoder.decode`): a dynamic programme over the greedy phoneme string of the
  phoneme head. A word spanning phonemes [i, j) costs `edit_weight` x (edit distance of the span
  to the nearest pronunciation of the word) - `lm_weight` x ln P(word) + `word_penalty`; lexicon
  candidates within edit distance 1 come from a deletion index (SymSpell), so a span is matched in
  a few dict look-ups. A span no lexicon word matches may be spelled by the character head instead
  (`oov_penalty` + `oov_per_phoneme` per phoneme): the characters the character head emitted in
  the span's frames (both heads read the same encoder frames), so names and rare words survive.
  The best path is the transcript. Pure Python; 40-70 ms of CPU for a 10 s utterance.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rvqspec.mini.phonemes import clean_phonemes
from rvqspec.mini.speech import text_to_phoneme_words, text_to_phonemes

LEXICON_LANGUAGES = ("en", "de", "es", "ru")  # ja (kana) and zh (hanzi) keep the character head
DEFAULT_WORDS = 40000  # ranks read from each wordfreq list (before filtering)
CONTEXT_PASSES = 3  # seeded shuffles of the word list phonemized as running text
CONTEXT_CHUNK = 12  # words per phonemized chunk of running text
MAX_VARIANTS = 4  # pronunciations kept per word (the isolated one and the commonest in context)
FORMAT_VERSION = 2
_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = _ROOT / "runs" / "lexicon"


# ----------------------------------------------------------------------------- building


def word_frequencies(lang: str, words: int = DEFAULT_WORDS) -> list[tuple[str, float]]:
    """(word, wordfreq frequency) of the filtered top `words` of `lang`'s list, in rank order."""
    import wordfreq

    from rvqspec.mini.wordlists import _is_word

    out = []
    for w in wordfreq.top_n_list(lang, words):
        if _is_word(w, lang):
            f = wordfreq.word_frequency(w, lang)
            if f > 0:
                out.append((w, f))
    return out


def build_lexicon(lang: str, words: int = DEFAULT_WORDS, passes: int = CONTEXT_PASSES,
                  seed: int = 0) -> "Lexicon":
    """The lexicon of `lang` from wordfreq and espeak-ng alone (deterministic in its arguments)."""
    if lang not in LEXICON_LANGUAGES:
        raise ValueError(f"no lexicon for {lang!r}; lexicons exist for {', '.join(LEXICON_LANGUAGES)}")
    freqs = word_frequencies(lang, words)
    vocab = [w for w, _ in freqs]
    counts: list[dict[tuple[str, ...], int]] = [{} for _ in vocab]
    iso: list[tuple[str, ...] | None] = [None] * len(vocab)
    # isolated: one clause per word ("word." lines; a full stop ends a clause)
    for start in range(0, len(vocab), 2000):
        chunk = vocab[start:start + 2000]
        said = _espeak_by_clause(chunk, lang)
        for k, pron in enumerate(said):
            if pron:
                iso[start + k] = pron
    # in running text: seeded shuffles, CONTEXT_CHUNK words per clause
    rng = np.random.default_rng(seed)
    for _ in range(passes):
        order = rng.permutation(len(vocab))
        for start in range(0, len(order), CONTEXT_CHUNK):
            idx = order[start:start + CONTEXT_CHUNK]
            said = text_to_phoneme_words(" ".join(vocab[i] for i in idx), lang)
            if len(said) != len(idx):
                continue  # espeak-ng split or joined a word: no reliable word boundaries here
            for i, raw in zip(idx, said):
                pron = tuple(clean_phonemes(raw, lang))
                if pron and not any(p.startswith("(") for p in raw):
                    counts[i][pron] = counts[i].get(pron, 0) + 1
    entries = []
    for k, (w, f) in enumerate(freqs):
        variants = [] if iso[k] is None else [iso[k]]
        for pron, _ in sorted(counts[k].items(), key=lambda kv: (-kv[1], kv[0])):
            if pron not in variants:
                variants.append(pron)
        if variants:
            entries.append((w, math.log(f), tuple(variants[:MAX_VARIANTS])))
    return Lexicon(lang, entries)


def _espeak_by_clause(words: Sequence[str], lang: str) -> list[tuple[str, ...] | None]:
    """Each word said alone (one `text_to_phonemes` call per word, ~15 us); None for a word that
    espeak-ng reads with a voice switch (it is spelled as foreign) or as nothing."""
    out: list[tuple[str, ...] | None] = []
    for w in words:
        raw = text_to_phonemes(w, lang)
        if any(p.startswith("(") for p in raw):  # a voice switch: espeak-ng spells it as foreign
            out.append(None)
            continue
        pron = tuple(clean_phonemes(raw, lang))
        out.append(pron or None)
    return out


# ----------------------------------------------------------------------------- the lexicon


@dataclass
class Lexicon:
    language: str
    entries: list[tuple[str, float, tuple[tuple[str, ...], ...]]]  # (word, ln frequency, prons)

    def __post_init__(self) -> None:
        # pronunciation -> (best word, its ln frequency): homophones keep the commonest spelling
        self.best: dict[tuple[str, ...], tuple[str, float]] = {}
        for word, logf, prons in self.entries:
            for p in prons:
                cur = self.best.get(p)
                if cur is None or logf > cur[1]:
                    self.best[p] = (word, logf)
        # SymSpell deletion index (distance 1): pronunciation minus one phoneme -> pronunciations
        self.deletes: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        for p in self.best:
            for k in range(len(p)):
                d = p[:k] + p[k + 1:]
                if d:
                    self.deletes.setdefault(d, []).append(p)
        self.max_len = max((len(p) for p in self.best), default=0)
        self.words = {w for w, _, _ in self.entries}

    def __len__(self) -> int:
        return len(self.entries)

    def candidates(self, span: tuple[str, ...]) -> list[tuple[tuple[str, ...], int]]:
        """Pronunciations within edit distance 1 of `span`, with their distance (0 or 1)."""
        found: dict[tuple[str, ...], int] = {}
        if span in self.best:
            found[span] = 0
        for p in self.deletes.get(span, ()):  # the span lacks one phoneme of p
            found.setdefault(p, 1)
        for k in range(len(span)):
            d = span[:k] + span[k + 1:]
            if not d:
                continue
            if d in self.best:  # the span has one phoneme too many
                found.setdefault(d, 1)
            for p in self.deletes.get(d, ()):  # one phoneme differs (or a swap of neighbours: 2)
                if p not in found:
                    dist = _levenshtein(span, p)
                    if dist <= 1:
                        found[p] = dist
        return list(found.items())

    # -- files ------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, meta: dict | None = None) -> Path:
        """Gzipped TSV: word, ln frequency, then one column per pronunciation (phonemes joined by
        spaces; espeak-ng mnemonics hold no spaces or tabs, but ';' is one: palatalization)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": "rvqspec-lexicon", "version": FORMAT_VERSION, "language": self.language,
                  **(meta or {})}
        lines = ["#" + json.dumps(header, sort_keys=True)]
        lines += ["\t".join([w, f"{logf:.4f}", *(" ".join(p) for p in prons)]) for w, logf, prons in self.entries]
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Lexicon":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read().splitlines()
        if not text or not text[0].startswith("#"):
            raise ValueError(f"{path} is not an rvqspec lexicon")
        header = json.loads(text[0][1:])
        if header.get("format") != "rvqspec-lexicon" or header.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: not an rvqspec lexicon of version {FORMAT_VERSION}")
        entries = []
        for line in text[1:]:
            w, logf, *prons = line.split("\t")
            entries.append((w, float(logf), tuple(tuple(p.split(" ")) for p in prons)))
        return cls(header["language"], entries)


def _levenshtein(a: Sequence[str], b: Sequence[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _cache_key(lang: str, words: int, passes: int) -> str:
    import importlib.metadata as md

    versions = {}
    for pkg in ("wordfreq", "espeakng-loader"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    # espeak-ng's own data decides the pronunciations: fingerprint it by a few words
    probe = "|".join(" ".join(text_to_phonemes(w, lang)) for w in ("one", "water", "hello"))
    blob = json.dumps({"lang": lang, "words": words, "passes": passes, "chunk": CONTEXT_CHUNK,
                       "variants": MAX_VARIANTS, "version": FORMAT_VERSION, "pkgs": versions,
                       "probe": probe}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


_LOADED: dict[tuple, Lexicon] = {}


def load_lexicon(lang: str, words: int = DEFAULT_WORDS, passes: int = CONTEXT_PASSES,
                 cache_dir: str | os.PathLike | None = DEFAULT_CACHE) -> Lexicon:
    """The lexicon of `lang`: from memory, from the cache file, or built (and cached) now."""
    key = (lang, words, passes, str(cache_dir))
    if key in _LOADED:
        return _LOADED[key]
    lex = None
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"{lang}-{words}-{_cache_key(lang, words, passes)}.tsv.gz"
        if path.is_file():
            try:
                lex = Lexicon.load(path)
            except (OSError, ValueError):
                lex = None
    if lex is None:
        lex = build_lexicon(lang, words, passes)
        if path is not None:
            try:
                lex.save(path, {"words": words, "passes": passes})
            except OSError:
                pass  # a read-only checkout still decodes, it rebuilds next time
    _LOADED[key] = lex
    return lex


# ----------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class DecoderConfig:
    edit_weight: float = 9.0  # cost of one phoneme edit between a span and a pronunciation (nats)
    lm_weight: float = 1.0  # weight of -ln P(word) (wordfreq unigram)
    word_penalty: float = 0.0  # added per word
    oov_penalty: float = 20.0  # a span spelled by the character head instead of the lexicon
    oov_per_phoneme: float = 6.0
    max_oov_phonemes: int = 12


@dataclass
class Token:
    symbol: str
    frame: int  # encoder frame of its first emission


def greedy_tokens(log_probs: np.ndarray, symbols: Sequence[str], allowed: np.ndarray | None = None) -> list[Token]:
    """Greedy CTC of (T, V) log-probabilities, keeping the frame where each token starts."""
    lp = np.asarray(log_probs, dtype=np.float32)
    if allowed is not None:
        lp = np.where(np.asarray(allowed, bool)[None, :], lp, -np.inf)
    best = lp.argmax(-1)  # (T,)
    out, prev = [], 0
    for t, i in enumerate(best.tolist()):
        if i != prev and i != 0:
            out.append(Token(symbols[i], t))
        prev = i
    return out


class LexiconDecoder:
    def __init__(self, lexicon: Lexicon, config: DecoderConfig = DecoderConfig()):
        self.lexicon = lexicon
        self.config = config

    def decode(self, phonemes: Sequence[str], fallback: Sequence[str] | None = None) -> str:
        """The best word sequence for a phoneme string. `fallback[k]` is the character-head text
        heard during phoneme k (an out-of-lexicon span is spelled by joining its fallbacks);
        without it an unmatched span is dropped at the OOV cost."""
        words = self.decode_words(phonemes, fallback)
        return " ".join(w for w in words if w)

    def decode_words(self, phonemes: Sequence[str], fallback: Sequence[str] | None = None) -> list[str]:
        c, lex = self.config, self.lexicon
        ph = tuple(phonemes)
        n = len(ph)
        inf = float("inf")
        best = [inf] * (n + 1)
        back: list[tuple[int, str] | None] = [None] * (n + 1)
        best[0] = 0.0
        max_len = max(lex.max_len + 1, c.max_oov_phonemes)  # longest span: a word (+1 insertion) or OOV
        for i in range(n):
            if best[i] == inf:
                continue
            base = best[i]
            for j in range(i + 1, min(n, i + max_len) + 1):
                span = ph[i:j]
                for pron, dist in (lex.candidates(span) if j - i <= lex.max_len + 1 else ()):
                    word, logf = lex.best[pron]
                    cost = base + c.edit_weight * dist - c.lm_weight * logf + c.word_penalty
                    if cost < best[j]:
                        best[j], back[j] = cost, (i, word)
                if j - i <= c.max_oov_phonemes:
                    cost = base + c.oov_penalty + c.oov_per_phoneme * (j - i)
                    if cost < best[j]:
                        text = "".join(fallback[i:j]).replace(" ", "") if fallback is not None else ""
                        best[j], back[j] = cost, (i, text)
        words = []
        j = n
        while j > 0:
            i, word = back[j]
            words.append(word)
            j = i
        return words[::-1]


def align_fallback(phoneme_tokens: Sequence[Token], char_tokens: Sequence[Token]) -> list[str]:
    """Per phoneme token: the character-head characters that start in its frames (from its own
    frame up to the next phoneme's; characters before the first phoneme go to the first)."""
    n = len(phoneme_tokens)
    out = [""] * n
    if not n:
        return out
    starts = np.asarray([t.frame for t in phoneme_tokens])
    for ch in char_tokens:
        k = max(int(np.searchsorted(starts, ch.frame, side="right")) - 1, 0)
        out[k] += ch.symbol
    return out
