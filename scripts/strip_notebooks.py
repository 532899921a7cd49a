#!/usr/bin/env python
"""Strip outputs, execution counts and run metadata from notebooks (the committed form).

    python scripts/strip_notebooks.py notebooks/*.ipynb          # rewrite in place
    python scripts/strip_notebooks.py --check notebooks/*.ipynb  # exit 1 and list unstripped files

Notebooks in git carry code only: outputs hold megabytes of plotly.js and audio, change on every
run, and would make reviews unreadable. `tests/test_notebooks.py` runs the --check logic on every
committed notebook. Cell tags (the papermill `parameters` tag) are kept.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

# notebook-level metadata that a run writes (papermill, widgets state); kernelspec stays
RUN_METADATA = ("papermill", "widgets", "execution")
CELL_RUN_METADATA = ("papermill", "execution", "collapsed", "scrolled")


def problems(nb) -> list[str]:
    """What makes a notebook unstripped (empty list = clean)."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            out.append(f"cell {i} has {len(cell.outputs)} output(s)")
        if cell.get("execution_count") is not None:
            out.append(f"cell {i} has execution_count {cell.execution_count}")
        extra = [k for k in CELL_RUN_METADATA if k in cell.metadata]
        if extra:
            out.append(f"cell {i} has run metadata {extra}")
    extra = [k for k in RUN_METADATA if k in nb.metadata]
    if extra:
        out.append(f"notebook has run metadata {extra}")
    return out


def strip(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for k in CELL_RUN_METADATA:
            cell.metadata.pop(k, None)
    for k in RUN_METADATA:
        nb.metadata.pop(k, None)
    return nb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--check", action="store_true", help="report unstripped notebooks, change nothing")
    args = ap.parse_args(argv)
    bad = 0
    for path in args.paths:
        try:
            nb = nbformat.read(str(path), as_version=4)
        except Exception as e:  # nbformat raises several error types for broken JSON
            print(f"{path}: cannot read notebook ({e})", file=sys.stderr)
            bad += 1
            continue
        found = problems(nb)
        if args.check:
            if found:
                bad += 1
                print(f"{path}: not stripped: {'; '.join(found)}", file=sys.stderr)
        elif found:
            nbformat.write(strip(nb), str(path))
            print(f"stripped {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
