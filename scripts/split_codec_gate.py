"""Gate: a split level 0 (issue 14, intelligibility; docs/design.md "A split level 0").

On the v4 world the code predictor's sampled c1..c5 make the speech read worse than no residuals
at all (docs/measurements/world_v4/diagnose_en.json: c0 alone 14.0% CER, true c0 with the sampled
predictor 19.3%): in the committed codec a residual code moves every direction of the frame,
including the phoneme-discriminant ones that level 0 was fitted in, so a wrong c1 can change the
sound. The real tokenizers keep the semantic codebook apart from the acoustic RVQ (Mimi's split
RVQ; Qwen3-TTS-Tokenizer-12Hz: one semantic and 15 acoustic codebooks). Here the split is
`CodecConfig.level0_split`: the residual levels quantize only what lies outside the span of level
0's discriminant directions.

Two arms on the same English gate corpus (the candidate v4 recipe at gate scale: quarter tokens,
2,000 `model_train` sentences, the committed codec's config with 1,024 codes and lda 64), each with
its own codec fit and a mini model trained `--steps` on its codes:
    base:  the committed codec recipe (residual levels quantize the whole residual)
    split: the same with level0_split
Codec half: resynthesis, c0 alone, and c0 with c1..c15 copied from a random training frame with
the same c0 (c0_shuffle: residuals that know only c0) through the committed recognizer. Model half:
scripts/diagnose_intelligibility.py's decomposition on `--sentences` eval sentences.

`--c0-sound-weight W` trains another model on an arm's codes with the sound-level term in the
talker's c0 loss (MiniModelConfig.c0_sound_weight, rvqspec.mini.sound_groups; docs/design.md "A
sound-level term in the talker's c0 loss"), compared with the arm's own model (weight 0);
`--talker-hidden H` / `--talker-layers L` one with a wider or deeper talker (the code predictor as wide
as the talker, the 0.6B layout's identity projection; MLPs 3x the width), compared the same way.
`--corpus-model-train N --steps S --work DIR` builds the gate at another scale (its own corpus and
codec fit in DIR); `--steps S` alone trains another model on an arm's codes (docs/design.md "Three times
the data and the steps together").

usage (the corpus first, then the two arms side by side, one core each):
    python scripts/split_codec_gate.py --corpus-only
    python scripts/split_codec_gate.py --arm base --out docs/measurements/intelligibility/split_level0/base.json
    python scripts/split_codec_gate.py --arm split --out docs/measurements/intelligibility/split_level0/split.json
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.mini.codec import RVQCodec
from rvqspec.mini.corpus import build_corpus, load_corpus
from rvqspec.mini.phonemes import PhonemeTokenizer
from rvqspec.mini.pipeline import default_data_dir
from rvqspec.mini.talker_train import MiniModelConfig, train_mini_model
from rvqspec.mini.text import CorpusConfig

# sibling scripts: scripts/ is on sys.path when this file runs as a script
import diagnose_intelligibility
from level0_gate import codec_half
from mini_gate import fit_codec

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("resynth", "c0_only", "tf_cp_greedy", "tf_c0_true", "tf_c0_sampled", "free", "free_greedy")
FALSIFIED_IF = ("the split arm's free-running CER is not at least 3 points below the base arm's of the same run, "
                "or its resynthesis CER is more than 2 points above the base arm's")

FALSIFIED_MODEL_IF = ("the model arm's free-running CER is not at least 3 points below that of the same codec "
                      "arm's plain model (same codes, seed and steps)")
GATE_SENTENCES, GATE_STEPS = 2000, 1500  # the gate scale every arm is compared at
FALSIFIED_COVERAGE_IF = ("the arm at another scale is not at least 3 points of free-running CER below the "
                         "2,000-sentence 1,500-step control (coverage/PREREG.md)")


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", choices=("base", "split"))
    ap.add_argument("--corpus-only", action="store_true", help="build the English gate corpus and stop")
    ap.add_argument("--steps", type=int, default=GATE_STEPS)
    ap.add_argument("--sentences", type=int, default=40)
    ap.add_argument("--corpus-model-train", type=int, default=GATE_SENTENCES)
    ap.add_argument("--c0-sound-weight", type=float, default=MiniModelConfig.c0_sound_weight,
                    help="the talker's sound-level c0 loss weight (MiniModelConfig.c0_sound_weight)")
    ap.add_argument("--talker-hidden", type=int, default=MiniModelConfig.talker_hidden,
                    help="talker (and code predictor) width; MLPs 3x")
    ap.add_argument("--talker-layers", type=int, default=MiniModelConfig.talker_layers)
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "gates" / "split_level0")
    ap.add_argument("--threads", type=int, default=MiniModelConfig.threads,
                    help="torch threads for training and diagnosis (2 on an otherwise idle 2-core box)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if not args.corpus_only and (args.arm is None or args.out is None):
        ap.error("--arm and --out are needed unless --corpus-only")
    torch.set_num_threads(args.threads)
    t0 = time.time()
    log = lambda m: print(f"[split gate {args.arm or 'corpus'} {time.time() - t0:6.0f}s] {m}", flush=True)
    tok = args.work / "phoneme_tokenizer.json"
    audio = args.work / "corpus_audio"
    if not (audio / "dataset_dict.json").is_file():
        ccfg = CorpusConfig(model_train_per_language=args.corpus_model_train, train=400, validation=40,
                            calibration=10, eval_per_language=40, languages=("en",), tokenizer_points=4)
        build_corpus(audio, args.work / "corpus_text", tok, ccfg, progress=False)
    log("corpus ready")
    if args.corpus_only:
        return None
    base = RVQCodec.load(default_data_dir() / "codec").config  # lda 64, 1,024 codes (the v4 world)
    cfg = dataclasses.replace(base, level0_split=args.arm == "split")
    arm = args.work / args.arm
    if not (arm / "corpus" / "dataset_dict.json").is_file():
        dd = load_corpus(audio, need_audio=True)
        audios = [np.asarray(a, dtype=np.float32) for a in dd["model_train"].with_format("numpy")["audio"]]
        labels = [np.asarray(p, dtype=np.int64) for p in dd["model_train"]["phoneme_frames"]]
        codec = RVQCodec(cfg).fit(audios, torch.Generator().manual_seed(cfg.seed), progress=False, labels=labels)
        log("codec fitted")
        del dd, audios
        fit_codec(cfg, audio, arm, log, fitted=codec)  # encode every clip, save codec and corpus
    codec = RVQCodec.load(arm / "codec")
    vocab = PhonemeTokenizer.load(tok).vocab_size
    width = args.talker_hidden
    mcfg = dataclasses.replace(MiniModelConfig(), steps=args.steps, c0_sound_weight=args.c0_sound_weight,
                               talker_layers=args.talker_layers, talker_hidden=width, talker_mlp=3 * width,
                               cp_hidden=width, cp_mlp=3 * width, threads=args.threads)
    suffix = ((f"_sound{args.c0_sound_weight:g}" if args.c0_sound_weight else "")
              + (f"_w{width}" if width != MiniModelConfig.talker_hidden else "")
              + (f"_l{args.talker_layers}" if args.talker_layers != MiniModelConfig.talker_layers else "")
              + (f"_s{args.steps}" if args.steps != GATE_STEPS else ""))
    # another model on codes whose plain model exists, compared with it; its codec half is in that JSON
    model_arm = bool(suffix) and (arm / "model").is_dir()
    codec_res = None
    if not model_arm:
        codec_res = codec_half(arm / "corpus", codec, vocab, args.sentences)
        log(f"codec half {codec_res['variants']}")
    model = arm / ("model" + suffix)
    metrics = train_mini_model(arm / "corpus", arm / "codec", model, config=mcfg, tokenizer_path=tok)
    log(f"model trained {metrics}")
    diag = diagnose_intelligibility.main(str(model), args.sentences, None, VARIANTS, "eval", str(arm / "corpus"),
                                         codec_dir=str(arm / "codec"))
    result = dict(arm=args.arm, c0_sound_weight=args.c0_sound_weight, talker_hidden=width,
                  talker_layers=args.talker_layers, codec_config=dataclasses.asdict(cfg), corpus_model_train=args.corpus_model_train,
                  steps=args.steps, sentences=args.sentences, codec_half=codec_res, train_metrics=metrics,
                  variants=diag["variants"], seconds=round(time.time() - t0),
                  command="python scripts/split_codec_gate.py " + " ".join(argv or sys.argv[1:]),
                  falsified_if=(FALSIFIED_COVERAGE_IF if args.corpus_model_train != GATE_SENTENCES or args.steps != GATE_STEPS
                                else FALSIFIED_MODEL_IF if model_arm else FALSIFIED_IF))
    write_json_atomic(args.out, result)
    log(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
