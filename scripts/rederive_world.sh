#!/usr/bin/env bash
# Re-derive every committed artifact that depends on the mini world (data/mini), in dependency order,
# after `rvqspec mini build` has rebuilt corpus, codec, recognizer and model. The commands are the
# ones data/mini/manifest.json records (steps.<name>.command / commands) for spec, lossless,
# intelligibility, stream, backends and table3, and each stage records them back in the same shape;
# the others come from data/spade/README.md, docs/real_weights.md ("Rehearsal on the mini world") and
# the notebooks.
#
#   bash scripts/rederive_world.sh                 # every default stage, in order
#   bash scripts/rederive_world.sh spec            # one stage (a `check` runs first; SKIP_CHECK=1 skips it)
#   bash scripts/rederive_world.sh lossless table3 # several (always run in dependency order)
#   bash scripts/rederive_world.sh list            # the stages
#   DRY_RECORD=1 bash scripts/rederive_world.sh record-table3   # print a manifest entry, write nothing
#
# Stages (default order) with what they read and write. Times: the v4 world (8 x 192 talker, 5 x 192
# predictor, 1,024 codes) on the shared 2-core box, one thread unless stated, as its manifest records
# them (steps.<stage>.seconds; spec, lossless, intelligibility and table3 ran two at a time).
# `rvqspec mini build` itself took 87 min (steps.corpus / codec, then recognizer beside model).
#   check      ~1 min   mini verify, then rvqspec/mini/recipe.py: the rebuild is finished, recorded and the
#                       build's default recipe (every field of BuildConfig()'s codec, corpus and model
#                       configs as codec_config.json, the manifest and mini_model.json record them, and
#                       the codec's fit share; the model's thread schedule aside)
#   cast       ~1 min   stores the model in bfloat16 and the codec's codebooks in float16 in place
#                       (data/ <= 80 MB), recorded as steps.model_cast; before `spec`, because a drafter
#                       records the hash of the model it was trained for
#   spec       ~34 min  with the pipeline (extraction, 5 drafters, calibrations, 15 trees: not timed on v3,
#                       whose drafters came from the candidate build, steps.spec.note; allow ~1 h).
#                       Writes drafters/*, trees/*, bench/acceptance.json (Table 2),
#                       bench/spec_{medusa,offsets,shared_low_rank}_n{4,16}.json, spec_medusa_n4_f200.json
#   lossless   ~33 min  reads drafters/medusa, acceptance.json; writes bench/lossless_medusa_n16.json
#   intelligibility ~37 min  reads model, codec, recognizer, data/testset; writes
#                       bench/recognizer_testset.json, wer_testset_{en,de,es,ru,ja,zh}.json,
#                       wer_testset_en_greedy.json, mini_eval.json
#   stream     ~3 min   reads drafters/medusa, trees/medusa_n4.json (2 threads); writes bench/stream_medusa_n4.json
#                       (steps.stream), then ~4 min of graph-backend streams (onnx-loop, onnx; Medusa and shared
#                       low-rank) and the threaded eager one: bench/stream_{onnx_loop,onnx}_*_n4.json,
#                       stream_eager_threaded_medusa_n4.json (steps.stream_graph)
#   backends   ~4 min   reads drafters/shared_low_rank, trees/shared_low_rank_n4.json; writes
#                       bench/backends_shared_low_rank_n4.json (Inductor and ONNX setup dominate)
#   table3     ~33 min  reads drafters/medusa, trees/medusa_n16.json, recognizer; writes
#                       bench/table3_medusa_n16.json (6 languages x 40 sentences x 2 seeds x AR/spec)
#   spade      ~2 h     data/spade/README.md's commands, run on v4 (2026-12-07): project (1 min),
#                       ablate (1 h 15 min on 2 threads), its 1,000- and 4,000-step sweep (length.*) and combined;
#                       writes data/spade/{projection,ablation,length,combined}.*; reads bench/acceptance.json
#                       (v3's study, `spade all` and recipe runs: docs/measurements/world_v3/committed/spade/)
#   rehearsal  ~30-45 min docs/real_weights.md rehearsal on the mini world (2 processes), into runs/real_mini*
#   profiles   ~1 min   Figure 4 profiles re-scored with the rehearsal's acceptance (no timing)
#   notebooks  ~10 min  papermill runs of notebooks/*.ipynb into runs/nb (nothing committed)
#   figures    seconds  prints the figures that README.md / docs/*.md quote (for hand edits)
#   verify     ~10 min  mini verify + the tests that read committed artifacts
# Default total: about 3 h without spade (spec pipeline ~1 h, the six manifest stages ~1.5 h, the rest
# ~1 h), plus spade's hours. The timing stages need a quiet machine (their JSONs are wall-clock
# measurements), the others do not, so run the timing ones first and the rest in two lanes, e.g.
#   bash scripts/rederive_world.sh spec stream backends && { bash scripts/rederive_world.sh lossless \
#     intelligibility & bash scripts/rederive_world.sh table3; wait; }   # then spade rehearsal ...
# (manifest writes are serialised with flock). v4's timings (spec's bench spec, stream, backends) ran
# with nothing else of ours running; TIMING_NOTE records how the machine was kept quiet.
# Opt-in stages (never in the default list):
#   anchor     ~10-20 min docs/measurements/gate_anchor_committed_world.json (scripts/mini_gate.py --world)
#   demo       ~4-10 min `rvqspec demo` timed (README Quickstart quotes `make demo` on a fresh clone)
#   record-spec record-lossless record-intelligibility record-stream record-stream-graph record-backends record-table3:
#              only (re)write that manifest step from the files on disk (e.g. after a failed record)
#
# Environment: RVQSPEC, PY, WORK (logs, default runs/rederive), SPEC_RUNS (default runs/spec_new, as
# recorded), CAST_DRAFTERS (spec: drafters stored in bfloat16, default medusa as recorded; empty: none),
# SPEC_TIMING_BUDGETS (spec: the wall-clock budgets, default "3 4 16" as recorded), EVAL_DIR (mini
# evaluate's folder, default runs/v4/eval, as recorded),
# PROFILE_ACCEPTANCE (default runs/real_mini_out/acceptance_lr1e-2.json, from `rehearsal`),
# AR_FRAME_GRAPH=1 (backends: also re-measure the model-independent ar_frame_graph_0.6b.json),
# TIMING_NOTE (appended in parentheses to the recorded timing commands, e.g. "the other job paused
# with SIGSTOP"), FORCE=1 (check: warn instead of stopping), VERBOSE=1 (tee logs), RUN_NOTE (manifest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RV=${RVQSPEC:-.venv/bin/rvqspec}
PY=${PY:-.venv/bin/python}
export RVQSPEC="$RV" PY
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

