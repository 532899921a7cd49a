"""CompiledCodePredictor (Inductor, frozen weights) computes what the eager AR loop computes."""
from __future__ import annotations

import copy

import pytest
import torch

from rvqspec.core.compiled import CompileConfig, CompiledCodePredictor
from rvqspec.core.model import causal_mask
from rvqspec.core.sampling import Sampling

from _tiny_cp import tiny_code_predictor

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _eager_step_logits(cp, x_prefill, x_steps):
    """Eager reference: prefill (B, 2, E) then q=1 steps; logits (B, V) of every head, in order."""
    B, n = x_prefill.shape[0], cp.config.num_code_groups
    cache = cp.new_cache(B, n)
    pos = torch.arange(n)
    mask = causal_mask(pos[None], n)  # (1, 1, n, n)
    out = []
    with torch.inference_mode():
        _, lg = cp(x_prefill, pos[None, :2].expand(B, -1), cache, pos[:2], mask[:, :, :2], heads=[0, 0])
        out.append(lg[:, -1])
        for p in range(2, n):
            _, lg = cp(x_steps[p - 2], pos[None, p:p + 1].expand(B, -1), cache, pos[p:p + 1],
                       mask[:, :, p:p + 1], heads=p - 1)
            out.append(lg[:, 0])
    return out


def _compiled_step_logits(comp, x_prefill, x_steps):
    cp = comp.code_predictor
    out = []
    with torch.inference_mode():
        # the prefill as the frame runs it, then the public single-step unit
        st = comp._buffers(x_prefill.shape[0], torch.float32, torch.device("cpu"))
        h = comp._backbone(x_prefill, *st["prefill"], st["cache"].k, st["cache"].v)[:, -1]
        out.append(torch.nn.functional.linear(h, cp.lm_head[0].weight))
        for p in range(2, cp.config.num_code_groups):
            out.append(comp.step_logits(x_steps[p - 2], p))
    return out


# One batch size for every test of the `tiny` predictor: Inductor compiles one prefill and one step
# graph per (batch, dtype), with max_autotune (the default config) tens of seconds each, so the
# tests share those two graphs instead of compiling them again for another batch.
B = 3


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    cp = tiny_code_predictor(vocab=16, hidden=32, layers=2, talker_hidden=40, seed=3)  # with projection
    return cp, CompiledCodePredictor(cp, CompileConfig())


def test_compiled_logits_match_eager_and_a_perturbed_weight_does_not(tiny) -> None:
    cp, comp = tiny
    g = torch.Generator().manual_seed(0)
    E = cp.config.talker_hidden_size
    xp = torch.randn(B, 2, E, generator=g)
    xs = [torch.randn(B, 1, E, generator=g) for _ in range(cp.config.num_code_groups - 2)]
    ref = _eager_step_logits(cp, xp, xs)
    got = _compiled_step_logits(comp, xp, xs)
    err = max((a - b).abs().max().item() for a, b in zip(ref, got))
    assert err < 1e-4, err
    # negative control: the same comparison against a predictor with one weight nudged by 1e-2
    bad = copy.deepcopy(cp)
    with torch.no_grad():
        bad.model.layers[1].mlp.down_proj.weight[0, 0] += 1e-2
    bad.set_c0_embedding(cp.c0_embedding)
    got_bad = _compiled_step_logits(CompiledCodePredictor(bad, CompileConfig(max_autotune=False)), xp, xs)
    assert max((a - b).abs().max().item() for a, b in zip(ref, got_bad)) > 1e-4


def test_compiled_frames_equal_eager_frames(tiny) -> None:
    cp, comp = tiny
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        th = torch.randn(B, 1, cp.config.talker_hidden_size, generator=g)
        c0 = torch.randint(0, 16, (B, 1), generator=g)
        assert torch.equal(comp.generate_frame(th, c0, Sampling.greedy()), cp.generate_frame(th, c0, Sampling.greedy()))
        # sampled with the same generator state: the same draws on (nearly) the same probabilities
        s = Sampling(top_k=8, temperature=0.9)
        a = comp.generate_frame(th, c0, s, torch.Generator().manual_seed(7))
        b = cp.generate_frame(th, c0, s, torch.Generator().manual_seed(7))
        assert a.shape == (B, 15) and torch.equal(a, b)


def test_bench_ar_reports_the_compiled_path() -> None:
    from rvqspec.real.bench_ar import BenchARConfig, run_bench_ar
    from rvqspec.core.config import CodePredictorConfig

    cfg = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=32)
    bc = BenchARConfig(calls=2, frames=2, warmup=1, bandwidth_mib=8, c0_vocab=32, threads=1,
                       dtypes=("float32",), official=True, compiled=True,
                       compiled_autotune=False)  # the report's plumbing; autotuned kernels: `tiny` above
    r = run_bench_ar(bc, cfg=cfg, progress=False)["dtypes"]["float32"]
    for k in ("compile_s", "compiled_frame_ms", "compiled_step_ms", "compiled_step_over_floor",
              "compiled_speedup_frame_vs_official", "compiled_speedup_vs_eager_paired"):
        assert r[k] > 0, k
    assert r["compiled_frame_per_call_ms"] == pytest.approx(r["compiled_frame_ms"] / 15)


def test_compiled_speculative_verify_matches_eager() -> None:
    """The speculative decoder with a compiled verify call: same verifier logits as eager, and
    greedy frames identical to AR (the greedy lossless property)."""
    from rvqspec.core.drafters import PositionOffsets
    from rvqspec.core.speculative import SpeculativeCodePredictor
    from rvqspec.core.tree import SparseTree

    torch.set_num_threads(1)
    cp = tiny_code_predictor(vocab=16, hidden=32, layers=2, talker_hidden=40, seed=5)
    drafter = PositionOffsets.zeros(3, cp.config.hidden_size, cp.config.vocab_size)
    tree = SparseTree([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])
    eager = SpeculativeCodePredictor(cp, drafter, tree)
    comp = SpeculativeCodePredictor(cp, drafter, tree, compile=CompileConfig(max_autotune=False))
    plan = eager._plan(torch.float32, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for m in (1, 7, 13):
            ca, cb = cp.new_cache(1, plan.max_len), cp.new_cache(1, plan.max_len)
            tokens = torch.randint(0, 16, (1, len(tree) + 1), generator=g)
            ha, la = eager.verify_call(ca, m, tokens)
            hb, lb = comp.verify_call(cb, m, tokens)
            assert (la - lb).abs().max().item() < 1e-4 and (ca.k - cb.k).abs().max().item() < 1e-4
    for _ in range(3):
        th = torch.randn(1, 1, 40, generator=g)
        c0 = torch.randint(0, 16, (1, 1), generator=g)
        codes, _ = comp.generate_frame(th, c0, Sampling.greedy())
        assert torch.equal(codes, cp.generate_frame(th, c0, Sampling.greedy()))


def test_bench_full_size_reports_compiled_verify_overheads() -> None:
    from rvqspec.measure.bench_spec import bench_full_size
    from rvqspec.core.config import CodePredictorConfig

    small = CodePredictorConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, talker_hidden_size=64)
    f = bench_full_size({4: 2.0}, budgets=(4,), repeats=3, warmup=1, progress=False, config=small, compiled=True,
                        compile_config=CompileConfig(max_autotune=False))  # the report, not the kernels
    row = f["rows"][4]
    assert f["t_q1_ms_compiled"] > 0 and row["t_ms_compiled"] > 0
    assert row["projected_speedup_compiled"] == pytest.approx(2.0 / (1 + row["verify_overhead_compiled"]), rel=1e-3)
    assert f["chosen_N_compiled"] == 4
