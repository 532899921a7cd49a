"""Multi-level distillation of a depth-pruned talker from the unpruned one (seed 001 §3).

Loss on a teacher-forced batch (text (B, T), codes (B, T, 16), valid (B, T)):

    L = (1 - w) * L_sup + w * L_kd,        w = DistillConfig.kd_weight = 0.25 (seed 001)

so the supervised part gets three times the weight of the distillation part ("favouring supervised
guidance"). The two parts:

* L_sup = CE(c0 from the student's codec head) + CE(c1..c15 from the *frozen* code predictor fed
  by the student's hidden state), computed by the mini trainer's own `losses` so it is exactly the
  objective the teacher was trained with.
* L_kd = w_logit * SKL + w_latent * latent + w_attn * attention + w_emb * embedding, where
  - SKL = Skew KL on c0 (DistiLLM): KL(p_T || a p_T + (1 - a) q_S), a = 0.1, mean over frames;
  - latent = mean over retained student layers j of MSE(h_S[j], h_T[target(j)]) divided by the
    mean square of h_T[target(j)] (a relative MSE: the residual stream's scale grows with depth
    and model size, so without it one layer's term would swamp the rest and `w` would mean
    something different per model);
  - attention = mean over layers, heads and query frames of the squared error of the attention
    probability rows (summed over keys: a row sums to 1, so per-entry means would be ~1/T^2);
  - embedding = relative MSE of the talker input embeddings (the "embedding output").
  All terms average over real (non-padded) frames only.
  An optional fifth term, `w_cp` (0 in the seed's recipe), is the Skew KL of the frozen code
  predictor's c1..c15 laws read from the teacher's hidden state against those read from the
  student's, teacher-forced on the same frames: a Qwen3-TTS frame's output is all 16 codes, and
  the talker emits c1..c15 only through the state the predictor reads, so matching the teacher's
  c0 logits alone leaves most of the frame's output undistilled.

Dynamic target selection (seed 001): the student layer copied from teacher layer keep[j] is aligned
to the teacher's last layer before the next retained layer, keep[j+1] - 1 (the last student layer
to the teacher's last layer), because after pruning it must do the work of the whole removed
segment. The ablation ("index") aligns it to keep[j], the teacher layer it was copied from.

Why the code predictor stays frozen: it is not pruned (seed 001 prunes only the backbone), it is
shared by the teacher and the student, and the speculative drafter and tree (seed 000) were trained
against its exact weights (`load_drafter` checks the model hash). Keeping it fixed makes the
student's hidden state honour the interface the code predictor (and its drafter) expect, and
the saved student keeps the identical code predictor.
"""
from __future__ import annotations

import copy
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rvqspec.core.checkpoint import Qwen3TTS, save_qwen3_tts
from rvqspec.core.frame_loop import talker_inputs, teacher_forced_inner
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.mini.schedule import warmup_cosine
from rvqspec.mini.talker_train import load_split, losses_from_talker, training_batch, validation_loss
from rvqspec.spade.prune import prune_talker
from rvqspec.spade.trace import Trace, trace_talker

# validation utterances of the before/after teacher-forced losses in a student's metrics
VALIDATION_UTTERANCES = 64

TARGET_MODES = ("dynamic", "index")


@dataclass(frozen=True)
class DistillConfig:
    """Recipe of one distillation run (every default in one place; the CLI reads these)."""

    targets: str = "dynamic"        # "dynamic" (seed 001) or "index" (ablation)
    kd_weight: float = 0.25         # w in L = (1 - w) L_sup + w L_kd (seed 001)
    skew_alpha: float = 0.1         # a of Skew KL (DistiLLM)
    w_logit: float = 1.0
    w_latent: float = 1.0
    w_attn: float = 1.0
    w_emb: float = 1.0
    w_cp: float = 0.0               # code-predictor output KD (not in seed 001; module docstring)
    steps: int = 200               # minutes on one shared CPU thread at mini size
    batch_utterances: int = 8
    max_frames: int = 96            # longer utterances are cropped to a random window
    cp_frames: int = 128            # frames per step for the c1..c15 loss through the code predictor
    lr: float = 1e-3                # half the mini model's peak rate (2e-3): healing, not training
    warmup_steps: int = 10
    weight_decay: float = 0.0
    split: str = "model_train"      # the teacher's own training distribution (seed 001: a small fraction)
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        if self.targets not in TARGET_MODES:
            raise ValueError(f"DistillConfig.targets must be one of {TARGET_MODES}, got {self.targets!r}")
        if not 0.0 <= self.kd_weight <= 1.0:
            raise ValueError(f"DistillConfig.kd_weight must be in [0, 1], got {self.kd_weight}")
        if not 0.0 <= self.skew_alpha < 1.0:
            raise ValueError(f"DistillConfig.skew_alpha must be in [0, 1), got {self.skew_alpha}")
        for name in ("steps", "batch_utterances", "max_frames", "cp_frames"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"DistillConfig.{name} must be > 0, got {getattr(self, name)}")


