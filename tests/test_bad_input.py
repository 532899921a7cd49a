"""Every routine mistake through the CLI: exit code 2, one plain line `error: ...` that names the file,
key, shape or value, and no traceback. Each case builds its bad input in tmp_path; a valid model,
drafter and tree come from the committed mini world (data/mini).

The error line is printed without rich, so neither the terminal width nor the temp path's length
can wrap it: the cases run with COLUMNS=40 and still expect exactly one line.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.core.config import CodePredictorConfig
from rvqspec.core.drafters import make_drafter
from rvqspec.core.model import MultiCodeDecoder

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "data" / "mini"
MODEL, DRAFTER, TREE = MINI / "model", MINI / "drafters" / "offsets.safetensors", MINI / "trees" / "offsets_n4.json"
ACC = MINI / "trees" / "acceptance_offsets.json"
HAVE_MINI = MODEL.is_dir() and DRAFTER.is_file() and TREE.is_file()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Bad inputs, each in its own file."""
    d = tmp_path_factory.mktemp("bad")
    f = {}

    def write(name: str, text: str) -> Path:
        (d / name).write_text(text)
        f[name] = d / name
        return d / name

    write("corrupt.safetensors", "this is not a safetensors file")
    write("notjson.json", "{ not json")
    write("list.json", "[1, 2, 3]")
    write("other.json", json.dumps({"hello": 1}))
    write("empty.txt", "\n  \n")
    write("texts.txt", "hello there\n")
    write("rank_too_big.json", json.dumps([[0], [5000]]))
    write("bad_prefix.json", json.dumps([[0], [1, 0, 0]]))
    write("acc_missing_key.json", json.dumps({"counts": [[1]]}))
    steps = {"x": {"status": "ok", "seconds": 1.0}}
    for name, wav in (("escape", "../outside.wav"), ("absolute", "/etc/hostname")):
        write(f"results_{name}.json", json.dumps({"steps": steps, "ab": [
            {"text": "hi", "language": "en", "seed": 0, "ar": {"wav": wav}, "spec": {"wav": "b.wav"}}]}))
    write("results_steps.json", json.dumps({"steps": {"x": 3}}))
    # a drafter for a code predictor of another width (hidden 32, vocab 16)
    torch.manual_seed(0)
    small = MultiCodeDecoder(CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=40,
                                                 num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                                 head_dim=8, talker_hidden_size=48))
    make_drafter("offsets", small).save(d / "narrow.safetensors", small)
    f["narrow.safetensors"] = d / "narrow.safetensors"
    if HAVE_MINI:  # a drafter of the right shape trained for other weights: only the model hash differs
        from rvqspec.core.checkpoint import load_qwen3_tts

        other = load_qwen3_tts(MODEL, parts=("code_predictor",)).code_predictor
        with torch.no_grad():
            next(other.parameters()).add_(1e-3)
        make_drafter("offsets", other).save(d / "other_model.safetensors", other)
        f["other_model.safetensors"] = d / "other_model.safetensors"
    write("not_rows.json", json.dumps({"table": []}))
    write("acc_bench_other.json", json.dumps({"drafters": {"medusa": {}}}))
    # a checkpoint whose shard index points outside its folder
    ck = d / "escaping_ckpt"
    ck.mkdir()
    (ck / "config.json").write_text((MODEL / "config.json").read_text() if HAVE_MINI else "{}")
    (ck / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"talker.x": "../stolen.safetensors"}}))
    (d / "stolen.safetensors").write_text("")
    f["escaping_ckpt"] = ck
    f["dir"] = d
    return f


def P(name: str):
    return ("file", name)


