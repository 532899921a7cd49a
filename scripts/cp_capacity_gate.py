"""Gate: is the code predictor's failure on c1..c5 capacity, or the phoneme it cannot read from the
talker's state? (issue 14, intelligibility; docs/design.md "Where free-running speech loses its
intelligibility")

A lookup table that knows only the frame's phoneme token and c0, drawing each of c1..c15 from the
codes the model_train frames with the same (token, c0) used, reads at 12.9% CER on the gate's eval
sentences; the code predictor, given the true c0 and the whole true history, 30.1% (per level
given the true lower levels; `runs/diag`-free: this script's `count_table` and `cp_levels` rows).
Both err by the same squared feature distance, so the predictor's codes are wrong in the
directions that carry the phoneme.

Each arm trains a FRESH code predictor on the frozen talker of `--model` (the `--points 2` timing
gate model unless told), on the talker's teacher-forced hidden states of the gate corpus's
model_train + train frames, for the same steps and batch:
  `--arm base`     the committed predictor's size (192 x 5, the 0.6B layout's identity projection);
  `--arm token`    the same, with a learned embedding of the frame's phoneme token added to the
                   talker state it reads (a diagnostic, not a deployable model: Qwen3-TTS's
                   predictor reads only the talker state and c0);
  `--arm wide`     384 x 5 (mlp 1,152, 8 heads) behind a learned 192 -> 384 projection (the 1.7B
                   layout's projection, as its width differs from the talker's);
  `--arm dropout`  the base predictor, with dropout 0.3 on the talker state it reads while training
                   (regularization: the state's frame-specific detail is what it cannot generalize);
  `--arm continue` the model's own code predictor, trained further on the frozen talker's states
                   (`--steps 0`: the model's predictor itself, measured by the same harness).
Measured on `--sentences` eval sentences through the committed recognizer (PER / CER / WER):
`cp_levels` (true c0; each c_k drawn given the true lower levels, top-k 50 / T 0.9), `cp_frame`
(true c0, the inner loop sampled as deployed), and the predictor's validation cross-entropy per
code. `count_table` is the lookup table above, `true` the codec resynthesis.

Written before the run: capacity is supported if `wide` lowers cp_frame's CER by at least 5 points
against `base`; the phoneme's readout is the bottleneck if `token` lowers it by at least 10 points
against `base` (towards count_table); both falsified if neither moves by 5. Dropout (run after
those three) is supported if it lowers cp_frame's CER by at least 5 points against `base`.

usage: python scripts/cp_capacity_gate.py --arm base --steps 1500 --out docs/measurements/intelligibility/cp_gate_base.json
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.config import CodePredictorConfig
from rvqspec.core.frame_loop import teacher_forced_inner
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.model import MultiCodeDecoder
from rvqspec.core.sampling import Sampling, probs
from rvqspec.mini.corpus import load_corpus
from rvqspec.mini.learned_codec import load_codec
from rvqspec.mini.phonemes import TOKENIZER_FILE, PhonemeTokenizer
from rvqspec.mini.pipeline import default_data_dir
from rvqspec.mini.predictor_refine import cosine_adamw_steps
from rvqspec.mini.predictor_refine import talker_states as frame_states  # this script's adds the tokens
from rvqspec.mini.recognizer import intelligibility_score
from rvqspec.real.asr import load_recognizer

# sibling scripts: scripts/ is on sys.path when this file runs as a script
from diagnose_intelligibility import read_aloud
from predictor_cell_probe import cell_counts, english

REPO = Path(__file__).resolve().parents[1]
GATE = REPO / "runs" / "gates" / "timing_p2"  # scripts/token_timing_gate.py --points 2
ARMS = ("base", "token", "wide", "dropout", "continue")


def talker_states(model, rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hidden (N, E), codes (N, 16), tokens (N,)) of every frame, the talker on the true history."""
    h, codes = frame_states(model.talker, model.code_predictor, [t for t, _, _ in rows], [c for _, c, _ in rows],
                            progress=False)
    return h, codes, torch.from_numpy(np.concatenate([t for t, _, _ in rows]))


class Predictor(torch.nn.Module):
    """A fresh MultiCodeDecoder on a frozen talker; `token_vocab` adds a token embedding to the state."""

    def __init__(self, arm: str, talker_hidden: int, vocab: int, c0_embedding: torch.nn.Embedding, token_vocab: int,
                 init: MultiCodeDecoder | None = None):
        super().__init__()
        width = 384 if arm == "wide" else talker_hidden
        heads = 8 if arm == "wide" else 4
        if arm == "continue":  # the model's own predictor (its config and weights), trained further
            self.cp = copy.deepcopy(init)
            self.cp.requires_grad_(True)
        else:
            self.cp = MultiCodeDecoder(CodePredictorConfig(
                vocab_size=vocab, hidden_size=width, intermediate_size=3 * width, num_hidden_layers=5,
                num_attention_heads=heads, num_key_value_heads=heads // 2, head_dim=width // heads,
                max_position_embeddings=64, talker_hidden_size=talker_hidden))
        self.cp.set_c0_embedding(c0_embedding)
        self.token = torch.nn.Embedding(token_vocab, talker_hidden) if arm == "token" else None
        self.dropout = 0.3 if arm == "dropout" else 0.0
        if self.token is not None:
            torch.nn.init.zeros_(self.token.weight)  # starts as the base arm

    def state(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        if self.token is not None:
            hidden = hidden + self.token(tokens)
        return F.dropout(hidden, self.dropout, self.training) if self.dropout else hidden

    def logits(self, hidden, codes, tokens, differentiable: bool) -> torch.Tensor:
        hid = teacher_forced_inner(self.cp, self.state(hidden, tokens), codes, differentiable=differentiable)
        return self.cp.lm_logits(hid, torch.arange(15))  # (N, 15, V): head p-1 emits c_p


def train(pred: Predictor, h, codes, toks, steps: int, batch: int, lr: float, g: torch.Generator) -> list[float]:
    def loss_of_step(_step: int) -> torch.Tensor:
        idx = torch.randint(0, h.shape[0], (batch,), generator=g)
        lg = pred.logits(h[idx], codes[idx], toks[idx], differentiable=True)
        return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), codes[idx, 1:].reshape(-1))

    return cosine_adamw_steps([p for p in pred.parameters() if p.requires_grad], loss_of_step, steps, lr, 0.01,
                              "code predictor")


