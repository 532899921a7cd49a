#!/usr/bin/env bash
# Seed 000 on the mini world, step by step with the CLI (the same commands work on a real
# checkpoint with --frames-fn pointing at real data): extraction, drafter training, calibration,
# tree growth, acceptance benchmark and wall-clock benchmark. Writes data/mini/{drafters,trees}
# and data/mini/bench/*.json; intermediate shards go to runs/spec.
set -euo pipefail
M=${MODEL:-data/mini/model}
R=${RUNS:-runs/spec}
D=${DATA:-data/mini}
RV=${RVQSPEC:-.venv/bin/rvqspec}
# drafters stored in bfloat16 before anything measures them (data/'s budget; e.g. CAST_DRAFTERS=medusa)
CAST_DRAFTERS=${CAST_DRAFTERS:-}
mkdir -p "$R" "$D/drafters" "$D/trees" "$D/bench"
$RV spec extract --model "$M" --out-dir "$R/tf_train" --split train --lang en --source teacher_forced
$RV spec extract --model "$M" --out-dir "$R/fr_calib" --split calibration --lang en --source free_running --seed 0
# Each drafter trains with its own recipe (`spec train` without --lr / --epochs;
# rvqspec.measure.train_drafter.recipe_for): the shift drafters (offsets, per-position, low-rank,
# shared low-rank) start at zero and train to convergence, 3 epochs at 1e-2; Medusa's heads start as
# copies of the frozen heads (drafter (i)) and take the seed's 1e-3 for one epoch (docs/design.md,
# "The offsets' training budget": at the seed's recipe Table 2's offsets drafted 1.07 tokens per call).
for k in offsets per_position low_rank medusa shared_low_rank; do
  $RV spec train --model "$M" --shards "$R/tf_train" --kind $k --out "$D/drafters/$k.safetensors" --loss-out "$R/loss_$k.json"
  if [[ " $CAST_DRAFTERS " == *" $k "* ]]; then
    $RV spec cast --drafter "$D/drafters/$k.safetensors" --out "$R/$k.bf16.safetensors"
    mv "$R/$k.bf16.safetensors" "$D/drafters/$k.safetensors"
  fi
done
$RV spec calibrate --model "$M" --shards "$R/fr_calib" --out "$D/trees/acceptance_reused.json"
# trees of the seed's method (offsets), of Medusa (the strongest drafter on the mini world) and of ours
for k in offsets medusa shared_low_rank; do
  $RV spec calibrate --model "$M" --shards "$R/fr_calib" --drafter "$D/drafters/$k.safetensors" --out "$D/trees/acceptance_$k.json"
  for n in 4 8 16 32 64; do
    $RV spec grow-tree --acceptance "$D/trees/acceptance_$k.json" --budget $n --out "$D/trees/${k}_n$n.json"
  done
done
