"""The real-weights runbook's default paths on a tiny official checkpoint with the published file
set (rvqspec.real.rehearsal), and the rehearsal script end to end.

* the checkpoint's own Qwen2-style text tokenizer and its 12 Hz speech tokenizer (random weights)
  are what `real extract` uses when no FILE.py:NAME double is named;
* the runbook's Python snippet runs as written in a fresh interpreter (it failed on its first line
  without librosa);
* `synthesize` and `wer` accept an official checkpoint (they asked for `rvqspec mini build`);
* `scripts/rehearse_real.sh` runs every runbook step under a two-process `accelerate launch`.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rvqspec.real.rehearsal import CODEBOOK, SPECIALS, write_tiny_checkpoint, write_tiny_corpora

ROOT = Path(__file__).resolve().parents[1]
RECOGNIZER = ROOT / "data" / "mini" / "recognizer"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rehearsal")
    model = write_tiny_checkpoint(root / "model")
    write_tiny_corpora(root / "data", train=4, calibration=2, eval_per_language=1)
    return root, model


def invoke(args: list[str]):
    from rvqspec.cli import app

    return CliRunner().invoke(app, args)


def test_published_file_set_and_default_tokenizers(world) -> None:
    from rvqspec.real.datasets import codec_from_spec, text_ids_from_spec

    root, model = world
    names = {p.name for p in model.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "vocab.json", "merges.txt",
            "tokenizer_config.json", "speech_tokenizer"} <= names
    assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= {
        p.name for p in (model / "speech_tokenizer").iterdir()}
    # the checkpoint's text tokenizer: chat markers are single tokens, the prompt slices land right
    ids = text_ids_from_spec(None, model)("<|im_start|>assistant\nHello there.<|im_end|>\n<|im_start|>assistant\n")
    cfg = json.loads((model / "config.json").read_text())
    assert ids.shape[0] == 1 and ids[0, 0].item() == cfg["im_start_token_id"] and ids[0, -5].item() == cfg["im_end_token_id"]
    assert ids.max().item() < cfg["talker_config"]["text_vocab_size"]
    # the 12 Hz speech tokenizer: 1920 samples at 24 kHz per frame, 16 codebooks of CODEBOOK bins
    codec = codec_from_spec(None, model)
    audio = (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)  # 1 s at 16 kHz
    codes = codec.encode(audio, 16000)
    assert codes.shape == (13, 16) and codes.dtype == torch.long  # ceil(24000 / 1920) frames
    assert 0 <= codes.min().item() and codes.max().item() < CODEBOOK
    assert torch.equal(codes, codec.encode(audio, 16000))  # deterministic
    assert not torch.equal(codes, codec.encode(audio[::-1].copy(), 16000))  # it reads the audio
    wav, rate = codec.decode(codes)
    assert rate == 24000 and wav.shape == (13 * 1920,) and np.isfinite(wav).all()
    assert len(SPECIALS) == len(set(SPECIALS))


def test_extract_uses_the_checkpoint_tokenizers(world) -> None:
    """No --codec, no --text-tokenizer: the speech tokenizer in <model>/speech_tokenizer and the
    checkpoint's text tokenizer (the paths that used to be run by no test)."""
    root, model = world
    out = root / "train"
    r = invoke(["real", "extract", "--model", str(model), str(root / "data" / "voxpopuli_en"), "--split", "train",
                "--out-dir", str(out), "--speaker", "Ryan", "--unit-items", "2"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    stats = m["extra"]["dataset_stats"]
    assert stats["items"] == 4
    # frames = ceil(seconds * 12.5) per item, as the 12 Hz tokenizer cuts 24 kHz audio
    assert m["frames"] == stats["frames"] > 12.5 * stats["audio_seconds"] - 1e-6
    assert m["frames"] <= 12.5 * stats["audio_seconds"] + 4


def _snippet(model: Path, out: Path) -> str:
    doc = (ROOT / "docs" / "real_weights.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    return code.replace("/models/Qwen3-TTS-12Hz-0.6B-CustomVoice", str(model)).replace("runs/real/", f"{out}/")


def test_the_runbook_snippet_runs_as_written(world, tmp_path) -> None:
    """In a fresh interpreter (nothing imported before it), with a drafter and a tree at the paths
    the snippet names. `from qwen_tts import Qwen3TTSModel` failed here (no librosa)."""
    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.core.drafters import PositionOffsets
    from rvqspec.core.tree import SparseTree

    root, model = world
    cp = load_qwen3_tts(model, parts=("code_predictor",)).code_predictor
    PositionOffsets.zeros(3, cp.config.hidden_size, cp.config.vocab_size).save(tmp_path / "offsets.safetensors", cp)
    SparseTree.chain(3).save(tmp_path / "tree_N32.json")
    code = _snippet(model, tmp_path)
    assert "from rvqspec import Qwen3TTSModel" in code
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    tpc = float(r.stdout.strip().splitlines()[-1])
    assert 1.0 < tpc <= 4.0  # speculation ran: more than one code per call on average
    # negative control: the first line the runbook used to show fails in this environment
    if subprocess.run([sys.executable, "-c", "import librosa"], capture_output=True).returncode != 0:
        bad = subprocess.run([sys.executable, "-c", "from qwen_tts import Qwen3TTSModel"], capture_output=True,
                             text=True, env=env, timeout=120)
        assert bad.returncode != 0 and "librosa" in bad.stderr


def test_synthesize_and_wer_accept_an_official_checkpoint(world, tmp_path) -> None:
    from rvqspec.core.tree import SparseTree

    root, model = world
    tree = tmp_path / "tree.json"
    SparseTree.chain(3).save(tree)
    wavs = {}
    for mode, extra in (("ar", []), ("spec", ["--tree", str(tree)])):
        out = tmp_path / f"{mode}.wav"
        r = invoke(["synthesize", "The quick brown fox.", "--model", str(model), "--speaker", "Ryan", "--out", str(out),
                    *extra])
        assert r.exit_code == 0, r.output
        info = json.loads(r.stdout.strip().splitlines()[-1])
        gen = json.loads((model / "generation_config.json").read_text())
        assert 0 < info["frames"] <= gen["max_new_tokens"]  # the checkpoint's frame cap (not EvalConfig's 2048)
        assert (info["tokens_per_call"] == 1.0) == (mode == "ar")
        import soundfile as sf

        wavs[mode], rate = sf.read(str(out))
        assert rate == 24000 and len(wavs[mode]) == info["frames"] * 1920
    texts = tmp_path / "texts.txt"
    texts.write_text("Hello there.\nThe end.\n", encoding="utf-8")
    r = invoke(["wer", "--texts", str(texts), "--model", str(model), "--speaker", "Ryan", "--recognizer",
                str(RECOGNIZER), "--tree", str(tree), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout[r.stdout.index("{"):])
    assert res["n"] == 2 and res["system"] == "spec" and res["tokens_per_call"] > 1.0 and 0 <= res["wer"]
    r = invoke(["synthesize", "x", "--model", str(model), "--drafter", str(tmp_path / "missing.safetensors"),
                "--out", str(tmp_path / "x.wav")])
    assert r.exit_code == 2 and "missing.safetensors: no such drafter file" in r.output


@pytest.mark.slow  # every runbook step under two processes: about 4-6 minutes on 2 shared cores
def test_rehearsal_script_runs_every_runbook_step(tmp_path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "rehearse_real.sh"), str(tmp_path / "w")], capture_output=True,
                       text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    steps = [ln.split()[1] for ln in lines if ln.startswith("ok  ")]
    for k in ("offsets", "medusa", "per_position", "low_rank", "reused"):
        assert any(s.startswith("4") and k in s for s in steps), (k, steps)
    for s in ("1_extract_train", "2_train_offsets", "3_extract_calibration", "4c_geometry", "6_evaluate", "7_synthesize", "8_snippet",
              "9_check_outputs"):
        assert s in steps, (s, steps)
    assert all(re.fullmatch(r"ok  \S+ +\d+\.\d s", ln) for ln in lines if ln.startswith("ok  "))
    assert lines[-1].startswith("rehearsal passed in ")
