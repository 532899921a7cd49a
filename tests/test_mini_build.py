"""`rvqspec mini build` at toy size (corpus + codec, plus later steps when their modules exist),
the manifest's checksums, and the committed data/mini artifacts."""
import importlib.util
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from rvqspec.mini.build import (ArtifactError, BuildConfig, BuildError, _import_step, build, parse_steps,
                                verify_artifacts)
from rvqspec.mini.codec import RVQCodec
from rvqspec.mini.corpus import CorpusError, load_corpus
from rvqspec.mini.paths import MiniPaths
from rvqspec.mini.phonemes import PhonemeTokenizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    import torch
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mini")
    paths = MiniPaths.at(root / "data", root / "runs")
    manifest = build(paths, BuildConfig(toy=True, steps=("corpus", "codec"), progress=False), log=lambda s: None)
    return paths, manifest


def test_toy_build_writes_consistent_corpus_and_codec(toy):
    paths, manifest = toy
    assert set(manifest["steps"]) == {"corpus", "codec"}
    assert manifest["toy"] is True and manifest["total_bytes"] > 0
    data = load_corpus(paths.corpus, need_codes=True)
    assert set(data) == {"model_train", "train", "validation", "calibration", "eval"}
    assert "audio" not in data["train"].column_names
    assert sorted(set(data["eval"]["language"])) == ["de", "en", "es", "ja", "ru", "zh"]
    assert set(data["train"]["language"]) == {"en"}
    codec = RVQCodec.load(paths.codec)
    tok = PhonemeTokenizer.load(paths.tokenizer)
    for row in data["eval"].with_format("numpy"):
        codes = np.asarray(row["codes"])
        assert codes.ndim == 2 and codes.shape[1] == 16
        assert codes.shape[0] == len(row["phoneme_frames"]) == -(-round(row["duration"] * 16000) // 1280)
        assert codes.max() < codec.config.codebook_size
        assert (np.asarray(row["phoneme_frames"]) < tok.vocab_size).all()
    # the audio copy carries the same codes, and re-encoding its audio reproduces them
    runs = load_corpus(paths.runs_corpus, need_audio=True, need_codes=True)
    row = runs["calibration"].with_format("numpy")[0]
    assert np.array_equal(codec.encode(row["audio"]).numpy(), np.asarray(row["codes"]))
    assert np.array_equal(np.asarray(data["calibration"].with_format("numpy")[0]["codes"]), np.asarray(row["codes"]))
    q = manifest["steps"]["codec"]["result"]["quality"]["feature_snr_db"]
    assert float(q["16"]) > float(q["1"])
    assert paths.ready_flag.read_text().count("\n") == 1


def test_manifest_checksums_detect_tampering(toy, tmp_path):
    import shutil
    paths, manifest = toy
    verify_artifacts(paths.data)
    copy = tmp_path / "data"
    shutil.copytree(paths.data, copy)
    target = copy / "codec" / "codec.safetensors"
    blob = bytearray(target.read_bytes())
    blob[-1] ^= 0xFF
    target.write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match="codec.safetensors: sha256"):
        verify_artifacts(copy)
    target.unlink()
    with pytest.raises(ArtifactError, match="missing"):
        verify_artifacts(copy)
    shutil.rmtree(copy)
    shutil.copytree(paths.data, copy)
    (copy / "stray.txt").write_text("x")
    with pytest.raises(ArtifactError, match="stray.txt: not recorded"):
        verify_artifacts(copy)
    with pytest.raises(ArtifactError, match="no manifest"):
        verify_artifacts(tmp_path / "empty")


def test_parse_steps_and_missing_modules():
    assert parse_steps("codec,corpus") == ("corpus", "codec")
    with pytest.raises(ValueError, match="tokenize"):
        parse_steps("corpus,tokenize")
    with pytest.raises(BuildError, match="does not exist"):
        _import_step("rvqspec.mini.no_such_module", "train")
    with pytest.raises(BuildError, match="does not define"):
        _import_step("rvqspec.mini.paths", "train_nothing")


def test_load_corpus_errors(tmp_path):
    with pytest.raises(CorpusError, match="no corpus"):
        load_corpus(tmp_path / "none")
    (tmp_path / "junk").mkdir()
    with pytest.raises(CorpusError, match="cannot load"):
        load_corpus(tmp_path / "junk")