# (id, argv with P(...) placeholders, what the one line must name)
CASES = [
    # synthesize
    ("synth-missing-tree", ["synthesize", "hi", "--drafter", str(DRAFTER), "--tree", ("missing", "none.json")], "none.json"),
    ("synth-corrupt-drafter", ["synthesize", "hi", "--drafter", P("corrupt.safetensors"), "--tree", str(TREE)],
     "corrupt.safetensors"),
    ("synth-narrow-drafter", ["synthesize", "hi", "--drafter", P("narrow.safetensors"), "--tree", str(TREE)],
     "hidden_size=32"),
    ("synth-lang-fr", ["synthesize", "bonjour", "--lang", "fr"], "'fr'"),
    ("synth-empty-text", ["synthesize", "   "], "TEXT is empty"),
    ("synth-rank-above-vocab", ["synthesize", "hi", "--drafter", str(DRAFTER), "--tree", P("rank_too_big.json")],
     "rank 5000"),
    ("synth-tree-not-json", ["synthesize", "hi", "--drafter", str(DRAFTER), "--tree", P("notjson.json")], "notjson.json"),
    ("synth-drafter-without-tree", ["synthesize", "hi", "--drafter", str(DRAFTER)], "--tree"),
    ("synth-other-model-hash", ["synthesize", "hi", "--drafter", P("other_model.safetensors"), "--tree", str(TREE)],
     "--skip-hash-check"),
    ("synth-temperature-0", ["synthesize", "hi", "--temperature", "0"], "--temperature"),
    ("synth-top-p-1.5", ["synthesize", "hi", "--top-p", "1.5"], "--top-p"),
    ("synth-missing-model", ["synthesize", "hi", "--model", ("missing", "nomodel")], "nomodel"),
    # wer
    ("wer-missing-texts", ["wer", "--texts", ("missing", "none.txt")], "none.txt"),
    ("wer-empty-texts", ["wer", "--texts", P("empty.txt")], "empty.txt"),
    ("wer-lang-xx", ["wer", "--texts", P("texts.txt"), "--lang", "xx"], "'xx'"),
    ("wer-top-k-negative", ["wer", "--texts", P("texts.txt"), "--top-k", "-1"], "--top-k"),
    ("wer-other-model-hash", ["wer", "--texts", P("texts.txt"), "--drafter", P("other_model.safetensors"),
                              "--tree", str(TREE)], "model hash"),
    # spec
    ("grow-tree-budget-0", ["spec", "grow-tree", "--acceptance", str(ACC), "--out", ("missing", "t.json"),
                            "--budget", "0"], "--budget"),
    ("grow-tree-budget-negative", ["spec", "grow-tree", "--acceptance", str(ACC), "--out", ("missing", "t.json"),
                                   "--budget", "-3"], "--budget"),
    ("grow-tree-missing-acceptance", ["spec", "grow-tree", "--acceptance", ("missing", "acc.json"),
                                      "--out", ("missing", "t.json")], "acc.json"),
    ("grow-tree-acceptance-not-json", ["spec", "grow-tree", "--acceptance", P("notjson.json"),
                                       "--out", ("missing", "t.json")], "notjson.json"),
    ("grow-tree-acceptance-key", ["spec", "grow-tree", "--acceptance", P("acc_missing_key.json"),
                                  "--out", ("missing", "t.json")], "acc_missing_key.json"),
    ("spec-extract-frames-fn", ["spec", "extract", "--model", str(MODEL), "--out-dir", ("missing", "x"),
                                "--frames-fn", "nomodule"], "--frames-fn"),
    ("spec-extract-source", ["spec", "extract", "--model", str(MODEL), "--out-dir", ("missing", "x"),
                             "--source", "bogus"], "bogus"),
    ("spec-train-kind", ["spec", "train", "--model", str(MODEL), "--shards", ("missing", "shards"),
                         "--out", ("missing", "d.safetensors"), "--kind", "bogus"], "bogus"),
    ("spec-train-lr", ["spec", "train", "--model", str(MODEL), "--shards", ("missing", "shards"),
                       "--out", ("missing", "d.safetensors"), "--lr", "0"], "--lr"),
    ("spec-calibrate-corrupt-drafter", ["spec", "calibrate", "--model", str(MODEL), "--shards", ("missing", "shards"),
                                        "--out", ("missing", "a.json"), "--drafter", P("corrupt.safetensors")],
     "corrupt.safetensors"),
    ("spec-geometry-missing-shards", ["spec", "geometry", "--shards", ("missing", "noshards")], "noshards"),
    ("spec-geometry-not-a-manifest", ["spec", "geometry", "--shards", P("notjson.json")], "notjson.json"),
    # bench
    ("bench-lossless-missing-model", ["bench", "lossless", "--model", ("missing", "nomodel"), "--drafter", str(DRAFTER),
                                      "--tree", str(TREE)], "nomodel"),
    ("bench-lossless-no-tree", ["bench", "lossless", "--model", str(MODEL), "--drafter", str(DRAFTER)], "--tree"),
    ("bench-spec-missing-acceptance", ["bench", "spec", "--acceptance", ("missing", "acc.json"), "--no-full-size"],
     "acc.json"),
    ("bench-spec-not-a-bench-json", ["bench", "spec", "--acceptance", P("list.json"), "--no-full-size"], "list.json"),
    ("bench-spec-acceptance-drafter", ["bench", "spec", "--acceptance", P("acc_bench_other.json"), "--no-full-size"],
     "'offsets'"),
    ("bench-lossless-acceptance-list", ["bench", "lossless", "--model", str(MODEL), "--drafter", str(DRAFTER),
                                        "--acceptance", P("list.json")], "list.json"),
    ("bench-acceptance-drafter-spec", ["bench", "acceptance", "--model", str(MODEL), "--calibration",
                                       ("missing", "shards"), "--drafter", "offsets"], "NAME=PATH"),
    ("bench-acceptance-budget-0", ["bench", "acceptance", "--model", str(MODEL), "--calibration",
                                   ("missing", "shards"), "--budget", "0"], "--budget"),
    ("bench-ar-dtype", ["bench", "ar", "--dtype", "bogus", "--calls", "1", "--frames", "1", "--warmup", "0",
                        "--no-official"], "bogus"),
    # export
    ("export-missing-tree", ["export", "onnx", "--tree", ("missing", "none.json"), "--out-dir", ("missing", "o")],
     "none.json"),
    ("export-tree-prefix", ["export", "onnx", "--tree", P("bad_prefix.json"), "--out-dir", ("missing", "o")],
     "prefix"),
    ("export-rank-above-vocab", ["export", "onnx", "--model", str(MODEL), "--tree", P("rank_too_big.json"),
                                 "--out-dir", ("missing", "o")], "rank 5000"),
    ("export-missing-model", ["export", "onnx", "--model", ("missing", "nomodel"), "--tree", str(TREE),
                              "--out-dir", ("missing", "o")], "nomodel"),
    # profile
    ("profile-cuda-without-cuda", ["profile", "--backend", "torch-cuda"], "torch-cuda"),
    ("profile-backend-bogus", ["profile", "--backend", "bogus"], "bogus"),
    ("profile-budget-0", ["profile", "--budget", "0"], "--budget"),
    ("profile-missing-acceptance", ["profile", "--acceptance", ("missing", "acc.json"), "--calls", "1"], "acc.json"),
    # report
    ("report-not-results", ["report", P("other.json")], "other.json"),
    ("report-list", ["report", P("list.json")], "list.json"),
    ("report-not-json", ["report", P("notjson.json")], "notjson.json"),
    ("report-missing", ["report", ("missing", "results.json")], "results.json"),
    ("report-audio-escapes", ["report", P("results_escape.json")], "../outside.wav"),
    ("report-audio-absolute", ["report", P("results_absolute.json")], "/etc/hostname"),
    ("report-step-without-status", ["report", P("results_steps.json")], "steps['x']"),
    ("demo-lang-xx", ["demo", "--quick", "--lang", "xx", "--out-dir", ("missing", "demo")], "'xx'"),
    # info / checkpoints
    ("info-missing-model", ["info", "--model", ("missing", "nomodel")], "nomodel"),
    ("info-index-escapes", ["info", "--model", P("escaping_ckpt")], "../stolen.safetensors"),
    # real
    ("real-extract-missing-model", ["real", "extract", "--model", ("missing", "nomodel"), ("missing", "data"),
                                    "--out-dir", ("missing", "o")], "nomodel"),
    ("real-train-missing-model", ["real", "train-offsets", "--model", ("missing", "nomodel"), ("missing", "shards"),
                                  "--out", ("missing", "d.safetensors")], "nomodel"),
    ("real-extract-strategy", ["real", "extract", "--model", str(MODEL), ("missing", "data"), "--out-dir",
                               ("missing", "o"), "--strategy", "bogus"], "bogus"),
    # spade
    ("spade-prune-keep", ["spade", "prune", "--keep", "a,b", "--out-dir", ("missing", "p")], "--keep"),
    ("spade-prune-missing-importance", ["spade", "prune", "--criterion", "wli", "--importance",
                                        ("missing", "imp.json"), "--out-dir", ("missing", "p")], "imp.json"),
    ("spade-prune-importance-not-json", ["spade", "prune", "--criterion", "wli", "--importance", P("notjson.json"),
                                         "--out-dir", ("missing", "p")], "notjson.json"),
    ("spade-project-tokens", ["spade", "project", "--tokens-per-call", "x=abc", "--out", ("missing", "p.json")],
     "--tokens-per-call"),
    ("spade-project-results-not-rows", ["spade", "project", "--results", P("not_rows.json"),
                                        "--out", ("missing", "p.json")], "'rows'"),
    ("spade-project-timings-not-json", ["spade", "project", "--timings", P("notjson.json"),
                                        "--out", ("missing", "p.json")], "notjson.json"),
    ("spade-evaluate-model-spec", ["spade", "evaluate", "--model", "teacher", "--out", ("missing", "r.json")],
     "NAME=MODEL_DIR"),
]


