"""The talker step as one graph call (`rvqspec.export.talker`): equal to the eager talker step by
step (torch and onnxruntime), the frame loop's codes unchanged with it, its errors, and `bench
stream --backend onnx` on the committed mini world (counts, not timings)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.core.config import TalkerConfig
from rvqspec.core.frame_loop import iter_frames
from rvqspec.core.model import CodeDecoder, causal_mask
from rvqspec.core.sampling import Sampling
from rvqspec.export.host import module_call
from rvqspec.export.talker import TalkerStepGraph, TalkerSteps, make_talker_steps
from rvqspec.export.wrappers import ExportError
from rvqspec.mini.bench_stream import FRAME_RATE
from rvqspec.mini.pipeline import MiniTTS

TOL = 1e-4  # fp32 graph against the eager module: different op order, same arithmetic
runner = CliRunner()


def tiny_talker(seed: int = 0) -> CodeDecoder:
    torch.manual_seed(seed)
    cfg = TalkerConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, text_vocab_size=50,
                       text_hidden_size=16)
    return CodeDecoder(cfg).eval()


def eager_steps(talker: CodeDecoder, xs: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The eager talker over xs (T, 1, 1, E), one q = 1 step per position."""
    T = xs.shape[0]
    cache = talker.new_cache(1, T)
    pos = torch.arange(T).view(1, T)
    mask = causal_mask(pos, T, torch.float32)
    with torch.inference_mode():
        return [talker(xs[p], pos[:, p:p + 1], cache, pos[0, p:p + 1], mask[:, :, p:p + 1]) for p in range(T)]


def max_diff(steps: TalkerSteps, xs: torch.Tensor, ref) -> float:
    steps.start(xs.shape[0])
    d = 0.0
    for p in range(xs.shape[0]):
        h, logits = steps.step(xs[p])
        assert h.shape == ref[p][0].shape and logits.shape == ref[p][1].shape
        d = max(d, (h - ref[p][0]).abs().max().item(), (logits - ref[p][1]).abs().max().item())
    return d


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_talker_graph_equals_the_eager_talker_step_by_step(backend, tmp_path):
    talker = tiny_talker()
    xs = torch.randn(12, 1, 1, talker.config.hidden_size, generator=torch.Generator().manual_seed(1))
    ref = eager_steps(talker, xs)
    steps = (TalkerSteps(talker, module_call(TalkerStepGraph(talker).eval()), "torch") if backend == "torch"
             else make_talker_steps("onnx", talker, workdir=tmp_path))
    assert max_diff(steps, xs, ref) < TOL
    assert len(steps.call.times) == 12  # one graph call per step, each timed


def test_talker_graph_negative_control_a_cache_that_never_advances_differs():
    """The same graph fed a cache that forgets every step (the host bug this protocol must avoid)
    must not pass the tolerance: the check above can fail."""
    talker = tiny_talker()
    xs = torch.randn(6, 1, 1, talker.config.hidden_size, generator=torch.Generator().manual_seed(2))
    ref = eager_steps(talker, xs)

    class Forgetful(TalkerSteps):
        def _one(self, x):
            out = super()._one(x)
            self.k[:] = 0.0
            self.v[:] = 0.0
            self.kpm[:] = -1e4
            return out

    steps = Forgetful(talker, module_call(TalkerStepGraph(talker).eval()), "torch")
    assert max_diff(steps, xs, ref) > 100 * TOL


def test_talker_steps_errors(tmp_path):
    talker = tiny_talker()
    steps = TalkerSteps(talker, module_call(TalkerStepGraph(talker).eval()), "torch")
    x = torch.zeros(1, 1, talker.config.hidden_size)
    with pytest.raises(RuntimeError, match="start"):
        steps.step(x)
    steps.start(1)
    steps.step(x)
    with pytest.raises(ValueError, match="full"):
        steps.step(x)
    with pytest.raises(ValueError, match=">= 1"):
        steps.start(0)
    with pytest.raises(ExportError, match="backend"):
        make_talker_steps("tpu", talker)
    assert make_talker_steps("eager", talker) is None


@pytest.fixture(scope="module")
def mini():
    return MiniTTS.load()


def test_frame_loop_with_the_onnx_talker_gives_the_eager_codes(mini, tmp_path):
    """Greedy decoding: the frame loop's codes with the talker as an onnxruntime graph are the eager
    loop's (argmax is exact unless two logits lie within float rounding, which these texts avoid)."""
    steps = make_talker_steps("onnx", mini.talker, workdir=tmp_path)
    for text in ("Hello there.", "Where is the nearest train station?"):
        ids = mini.text_ids(text, "en")
        args = (mini.talker, mini.code_predictor, ids, mini.codebook_size, Sampling.greedy())
        eager = [f for _, f in iter_frames(*args)]
        graph = [f for _, f in iter_frames(*args, talker_steps=steps)]
        assert len(eager) == len(graph) == ids.numel()
        assert all(torch.equal(a, b) for a, b in zip(eager, graph))


def test_bench_stream_onnx_backend_counts_sequential_calls(tmp_path):
    out = tmp_path / "stream.json"
    r = runner.invoke(app, ["bench", "stream", "--backend", "onnx", "--drafter",
                            "data/mini/drafters/shared_low_rank.safetensors", "--tree",
                            "data/mini/trees/shared_low_rank_n4.json", "--threads", "1", "--repeats", "1",
                            "--sentences", "1", "--threaded", "--no-full-size", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["backend"] == "onnx" and res["config"]["backend"] == "onnx"
    for mode in ("ar", "spec"):
        frames, audio = res[mode]["frames"], res[mode]["audio_s"]
        # one talker graph call per frame plus one per text-lead token (the prefix runs token by token)
        assert res[mode]["talker_calls_per_audio_s"] == pytest.approx((frames + 2) / audio, abs=0.01)
        assert res[mode]["predictor_calls"] == res[mode]["predictor_calls_reported"]
        assert np.isfinite(res[mode]["host_ms_per_frame"])
    # the whole AR frame is one graph call holding the 15 sequential passes the seed's budget counts
    assert res["ar"]["predictor_calls_per_audio_s"] == pytest.approx(15 * FRAME_RATE)
    n = res["ar"]["frames"]
    assert res["ar"]["graph_calls_per_frame"] == pytest.approx(1 + (n + 2) / n, abs=1e-3)
    assert res["spec"]["predictor_calls_per_audio_s"] < 15 * FRAME_RATE
    assert res["spec"]["tokens_per_call"] > 1.0 and res["ar"]["tokens_per_call"] == 1.0
    assert res["spec_over_ar_label"] in ("speedup", "slowdown")


def test_bench_stream_backend_errors_are_one_line():
    for args, word in [(["--backend", "tpu"], "--backend"),
                       (["--backend", "onnx", "--graph-threads", "0"], "--graph-threads")]:
        r = runner.invoke(app, ["bench", "stream", "--no-full-size", *args])
        assert r.exit_code == 2, (args, r.output)
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and word in lines[0], r.output


def test_synthesize_stream_on_the_onnx_loop_backend_writes_the_whole_file(tmp_path):
    out = tmp_path / "s.wav"
    r = runner.invoke(app, ["synthesize", "Hello there.", "--stream", "--backend", "onnx-loop", "--drafter",
                            "data/mini/drafters/shared_low_rank.safetensors", "--tree",
                            "data/mini/trees/shared_low_rank_n4.json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output.strip().splitlines()[-1])
    assert info["tokens_per_call"] > 1.0 and out.stat().st_size > 44 + 2 * 1280 * (info["frames"] - 1)
    assert not (tmp_path / "s.wav.partial").exists()
