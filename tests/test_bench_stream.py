"""`rvqspec bench stream` and `rvqspec synthesize --stream` on the committed mini world, and the
full-size projection's arithmetic on a tiny configuration (no timing is asserted)."""
from __future__ import annotations

import json

import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.core.config import CodePredictorConfig, TalkerConfig
from rvqspec.mini.bench_stream import FRAME_RATE, full_size_projection

runner = CliRunner()
KEYS = ("ttfa_ms_p50", "ttfa_ms_p95", "rtf", "talker_calls_per_audio_s", "predictor_calls_per_audio_s",
        "host_ms_per_frame")


def test_bench_stream_json_counts_calls(tmp_path):
    out = tmp_path / "stream.json"
    r = runner.invoke(app, ["bench", "stream", "--threads", "1", "--repeats", "1", "--sentences", "1",
                            "--no-full-size", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    for mode in ("ar", "spec"):
        assert all(isinstance(res[mode][k], float) for k in KEYS), res[mode]
        assert res[mode]["streams"] == 1
        # one talker pass per frame plus the text-lead prefix pass
        frames, audio = res[mode]["frames"], res[mode]["audio_s"]
        assert audio == pytest.approx(frames / FRAME_RATE)
        assert res[mode]["talker_calls_per_audio_s"] == pytest.approx((frames + 1) / audio, abs=0.01)
        # calls counted at the decoder stack = calls the decoder reports (prefill + rounds, or 15 per frame)
        assert res[mode]["predictor_calls"] == res[mode]["predictor_calls_reported"]
    assert res["ar"]["predictor_calls_per_audio_s"] == pytest.approx(15 * FRAME_RATE)  # the seed's 187.5
    assert res["spec"]["predictor_calls_per_audio_s"] < 15 * FRAME_RATE  # some drafts were accepted
    assert res["spec"]["tokens_per_call"] > 1.0 and res["ar"]["tokens_per_call"] == 1.0
    tl = res["timeline"]["ar"]
    assert tl[0]["start_s"] == 0 and all(b["ready_s"] >= a["ready_s"] for a, b in zip(tl, tl[1:]))
    assert res["config"]["tree"].endswith(".json") and res["seed_calls_per_audio_s"] == {"ar": 200.0, "spec": 88.0}


def test_bench_stream_bad_input_is_one_line():
    for args, word in [(["--budget", "5"], "offsets_n5.json"), (["--sentences", "9"], "--sentences"),
                       (["--threads", "0"], "--threads"), (["--tree", "/nonexistent/t.json"], "/nonexistent/t.json")]:
        r = runner.invoke(app, ["bench", "stream", "--no-full-size", *args])
        assert r.exit_code == 2, (args, r.output)
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and word in lines[0], r.output


def test_synthesize_stream_writes_the_whole_file(tmp_path):
    out = tmp_path / "s.wav"
    r = runner.invoke(app, ["synthesize", "Hello there.", "--stream", "--chunk-frames", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output.strip().splitlines()[-1])
    audio, rate = sf.read(str(out))
    assert rate == 16000 and len(audio) == info["frames"] * 1280 and info["chunks"] >= 2
    assert not (tmp_path / "s.wav.partial").exists()


def test_full_size_projection_arithmetic():
    t = TalkerConfig(vocab_size=30, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=12, mrope_section=(2, 2, 2), text_vocab_size=20, text_hidden_size=16)
    c = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=48)
    torch.set_num_threads(1)
    res = full_size_projection({"a": 2.5, "b": 1.0}, budget=4, repeats=2, warmup=1, chunk_frames=4, configs=(t, c))
    ms = res["measured_ms"]
    assert res["verify_q"] == 5 and res["model"] == "custom"
    assert res["ar"]["frame_ms"] == pytest.approx(ms["talker_step"] + 15 * ms["predictor_step"], abs=0.02)
    assert res["spec"]["a"]["frame_ms"] == pytest.approx(ms["talker_step"] + ms["predictor_step"] + 5 * ms["verify"],
                                                         abs=0.02)
    assert res["spec"]["a"]["predictor_calls_per_audio_s"] == pytest.approx(FRAME_RATE * 6)
    assert res["ar"]["rtf"] == pytest.approx(res["ar"]["frame_ms"] / 80, abs=1e-4)
    assert "acceptance 2.500 tokens/call from a" in res["spec"]["a"]["source"]
