#!/usr/bin/env bash
# Rehearse docs/real_weights.md end to end on a tiny *official* checkpoint, as a user with real
# weights would run it, with two processes under `accelerate launch` (CPU processes in a gloo
# group here; GPUs on a real machine). One line per runbook step with its time; the first failing
# step stops the script (exit 1) and prints the end of its log.
#
#   bash scripts/rehearse_real.sh [WORKDIR]     # after `make test`'s setup (.venv); WORKDIR: a temp dir
#
# The checkpoint (rvqspec.real.rehearsal) has the published file set: config.json, model.safetensors,
# generation_config.json, a Qwen2-style text tokenizer made here, and speech_tokenizer/ (a randomly
# initialised 12 Hz speech tokenizer), so every default path runs: no FILE.py:NAME doubles. Corpora:
# VoxPopuli-like save_to_disk, LibriSpeech-like hub parquet, Fleurs-like refs/convert/parquet (six
# languages). The recognizer is the mini world's (data/mini/recognizer): no ASR weights exist here.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
W=${1:-$(mktemp -d "${TMPDIR:-/tmp}/rvqspec-rehearsal.XXXXXX")}
PY=${PYTHON:-}
if [[ -z "$PY" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
PORT=${RVQSPEC_PORT:-$((29700 + RANDOM % 200))}
NPROC=${RVQSPEC_PROCS:-2}

M=$W/model; D=$W/data; O=$W/runs
ASR=$ROOT/data/mini/recognizer
mkdir -p "$W/logs" "$O"
R=("$PY" -m rvqspec.cli)

launch() {  # the runbook's $L, with a fresh port per launch (a closing gloo store may still hold the last)
  PORT=$((PORT + 1))
  "$PY" -m accelerate.commands.launch --multi_gpu --num_processes "$NPROC" --num_machines 1 --mixed_precision no \
    --dynamo_backend no --main_process_port "$PORT" -m rvqspec.cli "$@"
}

T_ALL=$EPOCHREALTIME
step() {  # step NAME COMMAND...: run, time, stop on failure
  local name=$1; shift
  local t0=$EPOCHREALTIME
  if ! "$@" > "$W/logs/$name.log" 2>&1; then
    echo "FAILED  $name  (log: $W/logs/$name.log)"
    tail -n 25 "$W/logs/$name.log"
    exit 1
  fi
  "$PY" - "$t0" "$EPOCHREALTIME" "$name" <<'EOF'
import sys
t0, t1, name = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(f"ok  {name:<34} {t1 - t0:6.1f} s", flush=True)
EOF
}

echo "rehearsal in $W ($NPROC processes; python $PY)"
# 0. the inputs a user brings: an official checkpoint and the three corpora on local disk
step 0_checkpoint_and_corpora "$PY" -m rvqspec.real.rehearsal "$W"
# 1. teacher-forced hidden states of VoxPopuli en train (seed 000 §2.2)
step 1_extract_train launch real extract --model "$M" "$D/voxpopuli_en" --split train --out-dir "$O/train" --speaker Ryan \
  --unit-items 6 --shard-frames 48
# 2. the offsets, with the seed's batch of 32 summed over the processes
step 2_train_offsets launch real train-offsets --model "$M" "$O/train" --out "$O/offsets.safetensors" --epochs 2 \
  --effective-batch 32
# 3. free-running states of LibriSpeech test-clean, the calibration set (§3.3)
step 3_extract_calibration launch real extract --model "$M" "$D/librispeech" --split test.clean --lang en \
  --out-dir "$O/calib" --source free_running --speaker Ryan --unit-items 4 --shard-frames 48
# 4. acceptance table and trees per node budget N (§2.2)
step 4_calibrate_offsets "${R[@]}" spec calibrate --model "$M" --shards "$O/calib" \
  --drafter "$O/offsets.safetensors" --out "$O/acceptance.json"
for N in 16 32 64; do
  step "4_grow_tree_N$N" "${R[@]}" spec grow-tree --acceptance "$O/acceptance.json" --budget $N --out "$O/tree_N$N.json"
done
# 4b. seed Table 2: the other drafters on the same states
for k in medusa per_position low_rank; do
  step "4b_train_$k" launch real train-offsets --model "$M" "$O/train" --kind $k --out "$O/$k.safetensors" --epochs 2 \
    --effective-batch 32
  step "4b_calibrate_$k" "${R[@]}" spec calibrate --model "$M" --shards "$O/calib" --drafter "$O/$k.safetensors" \
    --out "$O/acceptance_$k.json"
  step "4b_grow_tree_${k}_N32" "${R[@]}" spec grow-tree --acceptance "$O/acceptance_$k.json" --budget 32 \
    --out "$O/tree_${k}_N32.json"
done
step 4b_calibrate_reused "${R[@]}" spec calibrate --model "$M" --shards "$O/calib" --out "$O/acceptance_reused.json"
step 4b_grow_tree_reused_N32 "${R[@]}" spec grow-tree --acceptance "$O/acceptance_reused.json" --budget 32 \
  --out "$O/tree_reused_N32.json"
# 4c. can one shared shift carry h_p to h_(p+1) on this checkpoint (the offsets' mechanism)
step 4c_geometry "${R[@]}" spec geometry --shards "$O/calib" --out "$O/geometry.json"
# 5. per-device latency, speed-up per N, N* (§3.4); torch-cuda where there is a GPU
BACKEND=torch-cpu; DT=fp32
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then BACKEND=torch-cuda; DT=bf16; fi
step "5_profile_$BACKEND" "${R[@]}" profile --backend $BACKEND --dtype $DT --model "$M" --budget 16 --budget 32 --budget 64 --calls 20 \
  --warmup 5 --acceptance "$O/acceptance.json" --out "$O/profile.json"
# 6. seed Table 3 on the Fleurs test split, AR vs speculative, two seeds
step 6_evaluate launch real evaluate --model "$M" "$D/fleurs" --split test --out-dir "$O/table3" \
  --drafter "$O/offsets.safetensors" --tree "$O/tree_N32.json" --seeds 2 --speaker Ryan --max-new-tokens 16 \
  --unit-items 4 --asr "*=$ASR"
# 7. the same checkpoint behind `synthesize` (tests/test_rehearsal_real.py runs `wer` on it too)
step 7_synthesize "${R[@]}" synthesize "The quick brown fox." --model "$M" --speaker Ryan \
  --drafter "$O/offsets.safetensors" --tree "$O/tree_N32.json" --out "$O/fox.wav"
# 8. the runbook's Python snippet, as written, with the rehearsal's paths
step 8_snippet "$PY" - "$ROOT/docs/real_weights.md" "$M" "$O" <<'EOF'
import re, sys
doc, model, out = sys.argv[1:]
code = re.search(r"```python\n(.*?)```", open(doc, encoding="utf-8").read(), re.S).group(1)
code = code.replace("/models/Qwen3-TTS-12Hz-0.6B-CustomVoice", model).replace("runs/real/", out + "/")
exec(compile(code, "docs/real_weights.md", "exec"), {"__name__": "__main__"})
EOF
# 9. the outputs agree with each other: one quantity, one number (grow-tree vs profile at N = 32)
step 9_check_outputs "$PY" - "$O" <<'EOF'
import json, subprocess, sys
from pathlib import Path
o = Path(sys.argv[1])
train = json.loads((o / "train" / "manifest.json").read_text())
assert train["extra"]["dataset_stats"]["items"] == 24, train["extra"]
prof = json.loads((o / "profile.json").read_text())
kinds = {k: json.loads((o / f"{k}.json").read_text()) for k in ("offsets", "medusa", "per_position", "low_rank")}
for k, info in kinds.items():
    assert info["world"] >= 1 and info["effective_batch"] == 32 and info["steps"] > 0, (k, info)
t3 = json.loads((o / "table3" / "table3.json").read_text())
assert sorted(r["language"] for r in t3["rows"]) == ["de", "en", "es", "ja", "ru", "zh"], t3["rows"]
geo, calib = json.loads((o / "geometry.json").read_text()), json.loads((o / "calib" / "manifest.json").read_text())
assert geo["frames"] == calib["frames"] and geo["source"] == "free_running" and len(geo["shift_r2"]) == 14, geo
shard_bytes = sum((o / "train" / s["file"]).stat().st_size for s in train["shards"])
grown = json.loads(subprocess.run([sys.executable, "-m", "rvqspec.cli", "spec", "grow-tree", "--acceptance",
                                   str(o / "acceptance.json"), "--budget", "32", "--out", str(o / "tree_check.json")],
                                  capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
# one quantity, one number: grow-tree and profile give the same tokens per call for a table and N
assert abs(grown["tokens_per_call"] - prof["tokens_per_call"]["32"]) < 1e-12, (grown, prof["tokens_per_call"])
print(json.dumps({"frames": train["frames"], "hidden_size": train["hidden_size"],
                  "bytes_per_frame_measured": round(shard_bytes / train["frames"], 1),
                  "bytes_per_frame_formula": 15 * train["hidden_size"] * 2 + 16 * 8,
                  "tokens_per_call_N32": prof["tokens_per_call"]["32"], "expected_length_N32": grown["expected_length"],
                  "drafters_last_loss": {k: v["last_loss"] for k, v in kinds.items()}}))
EOF
"$PY" - "$T_ALL" "$EPOCHREALTIME" <<'EOF'
import sys
print(f"rehearsal passed in {float(sys.argv[2]) - float(sys.argv[1]):.0f} s")
EOF
