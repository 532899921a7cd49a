#!/usr/bin/env bash
# The GPU check of issue 18, in one run on a machine with a CUDA GPU (about 4-6 minutes; every step
# has its own timeout and the whole stays under 8 minutes):
#   1. the CUDA tests (tests/test_cuda_graphs.py; they skip on machines without CUDA);
#   2. the full-size (0.6B, random weights) bf16 device profile: AR call and verify call per N,
#      each one CUDA-graph replay, seed 000 Figure 4 (`rvqspec profile --backend torch-cuda`);
#   3. the captured talker step, whole AR frame and speculative rounds side by side
#      (`rvqspec bench cuda-graphs`), with the speculative frame projected at the seed's 2.47 tokens
#      per call;
#   4. `rvqspec bench stream` (the mini world streams on the host CPU: its codec is CPU code; the
#      full-size projection in that JSON is timed on the CPU too).
# Writes JSON to data/profiles/ (OUT): torch-cuda_bf16.json, figure4_torch-cuda_bf16.html,
# cuda_graphs_bf16.json, bench_stream_gpu_host.json, gpu_check.log.
#
#   bash scripts/gpu_check.sh        # PY=python (with a CUDA torch), OUT=data/profiles
#
# Done-means checks read from the JSON: cuda_graphs_bf16.json "verify_over_step" at N=16 (q = 17)
# <= 1.15, and "spec" ... "speedup_over_ar_frame" > 1 at the seed's acceptance.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-data/profiles}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
status=0
step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s)" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG" | tail -n 40
  local rc=${PIPESTATUS[0]}
  echo "== $name: rc=$rc" | tee -a "$LOG"
  [ "$rc" = 0 ] || status=1
}
"$PY" -c "import torch,sys; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''); sys.exit(0 if torch.cuda.is_available() else 3)" | tee -a "$LOG" || { echo "no CUDA device: nothing to check" | tee -a "$LOG"; exit 3; }
step "cuda tests" 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda_graphs.py tests/test_profile.py -k "cuda"
step "profile torch-cuda bf16" 180 "$PY" -m rvqspec.cli profile --backend torch-cuda --dtype bf16 --model 0.6b \
  --sizes 1,2,4,8,16,32,64 --out "$OUT/torch-cuda_bf16.json" --plot "$OUT/figure4_torch-cuda_bf16.html"
step "bench cuda-graphs bf16" 120 "$PY" -m rvqspec.cli bench cuda-graphs --model 0.6b --dtype bf16 \
  --budget 4 --budget 16 --budget 64 --out "$OUT/cuda_graphs_bf16.json"
step "bench stream" 150 "$PY" -m rvqspec.cli bench stream --repeats 1 --threads 4 --out "$OUT/bench_stream_gpu_host.json"
exit $status
