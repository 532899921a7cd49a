"""The whole SPADE study on the mini world in one call (seed 001 Tables 1-2 analogue + composition).

1. layer importance of the teacher talker: WLI and cosine (`importance.layer_importance`);
2. students at half depth: SPADE (WLI selection, dynamic targets), the two ablations (cosine
   selection; index-matched targets) and the pruned-only model (WLI selection, no distillation);
3. evaluation of every variant (English held-out texts through the recognizer, several seeds) with
   the AR code predictor, and of the teacher and the SPADE student with the speculative one;
4. the full-size projection (`evaluate.project_full_size`) with the measured tokens per call.

Intermediate artifacts go to runs/spade/ (reused when present unless `fresh`); the small results
(JSON, markdown, plotly HTML) to data/spade/.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from rvqspec.core.checkpoint import load_qwen3_tts, model_hash
from rvqspec.core.defaults import DRAFTER_PREFERENCE
from rvqspec.mini.pipeline import MiniTTS, default_data_dir
from rvqspec.real.asr import load_recognizer
from rvqspec.spade.distill import (VALIDATION_UTTERANCES, DistillConfig, distill, save_student,
                                   student_code_predictor)
from rvqspec.spade.evaluate import (
    EvalConfig,
    evaluate_models,
    fingerprint,
    markdown_table,
    project_full_size,
    project_variants,
    projection_table,
    results_figure,
    write_json,
)
from rvqspec.spade.importance import ImportanceConfig, importance_figure, layer_importance
from rvqspec.spade.prune import default_depth, prune_talker

STUDENT_MAX_BYTES = 3 * 2**20  # keep the SPADE student in data/spade only when this small


@dataclass
class ExperimentConfig:
    data_dir: Path | None = None                  # default: data/mini
    runs_dir: Path = Path("runs/spade")
    results_dir: Path = Path("data/spade")
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    depth: int | None = None                      # default: half the teacher's layers
    drafter: Path | None = None                   # default: found under DATA/drafters
    tree: Path | None = None                      # default: found under DATA/trees
    project: bool = True
    project_context: int = 300
    project_reps: int = 10
    # seed 000's reported acceptance for the projection beside the mini world's own (tokens/call, tree N)
    reference_tokens_per_call: dict = field(default_factory=lambda: {"seed 000 reported": [2.47, 32]})
    fresh: bool = False  # recompute importance, students, evaluations and timings


def find_drafter_and_tree(data_dir: Path, nodes: int = 16) -> tuple[Path | None, Path | None]:
    """The lead's trained drafter and a tree grown for it (`<kind>_n<N>.json`), if present: the
    first kind in DRAFTER_PREFERENCE that has a tree, with N = `nodes` (seed 000's operating point
    on older devices) or else the smallest N. Acceptance tables (`acceptance_*.json`) are skipped."""
    ddir, tdir = data_dir / "drafters", data_dir / "trees"
    if not (ddir.is_dir() and tdir.is_dir()):
        return None, None
    for kind in DRAFTER_PREFERENCE:
        drafter = ddir / f"{kind}.safetensors"
        trees = {}
        for p in tdir.glob(f"{kind}_n*.json"):
            try:
                trees[int(p.stem.rsplit("_n", 1)[1])] = p
            except ValueError:
                continue
        if drafter.is_file() and trees:
            return drafter, trees.get(nodes, trees[min(trees)])
    return None, None


def make_student(name: str, teacher, keep: list[int], cfg: DistillConfig | None, corpus: Path, out: Path,
             teacher_dir: Path, fresh: bool, selection: str,
             validation_utterances: int = VALIDATION_UTTERANCES) -> dict:
    """Make (or reuse) one student checkpoint; cfg None = pruned only. `validation_utterances`:
    `distill`'s (only its validation metrics depend on it)."""
    meta = out / "spade.json"
    want = dict(keep_layers=keep, distill=asdict(cfg) if cfg else None, teacher_hash=model_hash(teacher.talker))
    if meta.exists() and not fresh:
        info = json.loads(meta.read_text())
        if all(info.get(k) == v for k, v in want.items()):
            return info
    if cfg is None:
        student = prune_talker(teacher.talker, keep)
        info = dict(name=name, selection=selection, distilled=False, **want)
        save_student(student, student_code_predictor(teacher.code_predictor, student), teacher.config, out,
                     teacher_dir, info)
        return info
    res = distill(teacher.talker, teacher.code_predictor, keep, corpus, cfg,
                  validation_utterances=validation_utterances)
    info = dict(name=name, selection=selection, distilled=True, targets=res.targets,
                metrics={k: v for k, v in res.metrics.items() if k != "config"}, **want)
    save_student(res.student, res.code_predictor, teacher.config, out, teacher_dir, info)
    write_json(dict(info, history=res.history), out.with_name(out.name + ".history.json"))
    return info


