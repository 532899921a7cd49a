"""The report's first sentence (rvqspec.workbench.report.verdict): computed from the run's
wall-clock rows, the fastest drafter first, a ratio below 1 called a slowdown."""
from __future__ import annotations

from rvqspec.workbench.report import speed_phrase, verdict


def _results(rows, main="offsets"):
    return {"wallclock": {"N": 4, "main_drafter": main, "rows": rows},
            "drafters": [{"name": r["drafter"], "tokens_per_call": r["tokens_per_call"]} for r in rows]}


def _row(drafter, ratio, tpc, n=4):
    return {"drafter": drafter, "N": n, "frames": 60, "ratio": ratio, "tokens_per_call": tpc}


def test_fastest_drafter_leads_and_the_seeds_offsets_stand_beside_it():
    text = verdict(_results([_row("offsets", 0.93, 1.1), _row("medusa", 1.71, 2.4)]))
    assert text.startswith("Verdict: on this machine the speculative inner loop (medusa drafter, N = 4) ran at 1.71x")
    assert "a speed-up" in text and "the offsets drafter ran at 0.93x" in text and "a slowdown" in text
    assert "medusa 2.40" in text and "offsets 1.10" in text


def test_offsets_fastest_is_named_once():
    text = verdict(_results([_row("offsets", 1.2, 2.0), _row("medusa", 1.1, 2.1)]))
    assert "(offsets drafter" in text and "the offsets drafter ran" not in text


def test_slowdown_is_called_a_slowdown():
    assert speed_phrase(0.73).endswith("a slowdown") and speed_phrase(1.6).endswith("a speed-up")
    text = verdict(_results([_row("offsets", 0.73, 1.03)]))
    assert "0.73x the speed of autoregressive decoding, a slowdown" in text


def test_no_rows_says_why():
    text = verdict({"wallclock": {"rows": []}, "steps": {"wallclock": {"note": "no trees"}}})
    assert text == "Verdict: no wall-clock measurement in this run (no trees)."
