"""scripts/rederive_world.sh re-derives data/mini with the commands its manifest records: each
record step, dry, must rebuild the committed manifest entry (commands and results) from the
committed files, without writing anything."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "rederive_world.sh"
STEPS = ("spec", "lossless", "intelligibility", "stream", "stream_graph", "backends", "table3")  # manifest steps
STAGES = ("check", "spec", "lossless", "intelligibility", "stream", "backends", "table3", "spade", "rehearsal", "verify")
# (the stream stage records two steps: stream, and the graph-backend streams as stream_graph)


def _bare(cmd):  # the trailing "(how it was run)" note is free text, the command is not
    return re.sub(r" \([^()]*\)$", "", cmd)


def _run(*args, tmp_path, **env):
    e = {**os.environ, "PY": sys.executable, "WORK": str(tmp_path / "work"), **env}
    e.pop("TIMING_NOTE", None)
    e.pop("RUN_NOTE", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=e, capture_output=True, text=True,
                          timeout=60)


def test_script_parses_and_lists_its_stages(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    r = _run("list", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    for stage in STAGES:
        assert re.search(rf"^  {stage} ", r.stdout, re.M), stage
    bad = _run("bogus", tmp_path=tmp_path)
    assert bad.returncode == 2 and "unknown stage 'bogus'" in bad.stderr


@pytest.mark.parametrize("step", STEPS)
def test_dry_record_rebuilds_the_committed_entry(step, tmp_path):
    manifest = REPO / "data" / "mini" / "manifest.json"
    before = manifest.read_bytes()
    r = _run(f"record-{step.replace('_', '-')}", tmp_path=tmp_path, DRY_RECORD="1", SKIP_CHECK="1")
    assert r.returncode == 0, r.stderr
    assert manifest.read_bytes() == before
    entry = json.loads(r.stdout[r.stdout.index("{"):r.stdout.rindex("}") + 1])[step]
    rec = json.loads(before)["steps"][step]
    for key in ("command", "command_frames_200"):
        assert (key in entry) == (key in rec), key
        if key in rec:
            assert _bare(entry[key]) == _bare(rec[key]), key
    assert ("commands" in entry) == ("commands" in rec)
    if "commands" in rec:
        assert {k: _bare(v) for k, v in entry["commands"].items()} == {k: _bare(v) for k, v in rec["commands"].items()}
    assert entry.get("result") == rec.get("result")
