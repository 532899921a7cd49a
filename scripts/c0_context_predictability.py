"""How much of a frame's c0 does the text around it fix? (issue 14, intelligibility; docs/design.md
"Intelligibility gates on the v4 recipe")

The talker's c0 draw carries the frame's sound as often as the corpus's code does, yet costs about 9
points of CER (docs/measurements/world_v4/c0_draw.json): the loss is in which of the sound's codes.
Is that choice fixed by the text, so that a talker could learn it, or does it vary between frames of
the same text context? This counts, over the English frames of the training splits, the c0 codes of
each text context (the frame's phoneme token and its `w` neighbours either side, w = 0, 1, 2) and
reads, with no model:
  in_sample_majority  share of training frames whose code is their context's most frequent one
                      (an upper bound of what the text context fixes: the table has seen the frame)
  in_sample_entropy   H(c0 | context) on the training frames, nats (plug-in; a lower bound)
  eval_seen           share of English eval frames whose context occurs in training
  eval_majority       on those frames, share whose code is the training majority of their context
Beside it the talker's own figures on the same eval frames (teacher-forced on the true history, the
deployed top-k 50 / T = 0.9 law): its greedy c0 equals the corpus's, and its mass on the corpus's
code, split by whether the frame's context of width w occurs in training.

usage: python scripts/c0_context_predictability.py [--model DIR] [--corpus DIR] [--sentences 40] --out JSON
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.jsonfile import portable_path, write_json_atomic
from rvqspec.mini.corpus import in_language, load_corpus
from rvqspec.mini.pipeline import MiniTTS, default_data_dir

WIDTHS = (0, 1, 2)  # neighbouring tokens either side (2: the talker's 160 ms text lead)
TRAIN_SPLITS = ("model_train", "train")  # what the v4 model trained on (MiniModelConfig.train_splits)


def contexts(tokens: np.ndarray, w: int) -> list[tuple]:
    """Per frame the tuple of tokens t-w..t+w (-1 beyond the utterance)."""
    padded = np.concatenate([np.full(w, -1), tokens, np.full(w, -1)])  # (T + 2w,)
    return [tuple(padded[t:t + 2 * w + 1]) for t in range(len(tokens))]


@torch.inference_mode()
def talker_reads(model_dir: str | None, ev) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per eval sentence (greedy c0 (T,), law's mass on the corpus's c0 (T,)), true history."""
    torch.set_num_threads(1)
    tts = MiniTTS.load(default_data_dir(), model_dir=model_dir)
    out = []
    for row in ev:
        law, greedy = tts.c0_law(row["phoneme_frames"], row["codes"])
        true = torch.as_tensor(np.asarray(row["codes"])[:, :1], dtype=torch.long)  # (T, 1)
        out.append((greedy.numpy(), law.gather(1, true).view(-1).numpy()))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="mini model dir (default: data/mini/model)")
    ap.add_argument("--corpus", default=None, help="corpus with codes (default: data/mini/corpus)")
    ap.add_argument("--sentences", type=int, default=40, help="English eval sentences (the diagnosis's 40)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    corpus_dir = Path(args.corpus) if args.corpus else default_data_dir() / "corpus"
    corpus = load_corpus(corpus_dir)
    train = [in_language(corpus[s]) for s in TRAIN_SPLITS if s in corpus]
    ev = in_language(corpus["eval"])
    ev = ev.select(range(min(args.sentences, len(ev))))
    reads = talker_reads(args.model, ev)
    result = dict(model=str(args.model or "data/mini/model"), corpus=portable_path(corpus_dir), train_splits=[s for s in TRAIN_SPLITS if s in corpus],
                  sentences=len(ev), widths={})
    for w in WIDTHS:
        counts: dict[tuple, Counter] = defaultdict(Counter)
        for ds in train:
            for row in ds:
                c0 = np.asarray(row["codes"])[:, 0]
                for key, c in zip(contexts(np.asarray(row["phoneme_frames"]), w), c0):
                    counts[key][int(c)] += 1
        n = sum(sum(c.values()) for c in counts.values())
        majority = sum(c.most_common(1)[0][1] for c in counts.values()) / n
        entropy = 0.0
        for c in counts.values():
            p = np.array(list(c.values()), dtype=float)
            m = p.sum()
            entropy -= float((p * np.log(p / m)).sum())
        seen = hit = total = 0
        talker = {True: [], False: []}  # context seen in training -> [(greedy right, mass on the true code)]
        for row, (greedy, mass) in zip(ev, reads):
            c0 = np.asarray(row["codes"])[:, 0]
            for t, (key, c) in enumerate(zip(contexts(np.asarray(row["phoneme_frames"]), w), c0)):
                total += 1
                known = key in counts
                talker[known].append((float(greedy[t] == c), float(mass[t])))
                if known:
                    seen += 1
                    hit += counts[key].most_common(1)[0][0] == int(c)
        result["widths"][str(w)] = dict(contexts=len(counts), train_frames=n, in_sample_majority=round(majority, 4),
                                        in_sample_entropy=round(entropy / n, 4), eval_frames=total,
                                        eval_seen=round(seen / total, 4),
                                        eval_majority=round(hit / max(seen, 1), 4),
                                        **{f"talker_{'seen' if k else 'unseen'}": dict(
                                            frames=len(v), greedy_is_true_code=round(float(np.mean([a for a, _ in v])), 4),
                                            p_true_code=round(float(np.mean([b for _, b in v])), 4))
                                           for k, v in talker.items() if v})
        print(w, result["widths"][str(w)], file=sys.stderr)
    result["command"] = "python scripts/c0_context_predictability.py " + " ".join(argv or sys.argv[1:])
    write_json_atomic(args.out, result, indent=2)
    return result


if __name__ == "__main__":
    main()
