"""Hidden states of the frozen code predictor, for drafter training and calibration (seed 000 §2.2).

For every frame we keep the 15 hidden states h_1..h_15 (sequence positions 1..15, the states LM heads
0..14 read) and the frame's 16 codes; a drafter at h_p is trained on / scored against c_{p+1..p+K}.

* teacher-forced ("Training the offsets"): the frame's ground-truth codes are fed, positions 0..15 =
  [h_talker, emb(c0), emb(c1), .., emb(c14)], in one batched call;
* free-running (§3.3, "all acceptance rates are measured on free running synthesis"): the code
  predictor samples c1..c15 itself (AR, deployed sampling) from the talker hidden and c0, and the
  hidden states are those of its own samples (computed by teacher forcing on the sampled codes,
  which is the same computation the AR loop does).

Input: an iterable of utterances, each ``(talker_hidden (T, E), codes (T, 16))`` (`rvqspec.core.frame_loop.teacher_forced_frames` gives those for the mini world). Output: a directory of shards
``shard_00000.safetensors`` (``hidden`` (n, 15, H) float16/32, ``codes`` (n, 16) int64) and
``manifest.json`` (model hash, code-predictor config, K, counts, source). `ShardDataset` streams
shards one at a time (never all in memory) in a generator-driven order.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from rvqspec.core.checkpoint import model_hash as hash_of
from rvqspec.core.defaults import K
from rvqspec.core.frame_loop import teacher_forced_inner
from rvqspec.core.jsonfile import atomic_path, read_json, write_json_atomic
from rvqspec.core.sampling import Sampling

MANIFEST = "manifest.json"
SOURCES = ("teacher_forced", "free_running")


class ExtractError(ValueError):
    """Bad extraction input or a shard directory that does not fit (message names file/key)."""


@dataclass(frozen=True)
class ExtractConfig:
    shard_frames: int = 8192      # frames per shard file
    batch_frames: int = 256       # frames per model call
    dtype: str = "float16"        # storage dtype of hidden states (float16 halves disk; training upcasts)
    num_offsets: int = K          # K recorded in the manifest (drafts c_{p+1..p+K})


@torch.no_grad()
def teacher_forced_hidden(code_predictor, talker_hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """talker_hidden (T, E), codes (T, 16) long -> hidden states h_1..h_15 (T, 15, H)."""
    cp = code_predictor
    n = cp.config.num_code_groups
    T = talker_hidden.shape[0]
    if talker_hidden.dim() != 2 or talker_hidden.shape[1] != cp.config.talker_hidden_size:
        raise ExtractError(f"talker_hidden must be (T, {cp.config.talker_hidden_size}), got {tuple(talker_hidden.shape)}")
    if codes.shape != (T, n):
        raise ExtractError(f"codes must be (T, {n}) = ({T}, {n}), got {tuple(codes.shape)}")
    if int(codes.min()) < 0 or int(codes[:, 1:].max()) >= cp.config.vocab_size:
        raise ExtractError(f"codes must lie in [0, {cp.config.vocab_size}), got range "
                           f"[{int(codes.min())}, {int(codes[:, 1:].max())}]")

    return teacher_forced_inner(cp, talker_hidden, codes)  # (T, 15, H) h_1..h_15


@torch.no_grad()
def free_running_codes(code_predictor, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """AR samples: talker_hidden (T, E), c0 (T,) -> codes (T, 16) with the model's own c1..c15."""
    rest = code_predictor.generate_frame(talker_hidden.unsqueeze(1), c0.view(-1, 1), sampling, generator)  # (T, 15)
    return torch.cat([c0.view(-1, 1), rest], 1)