@torch.inference_mode()
def evaluate(pred: Predictor, model, codec, rows, tables, n: int) -> dict:
    rec = load_recognizer(str(default_data_dir() / "recognizer"))
    sampling = Sampling()
    out = defaultdict(lambda: ([], [], []))
    ce = []
    for i, (t, c, text) in enumerate(tqdm(rows, desc="eval")):
        h, ct, tk = talker_states(model, [(t, c, text)])
        lg = pred.logits(h, ct, tk, differentiable=False)  # (T, 15, V)
        ce.append(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), ct[:, 1:].reshape(-1), reduction="sum").item())
        if i >= n:
            continue
        g = torch.Generator().manual_seed(i)
        p = probs(lg, sampling)  # (T, 15, V): the deployed law per level
        levels = ct.clone()
        levels[:, 1:] = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=g).view(-1, 15)
        frame = ct.clone()
        state = pred.state(h, tk)  # (T, E)
        for j in range(ct.shape[0]):
            frame[j, 1:] = pred.cp.generate_frame(state[j].view(1, 1, -1), ct[j, :1].view(1, 1),
                                                  sampling=sampling, generator=g).view(15)
        table = ct.clone()
        for j in range(ct.shape[0]):
            cnt = tables.get((int(tk[j]), int(ct[j, 0])))
            if cnt is not None:
                q = torch.from_numpy(cnt / cnt.sum(-1, keepdims=True))  # (15, V)
                table[j, 1:] = torch.multinomial(q, 1, generator=g).view(15)
        for name, codes in (("true", ct), ("count_table", table), ("cp_levels", levels), ("cp_frame", frame)):
            hyp, ph = read_aloud(rec, codec, codes)
            out[name][0].append(text), out[name][1].append(hyp), out[name][2].append(ph)
    frames = sum(len(t) for t, _, _ in rows)
    res = {}
    for name, (refs, hyps, phons) in out.items():
        s = intelligibility_score(refs, hyps, "en", phons)
        res[name] = dict(per=s["per"], cer=s["cer"], wer=s["wer"])
    return dict(variants=res, val_ce_per_code=ce and sum(ce) / (frames * 15))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", choices=ARMS, required=True)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--gate", type=Path, default=GATE, help="work dir of a gate model: model/ and corpus/")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    model = load_qwen3_tts(args.gate / "model")
    for p in list(model.talker.parameters()) + list(model.code_predictor.parameters()):
        p.requires_grad_(False)
    corpus = load_corpus(args.gate / "corpus")
    train_rows = english(corpus, "model_train") + english(corpus, "train")
    h, codes, toks = talker_states(model, train_rows)  # (N, E), (N, 16), (N,)
    print(f"[cp gate {args.arm}] {h.shape[0]} training frames in {time.time() - t0:.0f} s", flush=True)
    vocab = int(model.code_predictor.config.vocab_size)
    tables = cell_counts(train_rows, vocab)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    token_vocab = PhonemeTokenizer.load(args.gate / "model" / TOKENIZER_FILE).vocab_size
    pred = Predictor(args.arm, h.shape[1], vocab, model.talker.model.codec_embedding, token_vocab,
                     init=model.code_predictor)
    hist = train(pred, h, codes, toks, args.steps, args.batch, args.lr, g) if args.steps else []
    pred.eval()
    codec = load_codec(default_data_dir() / "codec")
    ev = english(corpus, "eval", 40)
    result = dict(arm=args.arm, steps=args.steps, batch=args.batch, lr=args.lr, training_frames=int(h.shape[0]),
                  parameters=sum(p.numel() for p in pred.parameters() if p.requires_grad),
                  final_train_ce=float(np.mean(hist[-50:])) if hist else None, **evaluate(pred, model, codec, ev, tables, args.sentences),
                  sentences=args.sentences, seconds=round(time.time() - t0),
                  command="python scripts/cp_capacity_gate.py " + " ".join(argv or sys.argv[1:]),
                  falsified_if=("wide lowers cp_frame CER by < 5 points against base (capacity), token by < 10 "
                                "(the phoneme's readout); both falsified if neither moves by 5"))
    write_json_atomic(args.out, result)
    print({k: v["cer"] for k, v in result["variants"].items()}, result["val_ce_per_code"])
    return result


if __name__ == "__main__":
    main()
