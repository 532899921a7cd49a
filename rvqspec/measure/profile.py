"""Per-device profile of the code predictor's calls and the tree size N* it implies (seed 000 §3.4).

Protocol (seed 000 §3.4, Figure 4): p50 (and p10/p90) over `calls` steady-state calls after
`warmup` warm-up calls, of the AR step (q = 1) and of the fused verify call for each tree size N
(q = N + 1), both the static export graphs of `rvqspec.export.wrappers`. The graphs are timed
round-robin (one call of each per sweep) so that load from other processes on a shared machine
hits every graph alike: the ratios are measured side by side. With tokens per call tpc(N) from an
acceptance curve:

    overhead(N) = t_verify(N) / t_AR - 1,    speedup(N) = tpc(N) / (1 + overhead(N)),

N* = argmax speedup (and "use_speculation": whether its speed-up exceeds 1), written to a device
profile JSON that the speculative decoder loads (`load_device_profile`, `tree_for_profile`:
"--tree auto"). `rescore` re-combines stored latencies with another acceptance curve (acceptance
is device independent, seed 000 §3.4, so only the latencies need a device).

Acceptance curve, in order of preference:
1. ``--acceptance FILE`` with measured tokens per call: ``{"N": {"4": 1.9, "16": 2.2, ...}}`` (keys
   N, values tokens per call = 15 * frames / calls); the key ``"tokens_per_call"`` is read the same
   way, and the `rvqspec bench acceptance --json` output is read directly (one drafter's entry,
   tokens per call averaged over its languages, its table under "acceptance"). Sizes missing from
   the curve get speed-up null.
2. an acceptance table (depth x rank probabilities) in the same file under ``"acc"`` (the
   `rvqspec.measure.acceptance.AcceptanceTable` JSON) or ``"acceptance_table"``: trees are grown from it and
   tpc(N) is the exact expected 15 / calls of a frame under the table's independence model
   (`tokens_per_call_from_table`, which counts the prefill call and the c15 boundary).
3. neither: `default_acceptance_table()`, a two-parameter table fitted to seed 000 §3.4's ceiling
   (2.25 tokens per call at N = 16, 2.60 at N = 64); the profile says so in "acceptance_source".

Device profile JSON (schema rvqspec.device_profile/1): device, backend, dtype, model, threads,
calls, warmup, ar {p10, p50, p90, mean, calls}, verify {N: {..., q, tree}}, overhead {N},
tokens_per_call {N}, speedup {N}, n_star, best_speedup, use_speculation, acceptance_source,
acceptance_table, loadavg_1min [before, after], created.
Trees are always grown greedily from the table in use (seed 000 §2.2), depth cap K = 3.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from rvqspec.core.checkpoint import model_hash
from rvqspec.core.defaults import DRAFTER_PREFERENCE, NUM_CODES, K, choose_n_star
from rvqspec.core.jsonfile import read_json
from rvqspec.core.tree import SparseTree
from rvqspec.export.coreml import CoreMLGraph, convert_graph
from rvqspec.export.source import load_code_predictor
from rvqspec.export.wrappers import ExportError, ar_graph, fused_graph
from rvqspec.measure.acceptance import AcceptanceTable

SCHEMA = "rvqspec.device_profile/1"
BACKENDS = ("torch-cpu", "torch-cuda", "mps", "coreml", "onnx")
DTYPES = ("fp32", "bf16", "fp16")
# Fitted to seed 000 §3.4 (tokens/step 2.25 at N = 16, 2.60 at N = 64, offsets drafter), see
# default_acceptance_table: acc[d, r] = ALPHA (1 - RHO) RHO**r at every depth. A grid fit (step 0.05)
# gives 2.27 / 2.47 / 2.61 tokens per call at N = 16 / 32 / 64 (seed: 2.25, 2.47 in Table 2, 2.60).
DEFAULT_ALPHA, DEFAULT_RHO, DEFAULT_RANKS = 0.9, 0.5, 16


def torch_dtype(name: str):
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


class ProfileError(ValueError):
    """A profile request or file that does not fit (names the file, key or value)."""


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine (message = the reason, for a clean skip)."""


