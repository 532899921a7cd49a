"""Reading a JSON file whose failure must name the file: one helper for every loader of the
project's small JSON artifacts (shard and artifact manifests, trees, acceptance tables, profiles)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: str | os.PathLike, error: type[Exception], missing: str) -> Any:
    """The parsed JSON of `path`. A missing file raises `error("<path>: <missing>")`; text that is
    not JSON raises `error("<path>: not valid JSON (<reason>)")`."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{p}: {missing}")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise error(f"{p}: not valid JSON ({e})") from None
