"""How good is the mini world? Intelligibility of free-running synthesis per language, and the RVQ
depth structure of the code stream.

Depth structure: residual codebooks carry less and less predictable detail, so the code
predictor's per-position entropy should grow with codebook depth; we measure it teacher-forced on
held-out codec codes, with the deployed sampling's temperature (entropy of the softmax at T=0.9
before top-k, and of the top-k-truncated distribution actually sampled).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from rvqspec.core.frame_loop import teacher_forced_inner, teacher_forced_talker
from rvqspec.core.sampling import Sampling, probs
from rvqspec.mini.corpus import in_language, load_corpus
from rvqspec.mini.pipeline import intelligibility

LANGUAGES = ("en", "de", "es", "ru", "ja", "zh")


@dataclass(frozen=True)
class MiniEvalConfig:
    sentences_per_language: int = 12
    seeds: tuple[int, ...] = (0,)
    entropy_utterances: int = 48
    split: str = "eval"
    languages: tuple[str, ...] = LANGUAGES


@torch.inference_mode()
def depth_entropy(tts, texts: Sequence[np.ndarray], codes: Sequence[np.ndarray],
                  sampling: Sampling = Sampling()) -> dict:
    """Mean entropy (nats) per codebook c0..c15 on teacher-forced held-out data.

    c0 comes from the talker's codec head (restricted to the codebook), c1..c15 from the code
    predictor's heads. Returns {"softmax": [16], "sampled": [16]}: the tempered softmax, and the
    top-k/top-p distribution the deployed sampler draws from."""
    talker, cp, cb = tts.talker, tts.code_predictor, tts.codebook_size
    tempered = Sampling(do_sample=True, top_k=0, top_p=1.0, temperature=sampling.temperature)
    soft, samp, n = torch.zeros(16), torch.zeros(16), 0
    for t, c in zip(texts, codes):
        tt = torch.as_tensor(np.asarray(t), dtype=torch.long).view(1, -1)  # (1, T)
        cc = torch.as_tensor(np.asarray(c), dtype=torch.long).view(1, -1, 16)  # (1, T, 16)
        hidden, logits = teacher_forced_talker(talker, cp, tt, cc)  # (1, T, E), (1, T, V)
        T = tt.shape[1]
        lg = [logits[0, :, :cb]]  # c0: (T, cb)
        cl = cp.lm_logits(teacher_forced_inner(cp, hidden[0], cc[0]), torch.arange(15))  # (T, 15, V)
        lg += [cl[:, i] for i in range(15)]
        for g, l in enumerate(lg):
            for acc, s in ((soft, tempered), (samp, sampling)):
                p = probs(l.float(), s)  # (T, V)
                acc[g] += float(-(p * torch.log(p.clamp_min(1e-30))).sum(-1).sum())
        n += T
    return dict(softmax=(soft / n).tolist(), sampled=(samp / n).tolist(), frames=n)


def entropy_figure(ent: dict):
    x = [f"c{i}" for i in range(16)]
    fig = go.Figure([go.Scatter(x=x, y=ent["softmax"], mode="lines+markers", name="softmax (T=0.9)"),
                     go.Scatter(x=x, y=ent["sampled"], mode="lines+markers", name="top-k 50 (sampled)")])
    fig.update_layout(title="Code-predictor entropy per RVQ codebook (mini world, held-out)",
                      xaxis_title="codebook", yaxis_title="entropy (nats)", template="plotly_white")
    return fig


def evaluate_mini(tts, recognizer, corpus_dir: str | Path, config: MiniEvalConfig = MiniEvalConfig(),
                  inner=None, progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """CER/WER of free-running synthesis per language (held-out eval texts, drawn with `sampling`)
    + depth entropy."""
    dd = load_corpus(corpus_dir)
    ds = dd[config.split]
    table = {}
    for lang in config.languages:
        rows = in_language(ds, lang)
        texts = list(rows["text"][: config.sentences_per_language])
        if not texts:
            continue
        res = intelligibility(tts, texts, lang, recognizer, seeds=config.seeds, sampling=sampling,
                              inner=inner, progress=progress)
        table[lang] = {k: res[k] for k in ("n", "per", "wer", "cer", "tokens_per_call")}
    en = in_language(ds).select_columns(["phoneme_frames", "codes"])
    en = en.select(range(min(config.entropy_utterances, len(en))))
    ent = depth_entropy(tts, en["phoneme_frames"], en["codes"], sampling=sampling)
    return dict(config=asdict(config), sampling=asdict(sampling), intelligibility=table, depth_entropy=ent)
