"""Where do free-running synthesis's errors come from? (issue 14, intelligibility)

English eval sentences of the committed mini world, one seed, scored by the mini recognizer, under
decompositions of the frame loop (the phoneme input is frame-aligned, so generated frame t and the
corpus's frame t describe the same phoneme):
  resynth        the corpus's true codes through the codec (the ceiling)
  tf_c0_true     teacher-forced talker on the true history, true c0, code predictor sampled
  tf_c0_sampled  teacher-forced talker on the true history, c0 sampled, code predictor sampled
                 (per-frame errors without drift)
  tf_c0_greedy   as tf_c0_sampled with the talker's most likely c0 (its mode, not its spread)
  tf_c0_sampled_alone  the talker's sampled c0 as in tf_c0_sampled, every residual level at its
                 smallest codeword (c0_only's counterpart: the c0 draw without the predictor)
  free           free-running (the deployed loop)
  free_c0_greedy free-running, talker greedy, code predictor sampled
  free_greedy    free-running, both greedy
  c0_only        true c0, every residual level at its smallest codeword (no residual detail)
  tf_cp_greedy   teacher-forced talker, true c0, code predictor greedy
  tf_levels_1    true c0; each c_k (k >= 1) drawn from the code predictor's distribution given the
                 TRUE c0..c_{k-1} (no error propagation along the inner loop)
  tf_levels_6    true c0..c5; c6..c15 drawn as in tf_levels_1 (are the deep levels harmless?)
Prints JSON: CER / PER per variant and the c0 agreement with the corpus's codes.

usage: python scripts/diagnose_intelligibility.py [--model DIR] [--sentences N] [--split eval]
       [--variants a,b,...] [--top-k K] [--top-p P] [--temperature T] [--out JSON]   (defaults: the committed model, 20, eval, every variant)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from rvqspec.core.frame_loop import (
    codec_vocab_mask,
    synthesize_codes,
    teacher_forced_inner,
    teacher_forced_talker,
)
from rvqspec.core.jsonfile import portable_path, write_json_atomic
from rvqspec.core.sampling import Sampling, sample_logits
from rvqspec.mini.corpus import in_language, load_corpus
from rvqspec.mini.pipeline import MiniTTS, default_data_dir
from rvqspec.mini.recognizer import intelligibility_score, transcribe_scored
from rvqspec.real.asr import load_recognizer

SEED_STRIDE = 100_003  # seed s draws sentence i with generator seed i + SEED_STRIDE * s (no overlap below 100k)
VARIANTS = ("resynth", "c0_only", "tf_levels_1", "tf_levels_6", "tf_cp_greedy", "tf_c0_true", "tf_c0_sampled",
            "tf_c0_greedy", "tf_c0_sampled_alone", "free", "free_c0_greedy", "free_greedy")


@torch.inference_mode()
def teacher_forced_codes(tts: MiniTTS, text: torch.Tensor, codes: torch.Tensor, sample_c0: bool,
                         sampling: Sampling, g: torch.Generator, c0_sampling: Sampling | None = None,
                         residuals: torch.Tensor | None = None) -> torch.Tensor:
    """codes (T, 16): the talker reads the true history; c0 true or drawn under `c0_sampling`
    (default `sampling`); c1..c15 drawn from the code predictor, or the fixed (16,) `residuals`."""
    hidden, logits = teacher_forced_talker(tts.talker, tts.code_predictor, text.view(1, -1), codes.view(1, -1, 16))
    mask = codec_vocab_mask(tts.talker, tts.codebook_size)  # (V,)
    out = torch.empty_like(codes)  # (T, 16)
    for t in range(codes.shape[0]):
        c0 = (sample_logits(logits[:, t] + mask, c0_sampling or sampling, g).view(1, 1) if sample_c0
              else codes[t:t + 1, :1])  # (1, 1)
        rest = (residuals[1:] if residuals is not None
                else tts.code_predictor.generate_frame(hidden[:, t:t + 1], c0, sampling=sampling, generator=g))
        out[t] = torch.cat([c0.view(1), rest.view(15)])
    return out


@torch.inference_mode()
def teacher_forced_levels(tts: MiniTTS, text: torch.Tensor, codes: torch.Tensor, first: int, sampling: Sampling,
                          g: torch.Generator) -> torch.Tensor:
    """codes (T, 16): levels < first true, each level >= first drawn given the true lower levels."""
    hidden, _ = teacher_forced_talker(tts.talker, tts.code_predictor, text.view(1, -1), codes.view(1, -1, 16))
    cp = tts.code_predictor
    logits = cp.lm_logits(teacher_forced_inner(cp, hidden[0], codes), torch.arange(15))  # (T, 15, V)
    T, V = codes.shape[0], logits.shape[-1]
    drawn = sample_logits(logits.reshape(T * 15, V), sampling, g).view(T, 15)  # (T, 15): c1..c15
    out = codes.clone()
    out[:, first:] = drawn[:, first - 1:]
    return out


def read_aloud(recognizer, codec, codes: torch.Tensor) -> tuple[str, list[str] | None]:
    """(English transcript, phonemes or None) of codes (T, 16) decoded by `codec`."""
    audio = np.asarray(codec.decode(codes), dtype=np.float32)
    hyp, ph = transcribe_scored(recognizer, [audio], int(codec.config.sample_rate), "en")
    return hyp[0], None if ph is None else ph[0]


def feature_mse(codec, codes: torch.Tensor, true: torch.Tensor) -> float:
    """Squared error per dimension of codes (T, 16) against the true codes (T', 16), in the codec's
    quantized (standardized) space, over the frames both have."""
    m = min(len(codes), len(true))
    err = codec.standardize(codec.decode_features(codes[:m])) - codec.standardize(codec.decode_features(true[:m]))
    return float(err.pow(2).mean())


def main(model_dir: str | None = None, n: int = 20, out: str | None = None,
         variants: tuple[str, ...] = VARIANTS, split: str = "eval", corpus_dir: str | None = None,
         command: str | None = None, codec_dir: str | None = None, recognizer_dir: str | None = None,
         sampling: Sampling = Sampling(), seed: int = 0) -> dict:
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        print(f"unknown variant {bad[0]!r} (choose from {', '.join(VARIANTS)})", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(1)
    data = default_data_dir()
    tts = MiniTTS.load(data, model_dir=model_dir, codec_dir=codec_dir)
    rec = load_recognizer(str(recognizer_dir or data / "recognizer"))
    corpus_dir = Path(corpus_dir) if corpus_dir else data / "corpus"
    corpus = load_corpus(corpus_dir)
    if split not in corpus:
        print(f"{corpus_dir}: no split {split!r} (has {', '.join(corpus)})", file=sys.stderr)
        raise SystemExit(2)
    ds = corpus[split]
    ds = in_language(ds).select(range(n))
    greedy = Sampling(do_sample=False)
    silent = tts.codec.smallest_codewords()  # (16,)
    res = {v: dict(refs=[], hyps=[], phons=[], c0_agree=[], mse=[]) for v in variants}
    for i, row in enumerate(tqdm(ds, desc="diagnose")):
        text = torch.as_tensor(row["phoneme_frames"], dtype=torch.long)  # (T,)
        true = torch.as_tensor(np.asarray(row["codes"]), dtype=torch.long)  # (T, 16)
        for v in variants:
            g = torch.Generator().manual_seed(i + SEED_STRIDE * seed)  # seed 0: the sentence index
            if v == "resynth":
                codes = true
            elif v == "c0_only":
                codes = true.clone()
                codes[:, 1:] = silent[1:]
            elif v.startswith("tf_levels_"):
                codes = teacher_forced_levels(tts, text, true, int(v.rsplit("_", 1)[1]), sampling, g)
            elif v == "tf_cp_greedy":
                codes = teacher_forced_codes(tts, text, true, False, greedy, g)
            elif v == "tf_c0_greedy":  # the talker's mode on the true history, the predictor sampled
                codes = teacher_forced_codes(tts, text, true, True, sampling, g, c0_sampling=greedy)
            elif v == "tf_c0_sampled_alone":  # the talker's draw with no residuals: c0_only's counterpart
                codes = teacher_forced_codes(tts, text, true, True, sampling, g, residuals=silent)
            elif v.startswith("tf_"):
                codes = teacher_forced_codes(tts, text, true, v == "tf_c0_sampled", sampling, g)
            else:
                talk = greedy if v in ("free_c0_greedy", "free_greedy") else sampling
                inner = greedy if v == "free_greedy" else sampling
                codes, _ = synthesize_codes(tts.talker, tts.code_predictor, text, tts.codebook_size,
                                            sampling=inner, generator=g, talker_sampling=talk)
            hyp, ph = read_aloud(rec, tts.codec, codes)
            r = res[v]
            r["refs"].append(row["text"]), r["hyps"].append(hyp), r["phons"].append(ph)
            r["c0_agree"].append(float((codes[:, 0] == true[:, 0]).float().mean()))
            r["mse"].append(feature_mse(tts.codec, codes, true))
    table = {}
    for v, r in res.items():
        s = intelligibility_score(r["refs"], r["hyps"], "en", r["phons"])
        table[v] = dict(per=s["per"], cer=s["cer"], wer=s["wer"], c0_agreement=float(np.mean(r["c0_agree"])),
                        feature_mse=float(np.mean(r["mse"])))
    result = dict(model=str(model_dir or "data/mini/model"), codec=str(codec_dir or "data/mini/codec"),
                  recognizer=str(recognizer_dir or "data/mini/recognizer"), corpus=portable_path(corpus_dir), sentences=n, split=split, language="en",
                  seed="sentence index" if seed == 0 else f"sentence index + {SEED_STRIDE} x {seed}",
                  sampling=f"top-k {sampling.top_k}, top-p {sampling.top_p}, T = {sampling.temperature} "
                           "(talker and code predictor; rvqspec.core.sampling.Sampling)", variants=table,
                  **({} if command is None else {"command": command}))
    if out:
        write_json_atomic(out, result, indent=2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="mini model dir (default: the committed data/mini/model)")
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--split", default="eval", help="corpus split (model_train: sentences the model trained on)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--corpus", default=None, help="corpus with codes whose phoneme tokens match --model's tokenizer "
                                                    "(default: the committed data/mini/corpus)")
    ap.add_argument("--codec", default=None, help="codec dir that decodes --corpus's codes (default: data/mini/codec)")
    ap.add_argument("--recognizer", default=None, help="recognizer dir trained on --codec's resynthesis "
                                                        "(default: data/mini/recognizer)")
    ap.add_argument("--top-k", type=int, default=Sampling.top_k, help="sampled variants' top-k (0: off)")
    ap.add_argument("--top-p", type=float, default=Sampling.top_p)
    ap.add_argument("--temperature", type=float, default=Sampling.temperature)
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (0: each sentence's index, as every "
                    "committed diagnosis)")
    ap.add_argument("--out", default=None, help="also write the JSON here (atomically)")
    a = ap.parse_args()
    try:
        sampling = Sampling(top_k=a.top_k, top_p=a.top_p, temperature=a.temperature)
    except ValueError as e:
        print(f"bad sampling option: {e}", file=sys.stderr)
        raise SystemExit(2)
    main(a.model, a.sentences, a.out, tuple(a.variants.split(",")), a.split, a.corpus,
         " ".join(["python scripts/diagnose_intelligibility.py"] + sys.argv[1:]), a.codec, a.recognizer, sampling,
         a.seed)
