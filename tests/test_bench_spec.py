"""Smoke tests of the spec benches and CLI on tiny random models (the JSON they report, not speed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from _tiny_cp import random_frames, tiny_code_predictor
from rvqspec.measure.bench_spec import (bench_acceptance, bench_full_size, bench_inner_loop, frames_for_timing,
                                tokens_per_call_from_acceptance)
from rvqspec.core.checkpoint import Qwen3TTS, save_qwen3_tts
from rvqspec.cli import app
from rvqspec.core.config import CodePredictorConfig, Qwen3TTSConfig, TalkerConfig
from rvqspec.core.drafters import make_drafter
from rvqspec.measure.acceptance import AcceptanceTable
from rvqspec.measure.extract import frames_to_hidden
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree

runner = CliRunner()


@pytest.fixture(scope="module")
def cp():
    torch.set_num_threads(1)
    return tiny_code_predictor(vocab=16, hidden=32, talker_hidden=48, seed=0)


def test_bench_acceptance_json(cp):
    g = torch.Generator().manual_seed(0)
    calib = list(frames_to_hidden(cp, random_frames(split="calibration", language="en"), "free_running", generator=g))
    ev = {lang: random_frames(language=lang, max_utterances=2) for lang in ("en", "de")}
    r = bench_acceptance(cp, {"reused": make_drafter("reused", cp), "low_rank": make_drafter("low_rank", cp)},
                         calib, ev, budgets=(2, 4), run_frames=10, progress=False)
    assert set(r["drafters"]) == {"reused", "low_rank"} and r["languages"] == ["en", "de"]
    e = r["drafters"]["low_rank"]
    assert e["added_parameters"] == make_drafter("low_rank", cp).num_parameters
    assert r["drafters"]["reused"]["added_parameters"] == 0
    for lang in ("en", "de"):
        for N in (2, 4):
            row = e["by_language"][lang][N]
            assert row["run_frames"] == 10
            assert 1.0 <= row["tokens_per_call"] <= 15 / 5  # at most 1 + K tokens per round
            assert 1.0 <= row["replay_tokens_per_call"] and 1.0 <= row["oracle_tokens_per_call"]
    assert len(e["trees"][4]) == 4
    tpc = tokens_per_call_from_acceptance(r, "low_rank")
    assert set(tpc) == {2, 4}
    with pytest.raises(KeyError, match="no drafter 'medusa'"):
        tokens_per_call_from_acceptance(r, "medusa")


def test_bench_inner_loop_and_full_size(cp):
    spec = SpeculativeCodePredictor(cp, make_drafter("offsets", cp), SparseTree.chain(3))
    r = bench_inner_loop(cp, spec, frames_for_timing(random_frames(), 6), warmup=1, progress=False)
    assert r["frames"] == 6 and r["ar_ms_per_frame"] > 0 and r["spec_ms_per_frame"] > 0
    assert r["speedup"] == pytest.approx(r["ar_ms_per_frame"] / r["spec_ms_per_frame"], rel=1e-3)
    small = CodePredictorConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, talker_hidden_size=64)
    f = bench_full_size({4: 2.0, 8: 2.2}, budgets=(4, 8), repeats=3, warmup=1, progress=False, config=small)
    assert set(f["rows"]) == {4, 8} and f["rows"][8]["q"] == 9
    for row in f["rows"].values():
        assert row["projected_speedup"] == pytest.approx(row["tokens_per_call"] / (1 + row["verify_overhead"]), rel=1e-3)
    assert f["chosen_N"] in (4, 8)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    t = TalkerConfig(vocab_size=30, hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=12, mrope_section=(2, 2, 2), text_vocab_size=20,
                     text_hidden_size=16)
    c = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=48)
    m = Qwen3TTS(config=Qwen3TTSConfig(talker=t, code_predictor=c), talker=CodeDecoder(t),
                 code_predictor=MultiCodeDecoder(c))
    return save_qwen3_tts(m, tmp_path_factory.mktemp("spec") / "ckpt")


def test_cli_pipeline(ckpt, tmp_path):
    """extract -> train -> calibrate -> grow-tree -> bench acceptance -> bench spec, end to end."""
    fn = "_tiny_cp:random_frames"

    def ok(args):
        res = runner.invoke(app, [str(a) for a in args])
        assert res.exit_code == 0, res.output + repr(res.exception)
        return res.output

    ok(["spec", "extract", "--model", ckpt, "--out-dir", tmp_path / "tf", "--frames-fn", fn, "--split", "train"])
    ok(["spec", "extract", "--model", ckpt, "--out-dir", tmp_path / "fr", "--frames-fn", fn,
        "--split", "calibration", "--source", "free_running"])
    out = ok(["spec", "train", "--model", ckpt, "--shards", tmp_path / "tf", "--out", tmp_path / "d.safetensors",
              "--kind", "offsets", "--epochs", "2"])
    assert json.loads(out[out.rindex('{"out"'):])["steps"] == 2  # 27 frames / batch 32 = 1 step per epoch
    # --lr reaches Adam: from zero, each of its first steps moves a coordinate by about the rate; without
    # it the offsets take their recipe's 1e-2 (recipe_for), not the seed's 1e-3
    for name, lr in (("seed", "0.001"), ("fast", "0.05")):
        ok(["spec", "train", "--model", ckpt, "--shards", tmp_path / "tf", "--out", tmp_path / f"{name}.safetensors",
            "--kind", "offsets", "--epochs", "2", "--lr", lr])
    from safetensors.torch import load_file
    seed, default, fast = (load_file(str(tmp_path / f))["offsets"].abs().max()
                           for f in ("seed.safetensors", "d.safetensors", "fast.safetensors"))
    assert 0 < seed <= 2.5e-3 < default <= 2.5e-2 < fast <= 0.125, (seed, default, fast)
    ok(["spec", "calibrate", "--model", ckpt, "--shards", tmp_path / "fr", "--out", tmp_path / "acc.json",
        "--drafter", tmp_path / "d.safetensors", "--max-rank", "4"])
    ok(["spec", "grow-tree", "--acceptance", tmp_path / "acc.json", "--out", tmp_path / "tree.json", "--budget", "5"])
    assert len(SparseTree.load(tmp_path / "tree.json")) == 5
    ok(["bench", "acceptance", "--model", ckpt, "--calibration", tmp_path / "fr", "--frames-fn", fn,
        "--drafter", f"offsets={tmp_path / 'd.safetensors'}", "--budget", "2", "--budget", "4",
        "--lang", "en", "--run-frames", "5", "--json", "--out", tmp_path / "acc_bench.json"])
    r = json.loads((tmp_path / "acc_bench.json").read_text())
    assert set(r["drafters"]) == {"reused", "offsets"}
    ok(["bench", "spec", "--acceptance", tmp_path / "acc_bench.json", "--acceptance-drafter", "offsets",
        "--model", ckpt, "--drafter", tmp_path / "d.safetensors", "--budget", "4", "--frames-fn", fn,
        "--frames", "4", "--no-full-size", "--json", "--out", tmp_path / "spec.json"])
    s = json.loads((tmp_path / "spec.json").read_text())
    assert s["mini"]["frames"] == 4
    ok(["bench", "lossless", "--model", ckpt, "--drafter", tmp_path / "d.safetensors", "--acceptance",
        tmp_path / "acc_bench.json", "--acceptance-drafter", "offsets", "--budget", "4", "--frames-fn", fn,
        "--contexts", "2", "--frames", "30", "--control-frames", "20", "--json", "--out", tmp_path / "ll.json"])
    ll = json.loads((tmp_path / "ll.json").read_text())
    assert len(ll["contexts"]) == 2 and len(ll["tree"]) == 4
    assert set(ll["contexts"][0]) == {"c0", "decoder", "control_always_accept", "control_full_p"}
    assert ll["contexts"][1]["decoder"]["frames"] == 30 and ll["contexts"][1]["control_full_p"]["frames"] == 20
    # a budget the bench did not sweep is grown from the drafter's recorded acceptance table, as the bench
    # grows its own trees (the swept N = 4 tree comes out the same way)
    table = AcceptanceTable.from_json(r["drafters"]["offsets"]["acceptance"])
    assert SparseTree(r["drafters"]["offsets"]["trees"]["4"]).paths == SparseTree.grow(table.acc, 4).paths
    ok(["bench", "spec", "--acceptance", tmp_path / "acc_bench.json", "--acceptance-drafter", "offsets",
        "--model", ckpt, "--drafter", tmp_path / "d.safetensors", "--budget", "3", "--frames-fn", fn,
        "--frames", "2", "--no-full-size", "--json", "--out", tmp_path / "spec3.json"])
    assert json.loads((tmp_path / "spec3.json").read_text())["mini"]["tree_nodes"] == 3
    # without the table there is nothing to grow from
    del r["drafters"]["offsets"]["acceptance"]
    (tmp_path / "no_table.json").write_text(json.dumps(r))
    bad = runner.invoke(app, ["bench", "lossless", "--model", str(ckpt), "--drafter", str(tmp_path / "d.safetensors"),
                              "--acceptance", str(tmp_path / "no_table.json"), "--budget", "7"])
    flat = " ".join(bad.output.replace("│", " ").split())  # rich wraps the message in a box
    assert bad.exit_code != 0 and "no tree for drafter 'offsets' at N=7 and no acceptance table" in flat, bad.output
    bad = runner.invoke(app, ["spec", "extract", "--model", str(ckpt), "--out-dir", str(tmp_path / "x"),
                              "--frames-fn", "nomodule"])
    assert bad.exit_code != 0 and "module:function" in bad.output
