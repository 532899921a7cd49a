#!/usr/bin/env bash
# Candidate world v3r = committed v3 + the refined code predictor (runs/refine/model). Two lanes.
set -uo pipefail
cd "$(dirname "$0")/../../../.."  # the repository root
export OMP_NUM_THREADS=1
RV=.venv/bin/rvqspec; PY=.venv/bin/python
W=runs/v3r/world; O=runs/v3r/out; mkdir -p $O
laneA() {
  MODEL=$W/model DATA=$W RUNS=runs/v3r/spec RVQSPEC=$RV bash scripts/mini_spec_pipeline.sh > $O/pipeline.log 2>&1 || { echo "pipeline failed"; return 1; }
  ACC=""; for k in offsets per_position low_rank medusa shared_low_rank; do ACC+=" --drafter $k=$W/drafters/$k.safetensors"; done
  $RV bench acceptance --model $W/model --calibration runs/v3r/spec/fr_calib $ACC --out $O/acceptance.json > $O/acceptance.log 2>&1
  echo "laneA done $(date -u +%T)"
}
laneB() {
  $PY scripts/diagnose_intelligibility.py --model data/mini/model --sentences 40 --variants tf_c0_true,free --out $O/diagnose_en_base.json > $O/diagnose_base.log 2>&1
  $PY scripts/diagnose_intelligibility.py --model $W/model --sentences 40 --variants tf_c0_true,free --out $O/diagnose_en.json > $O/diagnose.log 2>&1
  $RV mini evaluate --data $W --sentences 40 --seeds 2 --lang en --out-dir $O/eval_en --threads 1 > $O/eval_en.log 2>&1
  $RV wer --texts data/testset/en.txt --lang en --seeds 2 --model $W/model --json --out $O/wer_testset_en.json > $O/wer_en.log 2>&1
  $RV mini evaluate --data $W --sentences 40 --seeds 2 --out-dir $O/eval_all --threads 1 > $O/eval_all.log 2>&1
  echo "laneB done $(date -u +%T)"
}
laneA & laneB & wait
