"""The HTML report in a real headless Chromium (Debian's /usr/bin/chromium through playwright's Python
package): the page renders, every plotly figure is drawn, every audio element loads.

The report comes from a small fixture results dict with real figures (real trees, masks, curves)
and real WAVs (the AR and speculative frame loops on tiny random models), so this stays fast; the
full `rvqspec demo` renders through the same `render_report`. `.ci/run` installs chromium, so CI
never skips; locally the test skips only when chromium is absent.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from rvqspec.workbench.demo import Demo, DemoConfig, step_spade
from rvqspec.workbench.listening import make_pairs, wav_bytes
from rvqspec.workbench.report import render_report
from rvqspec.core.tree import SparseTree

from _fake_world import FakeRecognizer, FakeTTS, spec_inner

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--autoplay-policy=no-user-gesture-required"]

torch.set_num_threads(1)


def fixture_results(out: Path) -> dict:
    """A results dict shaped like `rvqspec demo`'s, with real WAVs written under out/audio."""
    acc = np.array([[0.55, 0.2, 0.08, 0.04], [0.45, 0.15, 0.06, 0.03], [0.35, 0.1, 0.05, 0.02]])
    budgets = [2, 4, 8, 16]
    trees = {n: SparseTree.grow(acc, budget=n, max_depth=3) for n in budgets}
    tts = FakeTTS()
    pairs = make_pairs(tts, [("the quick brown fox", "en")], seeds=[0], inner=spec_inner(tts),
                       recognizer=FakeRecognizer(), progress=False)
    (out / "audio").mkdir(parents=True, exist_ok=True)
    ab = []
    for k, p in enumerate(pairs):
        item = {"text": p.text, "language": p.language, "seed": p.seed}
        for side, clip in (("ar", p.ar), ("spec", p.spec)):
            name = f"audio/{k}_{side}.wav"
            (out / name).write_bytes(wav_bytes(clip.audio, clip.sample_rate))
            item[side] = {"wav": name, "tokens_per_call": clip.tokens_per_call, "wer": clip.wer, "cer": clip.cer,
                          "hypothesis": clip.hypothesis}
        ab.append(item)
    expected = [trees[n].expected_length(acc) for n in budgets]
    verify_ms = [1.0, 1.05, 1.1, 1.3]
    return {
        "meta": {"mode": "fixture", "seconds": 1.0, "device": "torch-cpu"},
        "steps": {"extract": {"status": "ok", "seconds": 1.0, "note": ""},
                  "profile": {"status": "ok", "seconds": 2.0, "note": ""},
                  "stream": {"status": "not available", "seconds": 0.0, "note": "fixture: module absent"}},
        "drafters": [{"drafter": "(i) reused LM heads", "tokens_per_call": 1.4, "added_params": 0,
                      "added_params_pct": 0.0, "N": 8},
                     {"drafter": "(iii) position offsets (ours)", "tokens_per_call": 2.1, "added_params": 384,
                      "added_params_pct": 0.05, "N": 8}],
        "languages": [{"language": "en", "n_clips": 2, "audio_min": 0.1, "ar_tokens_per_call": 1.0,
                       "spec_tokens_per_call": 2.1, "ar_wer": 0.2, "spec_wer": 0.18, "ar_cer": 0.1, "spec_cer": 0.09}],
        "acceptance": {"budgets": budgets, "curves": {"offsets": expected}, "oracle": [e + 0.3 for e in expected],
                       "table": {"offsets": acc.tolist()}},
        "profile": {"device": "torch-cpu", "budgets": budgets, "ar_ms": 1.0, "verify_ms": verify_ms,
                    "tokens_per_call": expected, "speedup": [e / v for e, v in zip(expected, verify_ms)], "best_N": 8},
        "train": {"loss": list(np.linspace(9, 5, 20))},
        "trees": {"offsets": {str(n): [list(p) for p in t.paths] for n, t in trees.items()}},
        "ab": ab,
        "spade": step_spade(Demo(config=DemoConfig()))["spade"],  # the committed study (data/spade)
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    path = render_report(fixture_results(out), out)
    return path


def test_report_is_self_contained(report):
    html = report.read_text()
    assert "cdn.plot.ly" not in html.split("<body>")[1][:2000] and "<script src=" not in html
    assert html.count("data:audio/mpeg;base64,") == 2
    assert (report.parent / "results.json").is_file()
    assert "fixture: module absent" in html, "a step that did not run is visible in the report"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it: "
                                             "apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(report, tmp_path):
    from playwright import sync_api  # in the dev extra: missing it is a failure, not a skip
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        # Chromium puts its singleton socket under TMPDIR, and a Unix socket path has at most 107
        # characters: a long TMPDIR (as pytest's may be) must not decide whether the page renders
        sock_dir = tempfile.mkdtemp(prefix="rq-", dir="/tmp" if os.path.isdir("/tmp") else None)
        ctx = p.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                   headless=True, args=ARGS, env={**os.environ, "TMPDIR": sock_dir})
        try:
            page = ctx.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.as_uri(), wait_until="load")
            assert page.locator("h1").inner_text().startswith("rvqspec")
            # every figure container holds a plotly graph that drew its SVG layers
            figs = page.locator("div.figure")
            n = figs.count()
            assert n >= 8, f"expected the report's figures, found {n}"
            page.wait_for_function("""() => [...document.querySelectorAll('div.figure')].every(
                d => d.querySelector('.js-plotly-plot svg.main-svg'))""", timeout=30_000)
            drawn = page.evaluate("""() => [...document.querySelectorAll('div.figure')].map(d => ({
                id: d.dataset.figure,
                svgs: d.querySelectorAll('svg.main-svg').length,
                marks: d.querySelectorAll('g.trace, g.hm, image, path.point, .scatterlayer path').length,
                h: d.querySelector('.js-plotly-plot').getBoundingClientRect().height}))""")
            for f in drawn:
                assert f["svgs"] >= 1 and f["marks"] >= 1 and f["h"] > 100, f
            # the tables of seed Table 2 and Table 3
            assert page.locator("#table2 tbody tr").count() == 2
            assert page.locator("#table3 tbody tr").count() == 1
            assert page.locator("#spade div.figure").count() == 2  # the SPADE study's two figures
            # audio: both players decode their embedded WAVs (metadata loaded, positive duration)
            page.wait_for_function("""() => {
                const a = [...document.querySelectorAll('audio')];
                return a.length > 0 && a.every(x => x.readyState >= 1 && x.duration > 0);
            }""", timeout=30_000)
            durations = page.evaluate("() => [...document.querySelectorAll('audio')].map(a => a.duration)")
            assert len(durations) == 2 and all(d > 0.1 for d in durations), durations
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
        finally:
            ctx.close()
            shutil.rmtree(sock_dir, ignore_errors=True)
    assert not errors, f"JavaScript errors on the page: {errors}"
