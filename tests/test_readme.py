"""The README's figures cite committed files: every data/ or docs/ path it names exists, and every
manifest key it cites resolves in data/mini/manifest.json."""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cited_paths(text: str) -> list[str]:
    """`data/...` and `docs/...` paths in the text, with shell braces {a,b} expanded."""
    out = []
    for m in re.findall(r"(?<![\w/])((?:data|docs)/[\w./{},*-]+)", text):
        m = m.rstrip(".,)")
        parts = re.split(r"(\{[^}]*\})", m)
        choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
        out += ["".join(c) for c in itertools.product(*choices)]
    return out


def cited_manifest_keys(text: str) -> list[str]:
    return re.findall(r"manifest\.json`, `(steps\.[\w.]+)`", text)


def resolve(d, dotted: str):
    for k in dotted.split("."):
        if k == "*":
            return d
        d = d[k]
    return d


def test_cited_files_exist():
    missing = [p for p in cited_paths((ROOT / "README.md").read_text())
               if not any(ROOT.glob(p)) and not p.startswith("data/mini/drafters/D")]
    assert missing == []


def test_cited_manifest_keys_resolve():
    manifest = json.loads((ROOT / "data/mini/manifest.json").read_text())
    keys = cited_manifest_keys((ROOT / "README.md").read_text())
    assert keys, "the README cites manifest keys for the embedded default's figures"
    for k in keys:
        resolve(manifest, k)  # KeyError names the key


def test_the_citation_checks_can_fail():
    assert cited_paths("see `data/mini/bench/nope_{a,b}.json`.") == ["data/mini/bench/nope_a.json",
                                                                      "data/mini/bench/nope_b.json"]
    assert not any(ROOT.glob("data/mini/bench/nope_a.json"))
    try:
        resolve({"steps": {}}, "steps.model.result")
    except KeyError:
        pass
    else:
        raise AssertionError("a missing manifest key must not resolve")
