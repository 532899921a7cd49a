"""Gate: does telling the talker WHERE in the frame a phoneme boundary falls make the code
predictor's c1..c5 right? (issue 14, intelligibility; docs/design.md "Where free-running speech
loses its intelligibility")

One arm per `--points` (2: the committed pair tokens, 4: quarter-resolved tokens,
`rvqspec.mini.phonemes`). Each arm builds the same English gate corpus (`--corpus-model-train`
sentences), encodes it with the committed codec, trains a mini model in the committed layout for
`--steps`, and runs `scripts/diagnose_intelligibility.py`'s decompositions on its eval split
through the committed recognizer.

Falsified if, at equal steps, points = 4 lowers the tf_c0_true CER (true c0 and history, code
predictor sampled) by less than 5 points against points = 2.

The same harness measures the corpus size (`--corpus-model-train 6000 --work runs/gates/data6k`):
more sentences per phoneme-token cell at equal steps (docs/design.md, "Where free-running speech
loses its intelligibility").

`--codec` takes another fitted codec instead of the committed one (the codebook-size gate's, docs/design.md
"The real tokenizer's codebook size"): with 2,048 codes c0 nearly names the sound, and where in the
frame a boundary falls may be what the talker's c0 lacks.

usage: python scripts/token_timing_gate.py --points 4 --steps 1500 --out runs/gates/timing_p4.json
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.mini.corpus import build_corpus
from rvqspec.mini.learned_codec import load_codec
from rvqspec.mini.phonemes import PhonemeTokenizer
from rvqspec.mini.pipeline import default_data_dir
from rvqspec.mini.talker_train import MiniModelConfig, train_mini_model
from rvqspec.mini.text import CorpusConfig

# sibling scripts: scripts/ is on sys.path when this file runs as a script
import diagnose_intelligibility
import predictor_cell_probe
from mini_gate import fit_codec

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("resynth", "tf_cp_greedy", "tf_c0_true", "tf_c0_sampled", "free")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, choices=(2, 4), required=True)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--corpus-model-train", type=int, default=2000)
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "gates")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"diagnose variants (any of {', '.join(diagnose_intelligibility.VARIANTS)})")
    ap.add_argument("--text-parts", action="store_true",
                    help="train the text embedding as a sum of quarter-frame phoneme parts (MiniModelConfig.text_parts)")
    ap.add_argument("--talker-dropout", type=float, default=MiniModelConfig.talker_dropout,
                    help="residual dropout in the talker's layers while training (MiniModelConfig.talker_dropout)")
    ap.add_argument("--codec", type=Path, default=None, help="fitted codec dir (default: the committed data/mini/codec)")
    ap.add_argument("--falsified-if", default="points = 4 lowers the tf_c0_true CER by less than 5 points against points = 2",
                    help="the criterion written before the run (another use of the same harness states its own)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    work = args.work / f"timing_p{args.points}"
    log = lambda m: print(f"[timing p{args.points} {time.time() - t0:6.0f}s] {m}", flush=True)
    ccfg = CorpusConfig(model_train_per_language=args.corpus_model_train, train=400, validation=40, calibration=10,
                        eval_per_language=40, languages=("en",), tokenizer_points=args.points)
    tok = work / "phoneme_tokenizer.json"
    if not (work / "corpus_audio" / "dataset_dict.json").is_file():
        build_corpus(work / "corpus_audio", work / "corpus_text", tok, ccfg, progress=False)
    log("corpus ready")
    codec = load_codec(args.codec or default_data_dir() / "codec")
    codec_dir = work / "codec"  # fit_codec saves the encoding codec beside the corpus
    corpus = work / "corpus"
    if not (corpus / "dataset_dict.json").is_file():  # the given codec encodes the gate corpus
        fit_codec(codec.config, work / "corpus_audio", work, log, fitted=codec)
    log("codes ready")
    mcfg = dataclasses.replace(MiniModelConfig(), steps=args.steps, text_parts=args.text_parts,
                               talker_dropout=args.talker_dropout)
    model = work / ("model" + ("_parts" if args.text_parts else "")
                    + (f"_drop{args.talker_dropout:g}" if args.talker_dropout else ""))
    metrics = train_mini_model(corpus, codec_dir, model, config=mcfg, tokenizer_path=tok)
    log(f"model trained {metrics}")
    diag = diagnose_intelligibility.main(str(model), args.sentences, None, tuple(args.variants.split(",")),
                                         "eval", str(corpus),
                                         codec_dir=str(codec_dir))
    probe = predictor_cell_probe.main(["--model", str(model), "--corpus", str(corpus), "--codec", str(codec_dir),
                                       "--sentences", str(args.sentences), "--out", str(work / f"cell_probe_{model.name}.json")])
    vocab = PhonemeTokenizer.load(tok).vocab_size
    result = dict(points=args.points, steps=args.steps, text_parts=args.text_parts, talker_dropout=args.talker_dropout, codec=str(args.codec or "data/mini/codec"),
                  corpus_model_train=args.corpus_model_train, vocab=vocab,
                  train_metrics=metrics, variants=diag["variants"], seconds=round(time.time() - t0),
                  cell_probe={k: probe[k] for k in ("coverage", "mass_in_support", "support_size", "variants")},
                  command="python scripts/token_timing_gate.py " + " ".join(argv or sys.argv[1:]),
                  falsified_if=args.falsified_if)
    write_json_atomic(args.out, result)
    return result


if __name__ == "__main__":
    main()