def frames_to_hidden(code_predictor, utterances: Iterable[tuple[torch.Tensor, torch.Tensor]], source: str,
                     config: ExtractConfig = ExtractConfig(), sampling: Sampling = Sampling(),
                     generator: torch.Generator | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (hidden (b, 15, H), codes (b, 16)) batches of frames, in order."""
    if source not in SOURCES:
        raise ExtractError(f"source must be one of {SOURCES}, got {source!r}")
    for u, (th, codes) in enumerate(utterances):
        if codes.dim() != 2 or codes.shape[0] != th.shape[0]:
            raise ExtractError(f"utterance {u}: talker_hidden {tuple(th.shape)} and codes {tuple(codes.shape)} "
                               f"must have the same number of frames T")
        for lo in range(0, th.shape[0], config.batch_frames):
            t = th[lo:lo + config.batch_frames]
            c = codes[lo:lo + config.batch_frames].long().to(t.device)  # (b, 16) beside the model
            if source == "free_running":
                c = free_running_codes(code_predictor, t, c[:, 0], sampling, generator)
            yield teacher_forced_hidden(code_predictor, t, c), c


def extract(code_predictor, utterances: Iterable[tuple[torch.Tensor, torch.Tensor]], out_dir: str | Path,
            source: str = "teacher_forced", config: ExtractConfig = ExtractConfig(),
            sampling: Sampling = Sampling(), generator: torch.Generator | None = None,
            progress: bool = True, extra: dict | None = None, model_hash: str | None = None) -> Path:
    """Write shards + manifest.json to out_dir; returns the manifest path. `model_hash`: the hash
    to record when `code_predictor` is a cast copy (bf16 on a GPU) of the checkpoint's weights."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = {"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}.get(config.dtype)
    if dtype is None:
        raise ExtractError(f"ExtractConfig.dtype must be float16, bfloat16 or float32, got {config.dtype!r}")
    shards: list[dict] = []
    buf_h: list[torch.Tensor] = []
    buf_c: list[torch.Tensor] = []
    n_buf = 0
    total = 0

    def flush():
        nonlocal buf_h, buf_c, n_buf
        if not n_buf:
            return
        name = f"shard_{len(shards):05d}.safetensors"
        with atomic_path(out / name) as tmp:
            save_file({"hidden": torch.cat(buf_h).to(dtype).contiguous(), "codes": torch.cat(buf_c).contiguous()},
                      str(tmp))
        shards.append({"file": name, "frames": n_buf})
        buf_h, buf_c, n_buf = [], [], 0

    bar = tqdm(desc=f"extract {source}", unit="frame", disable=not progress)
    for h, c in frames_to_hidden(code_predictor, utterances, source, config, sampling, generator):
        buf_h.append(h.cpu())
        buf_c.append(c.cpu())
        n_buf += h.shape[0]
        total += h.shape[0]
        bar.update(h.shape[0])
        if n_buf >= config.shard_frames:
            flush()
    flush()
    bar.close()
    manifest = {
        "format": "rvqspec.hidden_shards/1",
        "model_hash": model_hash or hash_of(code_predictor),
        "code_predictor_config": asdict(code_predictor.config),
        "num_offsets": config.num_offsets,
        "hidden_size": code_predictor.config.hidden_size,
        "hidden_dtype": config.dtype,
        "source": source,
        "sampling": asdict(sampling) if source == "free_running" else None,
        "frames": total,
        "shards": shards,
    }
    if extra:
        manifest["extra"] = extra
    # the manifest is written last and whole: a folder without one is an unfinished extraction
    return write_json_atomic(out / MANIFEST, manifest, indent=1)


def read_manifest(shard_dir: str | Path, code_predictor=None) -> dict:
    """Load and check manifest.json (keys, shard files present, model hash when a model is given)."""
    d = Path(shard_dir)
    path = d / MANIFEST if d.is_dir() else d
    m = read_json(path, ExtractError, "no manifest (run `rvqspec spec extract` first)")
    for key in ("model_hash", "hidden_size", "source", "frames", "shards"):
        if key not in m:
            raise ExtractError(f"{path}: missing key {key!r}")
    for s in m["shards"]:
        if not (path.parent / s["file"]).is_file():
            raise ExtractError(f"{path}: shard file {s['file']!r} is missing")
    if code_predictor is not None:
        from rvqspec.core.checkpoint import model_hash

        h = model_hash(code_predictor)
        if m["model_hash"] != h:
            raise ExtractError(f"{path}: shards were extracted from model hash {m['model_hash']}, "
                               f"this code predictor has hash {h}")
    m["_dir"] = str(path.parent)
    return m


class ShardDataset:
    """Streams (hidden (b, 15, H) float32, codes (b, 16) long) batches, one shard in memory at a time.

    Each epoch visits shards in a generator-driven order and shuffles frames within a shard."""

    def __init__(self, shard_dir: str | Path, batch_size: int = 32, shuffle: bool = True,
                 generator: torch.Generator | None = None, code_predictor=None, drop_last: bool = False):
        self.manifest = read_manifest(shard_dir, code_predictor)
        self.dir = Path(self.manifest["_dir"])
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.generator = generator
        self.drop_last = drop_last

    @property
    def frames(self) -> int:
        return int(self.manifest["frames"])

    def __len__(self) -> int:
        n = 0
        for s in self.manifest["shards"]:
            n += s["frames"] // self.batch_size if self.drop_last else -(-s["frames"] // self.batch_size)
        return n

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        shards = self.manifest["shards"]
        order = torch.randperm(len(shards), generator=self.generator).tolist() if self.shuffle else range(len(shards))
        for i in order:
            t = load_file(str(self.dir / shards[i]["file"]))
            if "hidden" not in t or "codes" not in t:
                raise ExtractError(f"{self.dir / shards[i]['file']}: expected tensors 'hidden' and 'codes', "
                                   f"got {sorted(t)}")
            h, c = t["hidden"], t["codes"].long()
            n = h.shape[0]
            idx = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
            for lo in range(0, n, self.batch_size):
                j = idx[lo:lo + self.batch_size]
                if self.drop_last and len(j) < self.batch_size:
                    break
                yield h[j].float(), c[j]