# ---------------------------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------------------------
def target_layers(keep_layers: Sequence[int], num_teacher_layers: int, mode: str = "dynamic") -> list[int]:
    """Teacher layer that each retained student layer is aligned to.

    dynamic: keep[j+1] - 1 (the teacher's last layer before the next retained one), and
    num_teacher_layers - 1 for the last; index: keep[j] (the layer it was copied from).
    E.g. keep [0, 3] of 4 -> dynamic [2, 3], index [0, 3]."""
    keep = [int(i) for i in keep_layers]
    if mode not in TARGET_MODES:
        raise ValueError(f"target mode must be one of {TARGET_MODES}, got {mode!r}")
    if not keep or keep != sorted(set(keep)) or keep[0] < 0 or keep[-1] >= num_teacher_layers:
        raise ValueError(f"keep_layers {keep} must be increasing indices in 0..{num_teacher_layers - 1}")
    if mode == "index":
        return keep
    return [nxt - 1 for nxt in keep[1:]] + [num_teacher_layers - 1]


def skew_kl(teacher_logp: torch.Tensor, student_logp: torch.Tensor, alpha: float = 0.1) -> torch.Tensor:
    """Skew KL (DistiLLM) over the last axis: KL(p || a p + (1 - a) q) from log-probabilities
    (..., V) -> (...,). The mixture has mass a p wherever p does, so it stays finite where q = 0."""
    if teacher_logp.shape != student_logp.shape:
        raise ValueError(f"skew_kl: teacher {tuple(teacher_logp.shape)} and student "
                         f"{tuple(student_logp.shape)} log-probabilities differ in shape")
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"skew_kl: alpha must be in [0, 1), got {alpha}")
    # Clamp -inf (exact zeros) to a floor whose exp is 0 in float32: keeps 0 * log 0 = 0 and the
    # gradient finite, and changes no probability that float32 can represent.
    lp = teacher_logp.float().clamp(min=-1e4)
    lq = student_logp.float().clamp(min=-1e4)
    if alpha > 0:
        log_mix = torch.logaddexp(lp + math.log(alpha), lq + math.log1p(-alpha))  # (..., V)
    else:
        log_mix = lq
    return (lp.exp() * (lp - log_mix)).sum(-1)


def _rel_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """MSE(student, teacher) / mean(teacher^2) over rows (N, H) (teacher detached)."""
    scale = teacher.detach().pow(2).mean().clamp(min=1e-12)
    return F.mse_loss(student, teacher.detach()) / scale


def kd_terms(student: Trace, teacher: Trace, targets: Sequence[int], valid: torch.Tensor,
             alpha: float = 0.1) -> dict[str, torch.Tensor]:
    """The four distillation terms (see the module docstring) of one batch; valid (B, T) bool."""
    if len(targets) != len(student.hidden):
        raise ValueError(f"kd_terms: {len(targets)} targets for {len(student.hidden)} student layers")
    extra = teacher.logits.shape[1] - valid.shape[1]
    if extra > 0:  # a text-lead prefix (TalkerConfig.text_lead) precedes the frames: not distilled
        valid = F.pad(valid, (extra, 0), value=False)
    lt = F.log_softmax(teacher.logits[valid].float(), dim=-1)  # (N, V)
    ls = F.log_softmax(student.logits[valid].float(), dim=-1)  # (N, V)
    logit = skew_kl(lt, ls, alpha).mean()
    latent = torch.stack([_rel_mse(student.hidden[j][valid], teacher.hidden[t][valid])
                          for j, t in enumerate(targets)]).mean()
    attn = []
    for j, t in enumerate(targets):
        ps = student.attentions[j].transpose(1, 2)[valid]  # (N, nh, T) rows of real query frames
        pt = teacher.attentions[t].transpose(1, 2)[valid].detach()  # (N, nh, T)
        attn.append((ps - pt).pow(2).sum(-1).mean())
    emb = _rel_mse(student.embeddings[valid], teacher.embeddings[valid])
    return dict(logit=logit, latent=latent, attn=torch.stack(attn).mean(), emb=emb)


