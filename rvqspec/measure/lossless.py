"""Distributional losslessness of the speculative decoder, checked on a trained model.

Seed 000 §3.3 supports the lossless claim with WER parity; the unit tests (tests/test_verify_stats.py,
tests/test_spec_decoder.py) prove the acceptance rule on tiny random models by exact enumeration.
This module runs the same kind of test on the deployed path of a real-sized vocabulary: the trained
drafter's own drafts, the fused tree call, cache compaction across rounds, the deployed sampling.

For a fixed frame context (talker hidden state, c0) it draws many frames with the speculative
decoder and compares them with
* the exact AR law, by enumeration over the sampling support: the joint of (c1, c2) and the
  marginal of c3 (first and second rounds, drafts taken and rejected);
* AR frames drawn independently (batched `generate_frame`): the marginal of every code c1..c15 by a
  two-sample chi-square (later rounds, after compaction, where enumeration is out of reach).

Every test pools cells whose expected count is under 5 into one cell. A context passes when every
p-value is at least `alpha / tests` (Bonferroni; alpha = 1e-6 as in the unit tests) and no sampled
cell has exact probability 0. Negative controls (`SpeculativeCodePredictor(..., rule="walk",
_control=...)`: always accept, or resample from the full p after a rejection) must fail the same
test, so that a pass means something.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats
from tqdm import tqdm

from rvqspec.core.frame_loop import teacher_forced_inner
from rvqspec.core.sampling import Sampling, probs
from rvqspec.core.speculative import SpecStats


@dataclass(frozen=True)
class LosslessConfig:
    """Sizes and thresholds of one lossless check (defaults: the benchmark's)."""

    frames: int = 20000        # speculative frames per context (AR reference: the same number)
    alpha: float = 1e-6        # family-wise threshold per context, split over its tests (Bonferroni)
    min_expected: float = 5.0  # cells expected under this count are pooled into one
    ar_batch: int = 500        # AR reference frames drawn per batched generate_frame call
    seed: int = 0


def pooled_chisquare(observed: np.ndarray, expected_p: np.ndarray, min_expected: float = 5.0
                     ) -> tuple[float, int, int]:
    """Goodness of fit of counts (C,) to probabilities (C,) -> (p-value, impossible, dof).

    Cells with expected count < min_expected (and p > 0) are pooled into one cell; `impossible` is
    the number of observations in cells of probability exactly 0 (a lossless sampler never makes
    one, whatever the p-value)."""
    observed = np.asarray(observed, dtype=np.float64).reshape(-1)
    expected_p = np.asarray(expected_p, dtype=np.float64).reshape(-1)
    if observed.shape != expected_p.shape:
        raise ValueError(f"observed {observed.shape} and expected {expected_p.shape} differ in shape")
    n = observed.sum()
    exp = expected_p / expected_p.sum() * n
    impossible = int(observed[expected_p == 0].sum())
    big = exp >= min_expected
    small = ~big & (expected_p > 0)
    o = np.append(observed[big], observed[small].sum())
    e = np.append(exp[big], exp[small].sum())
    keep = e > 0
    o, e = o[keep], e[keep]
    if n > 0 and o.sum() == 0:  # every observation fell where the law has probability 0
        return 0.0, impossible, max(len(o) - 1, 0)
    if len(o) < 2:
        return 1.0, impossible, 0
    return float(stats.chisquare(o, e * o.sum() / e.sum()).pvalue), impossible, len(o) - 1


def two_sample_chisquare(a: np.ndarray, b: np.ndarray, min_expected: float = 5.0) -> tuple[float, int]:
    """Homogeneity of two count vectors (C,) (same categories) -> (p-value, dof); categories whose
    pooled expected count is under min_expected in either sample are merged into one."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"count vectors differ in shape: {a.shape} vs {b.shape}")
    tot = a + b
    ea = tot * a.sum() / tot.sum().clip(min=1)
    eb = tot - ea
    big = (ea >= min_expected) & (eb >= min_expected)
    rest = ~big & (tot > 0)
    ta = np.append(a[big], a[rest].sum())
    tb = np.append(b[big], b[rest].sum())
    keep = (ta + tb) > 0
    table = np.stack([ta[keep], tb[keep]])  # (2, C')
    if table.shape[1] < 2:
        return 1.0, 0
    chi2, p, dof, _ = stats.chi2_contingency(table, correction=False)
    return float(p), int(dof)


@torch.no_grad()
def _prefix_probs(cp, talker_hidden: torch.Tensor, c0: torch.Tensor, prefixes: torch.Tensor,
                  sampling: Sampling) -> torch.Tensor:
    """Deployed distribution of c_{g+1} after each prefix c1..c_g: prefixes (P, g) long ->
    p (P, V) float64, one teacher-forced inner loop for all P prefixes at once (codes after the
    prefix are zeros: the causal mask keeps them out of h_{g+1})."""
    P, g = prefixes.shape
    codes = torch.zeros(P, cp.config.num_code_groups, dtype=torch.long)  # (P, 16)
    codes[:, 0] = c0.view(())
    codes[:, 1:g + 1] = prefixes
    hidden = teacher_forced_inner(cp, talker_hidden.view(1, -1).expand(P, -1), codes)  # (P, 15, H) h_1..h_15
    logits = F.linear(hidden[:, g], cp.lm_head[g].weight)  # (P, V): h_{g+1} through head g emits c_{g+1}
    return probs(logits, sampling).double()


@torch.no_grad()
def exact_prefix_law(cp, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Exact AR law of the first codes for one context: (joint of (c1, c2) (V, V), marginal of c3 (V,)),
    by enumerating the support of the deployed sampling (top-k keeps it small)."""
    V = cp.config.vocab_size
    p1 = _prefix_probs(cp, talker_hidden, c0, torch.zeros(1, 0, dtype=torch.long), sampling)[0]  # (V,)
    s1 = p1.nonzero().flatten()  # (S1,) support of c1
    p2 = _prefix_probs(cp, talker_hidden, c0, s1.view(-1, 1), sampling)  # (S1, V)
    joint = torch.zeros(V, V, dtype=torch.float64)
    joint[s1] = p1[s1, None] * p2
    pairs = joint.nonzero()  # (S2, 2) support of (c1, c2)
    p3 = torch.zeros(V, dtype=torch.float64)
    for chunk in pairs.split(4096):  # (<= 4096, 2) prefixes per pass
        p3 += (joint[chunk[:, 0], chunk[:, 1], None] * _prefix_probs(cp, talker_hidden, c0, chunk, sampling)).sum(0)
    return joint.numpy(), p3.numpy()


def _draw_spec(spec, talker_hidden, c0, sampling, n, generator, progress, desc):
    out = torch.empty(n, 15, dtype=torch.long)  # (n, 15) c1..c15
    total = SpecStats()
    for i in tqdm(range(n), desc=desc, disable=not progress, leave=False):
        codes, st = spec.generate_frame(talker_hidden, c0, sampling, generator)
        out[i] = codes[0]
        total.merge(st)
    return out, total


def _draw_ar(cp, talker_hidden, c0, sampling, n, generator, batch):
    chunks = []
    left = n
    while left > 0:
        b = min(batch, left)
        chunks.append(cp.generate_frame(talker_hidden.expand(b, 1, -1), c0.expand(b, 1), sampling, generator))
        left -= b
    return torch.cat(chunks)  # (n, 15)


def check_context(cp, spec, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = Sampling(),
                  config: LosslessConfig = LosslessConfig(), progress: bool = True, desc: str = "spec frames",
                  reference: torch.Tensor | None = None,
                  law: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """One context: talker_hidden (1, 1, E), c0 (1, 1). Draws config.frames speculative frames (and as
    many AR frames unless `reference` (n, 15) is given) -> p-values, impossible counts, verdict.
    `law`: the context's `exact_prefix_law`, when the caller already has it."""
    if talker_hidden.dim() != 3 or talker_hidden.shape[:2] != (1, 1):
        raise ValueError(f"talker_hidden must be (1, 1, E), got {tuple(talker_hidden.shape)}")
    if c0.shape != (1, 1):
        raise ValueError(f"c0 must be (1, 1), got {tuple(c0.shape)}")
    V = cp.config.vocab_size
    g = torch.Generator().manual_seed(config.seed)
    joint, p3 = law if law is not None else exact_prefix_law(cp, talker_hidden, c0, sampling)
    codes, st = _draw_spec(spec, talker_hidden, c0, sampling, config.frames, g, progress, desc)
    if reference is None:
        reference = _draw_ar(cp, talker_hidden, c0, sampling, config.frames, g, config.ar_batch)
    c = codes.numpy()
    r = reference.numpy()
    tests = {}
    p, imp, dof = pooled_chisquare(np.bincount(c[:, 0] * V + c[:, 1], minlength=V * V), joint, config.min_expected)
    tests["exact_c1_c2"] = {"p": p, "impossible": imp, "dof": dof}
    p, imp, dof = pooled_chisquare(np.bincount(c[:, 2], minlength=V), p3, config.min_expected)
    tests["exact_c3"] = {"p": p, "impossible": imp, "dof": dof}
    for k in range(15):
        p, dof = two_sample_chisquare(np.bincount(c[:, k], minlength=V), np.bincount(r[:, k], minlength=V),
                                      config.min_expected)
        tests[f"vs_ar_c{k + 1}"] = {"p": p, "dof": dof}
    threshold = config.alpha / len(tests)
    min_p = min(t["p"] for t in tests.values())
    impossible = sum(t.get("impossible", 0) for t in tests.values())
    return {"frames": config.frames,
            "accepted_per_frame": round(sum(st.accepted_lengths) / max(config.frames, 1), 4),
            "tokens_per_call": round(st.tokens_per_call, 4),
            "threshold": threshold, "min_p": min_p, "impossible": impossible,
            "passed": bool(min_p >= threshold and impossible == 0), "tests": tests}


def lossless_report(cp, spec, contexts: list[tuple[torch.Tensor, torch.Tensor]], sampling: Sampling = Sampling(),
                    config: LosslessConfig = LosslessConfig(), controls: dict | None = None,
                    control_frames: int | dict[str, int] | None = None, progress: bool = True) -> dict:
    """`check_context` on each context; `controls`: name -> a deliberately wrong decoder run on the
    same contexts (against the same AR reference), each expected to fail. `control_frames`: frames
    per control (one number, or per control name; default config.frames)."""
    result = {"config": asdict(config), "sampling": asdict(sampling), "contexts": []}
    for i, (th, c0) in enumerate(contexts):
        g = torch.Generator().manual_seed(config.seed + 1000 + i)
        ref = _draw_ar(cp, th, c0, sampling, config.frames, g, config.ar_batch)
        law = exact_prefix_law(cp, th, c0, sampling)  # shared by the decoder and every control
        entry = {"c0": int(c0), "decoder": check_context(cp, spec, th, c0, sampling, config, progress,
                                                         f"context {i}: spec", reference=ref, law=law)}
        for name, bad in (controls or {}).items():
            n = (control_frames.get(name) if isinstance(control_frames, dict) else control_frames) or config.frames
            entry[f"control_{name}"] = check_context(cp, bad, th, c0, sampling, replace(config, frames=n), progress,
                                                     f"context {i}: control {name}", reference=ref[:n], law=law)
        result["contexts"].append(entry)
    result["all_passed"] = all(e["decoder"]["passed"] for e in result["contexts"])
    result["controls_all_failed"] = all(not v["passed"] for e in result["contexts"]
                                        for k, v in e.items() if k.startswith("control_"))
    return result