@dataclass(frozen=True)
class ProfileConfig:
    """One profiling run; the CLI reads its defaults from here."""

    backend: str = "torch-cpu"
    dtype: str = "fp32"
    model: str = "0.6b"                 # checkpoint directory or preset name (random weights)
    calls: int = 200                    # timed calls per graph (seed 000 §3.4)
    warmup: int = 20                    # excluded warm-up calls (seed 000 §3.4)
    sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    max_depth: int = K                  # K (seed 000 §2.2)
    threads: int = 1                    # CPU threads (torch / onnxruntime)
    compile: bool = False               # torch.compile the torch-cpu graphs
    budget_s: float | None = None       # per-graph time cap: fewer timed calls (>= 20) if exceeded
    cache_length: int = 8               # committed slots during timing (cost does not depend on it)
    heads: str = "window"               # LM head access in the graphs (rvqspec.export.wrappers)
    compute_units: str = "ALL"          # coreml: ALL | CPU_AND_NE (the seed's ANE) | CPU_AND_GPU | CPU_ONLY
    seed: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ProfileError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.dtype not in DTYPES:
            raise ProfileError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.calls < 1 or self.warmup < 0:
            raise ProfileError(f"calls must be >= 1 and warmup >= 0, got calls={self.calls} warmup={self.warmup}")
        if not self.sizes or any(int(n) < 1 for n in self.sizes):
            raise ProfileError(f"sizes must be positive tree sizes, got {self.sizes!r}")
        if self.heads not in ("window", "all"):
            raise ProfileError(f"heads must be 'window' or 'all', got {self.heads!r}")
        if self.compute_units not in ("ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY"):
            raise ProfileError(f"compute_units must be ALL, CPU_AND_NE, CPU_AND_GPU or CPU_ONLY, "
                               f"got {self.compute_units!r}")


# --------------------------------------------------------------------------------------------
# acceptance
# --------------------------------------------------------------------------------------------
def default_acceptance_table(alpha: float = DEFAULT_ALPHA, rho: float = DEFAULT_RHO,
                             ranks: int = DEFAULT_RANKS, depth: int = K) -> np.ndarray:
    """(depth, ranks) table acc[d, r] = alpha (1 - rho) rho^r: geometric over ranks, the same at
    every depth (the path product makes deeper nodes rarer). Fitted to seed 000 §3.4's ceiling."""
    r = np.arange(ranks)
    row = alpha * (1 - rho) * rho ** r  # (R,)
    return np.tile(row, (depth, 1))  # (K, R)


def tokens_per_call_from_table(tree: "SparseTree", table: np.ndarray, n: int = NUM_CODES) -> float:
    """Exact expected 15 / calls of one frame under the table's independence model (Medusa's).

    P(a >= k) = sum of path scores of the depth-k nodes (ranks at one depth are exclusive events).
    A round after c_m accepts at most n - m nodes; a frame = 1 prefill call + rounds until c15."""
    table = np.asarray(table, dtype=np.float64)
    b = tree.buffers(table)  # validates the table against the tree
    depth = b.depth.tolist()
    score = [1.0] * len(depth)
    for i, p in enumerate(tree.paths, start=1):
        s = 1.0
        for d, r in enumerate(p):
            s *= float(table[d, r])
        score[i] = s
    K = b.max_depth
    ge = [1.0] + [sum(s for s, d in zip(score, depth) if d == k) for k in range(1, K + 1)]  # P(a >= k)
    calls = [0.0] * (n + 2)  # expected remaining calls after emitting c_m (m = n, n+1: done)
    for m in range(n - 1, 0, -1):
        kmax = min(K, n - m)
        e = 1.0
        for a in range(kmax + 1):
            pa = ge[a] - (ge[a + 1] if a < kmax else 0.0)  # P(accept exactly a), truncated at kmax
            e += pa * calls[min(m + a + 1, n + 1)]
        calls[m] = e
    return n / (1.0 + calls[1])


