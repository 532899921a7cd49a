"""Codebooks larger than 256 (the real tokenizer's 2,048 per level; scripts/level0_gate.py
--codebook-size): the corpus stores their codes as int16 and gives them back exactly, and a codec
fitted with such a size emits codes above 255."""
import numpy as np
import pyarrow as pa
import pytest
import torch

from rvqspec.mini.codec import CodecConfig, RVQCodec
from rvqspec.mini.corpus import _codes_type, codes_dtype, load_corpus, save_corpus


def rows(codebook_size: int, rng: np.random.Generator) -> list[dict]:
    out = []
    for i in range(3):
        t = int(rng.integers(2, 6))
        out.append(dict(id=f"u{i}", text="a b", language="en", split="eval", duration=0.08 * t,
                        phoneme_frames=rng.integers(1, 9, size=t).astype(np.int32),
                        codes=rng.integers(0, codebook_size, size=(t, 16)).astype(np.int64)))  # (T, 16)
    return out


@pytest.mark.parametrize("size,dtype", [(256, pa.uint8()), (257, pa.int16()), (2048, pa.int16())])
def test_the_code_type_holds_every_code(size, dtype):
    assert _codes_type(size) == dtype
    # the numpy type every encoder casts to is the stored one, and it holds the largest code exactly
    assert pa.from_numpy_dtype(codes_dtype(size)) == dtype
    assert int(np.asarray([size - 1]).astype(codes_dtype(size))[0]) == size - 1


def test_codes_above_255_come_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    want = rows(2048, rng)
    want[0]["codes"][0, :] = 2047  # the largest code, which uint8 would wrap
    save_corpus(want, tmp_path / "c", with_audio=False, codebook_size=2048)
    got = load_corpus(tmp_path / "c", need_codes=True)["eval"]
    assert len(got) == len(want)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g["codes"], dtype=np.int64), w["codes"])
    assert max(int(np.asarray(g["codes"]).max()) for g in got) == 2047


def test_a_codec_with_more_than_256_codes_uses_codes_above_255():
    rng = np.random.default_rng(1)
    audios = [(0.1 * rng.standard_normal(1280 * 200)).astype(np.float32) * rng.uniform(0.01, 1.0)
              for _ in range(8)]  # 1,600 frames of noise at eight levels
    cfg = CodecConfig(codebook_size=300, num_codebooks=2, kmeans_iters=3, kmeans_init_sample=1600,
                      griffin_lim_iters=2, rate_lambda=0.0)
    codec = RVQCodec(cfg).fit(audios, torch.Generator().manual_seed(0), progress=False)
    codes = torch.cat([codec.encode(a) for a in audios])  # (1600, 2)
    assert codes.shape == (1600, 2)
    assert int(codes.max()) > 255 and int(codes.max()) < 300


def _stream_bytes(table: pa.Table, compression: str | None) -> int:
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(table)
    return out.getvalue().size


def test_the_committed_copy_is_compressed_and_reads_back_exactly(tmp_path):
    """Without audio (data/mini/corpus) the Arrow files are zstd-compressed and load_corpus gives the
    same rows; the audio copy (runs/, memory-mapped) stays uncompressed. Codes with nearly
    deterministic deep levels shrink, which is what the committed data budget relies on."""
    rng = np.random.default_rng(2)
    want = []
    for i in range(20):
        t = 200
        codes = rng.integers(0, 1024, size=(t, 16)).astype(np.int64)  # (T, 16)
        codes[:, 4:] = 7  # the deep levels: one code nearly everywhere
        want.append(dict(id=f"u{i}", text="a b", language="en", split="eval", duration=0.08 * t,
                         phoneme_frames=rng.integers(1, 9, size=t).astype(np.int32), codes=codes,
                         audio=rng.standard_normal(1280 * t).astype(np.float32)))
    save_corpus(want, tmp_path / "data", with_audio=False, codebook_size=1024)
    save_corpus(want, tmp_path / "runs", with_audio=True, codebook_size=1024)
    for folder, compressed in (("data", True), ("runs", False)):
        (f,) = (tmp_path / folder).rglob("*.arrow")
        with pa.OSFile(str(f), "rb") as src:
            table = pa.ipc.open_stream(src).read_all()
        size = f.stat().st_size
        # the file is as small as its zstd stream, not as large as its plain one (or the reverse)
        plain, zstd = _stream_bytes(table, None), _stream_bytes(table, "zstd")
        assert compressed is False or zstd < 0.6 * plain  # codes only: the deep levels compress
        assert (abs(size - zstd) < abs(size - plain)) is compressed, (folder, size, plain, zstd)
    got = load_corpus(tmp_path / "data", need_codes=True)["eval"]
    assert [g["id"] for g in got] == [w["id"] for w in want]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g["codes"], dtype=np.int64), w["codes"])
        np.testing.assert_array_equal(np.asarray(g["phoneme_frames"]), w["phoneme_frames"])