def run_experiment(config: ExperimentConfig = ExperimentConfig(), progress: bool = True) -> dict:
    c = config
    torch.set_num_threads(c.distill.threads)
    data = Path(c.data_dir or default_data_dir())
    corpus, teacher_dir = data / "corpus", data / "model"
    runs, results = Path(c.runs_dir), Path(c.results_dir)
    runs.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    teacher = load_qwen3_tts(teacher_dir)
    L = teacher.talker.config.num_hidden_layers
    depth = c.depth or default_depth(L)

    if c.fresh and (runs / "eval_cache").exists():
        shutil.rmtree(runs / "eval_cache")
    teacher_hash = model_hash(teacher.talker)
    rec_id = fingerprint(data / "recognizer")  # results scored with another recognizer are stale
    rec_metrics, rec_en = data / "recognizer" / "metrics.json", None
    if rec_metrics.exists():
        try:
            rec_en = {k: json.loads(rec_metrics.read_text())["heldout"]["en"][k] for k in ("wer", "cer")}
        except (KeyError, TypeError, json.JSONDecodeError):
            rec_en = None

    # 1. importance
    imp_path = runs / "importance.json"
    imp = json.loads(imp_path.read_text()) if imp_path.exists() and not c.fresh else {}
    if not (imp.get("depth") == depth and imp.get("teacher_hash") == teacher_hash and imp.get("recognizer") == rec_id
            and imp.get("config") == json.loads(json.dumps(asdict(c.importance)))):
        tts = MiniTTS.load(data)
        imp = layer_importance(tts, corpus, load_recognizer(data / "recognizer"), c.importance, depth, progress)
        imp.update(config=asdict(c.importance), teacher_hash=teacher_hash, recognizer=rec_id)
        write_json(imp, imp_path)
    importance_figure(imp).write_html(str(results / "importance.html"), include_plotlyjs="cdn")
    keep_wli, keep_cos = imp["keep"]["wli"], imp["keep"]["cosine"]

    # 2. students
    dyn, idx = replace(c.distill, targets="dynamic"), replace(c.distill, targets="index")
    plan = {"spade": (keep_wli, dyn, "wli"), "pruned_only": (keep_wli, None, "wli"),
            "index_targets": (keep_wli, idx, "wli")}
    if keep_cos != keep_wli:
        plan["cosine_selection"] = (keep_cos, dyn, "cosine")
    students = {name: make_student(name, teacher, keep, cfg, corpus, runs / name, teacher_dir, c.fresh, sel)
                for name, (keep, cfg, sel) in plan.items()}

    # 3. evaluation
    drafter, tree = c.drafter, c.tree
    if drafter is None and tree is None:
        drafter, tree = find_drafter_and_tree(data)
    # teacher last: its WER passes may come from a concurrent `spade evaluate` into the same cache
    models = {**{name: runs / name for name in plan}, "teacher": teacher_dir}
    ev = evaluate_models(models, corpus, data / "recognizer", c.eval, spec=("teacher", "spade"), drafter=drafter,
                         tree=tree, data_dir=data, progress=progress,
                         cache_dir=runs / "eval_cache")
    write_json(ev, runs / "results_full.json")
    rows = [{k: v for k, v in r.items() if k != "clips"} for r in ev["rows"]]
    rows.sort(key=lambda r: (r["model"] != "teacher", list(plan).index(r["model"]) if r["model"] in plan else -1,
                             r["inner"] != "AR"))

    # 4. projection
    proj = None
    if c.project:
        nodes = ev["speculative"]["tree_nodes"] if ev.get("speculative") else 8
        tpc = {f"mini {r['model']}": [r["tokens_per_call"], nodes] for r in rows if r["inner"] == "speculative"}
        tpc.update(c.reference_tokens_per_call)
        proj_path = runs / "projection.json"
        old = json.loads(proj_path.read_text()) if proj_path.exists() and not c.fresh else None
        have = set((old or {}).get("code_predictor", {}).get("tree_call_ms_by_nodes", {}))
        need = {str(v[1]) for v in tpc.values()} | {str(nodes)}
        if old and old.get("context") == c.project_context and need <= have:
            proj = project_variants(old, tpc)  # timings reused, tokens per call from this evaluation
        else:
            proj = project_full_size("0.6b", default_depth(28), c.project_context, nodes, tpc, c.project_reps,
                                     c.distill.threads, progress)
        write_json(proj, proj_path)

    if ev["recognizer"]["fingerprint"] != rec_id:
        raise RuntimeError(f"{data / 'recognizer'} changed during the run: rerun `rvqspec spade all`")
    out = dict(depth=depth, teacher_layers=L, recognizer_heldout_en=rec_en, recognizer=rec_id, keep=dict(wli=keep_wli, cosine=keep_cos), importance=imp,
               students=students, evaluation=dict(config=ev["config"], texts=ev["texts"],
                                                  speculative=ev["speculative"], rows=rows),
               projection=proj, config=json.loads(json.dumps(asdict(c), default=str)))
    write_json(out, results / "results.json")
    results_figure(rows).write_html(str(results / "results.html"), include_plotlyjs="cdn")
    (results / "results.md").write_text(report_markdown(out))
    # the SPADE student itself, when small enough to keep beside the results
    st = runs / "spade"
    size = sum(p.stat().st_size for p in st.iterdir() if p.is_file())
    if size <= STUDENT_MAX_BYTES:
        dst = results / "student"
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(st, dst)
    out["student_bytes"] = size
    return out


