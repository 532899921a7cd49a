"""Data-parallel scale-out (rvqspec.real.distributed) with 2 CPU processes under `accelerate launch --multi_gpu`
(torchrun + gloo; `--cpu --num_processes 2` would start a single process).

* sharding is a partition: every unit to exactly one rank, for both strategies and several worlds;
* `rvqspec real extract` under `accelerate launch` with 2 processes gives shards identical,
  tensor for tensor, to the single-process run, and the merged manifests agree;
* a rerun after a simulated crash (one unit's marker and output removed, a stale temporary left
  behind) recomputes only that unit -- here with another world size -- and ends identical;
* `rvqspec real train-offsets` with 2 processes equals single-process training on the
  concatenated batches (the all-reduce is a true mean), and differs from training on one
  process's batches alone (negative control).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from _tiny_official import LANGUAGE, SPEAKER, tiny_official
from rvqspec.core.drafters import KINDS
from rvqspec.real.distributed import (ScaleConfig, ScaleError, Topology, my_units, num_units, per_process_batch,
                                      rank_batches, rank_shards, run_units, unit_name)

TESTS = Path(__file__).resolve().parent
PLUGINS = TESTS / "_real_plugins.py"
N_ITEMS = 6


def test_assignment_is_a_partition() -> None:
    for strategy in ("strided", "hash"):
        cfg = ScaleConfig(unit_items=3, strategy=strategy)
        n = num_units(20, cfg)
        assert n == 7
        for world in (1, 2, 3, 5):
            owned = [u for r in range(world) for u in my_units(n, Topology(r, world), cfg)]
            assert sorted(owned) == list(range(n))
    with pytest.raises(ScaleError, match="strategy"):
        ScaleConfig(strategy="random")
    with pytest.raises(ScaleError, match="rank 2 out of range"):
        my_units(4, Topology(2, 2), ScaleConfig())


def test_run_units_is_atomic_and_resumable(tmp_path) -> None:
    calls = []

    def work(u, tmp):
        calls.append(u)
        (tmp / "x.txt").write_text(str(u))
        if u == 2 and len(calls) == 3:
            raise RuntimeError("crash in unit 2")
        return {"u": u}

    with pytest.raises(RuntimeError, match="crash"):
        run_units(tmp_path, 4, work, Topology(0, 1))
    assert not (tmp_path / unit_name(2)).exists() and not list(tmp_path.glob(".unit_*"))  # nothing half-written
    res = run_units(tmp_path, 4, work, Topology(0, 1))
    assert res == {"ran": [2, 3], "skipped": [0, 1]}
    assert json.loads((tmp_path / "unit_00003.done").read_text())["u"] == 3


# ---- two processes --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("scale")
    model_dir = root / "model"
    tiny_official(seed=5).save_pretrained(model_dir)
    data = root / "data"
    data.mkdir()
    rows = ["file_name,text"]
    for i in range(N_ITEMS):
        a = (0.1 * np.random.default_rng(i).standard_normal(int(16000 * (0.25 + 0.05 * i)))).astype(np.float32)
        sf.write(data / f"u{i}.wav", a, 16000, subtype="FLOAT")
        rows.append(f"u{i}.wav,utterance number {i}")
    (data / "metadata.csv").write_text("\n".join(rows) + "\n")
    return root, model_dir, data


def env() -> dict:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
             OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return e


def rvqspec(args: list[str], procs: int = 1, port: int = 29517) -> subprocess.CompletedProcess:
    if procs == 1:
        cmd = [sys.executable, "-m", "rvqspec.cli", *args]
    else:
        # --multi_gpu = torchrun; without GPUs the processes join a gloo group (rvqspec.real.distributed docstring)
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(procs),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(port), "-m", "rvqspec.cli", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def in_process(args: list[str]) -> None:
    """The same command in this process (world size 1), without an interpreter start-up."""
    from typer.testing import CliRunner

    from rvqspec.cli import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output


def extract_args(model_dir, data, out):
    return ["real", "extract", "--model", str(model_dir), str(data), "--out-dir", str(out), "--lang", "en",
            "--speaker", SPEAKER, "--codec", f"{PLUGINS}:ToyCodec", "--text-tokenizer", f"{PLUGINS}:text_ids",
            "--unit-items", "2", "--shard-frames", "4", "--hidden-dtype", "float32"]


def tensors(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    m = json.loads((out / "manifest.json").read_text())
    parts = [load_file(str(out / s["file"])) for s in m["shards"]]
    return {k: torch.cat([p[k] for p in parts]) for k in ("hidden", "codes")}


def test_two_process_extraction_equals_single_and_resumes(world) -> None:
    root, model_dir, data = world
    assert LANGUAGE == "english"
    single, multi = root / "single", root / "multi"
    in_process(extract_args(model_dir, data, single))
    r = rvqspec(extract_args(model_dir, data, multi), procs=2)
    a, b = tensors(single), tensors(multi)
    assert a["codes"].shape[0] > 10
    assert torch.equal(a["codes"], b["codes"]) and torch.equal(a["hidden"], b["hidden"])
    ms, mm = (json.loads((d / "manifest.json").read_text()) for d in (single, multi))
    assert ms["frames"] == mm["frames"] and ms["shards"] == mm["shards"] and ms["model_hash"] == mm["model_hash"]
    ranks = {json.loads((multi / f"unit_{u:05d}.done").read_text())["rank"] for u in range(3)}
    assert ranks == {0, 1}  # both processes really worked
    assert json.loads(r.stdout)["world"] == 2
    # crash simulation: unit 1 lost its marker and output; a stale temporary directory is left behind
    (multi / "unit_00001.done").unlink()
    shutil.rmtree(multi / "unit_00001")
    (multi / ".unit_00001.tmp-dead").mkdir()
    stamps = {u: (multi / f"unit_{u:05d}.done").stat().st_mtime_ns for u in (0, 2)}
    in_process(extract_args(model_dir, data, multi))  # the rerun may use another world size
    markers = {u: json.loads((multi / f"unit_{u:05d}.done").read_text()) for u in range(3)}
    assert markers[1]["world"] == 1 and markers[0]["world"] == markers[2]["world"] == 2  # only unit 1 recomputed
    assert all((multi / f"unit_{u:05d}.done").stat().st_mtime_ns == t for u, t in stamps.items())
    assert not list(multi.glob(".unit_*"))  # the stale temporary is gone (removed when unit 1 ran)
    c = tensors(multi)
    assert torch.equal(a["codes"], c["codes"]) and torch.equal(a["hidden"], c["hidden"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_two_process_training_all_reduces(world, kind) -> None:
    """Every Table 2 drafter trains under a two-process launch. Medusa's heads for p + j > 15 never
    get a gradient (None): the reduction must still agree across processes (it crashed)."""

    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.core.drafters import load_drafter, make_drafter
    from rvqspec.measure.train_drafter import drafter_loss

    root, model_dir, data = world
    shards = root / "single"
    if not (shards / "manifest.json").is_file():
        in_process(extract_args(model_dir, data, shards))
    out = root / f"{kind}.safetensors"
    steps, B = 3, 4
    r = rvqspec(["real", "train-offsets", "--model", str(model_dir), str(shards), "--out", str(out), "--kind", kind,
                 "--effective-batch", str(2 * B), "--max-steps", str(steps), "--lr", "0.01", "--epochs", "5"],
                procs=2, port=29518 + sorted(KINDS).index(kind))
    printed = json.loads(r.stdout)
    assert printed["batch_per_process"] == B and printed["effective_batch"] == 2 * B and printed["world"] == 2
    cp = load_qwen3_tts(model_dir, parts=("code_predictor",)).code_predictor
    got = load_drafter(out, cp).state_dict()
    for p in cp.parameters():
        p.requires_grad_(False)

    def train(ranks):  # one process, step s = the listed ranks' s-th batches concatenated
        d = make_drafter(kind, cp, 3)
        opt = torch.optim.Adam(d.parameters(), lr=0.01)
        streams = [list(rank_batches(shards, B, seed=0, epoch=0, rank=r, world=2)[0]) for r in (0, 1)]
        assert min(len(x) for x in streams) >= steps
        for s in range(steps):
            h = torch.cat([streams[r][s][0] for r in ranks])
            c = torch.cat([streams[r][s][1] for r in ranks])
            loss = drafter_loss(d, cp, h, c)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {k: v.detach() for k, v in d.state_dict().items()}

    both = train((0, 1))  # what the all-reduce computes: the mean over both processes' batches
    rank0 = train((0,))
    init = make_drafter(kind, cp, 3).state_dict()
    diff = lambda a, b: max((a[k] - b[k]).abs().max().item() for k in a)
    assert diff(got, init) > 1e-3  # it trained
    assert diff(got, both) < 1e-5
    assert diff(got, rank0) > 1e-4  # negative control: no all-reduce would look like this
    info = json.loads(out.with_suffix(".json").read_text())
    assert info["world"] == 2 and info["steps"] == steps and info["kind"] == kind


def test_shards_are_balanced_and_the_drop_is_stated() -> None:
    """Ranks get shards by full batches, largest shard first to the least loaded rank: the smallest
    rank sets the step count, so balancing keeps more batches than the strided split did."""
    shards = [{"frames": f} for f in (16, 4, 4, 4)]  # batches of 4 frames: 4, 1, 1, 1
    owned = rank_shards(shards, 4, 2)
    assert sorted(i for o in owned for i in o) == [0, 1, 2, 3]  # a partition
    assert owned == [[0], [1, 2, 3]]  # 4 vs 3 batches; strided (0, 2) / (1, 3) would be 5 vs 2
    shards8 = [{"frames": 32 * n} for n in (5, 5, 4, 4, 3, 3, 3, 2, 2, 1)]
    per = [sum(shards8[i]["frames"] // 32 for i in o) for o in rank_shards(shards8, 32, 8)]
    assert max(per) - min(per) <= 5 and sum(per) == 32
    strided = [sum(x["frames"] // 32 for x in shards8[r::8]) for r in range(8)]
    assert min(per) == 3 > min(strided) == 2
    with pytest.raises(ScaleError, match="--effective-batch 36 is not a multiple of the 8 processes"):
        per_process_batch(36, 32, 8)
    assert per_process_batch(32, 7, 8) == 4 and per_process_batch(None, 7, 8) == 7


def invoke(args: list[str]):
    from typer.testing import CliRunner

    from rvqspec.cli import app

    return CliRunner().invoke(app, args)


def test_resume_refuses_a_changed_unit_size(world) -> None:
    """Unit u of another --unit-items holds other items: resuming into the same folder used to skip
    'finished' units and duplicate frames (243 -> 336). Now: exit 2, one line naming the key."""
    root, model_dir, data = world
    out = root / "resume"
    in_process(extract_args(model_dir, data, out))
    frames = json.loads((out / "manifest.json").read_text())["frames"]
    args = extract_args(model_dir, data, out)
    args[args.index("--unit-items") + 1] = "3"
    r = invoke(args)
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("error: ") and "units.json" in line and "unit_items=2" in line and "unit_items=3" in line
    assert json.loads((out / "manifest.json").read_text())["frames"] == frames  # untouched
    args = extract_args(model_dir, data, out) + ["--limit", "4"]  # fewer items: other units too
    r = invoke(args)
    assert r.exit_code == 2 and "items=6" in r.output and "items=4" in r.output
    in_process(extract_args(model_dir, data, out))  # the same command resumes (nothing to do)
    assert json.loads((out / "manifest.json").read_text())["frames"] == frames


def test_extraction_runs_on_the_chosen_device_and_dtype(world) -> None:
    """--device/--dtype place the official model (it was always CPU float32). bf16 here on the CPU:
    the shards record it, differ from float32 by bf16 rounding only, and keep the float32 model
    hash that train-offsets and calibration check against."""
    from rvqspec.real.distributed import placement

    root, model_dir, data = world
    f32, b16 = root / "dev_f32", root / "dev_b16"
    in_process(extract_args(model_dir, data, f32) + ["--device", "cpu", "--dtype", "float32"])
    in_process(extract_args(model_dir, data, b16) + ["--device", "cpu", "--dtype", "bfloat16"])
    unit = json.loads((b16 / "unit_00000" / "manifest.json").read_text())
    assert unit["extra"]["dtype"] == "bfloat16" and unit["extra"]["device"] == "cpu"
    assert json.loads((f32 / "unit_00000" / "manifest.json").read_text())["extra"]["dtype"] == "float32"
    a, b = tensors(f32), tensors(b16)
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (f32, b16))
    assert ma["model_hash"] == mb["model_hash"]
    assert torch.equal(a["codes"], b["codes"])  # teacher forcing: the dataset's codes
    d = (a["hidden"] - b["hidden"]).abs()
    assert d.max().item() > 0  # it really ran in bf16 (negative control against a silent float32)
    assert d.mean().item() < 0.05 * a["hidden"].abs().mean().item()
    assert placement(None, None) == (torch.device("cpu"), torch.float32) or torch.cuda.is_available()
    if not torch.cuda.is_available():
        r = invoke(extract_args(model_dir, data, root / "dev_cuda") + ["--device", "cuda"])
        assert r.exit_code == 2 and "--device cuda: torch.cuda.is_available() is False" in r.output
    r = invoke(extract_args(model_dir, data, root / "dev_bad") + ["--dtype", "int8"])
    assert r.exit_code == 2 and "--dtype 'int8' is not one of" in r.output
