"""Recorded results of a notebook: the last cell of every numbered notebook calls `record(...)`.

Following the recommenders-team `examples/` pattern (docs/style notes): a notebook computes through
the package, shows the result, and records a flat dict of the numbers that matter. `record` does
two things, so the results survive however the notebook was run:

* writes them as JSON to `path` (the notebooks pass ``{out_dir}/{notebook}.json``), and
* displays them under a dedicated MIME type, so that the executed notebook itself carries them
  (papermill keeps display outputs); `read_recorded(executed.ipynb)` gets them back without
  scrapbook (unmaintained) or any other glue.

`tests/test_notebooks.py` executes each notebook with papermill and asserts on these values.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

RESULTS_MIME = "application/vnd.rvqspec.results+json"


class ResultsError(ValueError):
    """Recorded results are not a JSON-able dict of finite values, or a notebook recorded none."""


def to_jsonable(value: Any, where: str = "results") -> Any:
    """numpy / torch scalars and arrays, tuples and Paths -> plain JSON types; NaN/inf are refused
    (a NaN loss is a failure the test must see, not a value to store)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ResultsError(f"{where} is {value}; recorded numbers must be finite")
        return float(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ResultsError(f"{where} has a non-string key {k!r}")
            out[k] = to_jsonable(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # numpy / torch scalars and arrays
    if callable(tolist):
        return to_jsonable(tolist(), where)
    raise ResultsError(f"{where} has a value of type {type(value).__name__} that JSON cannot hold")


def record(results: dict, path: str | Path | None = None, display: bool = True) -> dict:
    """Record a notebook's results: JSON file at `path` (parents created) and a MIME display output.

    Returns the JSON-able copy that was recorded."""
    if not isinstance(results, dict):
        raise ResultsError(f"results must be a dict, got {type(results).__name__}")
    clean = to_jsonable(results)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(clean, indent=2, ensure_ascii=False) + "\n")
    if display:
        try:
            from IPython.display import display as ipy_display
        except ImportError:  # plain Python without IPython: the file is the record
            return clean
        ipy_display({RESULTS_MIME: clean, "text/plain": json.dumps(clean, indent=1, ensure_ascii=False)[:4000]},
                    raw=True)
    return clean


def read_recorded(notebook: str | Path) -> dict:
    """The results the last `record` call displayed in an executed notebook (`ResultsError` if none)."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    found = None
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {}) if isinstance(out, dict) else {}
            if RESULTS_MIME in data:
                found = data[RESULTS_MIME]
    if found is None:
        raise ResultsError(f"{notebook}: no recorded results (the last cell must call rvqspec.workbench.notebook_results.record)")
    if isinstance(found, str):  # some writers store JSON MIME data as text
        found = json.loads(found)
    return dict(found)
