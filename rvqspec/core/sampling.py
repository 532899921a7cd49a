"""Token sampling exactly as the official code predictor samples (HF `generate` logits processors).

The deployed Qwen3-TTS passes `subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0,
subtalker_temperature=0.9` to the code predictor's HF `generate`, whose warpers run in this order:
temperature -> top-k -> top-p, then softmax and `torch.multinomial`. Lossless speculative
verification (seed 000 §2.3) needs the very same target distribution p, so `probs` reproduces
those warpers (ties, `top_k >= V`, `min_tokens_to_keep=1`) and returns p itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """How one code is drawn from logits. Defaults are the deployed `subtalker_*` values."""

    do_sample: bool = True
    top_k: int = 50          # 0 or None: no top-k filter (as HF)
    top_p: float = 1.0       # >= 1.0: no top-p filter (as HF)
    temperature: float = 0.9

    def __post_init__(self) -> None:
        if self.do_sample:
            if not (self.temperature > 0.0):
                raise ValueError(f"Sampling.temperature must be > 0 when do_sample=True, got {self.temperature}")
            if self.top_k is not None and self.top_k < 0:
                raise ValueError(f"Sampling.top_k must be >= 0 (0 = off), got {self.top_k}")
            if not (0.0 <= self.top_p <= 1.0):
                raise ValueError(f"Sampling.top_p must be in [0, 1], got {self.top_p}")

    @classmethod
    def greedy(cls) -> "Sampling":
        return cls(do_sample=False)


def warp_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Processed scores (..., V) in float32: -inf outside the kept support (HF warper semantics).

    HF `generate` first casts the last-position logits to float32, then applies
    TemperatureLogitsWarper (only if T != 1), TopKLogitsWarper (only if top_k not in (None, 0)),
    TopPLogitsWarper (only if top_p < 1).
    """
    scores = logits.to(torch.float32)  # (..., V)
    if not sampling.do_sample:
        return scores
    if sampling.temperature != 1.0:
        scores = scores / sampling.temperature
    vocab = scores.shape[-1]
    if sampling.top_k:  # HF: top_k = min(max(top_k, min_tokens_to_keep=1), V); keep ties with the k-th value
        k = min(max(int(sampling.top_k), 1), vocab)
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]  # (..., 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        # HF TopPLogitsWarper: sort ascending, drop the low tail whose cumulative mass <= 1 - top_p,
        # always keep the top token (min_tokens_to_keep=1).
        sorted_scores, sorted_idx = torch.sort(scores, dim=-1, descending=False)  # (..., V)
        cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)  # (..., V)
        drop_sorted = cum <= (1.0 - sampling.top_p)
        drop_sorted[..., -1:] = False
        drop = drop_sorted.scatter(-1, sorted_idx, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Target distribution p (..., V) float32; greedy -> one-hot at argmax of the raw logits."""
    if not sampling.do_sample:
        raw = logits.to(torch.float32)
        out = torch.zeros_like(raw)  # (..., V)
        return out.scatter_(-1, raw.argmax(dim=-1, keepdim=True), 1.0)
    return warp_logits(logits, sampling).softmax(dim=-1)


def sample(p: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of p (B, V) -> (B,) long, as HF does (`torch.multinomial`)."""
    if p.dim() != 2:
        raise ValueError(f"sample expects probabilities of shape (B, V), got {tuple(p.shape)}")
    return torch.multinomial(p, 1, generator=generator).squeeze(-1)


def sample_logits(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> torch.Tensor:
    """Logits (B, V) -> codes (B,) long; greedy takes argmax without drawing."""
    if not sampling.do_sample:
        return logits.argmax(dim=-1)
    return sample(probs(logits, sampling), generator)


def sampling_tensors(sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The graph inputs (temperature (1,) float32, top_k (1,) int32, top_p_tail (1,) float32) that
    make `warp_tensor` compute `warp_logits(., sampling)`. top_p_tail = 1 - top_p is computed here in
    float64 and rounded once, as `warp_logits` compares with the Python float 1 - top_p (a float32
    subtraction in the graph would round differently); -1 when top-p is off. Greedy is (1, 1, -1):
    top-1 keeps the maximum (and its ties), so the Gumbel-max sample with zero noise is the argmax
    of the raw logits."""
    if not sampling.do_sample:
        return torch.ones(1), torch.ones(1, dtype=torch.int32), torch.full((1,), -1.0)
    tail = 1.0 - float(sampling.top_p) if sampling.top_p < 1.0 else -1.0
    return (torch.tensor([float(sampling.temperature)], dtype=torch.float32),
            torch.tensor([int(sampling.top_k or 0)], dtype=torch.int32),
            torch.tensor([tail], dtype=torch.float32))


def warp_tensor(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p_tail: torch.Tensor
                ) -> torch.Tensor:
    """`warp_logits` with the settings as tensors (graph inputs), static shapes, no Python branch on
    values: logits (..., V) -> float32 scores (..., V), -inf outside the kept support.

    Each step is an exact no-op at its "off" value, so the result equals `warp_logits` bit for bit:
    dividing by temperature 1.0 is exact; top_k <= 0 (off) or >= V keeps the V-th largest value, the
    minimum; top_p_tail = -1 (top-p off) lies below any cumulative mass. The k-th
    largest value is read from a descending sort (the same value `torch.topk` gives, ties included)."""
    scores = logits.to(torch.float32) / temperature.to(torch.float32)  # (..., V)
    vocab = scores.shape[-1]
    # (1,) k, HF: 0 = off -> V. Integer arithmetic with minimum, not clamp/where: Core ML's clip is
    # float-only, and a float index then fails its gather.
    k = top_k.to(torch.int32)
    off = (k <= 0).to(torch.int32)
    k = torch.minimum(k, torch.full((1,), vocab, dtype=torch.int32, device=k.device)) * (1 - off) + off * vocab
    desc = torch.sort(scores, dim=-1, descending=True).values  # (..., V)
    kth = desc.index_select(-1, k - 1)  # (..., 1)
    scores = scores.masked_fill(scores < kth, float("-inf"))
    thr = top_p_tail.to(torch.float32)  # (1,)
    sorted_scores, sorted_idx = torch.sort(scores, dim=-1, descending=False)  # (..., V)
    cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)  # (..., V)
    keep_top = torch.arange(vocab, device=scores.device) == vocab - 1  # (V,) the top token is always kept
    drop_sorted = ((cum <= thr) & ~keep_top).to(torch.int32)  # int32: Core ML scatters no booleans
    drop = drop_sorted.scatter(-1, sorted_idx, drop_sorted) > 0  # back to vocabulary order (a permutation)
    return scores.masked_fill(drop, float("-inf"))
