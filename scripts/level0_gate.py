"""Gate: a codec whose level 0 is phonetic (issue 14, intelligibility; docs/design.md "Where
free-running speech loses its intelligibility").

In Qwen3-TTS's tokenizer level 0 is semantic (distilled from a speech representation model), so a
wrong residual costs detail, not a sound. The committed codec's level 0 is plain k-means on the
frame's spectrum: c0 alone reads at 41% CER, and the code predictor's wrong c1..c5 are wrong
phonemes. Here level 0 is assigned in a phoneme-discriminant subspace instead:
- at fit time, Fisher LDA of the standardized frame vectors against the frame's phoneme token
  (labels exist only while fitting, as a real tokenizer's semantic teacher exists only in training);
- c0 = k-means (256) in the first `--lda` discriminant directions; its codeword in the full space is
  the mean of the frames it takes, so decoding is the unchanged RVQ sum;
- c1..c15: the committed recipe (entropy-constrained residual k-means, rate_lambda 0.001) on what
  is left. Encoding needs no label: project, assign c0, then the residual levels.

Arms: `--lda 0` refits the committed recipe on the same audio (the baseline), `--lda d` the
phonetic level 0. Every arm reuses the English gate corpus of `scripts/token_timing_gate.py
--points 2` (2,000 model_train sentences) and the committed recognizer.

Codec half (no model; `--codec-only`), on `--sentences` eval sentences: CER / PER of resynthesis,
of c0 alone (residuals at their smallest codewords), and of c0 with the residuals c1..c15 copied
from a random model_train frame with the same c0 (`c0_shuffle`: what a code predictor that knew only
c0 would say) or the same c0 and phoneme token (`tok_c0_shuffle`); per-level marginal entropy and a
count model's cross-entropy given the phoneme token.
Model half: a mini model in the committed layout trained `--steps` on the arm's codes, then
`scripts/diagnose_intelligibility.py`'s decompositions through the arm's codec.

The codebook size (`--codebook-size`, default the committed codec's 256) is the same at every level, as
in the real tokenizer (2,048 per level). A second pre-registration covers it: a size arm is
supported if its free-running CER is at least 5 points below the lda 64 / 256-code model's 28.8%
(docs/measurements/intelligibility/level0_lda64.json) with resynthesis at most 2 points above that
arm's 3.0%; falsified otherwise.

Model-half arms on the same codes: `--text-lead n` (how far ahead the talker reads) and
`--text-parts` (the text embedding trained as quarter-frame phoneme parts, rvqspec.mini.text_parts);
each writes its own model folder and states its criterion with `--falsified-if`.

Written before the run. The codec half is falsified if c0_shuffle's CER is not at least 10 points
below the baseline arm's or resynthesis costs more than 2 points over the baseline's. The model half
is falsified if tf_c0_true's or free-running CER is not at least 10 points below the
`--points 2` timing-gate model's (37.0% / 48.0%, docs/measurements/intelligibility/timing_gate_p2.json).

The codec is `RVQCodec` with `CodecConfig.level0_lda = --lda`, the committed codec's config
otherwise. The recorded JSONs (docs/measurements/intelligibility/level0_lda*.json) came from an
earlier copy of that fit inside this script (see its git history), on the v2 committed config, which
drew its fitting frames with a permutation even when all of them fit: a rerun reproduces the recipe,
not those exact codebooks.

usage: python scripts/level0_gate.py --lda 32 --codec-only --out runs/gates/level0_lda32_codec.json
       python scripts/level0_gate.py --lda 64 --codebook-size 1024 --steps 1500 --out docs/measurements/intelligibility/codebook_1024.json
       python scripts/level0_gate.py --lda 32 --steps 1500 --out docs/measurements/intelligibility/level0_lda32.json
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
from rvqspec.mini.corpus import load_corpus
from rvqspec.mini.phonemes import PhonemeTokenizer
from rvqspec.mini.pipeline import default_data_dir
from rvqspec.mini.recognizer import intelligibility_score
from rvqspec.mini.talker_train import MiniModelConfig, train_mini_model
from rvqspec.real.asr import load_recognizer

# sibling scripts: scripts/ is on sys.path when this file runs as a script
import diagnose_intelligibility
import predictor_cell_probe
from mini_gate import codec_statistics, fit_codec

REPO = Path(__file__).resolve().parents[1]
GATE = REPO / "runs" / "gates" / "timing_p2"  # scripts/token_timing_gate.py --points 2
VARIANTS = ("resynth", "c0_only", "tf_cp_greedy", "tf_c0_true", "tf_c0_sampled", "free")


def shuffled_residuals(codes: torch.Tensor, tokens: np.ndarray, pool: dict, pool_c0: dict,
                       g: np.random.Generator, by_token: bool, levelwise: bool = False) -> torch.Tensor:
    """codes (T, 16) with c1..c15 of each frame copied from a random model_train frame that shares
    its c0 (and, by_token, its phoneme token when such a frame exists); `levelwise`: each level from
    its own random such frame (the same per-level laws without the frame's joint coherence)."""
    out = codes.clone()
    for t in range(codes.shape[0]):
        c0 = int(codes[t, 0])
        cands = pool.get((int(tokens[t]), c0)) if by_token else None
        if cands is None:
            cands = pool_c0.get(c0)
        if cands is None:
            continue
        if levelwise:
            pick = g.integers(len(cands), size=cands.shape[1])  # (15,)
            out[t, 1:] = torch.from_numpy(cands[pick, np.arange(cands.shape[1])])
        else:
            out[t, 1:] = torch.from_numpy(cands[g.integers(len(cands))])
    return out


def codec_half(corpus: Path, codec: RVQCodec, vocab: int, n: int) -> dict:
    rec = load_recognizer(str(default_data_dir() / "recognizer"))
    dd = load_corpus(corpus)
    tr = dd["model_train"]
    toks = np.concatenate([np.asarray(t) for t in tr["phoneme_frames"]])  # (N,)
    allc = np.concatenate([np.asarray(c) for c in tr["codes"]]).astype(np.int64)  # (N, 16)
    pool, pool_c0 = {}, {}
    for key, rows in ((lambda i: (int(toks[i]), int(allc[i, 0])), pool), (lambda i: int(allc[i, 0]), pool_c0)):
        order = {}
        for i in range(len(toks)):
            order.setdefault(key(i), []).append(i)
        rows.update({k: allc[v, 1:] for k, v in order.items()})
    silent = codec.smallest_codewords()  # (16,)
    ev = dd["eval"].select(range(n))
    res = {v: ([], [], [], []) for v in ("resynth", "c0_only", "c0_shuffle", "tok_c0_shuffle", "tok_c0_levelwise")}
    for i, row in enumerate(ev):
        true = torch.as_tensor(np.asarray(row["codes"]), dtype=torch.long)  # (T, 16)
        tok = np.asarray(row["phoneme_frames"])
        g = np.random.default_rng(i)
        c0_only = true.clone()
        c0_only[:, 1:] = silent[1:]
        for v, codes in (("resynth", true), ("c0_only", c0_only),
                         ("c0_shuffle", shuffled_residuals(true, tok, pool, pool_c0, g, False)),
                         ("tok_c0_shuffle", shuffled_residuals(true, tok, pool, pool_c0, g, True)),
                         ("tok_c0_levelwise", shuffled_residuals(true, tok, pool, pool_c0, g, True, True))):
            hyp, ph = diagnose_intelligibility.read_aloud(rec, codec, codes)
            res[v][0].append(row["text"]), res[v][1].append(hyp), res[v][2].append(ph)
            res[v][3].append(diagnose_intelligibility.feature_mse(codec, codes, true))
    table = {}
    for v, (refs, hyps, phons, mse) in res.items():
        s = intelligibility_score(refs, hyps, "en", phons)
        table[v] = dict(per=s["per"], cer=s["cer"], wer=s["wer"], feature_mse=float(np.mean(mse)))
    return dict(variants=table, statistics=codec_statistics(corpus, int(codec.config.codebook_size), vocab))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lda", type=int, required=True, help="discriminant directions for level 0 (0: the baseline)")
    ap.add_argument("--codebook-size", type=int, default=None, help="codes per level (default: the committed codec's)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--text-lead", type=int, default=MiniModelConfig.text_lead,
                    help="frames the talker's text leads its audio (a model-half arm on the same codes)")
    ap.add_argument("--text-parts", action="store_true",
                    help="train the text embedding as a sum of quarter-frame phoneme parts (MiniModelConfig.text_parts)")
    ap.add_argument("--codec-only", action="store_true")
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--gate", type=Path, default=GATE, help="the timing gate's --points 2 work dir")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "gates")
    ap.add_argument("--falsified-if", default=None,
                    help="the criterion written before the run, where a use of the harness states its own")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    base = RVQCodec.load(default_data_dir() / "codec").config
    size = args.codebook_size or int(base.codebook_size)
    work = args.work / (f"level0_lda{args.lda}" + ("" if size == base.codebook_size else f"_k{size}"))
    log = lambda m: print(f"[level0 lda{args.lda} {time.time() - t0:6.0f}s] {m}", flush=True)
    tok_path = args.gate / "phoneme_tokenizer.json"
    corpus = work / "corpus"
    if not (corpus / "dataset_dict.json").is_file():
        dd = load_corpus(args.gate / "corpus_audio", need_audio=True)
        tr = dd["model_train"].with_format("numpy")
        audios = [np.asarray(a, dtype=np.float32) for a in tr["audio"]]
        labels = [np.asarray(p, dtype=np.int64) for p in dd["model_train"]["phoneme_frames"]]
        g = torch.Generator().manual_seed(0)
        l0 = RVQCodec(dataclasses.replace(base, level0_lda=args.lda, codebook_size=size)).fit(audios, g, labels=labels)
        log("codec fitted")
        del dd, tr, audios
        fit_codec(l0.config, args.gate / "corpus_audio", work, log, fitted=l0)  # encode, save codec and corpus
    log("codes ready")
    codec = RVQCodec.load(work / "codec")
    vocab = PhonemeTokenizer.load(tok_path).vocab_size
    result = dict(lda=args.lda, codebook_size=size, codec_half=codec_half(corpus, codec, vocab, args.sentences))
    log(f"codec half {result['codec_half']['variants']}")
    if not args.codec_only:
        mcfg = dataclasses.replace(MiniModelConfig(), steps=args.steps, text_lead=args.text_lead,
                                   text_parts=args.text_parts)
        model = work / ("model" + ("" if args.text_lead == MiniModelConfig.text_lead else f"_lead{args.text_lead}")
                        + ("_parts" if args.text_parts else ""))
        metrics = train_mini_model(corpus, work / "codec", model, config=mcfg, tokenizer_path=tok_path)
        log(f"model trained {metrics}")
        diag = diagnose_intelligibility.main(str(model), args.sentences, None, VARIANTS, "eval", str(corpus),
                                             codec_dir=str(work / "codec"))
        probe = predictor_cell_probe.main(["--model", str(model), "--corpus", str(corpus), "--codec",
                                           str(work / "codec"), "--sentences", str(args.sentences),
                                           "--out", str(work / "cell_probe.json")])
        result.update(steps=args.steps, text_lead=args.text_lead, text_parts=args.text_parts, train_metrics=metrics, variants=diag["variants"],
                      cell_probe={k: probe[k] for k in ("coverage", "mass_in_support", "support_size", "variants")})
    result.update(seconds=round(time.time() - t0), sentences=args.sentences,
                  command="python scripts/level0_gate.py " + " ".join(argv or sys.argv[1:]),
                  falsified_if=args.falsified_if or ("codec half: c0_shuffle CER not >= 10 points below the lda 0 arm's, or resynthesis "
                                "> 2 points above it; model half: tf_c0_true or free CER not >= 10 points below "
                                "the timing gate's points = 2 model (37.0 / 48.0)"
                                + ("" if size == base.codebook_size else
                                   "; codebook size arm: free CER not >= 5 points below the lda 64 / 256-code model's "
                                   "28.8, or resynthesis > 2 points above its 3.0")))
    write_json_atomic(args.out, result)
    return result


if __name__ == "__main__":
    main()
