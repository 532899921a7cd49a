#!/usr/bin/env bash
# Device profile of the 0.6B-size code predictor (random weights) on a CUDA GPU, seed 000 §3.4
# protocol: p50 of 200 calls after 20 warm-ups per graph, graphs timed round-robin, each call one
# CUDA-graph replay. bf16 then fp32, N in 1..64. About 2-4 minutes on one GPU.
#
#   bash scripts/cuda_profile.sh           # -> data/profiles/torch-cuda_{bf16,fp32}.json (+ figure HTML if plotly)
#
# Needs only python with a CUDA build of torch and numpy (no network: the repository is put on the
# path; typer/tqdm/plotly are used when present). Env: PY (python), OUT (output dir),
# ACCEPTANCE (acceptance JSON, see rvqspec/measure/profile.py; default: the seed-fitted table),
# DTYPES (default "bf16 fp32"), CALLS (200), WARMUP (20).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export OUT=${OUT:-data/profiles} ACCEPTANCE=${ACCEPTANCE:-} CALLS=${CALLS:-200} WARMUP=${WARMUP:-20}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
for DT in ${DTYPES:-bf16 fp32}; do
  DT=$DT timeout 600 "$PY" - <<'PY'
import json, os, sys
import torch
from rvqspec.measure.profile import ProfileConfig, load_acceptance, profile, save_device_profile

if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: no CUDA device visible (torch %s)" % torch.__version__)
out, dt = os.environ["OUT"], os.environ["DT"]
cfg = ProfileConfig(backend="torch-cuda", dtype=dt, model="0.6b", calls=int(os.environ["CALLS"]),
                    warmup=int(os.environ["WARMUP"]), sizes=(1, 2, 4, 8, 16, 32, 64))
p = profile(cfg, load_acceptance(os.environ["ACCEPTANCE"] or None, cfg.max_depth))
path = save_device_profile(p, f"{out}/torch-cuda_{dt}.json")
print(json.dumps({"device": p["device"], "dtype": dt, "ar_p50_ms": round(p["ar"]["p50"], 4),
                  "verify_p50_ms": {n: round(v["p50"], 4) for n, v in p["verify"].items()},
                  "overhead": {n: round(v, 4) for n, v in p["overhead"].items()},
                  "speedup": {n: None if v is None else round(v, 4) for n, v in p["speedup"].items()},
                  "n_star": p["n_star"], "acceptance": p["acceptance_source"], "file": str(path)}))
try:
    from rvqspec.workbench.plots import figure4, write_figure
    write_figure(figure4([p]), f"{out}/figure4_torch-cuda_{dt}.html", png=False)
except ImportError as e:
    print("figure skipped:", e, file=sys.stderr)
PY
done
