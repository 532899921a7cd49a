"""Listening A/B (rvqspec.workbench.listening): pairs from the real AR and speculative frame loops on tiny
random models, WER/CER per clip, spectrograms, and the blind mode driven programmatically."""
from __future__ import annotations

import json
import wave
import io

import numpy as np
import pytest
import torch

from rvqspec.workbench.listening import (AR, SPEC, BlindTest, ab_figure, make_pairs, pairs_table, simulate_picks,
                               spectrogram_figure, wav_bytes)

from _fake_world import FakeRecognizer, FakeTTS, spec_inner

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pairs():
    tts = FakeTTS()
    return make_pairs(tts, [("hello world", "en"), ("hola mundo", "es")], seeds=[0, 1, 2],
                      inner=spec_inner(tts), recognizer=FakeRecognizer(), progress=False)


def test_pairs_are_ar_vs_speculative_with_scores(pairs):
    assert len(pairs) == 6
    for p in pairs:
        assert p.ar.label == AR and p.spec.label == SPEC
        assert p.ar.text == p.spec.text == p.text and p.ar.seed == p.spec.seed == p.seed
        assert p.ar.tokens_per_call == 1.0, "the AR inner loop makes one call per code"
        assert 1.0 <= p.spec.tokens_per_call <= 7.5
        # fake recognizer says "fake transcript": WER against 2-word references is 1.0 (2 subs)
        assert p.ar.wer == pytest.approx(1.0) and 0 < p.ar.cer <= 1.5
        assert len(p.ar.audio) == len(p.spec.audio), "same text -> same frame count"
    assert max(p.spec.tokens_per_call for p in pairs) > 1.0, "some draft was accepted"
    rows = pairs_table(pairs)
    assert {r["language"] for r in rows} == {"en", "es"} and all(r["spec_hypothesis"] for r in rows)


def test_make_pairs_rejects_missing_inner():
    with pytest.raises(ValueError, match="speculative inner"):
        make_pairs(FakeTTS(), [("a", "en")], seeds=[0], inner=None)


def test_wav_bytes_are_valid_pcm16(pairs):
    data = wav_bytes(pairs[0].ar.audio, pairs[0].ar.sample_rate)
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000 and w.getsampwidth() == 2
        assert w.getnframes() == len(pairs[0].ar.audio)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        wav_bytes(np.zeros((2, 3)), 16000)


def test_spectrograms(pairs):
    fig = spectrogram_figure(pairs[0].spec)
    z = np.asarray(fig.data[0].z)
    assert z.shape[0] == 80 and abs(z.shape[1] - len(pairs[0].spec.audio) / 160) <= 2
    assert np.isfinite(z).all() and z.max() - z.min() <= 60.0 + 1e-3  # 60 dB floor under the peak
    fig2 = ab_figure(pairs[0])
    assert len(fig2.data) == 2 and fig2.data[0].zmin == fig2.data[1].zmin


def test_blind_mode_shuffles_reproducibly_and_reveals(pairs, tmp_path):
    t1, t2 = BlindTest(list(pairs), seed=7), BlindTest(list(pairs), seed=7)
    assert t1.spec_is_a == t2.spec_is_a
    orders = {tuple(BlindTest(list(pairs), seed=s).spec_is_a) for s in range(20)}
    assert len(orders) > 1, "the generator must actually shuffle"
    for i in range(len(t1)):
        a, b = t1.trial(i)
        assert {a.label, b.label} == {AR, SPEC}
        assert (a.label == SPEC) == (t1.truth(i) == "A")
    p = t1.pick(0, "a")
    assert p.choice == "A" and p.correct == (t1.truth(0) == "A")
    with pytest.raises(ValueError, match="already answered"):
        t1.pick(0, "B")
    with pytest.raises(ValueError, match="'A' or 'B'"):
        t1.pick(1, "C")
    with pytest.raises(IndexError):
        t1.trial(len(t1))
    simulate_picks(t1, seed=1)
    s = t1.summary()
    assert s["answered"] == s["trials"] == len(pairs)
    assert s["correct"] == sum(pk.correct for pk in t1.picks.values())
    assert 0.0 <= s["p_value_vs_chance"] <= 1.0
    out = t1.save(tmp_path / "blind" / "choices.json")
    saved = json.loads(out.read_text())
    assert len(saved["picks"]) == len(pairs) and saved["summary"] == s
    assert [pk["truth"] for pk in saved["picks"]] == ["A" if x else "B" for x in t1.spec_is_a]


def test_simulated_perfect_listener_is_detected(pairs):
    t = BlindTest(list(pairs) * 3, seed=0)
    simulate_picks(t, seed=0, p_correct=1.0)
    s = t.summary()
    assert s["accuracy"] == 1.0 and s["p_value_vs_chance"] < 0.001
    t = BlindTest(list(pairs) * 3, seed=0)
    simulate_picks(t, seed=0, p_correct=0.0)
    assert t.summary()["accuracy"] == 0.0
