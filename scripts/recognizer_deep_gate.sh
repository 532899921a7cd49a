#!/usr/bin/env bash
# Gate: is the mini recognizer, not the model, what keeps free-running speech unintelligible?
# A recognizer that has heard only exact codec residuals may misread the plausible-but-wrong
# residuals a code predictor samples. This trains the build's recognizer recipe on the candidate
# world v3 with a share of its codec copies given deep levels borrowed from frames of the same c0
# (RecognizerConfig.codec_deep_share, rvqspec.mini.recognizer.resample_deep_levels; 15% of the
# utterances get a copy instead of 10%, 60% of the copies resampled), then measures it as the
# committed recognizer is measured. Adopting it needed a gain of several points of free-running CER
# with the clean and resynthesis targets kept (docs/design.md, "A recognizer robust to sampled residuals").
#
#   bash scripts/recognizer_deep_gate.sh            # ~45 min training + ~10 min measuring (2 lanes)
#
# Environment: W (candidate world, default runs/v3), G (work folder, default runs/v3r),
# OUT (summary JSON, default docs/measurements/intelligibility/recognizer_deep_gate.json), RVQSPEC, PY.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RV=${RVQSPEC:-.venv/bin/rvqspec}
PY=${PY:-.venv/bin/python}
W=${W:-runs/v3}
G=${G:-runs/v3r}
OUT=${OUT:-docs/measurements/intelligibility/recognizer_deep_gate.json}
[[ -f $W/data/manifest.json && -d $W/runs/corpus ]] || { echo "$W: no candidate world (data/manifest.json, runs/corpus) there (set W)" >&2; exit 2; }
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
mkdir -p "$G/out" "$G/data"

say "train: codec_fraction 0.15, codec_deep_share 0.6, 1 thread"
OMP_NUM_THREADS=1 "$PY" - "$W" "$G" <<'PYEOF'
import dataclasses, json, sys
from pathlib import Path
import torch
from rvqspec.mini.recognizer import RecognizerConfig, train_recognizer
torch.set_num_threads(1)
w, g = map(Path, sys.argv[1:3])
cfg = dataclasses.replace(RecognizerConfig(), codec_fraction=0.15, codec_deep_share=0.6)
m = train_recognizer(w / "runs" / "corpus", w / "data" / "codec", g / "recognizer", cfg)
print(json.dumps({k: m[k] for k in ("codec_copies", "codec_deep_copies", "steps", "final_loss")}))
PYEOF

# the candidate world with the gate's recognizer in place of its own
for x in codec corpus model phoneme_tokenizer.json manifest.json; do ln -sfn "$PWD/$W/data/$x" "$G/data/$x"; done
ln -sfn "$PWD/$G/recognizer" "$G/data/recognizer"
O=$G/out
lane1() {
  say testset; "$RV" asr testset --recognizer "$G/recognizer" --codec "$W/data/codec" --threads 1 --out "$O/recognizer_testset.json" > "$O/testset.log" 2>&1
  say evaluate; "$RV" mini evaluate --data "$G/data" --sentences 40 --seeds 2 --lang en --out-dir "$O/eval_en" --threads 1 > "$O/eval.log" 2>&1
}
lane2() {
  say diagnose; OMP_NUM_THREADS=1 "$PY" scripts/diagnose_intelligibility.py --model "$W/data/model" --codec "$W/data/codec" \
    --corpus "$W/data/corpus" --recognizer "$G/recognizer" --sentences 40 --variants resynth,c0_only,tf_c0_true,free \
    --out "$O/diagnose_en.json" > "$O/diagnose.log" 2>&1
}
lane1 & lane2; wait
"$PY" - "$O" "$G" "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
from rvqspec.core.jsonfile import write_json_atomic
o, g, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
load = lambda p: json.loads(Path(p).read_text())
rows = lambda d: {f"{r['language']}/{r['condition']}": {k: round(r[k], 4) for k in ("per", "cer", "wer")} for r in d["rows"]}
ev = load(o / "eval_en" / "mini_eval.json")["intelligibility"]["en"]
metrics = load(g / "recognizer" / "metrics.json")
write_json_atomic(out, {
    "question": "does a recognizer trained on copies with c0-conditionally resampled deep levels read the model's speech better?",
    "recognizer": {"config": {"codec_fraction": 0.15, "codec_deep_share": 0.6},
                   **{k: metrics[k] for k in ("codec_copies", "codec_deep_copies", "steps", "train_minutes")}},
    "testset": rows(load(o / "recognizer_testset.json")),
    "diagnose_en": {k: {m: round(v[m], 4) for m in ("per", "cer", "wer")}
                    for k, v in load(o / "diagnose_en.json")["variants"].items()},
    "mini_eval_en": {k: round(ev[k], 4) for k in ("per", "cer", "wer")} | {"n": ev["n"]},
    "command": "bash scripts/recognizer_deep_gate.sh",
})
print(out)
PYEOF
say done
