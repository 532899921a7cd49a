#!/usr/bin/env bash
# Stage a rebuilt mini world on main while its adoption spans several sessions (docs/design.md,
# "Adopting candidate v4 across sessions"): copy a scratch clone's data/mini into staging/<name>
# (default mini_v4) through a temporary folder, refuse one whose text files name a machine path,
# and list the steps its manifest records. Committing is left to the caller.
#
#   bash scripts/stage_world.sh /path/to/scratch/data/mini            # -> staging/mini_v4
#   bash scripts/stage_world.sh /path/to/scratch/data/mini mini_v5
#
# The way back, in the next session's scratch clone: rm -rf data/mini && cp -a staging/mini_v4 data/mini
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-.venv/bin/python}
ROOT=${STAGE_ROOT:-staging}  # tests stage into a temporary folder

src=${1:-}
name=${2:-mini_v4}
if [[ -z "$src" || ! -f "$src/manifest.json" ]]; then
    echo "stage_world: ${src:-<no folder given>}/manifest.json: no manifest (give the scratch clone's data/mini)" >&2
    exit 2
fi
if [[ ! "$name" =~ ^[A-Za-z0-9_]+$ ]]; then
    echo "stage_world: name '$name': letters, digits and _ only" >&2
    exit 2
fi

dest=$ROOT/$name
tmp=$ROOT/.$name.tmp
rm -rf "$tmp"
mkdir -p "$ROOT"
# the datasets caches (cache-*.arrow) are rebuilt on load and ignored by git
cp -a "$src" "$tmp"
find "$tmp" -name 'cache-*.arrow' -delete
# the first JSON or Markdown file naming a machine path (rvqspec.core.jsonfile.machine_paths, the
# detector tests/test_no_absolute_paths.py runs over data/ and docs/), as "FILE: names PATH" with
# FILE as the source names it
hit=$(PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$tmp" <<'EOF'
import sys
from pathlib import Path
from rvqspec.core.jsonfile import machine_paths
root = Path(sys.argv[1])
for f in sorted(root.rglob("*")):
    if f.suffix in (".json", ".md") and f.is_file() and (found := machine_paths(f.read_text(errors="replace"))):
        print(f"{f.relative_to(root).as_posix()}: names a machine path, {found[0]}")
        break
EOF
)
if [[ -n "$hit" ]]; then
    rm -rf "$tmp"
    echo "stage_world: ${src%/}/$hit (record paths relative to the checkout)" >&2
    exit 2
fi
rm -rf "$dest"
mv "$tmp" "$dest"
"$PY" - "$dest" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
m = json.loads((d / "manifest.json").read_text())
print(f"staged {d}: {m.get('total_bytes', 0) / 1e6:.1f} MB recorded; steps: {', '.join(m.get('steps', {}))}")
EOF