WORK=${WORK:-runs/rederive}
LOGS=$WORK/logs
SPEC_RUNS=${SPEC_RUNS:-runs/spec_new}
EVAL_DIR=${EVAL_DIR:-runs/v4/eval}
# Medusa's heads over 1,024 codes are 10.5 M parameters: stored in bfloat16 to keep data/ <= 80 MB
CAST_DRAFTERS=${CAST_DRAFTERS-medusa}
M=data/mini/model
D=data/mini
B=$D/bench
DRAFTERS=(offsets per_position low_rank medusa shared_low_rank)  # Table 2
SPEC_KINDS=(medusa offsets shared_low_rank)  # wall clock: the strongest, the seed's method, ours
# N = 3 beside 4 and 16 (a chain of three drafts, one node cheaper than N = 4: the verify
# call is compute-bound on this box; `bench spec` grows a tree the acceptance bench did not sweep)
read -r -a SPEC_BUDGETS <<<"${SPEC_TIMING_BUDGETS:-3 4 16}"
LOSSLESS=(medusa)                            # the drafter of Table 3 and streaming
WER_LANGS=(en de es ru ja zh)
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

timing_note() {  # " (TIMING_NOTE[SUFFIX])" for a recorded timing command, or nothing
  if [[ -n "${TIMING_NOTE:-}" ]]; then printf ' (%s%s)' "$TIMING_NOTE" "${1:-}"; fi
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
import json, os, re, sys
from pathlib import Path

step, args = sys.argv[1], sys.argv[2:]
D = Path("data/mini"); B = D / "bench"
load = lambda p: json.loads(Path(p).read_text())

def file_commands(args):  # FILE=COMMAND (the file holds no '='); FILE may be bench/x_{a,b}.json
    cmds = dict(a.split("=", 1) for a in args)
    expand = lambda k: ([p for x in m.group(1).split(",") for p in expand(k[:m.start()] + x + k[m.end():])]
                        if (m := re.search(r"\{([^}]*)\}", k)) else [k])
    missing = [p for k in cmds for p in expand(k) if not (D / p).is_file()]
    if missing:
        sys.exit(f"record {step}: missing {', '.join(missing)} (run the {step} stage)")
    return cmds

def load_average(entry):  # the stage's /proc/loadavg around its timings, when it ran here
    la = Path(os.environ["WORK"]) / f"{step}_loadavg.json"
    if la.is_file():
        entry["load_average_1min"] = load(la)

if step == "spec":  # ARGS: the commands, then the --frames 200 one
    entry = {"command": "; ".join(args[:-1]), "command_frames_200": args[-1], "result": {
        "drafters": sorted(p.stem for p in (D / "drafters").glob("*.safetensors")),
        "trees": sorted(int(p.stem.rsplit("_n", 1)[1]) for p in (D / "trees").glob("offsets_n*.json"))}}
elif step == "model_cast":  # ARGS: the model's and the codec's cast commands
    entry = {"commands": args, "result": {
        "model_dtype": json.loads((D / "model" / "config.json").read_text()).get("dtype"),
        "total_bytes_before": json.loads((D / "manifest.json").read_text()).get("total_bytes")}}
elif step == "lossless":  # every bench/lossless_<drafter>_n16.json on disk
    res = {}
    for p in sorted(B.glob("lossless_*_n16.json")):
        r = load(p)
        res[p.stem[len("lossless_"):-len("_n16")]] = {
            "all_passed": r["all_passed"], "controls_all_failed": r["controls_all_failed"],
            "min_p": [c["decoder"]["min_p"] for c in r["contexts"]]}
    if not res:
        sys.exit("record lossless: no data/mini/bench/lossless_*_n16.json (run the lossless stage)")
    entry = {"command": "; ".join(args), "result": res}
elif step == "table3":  # ARGS: one command, `... > FILE`: the result is read from FILE
    t = load(args[0].rsplit(">", 1)[1].strip())
    res = {}
    for r in t["rows"]:
        m = r["metric"]
        res[r["language"]] = {"metric": m, "ar": round(r[f"ar_{m}"], 4), "spec": round(r[f"spec_{m}"], 4),
                              "diff_ci95": [round(x, 4) for x in r[f"{m}_diff_ci95"]]}
    res["headline_ci_covers_zero"] = t["headline_ci_covers_zero"]
    entry = {"command": "; ".join(args), "result": res}
elif step == "intelligibility":
    entry = {"commands": file_commands(args)}
elif step == "stream":
    entry = {"command": "; ".join(args)}
    load_average(entry)
elif step == "stream_graph":  # ARGS: FILE=COMMAND, the graph backends' and the threaded eager streams
    entry = {"commands": file_commands(args)}
    load_average(entry)
elif step == "backends":
    entry = {"commands": file_commands(args)}
    load_average(entry)
    notes = []
    if os.environ.get("TIMING_NOTE"):
        notes.append(f"{Path(next(iter(entry['commands']))).name} measured with {os.environ['TIMING_NOTE']}")
    if not os.environ.get("AR_FRAME_GRAPH"):
        notes.append("ar_frame_graph_0.6b.json is a random-weight 0.6B-size model (independent of the "
                     "mini world), kept from the previous world")
    if notes:
        entry["note"] = "; ".join(notes)
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
# As data/mini/manifest.json records them. Loops run as bash; the manifest writes them compactly.
SPEC_PIPE="RUNS=$SPEC_RUNS${CAST_DRAFTERS:+ CAST_DRAFTERS=$CAST_DRAFTERS} bash scripts/mini_spec_pipeline.sh"
ACC_DRAFTERS=""
for k in "${DRAFTERS[@]}"; do ACC_DRAFTERS+=" --drafter $k=$D/drafters/$k.safetensors"; done
SPEC_ACC="$RV bench acceptance --model $M --calibration $SPEC_RUNS/fr_calib$ACC_DRAFTERS --out $B/acceptance.json"
# one bench spec per drafter k and tree size n ($k, $n expand in the loop)
SPEC_BENCH="$RV bench spec --acceptance $B/acceptance.json --acceptance-drafter \$k --model $M --drafter $D/drafters/\$k.safetensors --budget \$n --frames 60 --threads 1 --no-full-size --out $B/spec_\${k}_n\$n.json"
SPEC_BENCH_RUN="for k in ${SPEC_KINDS[*]}; do for n in ${SPEC_BUDGETS[*]}; do $SPEC_BENCH; done; done"
SPEC_BENCH_REC="for k in ${SPEC_KINDS[*]}; for n in ${SPEC_BUDGETS[*]}: $SPEC_BENCH"
# 60 frames is noisy: Medusa at N = 4 (the headline) also over 200
SPEC_F200="$RV bench spec --acceptance $B/acceptance.json --acceptance-drafter medusa --model $M --drafter $D/drafters/medusa.safetensors --budget 4 --frames 200 --threads 1 --no-full-size --out $B/spec_medusa_n4_f200.json"
lossless_cmd() { echo "$RV bench lossless --model $M --drafter $D/drafters/$1.safetensors --acceptance $B/acceptance.json --acceptance-drafter $1 --budget 16 --contexts 2 --frames 20000 --control-frames 5000 --json --out $B/lossless_$1_n16.json"; }
ASR_TESTSET="$RV asr testset --codec $D/codec --threads 1 --out $B/recognizer_testset.json"
WER_LANG="$RV wer --texts data/testset/LANG.txt --lang LANG --seeds 2 --json --out $B/wer_testset_LANG.json"  # LANG: each of WER_LANGS
WER_GREEDY="$RV wer --texts data/testset/en.txt --lang en --greedy --json --out $B/wer_testset_en_greedy.json"
MINI_EVAL="$RV mini evaluate --sentences 40 --seeds 2 --out-dir $EVAL_DIR --threads 1"  # only mini_eval.json is committed
TABLE3_OUT=$B/table3_medusa_n16.json
TABLE3_ARGS="--drafter $D/drafters/medusa.safetensors --tree $D/trees/medusa_n16.json --sentences 40 --seeds 0 1"
TABLE3_REC="$PY scripts/table3.py $TABLE3_ARGS > $TABLE3_OUT"
STREAM="$RV bench stream --drafter $D/drafters/medusa.safetensors --tree $D/trees/medusa_n4.json --threads 2 --no-full-size --out $B/stream_medusa_n4.json"
# the same streams on the graph backends (talker step, AR frame, round or whole speculative frame as
# onnxruntime calls; codec decoding in a second thread) and the eager decoder threaded alike
# ($k: medusa, shared_low_rank; $be: onnx-loop, onnx; the file names the backend with an underscore)
STREAM_GRAPH_KINDS=(medusa shared_low_rank)
STREAM_GRAPH="$RV bench stream --drafter $D/drafters/\$k.safetensors --tree $D/trees/\${k}_n4.json --threads 1 --threaded --repeats 3 --no-full-size --backend \$be --out $B/stream_\${be//-/_}_\${k}_n4.json"
STREAM_EAGER_THREADED="$RV bench stream --drafter $D/drafters/medusa.safetensors --tree $D/trees/medusa_n4.json --threads 1 --threaded --repeats 3 --no-full-size --out $B/stream_eager_threaded_medusa_n4.json"
BACKENDS_FILE=bench/backends_shared_low_rank_n4.json
BACKENDS="$PY scripts/bench_backends_mini.py $D/$BACKENDS_FILE 60 spec,ar shared_low_rank 4"
AR_GRAPH="$RV bench ar --frames 8 --warmup 2 --calls 40 --dtype float32 --threads 2 --frame-graph --json --out $B/ar_frame_graph_0.6b.json"
SPADE_PROJECT="$RV spade project --tree-nodes 4 --reps 10 --threads 1 --out data/spade/projection.json"   # full-size timings, random weights
SPADE_ABLATE="$RV spade ablate --runs runs/spade/v4 --wli-texts 16 --wli-seeds 2 --texts 40 --seeds 2 --steps 200 --timing-texts 4 --threads 2 --fresh --out data/spade/ablation.json"
SPADE_LENGTH="$RV spade ablate --runs runs/spade/v4 --ratios 0.5 --no-ablations --sweep-steps 1000 --sweep-steps 4000 --wli-texts 16 --wli-seeds 2 --texts 40 --seeds 2 --steps 200 --timing-texts 0 --threads 2 --out data/spade/length.json"
SPADE_COMBINED="$RV spade combined --student runs/spade/v4/variants/keep_50%_4000_steps --drafter $D/drafters/medusa.safetensors --tree $D/trees/medusa_n4.json --texts 8 --reps 5 --acceptance $B/acceptance.json --timings data/spade/projection.json --threads 1 --out data/spade/combined.json"
PROFILE_ACCEPTANCE=${PROFILE_ACCEPTANCE:-runs/real_mini_out/acceptance_lr1e-2.json}

# ------------------------------------------------------------------------------------------ stages
# check: the rebuild is done, recorded and in the v6 layout. Reads nothing later stages write.
stage_check() {
  if pgrep -f "rvqspec(\.cli)? mini build" >/dev/null; then
    echo "error: a mini build is still running (it rewrites the manifest):" >&2; pgrep -af "rvqspec(\.cli)? mini build" >&2
    [[ -n "${FORCE:-}" ]] || exit 1
  fi
  run_cmd check-verify "$RV mini verify"
  "$PY" - <<'EOF'
import json
from pathlib import Path
rec = json.loads(Path("data/mini/model/mini_model.json").read_text())["config"]
codec = json.loads(Path("data/mini/codec/codec_config.json").read_text())["config"]
print(f"    model: talker {rec['talker_layers']} x {rec['talker_hidden']}, code predictor {rec['cp_layers']} x "
      f"{rec['cp_hidden']} ({'identity' if rec['cp_hidden'] == rec['talker_hidden'] else 'Linear'} projection), "
      f"{rec['steps']} steps; codec {codec['codebook_size']} codes ({codec.get('level0_codebook_size') or codec['codebook_size']} "
      f"at level 0), rate_lambda {codec['rate_lambda']}, level0_lda {codec.get('level0_lda')}")
EOF
  # the rebuild is the build's own recipe (rvqspec/mini/recipe.py): every field of BuildConfig()'s configs
  "$PY" -m rvqspec.mini.recipe data/mini || [[ -n "${FORCE:-}" ]]
}

# cast: data/'s budget (80 MB) holds the 1,024-code world only with the model in bfloat16 and the
# codec's codebooks in float16 (the loaders cast back to float32). Each copy is written whole beside
# its source, then swapped in; the manifest re-checksums and records the commands as steps.model_cast.
# Runs before `spec`: the drafters record the hash of the (cast) model they were trained for.
MODEL_CAST="$RV mini cast --model $M --dtype bfloat16 --out-dir $M.cast && rm -rf $M && mv $M.cast $M"
CODEC_CAST="$RV mini cast --codec $D/codec --dtype float16 --out-dir $D/codec.cast && rm -rf $D/codec && mv $D/codec.cast $D/codec"
stage_cast() {
  local t0=$SECONDS
  run_cmd cast-model "$MODEL_CAST"
  run_cmd cast-codec "$CODEC_CAST"
  echo $((SECONDS - t0)) >"$WORK/seconds/model_cast"
  record model_cast "$(portable "$MODEL_CAST")" "$(portable "$CODEC_CAST")"
}

# spec. The pipeline (mini_spec_pipeline.sh: extraction, five drafters, acceptance tables, trees
# N = 4..64 for offsets / medusa / shared_low_rank), Table 2 (bench acceptance), then the wall clock:
# bench spec for three drafters at N = 4 and 16, and Medusa at N = 4 over 200 frames. Timing: the
# bench spec runs want a quiet machine. Read by: every later stage (drafters, trees,
# bench/acceptance.json); spade combined reads acceptance.json; README "Known limits", docs/design.md;
# tests/test_mini_model_artifact.py::test_committed_table2_ordering.
stage_spec() {
  case "$SPEC_RUNS" in runs/*) rm -rf "$SPEC_RUNS" ;; esac  # shards of the old model would be reused
  local t0=$SECONDS
  run_cmd spec-pipeline "$SPEC_PIPE"
  run_cmd spec-acceptance "$SPEC_ACC"
  run_cmd spec-bench "$SPEC_BENCH_RUN"
  run_cmd spec-bench-f200 "$SPEC_F200"
  echo $((SECONDS - t0)) >"$WORK/seconds/spec"
  stage_record_spec
}
stage_record_spec() {
  record spec "$(portable "$SPEC_PIPE")" "$(portable "$SPEC_ACC")" \
    "$(portable "$SPEC_BENCH_REC")$(timing_note " during the timing")" "$(portable "$SPEC_F200")$(timing_note)"
}

# lossless (60,000 unbatched speculative frames per drafter: 2 contexts x (20,000 + 2 controls x 5,000),
# plus 40,000 batched AR frames). Read by: README "Lossless at model scale", docs/design.md
# "Losslessness at model scale", tests/test_lossless.py::test_committed_mini_lossless_benchmark.
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

# intelligibility (AR only, no drafter): the recognizer on the hand-written test set (clean and
# codec resynthesis), free-running synthesis of that set in six languages (2 seeds) and English
# greedy, and the eval split (40 sentences x 2 seeds per language). Read by: README and
# docs/design.md intelligibility figures.
stage_intelligibility() {
  local t0=$SECONDS l
  run_cmd intelligibility-asr-testset "$ASR_TESTSET"
  for l in "${WER_LANGS[@]}"; do run_cmd "intelligibility-wer-$l" "${WER_LANG//LANG/$l}"; done
  run_cmd intelligibility-wer-en-greedy "$WER_GREEDY"
  run_cmd intelligibility-mini-eval "$MINI_EVAL && cp $EVAL_DIR/mini_eval.json $B/mini_eval.json"
  echo $((SECONDS - t0)) >"$WORK/seconds/intelligibility"
  stage_record_intelligibility
}
stage_record_intelligibility() {
  local langs
  langs=$(IFS=,; echo "${WER_LANGS[*]}")
  record intelligibility "bench/recognizer_testset.json=$(portable "$ASR_TESTSET")" \
    "bench/wer_testset_{$langs}.json=$(portable "$WER_LANG")" \
    "bench/wer_testset_en_greedy.json=$(portable "$WER_GREEDY")" \
    "bench/mini_eval.json=$(portable "$MINI_EVAL") (mini_eval.json copied)"
}

# stream (8 streams per mode, Medusa at N = 4, 2 threads). Timing: run on a quiet machine. Read by:
# docs/streaming.md, the report's stream figures.
stage_stream() {
  require_current_drafters
  local t0=$SECONDS a b
  a=$(loadavg); run_cmd stream "$STREAM"; b=$(loadavg)
  printf '{"bench/stream_medusa_n4.json": "%s before, %s after (/proc/loadavg)"}\n' "$a" "$b" >"$WORK/stream_loadavg.json"
  echo $((SECONDS - t0)) >"$WORK/seconds/stream"
  stage_record_stream
  t0=$SECONDS; a=$(loadavg)
  run_cmd stream-graph "for k in ${STREAM_GRAPH_KINDS[*]}; do for be in onnx-loop onnx; do $STREAM_GRAPH; done; done"
  run_cmd stream-eager-threaded "$STREAM_EAGER_THREADED"; b=$(loadavg)
  printf '{"bench/stream_{onnx_loop,onnx}_{medusa,shared_low_rank}_n4.json, stream_eager_threaded_medusa_n4.json": "%s before, %s after (/proc/loadavg)"}\n' "$a" "$b" >"$WORK/stream_graph_loadavg.json"
  echo $((SECONDS - t0)) >"$WORK/seconds/stream_graph"
  stage_record_stream_graph
}
stage_record_stream() { record stream "$(portable "$STREAM")$(timing_note)"; }
stage_record_stream_graph() {
  record stream_graph "bench/stream_{onnx_loop,onnx}_{medusa,shared_low_rank}_n4.json=$(portable "for k in ${STREAM_GRAPH_KINDS[*]}; for be in onnx-loop onnx: $STREAM_GRAPH")$(timing_note)" \
    "bench/stream_eager_threaded_medusa_n4.json=$(portable "$STREAM_EAGER_THREADED")$(timing_note)"
}

# backends (eager / compiled / ONNX, spec and AR, shared low-rank at N = 4). Timing: run on a quiet
# machine. ar_frame_graph_0.6b.json is the 0.6B preset with random weights: model independent,
# re-measured only with AR_FRAME_GRAPH=1 (~4 min: compile_s 21 s + graph_compile_s 101 s), but its
# command is recorded either way. Read by: docs/deploy.md "Measured".
stage_backends() {
  require_current_drafters
  local t0=$SECONDS a b
  a=$(loadavg); run_cmd backends "$BACKENDS"; b=$(loadavg)
  printf '{"%s": "%s before, %s after (/proc/loadavg)"}\n' "$BACKENDS_FILE" "$a" "$b" >"$WORK/backends_loadavg.json"
  if [[ -n "${AR_FRAME_GRAPH:-}" ]]; then
    run_cmd backends-ar-graph "$AR_GRAPH"
  fi
  echo $((SECONDS - t0)) >"$WORK/seconds/backends"
  stage_record_backends
}
stage_record_backends() {
  record backends "$BACKENDS_FILE=PYTHONPATH=\$PWD $(portable "$BACKENDS")" "bench/ar_frame_graph_0.6b.json=$(portable "$AR_GRAPH")"
}

# table3 (6 languages x 40 eval sentences x 2 seeds x AR/spec = 960 syntheses through the mini
# recognizer; Medusa at N = 16). Not a timing. Read by: README "Free-running synthesis" and "Seed
# Table 3 on the mini world", tests/test_table3_script.py::test_committed_table3.
stage_table3() {
  require_current_drafters
  local t0=$SECONDS
  run_cmd table3 "$PY scripts/table3.py $TABLE3_ARGS > $WORK/table3.json.part && mv $WORK/table3.json.part $TABLE3_OUT"
  echo $((SECONDS - t0)) >"$WORK/seconds/table3"
  stage_record_table3
}
stage_record_table3() { record table3 "$(portable "$TABLE3_REC")"; }

# spade: data/spade/README.md's commands, the study on the committed talker. 1) `spade project`
# times the full-size talker (28 / 14 layers) and code predictor with random weights (the combined
# run's projection reads it; run it on a quiet box); 2) `spade ablate` (importance, ratios, the
# ablations at 50%: 12 evaluated students x 80 clips, 9 WLI passes x 32 clips, 11 distillations of
# 200 steps), 3) its 1,000- and 4,000-step sweep (length.*, reusing 2's importance, students and clips) and
# 4) `spade combined` (the 4,000-step student with Medusa at N = 4). Read by tests/test_spade_ablation.py,
# tests/test_spade_combined.py, tests/test_demo.py, notebooks/07_spade, data/spade/README.md prose
# (hand edit afterwards). v3's `spade all` and recipe runs are not re-derived.
stage_spade() {
  require_current_drafters
  local t0=$SECONDS
  run_cmd spade-project "$SPADE_PROJECT"
  run_cmd spade-ablate "$SPADE_ABLATE"
  run_cmd spade-length "$SPADE_LENGTH"
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

# anchor (opt-in, ~10-20 min): the gate harness on the committed world. The committed anchor was
# measured on an earlier world (its model_config says which) and docs/design.md quotes it as that
# world's column: set ANCHOR_OUT to keep it and write this world's beside it.
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

# demo (opt-in, ~4-10 min): the README Quickstart's `make demo` time; fresh caches.
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
      f"total_bytes {m['total_bytes']/1e6:.1f} MB (tests/test_mini_build.py budget: < 80 MB)")
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
for p in sorted(B.glob("spec_*.json")):
    s = load(p)["mini"]
    print(f"== bench spec {p.name}: {s['drafter']} N {s['tree_nodes']}, {s['frames']} frames: {s['speedup']:.2f}x "
          f"({s['ar_ms_per_frame']:.1f} -> {s['spec_ms_per_frame']:.1f} ms/frame) at {s['tokens_per_call']:.3f} tokens/call")
for p in sorted(B.glob("lossless_*_n16.json")):
    r = load(p); k = p.stem[len("lossless_"):-len("_n16")]
    if r:
        print(f"== lossless {k}: pass {r['all_passed']}, controls fail {r['controls_all_failed']}; min p "
              + ", ".join(f"{c['decoder']['min_p']:.2g}" for c in r["contexts"])
              + "; accepted/frame " + ", ".join(str(c["decoder"]["accepted_per_frame"]) for c in r["contexts"])
              + "; always-accept impossible " + " / ".join(str(c["control_always_accept"]["impossible"]) for c in r["contexts"])
              + "; full-p min p " + " / ".join(f"{c['control_full_p']['min_p']:.0e}" for c in r["contexts"]))
for p in sorted(B.glob("table3_*.json")):
    t = load(p)
    print(f"== README Table 3 ({p.name}, %): lang metric AR spec [diff CI] | CER AR/spec | spec tokens/call")
    for r in t["rows"]:
        mt = r["metric"]; lo, hi = r[f"{mt}_diff_ci95"]
        print(f"  {r['language']} {mt} {100*r[f'ar_{mt}']:.1f} {100*r[f'spec_{mt}']:.1f} "
              f"{100*r[f'{mt}_diff']:+.1f} [{100*lo:.1f}, {100*hi:.1f}] | {100*r['ar_cer']:.1f} / {100*r['spec_cer']:.1f} | "
              f"{r['spec_tokens_per_call']:.3f}")
    print(f"  intervals covering 0: {t['headline_ci_covers_zero']} of {len(t['rows'])}")
ev = load(B / "mini_eval.json")
if ev:
    print("== intelligibility, eval split (mini_eval.json), %: " + "; ".join(
        f"{k} PER {100*r['per']:.1f} CER {100*r['cer']:.1f} WER {100*r['wer']:.1f}" for k, r in ev["intelligibility"].items()))
for p in sorted(B.glob("wer_testset_*.json")):
    r = load(p)
    print(f"== {p.name}: {r['language']} n {r['n']}, PER {100*r['per']:.1f} CER {100*r['cer']:.1f} WER {100*r['wer']:.1f} % ({r['decoding']})")
for p in sorted(B.glob("stream_*.json")):
    r = load(p); f = p.name
    if r and "ar" in r:
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
for p in sorted(B.glob("backends_*.json")):
    bk = load(p)
    print(f"== docs/deploy.md {p.name} (codes agree {bk['codes_agree_across_backends']}):")
    for mo, rows in bk["modes"].items():
        for be, r in rows.items():
            print(f"  {mo}/{be}: frame {r['frame_ms']} ms, calls/frame {r['calls_per_frame']}, tok/call {r['tokens_per_call']}, "
                  f"call {r.get('call_ms', '-')} ms, host {r.get('host_overhead_share', '-')}, vs eager {r.get('speedup_vs_eager', 1)}")
for f in ("data/spade/ablation.md", "data/spade/length.md"):
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
ORDER=(check cast spec record-spec lossless record-lossless intelligibility record-intelligibility stream
       record-stream record-stream-graph backends record-backends table3 record-table3 spade rehearsal profiles anchor notebooks
       demo figures verify)
DEFAULT=(check cast spec lossless intelligibility stream backends table3 spade rehearsal profiles notebooks figures verify)
NO_CHECK=(figures list verify record-spec record-lossless record-intelligibility record-stream record-stream-graph
          record-backends record-table3)

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