def _argv(args, files) -> list[str]:
    out = []
    for a in args:
        if isinstance(a, tuple):
            kind, name = a
            out.append(str(files[name]) if kind == "file" else str(files["dir"] / "absent" / name))
        else:
            out.append(a)
    return out


@pytest.mark.skipif(not HAVE_MINI, reason="the committed mini world (data/mini) is missing")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_named_line(case, files) -> None:
    _, args, named = case
    res = CliRunner().invoke(app, _argv(args, files), env={"COLUMNS": "40", "RVQSPEC_DEBUG": ""})
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert named in lines[0], lines[0]


def test_the_table_covers_every_area() -> None:
    areas = {c[1][0] for c in CASES}
    assert len(CASES) >= 30
    assert {"synthesize", "wer", "spec", "bench", "export", "profile", "report", "real", "spade"} <= areas


def test_debug_shows_the_traceback(files) -> None:
    """The negative control of the one-line rule: --debug lets the exception through."""
    res = CliRunner().invoke(app, ["--debug", "spec", "grow-tree", "--acceptance", str(files["notjson.json"]),
                                   "--out", str(files["dir"] / "t.json")])
    assert res.exit_code != 2 and isinstance(res.exception, ValueError)


@pytest.mark.skipif(not HAVE_MINI, reason="the committed mini world (data/mini) is missing")
def test_report_never_rewrites_its_input(tmp_path) -> None:
    res = {"steps": {"x": {"status": "ok", "seconds": 1.0}}, "languages": [{"language": "en", "ar_wer": 0.1}]}
    text = json.dumps(res)  # compact on purpose: a rewrite would indent it
    (tmp_path / "results.json").write_text(text)
    out = CliRunner().invoke(app, ["report", str(tmp_path / "results.json")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "results.json").read_text() == text and (tmp_path / "index.html").is_file()


def test_nan_hidden_state_is_a_named_error() -> None:
    from rvqspec.core.speculative import NonFiniteHiddenError, SpeculativeCodePredictor
    from rvqspec.core.tree import SparseTree

    torch.manual_seed(0)
    cfg = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=40, num_hidden_layers=1,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=48)
    cp = MultiCodeDecoder(cfg)
    cp.set_c0_embedding(torch.nn.Embedding(16, 48))
    spec = SpeculativeCodePredictor(cp, make_drafter("offsets", cp), SparseTree([[0], [0, 0]]))
    h = torch.randn(2, 1, 48)  # (B, 1, E)
    c0 = torch.zeros(2, 1, dtype=torch.long)  # (B, 1)
    codes, _ = spec.generate_frame(h, c0)  # the control: finite input decodes
    assert codes.shape == (2, 15)
    h[1, 0, 3] = float("nan")
    with pytest.raises(NonFiniteHiddenError, match=r"rows \[1\]"):
        spec.generate_frame(h, c0)