@dataclass
class Acceptance:
    """Where tokens per call come from: a measured curve and/or a table to grow trees."""

    table: np.ndarray                      # (K, R) acceptance table used to grow the trees
    curve: dict[int, float] = field(default_factory=dict)   # measured tpc(N), may be empty
    source: str = ""

    def tokens_per_call(self, tree: "SparseTree") -> tuple[float | None, str]:
        n = len(tree)
        if self.curve:
            return self.curve.get(n), "measured"
        return tokens_per_call_from_table(tree, self.table), "table"




def _from_bench(d: dict, p: Path, drafter: str | None) -> dict:
    """The `rvqspec bench acceptance --json` layout ({"drafters": {name: {"acceptance": {"acc"},
    "by_language": {lang: {N: {"tokens_per_call"}}}}}}) -> the simple layout, averaged over languages."""
    ds = d["drafters"]
    if not isinstance(ds, dict) or not ds:
        raise ProfileError(f"{p}: 'drafters' must be a non-empty object")
    name = drafter or next((k for k in DRAFTER_PREFERENCE if k in ds), sorted(ds)[0])
    if name not in ds:
        raise ProfileError(f"{p}: no drafter {name!r} (has {sorted(ds)})")
    e = ds[name]
    per_n: dict[str, list[float]] = {}
    for lang, rows in e.get("by_language", {}).items():
        for n, row in rows.items():
            per_n.setdefault(str(n), []).append(float(row["tokens_per_call"]))
    out = {"N": {n: sum(v) / len(v) for n, v in per_n.items()},
           "source": f"{p} (bench acceptance, drafter {name!r}, mean over {len(e.get('by_language', {}))} "
                     f"language(s))"}
    if isinstance(e.get("acceptance"), dict) and "acc" in e["acceptance"]:
        out["acc"] = e["acceptance"]["acc"]
    return out


def load_acceptance(path: str | Path | None, max_depth: int = K, drafter: str | None = None) -> Acceptance:
    """Read an acceptance file (formats in the module docstring; also the `rvqspec bench acceptance
    --json` output, whose `drafter` entry is used: default the first of DRAFTER_PREFERENCE present);
    None -> the seed-fitted default table."""
    if path is None:
        return Acceptance(default_acceptance_table(depth=max_depth),
                          source=f"default table fitted to seed 000 §3.4 (alpha={DEFAULT_ALPHA}, rho={DEFAULT_RHO})")
    p = Path(path)
    d = read_json(p, ProfileError, "no such acceptance file")
    if not isinstance(d, dict):
        raise ProfileError(f"{p}: expected a JSON object, got {type(d).__name__}")
    if "drafters" in d:
        d = _from_bench(d, p, drafter)
    curve: dict[int, float] = {}
    raw = d.get("N", d.get("tokens_per_call"))
    if raw is not None:
        if not isinstance(raw, dict):
            raise ProfileError(f"{p}: key 'N' must map tree sizes to tokens per call, got {type(raw).__name__}")
        for k, v in raw.items():
            try:
                n, t = int(k), float(v["tokens_per_call"] if isinstance(v, dict) else v)
            except (ValueError, TypeError, KeyError):
                raise ProfileError(f"{p}: entry N={k!r} -> {v!r} is not a tree size with tokens per call") from None
            if n < 0 or not 1.0 <= t <= NUM_CODES:
                raise ProfileError(f"{p}: entry N={k} has tokens per call {t} outside [1, {NUM_CODES}]")
            curve[n] = t
    tab = d.get("acc", d.get("acceptance_table"))
    if tab is not None and "counts" in d and "totals" in d:
        # a `spec calibrate` table: the exact counts, as grow-tree reads them ('acc' is rounded)
        table = AcceptanceTable.from_json(d, where=str(p)).acc.astype(np.float64)
    elif tab is not None:
        table = np.asarray(tab, dtype=np.float64)
    if tab is not None:
        if table.ndim != 2 or table.size == 0 or not np.all((table >= 0) & (table <= 1)):
            raise ProfileError(f"{p}: 'acc' must be a (depth, rank) table of probabilities, got shape {table.shape}")
    elif curve:
        table = default_acceptance_table(depth=max_depth)
    else:
        raise ProfileError(f"{p}: no acceptance data: expected key 'N' (or 'tokens_per_call') and/or 'acc' "
                           f"(keys: {sorted(d)})")
    src = d.get("source")
    what = ("measured tokens per call" if curve else "acceptance table") + (
        " + its table" if curve and tab is not None else (" (trees from the default table)" if curve else ""))
    return Acceptance(table, curve, f"{what} from {p}" + (f" ({src})" if src and src != str(p) else ""))


