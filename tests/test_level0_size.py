"""A level 0 larger than the residual levels (CodecConfig.level0_codebook_size): the codec fits,
encodes, stores and checks per-level sizes; the model's talker names c0 among level 0's codes
while the code predictor keeps codebook_size; a toy world builds and speaks with it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.mini import talker_train as tt
from rvqspec.mini.codec import CodecConfig, CodecError, RVQCodec, cast_codec
from rvqspec.mini.speech import synthesize
from rvqspec.mini.talker_train import NUM_SPECIAL_CODEC_TOKENS

CFG = CodecConfig(codebook_size=8, level0_codebook_size=32, num_codebooks=6, kmeans_iters=6,
                  kmeans_init_sample=500, griffin_lim_iters=6)


@pytest.fixture(scope="module")
def audios():
    return [synthesize(t, lang).audio for t, lang in [("The old man found a red book at the station.", "en"),
                                                      ("Der Lehrer kauft heute einen Apfel.", "de")]]


@pytest.fixture(scope="module")
def codec(audios):
    torch.set_num_threads(1)
    return RVQCodec(CFG).fit(audios, torch.Generator().manual_seed(0), progress=False)


def test_level_sizes_and_codes(codec, audios):
    assert CFG.level_sizes == (32, 8, 8, 8, 8, 8) and CodecConfig(codebook_size=8).level_sizes[0] == 8
    assert [tuple(cb.shape) for cb in codec.codebooks] == [(32, 256)] + [(8, 256)] * 5
    codes = torch.cat([codec.encode(a) for a in audios])  # (T, 6)
    assert codes[:, 0].max() >= 8 and codes[:, 0].max() < 32  # level 0 uses codes beyond the residual size
    assert codes[:, 1:].max() < 8
    assert codec.decode(codes[:40]).shape == (40 * 1280,)
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 8\), c0 in \[0, 32\), got \[0, 32\]"):
        codec.check_codes(torch.tensor([[32, 0, 0]]))
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 8\), c0 in \[0, 32\)"):
        codec.check_codes(torch.tensor([[9, 8, 0]]))
    codec.check_codes(torch.tensor([[31, 7, 7]]))  # the largest legal codes pass
    with pytest.raises(CodecError, match="level0_codebook_size 1 must be 0"):
        CodecConfig(level0_codebook_size=1).validate()


def test_store_load_and_cast_keep_the_codes(codec, audios, tmp_path):
    codec.save(tmp_path / "c")
    again = RVQCodec.load(tmp_path / "c")
    assert torch.equal(again.encode(audios[0]), codec.encode(audios[0]))
    cast_codec(tmp_path / "c", tmp_path / "h", torch.float16)
    half = RVQCodec.load(tmp_path / "h")
    assert [cb.shape for cb in half.codebooks] == [cb.shape for cb in codec.codebooks]
    assert (half.encode(audios[0]) == codec.encode(audios[0])).float().mean() > 0.95
    # a file whose level-0 tensor disagrees with the config is named
    from safetensors.torch import load_file, save_file
    tensors = load_file(str(tmp_path / "c" / "codec.safetensors"))
    tensors["level0_codebook"] = tensors["level0_codebook"][:16]
    save_file(tensors, str(tmp_path / "c" / "codec.safetensors"))
    with pytest.raises(CodecError, match=r"tensor 'level0_codebook' has shape \(16, 256\), config says \(32, 256\)"):
        RVQCodec.load(tmp_path / "c")


def test_random_history_draws_c0_from_level0_and_keeps_the_uniform_stream():
    codes = torch.zeros(4, 50, 16, dtype=torch.long)
    wide = tt.corrupt_history(codes, 8, 1.0, 1.0, torch.Generator().manual_seed(0), level0_size=40)
    assert wide[..., 0].max() >= 8 and wide[..., 0].max() < 40 and wide[..., 1:].max() < 8
    plain = tt.corrupt_history(codes, 8, 0.5, 0.5, torch.Generator().manual_seed(0))
    same = tt.corrupt_history(codes, 8, 0.5, 0.5, torch.Generator().manual_seed(0), level0_size=8)
    assert torch.equal(plain, same)  # a level 0 of the same size draws exactly as before


def test_model_config_splits_the_vocabularies():
    q = tt.model_config(tt.MiniModelConfig.toy(), 50, 8, 32)
    assert q.talker.vocab_size == 32 + NUM_SPECIAL_CODEC_TOKENS and q.talker.codec_pad_id == 32
    assert q.code_predictor.vocab_size == 8
    assert tt.model_config(tt.MiniModelConfig.toy(), 50, 8).talker.vocab_size == 8 + NUM_SPECIAL_CODEC_TOKENS


@pytest.mark.slow  # a toy world through corpus, codec and 5 model steps: about 20 s
def test_toy_world_builds_and_speaks_with_a_larger_level0(tmp_path):
    from rvqspec.mini.build import verify_artifacts
    from rvqspec.mini.pipeline import MiniTTS

    data, runs = tmp_path / "data", tmp_path / "runs"
    res = CliRunner().invoke(app, ["mini", "build", "--toy", "--level0-codebook-size", "40", "--model-steps", "5",
                                   "--steps", "corpus,codec,model", "--out-dir", str(data), "--runs", str(runs)])
    assert res.exit_code == 0, res.output
    codec = RVQCodec.load(data / "codec")
    assert codec.config.level_sizes[:2] == (40, 16)
    saved = json.loads((data / "model" / "mini_model.json").read_text())
    assert (saved["codebook_size"], saved["level0_codebook_size"]) == (16, 40)
    verify_artifacts(data)
    tts = MiniTTS.load(data)
    assert tts.codebook_size == 40 and tts.code_predictor.config.vocab_size == 16
    assert tts.talker.config.vocab_size == 40 + NUM_SPECIAL_CODEC_TOKENS
    out = tts.synthesize("A red book.", "en", seed=0)
    assert out.codes[:, 0].max() < 40 and out.codes[:, 1:].max() < 16 and np.isfinite(out.audio).all()
