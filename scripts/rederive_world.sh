#!/usr/bin/env bash
# Re-derive every committed artifact that depends on the mini model (data/mini/model), in dependency
# order, after `rvqspec mini build` has rebuilt corpus, codec, recognizer and model. The commands are
# the recorded ones: data/mini/manifest.json (steps.*.command / commands), scripts/mini_spec_pipeline.sh,
# the "command" field of the bench JSONs, data/spade/README.md, docs/real_weights.md ("Rehearsal on
# the mini world"), docs/deploy.md and docs/streaming.md. The manifest's own command strings use the
# CLI's old option names (--model-dir, --acceptance-json, --drafter-name); they are written here in
# today's vocabulary (--model, --acceptance, --acceptance-drafter), and the manifest records these.
#
#   bash scripts/rederive_world.sh                 # every default stage, in order
#   bash scripts/rederive_world.sh spec            # one stage (a `check` runs first; SKIP_CHECK=1 skips it)
#   bash scripts/rederive_world.sh lossless table3 # several (always run in dependency order)
#   bash scripts/rederive_world.sh list            # the stages
#   DRY_RECORD=1 bash scripts/rederive_world.sh record-table3   # print a manifest entry, write nothing
#
# Stages (default order; estimates: old 4x192 / 3x128 world as recorded -> the new 8x192 / 5x192 one,
# on the shared 2-core box, one thread unless stated; the new predictor costs ~2-3x per call):
#   check      ~1 min   the rebuild is finished and recorded (mini verify, layout, no build running)
#   spec       ~1-1.5 h drafters, trees, bench acceptance / spec               (old: ~35 min)
#   lossless   ~2-3 h   bench lossless x 3 drafters                             (old: ~25-40 min each)
#   table3     ~1 h     scripts/table3.py, 960 syntheses + recognizer           (old: ~20-30 min)
#   stream     ~10 min  bench stream (2 threads, 1 thread), stream tolerance    (old: ~5 min)
#   backends   ~10 min  eager / compiled / onnx mini backends                   (old: ~4 min, setup_s 175 s)
#   spade      ~4-5 h   spade all + spade ablate (v2) + spade combined          (old spade all: <= 40 min)
#   rehearsal  ~30-45 min docs/real_weights.md rehearsal on the mini world (2 processes)
#   profiles   ~1 min   Figure 4 profiles re-scored with the new acceptance (no timing)
#   notebooks  ~10 min  papermill runs of notebooks/*.ipynb into runs/nb (nothing committed)
#   figures    seconds  prints the new figures that README.md / docs/*.md quote (for hand edits)
#   verify     ~10 min  mini verify + the tests that read committed artifacts
# Default total: about 10-11 h sequential. Two lanes on the 2 cores save about 4 h, e.g.
#   bash scripts/rederive_world.sh spec && { bash scripts/rederive_world.sh lossless & \
#     bash scripts/rederive_world.sh table3 stream backends spade; wait; }   # then rehearsal profiles ...
# (manifest writes are serialised with flock). The timing stages (stream, backends, spec's bench
# spec) should run with the machine otherwise quiet: their JSONs are wall-clock measurements.
# Opt-in stages (never in the default list):
#   anchor     ~10-20 min docs/measurements/gate_anchor_committed_world.json (scripts/mini_gate.py --world)
#   demo       ~10-15 min `rvqspec demo` timed (README's "make demo (6 min 42 s ...)")
#   record-spec record-lossless record-table3 record-stream record-backends: only (re)write that
#              manifest step from the files on disk (e.g. after a run whose record step failed)
#
# Environment: RVQSPEC, PY, WORK (logs, default runs/rederive), SPEC_RUNS (default runs/spec_new, as
# recorded), PROFILE_ACCEPTANCE (default runs/real_mini_out/acceptance_lr1e-2.json, from `rehearsal`),
# AR_FRAME_GRAPH=1 (backends: also re-measure the model-independent ar_frame_graph_0.6b.json),
# FORCE=1 (check: warn instead of stopping), VERBOSE=1 (tee logs), MACHINE_NOTE / RUN_NOTE (manifest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RV=${RVQSPEC:-.venv/bin/rvqspec}
PY=${PY:-.venv/bin/python}
export RVQSPEC="$RV" PY
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

WORK=${WORK:-runs/rederive}
LOGS=$WORK/logs
SPEC_RUNS=${SPEC_RUNS:-runs/spec_new}
M=data/mini/model
D=data/mini
B=$D/bench
DRAFTERS=(offsets per_position low_rank medusa shared_low_rank)
LOSSLESS=(offsets medusa shared_low_rank)
export WORK
mkdir -p "$LOGS" "$WORK/seconds"