def code_predictor_kd(student_cp: MultiCodeDecoder, teacher_cp: MultiCodeDecoder, s_final: torch.Tensor,
                      t_final: torch.Tensor, codes: torch.Tensor, valid: torch.Tensor, cp_frames: int,
                      alpha: float = 0.1, generator: torch.Generator | None = None) -> torch.Tensor:
    """Skew KL of the code predictor's c1..c15 laws, teacher state against student state, over up to
    `cp_frames` real frames drawn with `generator`. s_final / t_final (B, T, E) are the talkers'
    final hidden states over the T frames, codes (B, T, 16), valid (B, T)."""
    hs, ht, fc = s_final[valid], t_final[valid].detach(), codes[valid]  # (N, E), (N, E), (N, 16)
    if hs.shape[0] > cp_frames:
        pick = torch.randperm(hs.shape[0], generator=generator)[:cp_frames]
        hs, ht, fc = hs[pick], ht[pick], fc[pick]
    heads = torch.arange(15)
    with torch.no_grad():
        lt = teacher_cp.lm_logits(teacher_forced_inner(teacher_cp, ht, fc), heads)  # (N, 15, V)
    ls = student_cp.lm_logits(teacher_forced_inner(student_cp, hs, fc, differentiable=True), heads)  # (N, 15, V)
    return skew_kl(F.log_softmax(lt.float(), -1), F.log_softmax(ls.float(), -1), alpha).mean()


def student_code_predictor(code_predictor: MultiCodeDecoder, student: CodeDecoder) -> MultiCodeDecoder:
    """A frozen copy of the code predictor whose c0 embedding is the student's codec embedding (the
    official wiring), so the teacher's own predictor keeps reading the teacher's table."""
    cp = copy.deepcopy(code_predictor)
    cp.requires_grad_(False)
    cp.eval()
    cp.set_c0_embedding(student.model.codec_embedding)
    return cp


