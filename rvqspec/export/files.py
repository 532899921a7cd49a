"""What every export writes besides its graphs, and how it writes: a manifest, atomically.

Exports are built in a hidden temporary sibling of the output directory and renamed into place
only when complete, so an interrupted or failed export leaves nothing half-written.
"""
from __future__ import annotations

import contextlib
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

from rvqspec.core.checkpoint import model_hash
from rvqspec.core.tree import SparseTree
from rvqspec.export.wrappers import ExportError, RoundGraph

MANIFEST = "manifest.json"


@contextlib.contextmanager
def atomic_dir(out_dir: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces `out_dir`, on error it is removed."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise ExportError(f"{out}: exists and is not empty (pass overwrite=True / --overwrite)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def manifest(code_predictor, tree: SparseTree, graphs: dict[str, RoundGraph], drafter, **extra) -> dict:
    """What a host needs besides the graphs: input/output names and shapes per graph, the tree,
    the cache layout, the drafter kind and the code predictor's hash (to refuse a mismatch)."""
    def io(g: RoundGraph, name: str) -> dict:
        s = g.spec(name)
        return {"q": s.q, "inputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in s.inputs.items()},
                "outputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in s.outputs.items()}}

    first = next(iter(graphs.values()))
    return {"graphs": {k: io(g, k) for k, g in graphs.items()},
            "tree": [list(p) for p in tree.paths], "cache_len": first.S, "mask_value": first.mask_value,
            "drafter": None if drafter is None else getattr(drafter, "kind", type(drafter).__name__),
            "model_hash": model_hash(code_predictor), "config": asdict(code_predictor.config),
            "layout": "rvqspec.export.wrappers: explicit KV in/out (L, n_kv, S, head_dim), host writes "
                      "key_update/value_update columns; key_padding_mask 0 / mask_value", **extra}
