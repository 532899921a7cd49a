"""The hand-written test set: ordinary sentences outside every corpus generator (issue 14).

`data/testset/<lang>.txt`, one sentence per line, written for this project: 32 English sentences
and 10 in each other language (Japanese in kana, which espeak-ng reads; Mandarin in hanzi). No
template grammar or word list of `rvqspec.mini.text` produced them (tests/test_testset.py checks
against the corpus texts of the default `CorpusConfig`), so a recognizer's score on them is an
open-vocabulary score: it says how well it reads speech in the language, not in the grammar.

`evaluate_testset` speaks each sentence with espeak-ng (the clean condition) and, given a codec,
also scores its encode -> decode resynthesis (what the codec alone costs), reporting PER, WER and
CER per language.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rvqspec.mini.recognizer import (SAMPLE_RATE, decoding_of, intelligibility_score, load_codec, resynthesize,
                                     transcribe_scored)
from rvqspec.mini.speech import LANGUAGES, synthesize

TESTSET_DIR = Path(__file__).resolve().parents[2] / "data" / "testset"
MIN_SENTENCES = {"en": 30, "de": 10, "es": 10, "ru": 10, "ja": 10, "zh": 10}


def load_testset(directory: str | Path = TESTSET_DIR, languages: Sequence[str] = LANGUAGES) -> dict[str, list[str]]:
    """language -> its sentences (non-empty lines of `<directory>/<language>.txt`)."""
    out = {}
    for lang in languages:
        path = Path(directory) / f"{lang}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"test set file {path} is missing")
        out[lang] = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if not out[lang]:
            raise ValueError(f"test set file {path} has no sentences")
    return out


def evaluate_testset(recognizer, codec=None, directory: str | Path = TESTSET_DIR,
                     languages: Sequence[str] = LANGUAGES, progress: bool = True) -> list[dict]:
    """Rows {language, condition, n, per, wer, cer, metric, hypotheses} for the clean espeak-ng
    speech of the test set and, with `codec` (an RVQCodec or its directory), its resynthesis."""
    if codec is not None and not hasattr(codec, "encode"):
        codec = load_codec(codec)
    rows = []
    for lang, texts in load_testset(directory, languages).items():
        clean = [synthesize(t, lang).audio for t in texts]  # (n,) float32 each, 16 kHz
        conditions = [("clean", clean)]
        if codec is not None:
            conditions.append(("codec", resynthesize(codec, clean, desc=f"codec {lang}")))
        for condition, audios in conditions:
            hyps, phonemes = transcribe_scored(recognizer, audios, SAMPLE_RATE, lang)
            s = intelligibility_score(texts, hyps, lang, phonemes)
            rows.append({"language": lang, "condition": condition, "n": s["n"], "per": s["per"],
                         "wer": s["wer"], "cer": s["cer"], "metric": s["metric"],
                         "decoding": decoding_of(recognizer, lang),
                         "counts": {k: s.get(k) for k in ("phoneme_errors", "ref_phonemes", "word_errors",
                                                          "ref_words", "char_errors", "ref_chars")},
                         "hypotheses": hyps})
        if progress:
            print(f"[testset] {lang}: " + ", ".join(
                f"{r['condition']} PER={_pct(r['per'])} CER={_pct(r['cer'])} WER={_pct(r['wer'])}"
                for r in rows if r["language"] == lang), flush=True)
    return rows


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
