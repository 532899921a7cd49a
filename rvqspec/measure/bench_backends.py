"""Per-backend timing of the inner loop (issue 16): eager vs torch.compile vs ONNX Runtime, AR and
speculative, interleaved frame by frame in one run (the machine is shared and noisy: only same-run
ratios mean much).

For every frame, each (mode, backend) runs once, in a rotating order, with its own generator seeded
alike, so the speculative backends decode the same codes and pay the same number of rounds (the
JSON reports how many frames agreed). Per (mode, backend):

* ``frame_ms``: median wall time of a whole frame (c1..c15);
* ``call_ms``: median wall time of one graph call (eager decoder: one fused verify call, timed inside
  the frame; graph backends: one whole-round / whole-frame call);
* ``calls_per_frame``, ``tokens_per_call`` = 15 / calls per frame (eager speculative: the prefill
  counts as a call, as in `SpecStats`);
* ``host_overhead_share`` = 1 - calls_per_frame x call_ms / frame_ms: the part of a frame spent
  outside the calls (issue 16's target: <= 0.25 for the speculative graph backends);
* ratios against the eager decoder of the same mode, ``speedup_vs_eager`` = eager frame_ms /
  frame_ms (median of the per-frame paired ratios; below 1 is a slowdown).
"""
from __future__ import annotations

import statistics
import time
from typing import Sequence

import torch
from tqdm import tqdm

from rvqspec.core.compiled import CompileConfig
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.export.backends import BACKENDS, ROUND_BACKENDS, make_inner
from rvqspec.export.host import timed_call


class _EagerTimer:
    """Times the eager decoder's calls in place (instance attributes shadow its methods)."""

    def __init__(self, spec: SpeculativeCodePredictor):
        self.times: list[float] = []
        for name in ("prefill", "verify_call"):
            fn = getattr(spec, name)

            def timed(*a, _fn=fn, **k):
                t0 = time.perf_counter()
                out = _fn(*a, **k)
                self.times.append(time.perf_counter() - t0)
                return out

            setattr(spec, name, timed)


def _median_ms(xs) -> float:
    return 1e3 * statistics.median(xs)


def bench_backends(code_predictor, drafter, tree: SparseTree, frames: Sequence[tuple[torch.Tensor, torch.Tensor]],
                   sampling: Sampling = Sampling(), backends: Sequence[str] = ROUND_BACKENDS, modes=("spec", "ar"),
                   warmup: int = 3, seed: int = 0, threads: int | None = 1, progress: bool = True,
                   compile_config: CompileConfig = CompileConfig()) -> dict:
    """frames: (talker_hidden (1, 1, E), c0 (1, 1)) pairs. Returns the JSON-able result (module
    docstring). Compiling / exporting happens before the timed frames (seconds in ``setup_s``)."""
    for b in backends:
        if b not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {b!r}")
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        runners, setup = {}, {}
        for mode in modes:
            for b in backends:
                t0 = time.perf_counter()
                inner = make_inner(b, code_predictor, drafter, tree if mode == "spec" else None, threads=threads or 1,
                                   compile_config=compile_config)
                if inner is None:  # eager AR: the MultiCodeDecoder itself
                    inner = code_predictor
                runners[(mode, b)] = inner
                inner.generate_frame(*frames[0], sampling, torch.Generator().manual_seed(seed))  # compile / warm
                setup[f"{mode}/{b}"] = round(time.perf_counter() - t0, 3)
        timers = {k: _EagerTimer(r) for k, r in runners.items() if isinstance(r, SpeculativeCodePredictor)}
        keys = list(runners)
        t_frame = {k: [] for k in keys}
        t_call = {k: [] for k in keys}
        n_calls = {k: 0 for k in keys}
        agree = {m: 0 for m in modes}
        timed = list(frames[:warmup]) + list(frames)
        for i, (th, c0) in enumerate(tqdm(timed, desc="bench backends", disable=not progress)):
            order = keys[i % len(keys):] + keys[:i % len(keys)]  # rotate who goes first
            codes = {}
            for k in order:
                r = runners[k]
                calls_before = len(r.call.times) if timed_call(r) is not None else len(timers[k].times) if k in timers else 0
                g = torch.Generator().manual_seed(seed + i)
                t0 = time.perf_counter()
                out = r.generate_frame(th, c0, sampling, g)
                dt = time.perf_counter() - t0
                codes[k] = (out[0] if isinstance(out, tuple) else out).tolist()
                if i < warmup:
                    continue
                t_frame[k].append(dt)
                if timed_call(r) is not None:
                    new = r.call.times[calls_before:]
                elif k in timers:
                    new = timers[k].times[calls_before:]
                else:  # eager AR: 15 calls inside generate_frame, not separately timed
                    new = []
                t_call[k].extend(new)
                n_calls[k] += len(new) if new else 15
            if i >= warmup:
                for m in modes:
                    got = [codes[(m, b)] for b in backends]
                    agree[m] += all(c == got[0] for c in got)
        n = len(frames)
        result = {"frames": n, "warmup": warmup, "threads": threads, "sampling": sampling.__dict__,
                  "compile_config": compile_config.__dict__, "modes_run": list(modes),
                  "tree_nodes": len(tree), "drafter": getattr(drafter, "kind", None), "setup_s": setup,
                  "codes_agree_across_backends": {m: f"{agree[m]}/{n}" for m in modes}, "modes": {}}
        for m in modes:
            rows = {}
            base = t_frame[(m, "eager")] if (m, "eager") in t_frame else None
            for b in backends:
                k = (m, b)
                fm = _median_ms(t_frame[k])
                cpf = n_calls[k] / n
                row = {"frame_ms": round(fm, 4), "calls_per_frame": round(cpf, 3),
                       "tokens_per_call": round(15 / cpf, 4)}
                if t_call[k]:
                    cm = _median_ms(t_call[k])
                    row.update(call_ms=round(cm, 4), host_overhead_share=round(1 - cpf * cm / fm, 4))
                if base is not None and b != "eager":
                    ratio = statistics.median(e / f for e, f in zip(base, t_frame[k]))
                    row["speedup_vs_eager"] = round(ratio, 4)
                    row["speedup_vs_eager_label"] = "speedup" if ratio >= 1 else "slowdown"
                rows[b] = row
            result["modes"][m] = rows
        spec = result["modes"].get("spec", {})
        result["targets"] = {f"spec/{b}: host overhead <= 25% of the frame": spec[b].get("host_overhead_share", 1) <= 0.25
                             for b in backends if b != "eager" and b in spec}
        if "compiled" in spec:
            result["targets"]["spec/compiled frame beats spec/eager"] = spec["compiled"].get("speedup_vs_eager", 0) > 1
        return result
    finally:
        torch.set_num_threads(old)
