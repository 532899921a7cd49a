"""The codec's phonetic level 0 (CodecConfig.level0_lda): Fisher-discriminant directions against the
phoneme token at fit time, label-free encoding, the plain RVQ sum for decoding; and the build option
`rvqspec mini build --level0-lda`."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.mini.codec import WEIGHTS_FILE, CodecConfig, CodecError, RVQCodec, lda_basis
from rvqspec.mini.corpus import load_corpus

HOP = 1280  # samples per 80 ms frame at 16 kHz
TONES = (300.0, 700.0, 1500.0, 3000.0)  # the "phonemes": one tone per frame
SMALL = dict(codebook_size=4, num_codebooks=3, kmeans_iters=8, kmeans_init_sample=500, griffin_lim_iters=4)


def utterance(rng: np.random.Generator, frames: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """A frame-wise tone (the label) under broadband noise whose level varies over 30 dB from frame to
    frame: the noise level is the larger source of feature variance, the tone the one that matters."""
    labels = rng.integers(len(TONES), size=frames)  # (T,)
    t = np.arange(HOP) / 16000
    segs = [0.02 * np.sin(2 * np.pi * TONES[k] * t + rng.uniform(0, 2 * np.pi))
            + 10 ** rng.uniform(-3.5, -0.5) * rng.standard_normal(HOP) for k in labels]
    return np.concatenate(segs).astype(np.float32), labels  # (T * HOP,), (T,)


def purity(codes: torch.Tensor, labels: np.ndarray) -> float:
    """Share of frames whose c0 cell's majority label is their own label."""
    table = np.zeros((int(codes[:, 0].max()) + 1, len(TONES)))
    np.add.at(table, (codes[:, 0].numpy(), labels), 1)
    return float(table.max(1).sum() / table.sum())


@pytest.fixture(scope="module")
def tone_world():
    torch.set_num_threads(1)
    train = [utterance(np.random.default_rng(i)) for i in range(12)]
    test = [utterance(np.random.default_rng(100 + i)) for i in range(4)]
    fits = {}
    for key, d, split in ((0, 0, False), (3, 3, False), ("split", 3, True)):
        cfg = CodecConfig(**SMALL, level0_lda=d, level0_split=split)
        fits[key] = RVQCodec(cfg).fit([a for a, _ in train], torch.Generator().manual_seed(0), progress=False,
                                      labels=[lab for _, lab in train] if d else None)
    return fits, test


def test_lda_basis_finds_the_discriminant_direction_and_whitens():
    g = torch.Generator().manual_seed(0)
    n, D = 4000, 6
    labels = torch.randint(0, 3, (n,), generator=g)
    x = torch.randn(n, D, generator=g) * torch.tensor([1.0, 5.0, 5.0, 1.0, 1.0, 1.0])  # loud nuisance dims 1, 2
    x[:, 3] += 2.0 * labels  # the classes differ along dim 3 only
    basis = lda_basis(x, labels, 2)  # (D, 2)
    top = basis[:, 0] / basis[:, 0].norm()
    assert abs(float(top[3])) > 0.95
    # within-class covariance is the identity in the projected space (up to the ridge)
    z = x @ basis
    within = z - torch.stack([z[labels == k].mean(0) for k in range(3)])[labels]
    cov = within.T @ within / n
    assert torch.allclose(cov, torch.eye(2), atol=0.05)
    # negative control: labels unrelated to x give no direction with dim 3 singled out
    shuffled = lda_basis(x, torch.randint(0, 3, (n,), generator=g), 1)[:, 0]
    assert abs(float(shuffled[3] / shuffled.norm())) < 0.9


def test_level0_cells_follow_the_label_not_the_loudest_variance(tone_world):
    fits, test = tone_world
    labels = np.concatenate([lab for _, lab in test])
    pur = {d: purity(torch.cat([codec.encode(a) for a, _ in test]), labels) for d, codec in fits.items() if d != "split"}
    # measured: plain 0.43 (the noise level splits the cells), discriminant 0.90; chance is 0.25
    assert pur[3] >= 0.8
    assert pur[0] <= 0.6, "negative control: plain k-means level 0 should not follow the tone"


def test_level0_codeword_is_the_mean_of_its_frames_and_decoding_is_the_rvq_sum(tone_world):
    fits, test = tone_world
    codec = fits[3]
    assert codec.level0_basis.shape == (codec.config.code_dim, 3)
    assert codec.level0_centroids.shape == (4, 3)
    codes = codec.encode(test[0][0])  # (T, 3)
    x = sum(codec.codebooks[q][codes[:, q]] for q in range(3))  # (T, D)
    assert torch.allclose(codec.decode_features(codes), codec.destandardize(x), atol=1e-5)
    # residual levels still reduce the error below level 0 alone
    feats = codec.standardize(codec.features(test[0][0]))
    e0 = (feats - codec.codebooks[0][codes[:, 0]]).pow(2).mean()
    assert (feats - x).pow(2).mean() < e0