# ------------------------------------------------------------------------------------------ helpers
portable() {  # a command as the manifest records it: no local interpreter paths (data/ must not
  local s=$1  # name machine paths, tests/test_no_absolute_paths.py)
  s=${s//"$RV"/rvqspec}
  s=${s//"$PY"/python}
  s=${s//"$PWD/"/}
  printf '%s' "$s"
}

run_cmd() {  # run_cmd NAME 'COMMAND': run in bash, log to $LOGS/NAME.log, stop on failure
  local name=$1 cmd=$2 log="$LOGS/$1.log" t0=$SECONDS rc=0
  echo "[$(date -u +%H:%M:%S)] $name: $(portable "$cmd")"
  if [[ -n "${VERBOSE:-}" ]]; then
    bash -c "set -euo pipefail; $cmd" 2>&1 | tee "$log" || rc=$?
  else
    bash -c "set -euo pipefail; $cmd" >"$log" 2>&1 || rc=$?
  fi
  if (( rc != 0 )); then
    echo "FAILED ($rc): $name; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit "$rc"
  fi
  echo "    done in $((SECONDS - t0)) s"
}

loadavg() { cut -d' ' -f1 /proc/loadavg; }

stage_seconds() { cat "$WORK/seconds/$1" 2>/dev/null || true; }

require_current_drafters() {  # stages after `spec` need drafters trained for this model
  "$PY" - <<'EOF'
import sys
from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.drafters import DrafterError, load_drafter
cp = load_qwen3_tts("data/mini/model", parts=("code_predictor",)).code_predictor
try:
    for k in ("offsets", "medusa", "shared_low_rank"):
        load_drafter(f"data/mini/drafters/{k}.safetensors", cp)
except (DrafterError, OSError) as exc:
    sys.exit(f"error: {exc}\n(the drafters are not this model's: run the `spec` stage first)")
EOF
}

record() {  # record STEP ARGS...: build the manifest entry from the files on disk, then record_step
  local step=$1; shift
  mkdir -p "$WORK"
  (
    if command -v flock >/dev/null; then flock 9; fi
    REC_SECONDS=$(stage_seconds "$step") "$PY" - "$step" "$@" <<'EOF'
import json, os, sys
from pathlib import Path

step, args = sys.argv[1], sys.argv[2:]
D = Path("data/mini"); B = D / "bench"
load = lambda p: json.loads(Path(p).read_text())
if step == "spec":
    entry = {"command": "; ".join(args), "result": {
        "drafters": [k for k in ("offsets", "per_position", "low_rank", "medusa", "shared_low_rank")
                     if (D / "drafters" / f"{k}.safetensors").is_file()],
        "trees": sorted(int(p.stem.rsplit("_n", 1)[1]) for p in (D / "trees").glob("offsets_n*.json"))}}
elif step == "lossless":
    res = {}
    for k in ("offsets", "medusa", "shared_low_rank"):
        r = load(B / f"lossless_{k}_n16.json")
        res[k] = {"all_passed": r["all_passed"], "controls_all_failed": r["controls_all_failed"],
                  "min_p": [c["decoder"]["min_p"] for c in r["contexts"]]}
    entry = {"command": "; ".join(args), "result": res}
elif step == "table3":
    t = load(B / "table3_offsets_n16.json")
    res = {}
    for r in t["rows"]:
        m = r["metric"]
        res[r["language"]] = {"metric": m, "ar": round(r[f"ar_{m}"], 4), "spec": round(r[f"spec_{m}"], 4),
                              "diff_ci95": [round(x, 4) for x in r[f"{m}_diff_ci95"]]}
    res["headline_ci_covers_zero"] = t["headline_ci_covers_zero"]
    entry = {"command": "; ".join(args), "result": res}
elif step in ("stream", "backends"):
    old = load(D / "manifest.json").get("steps", {}).get(step) or {}
    cmds = dict(old.get("commands", {}))
    cmds.update(a.split("=", 1) for a in args)  # FILE=COMMAND (the file holds no '=')
    entry = {"commands": cmds}
    la = Path(os.environ["WORK"]) / f"{step}_loadavg.json"
    if la.is_file():
        entry["load_average_1min"] = load(la)
    entry["machine"] = f"{os.cpu_count()} CPU cores" + (f"; {os.environ['MACHINE_NOTE']}"
                                                        if os.environ.get("MACHINE_NOTE") else "")
    if step == "backends" and "bench/ar_frame_graph_0.6b.json" not in args:
        entry["note"] = ("bench/backends_offsets_n16.json re-measured on the rebuilt mini model; "
                         "bench/ar_frame_graph_0.6b.json (0.6B preset, random weights) does not depend on it "
                         "and was kept")
else:
    sys.exit(f"record: unknown step {step!r}")
if os.environ.get("RUN_NOTE"):
    entry["note"] = (entry.get("note", "") + " " + os.environ["RUN_NOTE"]).strip()
if os.environ.get("REC_SECONDS"):
    entry["seconds"] = float(os.environ["REC_SECONDS"])
if os.environ.get("DRY_RECORD"):
    print(json.dumps({step: entry}, indent=1))
else:
    from rvqspec.mini.build import record_step  # record_step(data_dir, step, entry) -> manifest
    m = record_step("data/mini", step, entry)
    print(f"    manifest: steps.{step} recorded, {len(m['artifacts'])} artifacts re-checksummed")
EOF
  ) 9>"$WORK/manifest.lock"
}

# --------------------------------------------------------------------------------- the commands
SPEC_PIPE="RUNS=$SPEC_RUNS bash scripts/mini_spec_pipeline.sh"
ACC_DRAFTERS=""
for k in "${DRAFTERS[@]}"; do ACC_DRAFTERS+=" --drafter $k=$D/drafters/$k.safetensors"; done
SPEC_ACC="$RV bench acceptance --model $M --calibration $SPEC_RUNS/fr_calib$ACC_DRAFTERS --out $B/acceptance.json"
SPEC_BENCH="$RV bench spec --acceptance $B/acceptance.json --model $M --drafter $D/drafters/offsets.safetensors --budget 4 --frames 60 --threads 1 --compiled --out $B/spec.json"
SPEC_SLR="$RV bench spec --acceptance $B/acceptance.json --acceptance-drafter shared_low_rank --model $M --drafter $D/drafters/shared_low_rank.safetensors --budget 4 --frames 60 --no-full-size --out $B/spec_shared_low_rank.json"
lossless_cmd() { echo "$RV bench lossless --model $M --drafter $D/drafters/$1.safetensors --acceptance $B/acceptance.json --acceptance-drafter $1 --budget 16 --contexts 2 --frames 20000 --control-frames 5000 --json --out $B/lossless_$1_n16.json"; }
TABLE3_ARGS="--drafter $D/drafters/offsets.safetensors --tree $D/trees/offsets_n16.json --sentences 40 --seeds 0 1"
TABLE3_REC="$PY scripts/table3.py $TABLE3_ARGS > $B/table3_offsets_n16.json"
STREAM2="$RV bench stream --threads 2 --json --out $B/stream.json"
STREAM1="$RV bench stream --threads 1 --no-full-size --json --out $B/stream_threads1.json"
STREAM_TOL="$PY scripts/stream_tolerance.py --out $B/stream_tolerance.json"
BACKENDS="$PY scripts/bench_backends_mini.py $B/backends_offsets_n16.json 60 spec,ar"
AR_GRAPH="$RV bench ar --frames 8 --warmup 2 --calls 40 --dtype float32 --threads 2 --frame-graph --json --out $B/ar_frame_graph_0.6b.json"
SPADE_ALL="$RV spade all --wli-texts 16 --texts 30 --fresh"   # results.json config: wli_texts 16, texts 30, fresh
SPADE_ABLATE="$RV spade ablate --runs runs/spade/v2 --wli-texts 48 --wli-seeds 3 --texts 80 --seeds 2 --timing-texts 8 --threads 1 --out data/spade/ablation.json"
SPADE_COMBINED="$RV spade combined --student runs/spade/v2/variants/keep_50% --texts 8 --reps 5 --acceptance $B/acceptance.json --threads 1 --out data/spade/combined.json"
PROFILE_ACCEPTANCE=${PROFILE_ACCEPTANCE:-runs/real_mini_out/acceptance_lr1e-2.json}

# ------------------------------------------------------------------------------------------ stages
# check: the rebuild is done, recorded and in the new layout. Reads nothing later stages write.
stage_check() {
  if pgrep -f "rvqspec(\.cli)? mini build" >/dev/null; then
    echo "error: a mini build is still running (it rewrites the manifest):" >&2; pgrep -af "rvqspec(\.cli)? mini build" >&2
    [[ -n "${FORCE:-}" ]] || exit 1
  fi
  run_cmd check-verify "$RV mini verify"
  "$PY" - <<'EOF' || [[ -n "${FORCE:-}" ]]
import json, sys
from pathlib import Path
m = json.loads(Path("data/mini/manifest.json").read_text())
rec = json.loads(Path("data/mini/model/mini_model.json").read_text())["config"]
model, codec = m["steps"].get("model", {}), m["steps"].get("codec", {})
print(f"    model: talker {rec['talker_layers']} x {rec['talker_hidden']}, code predictor {rec['cp_layers']} x "
      f"{rec['cp_hidden']} ({'identity' if rec['cp_hidden'] == rec['talker_hidden'] else 'Linear'} projection), "
      f"{rec['steps']} steps; codec rate_lambda {codec.get('config', {}).get('codec', {}).get('rate_lambda')}")
bad = []
if model.get("config") != rec:
    bad.append("manifest steps.model.config differs from data/mini/model/mini_model.json (model not recorded)")
if (rec["talker_layers"], rec["cp_hidden"], rec["cp_layers"]) != (8, 192, 5):
    bad.append("the model is not the new layout (talker 8 layers, code predictor 192 x 5)")
if codec.get("config", {}).get("codec", {}).get("rate_lambda") != 0.001:
    bad.append("the codec is not the rate_lambda = 0.001 one")
for b in bad:
    print("error:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

# spec (~1-1.5 h; old world ~35 min: steps.model finished 23:38:49, steps.spec 00:13:24). Extraction
# (teacher-forced train, free-running calibration), five drafters, two acceptance tables, trees
# N = 4..64, the acceptance benchmark (Table 2), bench spec (offsets, N = 4, compiled full-size rows)
# and bench spec for shared_low_rank. Read by: every later stage (drafters, trees/offsets_n{4,16}.json,
# bench/acceptance.json); bench stream takes its default N from spec.json full_size.chosen_N;
# spade combined and the stream projection read acceptance.json; README "Known limits", docs/design.md
# "Why the mini drafts are hard"; tests/test_mini_model_artifact.py::test_committed_table2_ordering.
stage_spec() {
  case "$SPEC_RUNS" in runs/*) rm -rf "$SPEC_RUNS" ;; esac  # shards of the old model would be reused
  local t0=$SECONDS
  run_cmd spec-pipeline "$SPEC_PIPE"
  run_cmd spec-acceptance "$SPEC_ACC"
  run_cmd spec-bench "$SPEC_BENCH"
  run_cmd spec-bench-slr "$SPEC_SLR"
  echo $((SECONDS - t0)) >"$WORK/seconds/spec"
  stage_record_spec
}
stage_record_spec() {
  record spec "$(portable "$SPEC_PIPE")" "$(portable "$SPEC_ACC")" "$(portable "$SPEC_BENCH")" "$(portable "$SPEC_SLR")"
}

# lossless (~2-3 h; 60,000 unbatched speculative frames per drafter: 2 contexts x (20,000 + 2 controls x
# 5,000), plus 40,000 batched AR frames; old ~25-40 min per drafter). Read by: README "Lossless at
# model scale" table, docs/design.md "Losslessness at model scale",
# tests/test_lossless.py::test_committed_mini_lossless_benchmark.
stage_lossless() {
  require_current_drafters
  local t0=$SECONDS k
  for k in "${LOSSLESS[@]}"; do run_cmd "lossless-$k" "$(lossless_cmd "$k")"; done
  echo $((SECONDS - t0)) >"$WORK/seconds/lossless"
  stage_record_lossless
}
stage_record_lossless() {
  local cmds=() k
  for k in "${LOSSLESS[@]}"; do cmds+=("$(portable "$(lossless_cmd "$k")")"); done
  record lossless "${cmds[@]}"
}

# table3 (~1 h; 6 languages x 40 eval sentences x 2 seeds x AR/spec = 960 syntheses through the mini
# recognizer; old ~20-30 min). Needs drafters/offsets + trees/offsets_n16.json (and the recognizer).
# Read by: README "Free-running synthesis" and "Seed Table 3 on the mini world",
# tests/test_table3_script.py::test_committed_table3.
stage_table3() {
  require_current_drafters
  local t0=$SECONDS
  run_cmd table3 "$PY scripts/table3.py $TABLE3_ARGS > $WORK/table3.json.part && mv $WORK/table3.json.part $B/table3_offsets_n16.json"
  echo $((SECONDS - t0)) >"$WORK/seconds/table3"
  stage_record_table3
}
stage_record_table3() { record table3 "$(portable "$TABLE3_REC")"; }

# stream (~10 min; 8 streams per mode x 262 frames, full-size 0.6B projection, tolerance on 4
# sentences; old ~5 min). Timing: run on a quiet machine. Needs spec.json (chosen N), offsets tree,
# acceptance.json. Read by: docs/streaming.md ("rvqspec bench stream"), the report's stream figures.
stage_stream() {
  require_current_drafters
  local t0=$SECONDS a b c e f g
  a=$(loadavg); run_cmd stream-threads2 "$STREAM2"; b=$(loadavg)
  c=$(loadavg); run_cmd stream-threads1 "$STREAM1"; e=$(loadavg)
  f=$(loadavg); run_cmd stream-tolerance "$STREAM_TOL"; g=$(loadavg)
  printf '{"bench/stream.json": "%s before, %s after (/proc/loadavg)", "bench/stream_threads1.json": "%s before, %s after (/proc/loadavg)", "bench/stream_tolerance.json": "%s before, %s after (/proc/loadavg)"}\n' \
    "$a" "$b" "$c" "$e" "$f" "$g" >"$WORK/stream_loadavg.json"
  echo $((SECONDS - t0)) >"$WORK/seconds/stream"
  stage_record_stream
}
stage_record_stream() {
  record stream "bench/stream.json=$(portable "$STREAM2")" "bench/stream_threads1.json=$(portable "$STREAM1")" \
    "bench/stream_tolerance.json=PYTHONPATH=\$PWD $(portable "$STREAM_TOL")"
}

# backends (~10 min; Inductor and ONNX setup dominate: old setup_s 175 s in all, ~4 min). Timing:
# run on a quiet machine. ar_frame_graph_0.6b.json is the 0.6B preset with random weights: model
# independent, re-measured only with AR_FRAME_GRAPH=1 (~4 min: compile_s 21 s + graph_compile_s 101 s).
# Read by: docs/deploy.md "Measured".
stage_backends() {
  require_current_drafters
  local t0=$SECONDS args a b
  a=$(loadavg); run_cmd backends "$BACKENDS"; b=$(loadavg)
  printf '{"bench/backends_offsets_n16.json": "%s before, %s after (/proc/loadavg)"}\n' "$a" "$b" >"$WORK/backends_loadavg.json"
  args=("bench/backends_offsets_n16.json=PYTHONPATH=\$PWD $(portable "$BACKENDS")")
  if [[ -n "${AR_FRAME_GRAPH:-}" ]]; then
    run_cmd backends-ar-graph "$AR_GRAPH"
    args+=("bench/ar_frame_graph_0.6b.json=$(portable "$AR_GRAPH")")
  fi
  echo $((SECONDS - t0)) >"$WORK/seconds/backends"
  record backends "${args[@]}"
}
stage_record_backends() { record backends "bench/backends_offsets_n16.json=PYTHONPATH=\$PWD $(portable "$BACKENDS")"; }

# spade (~4-5 h on one thread). 1) `spade all` re-derives data/spade/results.{json,md,html} and
# importance.html (old <= 40 min: students 62 s each, evaluation 42-88 s synthesis per row; the
# 8-layer teacher has 9 WLI passes instead of 5, ~1-1.5 h). 2) `spade ablate` and 3) `spade combined`
# are data/spade/README.md's v2 study (ablation ~2.5-3.5 h: 13 evaluated models x 160 clips, 9 WLI
# passes x 144 clips, ~11 distillations; combined ~10 min), written to data/spade/ablation.{json,md}
# and combined.json. combined reads results.json's projection timings and bench/acceptance.json.
# Read by: tests/test_spade_combined.py (results.json "projection"), notebooks/07_spade (none
# committed), data/spade/README.md prose (hand edit: it still says "a 4-layer talker").
stage_spade() {
  require_current_drafters
  local t0=$SECONDS
  run_cmd spade-all "$SPADE_ALL"
  run_cmd spade-ablate "$SPADE_ABLATE"
  run_cmd spade-combined "$SPADE_COMBINED"
  echo $((SECONDS - t0)) >"$WORK/seconds/spade"
}

# rehearsal (~30-45 min; seven steps, three of them two-process `accelerate launch`es): the
# docs/real_weights.md "Rehearsal on the mini world" block as run, into runs/real_mini{,_out}
# (ignored). Needs runs/mini/corpus (the build's audio corpus). Read by: that docs section's figures
# and Table 3, and the `profiles` stage (acceptance_lr1e-2.json).
stage_rehearsal() {
  local RD=runs/real_mini RO=runs/real_mini_out C=mini:data/mini/codec port=$((29700 + RANDOM % 200)) t0=$SECONDS LCMD=
  [[ -d runs/mini/corpus ]] || { echo "error: runs/mini/corpus (the mini build's audio corpus) is missing" >&2; exit 1; }
  rm -rf "$RD" "$RO"   # real extract/evaluate resume finished units: the old model's would be kept
  # the docs' $L, with a fresh port per launch (a closing gloo store may still hold the last one)
  L() { port=$((port + 1)); LCMD="OMP_NUM_THREADS=1 $PY -m accelerate.commands.launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no --main_process_port $port -m rvqspec.cli"; }
  run_cmd rehearsal-datasets "$RV real mini-datasets --corpus runs/mini/corpus --out-dir $RD --eval-per-language 20"
  L; run_cmd rehearsal-extract-train "$LCMD real extract --model $M $RD/voxpopuli --split train --out-dir $RO/train --codec $C --backend mini --unit-items 100"
  L; run_cmd rehearsal-train-offsets "$LCMD real train-offsets --model $M $RO/train --out $RO/offsets_lr1e-2.safetensors --epochs 3 --lr 0.01"
  L; run_cmd rehearsal-extract-calib "$LCMD real extract --model $M $RD/librispeech --lang en --out-dir $RO/calib --source free_running --codec $C --backend mini --unit-items 50"
  run_cmd rehearsal-calibrate "$RV spec calibrate --model $M --shards $RO/calib --out $RO/acceptance_lr1e-2.json --drafter $RO/offsets_lr1e-2.safetensors"
  run_cmd rehearsal-trees "for N in 8 16 32; do $RV spec grow-tree --acceptance $RO/acceptance_lr1e-2.json --out $RO/tree2_N\$N.json --budget \$N; done"
  run_cmd rehearsal-profile "$RV profile --backend torch-cpu --model $M --budget 8 --budget 16 --budget 32 --calls 50 --warmup 10 --acceptance $RO/acceptance_lr1e-2.json --out $RO/profile_lr1e-2.json"
  L; run_cmd rehearsal-table3 "$LCMD real evaluate --model $M $RD/fleurs --split test --out-dir $RO/table3 --backend mini --drafter $RO/offsets_lr1e-2.safetensors --tree $RO/tree2_N16.json --asr data/mini/recognizer --seeds 2 --unit-items 10"
  cat "$RO/table3/table3.md"
  echo $((SECONDS - t0)) >"$WORK/seconds/rehearsal"
}

# profiles (~1 min, no timing). The 0.6B random-weight latencies (data/profiles/<backend>_<dtype>.json,
# figure4.html, default seed-fitted acceptance) do not depend on the mini model and stay; the three
# *_mini-acceptance.json were re-scored with the rehearsal's calibration table, so they and
# figure4_mini-acceptance.html are re-derived here. Read by: README (data/profiles/), the report.
stage_profiles() {
  [[ -f "$PROFILE_ACCEPTANCE" ]] || { echo "error: $PROFILE_ACCEPTANCE is missing: run the rehearsal stage, or set PROFILE_ACCEPTANCE (e.g. data/mini/trees/acceptance_offsets.json)" >&2; exit 1; }
  local p outs=()
  for p in onnx_fp32 torch-cpu_bf16 torch-cpu_fp32; do
    run_cmd "profile-$p" "$RV profile --rescore data/profiles/$p.json --acceptance $PROFILE_ACCEPTANCE --out data/profiles/${p}_mini-acceptance.json"
    outs+=("data/profiles/${p}_mini-acceptance.json")
  done
  run_cmd profile-figure4 "$RV figure4 ${outs[*]} --out data/profiles/figure4_mini-acceptance.html --title \"Same latencies under the mini world's calibration table ($PROFILE_ACCEPTANCE)\""
  if [[ -f data/profiles/figure4_mini-acceptance.png ]] && ! git ls-files --error-unmatch data/profiles/figure4_mini-acceptance.png >/dev/null 2>&1; then
    rm -f data/profiles/figure4_mini-acceptance.png  # kaleido present: a PNG that was never committed
  fi
}

# anchor (opt-in, ~10-20 min): the gate harness on the committed world. The committed anchor is the
# OLD world's column of docs/design.md "Mini world v2 gates"; set ANCHOR_OUT to keep it and write the
# new world beside it (e.g. docs/measurements/gate_anchor_v2_world.json).
stage_anchor() {
  local out=${ANCHOR_OUT:-docs/measurements/gate_anchor_committed_world.json}
  local why=${ANCHOR_FALSIFIED_IF:-"Anchor, not a gate: the committed full-scale world measured by the same code on the same split sizes."}
  run_cmd anchor "$PY scripts/mini_gate.py --world data/mini --name ${ANCHOR_NAME:-committed_world} --drafter-steps 500 --out $out --falsified-if \"$why\""
}

# notebooks (~10 min): notebooks are committed stripped (tests/test_notebooks.py checks it), so
# their recorded results live only in executed copies; this refreshes them under runs/nb/ (the
# notebooks' shared work folder) and prints each record. Do not commit the executed copies.
stage_notebooks() {
  local nb name
  mkdir -p runs/nb/executed
  for nb in notebooks/[0-9][0-9]_*.ipynb; do
    name=$(basename "$nb" .ipynb)
    run_cmd "notebook-$name" "$PY -m papermill $nb runs/nb/executed/$name.ipynb -p out_dir runs/nb -p threads 1 -k python3 --cwd . --no-progress-bar"
    "$PY" -c "import json, sys; from rvqspec.workbench.notebook_results import read_recorded; print('   ', json.dumps(read_recorded(sys.argv[1]))[:400])" "runs/nb/executed/$name.ipynb"
  done
}

# demo (opt-in, ~10-15 min): README Quickstart's "make demo (6 min 42 s ...)"; fresh caches.
stage_demo() {
  rm -rf runs/demo report
  local t0=$SECONDS
  run_cmd demo "$RV demo"
  echo "    rvqspec demo: $((SECONDS - t0)) s (README quotes the time on a fresh clone, venv in place)"
}

# figures (seconds): the numbers README.md and docs/*.md quote, from the new files, for hand edits.
stage_figures() {
  "$PY" - <<'EOF'
import json
from pathlib import Path

def load(p):
    p = Path(p)
    return json.loads(p.read_text()) if p.is_file() else None

B = Path("data/mini/bench")
m = load("data/mini/manifest.json"); st = m["steps"]
cfg = load("data/mini/model/config.json")["talker_config"]; cp = cfg["code_predictor_config"]
print("== README 'The embedded default' table / build times")
print(f"model: talker {cfg['num_hidden_layers']} layers x {cfg['hidden_size']}, code predictor "
      f"{cp['num_hidden_layers']} layers x {cp['hidden_size']} "
      f"({'identity projection, 0.6B layout' if cp['hidden_size'] == cfg['hidden_size'] else 'small_to_mtp_projection, 1.7B layout'}); "
      f"{st['model']['config']['steps']} steps")
r = st["model"]["result"]; print(f"val loss c0 {r['val_loss_c0']:.2f} / c1..c15 {r['val_loss_cp']:.2f} nats")
q = st["codec"]["result"]["quality"]["feature_snr_db"]; print(f"codec feature SNR 1/4/16: {q['1']:.1f} / {q['4']:.1f} / {q['16']:.1f} dB")
h = st["recognizer"]["result"]["heldout"]["en"]; print(f"recognizer held-out en CER {100*h['cer']:.1f}% WER {100*h['wer']:.1f}%")
print("build seconds:", {k: st[k].get("seconds") for k in ("corpus", "codec", "recognizer", "model")},
      f"total_bytes {m['total_bytes']/1e6:.1f} MB (tests/test_mini_build.py budget: < 50 MB)")
acc = load(B / "acceptance.json")
if acc:
    print("== README 'Known limits', docs/design.md tables: replay tokens per call N = 4 / 16 / 64 (en)")
    med = acc["drafters"].get("medusa", {}).get("by_language", {}).get("en", {}).get("16", {}).get("replay_tokens_per_call")
    for k, e in acc["drafters"].items():
        bl = e["by_language"]["en"]
        t = [bl[n]["replay_tokens_per_call"] for n in ("4", "16", "64") if n in bl]
        share = f", {100*bl['16']['replay_tokens_per_call']/med:.0f}% of Medusa" if med else ""
        print(f"  {k}: {' / '.join(f'{x:.3f}' for x in t)}; oracle N=16 {bl['16']['oracle_tokens_per_call']:.2f}; "
              f"+{e['added_parameters']:,} params ({e['added_percent']:.3f}%){share}")
s = load(B / "spec.json")
if s:
    print(f"== bench spec: mini speedup {s['mini']['speedup']:.2f}x at {s['mini']['tokens_per_call']:.3f} tokens/call; "
          f"full size chosen N {s['full_size']['chosen_N']} (projected {s['full_size']['chosen_projected_speedup']:.2f}x)")
for k in ("offsets", "medusa", "shared_low_rank"):
    r = load(B / f"lossless_{k}_n16.json")
    if r:
        print(f"== lossless {k}: pass {r['all_passed']}, controls fail {r['controls_all_failed']}; min p "
              + ", ".join(f"{c['decoder']['min_p']:.2g}" for c in r["contexts"])
              + "; accepted/frame " + ", ".join(str(c["decoder"]["accepted_per_frame"]) for c in r["contexts"])
              + "; always-accept impossible " + " / ".join(str(c["control_always_accept"]["impossible"]) for c in r["contexts"])
              + "; full-p min p " + " / ".join(f"{c['control_full_p']['min_p']:.0e}" for c in r["contexts"]))
t = load(B / "table3_offsets_n16.json")
if t:
    print("== README Table 3 (%): lang metric AR spec [diff CI] | CER AR/spec | spec tokens/call")
    for r in t["rows"]:
        mt = r["metric"]; lo, hi = r[f"{mt}_diff_ci95"]
        print(f"  {r['language']} {mt} {100*r[f'ar_{mt}']:.1f} {100*r[f'spec_{mt}']:.1f} "
              f"{100*r[f'{mt}_diff']:+.1f} [{100*lo:.1f}, {100*hi:.1f}] | {100*r['ar_cer']:.1f} / {100*r['spec_cer']:.1f} | "
              f"{r['spec_tokens_per_call']:.3f}")
    print(f"  intervals covering 0: {t['headline_ci_covers_zero']} of {len(t['rows'])}")
for f in ("stream.json", "stream_threads1.json"):
    r = load(B / f)
    if r:
        print(f"== docs/streaming.md {f}: " + "; ".join(
            f"{mo} TTFA p50/p95 {r[mo]['ttfa_ms_p50']}/{r[mo]['ttfa_ms_p95']} ms RTF {r[mo]['rtf']} calls/s "
            f"{r[mo]['talker_calls_per_audio_s']}/{r[mo]['predictor_calls_per_audio_s']} host {r[mo]['host_ms_per_frame']} ms "
            f"tok/call {r[mo]['tokens_per_call']}" for mo in ("ar", "spec")) + f"; spec/AR RTF {r['spec_over_ar_rtf']}")
        if "full_size" in r:
            fs = r["full_size"]
            print(f"   full size: measured {fs['measured_ms']}, AR frame {fs['ar']['frame_ms']} ms; "
                  + "; ".join(f"{v['source']}: {v['frame_ms']} ms" for v in fs["spec"].values()))
tol = load(B / "stream_tolerance.json")
if tol:
    print(f"== stream tolerance: all within {tol['all_within']}; " + "; ".join(
        f"{k} {min(s['stream_db'][k] for s in tol['sentences']):.2f}-{max(s['stream_db'][k] for s in tol['sentences']):.2f} dB"
        for k in tol["sentences"][0]["stream_db"]) + "; floor " +
        f"{min(s['floor_db'] for s in tol['sentences']):.2f}-{max(s['floor_db'] for s in tol['sentences']):.2f} dB")
bk = load(B / "backends_offsets_n16.json")
if bk:
    print(f"== docs/deploy.md backends (codes agree {bk['codes_agree_across_backends']}):")
    for mo, rows in bk["modes"].items():
        for be, r in rows.items():
            print(f"  {mo}/{be}: frame {r['frame_ms']} ms, calls/frame {r['calls_per_frame']}, tok/call {r['tokens_per_call']}, "
                  f"call {r.get('call_ms', '-')} ms, host {r.get('host_overhead_share', '-')}, vs eager {r.get('speedup_vs_eager', 1)}")
for f in ("data/spade/results.md", "data/spade/ablation.md"):
    if Path(f).is_file():
        print(f"== {f} (first lines)"); print("\n".join(Path(f).read_text().splitlines()[:12]))
c = load("data/spade/combined.json")
if c:
    for r in c["rows"]:
        print(f"  combined {r['name']}: {r['talker_layers']} layers, RTF {r['rtf']:.3f}, {r['speedup_vs_teacher_ar']:.2f}x")
for p in sorted(Path("data/profiles").glob("*_mini-acceptance.json")):
    r = load(p); print(f"== {p.name}: N* {r['n_star']}, best speed-up {r['best_speedup']:.2f}, speculate {r['use_speculation']}")
EOF
}

# verify (~10 min): manifest checksums, then the tests that read the committed artifacts.
stage_verify() {
  run_cmd verify-manifest "$RV mini verify"
  run_cmd verify-tests "$PY -m pytest -q -p no:cacheprovider tests/test_mini_build.py::test_committed_artifacts_match_manifest tests/test_mini_model_artifact.py tests/test_lossless.py::test_committed_mini_lossless_benchmark tests/test_table3_script.py::test_committed_table3 tests/test_readme.py tests/test_no_absolute_paths.py tests/test_spade_combined.py"
}

# --------------------------------------------------------------------------------------- dispatch
ORDER=(check spec record-spec lossless record-lossless table3 record-table3 stream record-stream
       backends record-backends spade rehearsal profiles anchor notebooks demo figures verify)
DEFAULT=(check spec lossless table3 stream backends spade rehearsal profiles notebooks figures verify)
NO_CHECK=(figures list verify record-spec record-lossless record-table3 record-stream record-backends)

if [[ ${1:-} == list || ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
declare -A want=()
if (( $# == 0 )); then
  for s in "${DEFAULT[@]}"; do want[$s]=1; done
else
  for s in "$@"; do
    [[ " ${ORDER[*]} " == *" $s "* ]] || { echo "error: unknown stage '$s' (stages: ${ORDER[*]})" >&2; exit 2; }
    want[$s]=1
  done
  need_check=0
  for s in "$@"; do [[ " ${NO_CHECK[*]} " == *" $s "* ]] || need_check=1; done
  if (( need_check )) && [[ -z "${SKIP_CHECK:-}" ]]; then want[check]=1; fi
fi
T_ALL=$SECONDS
for s in "${ORDER[@]}"; do
  [[ -n "${want[$s]:-}" ]] || continue
  echo "=== stage $s ($(date -u +%Y-%m-%dT%H:%M:%SZ), load $(loadavg))"
  "stage_${s//-/_}"
done
echo "=== done in $((SECONDS - T_ALL)) s; logs in $LOGS"
