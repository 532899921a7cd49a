"""Where does the code predictor's probability go? (issue 14, intelligibility; docs/design.md "Where
free-running speech loses its intelligibility")

A frame's cell is its (phoneme token, c0); a cell's support at level k is the set of codes c_k that
the model's training frames (English model_train + train) with that cell used. On English eval
frames of `--corpus` (the talker on the true history, true c0, each c_k drawn given the true lower
levels, the deployed top-k 50 / T 0.9 law):
  coverage           how often the true eval code lies in the cell's support, per level
  mass_in_support    the predictor's probability inside the support, per level
  support_size       distinct codes in the support, per level
and the CER / PER of `--sentences` sentences through the committed recognizer, and the squared error
per dimension of the codec's quantized (standardized) space against the true codes, when the codes are
  resynth            the true codes
  cp_levels          drawn from the predictor's law
  cp_levels_in_support  drawn from the predictor's law restricted to the support (renormalized;
                     the unrestricted law where the top-k law has no mass there or the cell is new)
  count_table        drawn from the support's own code counts (no network)
The talker's c0 gets the same three measures (`talker_c0`), its cell being the phoneme token alone:
how often the true c0 is one the token's training frames used, and how much of the talker's law (true
history, the deployed top-k 50 / T 0.9) lies on such c0s.

usage: python scripts/predictor_cell_probe.py [--model DIR] [--corpus DIR] [--codec DIR] [--sentences 20] --out JSON
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import numpy as np
import torch
from tqdm.auto import tqdm

from rvqspec.core.frame_loop import teacher_forced_inner, teacher_forced_talker
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.sampling import Sampling, probs
from rvqspec.mini.corpus import in_language, load_corpus
from rvqspec.mini.pipeline import MiniTTS, default_data_dir
from rvqspec.mini.recognizer import intelligibility_score
from rvqspec.real.asr import load_recognizer

# sibling scripts: scripts/ is on sys.path when this file runs as a script
import diagnose_intelligibility


def english(corpus, split: str, n: int | None = None) -> list[tuple[np.ndarray, np.ndarray, str]]:
    ds = in_language(corpus[split])
    ds = ds.select(range(min(n or len(ds), len(ds))))
    return [(np.asarray(r["phoneme_frames"], dtype=np.int64), np.asarray(r["codes"], dtype=np.int64), r["text"])
            for r in ds]


def token_c0_counts(rows, vocab: int) -> dict:
    """token -> (vocab,) counts of c0 over the rows' frames."""
    tabs = defaultdict(lambda: np.zeros(vocab))
    for t, c, _ in rows:
        for i in range(len(t)):
            tabs[int(t[i])][c[i, 0]] += 1
    return dict(tabs)


def cell_counts(rows, vocab: int) -> dict:
    """(token, c0) -> (15, vocab) counts of c1..c15 over the rows' frames."""
    tabs = defaultdict(lambda: np.zeros((15, vocab)))
    for t, c, _ in rows:
        for i in range(len(t)):
            tabs[(int(t[i]), int(c[i, 0]))][np.arange(15), c[i, 1:]] += 1
    return dict(tabs)