def test_cli_verify(toy):
    from typer.testing import CliRunner

    from rvqspec.cli import app
    paths, _ = toy
    res = CliRunner().invoke(app, ["mini", "verify", "--data", str(paths.data)])
    assert res.exit_code == 0 and "ok:" in res.output
    res = CliRunner().invoke(app, ["mini", "build", "--steps", "bogus", "--out-dir", str(paths.data)])
    assert res.exit_code == 2


def test_cli_evaluate_takes_languages():
    """`mini evaluate --lang` limits the free-running intelligibility to the languages asked for
    (the committed world, one sentence); an unknown language is one line and exit 2."""
    from typer.testing import CliRunner

    from rvqspec.cli import app
    data = REPO / "data" / "mini"
    if not (data / "manifest.json").is_file():
        pytest.skip("data/mini/manifest.json does not exist yet (run: rvqspec mini build)")
    res = CliRunner().invoke(app, ["mini", "evaluate", "--data", str(data), "--sentences", "1", "--lang", "de",
                                   "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])
    assert list(out["intelligibility"]) == ["de"] and out["intelligibility"]["de"]["n"] == 1
    assert out["config"]["languages"] == ["de"]
    bad = CliRunner().invoke(app, ["mini", "evaluate", "--data", str(data), "--lang", "xx"])
    assert bad.exit_code == 2
    assert bad.stderr.strip().splitlines() == ["error: --lang 'xx' is not a mini-world language (en, de, es, ru, ja, zh)"]


def _have(module):
    return importlib.util.find_spec(module) is not None


@pytest.mark.slow  # trains the toy recognizer and toy model: about 30 s
@pytest.mark.skipif(not (_have("rvqspec.mini.recognizer") and _have("rvqspec.mini.talker_train")),
                    reason="the recognizer / model training modules are not in the tree yet")
def test_toy_build_later_steps(toy):
    paths, _ = toy
    manifest = build(paths, BuildConfig(toy=True, steps=("recognizer", "model"), progress=False), log=lambda s: None)
    assert {"corpus", "codec", "recognizer", "model"} <= set(manifest["steps"])
    verify_artifacts(paths.data)


def test_committed_artifacts_match_manifest():
    data = REPO / "data" / "mini"
    if not (data / "manifest.json").is_file():
        pytest.skip("data/mini/manifest.json does not exist yet (run: rvqspec mini build)")
    manifest = verify_artifacts(data)
    assert manifest["toy"] is False
    assert manifest["total_bytes"] < 80e6  # the whole data/ budget (issue 14: data/ <= 80 MB)
    data_corpus = load_corpus(data / "corpus", need_codes=True)
    assert len(data_corpus["eval"]) > 0


def test_cli_say_writes_codec_round_trip(toy, tmp_path):
    import soundfile as sf
    from typer.testing import CliRunner

    from rvqspec.cli import app
    paths, _ = toy
    out = tmp_path / "say.wav"
    res = CliRunner().invoke(app, ["mini", "say", "Hello there, my friend.", "--lang", "en", "--out", str(out),
                                   "--codec", str(paths.codec)])
    assert res.exit_code == 0, res.output
    audio, sr = sf.read(out)
    assert sr == 16000 and len(audio) % 1280 == 0 and np.abs(audio).max() > 1e-3


def test_toy_build_refuses_to_overwrite_a_real_build(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"format": "rvqspec-mini-manifest", "version": 1, "toy": False,
                                                    "steps": {}}))
    with pytest.raises(BuildError, match="real"):
        build(MiniPaths.at(data, tmp_path / "runs"), BuildConfig(toy=True, progress=False), log=lambda s: None)
    assert not (tmp_path / "runs").exists()


