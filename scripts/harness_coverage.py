"""How open is the corpus vocabulary? Distinct words of model_train with and without the word-list
sentences, and the share of the hand-written test set's words that the training text contains.

    PYTHONPATH=$PWD python scripts/harness_coverage.py --per-language 3000 \
        --out docs/measurements/harness_coverage.json
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.measure.metrics import is_character_language, normalize
from rvqspec.mini.testset import load_testset
from rvqspec.mini.text import CorpusConfig, make_texts


def _units(text: str, lang: str) -> list[str]:
    t = normalize(text, lang)
    # ja/zh: characters (ja kana is a syllabary, so this is syllable coverage)
    return list(t) if is_character_language(lang) else t.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-language", type=int, default=3000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cfg = CorpusConfig(model_train_per_language=args.per_language, train=8, validation=3, calibration=3,
                       eval_per_language=20)
    out = {"command": f"scripts/harness_coverage.py --per-language {args.per_language} --out {args.out}",
           "languages": {}}
    testset = load_testset()
    for broad in (cfg.broad_fraction, 0.0):
        items = make_texts(dataclasses.replace(cfg, broad_fraction=broad))
        for lang, texts in testset.items():
            train = {u for i in items if i.language == lang and i.split == "model_train" for u in _units(i.text, lang)}
            test = [u for t in texts for u in _units(t, lang)]
            covered = sum(u in train for u in test) / len(test)
            key = "corpus" if broad else "grammar_only"
            out["languages"].setdefault(lang, {})[key] = {
                "distinct_units": len(train), "testset_units_covered": round(covered, 4)}
    out["units"] = "words (en, de, es, ru); characters (ja, zh)"
    write_json_atomic(args.out, out, indent=1)
    for lang, r in out["languages"].items():
        print(lang, r)


if __name__ == "__main__":
    main()
