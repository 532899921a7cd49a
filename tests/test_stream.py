"""Streaming synthesis on the committed mini world (`rvqspec.mini.stream`): the incremental codec
decoder against the whole-utterance decode, and the stream's codes against `MiniTTS.synthesize`."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from rvqspec.core.drafters import load_drafter
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.mini.codec import reference_log_mel_db
from rvqspec.mini.pipeline import MiniTTS, default_data_dir
from rvqspec.mini.stream import (TOLERANCE_DB, TOLERANCE_FACTOR, StreamConfig, StreamingDecoder, StreamTrace,
                                 stream_mini)

SENTENCES = [("The quick brown fox jumps over the lazy dog.", "en"), ("Guten Morgen, wie geht es dir heute?", "de")]


@pytest.fixture(scope="module")
def tts():
    torch.set_num_threads(1)
    return MiniTTS.load()


@pytest.fixture(scope="module")
def codes(tts):
    return [tts.synthesize(t, lang, seed=0, decode=False).codes for t, lang in SENTENCES]


def logmel_distance(a: np.ndarray, ref: np.ndarray) -> float:
    """dB RMS between the 80-band log-mel spectrograms, on the reference's 60 dB floor."""
    r = reference_log_mel_db(ref)
    h = reference_log_mel_db(a, floor_db=r.min().item())
    return float((h - r).pow(2).mean().sqrt())


def run_decoder(codec, codes: torch.Tensor, config: StreamConfig) -> tuple[list[np.ndarray], StreamingDecoder]:
    dec = StreamingDecoder(codec, config)
    outs = [dec.push(codes[i:i + config.chunk_frames]) for i in range(0, len(codes), config.chunk_frames)]
    outs.append(dec.flush())
    return outs, dec


def test_magnitude_is_exact_and_length_matches(tts, codes):
    c = tts.codec.config
    for cd in codes:
        outs, dec = run_decoder(tts.codec, cd, StreamConfig(chunk_frames=3, peak_limit=False))
        assert sum(len(o) for o in outs) == len(cd) * c.hop
        T = len(cd)
        lm = tts.codec.decode_features(cd).reshape(T * c.subframes, c.n_mels)
        whole = tts.codec.magnitude(lm, 0, tts.codec.synthesis_columns(T), T * c.subframes)
        assert dec.mag.shape == whole.shape
        torch.testing.assert_close(dec.mag, whole, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("chunk_frames", [1, 4])
def test_stream_equals_whole_decode_within_tolerance(tts, codes, chunk_frames):
    """The stated tolerance: log-mel distance <= 1.5 x (whole decode vs whole decode with another
    initial phase) + 0.5 dB. Negative control: the same chunks played in reverse order fail it."""
    other = copy.copy(tts.codec)
    other.config = dataclasses.replace(tts.codec.config, seed=1)
    for cd in codes:
        whole = tts.codec.decode(cd, peak_limit=False)
        floor = logmel_distance(other.decode(cd, peak_limit=False), whole)
        tol = TOLERANCE_FACTOR * floor + TOLERANCE_DB
        outs, _ = run_decoder(tts.codec, cd, StreamConfig(chunk_frames=chunk_frames, peak_limit=False))
        got = np.concatenate(outs)
        assert len(got) == len(whole)
        d = logmel_distance(got, whole)
        assert d <= tol, (d, tol)
        shuffled = np.concatenate([o for o in outs[::-1]])
        assert logmel_distance(shuffled, whole) > tol


def test_peak_gain_is_causal_and_limits(tts, codes):
    for cd in codes:
        outs, dec = run_decoder(tts.codec, cd, StreamConfig())
        raw, _ = run_decoder(tts.codec, cd, StreamConfig(peak_limit=False))
        got, ref = np.concatenate(outs), np.concatenate(raw)
        assert np.abs(got).max() <= 0.99 + 1e-6
        # the last chunk plays at the gain the whole decoder uses for the stream's own samples
        assert dec.gain == pytest.approx(min(1.0, 0.99 / np.abs(ref).max()), rel=1e-5)
        # and no chunk is louder relative to the raw samples than the one before it
        gains = [np.abs(o).max() / max(np.abs(r).max(), 1e-9) for o, r in zip(outs, raw) if len(o)]
        assert all(b <= a + 1e-4 for a, b in zip(gains, gains[1:]))


@pytest.mark.parametrize("threaded", [False, True])
def test_stream_speaks_the_same_codes_as_synthesize(tts, codes, threaded):
    text, lang = SENTENCES[0]
    tr = StreamTrace()
    chunks = list(stream_mini(tts, text, lang, seed=0, config=StreamConfig(threaded=threaded), trace=tr))
    assert torch.equal(tr.codes, codes[0])
    assert chunks[-1].final and not any(c.final for c in chunks[:-1])
    starts = [c.start for c in chunks]
    assert starts[0] == 0 and all(a.start + len(a.audio) == b.start for a, b in zip(chunks, chunks[1:]))
    assert sum(len(c.audio) for c in chunks) == len(codes[0]) * tts.codec.config.hop
    assert len(chunks) > 2 and chunks[0].frames < len(codes[0])  # audio came out before the end
    assert [c.ready_s for c in chunks] == sorted(c.ready_s for c in chunks)
    assert len(tr.frame_ready_s) == len(codes[0]) == tr.stats.frames


def test_speculative_stream_matches_speculative_synthesize(tts):
    d = default_data_dir()
    spec = SpeculativeCodePredictor(tts.code_predictor, load_drafter(d / "drafters" / "offsets.safetensors"),
                                    SparseTree.load(d / "trees" / "offsets_n16.json"))
    text, lang = SENTENCES[1]
    ref = tts.synthesize(text, lang, seed=3, inner=spec, decode=False)
    tr = StreamTrace()
    list(stream_mini(tts, text, lang, seed=3, inner=spec, trace=tr))
    assert torch.equal(tr.codes, ref.codes)
    assert tr.stats.inner_calls == ref.stats.inner_calls < 15 * ref.stats.frames


def test_bad_stream_config(tts):
    for bad, word in [(dict(chunk_frames=0), "chunk_frames"), (dict(lookahead_columns=1), "lookahead_columns"),
                      (dict(crossfade=10_000), "crossfade")]:
        with pytest.raises(ValueError, match=word):
            StreamingDecoder(tts.codec, StreamConfig(**bad))


def test_top_level_stream_dispatches_to_the_mini_pipeline(tts, codes):
    import rvqspec

    text, lang = SENTENCES[0]
    tr = StreamTrace()
    chunks = list(rvqspec.stream(tts, text, lang, chunk_frames=2, seed=0, trace=tr))
    assert torch.equal(tr.codes, codes[0])
    assert chunks[0].frames == 2 and sum(len(c.audio) for c in chunks) == len(codes[0]) * tts.codec.config.hop
    with pytest.raises(ValueError, match="text"):
        rvqspec.stream(tts)