def test_save_corpus_round_trips_many_rows_in_chunks(tmp_path):
    """More rows than one Arrow chunk (256) and a split written through its stream file: every row's
    arrays come back equal, in order, and no temporary file is left next to the corpus."""
    from rvqspec.mini.corpus import save_corpus

    rng = np.random.default_rng(0)
    rows = []
    for i in range(600):
        split = "model_train" if i < 530 else "eval"
        T = int(rng.integers(1, 9))
        rows.append({"id": f"{split}-{i}", "text": f"t{i}", "language": "en", "split": split, "duration": T * 0.08,
                     "audio": rng.standard_normal(int(rng.integers(1, 3000))).astype(np.float32),
                     "phoneme_frames": rng.integers(0, 50, T).astype(np.int32),
                     "codes": rng.integers(0, 256, (T, 16)).astype(np.uint8)})
    out = save_corpus(rows, tmp_path / "c", with_audio=True, codebook_size=256)
    dd = load_corpus(out, need_audio=True, need_codes=True)
    assert {s: len(d) for s, d in dd.items()} == {"model_train": 530, "eval": 70}
    got = [r for s in ("model_train", "eval") for r in dd[s].with_format("numpy")]
    for r, g in zip(rows, got):
        assert g["id"] == r["id"]
        np.testing.assert_array_equal(g["audio"], r["audio"])
        np.testing.assert_array_equal(g["phoneme_frames"], r["phoneme_frames"])
        np.testing.assert_array_equal(np.stack(g["codes"]), r["codes"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_model_trains_on_the_configured_splits(toy, tmp_path, monkeypatch):
    """`MiniModelConfig.train_splits` decides which corpus splits the model reads; a split the corpus
    lacks is named in the error."""
    from dataclasses import replace

    import rvqspec.mini.talker_train as tt

    paths, _ = toy
    read = []
    real = tt.load_split
    monkeypatch.setattr(tt, "load_split", lambda d, s: (read.append(s), real(d, s))[1])
    cfg = replace(tt.MiniModelConfig.toy(), steps=2, train_splits=("model_train", "train"))
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "m", config=cfg, tokenizer_path=paths.tokenizer)
    assert read[:2] == ["model_train", "train"]
    with pytest.raises(KeyError, match="no split 'nope'"):
        tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "m2", config=replace(cfg, train_splits=("nope",)),
                            tokenizer_path=paths.tokenizer)
    assert not (tmp_path / "m2").exists()


def test_world_of_a_model_is_the_world_it_sits_in(tmp_path):
    """The spec CLI's frames come from the model's own world (a candidate built with --out-dir
    beside the committed one); a model outside any world reads the committed data/mini."""
    from rvqspec.mini.frames import world_of
    from rvqspec.mini.pipeline import default_data_dir
    (tmp_path / "w" / "model").mkdir(parents=True)
    (tmp_path / "w" / "corpus").mkdir()
    assert world_of(tmp_path / "w" / "model") == default_data_dir()  # no dataset_dict.json: not a corpus
    (tmp_path / "w" / "corpus" / "dataset_dict.json").write_text("{}")
    assert world_of(tmp_path / "w" / "model") == tmp_path / "w"
    assert world_of(tmp_path / "elsewhere" / "model") == default_data_dir()
    assert world_of(None) == default_data_dir()


def test_candidate_world_script_checks_its_input_before_writing(tmp_path):
    script = REPO / "scripts" / "measure_candidate_world.sh"
    env = {"PATH": "/usr/bin:/bin", "W": str(tmp_path / "w"), "OUT": str(tmp_path / "out")}
    bad = subprocess.run(["bash", str(script), "spec", "bogus"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("unknown stage bogus (")
    missing = subprocess.run(["bash", str(script), "spec"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"{tmp_path / 'w' / 'data' / 'manifest.json'}: no candidate world there (set W)"
    assert not (tmp_path / "out").exists()


def test_recognizer_deep_gate_names_a_missing_world(tmp_path):
    script = REPO / "scripts" / "recognizer_deep_gate.sh"
    env = {"PATH": "/usr/bin:/bin", "W": str(tmp_path / "w"), "G": str(tmp_path / "g"), "OUT": str(tmp_path / "o.json")}
    bad = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"{tmp_path / 'w'}: no candidate world (data/manifest.json, runs/corpus) there (set W)"
    assert not (tmp_path / "g").exists() and not (tmp_path / "o.json").exists()


def test_model_step_refines_the_code_predictor_on_a_frozen_talker(toy, tmp_path):
    """`cp_refine_steps` trains only the code predictor after the joint steps: the talker's weights
    are the joint recipe's (same seed, same steps), the predictor's differ, and the metrics say so."""
    from dataclasses import replace

    import rvqspec.mini.talker_train as tt
    from rvqspec.core.checkpoint import load_qwen3_tts

    paths, _ = toy
    cfg = replace(tt.MiniModelConfig.toy(), steps=3)
    plain = tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "plain", config=cfg, tokenizer_path=paths.tokenizer)
    refined = tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "refined",
                                  config=replace(cfg, cp_refine_steps=4), tokenizer_path=paths.tokenizer)
    assert "cp_refine_steps" not in plain and refined["cp_refine_steps"] == 4 and refined["cp_refine_frames"] > 0
    a, b = load_qwen3_tts(tmp_path / "plain"), load_qwen3_tts(tmp_path / "refined")
    for (name, p), q in zip(a.talker.state_dict().items(), b.talker.state_dict().values()):
        assert torch.equal(p, q), name
    assert any(not torch.equal(p, q) for p, q in zip(a.code_predictor.state_dict().values(),
                                                      b.code_predictor.state_dict().values()))
    rec = json.loads((tmp_path / "refined" / "mini_model.json").read_text())
    assert rec["config"]["cp_refine_steps"] == 4


def test_talker_dropout_changes_training_and_is_recorded(toy, tmp_path):
    """`MiniModelConfig.talker_dropout` reaches the talker while it trains (same seed, same steps,
    other weights) and is recorded; the saved model loads with no dropout set."""
    from dataclasses import replace

    import rvqspec.mini.talker_train as tt
    from rvqspec.core.checkpoint import load_qwen3_tts

    paths, _ = toy
    cfg = replace(tt.MiniModelConfig.toy(), steps=3, text_parts=False)  # the plain table: the control
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "plain", config=cfg, tokenizer_path=paths.tokenizer)
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "drop", config=replace(cfg, talker_dropout=0.3),
                        tokenizer_path=paths.tokenizer)
    a, b = load_qwen3_tts(tmp_path / "plain"), load_qwen3_tts(tmp_path / "drop")
    assert any(not torch.equal(p, q) for p, q in zip(a.talker.state_dict().values(), b.talker.state_dict().values()))
    assert a.talker.residual_dropout == 0.0 and b.talker.residual_dropout == 0.0
    assert json.loads((tmp_path / "drop" / "mini_model.json").read_text())["config"]["talker_dropout"] == 0.3


