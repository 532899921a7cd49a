"""CUDA-graph capture (`rvqspec.measure.cuda_graphs`). On CPU the captures run eagerly on the same
static buffers, which checks the capture logic: buffer shapes, the pre-allocated cache, outputs
equal to the eager model, Gumbel-max sampling exact in distribution. The CUDA tests skip without a
GPU (scripts/gpu_check.sh runs them on one)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from _tiny_cp import tiny_code_predictor
from rvqspec.core.config import TalkerConfig
from rvqspec.core.model import CodeDecoder, causal_mask
from rvqspec.core.sampling import Sampling, probs
from rvqspec.core.tree import SparseTree
from rvqspec.measure.cuda_graphs import (bench_cuda_graphs, capture_ar_frame, capture_spec_round,
                                         capture_talker_step, gumbel_noise, gumbel_sample, step_mask)

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (torch.cuda.is_available() is False)")
TREE = SparseTree([(0,), (1,), (0, 0), (0, 0, 0)])


def tiny_talker(device="cpu"):
    torch.manual_seed(1)
    cfg = TalkerConfig(vocab_size=30, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=12, mrope_section=(2, 2, 2), text_vocab_size=20,
                       text_hidden_size=16)
    return CodeDecoder(cfg).eval().to(device)


def tiny_cp(device="cpu"):
    cp = tiny_code_predictor(vocab=16, hidden=32, layers=2, talker_hidden=48)
    return cp.eval().to(device)


def test_gumbel_sample_is_exact_in_distribution():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 16, generator=g) * 2
    s = Sampling(True, top_k=6, top_p=1.0, temperature=0.9)
    n = 20_000
    noise = gumbel_noise((n, 16), g)
    p = probs(logits, s)[0].double().numpy()
    def p_value(codes):
        counts = np.bincount(codes.numpy(), minlength=16)
        keep = p > 0
        return stats.chisquare(counts[keep], n * p[keep] / p[keep].sum()).pvalue, counts[~keep].sum()
    pv, outside = p_value(gumbel_sample(logits.expand(n, 16), s, noise))
    assert pv > 1e-6 and outside == 0
    # negative control: the noise added without temperature warping follows another law
    wrong = Sampling(True, top_k=6, top_p=1.0, temperature=2.0)
    pv_bad, _ = p_value(gumbel_sample(logits.expand(n, 16), wrong, noise))
    assert pv_bad < 1e-6
    assert torch.equal(gumbel_sample(logits, Sampling.greedy(), noise[:1]), logits.argmax(-1))


def test_ar_frame_capture_matches_generate_frame_greedy_and_has_static_shapes():
    cp = tiny_cp()
    g = capture_ar_frame(cp, Sampling.greedy())
    assert not g.captured
    assert {k: tuple(v.shape) for k, v in g.inputs.items()} == {"talker_hidden": (1, 1, 48), "c0": (1, 1),
                                                                 "noise": (15, 16)}
    assert tuple(g.cache.k.shape) == (2, 1, cp.config.num_key_value_heads, 16, cp.config.head_dim)
    gen = torch.Generator().manual_seed(3)
    for c0 in (0, 5, 11):
        h = torch.randn(1, 1, 48, generator=gen)
        want = cp.generate_frame(h, torch.tensor([[c0]]), sampling=Sampling.greedy())
        got = g(talker_hidden=h, c0=torch.tensor([[c0]]), noise=gumbel_noise((15, 16), gen))
        assert got.shape == (1, 15) and torch.equal(got, want)


def test_ar_frame_capture_sampled_is_a_pure_function_of_its_noise():
    cp = tiny_cp()
    g = capture_ar_frame(cp, Sampling())
    gen = torch.Generator().manual_seed(4)
    h, noise = torch.randn(1, 1, 48, generator=gen), gumbel_noise((15, 16), gen)
    a = g(talker_hidden=h, c0=torch.tensor([[2]]), noise=noise).clone()
    b = g(talker_hidden=h, c0=torch.tensor([[2]]), noise=noise).clone()
    c = g(talker_hidden=h, c0=torch.tensor([[2]]), noise=gumbel_noise((15, 16), gen)).clone()
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_talker_step_capture_equals_eager():
    talker = tiny_talker()
    L = 8
    g = capture_talker_step(talker, L)
    cache = talker.new_cache(1, L)
    pos = torch.arange(L).view(1, L)
    mask = causal_mask(pos, L)
    gen = torch.Generator().manual_seed(5)
    for p in range(3):
        x = torch.randn(1, 1, 48, generator=gen)
        with torch.inference_mode():
            want_h, want_l = talker(x, pos[:, p:p + 1], cache, pos[0, p:p + 1], mask[:, :, p:p + 1])
        got_h, got_l = g(x=x, position=pos[:, p:p + 1], slot=pos[0, p:p + 1], mask=step_mask(p, L))
        torch.testing.assert_close(got_h, want_h)
        assert got_l.shape == (1, 1, 30)
    with pytest.raises(ValueError, match="mask"):
        g(mask=torch.zeros(1, 1, 1, L + 1))
    with pytest.raises(KeyError):
        g(nope=torch.zeros(1))


def test_spec_round_capture_shapes_follow_the_export_spec():
    cp = tiny_cp()
    g = capture_spec_round(cp, TREE)
    out = g()
    spec = g.spec
    assert spec.q == len(TREE) + 1
    assert {n: tuple(t.shape) for n, t in zip(spec.inputs, g.inputs.values())} == {n: s for n, (s, _) in spec.inputs.items()}
    assert [tuple(o.shape) for o in out] == [s for s, _ in spec.outputs.values()]


def test_bench_cuda_graphs_projection_on_cpu():
    torch.set_num_threads(1)
    res = bench_cuda_graphs(tiny_talker(), tiny_cp(), budgets=(4,), tokens_per_call={"seed": 2.5}, calls=3, warmup=1,
                            max_len=16)
    ms = res["ms"]
    assert set(ms) == {"talker_step", "ar_frame", "round_q1", "round_q5"} and res["captured"] is False
    row = res["spec"]["seed, N=4"]
    assert row["frame_ms"] == pytest.approx(ms["round_q1"] + 5 * ms["round_q5"], abs=1e-3)
    assert res["verify_over_step"][4] == pytest.approx(ms["round_q5"] / ms["round_q1"], rel=1e-2, abs=1e-3)


@needs_cuda
def test_cuda_ar_frame_replay_equals_eager():
    cp = tiny_cp("cuda")
    g = capture_ar_frame(cp, Sampling())
    assert g.captured
    gen = torch.Generator().manual_seed(6)
    for c0 in (1, 7):
        h, noise = torch.randn(1, 1, 48, generator=gen).cuda(), gumbel_noise((15, 16), gen).cuda()
        got = g(talker_hidden=h, c0=torch.tensor([[c0]], device="cuda"), noise=noise).clone()
        eager = capture_ar_frame(cp.cpu(), Sampling())  # the same recipe, eagerly on CPU
        want = eager(talker_hidden=h.cpu(), c0=torch.tensor([[c0]]), noise=noise.cpu())
        cp.cuda()
        assert torch.equal(got.cpu(), want)


@needs_cuda
def test_cuda_talker_step_and_round_capture():
    talker = tiny_talker("cuda")
    g = capture_talker_step(talker, 8)
    x = torch.randn(1, 1, 48, device="cuda")
    h, _ = g(x=x, position=torch.zeros(1, 1, dtype=torch.long, device="cuda"),
             slot=torch.zeros(1, dtype=torch.long, device="cuda"), mask=step_mask(0, 8).cuda())
    assert g.captured and h.shape == (1, 1, 48) and torch.isfinite(h).all()
    r = capture_spec_round(tiny_cp("cuda"), TREE)
    assert r.captured and all(torch.isfinite(o).all() for o in r() if o.is_floating_point())


def test_bench_cuda_graphs_cli_bad_input_is_one_line():
    from typer.testing import CliRunner

    from rvqspec.cli import app

    cases = [(["--dtype", "fp16", "--device", "cpu"], "--dtype"), (["--device", "tpu"], "--device"),
             (["--model", "9b", "--device", "cpu"], "--model")]
    if not CUDA:
        cases.append(([], "torch.cuda.is_available() is False"))
    for args, word in cases:
        r = CliRunner().invoke(app, ["bench", "cuda-graphs", *args])
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and word in lines[0], (args, r.output)
