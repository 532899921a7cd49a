"""No committed result or document names a path of one machine (/work/..., /tmp/..., a home folder):
such a path differs per checkout, leaks a machine's layout and points nowhere for a reader."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rvqspec.core.jsonfile import machine_paths, portable_path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".md", ".json", ".html", ".txt", ".csv"}
def committed_text_files(*folders: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--", *folders], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / f for f in out.stdout.splitlines() if Path(f).suffix.lower() in TEXT_SUFFIXES]


def test_detector_finds_paths_and_spares_urls_and_relative_paths():
    # negative controls: each of these must be flagged
    for bad in ('"drafter": "/work/main/data/mini/drafters/offsets.safetensors"', "see /tmp/ecvq/acceptance.json",
                "(/home/alice/rvqspec/runs/x.json)", "/root/.cache/x", '"C:\\\\Users\\\\bob\\\\x"'):
        assert machine_paths(bad), bad
    for good in ("data/mini/drafters/offsets.safetensors", "https://example.org/tmp/x", "runs/spade/tmp/x.json",
                 "a ratio 1/2", "docs/measurements/skewed_codec/acceptance.json"):
        assert not machine_paths(good), good


def test_no_absolute_machine_paths_in_data_and_docs():
    files = committed_text_files("data", "docs")
    assert len(files) > 10  # the scan sees the committed results (an empty listing would pass vacuously)
    hits = []
    for f in files:
        text = f.read_text(errors="replace")
        hits += [f"{f.relative_to(ROOT)}: {p}" for p in machine_paths(text)[:3]]
    assert not hits, "absolute machine paths in committed files:\n" + "\n".join(hits)


@pytest.mark.parametrize("given, want", [("data/mini/model", "data/mini/model"), (None, None)])
def test_portable_path_keeps_relative(given, want):
    assert portable_path(given) == want


def test_portable_path_strips_the_machine_prefix(tmp_path):
    assert portable_path(ROOT / "data" / "mini" / "model") == "data/mini/model"
    outside = tmp_path / "elsewhere" / "x.json"
    assert portable_path(outside) in ("x.json", outside.relative_to(Path.cwd().resolve()).as_posix()
                                      if str(outside).startswith(str(Path.cwd().resolve())) else "x.json")
    assert not machine_paths(portable_path(outside))
