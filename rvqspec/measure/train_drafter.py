"""Train a drafter over the frozen code predictor (seed 000 §2.2 "Training the offsets").

Each drafted logit row at (position p, lookahead j) is scored with cross-entropy against the
ground-truth code c_{p+j}; the loss is summed over j <= K and all valid positions (p + j <= 15) and
averaged over the batch (Medusa's head recipe). Adam, batch 32; learning rate 1e-3 for one epoch (the
seed's values) for Medusa, whose heads start as the frozen heads, and the converged budget for the
drafters that start at zero (`recipe_for`). Only the drafter's parameters receive gradients; the code
predictor is frozen.

Losses are REPORTED per draft (the summed objective divided by the number of valid (p, j), 39 for
K = 3), in nats, so they read against log V (5.5 for the mini's 256 codes) and across K.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from tqdm import tqdm

from rvqspec.core.drafters import NUM_POSITIONS, Drafter
from rvqspec.measure.extract import ShardDataset


@dataclass(frozen=True)
class DrafterTrainConfig:
    lr: float = 1e-3              # seed 000 §2.2
    batch_size: int = 32          # seed 000 §2.2
    epochs: int = 1
    max_steps: int | None = None  # stop early after this many steps (None: all epochs)
    seed: int = 0
    threads: int | None = 1       # torch threads while training (the team's machine has 2 cores)


# The shift drafters' budget on a train split of the mini world's size (about 1,250 steps an epoch):
# trained from zero at the seed's 1e-3 for one epoch, the offsets stay near norm 15 against hidden
# states of about 40 and draft 1.08 tokens per call at N = 16; 3 epochs at 1e-2 converge (2.55, 94%
# of Medusa). docs/design.md, "The offsets' training budget".
CONVERGED_SHIFT = dict(lr=1e-2, epochs=3)


def recipe_for(drafter: Drafter | type[Drafter], config: DrafterTrainConfig = DrafterTrainConfig()) -> DrafterTrainConfig:
    """The training recipe of a drafter (instance or class): the seed's (`config`) for drafters that
    start as the frozen heads (Medusa), the converged shift budget for those that start at zero."""
    return replace(config, **CONVERGED_SHIFT) if drafter.starts_at_zero else config


def targets_for(codes: torch.Tensor, num_offsets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """codes (B, 16) -> (targets (B, 15, K) long, valid (15, K) bool): target[:, p-1, j-1] = c_{p+j}."""
    p = torch.arange(1, NUM_POSITIONS + 1).view(-1, 1)  # (15, 1)
    j = torch.arange(1, num_offsets + 1).view(1, -1)  # (1, K)
    idx = p + j  # (15, K)
    valid = idx <= NUM_POSITIONS
    return codes[:, idx.clamp(max=NUM_POSITIONS)], valid


def drafts_per_frame(num_offsets: int) -> int:
    """Valid (position, lookahead) pairs of one frame: sum over p of min(K, 15 - p)."""
    return int(targets_for(torch.zeros(1, NUM_POSITIONS + 1, dtype=torch.long), num_offsets)[1].sum())


def drafter_loss(drafter: Drafter, code_predictor, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Summed CE over valid (p, j), mean over the batch. hidden (B, 15, H), codes (B, 16)."""
    logits, valid = drafter.all_draft_logits(code_predictor, hidden)  # (B, 15, K, V), (15, K)
    tgt, _ = targets_for(codes, drafter.num_offsets)  # (B, 15, K)
    ce = F.cross_entropy(logits.flatten(0, 2).float(), tgt.flatten(), reduction="none").view(tgt.shape)  # (B, 15, K)
    return (ce * valid.to(ce.device)).sum((1, 2)).mean()


def train_drafter(drafter: Drafter, code_predictor, data, config: DrafterTrainConfig = DrafterTrainConfig(),
                  progress: bool = True) -> tuple[Drafter, list[float]]:
    """Train on `data`: a shard directory (teacher-forced extraction) or an iterable of
    (hidden (b, 15, H), codes (b, 16)) batches. Returns (drafter, per-step loss per draft)."""
    old_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    g = torch.Generator().manual_seed(config.seed)
    if isinstance(data, (str, bytes)) or hasattr(data, "__fspath__"):
        data = ShardDataset(data, batch_size=config.batch_size, generator=g, code_predictor=code_predictor)
    frozen = [(p, p.requires_grad) for p in code_predictor.parameters()]
    for p, _ in frozen:
        p.requires_grad_(False)
    params = [p for p in drafter.parameters()]
    if not params:
        raise ValueError("the drafter has no parameters to train")
    opt = torch.optim.Adam(params, lr=config.lr)
    losses: list[float] = []
    drafter.train()
    total = None
    try:
        total = len(data) * config.epochs
    except TypeError:
        pass
    if config.max_steps is not None:
        total = min(total, config.max_steps) if total else config.max_steps
    bar = tqdm(total=total, desc=f"train {drafter.kind}", unit="step", disable=not progress)
    dev = next(code_predictor.parameters()).device
    dt = next(code_predictor.parameters()).dtype
    per_draft = 1.0 / drafts_per_frame(drafter.num_offsets)
    try:
        step = 0
        for _ in range(config.epochs):
            for hidden, codes in data:
                # clone: batches may be inference-mode tensors (AR sampling), which autograd refuses to save
                loss = drafter_loss(drafter, code_predictor, hidden.to(dev, dt).clone(), codes.to(dev).clone())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()) * per_draft)
                step += 1
                bar.update(1)
                if step % 20 == 0:
                    bar.set_postfix(loss=f"{sum(losses[-20:]) / 20:.3f}")
                if config.max_steps is not None and step >= config.max_steps:
                    break
            if config.max_steps is not None and step >= config.max_steps:
                break
    finally:
        bar.close()
        for p, rg in frozen:
            p.requires_grad_(rg)
        torch.set_num_threads(old_threads)
        drafter.eval()
    return drafter, losses


@torch.no_grad()
def evaluate_loss(drafter: Drafter, code_predictor, data) -> float:
    """Mean CE per draft (nats) over an iterable of batches (validation)."""
    tot, n = 0.0, 0
    dev = next(code_predictor.parameters()).device
    for hidden, codes in data:
        tot += float(drafter_loss(drafter, code_predictor, hidden.to(dev), codes.to(dev))) * hidden.shape[0]
        n += hidden.shape[0]
    return tot / max(n, 1) / drafts_per_frame(drafter.num_offsets)
