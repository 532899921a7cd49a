"""Drafters over the frozen code predictor (seed 000 §2.2, Table 2).

Every drafter maps the hidden state h_p at sequence position p (docs/design.md indexing) to logits
for the next K codes c_{p+1..p+K}; code c_{p+j} is drafted through the frozen LM head p-1+j, the
head that emits c_{p+j} in the AR loop. Rows past c15 (p + j > 15) are invalid and returned as
zeros (the decoder never uses them). The backbone, embeddings and LM heads stay frozen: only the
drafter's own parameters train.

* `PositionOffsets` (seed 000 (i) when zero, (iii) when trained): LMH_{p-1+j}(h_p + b_j), K shared
  vectors, K x H parameters (3,072 at H = 1024).
* `PerPositionOffsets` (iv): one offset b_{p,j} per start position p and lookahead j.
* `MedusaHeads` (ii): K fresh heads per codebook position (45 at K = 3 over 15 positions), each a
  Medusa ResBlock (h + SiLU(W h + c)) and a Linear H -> V; the Linear starts as a copy of the reused
  LM head and the ResBlock at zero, so training starts from drafter (i) (Medusa's initialisation).
* `LowRankOffsets` (ours, v): per-position offsets b_{p,j} plus a shared rank-r linear correction per
  lookahead, h + b_{p,j} + U_j V_j^T h. Why it should beat (iii): the RVQ statistics differ by
  codebook depth (a per-position translation captures that, (iv)), and a translation cannot make the
  draft depend on *what* h encodes differently per lookahead; a low-rank map can re-weight the few
  directions of h that LMH_{p-1+j} reads. It contains (iii) as a special case (U = 0, b shared), and
  costs 15 K H + 2 K r H parameters: 93 H = 95,232 at H = 1024, r = 8, i.e. 0.07% of the 0.6B code
  predictor's ~141M parameters (the issue's 0.1% budget).
* `SharedLowRankOffsets` (ours, v'): the seed's shared offsets plus the rank-r map, h + b_j +
  U_j V_j^T h, K H (1 + 2 r) parameters: 1,152 on the mini predictor at r = 1 (0.06%), 9,216 at
  H = 1024 (0.0065% of the 0.6B code predictor). Why: on the mini predictor the reused heads are
  confidently wrong from h_p (docs/design.md), and one learned direction per lookahead that the
  map can damp or re-weight does most of what the per-position biases and rank 8 do (measured:
  docs/design.md, "A rank-1 correction").

Common interface: ``draft_logits(code_predictor, hidden (B, 1, H), p) -> (B, K, V)``,
``all_draft_logits(code_predictor, hidden (B, 15, H)) -> (B, 15, K, V)`` (training, positions
1..15), ``num_parameters``, ``save(path, code_predictor)`` / `load_drafter(path, code_predictor)`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from rvqspec.core.checkpoint import model_hash
from rvqspec.core.defaults import DRAFTER_LABELS, NUM_CODES, K
from rvqspec.core.jsonfile import atomic_path

NUM_POSITIONS = NUM_CODES  # hidden positions p = 1..15 carry a code-predictor LM head read


class DrafterError(ValueError):
    """A drafter file does not fit (kind, K, hidden size, model hash) or is malformed."""


def _heads(code_predictor) -> nn.ModuleList:
    return code_predictor.lm_head


class Drafter(nn.Module):
    """Base class: subclasses implement `transform(hidden, p, j)` (the hidden state LMH_{p-1+j} reads)
    or override `head_logits`."""

    kind: str = "base"
    # True: the drafter starts as the reused heads (i) with its added parameters at zero, so Adam has
    # to carry them the whole way out (about the learning rate per step), and the training recipe
    # takes that budget (rvqspec.measure.train_drafter.recipe_for)
    starts_at_zero: bool = True

    def __init__(self, num_offsets: int, hidden_size: int, vocab_size: int):
        super().__init__()
        if num_offsets < 1:
            raise DrafterError(f"num_offsets (K) must be >= 1, got {num_offsets}")
        self.num_offsets = int(num_offsets)
        self.hidden_size = int(hidden_size)
        self.vocab_size = int(vocab_size)

    # ---- to override ---------------------------------------------------------------------------
    def transform(self, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        raise NotImplementedError

    def head_logits(self, code_predictor, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        """hidden (..., H) at position p -> logits (..., V) for c_{p+j} through frozen LMH_{p-1+j}."""
        return F.linear(self.transform(hidden, p, j), _heads(code_predictor)[p - 1 + j].weight)

    def config(self) -> dict:
        return {}

    # ---- common --------------------------------------------------------------------------------
    @property
    def num_parameters(self) -> int:
        return sum(t.numel() for t in self.parameters())

    def _check_hidden(self, code_predictor, hidden: torch.Tensor) -> None:
        if hidden.shape[-1] != self.hidden_size:
            raise DrafterError(f"hidden states have width {hidden.shape[-1]} but the drafter was built for "
                               f"hidden_size={self.hidden_size}")
        if code_predictor.config.hidden_size != self.hidden_size:
            raise DrafterError(f"code predictor hidden_size={code_predictor.config.hidden_size} != drafter "
                               f"hidden_size={self.hidden_size}")

    def draft_logits(self, code_predictor, hidden: torch.Tensor, p: int) -> torch.Tensor:
        """hidden (B, 1, H) at sequence position p (1..15) -> (B, K, V) logits for c_{p+1..p+K}.

        Rows with p + j > 15 (past c15) are zeros and must be ignored (seed 000 §2.2)."""
        self._check_hidden(code_predictor, hidden)
        if not 1 <= p <= NUM_POSITIONS:
            raise DrafterError(f"position p must be in 1..{NUM_POSITIONS}, got {p}")
        h = hidden[:, 0]  # (B, H)
        rows = [self.head_logits(code_predictor, h, p, j) if p + j <= NUM_POSITIONS
                else h.new_zeros(h.shape[0], code_predictor.config.vocab_size)
                for j in range(1, self.num_offsets + 1)]  # K x (B, V)
        return torch.stack(rows, 1)  # (B, K, V)

    def all_draft_logits(self, code_predictor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, 15, H) at positions 1..15 -> (logits (B, 15, K, V), valid (15, K) bool).

        logits[:, p-1, j-1] drafts c_{p+j}; valid[p-1, j-1] = p + j <= 15. Differentiable (training)."""
        self._check_hidden(code_predictor, hidden)
        B, P, _ = hidden.shape
        if P != NUM_POSITIONS:
            raise DrafterError(f"all_draft_logits expects hidden of shape (B, {NUM_POSITIONS}, H), got {tuple(hidden.shape)}")
        rows = []
        valid = torch.zeros(P, self.num_offsets, dtype=torch.bool)
        zero = hidden.new_zeros(B, code_predictor.config.vocab_size)
        for p in range(1, P + 1):
            cols = []
            for j in range(1, self.num_offsets + 1):
                if p + j <= NUM_POSITIONS:
                    cols.append(self.head_logits(code_predictor, hidden[:, p - 1], p, j))  # (B, V)
                    valid[p - 1, j - 1] = True
                else:
                    cols.append(zero)
            rows.append(torch.stack(cols, 1))  # (B, K, V)
        return torch.stack(rows, 1), valid  # (B, 15, K, V), (15, K)

    def save(self, path: str | Path, code_predictor) -> None:
        """safetensors with metadata: kind, K, hidden, vocab, the code predictor's hash, kind config."""
        meta = {"kind": self.kind, "num_offsets": str(self.num_offsets), "hidden_size": str(self.hidden_size),
                "vocab_size": str(self.vocab_size), "model_hash": model_hash(code_predictor),
                "config": json.dumps(self.config())}
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        with atomic_path(path) as tmp:  # a crash leaves the old drafter or the whole new one
            save_file(tensors, str(tmp), metadata=meta)


