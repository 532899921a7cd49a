"""Intelligibility metrics: text normalization, word, character and phoneme error rates.

The seed (000, Table 3) reports WER for English, German, Spanish and Russian and CER for Japanese
and Mandarin, after a Whisper-style "basic" normalization. This module does the same:

* `normalize(text, language)` lowercases, applies Unicode NFKC, drops bracketed asides, turns
  punctuation and symbols into spaces and collapses whitespace. For the languages written without
  spaces (`ja`, `zh`) it also removes every space, because their scores are per character.
* `score(references, hypotheses, language)` aggregates at corpus level: the sum of the edit
  operations over all utterances divided by the sum of the reference lengths (not the mean of
  per-utterance rates, which would over-weight short utterances). jiwer computes the alignments.

For `ja` and `zh` each character counts as a word, so `wer == cer` there and the primary metric
(`score(...)["error"]`) is the CER; for the other languages the primary metric is the WER.

`phoneme_score(reference_phonemes, hypothesis_phonemes)` is the PER: Levenshtein edits between
phoneme symbol sequences (espeak-ng mnemonics in the mini world, `rvqspec.mini.phonemes`), summed
over utterances and divided by the summed reference length, like the WER. It is the mini world's
headline intelligibility figure (issue 14): it judges the sound without the recognizer having to
know how a language spells, which the mini recognizer can only learn from its small corpus.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import jiwer

# Languages scored per character (no spaces between words in their script).
CHARACTER_LANGUAGES = frozenset({"ja", "zh"})

# Whisper's normalizer removes "[...]" / "<...>" tags and "(...)" asides: they are annotations
# (noise tags, speaker labels), never spoken words.
_BRACKETED = re.compile(r"[<\[][^>\]]*[>\]]|\([^)]*\)")
_SPACES = re.compile(r"\s+")


def is_character_language(language: str) -> bool:
    """True when `language` is scored per character (CER as the primary metric)."""
    return _base_language(language) in CHARACTER_LANGUAGES


def _base_language(language: str) -> str:
    # "zh-CN", "ja_JP", "cmn" -> the two-letter code this module keys on.
    code = language.lower().replace("_", "-").split("-")[0]
    return {"cmn": "zh", "jpn": "ja", "zho": "zh"}.get(code, code)


def normalize(text: str, language: str = "en") -> str:
    """Whisper-style basic normalization, language aware (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _BRACKETED.sub(" ", text)
    # Unicode categories P* (punctuation) and S* (symbols) become spaces, so "well-known" scores
    # as two words on both sides. Marks (M*) are kept: NFKC already composes the accented letters
    # of de/es/ru, and dropping a stray combining mark would change the letter it belongs to.
    text = "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)
    text = _SPACES.sub(" ", text).strip()
    if is_character_language(language):
        text = text.replace(" ", "")
    return text


@dataclass(frozen=True)
class ErrorCounts:
    """Edit operations against a reference of `length` tokens (words or characters)."""

    substitutions: int
    deletions: int
    insertions: int
    length: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        return self.errors / self.length if self.length else float("nan")


def _counts(output, length: int) -> ErrorCounts:
    return ErrorCounts(output.substitutions, output.deletions, output.insertions, length)


def error_counts(
    references: Sequence[str], hypotheses: Sequence[str], language: str
) -> tuple[ErrorCounts, ErrorCounts]:
    """(word counts, character counts) summed over the utterances, after `normalize`.

    Character counts keep the single spaces between words of space-delimited languages (as
    `jiwer.cer` does); for `ja`/`zh` the words are the characters, so both counts are equal.
    """
    if len(references) != len(hypotheses):
        raise ValueError(
            f"score: {len(references)} references but {len(hypotheses)} hypotheses"
        )
    if not references:
        raise ValueError("score: no utterances to score")
    refs = [normalize(r, language) for r in references]
    hyps = [normalize(h, language) for h in hypotheses]
    for i, (raw, ref) in enumerate(zip(references, refs)):
        if not ref:
            raise ValueError(
                f"score: reference {i} ({raw!r}) is empty after normalization; "
                "an error rate against it is undefined"
            )
    chars = jiwer.process_characters(refs, hyps)
    char_counts = _counts(chars, sum(len(r) for r in refs))
    if is_character_language(language):
        return char_counts, char_counts
    # jiwer splits on whitespace; an empty hypothesis is all deletions.
    words = jiwer.process_words(refs, hyps)
    word_counts = _counts(words, sum(len(r.split()) for r in refs))
    return word_counts, char_counts


def score(references: Sequence[str], hypotheses: Sequence[str], language: str) -> dict:
    """Corpus-level scores of `hypotheses` against `references` in `language`.

    Returns a dict with `wer`, `cer` (fractions, not percent), `error` (the primary metric: CER
    for ja/zh, else WER), `metric` ("cer" or "wer"), `n` (utterances) and the raw counts
    (`word_errors`, `ref_words`, `char_errors`, `ref_chars`) that `aggregate` sums.
    """
    words, chars = error_counts(references, hypotheses, language)
    return _as_dict(words, chars, len(references), language)


def _as_dict(words: ErrorCounts, chars: ErrorCounts, n: int, language: str) -> dict:
    metric = "cer" if is_character_language(language) else "wer"
    wer, cer = words.rate, chars.rate
    return {
        "wer": wer,
        "cer": cer,
        "error": cer if metric == "cer" else wer,
        "metric": metric,
        "n": n,
        "word_errors": words.errors,
        "ref_words": words.length,
        "char_errors": chars.errors,
        "ref_chars": chars.length,
    }


def aggregate(scores: Sequence[dict], language: str) -> dict:
    """Combine `score` dicts of disjoint batches of one language: summed errors over summed lengths."""
    if not scores:
        raise ValueError("aggregate: no scores to combine")
    word_errors = sum(s["word_errors"] for s in scores)
    char_errors = sum(s["char_errors"] for s in scores)
    ref_words = sum(s["ref_words"] for s in scores)
    ref_chars = sum(s["ref_chars"] for s in scores)
    # The split into S/D/I is not needed for the rates; keep all errors as substitutions.
    words = ErrorCounts(word_errors, 0, 0, ref_words)
    chars = ErrorCounts(char_errors, 0, 0, ref_chars)
    out = _as_dict(words, chars, sum(s["n"] for s in scores), language)
    if all("phoneme_errors" in s for s in scores):  # PER combines the same way
        errors, length = sum(s["phoneme_errors"] for s in scores), sum(s["ref_phonemes"] for s in scores)
        out.update(per=errors / length if length else float("nan"), phoneme_errors=errors, ref_phonemes=length)
    return out


def edit_counts(reference: Sequence[str], hypothesis: Sequence[str]) -> ErrorCounts:
    """Substitutions, deletions and insertions of a minimum-edit alignment of two token sequences.

    Among alignments of minimum total cost, ties are broken towards substitutions (as jiwer does),
    so "ab" -> "ac" is one substitution rather than a deletion and an insertion.
    """
    ref, hyp = list(reference), list(hypothesis)
    n, m = len(ref), len(hyp)
    # dp[j] = (cost, subs, dels, ins) of aligning ref[:i] with hyp[:j]; one row at a time
    prev = [(j, 0, 0, j) for j in range(m + 1)]
    for i in range(1, n + 1):
        cur = [(i, 0, i, 0)]
        for j in range(1, m + 1):
            c, s_, d, ins = prev[j - 1]
            same = ref[i - 1] == hyp[j - 1]
            diag = (c + (not same), s_ + (not same), d, ins)
            c, s_, d, ins = prev[j]
            up = (c + 1, s_, d + 1, ins)  # reference token deleted
            c, s_, d, ins = cur[j - 1]
            left = (c + 1, s_, d, ins + 1)  # hypothesis token inserted
            cur.append(min(diag, up, left, key=lambda t: (t[0], -t[1])))
        prev = cur
    _, subs, dels, ins = prev[m]
    return ErrorCounts(subs, dels, ins, n)


def phoneme_score(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> dict:
    """Corpus-level phoneme error rate: {per, phoneme_errors, ref_phonemes, n} (`per` a fraction).

    `references` and `hypotheses` are sequences of phoneme symbols (lists of strings), one per
    utterance; a reference without phonemes is an error (the rate against it is undefined).
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"phoneme_score: {len(references)} references but {len(hypotheses)} hypotheses")
    if not references:
        raise ValueError("phoneme_score: no utterances to score")
    total = ErrorCounts(0, 0, 0, 0)
    for i, (ref, hyp) in enumerate(zip(references, hypotheses)):
        if isinstance(ref, str) or isinstance(hyp, str):
            raise TypeError(f"phoneme_score: utterance {i} is a string; pass lists of phoneme symbols")
        if not ref:
            raise ValueError(f"phoneme_score: reference {i} has no phonemes; a rate against it is undefined")
        c = edit_counts(ref, hyp)
        total = ErrorCounts(total.substitutions + c.substitutions, total.deletions + c.deletions,
                            total.insertions + c.insertions, total.length + c.length)
    return {"per": total.rate, "phoneme_errors": total.errors, "ref_phonemes": total.length,
            "n": len(references)}