def test_refining_a_saved_model_keeps_its_talker_and_records_the_steps(toy, tmp_path):
    """`rvqspec mini refine`: a trained model's predictor refined after the fact. The talker is the
    saved one bit for bit, the predictor moved, the saved model is untouched, the record adds up the
    steps; a missing folder is exit 2 with one line and writes nothing."""
    from dataclasses import replace

    from typer.testing import CliRunner

    import rvqspec.mini.talker_train as tt
    from rvqspec.cli import app
    from rvqspec.core.checkpoint import load_qwen3_tts

    paths, _ = toy
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "base", config=replace(tt.MiniModelConfig.toy(), steps=3),
                        tokenizer_path=paths.tokenizer)
    base_bytes = (tmp_path / "base" / "model.safetensors").read_bytes()
    res = CliRunner().invoke(app, ["mini", "refine", "--model", str(tmp_path / "base"), "--corpus", str(paths.corpus),
                                   "--steps", "3", "--out-dir", str(tmp_path / "r1")])
    assert res.exit_code == 0, res.output
    tt.refine_saved_model(tmp_path / "r1", paths.corpus, tmp_path / "r2", 2)
    a, b = load_qwen3_tts(tmp_path / "base"), load_qwen3_tts(tmp_path / "r2")
    for (name, p), q in zip(a.talker.state_dict().items(), b.talker.state_dict().values()):
        assert torch.equal(p, q), name
    assert any(not torch.equal(p, q) for p, q in zip(a.code_predictor.state_dict().values(),
                                                      b.code_predictor.state_dict().values()))
    assert (tmp_path / "base" / "model.safetensors").read_bytes() == base_bytes
    rec = json.loads((tmp_path / "r2" / "mini_model.json").read_text())
    assert rec["config"]["cp_refine_steps"] == 5 and rec["metrics"]["cp_refine_steps"] == 5
    assert rec["refined_from"] == str(tmp_path / "r1")
    tok = "phoneme_tokenizer.json"
    assert (tmp_path / "r2" / tok).read_text() == (tmp_path / "base" / tok).read_text()
    with pytest.raises(ValueError, match="new folder"):
        tt.refine_saved_model(tmp_path / "r2", paths.corpus, tmp_path / "r2", 1)

    bad = CliRunner().invoke(app, ["mini", "refine", "--model", str(tmp_path / "nope"), "--corpus", str(paths.corpus),
                                   "--steps", "1", "--out-dir", str(tmp_path / "r3")])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [f"error: --model: {tmp_path / 'nope' / 'mini_model.json'} does not exist"]
    assert not (tmp_path / "r3").exists()


