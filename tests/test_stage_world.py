"""scripts/stage_world.sh copies a scratch world into staging/<name> whole or not at all, and refuses
bad input (no manifest, a bad name, a file naming a machine path) with exit 2 and one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "stage_world.sh"


def _world(folder: Path) -> Path:
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text('{"hidden": 8}')
    (folder / "corpus").mkdir()
    (folder / "corpus" / "cache-0001.arrow").write_bytes(b"cache")
    (folder / "manifest.json").write_text(json.dumps({"total_bytes": 2_000_000, "steps": {"corpus": {}, "codec": {}}}))
    return folder


def _stage(tmp_path: Path, *args: str):
    env = {"STAGE_ROOT": str(tmp_path / "staged"), "PY": sys.executable, "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env)


def test_stage_copies_the_world_without_caches_and_lists_its_steps(tmp_path):
    src = _world(tmp_path / "scratch")
    r = _stage(tmp_path, str(src), "w1")
    assert r.returncode == 0, r.stderr
    dest = tmp_path / "staged" / "w1"
    assert (dest / "model" / "config.json").read_text() == '{"hidden": 8}'
    assert not (dest / "corpus" / "cache-0001.arrow").exists()
    assert "2.0 MB recorded; steps: corpus, codec" in r.stdout
    assert sorted(p.name for p in (tmp_path / "staged").iterdir()) == ["w1"]  # no temporary folder left


def test_bad_input_is_one_line_exit_2_and_leaves_the_staged_copy_alone(tmp_path):
    src = _world(tmp_path / "scratch")
    assert _stage(tmp_path, str(src), "w1").returncode == 0
    no_manifest = tmp_path / "empty"
    no_manifest.mkdir()
    (src / "bench").mkdir()
    (src / "bench" / "x.json").write_text('{"out": "/work/someone/x.json"}')
    (src / "bench" / "y.json").write_text('{"out": "/tmp/y.json"}')  # two offenders: still one line naming one
    for args, says in [((str(no_manifest),), "manifest.json: no manifest"), ((str(src), "bad-name"), "name 'bad-name'"),
                       ((str(src), "w1"), "bench/x.json: names a machine path, /work/someone/x.json")]:
        r = _stage(tmp_path, *args)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert not (tmp_path / "staged" / "w1" / "bench").exists()  # the refused copy did not replace the staged one
    assert sorted(p.name for p in (tmp_path / "staged").iterdir()) == ["w1"]
