"""Codec targets for the mini world v2 gates: the R1 code space of RVQCodec (global scaling, cepstral
liftering, smoothing across sub-frames) and the R3 learned codec (rvqspec.mini.learned_codec)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rvqspec.mini.codec import CodecConfig, CodecError, RVQCodec, dct_basis
from rvqspec.mini.learned_codec import LearnedCodec, LearnedCodecConfig, load_codec
from rvqspec.mini.speech import synthesize

TEXTS = [("The old man found a red book at the station.", "en"), ("Der Lehrer kauft heute einen Apfel.", "de"),
         ("Mi hermana lee un libro en casa.", "es")]
R1 = CodecConfig(codebook_size=8, num_codebooks=6, kmeans_iters=6, kmeans_init_sample=500, griffin_lim_iters=6,
                 scaling="global", lifter=20, subframe_keep=3)


@pytest.fixture(scope="module")
def audios():
    torch.set_num_threads(1)
    return [synthesize(t, lang).audio for t, lang in TEXTS]


@pytest.fixture(scope="module")
def r1_codec(audios):
    return RVQCodec(R1).fit(audios, torch.Generator().manual_seed(0), progress=False)


def test_dct_basis_is_orthonormal():
    b = dct_basis(64, 64).double()
    assert torch.allclose(b @ b.T, torch.eye(64, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(dct_basis(64, 20), dct_basis(64, 64)[:20])


def test_full_bases_round_trip_exactly(audios):
    c = RVQCodec(CodecConfig(lifter=64, subframe_keep=4))
    f = c.features(audios[0])  # (T, 256)
    assert c.config.code_dim == c.config.feature_dim
    assert torch.allclose(c.unproject(c.project(f)), f, atol=1e-3)
    plain = RVQCodec(CodecConfig())  # defaults: identity code space, the committed codec's layout
    assert plain.mel_basis is None and plain.time_basis is None and torch.equal(plain.project(f), f)


def test_liftering_keeps_the_envelope_and_drops_fine_structure():
    c = RVQCodec(CodecConfig(lifter=20))
    m = torch.arange(64, dtype=torch.float32)
    smooth = torch.cos(np.pi * (m + 0.5) * 3 / 64).repeat(4).view(1, -1)  # a low-order envelope, 4 sub-frames
    ripple = torch.tensor([1.0, -1.0]).repeat(32).repeat(4).view(1, -1)  # band-to-band texture
    kept = lambda x: float(c.unproject(c.project(x)).norm() / x.norm())
    assert kept(smooth) > 0.99
    assert kept(ripple) < 0.1


def test_subframe_smoothing_removes_jitter_across_subframes():
    c = RVQCodec(CodecConfig(subframe_keep=2))
    base = torch.randn(1, 1, 64, generator=torch.Generator().manual_seed(0))
    steady = base.expand(1, 4, 64).reshape(1, -1)
    jitter = (base * torch.tensor([1.0, -1.0, 1.0, -1.0]).view(1, 4, 1)).reshape(1, -1)
    back = lambda x: c.unproject(c.project(x))
    assert torch.allclose(back(steady), steady, atol=1e-4)
    assert float(back(jitter).norm() / jitter.norm()) < 0.5


def test_r1_codec_fits_encodes_and_round_trips(r1_codec, audios, tmp_path):
    assert R1.code_dim == 3 * 20 and r1_codec.codebooks.shape == (6, 8, 60)
    assert torch.unique(r1_codec.std).numel() == 1  # one global scale
    codes = r1_codec.encode(audios[0])
    assert codes.shape[1] == 6 and codes.min() >= 0 and codes.max() < 8
    wav = r1_codec.decode(codes)
    assert np.isfinite(wav).all() and np.abs(wav).max() > 1e-3
    # quantization error falls with depth in the code space
    x = r1_codec.standardize(r1_codec.features(audios[0]))
    err = [float((x - r1_codec.standardize(r1_codec.decode_features(codes[:, :q]))).pow(2).mean()) for q in (1, 6)]
    assert err[1] < err[0]
    r1_codec.save(tmp_path / "c")
    assert torch.equal(RVQCodec.load(tmp_path / "c").encode(audios[0]), codes)


def test_r1_config_errors_name_the_key(r1_codec, tmp_path):
    with pytest.raises(CodecError, match="lifter"):
        CodecConfig(lifter=65).validate()
    with pytest.raises(CodecError, match="scaling"):
        CodecConfig(scaling="loud").validate()
    with pytest.raises(CodecError, match="subframe_keep"):
        CodecConfig(subframe_keep=5).validate()
    r1_codec.save(tmp_path / "c")
    meta = json.loads((tmp_path / "c" / "codec_config.json").read_text())
    meta["config"]["lifter"] = 30  # the saved codebooks are 60 wide, this config says 90
    (tmp_path / "c" / "codec_config.json").write_text(json.dumps(meta))
    with pytest.raises(CodecError, match="codebooks"):
        RVQCodec.load(tmp_path / "c")


def test_committed_codec_still_loads():
    d = Path(__file__).resolve().parents[1] / "data" / "mini" / "codec"
    if not (d / "codec.safetensors").is_file():
        pytest.skip("no committed codec in this checkout")
    c = load_codec(d)
    assert isinstance(c, RVQCodec) and c.config.code_dim == c.config.feature_dim


# ------------------------------------------------------------------------------------ learned codec
@pytest.fixture(scope="module")
def learned(audios):
    cfg = LearnedCodecConfig.toy(num_phonemes=5)
    c0 = RVQCodec(cfg.analysis)
    g = np.random.default_rng(0)
    labels = [g.integers(0, 5, c0.num_frames(len(a))) for a in audios]
    return LearnedCodec(cfg).fit(audios, labels, torch.Generator().manual_seed(0), progress=False), labels


def test_learned_codec_shapes_and_depth(learned, audios):
    codec, _ = learned
    codes = codec.encode(audios[0])
    assert codes.shape == (codec.frontend.num_frames(len(audios[0])), 16) and codes.dtype == torch.long
    assert codes.min() >= 0 and codes.max() < 16
    wav = codec.decode(codes)
    assert wav.shape == (codes.shape[0] * 1280,) and np.isfinite(wav).all()
    # deeper levels refine the latent: the quantization residual shrinks with depth
    with torch.no_grad():
        z = codec._latent(codec.frontend.features(audios[0])[None])[0]
    res = [float((z - codec._quantize(z, q)[0]).pow(2).mean()) for q in (1, 4, 16)]
    assert res[0] > res[1] > res[2]


def test_learned_codec_keeps_deep_codes_in_use(learned, audios):
    codec, _ = learned
    codes = torch.cat([codec.encode(a) for a in audios])  # (N, 16)
    used = [int(torch.unique(codes[:, q]).numel()) for q in range(16)]
    assert min(used) >= 4, used  # dead-code resets: no level collapses onto a handful of codes


def test_learned_codec_save_load_and_dispatch(learned, audios, tmp_path):
    codec, _ = learned
    codec.save(tmp_path / "lc")
    back = load_codec(tmp_path / "lc")
    assert isinstance(back, LearnedCodec) and back.config == codec.config
    assert torch.equal(back.encode(audios[1]), codec.encode(audios[1]))
    np.testing.assert_allclose(back.decode(codec.encode(audios[1])), codec.decode(codec.encode(audios[1])), atol=1e-5)
    with pytest.raises(CodecError, match="format"):
        RVQCodec.load(tmp_path / "lc")


def test_learned_codec_bad_input(learned, audios):
    codec, labels = learned
    with pytest.raises(ValueError, match="frames"):
        LearnedCodec(codec.config).fit(audios[:1], [labels[0][:-1]], progress=False)
    with pytest.raises(ValueError, match="num_phonemes"):
        LearnedCodec(codec.config).fit(audios[:1], [labels[0] + 10], progress=False)
    with pytest.raises(ValueError, match="codes must"):
        codec.decode(torch.full((3, 16), 99))
    with pytest.raises(CodecError, match="not fitted"):
        LearnedCodec(codec.config).encode(audios[0])
