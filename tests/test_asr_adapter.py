"""rvqspec.real.asr.TransformersASR plumbing on a tiny randomly initialised wav2vec2 CTC checkpoint.

No real weights exist here (no hub), so the checks are about the adapter, not accuracy: it loads
a local `save_pretrained` directory offline, returns one string per input, resamples to the
feature extractor's rate, passes Whisper its language, and names a bad path in its error.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from rvqspec.real.asr import Recognizer, TransformersASR, load_recognizer, resample


@pytest.fixture(scope="module")
def tiny_wav2vec2(tmp_path_factory):
    import torch
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor,
                              Wav2Vec2ForCTC, Wav2Vec2Processor)

    path = tmp_path_factory.mktemp("tiny_wav2vec2")
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{ch: i + 3 for i, ch in enumerate("abcdefghij")}}
    (path / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(str(path / "vocab.json"), pad_token="<pad>", unk_token="<unk>",
                                     word_delimiter_token="|")
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                         do_normalize=True, return_attention_mask=True)
    config = Wav2Vec2Config(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=32, conv_dim=(16, 16),
                            conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=2, pad_token_id=0, do_stable_layer_norm=True,
                            feat_extract_norm="layer")
    torch.manual_seed(0)
    model = Wav2Vec2ForCTC(config)
    # a bias towards letter "a" makes the random model emit text, so empty strings would be noticed
    with torch.no_grad():
        model.lm_head.bias[vocab["a"]] += 5.0
    model.save_pretrained(path)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(path)
    return path


def _tone(seconds: float, rate: int, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)  # (num_samples,)


def test_one_string_per_input(tiny_wav2vec2, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asr = TransformersASR(tiny_wav2vec2, batch_size=2)
    assert isinstance(asr, Recognizer)
    audios = [_tone(0.5, 16000), _tone(1.2, 16000, 330.0), _tone(0.3, 16000, 440.0)]
    texts = asr.transcribe(audios, 16000, "en")
    assert len(texts) == 3 and all(isinstance(t, str) for t in texts)
    assert all(t for t in texts), texts  # the biased head emits letters
    assert asr.transcribe([], 16000, "en") == []
    assert asr.generate_kwargs("en") == {}  # CTC models take no language


def test_resamples_to_the_feature_extractor_rate(tiny_wav2vec2):
    asr = TransformersASR(tiny_wav2vec2)
    seen = []
    real = asr.pipe

    def spy(inputs, **kwargs):
        seen.extend(inputs)
        return real(inputs, **kwargs)

    asr.pipe = spy
    texts = asr.transcribe([_tone(1.0, 8000), _tone(0.5, 16000)], 8000, "en")
    assert len(texts) == 2
    # 1 s at 8 kHz -> 16000 samples; 0.5 s *declared* as 8 kHz -> 16000 samples too
    assert [len(x) for x in seen] == [16000, 16000]
    assert all(x.dtype == np.float32 for x in seen)
    # resampling keeps the tone's frequency: the spectral peak of the upsampled 220 Hz tone
    up = resample(_tone(1.0, 8000), 8000, 16000)
    assert abs(np.argmax(np.abs(np.fft.rfft(up))) * 16000 / len(up) - 220.0) < 2.0


LANGS = ("en", "de", "es", "ru", "ja", "zh")


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    """A random 1-layer Whisper with a letters-only byte-level BPE tokenizer and the special tokens
    (language, task, no-timestamps) that Whisper's generate needs to be told a language."""
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor, WhisperTokenizer)

    path = tmp_path_factory.mktemp("tiny_whisper")
    vocab = {t: i for i, t in enumerate([chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ"])}
    specials = ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{lang}|>" for lang in LANGS],
                "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                "<|notimestamps|>"]
    for tok in specials:
        vocab[tok] = len(vocab)
    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    eot = vocab["<|endoftext|>"]
    tokenizer = WhisperTokenizer(str(path / "vocab.json"), str(path / "merges.txt"), unk_token="<|endoftext|>",
                                 bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": specials[1:]})
    config = WhisperConfig(vocab_size=len(vocab), num_mel_bins=16, d_model=16, encoder_layers=1,
                           decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                           encoder_ffn_dim=32, decoder_ffn_dim=32, max_source_positions=1500,
                           max_target_positions=32, decoder_start_token_id=vocab["<|startoftranscript|>"],
                           eos_token_id=eot, pad_token_id=eot, bos_token_id=eot)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=vocab["<|startoftranscript|>"], eos_token_id=eot, pad_token_id=eot,
        max_length=12, is_multilingual=True, lang_to_id={f"<|{lang}|>": vocab[f"<|{lang}|>"] for lang in LANGS},
        task_to_id={"transcribe": vocab["<|transcribe|>"], "translate": vocab["<|translate|>"]},
        no_timestamps_token_id=vocab["<|notimestamps|>"], begin_suppress_tokens=[], suppress_tokens=[])
    model.save_pretrained(path)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=16),
                     tokenizer=tokenizer).save_pretrained(path)
    return path


def test_whisper_gets_its_language(tiny_whisper):
    asr = TransformersASR(tiny_whisper, batch_size=2)
    assert asr.model_type == "whisper" and asr.sampling_rate == 16000
    seen = {}
    generate = asr.pipe.model.generate

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return generate(*args, **kwargs)

    asr.pipe.model.generate = spy
    gen = np.random.default_rng(0)
    audios = [(0.1 * gen.standard_normal(12000)).astype(np.float32), _tone(0.4, 24000)]
    texts = asr.transcribe(audios, 24000, "ja")
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert seen.get("language") == "ja" and seen.get("task") == "transcribe"


def test_bad_paths_error_clearly(tmp_path, tiny_wav2vec2):
    with pytest.raises(FileNotFoundError, match="not a local transformers model directory"):
        TransformersASR(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "empty")):
        (tmp_path / "empty").mkdir()
        load_recognizer(tmp_path / "empty")
    assert isinstance(load_recognizer(tiny_wav2vec2), TransformersASR)
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        resample(np.zeros((2, 3), np.float32), 8000, 16000)