def trees_for_sizes(acceptance: Acceptance, sizes, max_depth: int = K) -> dict[int, "SparseTree"]:
    """Greedy trees (seed 000 §2.2) of each size from the acceptance table."""
    out = {}
    for n in sizes:
        t = SparseTree.grow(acceptance.table, budget=int(n), max_depth=max_depth)
        if len(t) != n:
            raise ProfileError(f"the acceptance table of shape {acceptance.table.shape} grows at most "
                               f"{len(t)} nodes at depth <= {max_depth}, not N={n}")
        out[int(n)] = t
    return out


# --------------------------------------------------------------------------------------------
# backends: each returns a zero-argument callable running one call on fixed inputs
# --------------------------------------------------------------------------------------------
def _model(spec: str, dtype, seed: int):
    return load_code_predictor(spec, dtype, seed)


def _feeds(graph, cache_length: int, seed: int) -> dict[str, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    names = list(graph.spec("x").inputs)
    return {n: t.float().numpy() if t.is_floating_point() else t.numpy()
            for n, t in zip(names, graph.example_inputs(cache_length, g, torch.float32))}


def torch_runner(graph, cfg: ProfileConfig, device: str) -> Callable[[], object]:
    """Eager (optionally compiled) torch on cpu / mps; CUDA graphs on cuda."""
    dtype = torch_dtype(cfg.dtype)
    args = [a.to(device) if a.dtype == torch.int32 else a.to(device=device, dtype=dtype)
            for a in graph.example_inputs(cfg.cache_length, torch.Generator().manual_seed(cfg.seed), torch.float32)]
    fn = torch.compile(graph) if cfg.compile else graph
    if device == "cuda":
        # CUDA graphs: one capture replays the whole call without per-kernel launch cost (the
        # on-device regime the seed measures: launch overhead dominates at q = 1).
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.inference_mode():
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream().wait_stream(s)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg), torch.inference_mode():
            fn(*args)

        def run():
            cg.replay()
            torch.cuda.synchronize()
        return run
    sync = torch.mps.synchronize if device == "mps" else (lambda: None)

    def run():
        with torch.inference_mode():
            out = fn(*args)
        sync()
        return out
    return run


def _check_backend(cfg: ProfileConfig) -> str:
    """The torch device for the backend, or BackendUnavailable with the reason."""
    if cfg.backend == "torch-cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailable("torch-cuda: torch.cuda.is_available() is False on this machine")
        return "cuda"
    if cfg.backend == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise BackendUnavailable("mps: torch.backends.mps.is_available() is False (needs Apple silicon macOS)")
        return "mps"
    if cfg.backend == "coreml":
        if sys.platform != "darwin":
            raise BackendUnavailable(f"coreml: Core ML predictions need macOS (this is {sys.platform})")
        if cfg.dtype != "fp16":
            raise ProfileError("coreml runs W8A16 with fp16 compute: use --dtype fp16")
        return "cpu"
    if cfg.backend == "onnx":
        if cfg.dtype != "fp32":
            raise ProfileError("onnx (onnxruntime CPU) profiles fp32 graphs: use --dtype fp32")
        return "cpu"
    if cfg.dtype == "fp16":
        raise ProfileError("torch-cpu fp16 matmuls are not a deployment target: use fp32 or bf16")
    return "cpu"


