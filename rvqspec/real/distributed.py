"""Data-parallel scale-out under `accelerate launch` (several processes, GPUs or nodes).

The seed's offsets were trained on 20.8M VoxPopuli frames (seed 000 Table 1); extraction and
evaluation at that size want many workers. Three jobs scale here, all deterministic:

* **work units**: the dataset's items are cut into units of `unit_items` consecutive items
  (unit u = items [u * unit_items, (u + 1) * unit_items)). Process `rank` of `world` owns units
  u with u % world == rank ("strided") or stable_hash(u) % world == rank ("hash", a sha1, never
  Python's salted `hash`), so any world size covers every unit exactly once, and which process did a
  unit never changes its output.
* **resumable output**: a unit is computed into a hidden temporary directory and renamed into
  place (`unit_00007/`), then its done marker (`unit_00007.done`, JSON) is written atomically. A
  rerun skips every unit with a marker and recomputes the others from scratch; partial work is
  never visible. `merge_extraction` then writes one `manifest.json` over all units' shards (in unit
  order, so the union equals a single-process run byte for byte) that `rvqspec.measure.extract.ShardDataset`
  and `train_drafter` read as usual.
* **offset training** (`train_offsets_distributed`): process r reads its shard files (`rank_shards`:
  balanced by full batches)
  (one in memory at a time) in an order seeded by (seed, epoch, r); at every step each process
  computes the loss of its next batch and the gradients are averaged across processes with HF
  accelerate's `Accelerator.reduce` (DDP's all-reduce, done explicitly: the offsets are 3,072
  numbers, and the drafter is not called through `forward`, which DDP's hooks need). All processes
  take the same number of steps. With equal batch sizes a step equals a single-process step on the
  concatenation of the world's batches (tested for every drafter kind). A parameter without a
  gradient (Medusa's heads for p + j > 15) is reduced as zeros, so every process joins every
  collective, as DDP's find_unused_parameters does.

Single process (plain `python`, no launcher) is world = 1: the same code path. Launching: on GPUs
`accelerate launch --multi_gpu --num_processes N -m rvqspec.cli real ...`; on CPUs the same
`--multi_gpu` flag (it means "torchrun"; with no GPU the processes join a gloo group). Note that
`accelerate launch --cpu --num_processes N` starts ONE process (its multi-CPU mode needs mpirun),
which here simply runs with world size 1.
"""
from __future__ import annotations

import atexit
import copy
import hashlib
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from rvqspec.core.checkpoint import load_qwen3_tts, model_hash
from rvqspec.core.jsonfile import write_json_atomic as write
from rvqspec.core.sampling import Sampling
from rvqspec.measure.extract import ExtractConfig, ShardDataset, read_manifest
from rvqspec.measure.train_drafter import drafter_loss
from rvqspec.real.datasets import (
    DatasetSpec,
    MiniTeacherForcer,
    PromptConfig,
    count_items,
    extract_items,
    extract_with,
    iter_range,
)
from rvqspec.real.official_pipeline import load_official_model

DONE_SUFFIX = ".done"


class ScaleError(RuntimeError):
    """Bad sharding parameters or an output directory that does not fit (names path and value)."""


@dataclass(frozen=True)
class ScaleConfig:
    unit_items: int = 64              # dataset items per work unit (the unit of resumption)
    strategy: str = "strided"         # "strided": u % world; "hash": sha1(u) % world

    def __post_init__(self) -> None:
        if self.unit_items < 1:
            raise ScaleError(f"ScaleConfig.unit_items must be >= 1, got {self.unit_items}")
        if self.strategy not in ("strided", "hash"):
            raise ScaleError(f"ScaleConfig.strategy must be 'strided' or 'hash', got {self.strategy!r}")