def distill_losses(student: CodeDecoder, teacher: CodeDecoder, student_cp: MultiCodeDecoder,
                   teacher_cp: MultiCodeDecoder, targets: Sequence[int], text: torch.Tensor,
                   codes: torch.Tensor, valid: torch.Tensor, config: DistillConfig,
                   generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """All loss terms of one batch and their combination 'total' (differentiable in the student)."""
    c = config
    with torch.no_grad():
        t_trace = trace_talker(teacher, talker_inputs(teacher, teacher_cp, text, codes))
    s_trace = trace_talker(student, talker_inputs(student, student_cp, text, codes))
    # supervised: c0 CE from the codec head + c1..c15 CE through the frozen predictor (the trainer's
    # own objective), read from the same traced student forward (the trace equals CodeDecoder.forward,
    # tests/test_spade.py); a text-lead prefix precedes the T frames and is dropped
    L = s_trace.final.shape[1] - codes.shape[1]
    ce_c0, ce_cp = losses_from_talker(student_cp, s_trace.final[:, L:], s_trace.logits[:, L:], codes, valid,
                                      c.cp_frames, generator)
    kd = kd_terms(s_trace, t_trace, targets, valid, c.skew_alpha)
    sup = ce_c0 + ce_cp
    kd_total = c.w_logit * kd["logit"] + c.w_latent * kd["latent"] + c.w_attn * kd["attn"] + c.w_emb * kd["emb"]
    if c.w_cp > 0:
        kd["cp"] = code_predictor_kd(student_cp, teacher_cp, s_trace.final[:, L:], t_trace.final[:, L:], codes,
                                     valid, c.cp_frames, c.skew_alpha, generator)
        kd_total = kd_total + c.w_cp * kd["cp"]
    total = (1.0 - c.kd_weight) * sup + c.kd_weight * kd_total
    return dict(total=total, sup=sup, ce_c0=ce_c0, ce_cp=ce_cp, kd=kd_total, **kd)


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
@dataclass
class DistillResult:
    student: CodeDecoder
    code_predictor: MultiCodeDecoder      # frozen copy wired to the student's codec embedding
    keep_layers: list[int]
    targets: list[int]
    history: list[dict]                   # one dict of floats per step
    metrics: dict

    def summary(self) -> dict:
        return dict(keep_layers=self.keep_layers, targets=self.targets, **self.metrics)


def distill(teacher_talker: CodeDecoder, code_predictor: MultiCodeDecoder, keep_layers: Sequence[int],
            corpus_dir: str | Path, config: DistillConfig = DistillConfig(), progress: bool = True,
            batches: list | None = None, validation_utterances: int = VALIDATION_UTTERANCES) -> DistillResult:
    """Prune `teacher_talker` to `keep_layers` and heal it by multi-level distillation (seed 001).

    Data: `config.split` of the corpus (or the given list of (text, codes, valid) `batches`, cycled,
    for tests). The teacher and the code predictor are never modified. Teacher-forced validation
    losses before and after (metrics) are taken on the first `validation_utterances` of the
    corpus's validation split (whole utterances: at mini size about 3 s per 64 on one thread)."""
    c = config
    torch.set_num_threads(c.threads)
    keep = [int(i) for i in keep_layers]
    targets = target_layers(keep, teacher_talker.config.num_hidden_layers, c.targets)
    teacher = teacher_talker.eval()
    student = prune_talker(teacher, keep).train()
    student.requires_grad_(True)
    s_cp = student_code_predictor(code_predictor, student)
    t_cp = code_predictor
    texts = codes = None
    if batches is None:
        texts, codes = load_split(Path(corpus_dir), c.split)
    g = torch.Generator().manual_seed(c.seed)
    rng = np.random.default_rng(c.seed)
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(c.warmup_steps, c.steps))
    val_before = (validation_loss(student.eval(), s_cp, Path(corpus_dir), limit=validation_utterances)
                  if batches is None else {})
    student.train()
    history: list[dict] = []
    t0 = time.time()
    bar = tqdm(range(c.steps), desc=f"distill keep={keep} {c.targets}", unit="step", disable=not progress)
    for step in bar:
        if batches is None:
            idx = rng.choice(len(texts), size=min(c.batch_utterances, len(texts)), replace=False)
            text, code, valid = training_batch(texts, codes, idx, c.max_frames, rng, teacher.config.text_lead)
        else:
            text, code, valid = batches[step % len(batches)]
        terms = distill_losses(student, teacher, s_cp, t_cp, targets, text, code, valid, c, g)
        opt.zero_grad(set_to_none=True)
        terms["total"].backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        history.append(dict({k: float(v.detach()) for k, v in terms.items()}, frames=int(valid.sum()), utterances=int(valid.shape[0])))
        if step % 10 == 0:
            bar.set_postfix(total=f"{history[-1]['total']:.3f}", sup=f"{history[-1]['sup']:.3f}",
                            kd=f"{history[-1]['kd']:.3f}")
    student.eval()
    student.requires_grad_(False)
    val_after = (validation_loss(student, s_cp, Path(corpus_dir), limit=validation_utterances)
                 if batches is None else {})
    last = history[-min(20, len(history)):]
    loss_keys = [k for k in history[0] if k not in ("frames", "utterances")]
    metrics = dict(seconds=round(time.time() - t0, 1), steps=c.steps, config=asdict(c),
                   frames=int(sum(h["frames"] for h in history)),  # real frames distilled on (all steps)
                   utterances=int(sum(h["utterances"] for h in history)),  # cropped windows, with repeats
                   first_mean={k: float(np.mean([h[k] for h in history[:len(last)]])) for k in loss_keys},
                   last_mean={k: float(np.mean([h[k] for h in last])) for k in loss_keys},
                   validation_utterances=int(validation_utterances),
                   validation_before={k: v for k, v in val_before.items()},
                   validation_after={k: v for k, v in val_after.items()})
    return DistillResult(student=student, code_predictor=s_cp, keep_layers=keep, targets=targets,
                         history=history, metrics=metrics)


# ---------------------------------------------------------------------------------------------
# saving
# ---------------------------------------------------------------------------------------------
def save_student(student: CodeDecoder, code_predictor: MultiCodeDecoder, teacher_config, out_dir: str | Path,
                 teacher_dir: str | Path | None = None, info: dict | None = None) -> Path:
    """Write the student in the official layout (talker with fewer layers + the same code
    predictor), with the teacher's phoneme tokenizer and mini_model.json copied beside it and
    `spade.json` (`info`). Written to a temporary sibling and renamed: nothing half-written."""
    out = Path(out_dir)
    cfg = replace(teacher_config, talker=copy.deepcopy(student.config))
    model = Qwen3TTS(config=cfg, talker=student, code_predictor=code_predictor)
    tmp = out.with_name(f".{out.name}.tmp-spade")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        save_qwen3_tts(model, tmp)
        if teacher_dir is not None:
            from rvqspec.mini.phonemes import TOKENIZER_FILE

            for name in (TOKENIZER_FILE, "mini_model.json"):
                src = Path(teacher_dir) / name
                if src.exists():
                    shutil.copy2(src, tmp / name)
        (tmp / "spade.json").write_text(json.dumps(info or {}, indent=2, default=str) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