def report_markdown(out: dict) -> str:
    """results.md: importance, the main table, the ablations and the full-size projection."""
    imp = out["importance"]
    w = imp["wli"]
    lines = ["# SPADE on the mini talker (seed 001)", "",
             f"Teacher: {out['teacher_layers']} talker layers; students keep {out['depth']}. "
             f"WLI on {w['texts']} `{imp['cosine']['split']}`-split English texts x seeds {w['seeds']}; "
             f"evaluation on {out['evaluation']['texts']} `{out['evaluation']['config']['split']}`-split English "
             f"texts x seeds {out['evaluation']['config']['seeds']}.", "",
             "## Layer importance", "",
             f"Baseline WER {100 * w['baseline']['wer']:.2f}%, CER {100 * w['baseline']['cer']:.2f}%.", "",
             "| layer | WER when removed % | CER when removed % | WLI (dWER pts) | dCER pts | 1 - cosine |",
             "|---|---|---|---|---|---|"]
    for r in w["layers"]:
        lines.append(f"| {r['layer']} | {100 * r['wer']:.2f} | {100 * r['cer']:.2f} | {100 * r['d_wer']:+.2f} "
                     f"| {100 * r['d_cer']:+.2f} | {imp['cosine']['scores'][r['layer']]:.4f} |")
    lines += ["", f"Kept layers: WLI {out['keep']['wli']}, cosine {out['keep']['cosine']}.", "",
              "## Variants (RTF = synthesis seconds / audio seconds, codec excluded; 1 CPU thread)", "",
              markdown_table(out["evaluation"]["rows"])]
    spec = out["evaluation"].get("speculative")
    if spec:
        lines += [f"Speculative code predictor: drafter {spec['drafter']}, tree {spec['tree']} "
                  f"({spec['tree_nodes']} nodes).", ""]
    teacher = next((r for r in out["evaluation"]["rows"] if r["model"] == "teacher" and r["inner"] == "AR"), None)
    rec = out.get("recognizer_heldout_en")
    if teacher is not None:
        lines += [f"Reading these numbers: the unpruned teacher itself reaches WER {100 * teacher['wer']:.1f}% / CER "
                  f"{100 * teacher['cer']:.1f}% here"
                  + (f", while the recognizer scores WER {100 * rec['wer']:.1f}% / CER {100 * rec['cer']:.1f}% on "
                     f"held-out corpus speech" if rec else "")
                  + ". WER differences of a few points between variants are within the sampling noise of "
                    f"{out['evaluation']['texts']} texts x {len(out['evaluation']['config']['seeds'])} seeds.", ""]
    lines += ["## Students", ""]
    for name, s in out["students"].items():
        m = s.get("metrics") or {}
        lines.append(f"- **{name}**: keep {s['keep_layers']} ({s.get('selection')}), "
                     + (f"targets {s.get('targets')} ({s['distill']['targets']}), {m.get('steps')} steps in "
                        f"{m.get('seconds')} s, validation CE c0/cp {m.get('validation_before')} -> "
                        f"{m.get('validation_after')}" if s.get("distilled") else "no distillation"))
    if out.get("projection"):
        p = out["projection"]
        lines += ["", f"## Full-size projection ({p['preset']}, random weights, KV cache {p['context']} positions, "
                      f"{p['threads']} thread, fastest of {p['reps']} calls)", "", projection_table(p)]
    return "\n".join(lines) + "\n"
