"""The mini RVQ codec (rvqspec.mini.codec): shapes, ranges, depth structure, files, errors."""
import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.mini.codec import (CodecConfig, CodecError, RVQCodec, cast_codec, codec_quality, kmeans,
                                mel_filterbank, reference_log_mel_db)
from rvqspec.mini.speech import synthesize

CFG = CodecConfig(codebook_size=8, num_codebooks=6, kmeans_iters=6, kmeans_init_sample=500, griffin_lim_iters=6)
TEXTS = [("The old man found a red book at the station.", "en"), ("Der Lehrer kauft heute einen Apfel.", "de"),
         ("Mi hermana lee un libro en casa.", "es")]


@pytest.fixture(scope="module")
def audios():
    return [synthesize(t, lang).audio for t, lang in TEXTS]  # about 7 s, ~90 frames


@pytest.fixture(scope="module")
def codec(audios):
    torch.set_num_threads(1)
    return RVQCodec(CFG).fit(audios, torch.Generator().manual_seed(0), progress=False)


def test_encode_decode_shapes_and_ranges(codec, audios):
    a = audios[0]
    codes = codec.encode(a)
    T = -(-len(a) // 1280)
    assert codes.shape == (T, CFG.num_codebooks) and codes.dtype == torch.long
    assert codes.min() >= 0 and codes.max() < CFG.codebook_size
    wav = codec.decode(codes)
    assert wav.dtype == np.float32 and wav.shape == (T * 1280,) and np.isfinite(wav).all()
    assert np.abs(wav).max() <= 1.0 and np.abs(wav).max() > 1e-3
    assert codec.decode(codes, num_codebooks=2).shape == wav.shape


def test_more_codebooks_reconstruct_better(codec, audios):
    feats = torch.cat([codec.features(a) for a in audios])
    x = (feats - codec.mean) / codec.std
    codes = codec.encode_features(feats)
    err = [((codec.decode_features(codes[:, :q]) - codec.mean) / codec.std - x).pow(2).mean().item()
           for q in range(1, CFG.num_codebooks + 1)]
    assert err[-1] < err[len(err) // 2] < err[0]
    assert all(b <= a * 1.001 for a, b in zip(err, err[1:]))  # residual stages never make it worse here
    # depth structure: later codebooks remove less error than the first
    gains = -np.diff([x.pow(2).mean().item()] + err)
    assert gains[0] > gains[-1]


def test_codec_quality_report(codec, audios):
    q = codec_quality(codec, audios, codebook_counts=(1, 2, 4, 6), decode_limit=1, progress=False)
    snr = q["feature_snr_db"]
    assert list(snr) == ["1", "2", "4", "6"] and snr["1"] < snr["2"] < snr["4"] < snr["6"]
    assert set(q["logmel_rmse_db"]) == {"vocoder_only", "4", "6"}
    assert all(0 < v < 40 for v in q["logmel_rmse_db"].values())


def test_decoded_audio_resembles_original(codec, audios):
    """The synthesis path keeps the spectral envelope: closer to its source than to another clip."""
    a, b = audios[0], audios[1]
    n = min(len(a), len(b))
    wav = codec.synthesize(codec.features(a[:n]))[:n]
    ref_a, ref_b = reference_log_mel_db(a[:n]), reference_log_mel_db(b[:n])
    hyp = reference_log_mel_db(wav, floor_db=ref_a.min().item())
    assert (hyp - ref_a).pow(2).mean() < 0.5 * (ref_b - ref_a).pow(2).mean()


def test_fit_is_deterministic(audios):
    c1 = RVQCodec(CFG).fit(audios[:2], torch.Generator().manual_seed(5), progress=False)
    c2 = RVQCodec(CFG).fit(audios[:2], torch.Generator().manual_seed(5), progress=False)
    assert torch.equal(c1.codebooks, c2.codebooks)


def test_kmeans_finds_separated_clusters():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = (centres[:, None, :] + 0.1 * torch.randn(3, 100, 2, generator=g)).reshape(-1, 2)  # (300, 2)
    c, log_prior = kmeans(x, 3, 10, torch.Generator().manual_seed(1))
    d = torch.cdist(centres, c).min(1).values
    assert (d < 0.1).all()
    torch.testing.assert_close(log_prior.exp(), torch.full((3,), 1 / 3))  # balanced clusters
    with pytest.raises(ValueError, match="at least k"):
        kmeans(x[:2], 3, 1, g)


def test_mel_filterbank_shape_and_coverage():
    fb = mel_filterbank(16000, 640, 40, 0.0, 8000.0)
    assert fb.shape == (40, 321) and (fb >= 0).all() and (fb.max(1).values > 0.5).all()


def test_save_load_round_trip(codec, audios, tmp_path):
    codec.save(tmp_path / "codec")
    loaded = RVQCodec.load(tmp_path / "codec")
    assert loaded.config == codec.config
    assert torch.equal(loaded.encode(audios[1]), codec.encode(audios[1]))


def test_cast_stores_rounded_codebooks_and_keeps_the_rest(codec, audios, tmp_path):
    src = codec.save(tmp_path / "src", extra={"fit": {"clips": 3, "seconds": 1.5}})
    res = CliRunner().invoke(app, ["mini", "cast", "--codec", str(src), "--dtype", "float16",
                                   "--out-dir", str(tmp_path / "f16")])
    assert res.exit_code == 0, res.output
    with safe_open(str(tmp_path / "f16" / "codec.safetensors"), framework="pt") as h:
        stored = {k: h.get_tensor(k) for k in h.keys()}
    assert stored["codebooks"].dtype == torch.float16
    assert stored["mean"].dtype == stored["std"].dtype == torch.float32  # only the bulk is rounded
    assert torch.equal(stored["codebooks"], codec.codebooks.to(torch.float16))
    # negative control: the fitted float32 codebooks are not float16-representable, so the copy rounds
    assert not torch.equal(stored["codebooks"].float(), codec.codebooks)
    meta = json.loads((tmp_path / "f16" / "codec_config.json").read_text())
    assert meta["fit"] == {"clips": 3, "seconds": 1.5}
    loaded = RVQCodec.load(tmp_path / "f16")
    assert loaded.config == codec.config and loaded.codebooks.dtype == torch.float32
    for a in audios:  # the rounding moves no code of the test speech
        assert torch.equal(loaded.encode(a), codec.encode(a))
    assert (src / "codec.safetensors").stat().st_size > (tmp_path / "f16" / "codec.safetensors").stat().st_size


def test_cast_bad_input_is_one_line_exit_2(codec, tmp_path):
    src = codec.save(tmp_path / "src")
    with pytest.raises(CodecError, match="must not replace"):
        cast_codec(src, src, torch.float16)
    runner = CliRunner()
    missing = runner.invoke(app, ["mini", "cast", "--codec", str(tmp_path / "none"), "--out-dir", str(tmp_path / "o")])
    assert missing.exit_code == 2 and "codec file missing" in missing.output
    assert "Traceback" not in missing.output
    bad = runner.invoke(app, ["mini", "cast", "--codec", str(src), "--dtype", "int8", "--out-dir", str(tmp_path / "o")])
    assert bad.exit_code == 2 and "--dtype 'int8'" in bad.output
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_load_errors_name_the_problem(codec, tmp_path):
    with pytest.raises(CodecError, match="missing"):
        RVQCodec.load(tmp_path / "nowhere")
    d = codec.save(tmp_path / "c")
    cfg = d / "codec_config.json"
    meta = json.loads(cfg.read_text())
    meta["config"]["codebook_size"] = 9  # no longer matches the tensors
    cfg.write_text(json.dumps(meta))
    with pytest.raises(CodecError, match="codebooks.*shape"):
        RVQCodec.load(d)
    meta["config"]["bogus"] = 1
    cfg.write_text(json.dumps(meta))
    with pytest.raises(CodecError, match="bogus"):
        RVQCodec.load(d)
    cfg.write_text("{")
    with pytest.raises(CodecError, match="codec_config.json"):
        RVQCodec.load(d)
    d2 = codec.save(tmp_path / "c2")
    (d2 / "codec.safetensors").write_bytes(b"garbage")
    with pytest.raises(CodecError, match="codec.safetensors"):
        RVQCodec.load(d2)


def test_bad_inputs(codec):
    with pytest.raises(CodecError, match="not fitted"):
        RVQCodec(CFG).encode(np.zeros(1280, np.float32))
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        codec.decode(torch.full((3, 6), 8))
    with pytest.raises(ValueError, match="shape"):
        codec.decode(torch.zeros(3, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D"):
        codec.encode(np.zeros((2, 1280), np.float32))
    with pytest.raises(CodecError, match="sub-frames"):
        RVQCodec(CodecConfig(subframes=3))


def _level_entropy(codes: torch.Tensor, k: int) -> np.ndarray:
    from _scripts import load_script

    ent, top1 = load_script("codec_rate_sweep").level_stats(codes.numpy(), k)
    assert all(0 <= t <= 1 for t in top1) and all(0 <= e <= np.log(k) + 1e-9 for e in ent)
    return np.array(ent)


def test_entropy_constrained_codec_skews_deep_levels(codec, audios, tmp_path):
    """rate_lambda > 0: the deep levels settle on a few frequent codes (lower entropy than plain
    k-means, the first level about unchanged), encoding pays the stored log frequencies, and the
    file round-trips; a lambda-0 codec is the control."""
    from dataclasses import replace

    ec = RVQCodec(replace(CFG, rate_lambda=0.02)).fit(audios, torch.Generator().manual_seed(0), progress=False)
    plain = torch.cat([codec.encode(a) for a in audios])  # (N, 6)
    skew = torch.cat([ec.encode(a) for a in audios])  # (N, 6)
    h_plain, h_skew = _level_entropy(plain, 8), _level_entropy(skew, 8)
    assert h_skew[3:].mean() < 0.7 * h_plain[3:].mean(), (h_plain, h_skew)
    assert abs(h_skew[0] - h_plain[0]) < 0.35, (h_plain, h_skew)
    assert ec.log_prior.shape == (6, 8) and torch.allclose(ec.log_prior.exp().sum(1), torch.ones(6), atol=1e-3)
    # the rate term changes assignments: encoding the same codebooks without it gives other codes
    no_rate = RVQCodec(replace(ec.config, rate_lambda=0.0), ec.codebooks, ec.mean, ec.std)
    assert not torch.equal(no_rate.encode(audios[0]), ec.encode(audios[0]))
    d = ec.save(tmp_path / "ec")
    loaded = RVQCodec.load(d)
    assert torch.equal(loaded.log_prior, ec.log_prior)
    assert torch.equal(loaded.encode(audios[1]), ec.encode(audios[1]))
    # a lambda > 0 codec file without its frequencies is refused by name
    from safetensors.torch import load_file, save_file

    t = load_file(str(d / "codec.safetensors"))
    del t["log_prior"]
    save_file(t, str(d / "codec.safetensors"))
    with pytest.raises(CodecError, match="log_prior"):
        RVQCodec.load(d)


def test_smallest_codewords_leave_level0_alone(codec, audios):
    silent = codec.smallest_codewords()
    assert silent.shape == (CFG.num_codebooks,)
    norms = codec.codebooks.norm(dim=-1)  # (Q, K)
    assert torch.equal(norms[torch.arange(CFG.num_codebooks), silent], norms.min(dim=-1).values)
    # c0 with the smallest residual codewords decodes nearer to c0's codeword than with any other residual
    c0 = codec.encode(audios[0])[:, :1]
    quiet = torch.cat([c0, silent[1:].expand(c0.shape[0], -1)], 1)
    loud = torch.cat([c0, norms[1:].argmax(dim=-1).expand(c0.shape[0], -1)], 1)
    alone = codec.decode_features(c0)
    assert (codec.decode_features(quiet) - alone).abs().mean() < (codec.decode_features(loud) - alone).abs().mean()


def test_assignment_matches_brute_force_distances():
    """The fused assignment (|c|^2 + cost - 2 x.c per chunk) picks the brute-force nearest centroid,
    with and without a rate cost, and returns plain squared distances, across chunk boundaries."""
    from rvqspec.mini.codec import _assign
    g = torch.Generator().manual_seed(3)
    x, c = torch.randn(300, 8, generator=g), torch.randn(20, 8, generator=g)  # (N, D), (K, D)
    cost = torch.rand(20, generator=g) * 4  # (K,)
    d = ((x[:, None, :] - c[None]) ** 2).sum(-1)  # (N, K)
    for k in (None, cost):
        idx, dist = _assign(x, c, chunk=64, cost=k)
        want = (d if k is None else d + k).argmin(1)
        assert torch.equal(idx, want)
        assert torch.allclose(dist, d.gather(1, want[:, None])[:, 0], atol=1e-4)
    assert not torch.equal(_assign(x, c, cost=cost)[0], d.argmin(1))  # the cost moves some codes