@dataclass(frozen=True)
class Topology:
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def topology() -> Topology:
    """This process's (rank, world): from HF accelerate's state under `accelerate launch`, else from
    torchrun-style RANK/WORLD_SIZE, else (0, 1)."""
    try:
        from accelerate import PartialState

        # cpu=True where there is no GPU: a torchrun-style launch then joins a gloo process group
        # (MULTI_CPU) instead of silently running every process as world size 1
        st = PartialState(cpu=not torch.cuda.is_available())
        return Topology(int(st.process_index), int(st.num_processes))
    except ImportError:  # accelerate is an optional extra ([scale])
        return Topology(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def placement(device: str | None = None, dtype: str | None = None) -> tuple[torch.device, torch.dtype]:
    """(device, dtype) for the heavy models of a real step (official model, speech tokenizer, ASR).

    device None: this process's accelerator as the launcher assigned it (`PartialState().device`:
    cuda:LOCAL_RANK under `accelerate launch` on GPUs, mps on Apple silicon), else the CPU. dtype
    None: bfloat16 on a CUDA device that supports it, float32 elsewhere (bf16 matmuls on a CPU are
    slow and the fallback should match the tests' numbers)."""
    if device is None:
        try:
            from accelerate import PartialState

            dev = torch.device(PartialState(cpu=not torch.cuda.is_available()).device)
        except ImportError:
            dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() \
                else torch.device("cpu")
    else:
        try:
            dev = torch.device(device)
        except RuntimeError:
            raise ScaleError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:1, mps)") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ScaleError(f"--device {device}: torch.cuda.is_available() is False on this machine")
        if dev.type == "mps" and not torch.backends.mps.is_available():
            raise ScaleError(f"--device {device}: torch.backends.mps.is_available() is False on this machine")
    if dtype is None:
        dt = torch.bfloat16 if dev.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    elif dtype in DTYPES:
        dt = DTYPES[dtype]
    else:
        raise ScaleError(f"--dtype {dtype!r} is not one of {sorted(DTYPES)}")
    return dev, dt


def _destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wait_for_everyone() -> None:
    """Barrier across processes (no-op alone). Also makes sure the process group is torn down at
    exit: a rank that exits with a live gloo group can abort in C++ and fail the whole launch."""
    try:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
    except ImportError:
        return

    atexit.unregister(_destroy_process_group)
    atexit.register(_destroy_process_group)


def finish_distributed() -> None:
    """End a launched (world > 1) command: barrier, tear the process group down, then leave at once.

    Even with the gloo group destroyed, a rank sometimes aborted in C++ while the interpreter shut
    down ("terminate called without an active exception", about 1 run in 5 of the two-process
    offset training test), failing the whole launch after its results were written. Every output
    is written atomically before this point, so a rank skips interpreter teardown with `os._exit`.
    Alone (world size 1, also in-process CLI tests) this only tears the group down, if any.
    """
    launched = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if launched:
        dist.barrier()
    _destroy_process_group()
    if launched:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def stable_hash(u: int) -> int:
    return int.from_bytes(hashlib.sha1(f"rvqspec-unit-{u}".encode()).digest()[:8], "big")


