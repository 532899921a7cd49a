"""`rvqspec.stream` on a tiny random official Qwen3-TTS model under `rvqspec.accelerate` (fake text
processor; speech tokenizers of known receptive field stand in for the 12 Hz decoder)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rvqspec
from _tiny_official import LANGUAGE, SPEAKER, tiny_official, wrapper
from rvqspec.core.tree import SparseTree
from rvqspec.mini.stream import StreamTrace
from rvqspec.real.official_pipeline import accelerate
from rvqspec.real.stream import WindowDecoder

TREE = SparseTree([(0,), (1,), (0, 0)])
SPF = 4  # samples per frame of the fake decoders


class ReachTokenizer:
    """A causal decoder whose frame t sounds like a function of frames t-reach..t: samples
    sin(sum of the codes in that span * (k + 1)), k = 0..SPF-1. Its receptive field is `reach`."""

    def __init__(self, reach: int):
        self.reach = reach

    def decode(self, items):
        c = torch.as_tensor(items[0]["audio_codes"]).double()  # (W, 16)
        s = c.sum(1)  # (W,)
        cs = torch.cat([s.new_zeros(1), s.cumsum(0)])  # (W + 1,)
        t = torch.arange(len(s))
        span = cs[t + 1] - cs[(t - self.reach).clamp_min(0)]  # (W,) sum of frames t-reach..t
        wav = torch.sin(span[:, None] * torch.arange(1, SPF + 1)[None, :] * 0.01)  # (W, SPF)
        return [wav.flatten().float().numpy()], 24000


def whole(tok, codes):
    return tok.decode([{"audio_codes": codes}])[0][0]


@pytest.mark.parametrize("chunk", [1, 3])
def test_window_decoder_exact_within_its_reach_and_not_beyond(chunk):
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (23, 16), generator=g)
    tok = ReachTokenizer(reach=5)
    for left, exact in [(5, True), (25, True), (4, False)]:
        dec = WindowDecoder(tok, left_context=left)
        got = np.concatenate([dec.push(codes[i:i + chunk]) for i in range(0, len(codes), chunk)])
        assert len(got) == len(codes) * SPF
        assert np.array_equal(got, whole(tok, codes)) == exact, (left, chunk)


@pytest.fixture(scope="module")
def official():
    torch.set_num_threads(1)
    model = tiny_official(seed=0)
    w = wrapper(model)
    model.speech_tokenizer = ReachTokenizer(reach=3)
    return model, w


def test_stream_of_an_accelerated_official_model(official):
    model, w = official
    model.tts_model_type = "custom_voice"
    kw = dict(speaker=SPEAKER, language=LANGUAGE, do_sample=False, subtalker_dosample=False, max_new_tokens=14)
    with accelerate(w, None, TREE) as h:
        ref, _ = w.generate_custom_voice("hello world", **kw)  # whole-utterance decode
        tr = StreamTrace()
        chunks = list(rvqspec.stream(h, call=lambda: w.generate_custom_voice("hello world", **kw), chunk_frames=3,
                                     trace=tr))
        assert h.frame_listeners == []
    got = np.concatenate([c.audio for c in chunks])
    assert len(tr.frames) > 3 and len(got) == len(tr.frames) * SPF
    np.testing.assert_array_equal(got, ref[0])  # reach 3 <= left context 25: exact
    np.testing.assert_array_equal(tr.__dict__["result"][0][0], ref[0])
    assert chunks[-1].final and [c.start for c in chunks] == [3 * SPF * i for i in range(len(chunks))]
    assert chunks[0].sample_rate == 24000


def test_stream_needs_an_active_handle_and_a_call(official):
    model, w = official
    h = accelerate(w, None, TREE)
    with pytest.raises(ValueError, match="call="):
        rvqspec.stream(h)
    h.restore()
    with pytest.raises(ValueError, match="restored"):
        next(rvqspec.stream(h, call=lambda: None))
    with pytest.raises(TypeError, match="MiniTTS"):
        rvqspec.stream(object(), "hi")
