#!/usr/bin/env bash
# Measure a candidate mini world built beside the committed one, before it replaces data/mini (a
# replacement re-derives every committed figure: scripts/rederive_world.sh, ~10 h). The candidate
# is built with
#   rvqspec mini build --level0-lda 64 --out-dir runs/v3/data --runs runs/v3/runs
# and this script writes the issue-14 headline figures of it as JSON under OUT:
#   recognizer       rvqspec asr testset on the hand-written test set (clean speech and resynthesis)
#   intelligibility  free-running English on the eval split (40 sentences x 2 seeds), the same through
#                    scripts/diagnose_intelligibility.py's decompositions (resynthesis, c0 alone,
#                    teacher-forced c0), and the hand-written English set (2 seeds)
#   spec             drafters (teacher-forced train split), calibration, trees and Table 2
#                    (rvqspec bench acceptance) for the reused heads and DRAFTERS
#   wallclock        rvqspec bench spec, Medusa and offsets at N = 4 (run it on a quiet machine)
# Stages run in the order given; the recognizer stage needs only the recognizer step of the build.
#
#   bash scripts/measure_candidate_world.sh recognizer
#   bash scripts/measure_candidate_world.sh intelligibility & bash scripts/measure_candidate_world.sh spec; wait
#
# Environment: W (candidate world, default runs/v3), OUT (default docs/measurements/world_v3),
# DRAFTERS (default: the five of Table 2), RVQSPEC, PY.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RV=${RVQSPEC:-.venv/bin/rvqspec}
PY=${PY:-.venv/bin/python}
W=${W:-runs/v3}
OUT=${OUT:-docs/measurements/world_v3}
DRAFTERS=${DRAFTERS:-offsets per_position low_rank medusa shared_low_rank}
D=$W/data
S=$W/spec
STAGES=(recognizer intelligibility spec wallclock)

say() { echo "[$(date -u +%H:%M:%S)] $*"; }

recognizer() {
  say "recognizer: hand-written test set, clean and through the candidate codec"
  $RV asr testset --recognizer "$D/recognizer" --codec "$D/codec" --threads 1 --out "$OUT/recognizer_testset.json"
}

intelligibility() {
  say "intelligibility: free-running English, eval split, 40 sentences x 2 seeds"
  $RV mini evaluate --data "$D" --sentences 40 --seeds 2 --lang en --out-dir "$W/eval_en" --threads 1
  cp "$W/eval_en/mini_eval.json" "$OUT/mini_eval_en.json"
  say "intelligibility: decompositions on 40 eval sentences"
  $PY scripts/diagnose_intelligibility.py --model "$D/model" --codec "$D/codec" --corpus "$D/corpus" \
    --recognizer "$D/recognizer" --sentences 40 --variants resynth,c0_only,tf_c0_true,free \
    --out "$OUT/diagnose_en.json" > /dev/null
  say "intelligibility: hand-written English set, 2 seeds"
  $RV wer --texts data/testset/en.txt --lang en --seeds 2 --data "$D" --json --out "$OUT/wer_testset_en.json" > /dev/null
}

spec() {
  say "spec: extraction"
  $RV spec extract --model "$D/model" --out-dir "$S/tf_train" --split train --lang en --source teacher_forced
  $RV spec extract --model "$D/model" --out-dir "$S/fr_calib" --split calibration --lang en --source free_running --seed 0
  local acc_drafters=""
  for k in $DRAFTERS; do
    say "spec: drafter $k"
    $RV spec train --model "$D/model" --shards "$S/tf_train" --kind "$k" --out "$D/drafters/$k.safetensors" \
      --loss-out "$S/loss_$k.json"
    acc_drafters+=" --drafter $k=$D/drafters/$k.safetensors"
  done
  say "spec: Table 2"
  $RV bench acceptance --model "$D/model" --calibration "$S/fr_calib"$acc_drafters --out "$OUT/acceptance.json"
}

wallclock() {
  for k in medusa offsets; do
    say "wallclock: $k, N = 4"
    $RV bench spec --acceptance "$OUT/acceptance.json" --acceptance-drafter "$k" --model "$D/model" \
      --drafter "$D/drafters/$k.safetensors" --budget 4 --frames 60 --threads 1 --no-full-size \
      --out "$OUT/spec_${k}_n4.json"
  done
}

(( $# )) || set -- recognizer intelligibility spec
for stage in "$@"; do  # every name checked before anything runs
  [[ " ${STAGES[*]} " == *" $stage "* ]] || { echo "unknown stage $stage (${STAGES[*]})" >&2; exit 2; }
done
[[ -f $D/manifest.json ]] || { echo "$D/manifest.json: no candidate world there (set W)" >&2; exit 2; }
mkdir -p "$OUT" "$S" "$D/drafters"
for stage in "$@"; do $stage; done
say "done: $*"