def test_split_level0_keeps_residuals_out_of_the_discriminant_span(tone_world, tmp_path):
    """level0_split: the residual codewords have no component in span(level0_basis), so any residual
    codes, right or wrong, leave the frame's discriminant coordinates where c0 put them; the plain
    level-0 codec's residuals move them (the negative control)."""
    fits, test = tone_world
    split, plain = fits["split"], fits[3]
    for codec, moves in ((split, False), (plain, True)):
        along = codec.codebooks[1:] @ codec.level0_basis  # (Q-1, K, d) discriminant coordinates of residual codewords
        scale = (codec.codebooks[0] @ codec.level0_basis).abs().max()
        assert (along.abs().max() / scale > 1e-3) == moves  # measured: split ~1e-7, plain 0.03
    # c0 and the discriminant coordinates are the same with true or scrambled residual codes
    codes = split.encode(test[0][0])  # (T, 3)
    scrambled = codes.clone()
    scrambled[:, 1:] = torch.randint(0, 4, scrambled[:, 1:].shape, generator=torch.Generator().manual_seed(1))
    z = lambda c: split.standardize(split.decode_features(c)) @ split.level0_basis  # (T, d)
    assert torch.allclose(z(codes), z(scrambled), atol=1e-3)
    # the residual levels still lower the error below level 0 alone, and the flag survives save/load
    feats = split.standardize(split.features(test[0][0]))
    x = sum(split.codebooks[q][codes[:, q]] for q in range(3))  # (T, D)
    assert (feats - x).pow(2).mean() < (feats - split.codebooks[0][codes[:, 0]]).pow(2).mean()
    split.save(tmp_path / "s")
    back = RVQCodec.load(tmp_path / "s")
    assert back.config.level0_split and torch.equal(back.encode(test[0][0]), codes)
    with pytest.raises(CodecError, match="level0_split needs level0_lda > 0"):
        CodecConfig(level0_split=True).validate()


def test_level0_codec_saves_loads_and_encodes_identically(tone_world, tmp_path):
    codec = tone_world[0][3]
    codec.save(tmp_path / "c")
    back = RVQCodec.load(tmp_path / "c")
    assert back.config.level0_lda == 3
    audio = tone_world[1][0][0]
    assert torch.equal(back.encode(audio), codec.encode(audio))
    # a codec saved without the key (every codec before level0_lda existed) loads as plain level 0
    tone_world[0][0].save(tmp_path / "plain")
    meta = json.loads((tmp_path / "plain" / "codec_config.json").read_text())
    del meta["config"]["level0_lda"]
    (tmp_path / "plain" / "codec_config.json").write_text(json.dumps(meta))
    assert RVQCodec.load(tmp_path / "plain").config.level0_lda == 0


def test_level0_errors_name_the_problem(tone_world, tmp_path):
    audios = [a for a, _ in tone_world[1]]
    with pytest.raises(ValueError, match="level0_lda 3 needs one phoneme-frame label array per audio"):
        RVQCodec(CodecConfig(**SMALL, level0_lda=3)).fit(audios, progress=False)
    with pytest.raises(ValueError, match="codec frames against"):
        RVQCodec(CodecConfig(**SMALL, level0_lda=3)).fit(audios, progress=False,
                                                          labels=[lab[:-1] for _, lab in tone_world[1]])
    with pytest.raises(CodecError, match="level0_lda 999 must lie in"):
        CodecConfig(level0_lda=999).validate()
    tone_world[0][3].save(tmp_path / "c")
    tensors = load_file(str(tmp_path / "c" / WEIGHTS_FILE))
    del tensors["level0_centroids"]
    save_file(tensors, str(tmp_path / "c" / WEIGHTS_FILE))
    with pytest.raises(CodecError, match="'level0_centroids' missing"):
        RVQCodec.load(tmp_path / "c")


def test_build_option_fits_a_phonetic_level0_and_records_it(tmp_path):
    data, runs = tmp_path / "data", tmp_path / "runs"
    res = CliRunner().invoke(app, ["mini", "build", "--toy", "--level0-lda", "4", "--out-dir", str(data),
                                   "--runs", str(runs), "--steps", "corpus,codec"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["steps"]["codec"]["config"]["codec"]["level0_lda"] == 4
    codec = RVQCodec.load(data / "codec")
    row = load_corpus(runs / "corpus", need_audio=True)["eval"][0]
    assert np.array_equal(codec.encode(np.asarray(row["audio"], dtype=np.float32)).numpy(), np.asarray(row["codes"]))
    bad = CliRunner().invoke(app, ["mini", "build", "--toy", "--level0-lda", "9999", "--out-dir", str(data),
                                   "--runs", str(runs), "--steps", "codec"])
    assert bad.exit_code == 2
    assert "level0_lda 9999 must lie in [0, code_dim=" in bad.output