@torch.no_grad()
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--codec", default=None)
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    data = default_data_dir()
    tts = MiniTTS.load(data, model_dir=args.model, codec_dir=args.codec)
    corpus = load_corpus(args.corpus or data / "corpus")
    V = int(tts.codebook_size)
    seen = english(corpus, "model_train") + english(corpus, "train")
    tabs, c0_tabs = cell_counts(seen, V), token_c0_counts(seen, V)
    c0_cover, c0_mass, c0_size = [], [], []
    rec = load_recognizer(str(data / "recognizer"))
    sampling = Sampling()
    cover, mass, size = (defaultdict(list) for _ in range(3))
    out = defaultdict(lambda: ([], [], [], []))
    missing = frames = 0
    for n, (t, c, text) in enumerate(tqdm(english(corpus, "eval", args.sentences), desc="probe")):
        g = torch.Generator().manual_seed(n)
        ct = torch.from_numpy(c)  # (T, 16)
        h, c0_logits = teacher_forced_talker(tts.talker, tts.code_predictor, torch.from_numpy(t).view(1, -1),
                                             ct.view(1, -1, 16))
        p0 = probs(c0_logits[0, :, :V], sampling)  # (T, V): the talker's c0 law over the codebook
        for i in range(len(t)):
            tab0 = c0_tabs.get(int(t[i]))
            if tab0 is not None:
                c0_cover.append(float(tab0[c[i, 0]] > 0))
                c0_mass.append(float(p0[i][torch.from_numpy(tab0 > 0)].sum()))
                c0_size.append(float((tab0 > 0).sum()))
        p = probs(tts.code_predictor.lm_logits(teacher_forced_inner(tts.code_predictor, h[0], ct), torch.arange(15)),
                  sampling)  # (T, 15, V)
        support = torch.ones_like(p)  # (T, 15, V): a cell never seen keeps every code
        table = ct.clone()
        for i in range(len(t)):
            frames += 1
            tab = tabs.get((int(t[i]), int(ct[i, 0])))
            if tab is None:
                missing += 1
                continue
            support[i] = torch.from_numpy(tab > 0).to(p.dtype)
            table[i, 1:] = torch.multinomial(torch.from_numpy(tab / tab.sum(-1, keepdims=True)), 1, generator=g).view(15)
            for k in range(15):
                cover[k].append(float(tab[k, c[i, k + 1]] > 0))
                mass[k].append(float((p[i, k] * support[i, k]).sum()))
                size[k].append(float((tab[k] > 0).sum()))
        inside = p * support
        keep = inside.sum(-1, keepdim=True) > 0  # (T, 15, 1)
        restricted = torch.where(keep, inside / inside.sum(-1, keepdim=True).clamp_min(1e-12), p)
        drawn = {}
        for name, law in (("cp_levels", p), ("cp_levels_in_support", restricted)):
            s = ct.clone()
            s[:, 1:] = torch.multinomial(law.reshape(-1, V), 1, generator=g).view(-1, 15)
            drawn[name] = s
        for name, codes in (("resynth", ct), *drawn.items(), ("count_table", table)):
            hyp, ph = diagnose_intelligibility.read_aloud(rec, tts.codec, codes)
            out[name][0].append(text), out[name][1].append(hyp), out[name][2].append(ph)
            out[name][3].append(diagnose_intelligibility.feature_mse(tts.codec, codes, ct))
    variants = {}
    for name, (refs, hyps, phons, mse) in out.items():
        s = intelligibility_score(refs, hyps, "en", phons)
        variants[name] = dict(per=s["per"], cer=s["cer"], wer=s["wer"], feature_mse=float(np.mean(mse)))
    per_level = lambda d: [round(float(np.mean(d[k])), 4) for k in range(15)]
    result = dict(model=str(args.model or "data/mini/model"), corpus=str(args.corpus or "data/mini/corpus"),
                  sentences=args.sentences, eval_frames=frames, frames_without_cell=missing,
                  coverage=per_level(cover), mass_in_support=per_level(mass), support_size=per_level(size),
                  talker_c0=dict(coverage=round(float(np.mean(c0_cover)), 4), mass_in_support=round(float(np.mean(c0_mass)), 4),
                                 support_size=round(float(np.mean(c0_size)), 1), frames=len(c0_cover)),
                  variants=variants, sampling="top-k 50, T = 0.9 (rvqspec.core.sampling.Sampling)",
                  command="python scripts/predictor_cell_probe.py " + " ".join(argv or sys.argv[1:]))
    write_json_atomic(args.out, result, indent=2)
    print({k: round(v["cer"], 3) for k, v in variants.items()}, "mass c1..c3", result["mass_in_support"][:3],
          "coverage c1..c3", result["coverage"][:3], "talker c0", result["talker_c0"])
    return result


if __name__ == "__main__":
    main()
