"""Benchmarks of RVQ position-aware speculation (seed 000 §3.3 Table 2-3, §3.4 Figure 4).

* `bench_acceptance`: per drafter, the calibration acceptance table (free-running), the greedy tree
  for each budget N, and per evaluation language: tokens per call measured by running the decoder,
  the exact replay on free-running frames, the oracle ceiling for the same tree (drafts = the
  verifier's own top-m), plus added parameters (absolute and % of the code predictor).
* `bench_inner_loop`: wall-clock per frame, AR `generate_frame` vs the speculative decoder, the two
  interleaved frame by frame on the same inputs (median over frames; the machine is shared and noisy).
* `bench_full_size`: random-weight full-size code predictor (`CodePredictorConfig.from_name("0.6b")`):
  time of the q = 1 AR step vs the q = N + 1 verify call, verify_overhead(N) = t(N+1)/t(1) - 1,
  projected speedup(N) = tokens_per_call(N) / (1 + overhead(N)) from a mini-world acceptance JSON,
  and the chosen N* (seed 000 §3.4: acceptance is device independent, only the overhead is profiled).
  With `compiled=True` the same q=1 step and q=N+1 verify calls are also timed with the decoder
  stack compiled by Inductor (`rvqspec.core.compiled`: frozen, prepacked weights), whose GEMMs stay
  bandwidth-bound for small q, so the verify overhead is much smaller (`*_compiled` fields).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from rvqspec.core.config import CodePredictorConfig
from rvqspec.core.defaults import BUDGETS, K
from rvqspec.core.drafters import Drafter, PositionOffsets, code_predictor_parameters
from rvqspec.core.model import MultiCodeDecoder, causal_mask, decoder_stack, rms_norm
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.measure.acceptance import (
    acceptance_table,
    measure_tokens_per_call,
    oracle_tokens_per_call,
    replay_tokens_per_call,
)
from rvqspec.measure.extract import ExtractConfig, frames_to_hidden


def _materialize_free_running(cp, utterances, sampling, generator, max_frames=None):
    """Free-running (hidden, codes) batches of a list of utterances, kept in memory (eval sets are small)."""
    out, n = [], 0
    for h, c in frames_to_hidden(cp, utterances, "free_running", ExtractConfig(), sampling, generator):
        if max_frames is not None and n + h.shape[0] > max_frames:
            k = max_frames - n
            h, c = h[:k], c[:k]
        if h.shape[0]:
            out.append((h.float(), c))
        n += h.shape[0]
        if max_frames is not None and n >= max_frames:
            break
    return out


@torch.no_grad()
def bench_acceptance(code_predictor, drafters: dict[str, Drafter], calibration: Iterable,
                     evaluation: dict[str, list], budgets: Sequence[int] = BUDGETS, max_rank: int = 16,
                     sampling: Sampling = Sampling(), seed: int = 0, run_frames: int = 200,
                     replay_frames: int | None = 2000, progress: bool = True) -> dict:
    """calibration: (hidden, codes) batches from free-running extraction (e.g. a `ShardDataset`);
    evaluation: language -> list of utterances (talker_hidden (T, E), codes (T, 16)).
    run_frames: frames per (drafter, N, language) for the decoder run; replay uses up to replay_frames."""
    cp = code_predictor
    g = torch.Generator().manual_seed(seed)
    calib = list(calibration)
    eval_fr = {lang: _materialize_free_running(cp, utts, sampling, g, replay_frames) for lang, utts in evaluation.items()}
    n_cp = code_predictor_parameters(cp)
    result = {"code_predictor_parameters": n_cp, "budgets": list(budgets), "sampling": asdict(sampling),
              "languages": list(evaluation), "drafters": {}}
    oracle_cache: dict = {}
    bar = tqdm(total=len(drafters) * len(budgets) * len(evaluation), desc="bench acceptance", disable=not progress)
    for name, d in drafters.items():
        table = acceptance_table(d, cp, calib, max_rank=max_rank, source="calibration free-running")
        added = d.num_parameters if name != "reused" else 0
        entry = {"kind": d.kind, "added_parameters": added, "added_percent": 100.0 * added / n_cp,
                 "acceptance": table.to_json(), "trees": {}, "expected_length": {}, "by_language": {}}
        for N in budgets:
            tree = SparseTree.grow(table.acc, N, max_depth=d.num_offsets)
            entry["trees"][N] = [list(p) for p in tree.paths]
            entry["expected_length"][N] = round(tree.expected_length(table.acc), 4)
            spec = SpeculativeCodePredictor(cp, d, tree)
            for lang, utts in evaluation.items():
                run = measure_tokens_per_call(spec, [(th, c[:, 0]) for th, c in utts], sampling, g,
                                              max_frames=run_frames)
                rep = replay_tokens_per_call(d, cp, tree, eval_fr[lang])
                key = (tree.paths, lang)
                if key not in oracle_cache:
                    oracle_cache[key] = oracle_tokens_per_call(cp, tree, eval_fr[lang]).tokens_per_call
                row = entry["by_language"].setdefault(lang, {})
                row[N] = {"tokens_per_call": round(run.tokens_per_call, 4), "run_frames": run.frames,
                          "replay_tokens_per_call": round(rep.tokens_per_call, 4), "replay_frames": rep.frames,
                          "oracle_tokens_per_call": round(oracle_cache[key], 4)}
                bar.update(1)
        result["drafters"][name] = entry
    bar.close()
    return result


def _median_ms(xs: list[float]) -> float:
    return 1e3 * statistics.median(xs)


@torch.no_grad()
def bench_inner_loop(code_predictor, spec: SpeculativeCodePredictor, frames: Sequence[tuple[torch.Tensor, torch.Tensor]],
                     sampling: Sampling = Sampling(), seed: int = 0, warmup: int = 5, threads: int | None = 1,
                     progress: bool = True) -> dict:
    """frames: (talker_hidden (1, 1, E), c0 (1, 1)) pairs. AR and speculative run alternately on each
    frame (same inputs, same load); medians over frames."""
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(seed)
    t_ar, t_sp, calls = [], [], 0
    try:
        for th, c0 in list(frames)[:warmup]:
            code_predictor.generate_frame(th, c0, sampling, g)
            spec.generate_frame(th, c0, sampling, g)
        for i, (th, c0) in enumerate(tqdm(frames, desc="bench spec (AR vs speculative)", disable=not progress)):
            order = (0, 1) if i % 2 == 0 else (1, 0)  # alternate who goes first
            for which in order:
                t0 = time.perf_counter()
                if which == 0:
                    code_predictor.generate_frame(th, c0, sampling, g)
                    t_ar.append(time.perf_counter() - t0)
                else:
                    _, st = spec.generate_frame(th, c0, sampling, g)
                    t_sp.append(time.perf_counter() - t0)
                    calls += st.calls
    finally:
        torch.set_num_threads(old)
    ar, sp = _median_ms(t_ar), _median_ms(t_sp)
    return {"frames": len(t_ar), "ar_ms_per_frame": round(ar, 4), "spec_ms_per_frame": round(sp, 4),
            "speedup": round(ar / sp, 4), "tokens_per_call": round(15 * len(t_sp) / max(calls, 1), 4),
            "tree_nodes": len(spec.tree), "drafter": spec.drafter.kind, "threads": threads}


def _random_tree(n: int) -> SparseTree:
    """A depth-3 tree of n nodes with a Medusa-like shape (any tree of n nodes costs the same call)."""
    acc = np.array([[0.6, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.01] + [0.005] * 24] * 3)
    return SparseTree.grow(acc, n, max_depth=K)


@torch.no_grad()
def bench_full_size(tokens_per_call: dict[int, float] | None = None, budgets: Sequence[int] = BUDGETS,
                    name: str = "0.6b", dtype: torch.dtype = torch.float32, repeats: int = 30, warmup: int = 5,
                    threads: int | None = None, seed: int = 0, progress: bool = True, config=None,
                    compiled: bool = False, compile_config=None) -> dict:
    """Time q=1 (an AR step) vs q=N+1 (a verify call) on a random full-size code predictor
    (`config` overrides the preset, for smoke tests; `compile_config` the CompileConfig of the
    compiled calls, default CompileConfig())."""
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg = config or CodePredictorConfig.from_name(name)
    cp = MultiCodeDecoder(cfg).to(dtype).eval()
    cp.set_c0_embedding(torch.nn.Embedding(cfg.vocab_size, cfg.talker_hidden_size).to(dtype))
    m = 5  # a mid-frame round: committed c5 at position 6
    res: dict = {"model": name if config is None else "custom", "dtype": str(dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
                 "repeats": repeats, "rows": {}}
    try:
        # q = 1: the AR step exactly as generate_frame runs it (embedding, stack, norm, one LM head)
        L = cfg.num_code_groups
        cache = cp.new_cache(1, L)
        pos = torch.arange(L).view(1, L)
        cos, sin = cp.rope(pos, dtype)
        mask = causal_mask(pos, L, dtype)
        dims = (cfg.num_key_value_heads, cfg.num_attention_heads // cfg.num_key_value_heads, cfg.head_dim,
                cfg.rms_norm_eps)
        code = torch.tensor([3])
        p = m + 1

        def ar_step():
            x = cp.small_to_mtp_projection(torch.nn.functional.embedding(code, cp.model.codec_embedding[p - 2].weight)
                                           .unsqueeze(1))
            x = decoder_stack(cp.model.layers, x, cos[:, :, p:p + 1], sin[:, :, p:p + 1], cache,
                              torch.tensor([p]), mask[:, :, p:p + 1], *dims)
            return torch.nn.functional.linear(rms_norm(x[:, 0], cp.model.norm.weight, cfg.rms_norm_eps),
                                              cp.lm_head[p - 1].weight)

        def timeit(fn) -> float:
            for _ in range(warmup):
                fn()
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            return statistics.median(ts)

        t1 = timeit(ar_step)
        res["t_q1_ms"] = round(1e3 * t1, 4)
        if compiled:
            from rvqspec.core.compiled import CompileConfig, CompiledCodePredictor

            cc = compile_config or CompileConfig()
            ccp = CompiledCodePredictor(cp, cc)
            x1 = torch.nn.functional.embedding(code, cp.model.codec_embedding[p - 2].weight).unsqueeze(1)  # (1, 1, E)
            t1c = timeit(lambda: ccp.step_logits(x1, p))  # warm-up compiles
            res["t_q1_ms_compiled"] = round(1e3 * t1c, 4)
        drafter = PositionOffsets.zeros(3, cfg.hidden_size, cfg.vocab_size)
        for N in tqdm(budgets, desc="bench full-size verify calls", disable=not progress):
            spec = SpeculativeCodePredictor(cp, drafter, _random_tree(N))
            vcache = cp.new_cache(1, spec._plan(dtype, torch.device("cpu")).max_len)
            tokens = torch.randint(0, cfg.vocab_size, (1, N + 1))
            tN = timeit(lambda: spec.verify_call(vcache, m, tokens))
            over = tN / t1 - 1.0
            row = {"q": N + 1, "t_ms": round(1e3 * tN, 4), "verify_overhead": round(over, 4)}
            if compiled:
                cspec = SpeculativeCodePredictor(cp, drafter, _random_tree(N), compile=cc)
                tNc = timeit(lambda: cspec.verify_call(vcache, m, tokens))
                row.update(t_ms_compiled=round(1e3 * tNc, 4), verify_overhead_compiled=round(tNc / t1c - 1.0, 4))
            if tokens_per_call and N in tokens_per_call:
                row["tokens_per_call"] = tokens_per_call[N]
                row["projected_speedup"] = round(tokens_per_call[N] / (1.0 + over), 4)
                if compiled:
                    row["projected_speedup_compiled"] = round(tokens_per_call[N] / (1.0 + row["verify_overhead_compiled"]), 4)
            res["rows"][N] = row
    finally:
        torch.set_num_threads(old)
    for suffix in ("", "_compiled"):
        proj = {N: r[f"projected_speedup{suffix}"] for N, r in res["rows"].items() if f"projected_speedup{suffix}" in r}
        if proj:
            best = max(proj, key=proj.get)
            res[f"chosen_N{suffix}"] = best
            res[f"chosen_projected_speedup{suffix}"] = proj[best]
    return res


def tokens_per_call_from_acceptance(acceptance: dict, drafter: str, key: str = "tokens_per_call") -> dict[int, float]:
    """Average over languages of a `bench_acceptance` JSON's tokens per call, per budget N."""
    if "drafters" not in acceptance or drafter not in acceptance["drafters"]:
        raise KeyError(f"acceptance JSON has no drafter {drafter!r} (has {sorted(acceptance.get('drafters', {}))})")
    by_lang = acceptance["drafters"][drafter]["by_language"]
    out: dict[int, list[float]] = {}
    for rows in by_lang.values():
        for N, row in rows.items():
            out.setdefault(int(N), []).append(float(row[key]))
    return {N: sum(v) / len(v) for N, v in out.items()}


def frames_for_timing(utterances: Iterable[tuple[torch.Tensor, torch.Tensor]], max_frames: int
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(talker_hidden (1, 1, E), c0 (1, 1)) per frame from utterances (talker_hidden (T, E), codes (T, 16))."""
    out = []
    for th, codes in utterances:
        for t in range(th.shape[0]):
            out.append((th[t].view(1, 1, -1), codes[t, :1].view(1, 1)))
            if len(out) >= max_frames:
                return out
    return out


FramesFn = Callable[..., Iterable[tuple[torch.Tensor, torch.Tensor]]]
