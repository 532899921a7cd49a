"""Train the code predictor alone on the frozen talker's states, after the joint training.

In the joint recipe each step runs the whole talker for `cp_frames` code-predictor frames, so the
predictor sees each training frame about once in the build's budget. Its states are cheap to cache:
with the talker frozen, the teacher-forced hidden state of every training frame is computed once,
and further predictor steps cost only the predictor. The gate (docs/design.md, "A code predictor
trained for more epochs") measured a fresh predictor on the v3 talker at 1,500 against 6,000 such
steps: true c0 with the predictor's c1..c15 read at CER 25.5% -> 18.1%.

The loss is the joint recipe's (cross-entropy on c1..c15, prefill [talker hidden, emb(c0)]); the
talker reads the true history, as the code predictor's teacher-forced loss does in the joint steps.
Nothing here teaches the predictor to look ahead.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rvqspec.core.frame_loop import teacher_forced_inner, teacher_forced_talker
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.mini.schedule import warmup_cosine


@torch.inference_mode()
def talker_states(talker: CodeDecoder, cp: MultiCodeDecoder, texts: Sequence[np.ndarray], codes: Sequence[np.ndarray],
                  progress: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden (N, E) float32, codes (N, 16) long) of every frame of the utterances, the talker
    teacher-forced on the true history. `texts[i]` (T,) are frame-aligned tokens (the talker's text
    lead is applied inside `teacher_forced_talker`), `codes[i]` (T, 16)."""
    hs, cs = [], []
    for t, c in tqdm(list(zip(texts, codes)), desc="talker states", unit="utt", disable=not progress):
        text = torch.as_tensor(np.asarray(t), dtype=torch.long).view(1, -1)  # (1, T)
        code = torch.as_tensor(np.asarray(c), dtype=torch.long).view(1, -1, 16)  # (1, T, 16)
        h, _ = teacher_forced_talker(talker, cp, text, code)  # (1, T, E)
        hs.append(h[0].float())
        cs.append(code[0])
    return torch.cat(hs), torch.cat(cs)


def cosine_adamw_steps(params: list[torch.nn.Parameter], loss_of_step: Callable[[int], torch.Tensor], steps: int,
                       lr: float, weight_decay: float, desc: str, progress: bool = True) -> list[float]:
    """`steps` AdamW steps on `loss_of_step(step)` with warm-up then cosine decay and gradient
    clipping at 1, the joint recipe's optimizer; returns the per-step losses."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(min(100, max(1, steps // 10)), steps))
    losses = []
    bar = tqdm(range(steps), desc=desc, unit="step", disable=not progress)
    for step in bar:
        loss = loss_of_step(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    return losses


def refine_code_predictor(cp: MultiCodeDecoder, hidden: torch.Tensor, codes: torch.Tensor, steps: int, frames: int,
                          lr: float, weight_decay: float, generator: torch.Generator,
                          progress: bool = True) -> dict:
    """`steps` AdamW steps of the code predictor on random batches of `frames` cached frames:
    hidden (N, E), codes (N, 16). Warm-up then cosine, as the joint recipe. Trains `cp` in place."""
    if steps <= 0:
        raise ValueError(f"refine_code_predictor needs steps >= 1, got {steps}")
    if hidden.shape[0] != codes.shape[0] or codes.shape[-1] != 16:
        raise ValueError(f"hidden {tuple(hidden.shape)} and codes {tuple(codes.shape)} must be (N, E) and (N, 16)")
    cp.train()
    dtype = next(cp.parameters()).dtype

    def loss_of_step(_step: int) -> torch.Tensor:
        idx = torch.randint(0, hidden.shape[0], (min(frames, hidden.shape[0]),), generator=generator)  # (F,)
        fc = codes[idx]  # (F, 16)
        hid = teacher_forced_inner(cp, hidden[idx].to(dtype), fc, differentiable=True)  # (F, 15, H)
        logits = cp.lm_logits(hid, torch.arange(15))  # (F, 15, V): head p-1 emits c_p
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), fc[:, 1:].reshape(-1))

    t0 = time.time()
    losses = cosine_adamw_steps([p for p in cp.parameters() if p.requires_grad], loss_of_step, steps, lr,
                                weight_decay, "code predictor (frozen talker)", progress)
    cp.eval()
    return dict(cp_refine_steps=steps, cp_refine_frames=int(hidden.shape[0]),
                cp_refine_seconds=round(time.time() - t0, 1),
                cp_refine_final_train_loss=float(np.mean(losses[-50:])))