def test_shard_index_inside_the_folder_still_loads(tmp_path) -> None:
    """The control of the index-escape case: an index whose shards stay inside the folder is fine."""
    from rvqspec.core.checkpoint import WEIGHTS_NAME, weight_map

    (tmp_path / "a.safetensors").write_bytes((MODEL / WEIGHTS_NAME).read_bytes() if HAVE_MINI else b"")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    assert weight_map(tmp_path) == {"w": tmp_path / "a.safetensors"}


@pytest.mark.skipif(not HAVE_MINI, reason="the committed mini world (data/mini) is missing")
def test_skip_hash_check_is_the_only_escape(files) -> None:
    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.core.drafters import DrafterError, load_drafter

    cp = load_qwen3_tts(MODEL, parts=("code_predictor",)).code_predictor
    with pytest.raises(DrafterError, match="model hash"):
        load_drafter(files["other_model.safetensors"], cp)
    assert load_drafter(files["other_model.safetensors"], cp, check_hash=False).num_offsets == 3
    with pytest.raises(DrafterError, match="hidden_size"):  # the escape skips the hash only, not the shapes
        load_drafter(files["narrow.safetensors"], cp, check_hash=False)


def test_the_installed_entry_point_prints_one_line(tmp_path) -> None:
    """The same rule through `python -m rvqspec.cli` in a subprocess (typer's own exception hook is
    on that path, not on CliRunner's), with a narrow terminal and a long temp path."""
    import os
    import subprocess
    import sys

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    bad = deep / "acceptance.json"
    bad.write_text("{ not json")
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(ROOT)}
    env.pop("RVQSPEC_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "rvqspec.cli", "spec", "grow-tree", "--acceptance", str(bad),
                          "--out", str(deep / "t.json")], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "not valid JSON" in lines[0], res.stderr
    assert not (deep / "t.json").exists()
