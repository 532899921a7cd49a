"""The recognizer's phoneme head: toy training, decoding, save/load, old artifacts without it, and
PER through `rvqspec asr testset` and `rvqspec wer --json`."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.mini.phonemes import text_phonemes
from rvqspec.mini.recognizer import (RecognizerConfig, greedy_decode_phonemes, intelligibility_score,
                                     save_recognizer, train_on_utterances)
from rvqspec.mini.recognizer import load_recognizer as load_ctc
from rvqspec.mini.speech import synthesize
from rvqspec.real.asr import DEFAULT_RECOGNIZER, load_recognizer

torch.set_num_threads(1)
TEXTS = {"en": ["the cat sat.", "a red box.", "the dog ran.", "a cat ran."], "ja": ["ねこです。", "いぬです。"]}


@pytest.fixture(scope="module")
def rows():
    return [{"text": t, "language": lang, "audio": synthesize(t, lang).audio}
            for lang, texts in TEXTS.items() for t in texts]


@pytest.fixture(scope="module")
def trained(rows, tmp_path_factory):
    config = dataclasses.replace(RecognizerConfig.toy(), epochs=8, lr=5e-3)
    model, vocab, metrics = train_on_utterances(rows, rows[:2], config, progress=False)
    out = save_recognizer(model, vocab, tmp_path_factory.mktemp("rec") / "rec", metrics)
    return model, vocab, metrics, out


def test_phoneme_inventory_comes_from_espeak_per_language(trained):
    _, vocab, metrics, _ = trained
    en = {p for t in TEXTS["en"] for p in text_phonemes(t, "en")}
    ja = {p for t in TEXTS["ja"] for p in text_phonemes(t, "ja")}
    assert set(vocab.phoneme_languages["en"]) == en and set(vocab.phoneme_languages["ja"]) == ja
    assert vocab.phonemes[0] == "<blank>" and metrics["phoneme_vocab_size"] == len(vocab.phonemes)
    mask = vocab.phoneme_mask("ja")
    assert int(mask.sum()) == len(ja) + 1
    assert vocab.phoneme_mask("xx") is None
    assert "per" in metrics["heldout"]["en"]  # held-out PER in the training summary
    assert metrics["final_loss"] < metrics["first_loss"]


def test_greedy_phoneme_decoding_keeps_multichar_symbols(trained):
    _, vocab, _, _ = trained
    names = vocab.phonemes[1:4]
    seq = [0, 1, 1, 0, 2, 3, 3, 0]
    log_probs = torch.full((1, len(seq), len(vocab.phonemes)), -10.0)
    log_probs[0, torch.arange(len(seq)), torch.tensor(seq)] = 0.0
    assert greedy_decode_phonemes(log_probs, torch.tensor([len(seq)]), vocab) == [names]


def test_round_trip_and_both_outputs_from_one_pass(trained, rows):
    model, vocab, _, out = trained
    rec = load_recognizer(out)
    assert rec.has_phonemes
    audios = [r["audio"] for r in rows]
    texts, phonemes = rec.transcribe_both(audios, 16000, "en")
    assert texts == rec.transcribe(audios, 16000, "en")  # the character output is unchanged
    allowed = set(vocab.phoneme_languages["en"])
    assert len(phonemes) == len(rows) and all(set(p) <= allowed for p in phonemes)
    loaded = load_ctc(out)
    assert loaded.transcribe_phonemes(audios[:2], "en") == phonemes[:2]
    s = intelligibility_score([r["text"] for r in rows[:4]], texts[:4], "en", phonemes[:4])
    assert 0.0 <= s["per"] and s["ref_phonemes"] == sum(len(text_phonemes(r["text"], "en")) for r in rows[:4])


def test_character_only_artifacts_still_work(rows, tmp_path):
    config = dataclasses.replace(RecognizerConfig.toy(), epochs=1, phoneme_weight=0.0)
    model, vocab, metrics = train_on_utterances(rows, [], config, progress=False)
    assert model.phoneme_head is None and not vocab.phonemes and metrics["phoneme_vocab_size"] == 0
    rec = load_recognizer(save_recognizer(model, vocab, tmp_path / "rec"))
    assert not rec.has_phonemes and len(rec.transcribe([rows[0]["audio"]], 16000, "en")) == 1
    with pytest.raises(ValueError, match="no phoneme head"):
        rec.model.transcribe_both([rows[0]["audio"]], "en")
    assert intelligibility_score(["a cat"], ["a cat"], "en")["per"] is None


@pytest.mark.skipif(not (DEFAULT_RECOGNIZER / "vocab.json").is_file(), reason="no committed recognizer")
def test_committed_recognizer_has_a_phoneme_head_and_spells_with_the_lexicon():
    rec = load_recognizer(DEFAULT_RECOGNIZER)
    assert rec.has_phonemes
    assert rec.decoding_for("en") == "lexicon" and rec.decoding_for("ja") == "greedy"


def test_asr_testset_command_reports_per(trained, tmp_path):
    out_json = tmp_path / "rows.json"
    result = CliRunner().invoke(app, ["asr", "testset", "--recognizer", str(trained[3]), "--lang", "ja",
                                      "--json", "--out", str(out_json)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout[result.stdout.index("["):])
    assert [(r["language"], r["condition"]) for r in rows] == [("ja", "clean")]
    assert rows[0]["n"] >= 10 and 0.0 <= rows[0]["per"] and rows[0]["counts"]["ref_phonemes"] > 100
    assert json.loads(out_json.read_text())["rows"] == rows
    bad = CliRunner().invoke(app, ["asr", "testset", "--recognizer", str(trained[3]), "--lang", "fr"])
    assert bad.exit_code == 2 and "'fr'" in bad.output
    missing = CliRunner().invoke(app, ["asr", "testset", "--recognizer", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "nowhere" in missing.output and "Traceback" not in missing.output


_DATA = DEFAULT_RECOGNIZER.parent


@pytest.mark.skipif(not (_DATA / "model").is_dir(), reason="no committed mini model")
def test_wer_json_reports_per_next_to_wer_and_cer(trained, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat.\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["wer", "--texts", str(texts), "--lang", "en", "--recognizer",
                                      str(trained[3]), "--json"])
    assert result.exit_code == 0, result.output
    res = json.loads(result.stdout[result.stdout.index("{"):])
    assert {"per", "wer", "cer"} <= set(res) and res["per"] is not None and res["per"] >= 0
    assert "phonemes" in res["clips"][0] and res["clips"][0]["ref_phonemes"] == len(text_phonemes("the cat sat.", "en"))
