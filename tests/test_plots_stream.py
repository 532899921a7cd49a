"""The streaming figures of the report (`rvqspec.workbench.plots`) on a hand-made bench result."""
from __future__ import annotations

import pytest

from rvqspec.workbench.plots import calls_budget, playback_schedule, stream_timeline

BENCH = {
    "ar": {"talker_calls_per_audio_s": 12.9, "predictor_calls_per_audio_s": 187.5},
    "spec": {"talker_calls_per_audio_s": 12.9, "predictor_calls_per_audio_s": 150.0},
    "seed_calls_per_audio_s": {"ar": 200.0, "spec": 88.0},
    "timeline_sentence": "hello",
    "timeline": {
        # playback starts at 0.1 s; chunk 2 is needed at 0.1 + 0.3 = 0.4 s but came at 0.5 s (late)
        "ar": [{"start_s": 0.0, "seconds": 0.3, "ready_s": 0.1, "frames": 4},
               {"start_s": 0.3, "seconds": 0.3, "ready_s": 0.5, "frames": 8},
               {"start_s": 0.6, "seconds": 0.2, "ready_s": 0.6, "frames": 10}],
        "spec": [{"start_s": 0.0, "seconds": 0.3, "ready_s": 0.2, "frames": 4},
                 {"start_s": 0.3, "seconds": 0.5, "ready_s": 0.3, "frames": 10}]},
}


def test_playback_schedule_marks_underruns():
    s = playback_schedule(BENCH["timeline"]["ar"])
    assert [round(c["needed_s"], 6) for c in s] == [0.1, 0.4, 0.7]
    assert [c["late_s"] > 0 for c in s] == [False, True, False]
    with pytest.raises(ValueError):
        playback_schedule([])


def test_stream_timeline_traces():
    fig = stream_timeline(BENCH)
    names = [t.name for t in fig.data]
    assert names == ["ar: chunk ready (1 late)", "ar: playback needs it", "spec: chunk ready (0 late)",
                     "spec: playback needs it"]
    assert list(fig.data[1].y) == pytest.approx([0.1, 0.4, 0.7])
    with pytest.raises(ValueError, match="timeline"):
        stream_timeline({"ar": {}})


def test_calls_budget_bars_sum_to_the_budgets():
    fig = calls_budget(BENCH)
    talker, predictor = fig.data
    totals = dict(zip(talker.x, [a + b for a, b in zip(talker.y, predictor.y)]))
    assert totals["seed 000 AR"] == 200.0 and totals["seed 000 spec"] == 88.0
    assert totals["mini ar (measured)"] == pytest.approx(200.4)
    assert totals["mini spec (measured)"] == pytest.approx(162.9)
