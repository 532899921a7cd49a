"""rvqspec.core.jsonfile: atomic JSON writes leave the old file or the whole new one, never a part."""
from __future__ import annotations

import json
import stat

import pytest

from rvqspec.core.jsonfile import read_json, write_json_atomic


def test_write_json_atomic_writes_whole_file_and_keeps_old_one_on_failure(tmp_path):
    p = tmp_path / "sub" / "r.json"
    assert write_json_atomic(p, {"a": [1, 2]}, indent=1) == p
    assert json.loads(p.read_text()) == {"a": [1, 2]} and p.read_text().endswith("\n")
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    with pytest.raises(TypeError):
        write_json_atomic(p, {"bad": object()})  # not serializable: fails before anything is replaced
    assert json.loads(p.read_text()) == {"a": [1, 2]}
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]  # no temporary file left behind
    assert read_json(p, ValueError, "missing") == {"a": [1, 2]}
    with pytest.raises(ValueError, match="r2.json: missing"):
        read_json(tmp_path / "r2.json", ValueError, "missing")