class PositionOffsets(Drafter):
    """Shared offsets b_1..b_K (seed 000 §2.2): LMH_{p-1+j}(h_p + b_j). Zeros = reused heads (i)."""

    kind = "offsets"

    def __init__(self, num_offsets: int = K, hidden_size: int = 1024, vocab_size: int = 2048):
        super().__init__(num_offsets, hidden_size, vocab_size)
        self.offsets = nn.Parameter(torch.zeros(num_offsets, hidden_size))  # (K, H)

    @classmethod
    def zeros(cls, num_offsets: int = K, hidden_size: int = 1024, vocab_size: int = 2048) -> "PositionOffsets":
        return cls(num_offsets, hidden_size, vocab_size)

    def transform(self, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        return hidden + self.offsets[j - 1].to(hidden.dtype)


class PerPositionOffsets(Drafter):
    """One offset per start position and lookahead, b_{p,j} (iv): 15 K H parameters."""

    kind = "per_position"

    def __init__(self, num_offsets: int = K, hidden_size: int = 1024, vocab_size: int = 2048):
        super().__init__(num_offsets, hidden_size, vocab_size)
        self.offsets = nn.Parameter(torch.zeros(NUM_POSITIONS, num_offsets, hidden_size))  # (15, K, H)

    def transform(self, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        return hidden + self.offsets[p - 1, j - 1].to(hidden.dtype)


class LowRankOffsets(Drafter):
    """Ours (v): h + b_{p,j} + U_j (V_j^T h), rank r shared across positions (see module docstring)."""

    kind = "low_rank"

    def __init__(self, num_offsets: int = K, hidden_size: int = 1024, vocab_size: int = 2048, rank: int = 8,
                 seed: int = 0):
        super().__init__(num_offsets, hidden_size, vocab_size)
        if rank < 1:
            raise DrafterError(f"rank must be >= 1, got {rank}")
        self.rank = int(rank)
        g = torch.Generator().manual_seed(seed)
        self.offsets = nn.Parameter(torch.zeros(NUM_POSITIONS, num_offsets, hidden_size))  # (15, K, H)
        # U = 0 at init keeps the drafter equal to (i); V random so gradients reach U (LoRA init).
        self.down = nn.Parameter(torch.randn(num_offsets, hidden_size, rank, generator=g) / hidden_size ** 0.5)  # (K, H, r)
        self.up = nn.Parameter(torch.zeros(num_offsets, rank, hidden_size))  # (K, r, H)

    def config(self) -> dict:
        return {"rank": self.rank}

    def low_rank(self, hidden: torch.Tensor, j: int) -> torch.Tensor:
        """U_j (V_j^T h): hidden (..., H) -> (..., H)."""
        dt = hidden.dtype
        return (hidden @ self.down[j - 1].to(dt)) @ self.up[j - 1].to(dt)

    def transform(self, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        return hidden + self.offsets[p - 1, j - 1].to(hidden.dtype) + self.low_rank(hidden, j)


class SharedLowRankOffsets(LowRankOffsets):
    """Ours (v'): (iii) plus a rank-r map per lookahead, h + b_j + U_j (V_j^T h); U = 0 is exactly (iii)."""

    kind = "shared_low_rank"

    def __init__(self, num_offsets: int = K, hidden_size: int = 1024, vocab_size: int = 2048, rank: int = 1,
                 seed: int = 0):
        super().__init__(num_offsets, hidden_size, vocab_size, rank=rank, seed=seed)
        self.offsets = nn.Parameter(torch.zeros(num_offsets, hidden_size))  # (K, H): shared over positions, as (iii)

    def transform(self, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        return hidden + self.offsets[j - 1].to(hidden.dtype) + self.low_rank(hidden, j)


class _ResBlock(nn.Module):
    """Medusa ResBlock: x + SiLU(W x + c)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(Drafter):
    """K fresh Medusa heads per codebook position (ii), 15 K heads (45 at K = 3)."""

    kind = "medusa"
    starts_at_zero = False  # its heads start as copies of the frozen heads (`from_code_predictor`)

    def __init__(self, num_offsets: int = K, hidden_size: int = 1024, vocab_size: int = 2048):
        super().__init__(num_offsets, hidden_size, vocab_size)
        n = NUM_POSITIONS * num_offsets
        self.blocks = nn.ModuleList([_ResBlock(hidden_size) for _ in range(n)])
        self.heads = nn.ModuleList([nn.Linear(hidden_size, vocab_size, bias=False) for _ in range(n)])

    def _index(self, p: int, j: int) -> int:
        return (p - 1) * self.num_offsets + (j - 1)

    @classmethod
    def from_code_predictor(cls, code_predictor, num_offsets: int = K) -> "MedusaHeads":
        """Heads initialised from the reused LM heads (drafter (i)), ResBlocks at zero (Medusa init)."""
        c = code_predictor.config
        m = cls(num_offsets, c.hidden_size, c.vocab_size)
        with torch.no_grad():
            for p in range(1, NUM_POSITIONS + 1):
                for j in range(1, num_offsets + 1):
                    if p + j <= NUM_POSITIONS:
                        m.heads[m._index(p, j)].weight.copy_(_heads(code_predictor)[p - 1 + j].weight)
                    else:  # never drafted (no code c_{p+j}): zero, so the file depends on the checkpoint only
                        m.heads[m._index(p, j)].weight.zero_()
        return m

    def head_logits(self, code_predictor, hidden: torch.Tensor, p: int, j: int) -> torch.Tensor:
        i = self._index(p, j)
        blk, head = self.blocks[i], self.heads[i]
        dt = hidden.dtype
        x = hidden + F.silu(F.linear(hidden, blk.linear.weight.to(dt), blk.linear.bias.to(dt)))
        return F.linear(x, head.weight.to(dt))


KINDS: dict[str, type[Drafter]] = {c.kind: c for c in (PositionOffsets, PerPositionOffsets, LowRankOffsets,
                                                       SharedLowRankOffsets, MedusaHeads)}
# CLI / bench names -> (kind, seed 000 Table 2 label)
LABELS = DRAFTER_LABELS


def drafter_class(name: str) -> type[Drafter]:
    """The class `make_drafter(name, ...)` builds (the reused heads (i) are the offsets at zero)."""
    if name == "reused":
        return PositionOffsets
    if name not in KINDS:
        raise DrafterError(f"unknown drafter {name!r}; known: {sorted(LABELS)}")
    return KINDS[name]


def make_drafter(name: str, code_predictor, num_offsets: int = K, **kw) -> Drafter:
    """Fresh drafter by name: reused | offsets | per_position | low_rank | shared_low_rank | medusa (device
    and dtype of the model)."""
    c = code_predictor.config
    if name in ("reused", "offsets"):
        d: Drafter = PositionOffsets(num_offsets, c.hidden_size, c.vocab_size)
    elif name == "per_position":
        d = PerPositionOffsets(num_offsets, c.hidden_size, c.vocab_size)
    elif name == "low_rank":
        d = LowRankOffsets(num_offsets, c.hidden_size, c.vocab_size, **kw)
    elif name == "shared_low_rank":
        d = SharedLowRankOffsets(num_offsets, c.hidden_size, c.vocab_size, **kw)
    elif name == "medusa":
        d = MedusaHeads.from_code_predictor(code_predictor, num_offsets)
    else:
        raise DrafterError(f"unknown drafter {name!r}; known: {sorted(LABELS)}")
    p = next(code_predictor.parameters())
    return d.to(device=p.device)


def code_predictor_parameters(code_predictor) -> int:
    """Parameters of the code predictor proper (layers, norm, 15 tables, 15 heads, projection)."""
    return sum(t.numel() for t in code_predictor.parameters())


def cast_drafter(src: str | Path, dst: str | Path, dtype: torch.dtype) -> Path:
    """Copy drafter file `src` to `dst` with its floating tensors stored in `dtype` and the same
    metadata (kind, sizes, the model hash it was trained for): `load_drafter` copies them into the
    drafter's own float32 parameters. Medusa's 45 heads are most of data/'s drafters. Written whole,
    then renamed; raises DrafterError (a bad file, or `dst` the same file as `src`)."""
    src, dst = Path(src), Path(dst)
    if dst.resolve() == src.resolve():
        raise DrafterError(f"{dst}: the cast copy must not replace its source")
    load_drafter(src)  # metadata present and the tensors fit their kind
    with safe_open(str(src), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    with atomic_path(dst) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
    return dst


def load_drafter(path: str | Path, code_predictor=None, kind: str | None = None, check_hash: bool = True) -> Drafter:
    """Load a drafter saved by `Drafter.save`; checks kind, hidden size and, given the code predictor,
    its model hash (`check_hash=False` skips only the hash: a drafter reused on fine-tuned weights)."""
    path = Path(path)
    if not path.is_file():
        raise DrafterError(f"{path}: no such drafter file")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises its own error types
        raise DrafterError(f"{path}: not a safetensors file ({e})") from e
    for key in ("kind", "num_offsets", "hidden_size", "vocab_size", "model_hash"):
        if key not in meta:
            raise DrafterError(f"{path}: metadata has no key {key!r} (keys: {sorted(meta)})")
    k = meta["kind"]
    if k not in KINDS:
        raise DrafterError(f"{path}: metadata kind={k!r} is not one of {sorted(KINDS)}")
    if kind is not None and k != kind:
        raise DrafterError(f"{path}: drafter kind is {k!r}, expected {kind!r}")
    K, H, V = int(meta["num_offsets"]), int(meta["hidden_size"]), int(meta["vocab_size"])
    if code_predictor is not None:
        c = code_predictor.config
        if c.hidden_size != H:
            raise DrafterError(f"{path}: drafter hidden_size={H} but the code predictor has hidden_size={c.hidden_size}")
        if c.vocab_size != V:
            raise DrafterError(f"{path}: drafter vocab_size={V} but the code predictor has vocab_size={c.vocab_size}")
        want = model_hash(code_predictor) if check_hash else meta["model_hash"]
        if meta["model_hash"] != want:
            raise DrafterError(f"{path}: drafter was trained for model hash {meta['model_hash']} but this code "
                               f"predictor has hash {want} (--skip-hash-check uses it anyway)")
    cfg = json.loads(meta.get("config", "{}") or "{}")
    d = KINDS[k](K, H, V, **cfg)
    state = load_file(str(path))
    try:
        d.load_state_dict(state)
    except RuntimeError as e:
        raise DrafterError(f"{path}: tensors do not fit a {k} drafter with K={K}, hidden={H}: {e}") from e
    if code_predictor is not None:
        d = d.to(device=next(code_predictor.parameters()).device)
    return d