def num_units(num_items: int, cfg: ScaleConfig) -> int:
    return -(-num_items // cfg.unit_items)


def unit_items(u: int, num_items: int, cfg: ScaleConfig) -> range:
    return range(u * cfg.unit_items, min((u + 1) * cfg.unit_items, num_items))


def my_units(n_units: int, topo: Topology, cfg: ScaleConfig) -> list[int]:
    """The units this process owns (every unit belongs to exactly one rank)."""
    if not (0 <= topo.rank < topo.world):
        raise ScaleError(f"rank {topo.rank} out of range for world size {topo.world}")
    if cfg.strategy == "strided":
        return list(range(topo.rank, n_units, topo.world))
    return [u for u in range(n_units) if stable_hash(u) % topo.world == topo.rank]


def unit_name(u: int) -> str:
    return f"unit_{u:05d}"


def done_marker(out: Path, u: int) -> Path:
    return out / (unit_name(u) + DONE_SUFFIX)


def is_done(out: Path, u: int) -> bool:
    return done_marker(out, u).is_file() and (out / unit_name(u)).is_dir()


def write_json_atomic(path: Path, obj) -> None:
    """Markers and merged results of the distributed jobs (sorted keys: ranks write them alike)."""
    write(path, obj, indent=1, sort_keys=True)


PLAN_FILE = "units.json"


def check_plan(out: Path, n_units: int, cfg: ScaleConfig, job: dict | None = None) -> None:
    """Record how `out`'s units were cut (unit size, unit count, the job's inputs) on the first run
    and refuse a rerun that would cut them differently: unit u of another unit size holds other
    items, so skipping the finished units would duplicate or lose items."""
    plan = {"unit_items": cfg.unit_items, "units": n_units, **(job or {})}
    path = out / PLAN_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        for k in sorted(set(old) | set(plan)):
            if old.get(k) != plan.get(k):
                raise ScaleError(f"{path}: this folder's units were made with {k}={old.get(k)!r}, this run has "
                                 f"{k}={plan.get(k)!r}; resume with the same value or use a new --out")
    elif any(out.glob("unit_*" + DONE_SUFFIX)):
        raise ScaleError(f"{out}: holds finished units but no {PLAN_FILE} (made by an older rvqspec); "
                         f"use a new --out")
    else:
        write_json_atomic(path, plan)  # every rank writes the same content, atomically


def run_units(out_dir: str | os.PathLike, n_units: int, work: Callable[[int, Path], dict], topo: Topology,
              cfg: ScaleConfig = ScaleConfig(), log: Callable[[str], None] | None = None,
              job: dict | None = None) -> dict:
    """Run `work(u, tmp_dir) -> summary dict` for this process's unfinished units, each into a
    temporary directory renamed to `unit_XXXXX/` when complete, then mark it done. `job`: the
    inputs that decide what a unit holds (`check_plan`). Returns {"ran": [...], "skipped": [...]}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_plan(out, n_units, cfg, job)
    ran, skipped = [], []
    for u in my_units(n_units, topo, cfg):
        if is_done(out, u):
            skipped.append(u)
            continue
        final = out / unit_name(u)
        if final.exists():  # a crashed earlier run renamed it but did not mark it: recompute
            shutil.rmtree(final)
        for stale in out.glob(f".{unit_name(u)}.tmp-*"):  # a crashed run's half-written unit (only we own u)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = out / f".{unit_name(u)}.tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            summary = work(u, tmp)
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        write_json_atomic(done_marker(out, u), {"unit": u, "rank": topo.rank, "world": topo.world, **summary})
        ran.append(u)
        if log:
            log(f"[rank {topo.rank}/{topo.world}] {unit_name(u)} done: {summary}")
    return {"ran": ran, "skipped": skipped}


def pending_units(out_dir: str | os.PathLike, n_units: int) -> list[int]:
    out = Path(out_dir)
    return [u for u in range(n_units) if not is_done(out, u)]


# --------------------------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExtractJob:
    """Everything one process needs to extract its units (picklable, plain values)."""

    model: str                        # official Qwen3-TTS checkpoint directory
    dataset: str                      # dataset directory (rvqspec.real.datasets layouts)
    out: str
    split: str | None = None
    language: str | None = None
    limit: int | None = None
    speaker: str | None = None
    non_streaming_mode: bool = True
    use_language: bool = True
    shard_frames: int = 8192
    hidden_dtype: str = "float16"
    source: str = "teacher_forced"    # or "free_running" (rvqspec.measure.extract)
    backend: str = "official"         # or "mini" (the mini world's checkpoint and text front end)
    seed: int = 0                     # free-running sampling: generator seeded with seed + unit
    device: str | None = None         # `placement`: the launcher's accelerator when None
    dtype: str | None = None          # `placement`: bf16 on CUDA, float32 elsewhere when None


def extract_sharded(job: ExtractJob, encoder, text_ids, topo: Topology | None = None,
                    cfg: ScaleConfig = ScaleConfig(), log: Callable[[str], None] | None = None) -> dict:
    """Extract this process's units of `job.dataset` into `job.out/unit_XXXXX/` (resumable)."""
    topo = topo or topology()
    if job.backend not in ("official", "mini"):
        raise ScaleError(f"ExtractJob.backend must be 'official' or 'mini', got {job.backend!r}")
    spec = DatasetSpec(job.dataset, split=job.split, language=job.language, limit=job.limit)
    n_items = count_items(spec)
    n_units = num_units(n_items, cfg)
    model = None
    prompt = PromptConfig(speaker=job.speaker, non_streaming_mode=job.non_streaming_mode, use_language=job.use_language)
    ecfg = ExtractConfig(shard_frames=job.shard_frames, dtype=job.hidden_dtype)
    dev, dt = placement(job.device, job.dtype)
    canonical_hash = None

    def work(u: int, tmp: Path) -> dict:
        nonlocal model, canonical_hash
        if model is None:
            if job.backend == "mini":  # the mini rehearsal stays on the CPU in float32 (its tests' numbers)
                model = MiniTeacherForcer(job.model)
            else:
                model = load_official_model(job.model, dtype=dt, device=dev)
                if dt != torch.float32:
                    # shards name the checkpoint's float32 code predictor, the one `train-offsets`,
                    # `spec calibrate` and the drafter files check against, not this cast copy
                    cp = load_qwen3_tts(job.model, parts=("code_predictor",)).code_predictor
                    canonical_hash = model_hash(cp)
                    del cp
        idx = unit_items(u, n_items, cfg)
        items = (it for _, it in iter_range(spec, idx))
        # free-running draws depend only on (seed, unit): any world size gives the same shards
        gdev = "cpu" if job.backend == "mini" else dev
        gen = torch.Generator(device=gdev).manual_seed(job.seed + u)
        extra = {"unit": u, "items": [idx.start, idx.stop], "backend": job.backend,
                 "device": str(gdev), "dtype": "float32" if job.backend == "mini" else str(dt).removeprefix("torch.")}
        kw = dict(source=job.source, config=ecfg, sampling=Sampling(), generator=gen, extra=extra)
        if job.backend == "mini":
            man = extract_with(model.code_predictor, model, items, encoder, tmp, model.c0_vocab, **kw)
        else:
            man = extract_items(model, items, encoder, text_ids, tmp, prompt=prompt, model_hash=canonical_hash, **kw)
        m = json.loads(Path(man).read_text())
        return {"frames": m["frames"], "items": len(idx), "model_hash": m["model_hash"],
                **m.get("extra", {}).get("dataset_stats", {})}

    plan = {"dataset": str(Path(job.dataset).resolve()), "split": job.split, "language": job.language,
            "limit": job.limit, "items": n_items, "source": job.source, "backend": job.backend}
    res = run_units(job.out, n_units, work, topo, cfg, log, job=plan)
    res.update(units=n_units, items=n_items)
    return res


def merge_extraction(out_dir: str | os.PathLike, n_units: int | None = None) -> Path:
    """One manifest.json over every unit's shards (unit order) -> the path. All units must be done
    and extracted from the same model."""
    out = Path(out_dir)
    units = sorted(int(p.name[5:10]) for p in out.glob("unit_*" + DONE_SUFFIX))
    if n_units is not None:
        missing = [u for u in range(n_units) if u not in units]
        if missing:
            raise ScaleError(f"{out}: units {missing[:5]}{'...' if len(missing) > 5 else ''} are not done; rerun "
                             f"the extraction (finished units are skipped)")
    if not units:
        raise ScaleError(f"{out}: no finished units (no unit_*.done markers)")
    shards, first, frames, stats = [], None, 0, {"items": 0, "frames": 0, "audio_seconds": 0.0}
    for u in units:
        mpath = out / unit_name(u) / "manifest.json"
        if not mpath.is_file():
            raise ScaleError(f"{mpath}: missing although {done_marker(out, u).name} exists")
        m = json.loads(mpath.read_text())
        if first is None:
            first = m
        elif m["model_hash"] != first["model_hash"]:
            raise ScaleError(f"{mpath}: model hash {m['model_hash']} differs from unit {units[0]}'s "
                             f"{first['model_hash']} (mixed extractions in one directory)")
        for s in m["shards"]:
            shards.append({"file": f"{unit_name(u)}/{s['file']}", "frames": s["frames"]})
        frames += m["frames"]
        for k in stats:
            stats[k] += m.get("extra", {}).get("dataset_stats", {}).get(k, 0)
    merged = {k: v for k, v in first.items() if k not in ("shards", "frames", "extra")}
    merged.update(frames=frames, shards=shards, extra={"units": units, "dataset_stats": stats})
    path = out / "manifest.json"
    write_json_atomic(path, merged)
    return path


# --------------------------------------------------------------------------------------------
# offset training with gradient all-reduce
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DistTrainConfig:
    lr: float = 1e-3                  # seed 000 §2.2
    batch_size: int = 32              # per process; the global batch is world * batch_size
    epochs: int = 1
    max_steps: int | None = None
    seed: int = 0


def rank_batches(shard_dir: str | os.PathLike, batch_size: int, seed: int, epoch: int, rank: int, world: int,
                 code_predictor=None):
    """(stream, n_batches) of process `rank`: its shards of the extraction (`rank_shards`),
    shuffled with a generator seeded by (seed, epoch, rank); full batches only. Memory holds one
    shard at a time, and each process reads only its own shards."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch * 1_009 + rank)
    ds = ShardDataset(shard_dir, batch_size=batch_size, shuffle=True, generator=g, code_predictor=code_predictor,
                      drop_last=True)
    m = copy.deepcopy(ds.manifest)
    m["shards"] = [m["shards"][i] for i in rank_shards(m["shards"], batch_size, world)[rank]]
    m["frames"] = sum(x["frames"] for x in m["shards"])
    ds.manifest = m  # this process's shards only (ShardDataset iterates manifest["shards"])
    return ds, len(ds)


def rank_shards(shards: list[dict], batch_size: int, world: int) -> list[list[int]]:
    """Shard indices per rank, balanced by full batches: largest shard first to the rank with the
    fewest batches so far (ties: lowest rank), each rank's list in manifest order. Every process
    must take the same number of steps (one all-reduce each), so the smallest rank sets the step
    count; balancing keeps the batches left over (`train_plan`'s "dropped_batches") below one
    shard's worth, where a strided split can leave whole shards unused."""
    batches = [x["frames"] // batch_size for x in shards]
    order = sorted(range(len(shards)), key=lambda i: (-batches[i], i))
    load, owned = [0] * world, [[] for _ in range(world)]
    for i in order:
        r = min(range(world), key=lambda q: (load[q], q))
        owned[r].append(i)
        load[r] += batches[i]
    return [sorted(o) for o in owned]


def train_plan(shard_dir: str | os.PathLike, batch_size: int, world: int) -> dict:
    """Steps per epoch every process can take, the batches each rank holds, and what is dropped."""
    shards = read_manifest(shard_dir)["shards"]
    if len(shards) < world:
        raise ScaleError(f"{shard_dir}: {len(shards)} shard files for {world} processes; extract with a smaller "
                         f"--shard-frames so that every process gets at least one")
    per_rank = [sum(shards[i]["frames"] // batch_size for i in idx) for idx in rank_shards(shards, batch_size, world)]
    steps = min(per_rank)
    return {"steps_per_epoch": steps, "batches_per_rank": per_rank, "dropped_batches": sum(per_rank) - steps * world,
            "frames": sum(x["frames"] for x in shards)}


def steps_per_epoch(shard_dir: str | os.PathLike, batch_size: int, world: int) -> int:
    """Steps every process can take: the smallest per-rank count of full batches (from the manifest)."""
    return train_plan(shard_dir, batch_size, world)["steps_per_epoch"]


def per_process_batch(effective_batch: int | None, batch_size: int, world: int) -> int:
    """The per-process batch: `batch_size`, or effective_batch / world when an effective (global)
    batch is asked for (the seed trains with 32 on one GPU: effective 32 on 8 processes is 4 each)."""
    if effective_batch is None:
        return batch_size
    if effective_batch < world or effective_batch % world:
        raise ScaleError(f"--effective-batch {effective_batch} is not a multiple of the {world} processes")
    return effective_batch // world


def train_offsets_distributed(drafter, code_predictor, shard_dir: str | os.PathLike,
                              cfg: DistTrainConfig = DistTrainConfig(), accelerator=None,
                              log: Callable[[str], None] | None = None) -> tuple[object, list[float]]:
    """Train `drafter` (frozen code predictor) data-parallel; returns (drafter, global loss per step).

    Holds one epoch's batches in memory per process (shards are read once per epoch); fine for
    offsets, where extraction shards are the large part."""
    if accelerator is None:
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=not torch.cuda.is_available())
    rank, world = accelerator.process_index, accelerator.num_processes
    dev = accelerator.device
    code_predictor.to(dev)
    for p in code_predictor.parameters():
        p.requires_grad_(False)
    drafter.to(dev).train()
    params = list(drafter.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr)
    dt = next(code_predictor.parameters()).dtype
    losses: list[float] = []
    step = 0
    plan = train_plan(shard_dir, cfg.batch_size, world)
    n_steps = plan["steps_per_epoch"]
    if n_steps == 0:
        raise ScaleError(f"{shard_dir}: no full batch of {cfg.batch_size} frames for some of the {world} processes")
    if log and rank == 0:
        log(f"[rank 0/{world}] batch {cfg.batch_size} per process, effective batch {cfg.batch_size * world}; "
            f"{n_steps} steps per epoch; batches per rank {plan['batches_per_rank']}, "
            f"{plan['dropped_batches']} dropped per epoch (every process takes the same number of steps)")
    for epoch in range(cfg.epochs):
        stream, _ = rank_batches(shard_dir, cfg.batch_size, cfg.seed, epoch, rank, world, code_predictor)
        for s, (hidden, codes) in enumerate(stream):
            if s >= n_steps:  # equal step counts: every process joins every all-reduce
                break
            loss = drafter_loss(drafter, code_predictor, hidden.to(dev, dt), codes.to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for p in params:  # DDP's all-reduce: mean of the per-process gradients
                # Medusa's heads for (p, j) with p + j > 15 never score a target, so autograd leaves
                # their grad None; zeros keep every process in the same collective (DDP's
                # find_unused_parameters does the same), and Adam leaves a zero-grad tensor in place
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad = accelerator.reduce(p.grad, reduction="mean")
            opt.step()
            losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
            step += 1
            if log and step % 50 == 0:
                log(f"[rank {rank}/{world}] step {step} loss {losses[-1]:.4f}")
            if cfg.max_steps is not None and step >= cfg.max_steps:
                break
        if cfg.max_steps is not None and step >= cfg.max_steps:
            break
    drafter.eval()
    return drafter, losses