def test_text_parts_training_saves_the_official_layout_with_a_parts_table(toy, tmp_path):
    """MiniModelConfig.text_parts: the saved checkpoint has the same tensors as a plain one, and its
    text table is (to float precision) a sum of quarter parts, which a plain table is not."""
    from dataclasses import replace

    import rvqspec.mini.talker_train as tt
    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.mini.text_parts import part_index

    paths, _ = toy
    cfg = replace(tt.MiniModelConfig.toy(), steps=3, text_parts=False)  # the plain table: the control
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "plain", config=cfg, tokenizer_path=paths.tokenizer)
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "parts", config=replace(cfg, text_parts=True),
                        tokenizer_path=paths.tokenizer)
    plain, parts = load_qwen3_tts(tmp_path / "plain"), load_qwen3_tts(tmp_path / "parts")
    sp, sq = plain.talker.state_dict(), parts.talker.state_dict()
    assert {k: v.shape for k, v in sp.items()} == {k: v.shape for k, v in sq.items()}
    idx, _ = part_index(PhonemeTokenizer.load(paths.tokenizer).tokens)
    a = torch.zeros(idx.shape[0], int(idx.max()) + 1, dtype=torch.float64).scatter_(1, idx, 1.0)  # (V, 4P)

    def off_span(w: torch.Tensor) -> float:  # share of the table outside the parts' span
        fit = a @ torch.linalg.lstsq(a, w, driver="gelsd").solution  # a is rank-deficient: SVD-based
        return float((w - fit).norm() / w.norm())

    assert off_span(sq["model.text_embedding.weight"].to(torch.float64)) < 1e-5
    assert off_span(sp["model.text_embedding.weight"].to(torch.float64)) > 1e-2  # negative control
    assert json.loads((tmp_path / "parts" / "mini_model.json").read_text())["config"]["text_parts"] is True


def test_build_options_carry_the_next_worlds_levers(tmp_path):
    """`mini build --points 4 --codebook-size N --text-parts --model-steps S --model-threads T` reaches
    the tokenizer, the codec and the model (each artifact records it); without the flags every config
    keeps its own default; a bad --points is one line and exit 2 before anything is written."""
    from typer.testing import CliRunner

    import rvqspec.mini.talker_train as tt
    from rvqspec.cli import app
    from rvqspec.mini.codec import CodecConfig
    from rvqspec.mini.text import CorpusConfig

    plain = BuildConfig(toy=True)
    assert plain.corpus_config() == CorpusConfig.toy()
    assert plain.codec_config().codebook_size == CodecConfig.toy().codebook_size
    assert plain.model_config(tt.MiniModelConfig) == tt.MiniModelConfig.toy()
    with pytest.raises(ValueError, match="tokenizer points must be one of"):
        BuildConfig(tokenizer_points=3)

    data, runs = tmp_path / "data", tmp_path / "runs"
    res = CliRunner().invoke(app, ["mini", "build", "--toy", "--points", "4", "--codebook-size", "24", "--text-parts",
                                   "--model-steps", "7", "--model-threads", "2", "--steps", "corpus,codec,model",
                                   "--out-dir", str(data), "--runs", str(runs)])
    assert res.exit_code == 0, res.output
    assert PhonemeTokenizer.load(data / "phoneme_tokenizer.json").points == 4
    assert RVQCodec.load(data / "codec").config.codebook_size == 24
    saved = json.loads((data / "model" / "mini_model.json").read_text())["config"]
    assert saved["text_parts"] is True
    toy_model = tt.MiniModelConfig.toy()
    assert (saved["steps"], saved["threads"]) == (7, 2) != (toy_model.steps, toy_model.threads)
    steps = json.loads((data / "manifest.json").read_text())["steps"]
    assert steps["corpus"]["config"]["corpus"]["tokenizer_points"] == 4
    assert steps["codec"]["config"]["codec"]["codebook_size"] == 24
    assert steps["model"]["config"]["text_parts"] is True
    assert verify_artifacts(data)["steps"]["codec"]["config"]["codec"]["codebook_size"] == 24  # raises if not

    bad = CliRunner().invoke(app, ["mini", "build", "--toy", "--points", "3", "--out-dir", str(tmp_path / "b"),
                                   "--runs", str(tmp_path / "br")])
    assert bad.exit_code == 2
    assert bad.stderr.strip().splitlines() == ["error: tokenizer points must be one of (2, 4), got 3"]
    assert not (tmp_path / "b").exists() and not (tmp_path / "br").exists()


