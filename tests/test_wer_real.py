"""The real-run WER harness (rvqspec.real.wer): seed Table 3 arithmetic on known records, and
`rvqspec real evaluate` end to end on a tiny official model with test doubles for the codec and the
recognizer (tests/_real_plugins.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch

from _tiny_official import SPEAKER, tiny_official
from rvqspec.real.wer import RecognizerMap, markdown, parse_asr_for, table3


def rec(id_, lang, seed, system, ref, hyp, frames=10, calls=150, sec=2.0):
    return {"id": id_, "language": lang, "seed": seed, "system": system, "reference": ref, "hypothesis": hyp,
            "frames": frames, "calls": calls, "audio_seconds": 1.0, "reference_seconds": sec, "synthesis_seconds": 0.1}


def test_table3_arithmetic() -> None:
    recs = [
        rec("a", "en", 0, "ar", "the cat sat", "the cat sat"), rec("b", "en", 0, "ar", "a dog", "a log"),
        rec("a", "en", 1, "ar", "the cat sat", "the bat sat"), rec("b", "en", 1, "ar", "a dog", "a dog"),
        rec("a", "en", 0, "spec", "the cat sat", "the cat sat", calls=60),
        rec("b", "en", 0, "spec", "a dog", "a dog", calls=60),
        rec("c", "zh", 0, "ar", "你好世界", "你好世界"), rec("c", "zh", 0, "spec", "你好世界", "你好视界", calls=50),
    ]
    t = table3(recs)
    en, zh = t["rows"]
    assert en["language"] == "en" and en["metric"] == "wer" and zh["metric"] == "cer"
    assert en["audio_minutes"] == pytest.approx(4.0 / 60, abs=1e-3)  # items a, b counted once each
    assert en["ar_error"] == pytest.approx(100 * (1 / 5 + 1 / 5) / 2)  # per-seed corpus WER, then averaged
    assert en["spec_error"] == 0.0
    assert en["ar_tokens_per_step"] == 1.0 and en["spec_tokens_per_step"] == pytest.approx(2.5)
    assert zh["spec_error"] == pytest.approx(25.0) and zh["spec_tokens_per_step"] == pytest.approx(3.0)
    md = markdown(t)
    assert "| en | 0.1 | 1.00 | 20.00 (WER) | 2.50 | 0.00 (WER) |" in md
    assert parse_asr_for(["ja=/w", "/p"]) == {"ja": "/w", "*": "/p"}
    m = RecognizerMap({"ja": "/w"}, loader=lambda p: p)
    assert m.get("ja") == "/w"
    with pytest.raises(KeyError, match="no recognizer for language 'en'"):
        m.get("en")


def test_evaluate_command_end_to_end(tmp_path) -> None:
    from typer.testing import CliRunner

    from rvqspec.cli import app
    from test_scale import PLUGINS

    torch.set_num_threads(1)
    tiny_official(seed=2).save_pretrained(tmp_path / "model")
    data = tmp_path / "data"
    data.mkdir()
    rows = ["file_name,text"]
    for i in range(2):
        sf.write(data / f"e{i}.wav", np.zeros(8000, np.float32) + 0.01 * i, 16000, subtype="FLOAT")
        rows.append(f"e{i}.wav,evaluation line {i}")
    (data / "metadata.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "eval"
    args = ["real", "evaluate", "--model", str(tmp_path / "model"), str(data), "--out-dir", str(out), "--lang", "en",
            "--speaker", SPEAKER, "--asr", f"*={PLUGINS}:EchoASR", "--codec", f"{PLUGINS}:ToyCodec",
            "--text-tokenizer", f"{PLUGINS}:text_ids", "--seeds", "2", "--max-new-tokens", "6", "--unit-items", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    t = json.loads((out / "table3.json").read_text())
    (row,) = t["rows"]
    assert row["language"] == "en" and row["items"] == 2
    assert len(t["records"]) == 2 * 2 * 2  # items x seeds x systems
    assert row["ar_tokens_per_step"] == 1.0 and row["spec_tokens_per_step"] >= 1.0
    assert all(r["frames"] > 0 for r in t["records"])
    assert (out / "table3.md").read_text().startswith("| Language | Audio (min) |")
    # a rerun finds every unit done and only re-scores
    r2 = CliRunner().invoke(app, args)
    assert r2.exit_code == 0 and json.loads((out / "table3.json").read_text())["rows"] == t["rows"]


# ---- the mini backend (the runbook's rehearsal path) on a random toy mini checkpoint ------------------
@pytest.fixture(scope="module")
def toy_mini(tmp_path_factory):
    """A random mini-layout checkpoint (the mini world's config recipe, toy sizes), a toy codec fitted
    on noise, and a Fleurs-like dataset whose items carry frame-aligned `phoneme_frames`."""
    import datasets

    from rvqspec.core.checkpoint import Qwen3TTS, save_qwen3_tts
    from rvqspec.mini.codec import CodecConfig, RVQCodec
    from rvqspec.mini.phonemes import TOKENIZER_FILE, PhonemeTokenizer
    from rvqspec.mini.talker_train import MiniModelConfig, model_config
    from rvqspec.core.model import CodeDecoder, MultiCodeDecoder

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("toy_mini")
    tok = PhonemeTokenizer.load("data/mini/phoneme_tokenizer.json")
    rng = np.random.default_rng(0)
    audios = [(0.1 * rng.standard_normal(16000)).astype(np.float32) for _ in range(3)]
    codec = RVQCodec(CodecConfig.toy()).fit(audios, generator=torch.Generator().manual_seed(0), progress=False)
    codec.save(root / "codec")
    torch.manual_seed(0)
    cfg = model_config(MiniModelConfig.toy(), tok.vocab_size, codec.config.codebook_size)
    talker, cp = CodeDecoder(cfg.talker), MultiCodeDecoder(cfg.code_predictor)
    cp.set_c0_embedding(talker.model.codec_embedding)
    save_qwen3_tts(Qwen3TTS(config=cfg, talker=talker, code_predictor=cp), root / "model")
    tok.save(root / "model" / TOKENIZER_FILE)
    rows = {"id": [], "raw_transcription": [], "language": [], "phoneme_frames": [], "audio": []}
    for i, a in enumerate(audios[:2]):
        T = codec.encode(torch.from_numpy(a)).shape[0]
        rows["id"].append(i); rows["raw_transcription"].append(f"hello number {i}"); rows["language"].append("English")
        rows["phoneme_frames"].append(rng.integers(0, tok.vocab_size, T).tolist())
        buf = __import__("io").BytesIO()
        sf.write(buf, a, 16000, format="WAV", subtype="FLOAT")
        rows["audio"].append({"bytes": buf.getvalue(), "path": None})
    feats = datasets.Features({"id": datasets.Value("int64"), "raw_transcription": datasets.Value("string"),
                               "language": datasets.Value("string"), "phoneme_frames": datasets.List(datasets.Value("int32")),
                               "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}})
    ds = datasets.Dataset.from_dict(rows, features=feats).cast_column("audio", datasets.Audio(decode=False))
    datasets.DatasetDict({"test": ds}).save_to_disk(str(root / "fleurs"))
    return root


def test_mini_backend_extract_and_evaluate(toy_mini) -> None:
    from typer.testing import CliRunner

    from rvqspec.cli import app
    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.real.datasets import DatasetSpec, MiniTeacherForcer, iter_items
    from rvqspec.measure.extract import ShardDataset
    from rvqspec.core.frame_loop import teacher_forced_frames
    from test_scale import PLUGINS

    r = toy_mini
    runner = CliRunner()
    res = runner.invoke(app, ["real", "extract", "--model", str(r / "model"), str(r / "fleurs"), "--split", "test",
                              "--out-dir", str(r / "shards"), "--codec", f"mini:{r / 'codec'}", "--backend", "mini",
                              "--hidden-dtype", "float32"])
    assert res.exit_code == 0, res.output
    # the item's own phoneme_frames drive the talker (exact alignment): same states as rvqspec.core.frame_loop
    item = next(iter_items(DatasetSpec(str(r / "fleurs"), split="test")))
    forcer = MiniTeacherForcer(r / "model")
    from rvqspec.real.datasets import mini_codec

    codes = mini_codec(r / "codec").encode(item.audio, item.sampling_rate)
    m = load_qwen3_tts(r / "model")
    ref, _ = teacher_forced_frames(m.talker, m.code_predictor, torch.tensor(item.extra["phoneme_frames"]), codes)
    assert torch.equal(forcer.for_item(item, codes), ref) and forcer.stretched == 0
    h, c = next(iter(ShardDataset(r / "shards", batch_size=10_000, shuffle=False)))
    assert torch.equal(c[: codes.shape[0]], codes)
    res = runner.invoke(app, ["real", "evaluate", "--model", str(r / "model"), str(r / "fleurs"), "--split", "test",
                              "--out-dir", str(r / "eval"), "--backend", "mini", "--mini-codec", str(r / "codec"),
                              "--asr", f"*={PLUGINS}:EchoASR", "--seeds", "1"])
    assert res.exit_code == 0, res.output
    t = json.loads((r / "eval" / "table3.json").read_text())
    (row,) = t["rows"]
    assert row["language"] == "en" and row["ar_tokens_per_step"] == 1.0 and row["spec_tokens_per_step"] >= 1.0
    assert len(t["records"]) == 2 * 2
