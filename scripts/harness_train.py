"""Train the open-vocabulary recognizer (characters + phonemes) on a broad-vocabulary mini corpus.

Issue 14 item 3: the corpus mixes grammar and frequency-word-list sentences (`CorpusConfig`
defaults), espeak-ng speaks it, and `train_recognizer` trains both CTC heads with codec
resynthesis augmentation from the committed codec. Everything goes under runs/ (gitignored): the
committed data/mini/recognizer belongs to the committed world.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python scripts/harness_train.py \
        --per-language 3000 --max-minutes 35 --codec-fraction 0.05 --out runs/harness

then `rvqspec asr testset --recognizer runs/harness/recognizer --codec data/mini/codec` scores it on
the hand-written test set (docs/measurements/harness_testset.json).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from rvqspec.mini.corpus import build_corpus
from rvqspec.mini.recognizer import DEFAULT_CODEC, RecognizerConfig, train_recognizer
from rvqspec.mini.text import CorpusConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-language", type=int, default=2000, help="model_train sentences per language")
    ap.add_argument("--max-minutes", type=float, default=20.0, help="RecognizerConfig.max_minutes")
    ap.add_argument("--codec-fraction", type=float, default=0.1, help="RecognizerConfig.codec_fraction")
    ap.add_argument("--codec", type=Path, default=DEFAULT_CODEC)
    ap.add_argument("--out", type=Path, default=Path("runs/harness"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reuse-corpus", action="store_true", help="keep OUT/corpus if it is already built")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    corpus_cfg = CorpusConfig(model_train_per_language=args.per_language, train=8, validation=3, calibration=3,
                              eval_per_language=20)
    t0 = time.time()
    stats = None
    if not (args.reuse_corpus and (args.out / "corpus" / "dataset_dict.json").is_file()):
        stats = build_corpus(args.out / "corpus", args.out / "corpus_noaudio", args.out / "phoneme_tokenizer.json",
                             corpus_cfg)
    corpus_s = time.time() - t0
    rec_cfg = dataclasses.replace(RecognizerConfig(), max_minutes=args.max_minutes, codec_fraction=args.codec_fraction)
    metrics = train_recognizer(args.out / "corpus", args.codec, args.out / "recognizer", rec_cfg)
    flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
             for k, v in vars(args).items() if v is not False]
    summary = {"command": "scripts/harness_train.py " + " ".join(flags),
               "corpus_config": dataclasses.asdict(corpus_cfg), "corpus_seconds": round(corpus_s, 1),
               "corpus_stats": stats, "recognizer_config": dataclasses.asdict(rec_cfg),
               "seconds": round(time.time() - t0, 1), "training": metrics}
    (args.out / "train_summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n")
    print(json.dumps({k: v for k, v in metrics.items() if k != "loss_curve"}, indent=1, default=str))


if __name__ == "__main__":
    main()