def test_the_recognizer_trains_beside_the_model_only_when_the_model_has_one_thread():
    from rvqspec.mini.build import side_step

    both = ("corpus", "codec", "recognizer", "model")
    assert side_step(BuildConfig(), both) == "recognizer"
    assert side_step(BuildConfig(model_threads=1), both) == "recognizer"
    assert side_step(BuildConfig(model_threads=2), both) is None  # would oversubscribe two cores
    assert side_step(BuildConfig(parallel=False), both) is None
    assert side_step(BuildConfig(), ("recognizer",)) is None


def test_sound_weight_changes_the_talker_and_is_recorded(toy, tmp_path):
    """`MiniModelConfig.c0_sound_weight` adds the sound-level c0 term (rvqspec.mini.sound_groups):
    same seed and steps, other talker weights; 0 leaves the recipe as it was (the control)."""
    from dataclasses import replace

    import rvqspec.mini.talker_train as tt
    from rvqspec.core.checkpoint import load_qwen3_tts

    paths, _ = toy
    cfg = replace(tt.MiniModelConfig.toy(), steps=3)
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "plain", config=cfg, tokenizer_path=paths.tokenizer)
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "again", config=cfg, tokenizer_path=paths.tokenizer)
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "sound", config=replace(cfg, c0_sound_weight=2.0),
                        tokenizer_path=paths.tokenizer)
    a, a2, b = (load_qwen3_tts(tmp_path / n) for n in ("plain", "again", "sound"))
    assert all(torch.equal(p, q) for p, q in zip(a.talker.state_dict().values(), a2.talker.state_dict().values()))
    assert any(not torch.equal(p, q) for p, q in zip(a.talker.state_dict().values(), b.talker.state_dict().values()))
    assert json.loads((tmp_path / "sound" / "mini_model.json").read_text())["config"]["c0_sound_weight"] == 2.0


def test_codec_share_fits_on_the_language_share_and_guards_reuse(toy, tmp_path):
    """--codec-share en=0.5: the codec fits on every English model_train clip and as many others,
    records the selection, and a later --reuse-codec with another share is refused."""
    import shutil
    paths, _ = toy
    mine = MiniPaths.at(tmp_path / "data", tmp_path / "runs")
    shutil.copytree(paths.runs_corpus, mine.runs_corpus)
    shutil.copytree(paths.corpus, mine.corpus)
    shutil.copy(paths.tokenizer, mine.tokenizer)
    build(mine, BuildConfig(toy=True, steps=("codec",), progress=False, codec_share={"en": 0.5}), log=lambda s: None)
    fit = json.loads((mine.codec / "codec_config.json").read_text())["fit"]
    langs = load_corpus(paths.runs_corpus, need_audio=True)["model_train"]["language"]
    english = sum(lang == "en" for lang in langs)
    assert fit["share"] == {"en": 0.5} and fit["languages"]["en"] == english
    assert abs(sum(fit["languages"].values()) - 2 * english) <= len(fit["languages"])  # others: rounded equal shares
    with pytest.raises(BuildError, match="codec share"):
        build(mine, BuildConfig(toy=True, steps=("codec",), progress=False, reuse_codec=True), log=lambda s: None)


def test_the_model_takes_late_threads_at_its_fixed_step(toy, tmp_path, monkeypatch):
    """MiniModelConfig.late_threads: the thread count changes at late_threads_step, not before, and
    never without it (0); the switch is recorded in the config."""
    from dataclasses import replace

    import rvqspec.mini.talker_train as tt

    paths, _ = toy
    calls = []
    real = torch.set_num_threads
    monkeypatch.setattr(tt.torch, "set_num_threads", lambda n: (calls.append(n), real(1))[1])
    cfg = replace(tt.MiniModelConfig.toy(), steps=4, threads=1, late_threads=2, late_threads_step=3)
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "late", config=cfg, tokenizer_path=paths.tokenizer)
    assert calls == [1, 2]
    rec = json.loads((tmp_path / "late" / "mini_model.json").read_text())
    assert (rec["config"]["late_threads"], rec["config"]["late_threads_step"]) == (2, 3)
    calls.clear()
    tt.train_mini_model(paths.corpus, paths.codec, tmp_path / "plain", config=replace(cfg, late_threads=0),
                        tokenizer_path=paths.tokenizer)
    assert calls == [1]