class _Runners:
    """Builds one runner per graph for the configured backend (exports where needed)."""

    def __init__(self, cp, cfg: ProfileConfig, device: str, workdir: Path):
        self.cp, self.cfg, self.device, self.workdir = cp, cfg, device, workdir

    def __call__(self, graph, name: str) -> Callable[[], object]:
        cfg = self.cfg
        if cfg.backend in ("torch-cpu", "torch-cuda", "mps"):
            return torch_runner(graph, cfg, self.device)
        feeds = _feeds(graph, cfg.cache_length, cfg.seed)
        if cfg.backend == "onnx":
            from rvqspec.export.onnx import OnnxGraph, export_graph

            path = self.workdir / f"{name}.onnx"
            export_graph(graph, path, name)
            sess = OnnxGraph(path, threads=cfg.threads)
            return lambda: sess(feeds)
        import coremltools as ct


        path = self.workdir / f"{name}.mlpackage"
        convert_graph(graph, name, ct.target.iOS17, "w8a16").save(str(path))
        model = CoreMLGraph(path, compute_units=cfg.compute_units)
        return lambda: model(feeds)


def time_interleaved(runs: dict[str, Callable[[], object]], calls: int, warmup: int,
                     budget_s: float | None = None, progress=None) -> dict[str, dict]:
    """p10/p50/p90/mean (ms) per runner: `warmup` calls each, then `calls` timed calls taken
    round-robin (one call of every graph per sweep), so that load from other processes on a shared
    machine hits every graph alike and the ratios t_verify / t_AR stay side by side (one run).
    With budget_s, a graph whose warm-up median says `calls` would exceed the budget gets fewer
    timed calls (>= 20, or `calls` if smaller); the count is recorded per graph."""
    target: dict[str, int] = {}
    for name, run in runs.items():
        t_w = []
        for _ in range(warmup):
            t0 = time.perf_counter()
            run()
            t_w.append(time.perf_counter() - t0)
            if progress is not None:
                progress.update(1)
        n = calls
        if budget_s is not None and t_w:
            est = float(np.median(t_w[len(t_w) // 2:]))
            n = max(min(calls, 20), min(calls, int(budget_s / max(est, 1e-9))))
        target[name] = n
    ts: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(calls):
        for name, run in runs.items():
            if i >= target[name]:
                continue
            t0 = time.perf_counter()
            run()
            ts[name].append(time.perf_counter() - t0)
            if progress is not None:
                progress.update(1)
    if progress is not None:
        progress.update(sum(calls - n for n in target.values()))
    out = {}
    for name, t in ts.items():
        ms = np.asarray(t) * 1e3
        out[name] = {"p10": float(np.percentile(ms, 10)), "p50": float(np.percentile(ms, 50)),
                     "p90": float(np.percentile(ms, 90)), "mean": float(ms.mean()), "calls": int(len(ms)),
                     "warmup": int(warmup)}
    return out


def time_calls(run: Callable[[], object], calls: int, warmup: int, budget_s: float | None = None,
               progress=None) -> dict:
    """`time_interleaved` for one runner."""
    return time_interleaved({"x": run}, calls, warmup, budget_s, progress)["x"]


def device_name(backend: str) -> str:
    if backend == "torch-cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} ({platform.system()} {platform.machine()})"


def profile(cfg: ProfileConfig, acceptance: Acceptance | None = None, code_predictor=None,
            progress: bool = True) -> dict:
    """Run the profile and return the device profile dict (see `DeviceProfile`)."""
    device = _check_backend(cfg)
    acceptance = acceptance or load_acceptance(None, cfg.max_depth)
    torch.set_num_threads(cfg.threads)
    dtype = torch_dtype(cfg.dtype)
    export_backend = cfg.backend in ("onnx", "coreml")
    cp = code_predictor
    if cp is None:  # export backends trace fp32 graphs (Core ML then computes in fp16)
        cp = _model(cfg.model, torch.float32 if export_backend else dtype, cfg.seed)
    if not export_backend:
        cp = cp.to(device=device, dtype=dtype)
    trees = trees_for_sizes(acceptance, cfg.sizes, cfg.max_depth)
    try:
        from tqdm import tqdm
    except ImportError:  # a bare GPU machine may lack it: no progress bar then
        progress = False
    bar = (tqdm(total=(cfg.calls + cfg.warmup) * (1 + len(trees)), desc=f"profile {cfg.backend} {cfg.dtype}",
                file=sys.stderr) if progress else None)
    verify = {}
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory(prefix="rvqspec-profile-") as tmp:
        runners = _Runners(cp, cfg, device, Path(tmp))
        with torch.no_grad():
            heads = torch.stack([m.weight.detach() for m in cp.lm_head])  # (15, V, H) shared by all graphs
            kw = dict(head_stack=heads, heads=cfg.heads)
            runs = {"ar": runners(ar_graph(cp, **kw).to(device), "ar")}
            for n, tree in trees.items():
                runs[n] = runners(fused_graph(cp, tree, **kw).to(device), f"fused_{n}")
            times = time_interleaved(runs, cfg.calls, cfg.warmup, cfg.budget_s, bar)
            del runs
    if bar is not None:
        bar.close()
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    ar = times["ar"]
    for n, tree in trees.items():
        verify[n] = dict(times[n], q=n + 1, tree=[list(p) for p in tree.paths])
    scores = _score(verify, ar["p50"], acceptance, trees)

    return {"schema": SCHEMA, "device": device_name(cfg.backend), "backend": cfg.backend, "dtype": cfg.dtype,
            "model": cfg.model, "model_hash": model_hash(cp), "threads": cfg.threads, "compile": cfg.compile,
            "compute_units": cfg.compute_units if cfg.backend == "coreml" else None, "heads": cfg.heads,
            "calls": cfg.calls, "warmup": cfg.warmup, "budget_s": cfg.budget_s, "max_depth": cfg.max_depth,
            "ar": ar, "verify": {str(n): v for n, v in verify.items()}, **scores,
            "timing": "interleaved round-robin over graphs, perf_counter per call",
            "loadavg_1min": [None if load_before is None else load_before[0],
                             None if load_after is None else load_after[0]], "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _score(verify: dict, ar_p50: float, acceptance: Acceptance, trees: dict) -> dict:
    """overhead, tokens per call, speed-up and N* from p50 latencies (seed 000 §3.4, Figure 4)."""
    overhead, speedup, tpc, kind = {}, {}, {}, {}
    for n, tree in trees.items():
        overhead[n] = verify[n]["p50"] / ar_p50 - 1.0
        tpc[n], kind[n] = acceptance.tokens_per_call(tree)
        speedup[n] = None if tpc[n] is None else tpc[n] / (1.0 + overhead[n])
    valid = {n: s for n, s in speedup.items() if s is not None}
    if not valid:
        raise ProfileError("no tree size has a tokens-per-call value: the acceptance curve covers "
                           f"{sorted(acceptance.curve)}, profiled sizes are {sorted(trees)}")
    n_star = choose_n_star(valid)
    return {"overhead": {str(n): v for n, v in overhead.items()},
            "tokens_per_call": {str(n): v for n, v in tpc.items()},
            "tokens_per_call_kind": {str(n): v for n, v in kind.items()},
            "speedup": {str(n): v for n, v in speedup.items()}, "n_star": int(n_star),
            "best_speedup": valid[n_star], "use_speculation": bool(valid[n_star] > 1.0),
            "acceptance_source": acceptance.source, "acceptance_table": np.round(acceptance.table, 6).tolist()}


def rescore(profile_dict: dict, acceptance: Acceptance) -> dict:
    """The same latencies under another acceptance curve (acceptance is device independent, seed
    000 §3.4: only the overhead needs profiling). With a measured curve this is exact; with a table,
    tokens per call come from trees regrown from that table at the same N (same q; the latency was
    measured on the profile's own trees of that N, recorded in verify[N]["tree"])."""
    verify = {int(k): v for k, v in profile_dict["verify"].items()}
    trees = trees_for_sizes(acceptance, sorted(verify), int(profile_dict.get("max_depth", 3)))
    out = dict(profile_dict)
    out.update(_score(verify, float(profile_dict["ar"]["p50"]), acceptance, trees))
    out["rescored"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return out


# --------------------------------------------------------------------------------------------
# device profile files (what `--tree auto` reads)
# --------------------------------------------------------------------------------------------
@dataclass
class DeviceProfile:
    device: str
    backend: str
    dtype: str
    n_star: int
    max_depth: int
    ar_p50_ms: float
    verify_p50_ms: dict[int, float]
    overhead: dict[int, float]
    speedup: dict[int, float | None]
    tokens_per_call: dict[int, float | None]
    acceptance_source: str
    acceptance_table: list
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict, where: str = "device profile") -> "DeviceProfile":
        if d.get("schema") != SCHEMA:
            raise ProfileError(f"{where}: schema is {d.get('schema')!r}, expected {SCHEMA!r}")
        need = ("device", "backend", "dtype", "n_star", "max_depth", "ar", "verify", "overhead", "speedup",
                "tokens_per_call", "acceptance_source", "acceptance_table")
        missing = [k for k in need if k not in d]
        if missing:
            raise ProfileError(f"{where}: missing keys {missing}")
        try:
            return cls(device=d["device"], backend=d["backend"], dtype=d["dtype"], n_star=int(d["n_star"]),
                       max_depth=int(d["max_depth"]), ar_p50_ms=float(d["ar"]["p50"]),
                       verify_p50_ms={int(k): float(v["p50"]) for k, v in d["verify"].items()},
                       overhead={int(k): float(v) for k, v in d["overhead"].items()},
                       speedup={int(k): (None if v is None else float(v)) for k, v in d["speedup"].items()},
                       tokens_per_call={int(k): (None if v is None else float(v))
                                        for k, v in d["tokens_per_call"].items()},
                       acceptance_source=str(d["acceptance_source"]), acceptance_table=d["acceptance_table"], raw=d)
        except (KeyError, TypeError, ValueError) as e:
            raise ProfileError(f"{where}: malformed entry ({e!r})") from None


def save_device_profile(profile_dict: dict, path: str | Path) -> Path:
    """Write atomically (temp file + rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(profile_dict, indent=1) + "\n")
    tmp.replace(p)
    return p


def load_device_profile(path: str | Path) -> DeviceProfile:
    p = Path(path)
    d = read_json(p, ProfileError, "no such device profile")
    return DeviceProfile.from_dict(d, str(p))


def tree_for_profile(profile: DeviceProfile, acceptance_table=None) -> "SparseTree":
    """The greedy tree of size N* (seed 000 §2.2, §3.4) from `acceptance_table` (K, R) — the
    calibration table of the drafter in use — or, when None, the table the profile was made with."""
    if acceptance_table is None:
        acceptance_table = profile.acceptance_table
    table = np.asarray(getattr(acceptance_table, "acc", acceptance_table), dtype=np.float64)  # AcceptanceTable or array
    tree = SparseTree.grow(table, budget=profile.n_star, max_depth=profile.max_depth)
    if len(tree) != profile.n_star:
        raise ProfileError(f"the acceptance table of shape {table.shape} grows only {len(tree)} nodes, "
                           f"the profile's N* is {profile.n_star}")
    return tree


def load_tree(path: str | Path, acceptance_table=None) -> "SparseTree":
    """A tree JSON (list of rank paths, or {"paths": [...]}) or a device profile JSON (its N* tree)."""
    p = Path(path)
    d = read_json(p, ExportError, "no such tree file")
    if isinstance(d, dict) and str(d.get("schema", "")).startswith("rvqspec.device_profile"):
        return tree_for_profile(DeviceProfile.from_dict(d, str(p)), acceptance_table)
    return SparseTree.from_json(p.read_text(), source=str(p))
