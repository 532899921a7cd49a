"""`rvqspec info` and `rvqspec bench ar` (the bench function on a tiny config: a smoke test of the
JSON it reports, not of the speed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rvqspec.real.bench_ar import BenchARConfig, run_bench_ar
from rvqspec.core.checkpoint import Qwen3TTS, save_qwen3_tts
from rvqspec.cli import app
from rvqspec.core.config import CodePredictorConfig, Qwen3TTSConfig, TalkerConfig
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> tuple[Path, Qwen3TTS]:
    torch.manual_seed(0)
    t = TalkerConfig(vocab_size=30, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=12, mrope_section=(2, 2, 2), text_vocab_size=20, text_hidden_size=16)
    c = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=48)
    m = Qwen3TTS(config=Qwen3TTSConfig(talker=t, code_predictor=c), talker=CodeDecoder(t), code_predictor=MultiCodeDecoder(c))
    return save_qwen3_tts(m, tmp_path_factory.mktemp("cli") / "ckpt"), m


def test_info_json_counts_match_the_modules(tiny_ckpt) -> None:
    path, m = tiny_ckpt
    res = runner.invoke(app, ["info", "--model", str(path), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["talker"]["num_hidden_layers"] == 2 and data["code_predictor"]["num_hidden_layers"] == 3
    assert data["code_predictor"]["small_to_mtp_projection"] is True
    params = data["parameters"]
    assert params["talker"]["total"] == sum(p.numel() for p in m.talker.parameters())
    assert params["code_predictor"]["total"] == sum(p.numel() for p in m.code_predictor.parameters())
    assert params["code_predictor"]["layers"] == sum(p.numel() for p in m.code_predictor.model.layers.parameters())
    assert params["code_predictor"]["lm_heads"] == 15 * 16 * 32
    # one call: all layers + final norm + one head + one embedding row + projection
    cp = m.code_predictor
    expected = (params["code_predictor"]["layers"] + 32 + 16 * 32 + 48
                + sum(p.numel() for p in cp.small_to_mtp_projection.parameters()))
    call = data["code_predictor_call"]
    assert call["params"]["total"] == expected
    assert call["bytes_stored_dtype"] == 4 * expected and call["bytes_bfloat16"] == 2 * expected
    assert data["stored_dtype"] == "F32"


def test_info_table_and_errors(tiny_ckpt, tmp_path: Path) -> None:
    path, _ = tiny_ckpt
    res = runner.invoke(app, ["info", str(path)])  # the positional form stays, hidden, as an alias of --model
    assert res.exit_code == 0 and "code predictor call reads" in res.output
    res = runner.invoke(app, ["info", "--model", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not found" in res.output


def test_bench_ar_help_lists_options() -> None:
    res = runner.invoke(app, ["bench", "ar", "--help"])
    assert res.exit_code == 0
    for opt in ("--calls", "--warmup", "--dtype", "--threads", "--json"):
        assert opt in res.output


def test_bench_ar_smoke_tiny() -> None:
    cfg = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=40)
    bc = BenchARConfig(calls=4, frames=2, warmup=1, bandwidth_mib=8, c0_vocab=32, threads=1, compiled=False)
    r = run_bench_ar(bc, cfg=cfg, progress=False)  # the compiled columns: tests/test_compiled.py
    json.dumps(r)  # JSON-able
    assert set(r["dtypes"]) == {"float32", "bfloat16"}
    for d in r["dtypes"].values():
        for k in ("ours_step_ms", "ours_frame_ms", "official_frame_ms", "floor_ms", "read_bandwidth_GBps",
                  "speedup_frame_vs_official", "ours_step_over_floor"):
            assert d[k] > 0, k
        assert d["ours_frame_per_call_ms"] == pytest.approx(d["ours_frame_ms"] / 15)
        assert d["official_per_call_ms"] == pytest.approx(d["official_frame_ms"] / 15)
    assert r["dtypes"]["bfloat16"]["weight_bytes_per_call"] * 2 == r["dtypes"]["float32"]["weight_bytes_per_call"]
    assert r["params_per_call"]["total"] == cfg.params_per_call()["total"]
    assert any("bandwidth floor" in k for k in r["targets_met"])
    with pytest.raises(ValueError, match="unknown dtype"):
        run_bench_ar(BenchARConfig(calls=1, frames=1, warmup=0, bandwidth_mib=1, c0_vocab=32, threads=1,
                                   official=False, dtypes=("int8",)), cfg=cfg, progress=False)


def test_bench_ar_times_the_onnx_whole_frame_fp32_and_w8() -> None:
    """`bench ar --onnx-frame fp32 --onnx-frame w8` on a tiny config: both variants timed beside the
    official loop, the 8-bit graph's MatMuls rewritten (every unrolled pass, not only the first) and
    its greedy codes compared with the fp32 graph's (no timing asserted)."""
    cfg = CodePredictorConfig(vocab_size=16, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, talker_hidden_size=64)
    bc = BenchARConfig(calls=2, frames=2, warmup=1, bandwidth_mib=8, c0_vocab=32, threads=1, compiled=False,
                       dtypes=("float32",), onnx_frame=("fp32", "w8"))
    r = run_bench_ar(bc, cfg=cfg, progress=False)["dtypes"]["float32"]
    for v in ("fp32", "w8"):
        assert r[f"onnx_frame_{v}_ms"] > 0 and r[f"onnx_frame_{v}_speedup_vs_official"] > 0
    info = r["onnx_frame_info"]
    # 7 weight matmuls per layer in the 16 unrolled passes (a few of the first pass's stay fp32), far
    # more than the one pass the quantizer reaches without removing the exporter's Identity aliases
    assert 15 * 7 * cfg.num_hidden_layers <= info["w8"]["matmul_nbits"] <= 16 * 7 * cfg.num_hidden_layers
    assert info["w8"]["aliases_removed"] > 0
    agree, n = map(int, info["w8_greedy_codes_agree"].split("/"))
    assert n == 8 and 0 <= agree <= 8
    with pytest.raises(ValueError, match="onnx_frame"):
        run_bench_ar(BenchARConfig(calls=1, frames=1, warmup=0, bandwidth_mib=1, c0_vocab=32, threads=1,
                                   official=False, compiled=False, dtypes=("float32",), onnx_frame=("int4",)),
                     cfg=cfg, progress=False)
