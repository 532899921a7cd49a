"""The main job (`rvqspec demo`, `make demo`): the whole seed-000 pipeline on the mini world, then
`report/index.html` + `report/results.json`.

Steps (each delegates to the package module that owns it; this file only orders them, times them
and collects their numbers):

1. extract    teacher-forced hidden states of the English train split (+ validation)   rvqspec.measure.extract
2. train      the drafters: position offsets (iii) and Medusa heads (ii); (i) = zeros    rvqspec.measure.train_drafter
3. trees      free-running calibration split -> acc[d, r] per drafter -> greedy trees    rvqspec.measure.acceptance, rvqspec.core.tree
4. acceptance free-running eval split per language: tokens/call per drafter and N        rvqspec.measure.acceptance
5. profile    AR vs verify call latency per N on this device, speedup, N*                rvqspec.measure.profile
6. wallclock  inner loop AR vs speculative, interleaved, per drafter at N (the verdict)  rvqspec.measure.bench_spec
7. stream     streamed synthesis AR vs speculative: TTFA, RTF, calls per audio second   rvqspec.mini.bench_stream
8. wer        synthesize + transcribe per language, AR vs speculative (Table 3)          rvqspec.mini.pipeline
9. ab         a few clips both ways, WAVs next to the report                              rvqspec.workbench.listening
10. lossless  the main decoder against the exact AR law, with failing controls           rvqspec.measure.lossless
11. report    rvqspec.workbench.report.render_report

A step that cannot run (a module it needs is missing, or an earlier step failed) is recorded as
"not available" (visible in the report), a step that raises is recorded as "failed" with its
message; later steps that need its output say so.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import rvqspec.measure.profile as profile
from rvqspec.core.checkpoint import model_hash
from rvqspec.core.defaults import DRAFTER_LABELS, choose_n_star
from rvqspec.core.drafters import code_predictor_parameters, drafter_class, load_drafter, make_drafter
from rvqspec.core.frame_loop import teacher_forced_frames
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.measure.acceptance import acceptance_table, oracle_tokens_per_call, replay_tokens_per_call
from rvqspec.measure.bench_spec import bench_inner_loop, frames_for_timing
from rvqspec.measure.extract import ShardDataset, extract
from rvqspec.measure.lossless import LosslessConfig, lossless_report
from rvqspec.measure.train_drafter import DrafterTrainConfig, evaluate_loss, train_drafter
from rvqspec.mini.bench_stream import SENTENCES, bench_stream
from rvqspec.mini.pipeline import default_data_dir, intelligibility
from rvqspec.spade.ablation import rows_from_evaluation
from rvqspec.workbench.listening import make_pairs, wav_bytes
from rvqspec.workbench.report import render_report

NOT_AVAILABLE = "not available"


class StepUnavailable(RuntimeError):
    """A step cannot run: a package module it delegates to is missing, or an earlier step failed."""


@dataclass(frozen=True)
class DemoConfig:
    """Every default of the main job in one place; `quick()` is the CI / smoke-test preset."""

    data_dir: str | None = None               # mini world artifacts (default data/mini)
    out: str = "report"                       # index.html, results.json, audio/
    work: str = "runs/demo"                   # shards and trained drafters (git-ignored)
    languages: tuple[str, ...] = ("en", "de", "es", "ru", "ja", "zh")
    drafters: tuple[str, ...] = ("reused", "offsets", "shared_low_rank", "medusa")  # seed Table 2 (i)-(iii) + ours
    main_drafter: str = "offsets"             # the seed's method (iii)
    train_utterances: int = 400               # English train split (offsets are English-only, §2.2)
    validation_utterances: int = 40
    train_steps: int = 400                    # Medusa: Adam 1e-3, batch 32 (seed §2.2)
    # the shift drafters (offsets, shared low-rank) start at zero and Adam moves each coordinate by
    # about the learning rate per step, so 400 steps at the seed's 1e-3 leave them near zero
    # (docs/design.md, "The offsets' training budget"); 600 steps at 5e-2 on the mini world come
    # within 0.05 of the converged top-1 acceptance per depth (offsets 0.81 / 0.92 / 0.96 against
    # 0.86 / 0.94 / 0.98; `spec calibrate`, docs/measurements/world_v4/offsets_budget/demo_recipe.json)
    shift_train_steps: int = 600
    shift_lr: float = 5e-2
    calibration_utterances: int = 60          # English calibration split -> acc[d, r] -> trees
    eval_utterances: int = 20                 # per language, eval split, free-running replay
    budgets: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    default_N: int = 16                       # operating point when no device profile is available
    profile_calls: int = 200                  # timed calls per size after 20 warm-up calls (seed §3.4)
    # per language: an illustration, not a test (4 took 219 s of the v3 world's 694 s fresh-clone demo);
    # one seed: the step was 5 of the demo's 12 minutes with two; `scripts/table3.py` is the
    # statistical AR-vs-speculative comparison
    wer_utterances: int = 2
    wer_seeds: tuple[int, ...] = (0,)
    ab_languages: tuple[str, ...] = ("en", "de", "ja")
    ab_seeds: tuple[int, ...] = (0,)
    # model-scale lossless check (rvqspec.measure.lossless): frames of the main drafter's decoder on one eval
    # context, against the exact AR law and as many AR frames, and frames of each wrong-rule control
    lossless_frames: int = 1200
    # the full-p control needs many frames when few drafts are accepted (the offsets: its bias is
    # small); with Medusa's drafts 5,000 frames gave p = 3e-86, and the chi-square statistic grows
    # about linearly in frames, so 1,200 still fail it far below the 6e-8 threshold. Always-accept
    # fails at once
    lossless_control_frames: int = 1200
    lossless_always_accept_frames: int = 500
    lossless_N: int = 16  # a wide tree: more drafts per round, so the full-p control's bias shows
    # the drafter whose drafts are accepted most (10 per frame on the mini world v2, against about 1
    # for the offsets): every depth of the tree is exercised and each frame costs fewer calls
    lossless_drafter: str = "medusa"
    # wall clock of the inner loop, AR and speculative interleaved frame by frame on English eval
    # frames, per drafter at the operating N: the report's verdict sentence
    wallclock_frames: int = 60
    # streaming (rvqspec.mini.bench_stream): AR and speculative streams interleaved, this many
    # passes over the benchmark sentences; the report's timeline and calls-per-second budget
    stream_sentences: int = 2
    stream_repeats: int = 1
    # 1 thread: these models are small enough that Python overhead dominates each call, and two
    # torch threads on a busy 2-core machine ran extraction 10x slower than one (measured)
    threads: int = 1
    seed: int = 0
    mode: str = "full"
    # the committed SPADE study (seed 001; `rvqspec spade ablate` / `spade combined`, hours on 2 cores,
    # so the demo shows its recorded JSON rather than rerunning it); default: data/spade beside data/mini
    spade_dir: str | None = None

    @classmethod
    def quick(cls, **kw) -> "DemoConfig":
        """About a minute or two on 2 cores: every step runs, on a few utterances."""
        base = dict(train_utterances=24, validation_utterances=6, train_steps=30, shift_train_steps=30,
                    calibration_utterances=8,
                    eval_utterances=3, budgets=(4, 16), default_N=16, profile_calls=20, wer_utterances=1,
                    wer_seeds=(0,), ab_languages=("en",), drafters=("reused", "offsets"), mode="quick",
                    lossless_frames=400, lossless_control_frames=200, lossless_always_accept_frames=100,
                    languages=("en", "de"), wallclock_frames=10, stream_sentences=1)
        base.update(kw)
        return cls(**base)


@dataclass
class Step:
    name: str
    fn: Callable[["Demo"], dict | None]
    needs: tuple[str, ...] = ()


@dataclass
class Demo:
    config: DemoConfig = field(default_factory=DemoConfig)
    results: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)   # objects passed between steps (models, drafters, trees)
    log: Callable[[str], None] = print

    # ---- shared resources ------------------------------------------------------------------------
    @property
    def work(self) -> Path:
        return Path(self.config.work)

    def tts(self):
        if "tts" not in self.state:
            from rvqspec.mini.pipeline import MiniTTS

            self.state["tts"] = MiniTTS.load(self.config.data_dir)
        return self.state["tts"]

    def data_dir(self) -> Path:
        return Path(self.config.data_dir) if self.config.data_dir else default_data_dir()

    def corpus(self):
        if "corpus" not in self.state:
            from rvqspec.mini.corpus import load_corpus

            self.state["corpus"] = load_corpus(self.data_dir() / "corpus", need_codes=True)
        return self.state["corpus"]

    def rows(self, split: str, language: str, limit: int) -> list[dict]:
        """The first `limit` rows of a corpus split in one language (text, phoneme_frames, codes)."""
        ds = self.corpus()[split]
        idx = [i for i, lang in enumerate(ds["language"]) if lang == language][:limit]
        if not idx:
            raise StepUnavailable(f"the corpus has no {language!r} rows in split {split!r}")
        return [r for r in ds.select(idx).select_columns(["id", "text", "language", "phoneme_frames", "codes"])]

    def utterances(self, rows: list[dict]):
        """(talker hidden (T, E), codes (T, 16)) per row: the teacher-forced talker over the corpus
        codes (rvqspec.core.frame_loop.teacher_forced_frames), the input of hidden-state extraction."""
        tts = self.tts()
        for r in rows:
            ids = torch.as_tensor(r["phoneme_frames"], dtype=torch.long)  # (T,)
            codes = torch.as_tensor(r["codes"], dtype=torch.long)  # (T, 16)
            yield teacher_forced_frames(tts.talker, tts.code_predictor, ids, codes)

    def recognizer(self):
        if "recognizer" not in self.state:
            from rvqspec.real.asr import load_recognizer

            self.state["recognizer"] = load_recognizer(self.data_dir() / "recognizer")
        return self.state["recognizer"]

    def main_n(self) -> int:
        """N*: the profile's fastest budget among the main drafter's trees (the default N without a profile)."""
        prof = self.results.get("profile") or {}
        trees = self.state.get("trees", {}).get(self.config.main_drafter, {})
        speedup = dict(zip(prof.get("budgets", []), prof.get("speedup", [])))
        return choose_n_star(speedup, trees or None, self.config.default_N)

    def spec(self, drafter: str | None = None, n: int | None = None):
        drafter = drafter or self.config.main_drafter
        n = n or self.main_n()
        if drafter not in self.state.get("drafters", {}) or n not in self.state.get("trees", {}).get(drafter, {}):
            raise StepUnavailable(f"no trained drafter {drafter!r} with a tree of N = {n} (steps train/trees)")
        return SpeculativeCodePredictor(self.tts().code_predictor, self.state["drafters"][drafter],
                                        self.state["trees"][drafter][n])

    # ---- running ---------------------------------------------------------------------------------
    def run(self, steps: list[Step] | None = None) -> dict:
        cfg = self.config
        torch.set_num_threads(cfg.threads)
        steps = steps if steps is not None else STEPS
        t0 = time.perf_counter()
        self.results.setdefault("steps", {})
        self.results["config"] = dataclasses.asdict(cfg)
        self.results["meta"] = {"mode": cfg.mode, "device": f"torch-cpu ({platform.processor() or platform.machine()}, "
                                                           f"{cfg.threads} threads)",
                                "torch": torch.__version__, "python": platform.python_version()}

        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), transient=False) as bar:
            task = bar.add_task("rvqspec demo", total=len(steps))
            for step in steps:
                bar.update(task, description=f"rvqspec demo: {step.name}")
                self._run_step(step)
                bar.advance(task)
        self.results["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
        self.results["meta"]["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        return self.results

    def step(self, name: str, strict: bool = True) -> dict:
        """Run one step by name (notebooks), after any step it needs that has not run in this
        session; `strict` re-raises a failure instead of recording it (papermill must see it).
        Results land in `self.results`; returns the step's record."""
        by_name = {s.name: s for s in STEPS}
        if name not in by_name:
            raise KeyError(f"unknown step {name!r}; steps: {list(by_name)}")
        self.results.setdefault("steps", {})
        for dep in by_name[name].needs:
            if self.results["steps"].get(dep, {}).get("status") != "ok":
                self.step(dep, strict=strict)
        self._run_step(by_name[name], strict=strict)
        return self.results["steps"][name]

    def _run_step(self, step: Step, strict: bool = False) -> None:
        rec = self.results["steps"]
        missing = [n for n in step.needs if rec.get(n, {}).get("status") != "ok"]
        t = time.perf_counter()
        if missing:
            rec[step.name] = {"status": NOT_AVAILABLE, "seconds": 0.0,
                              "note": f"needs step(s) {', '.join(missing)}, which did not complete"}
            self.log(f"[{step.name}] skipped: needs {missing}")
            return
        try:
            out = step.fn(self)
            rec[step.name] = {"status": "ok", "seconds": round(time.perf_counter() - t, 1), "note": ""}
            if out:
                rec[step.name].update(out.pop("_step", {}))
                self.results.update(out)
        except (StepUnavailable, ModuleNotFoundError) as e:
            rec[step.name] = {"status": NOT_AVAILABLE, "seconds": round(time.perf_counter() - t, 1), "note": str(e)}
            if strict:
                raise
        except Exception as e:  # keep going: the report shows which step failed and why
            if strict:
                raise
            rec[step.name] = {"status": "failed", "seconds": round(time.perf_counter() - t, 1),
                              "note": f"{type(e).__name__}: {e}"}
            self.state.setdefault("tracebacks", {})[step.name] = traceback.format_exc()
        self.log(f"[{step.name}] {rec[step.name]['status']} in {rec[step.name]['seconds']} s "
                 f"{rec[step.name]['note']}".rstrip())


# ---- steps -----------------------------------------------------------------------------------------
def step_extract(d: Demo) -> dict:
    cfg = d.config
    cp = d.tts().code_predictor
    out = {}
    for split, n in (("train", cfg.train_utterances), ("validation", cfg.validation_utterances)):
        shard_dir = d.work / f"shards_{split}"
        key = {"split": split, "language": "en", "utterances": n, "source": "teacher_forced"}
        m = _cached_manifest(d, shard_dir, key)
        if m is None:
            m = extract(cp, d.utterances(d.rows(split, "en", n)), shard_dir, source="teacher_forced", extra=key)
        manifest = json.loads(Path(m).read_text())
        out[split] = {"utterances": n, "frames": manifest["frames"], "hidden_size": manifest["hidden_size"]}
        d.state[f"shards_{split}"] = shard_dir
    return {"extract": out, "_step": {"note": f"{out['train']['frames']} train frames (teacher-forced, English)"}}


def _cached_manifest(d: Demo, shard_dir: Path, key: dict) -> Path | None:
    """The manifest of shards already extracted from the same model with the same `key` (split,
    language, utterance count, source), so that notebooks run one after another share their work."""
    path = shard_dir / "manifest.json"
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    ok = m.get("extra") == key and m.get("model_hash") == model_hash(d.tts().code_predictor)
    ok = ok and all((shard_dir / s["file"]).is_file() for s in m.get("shards", []))
    return path if ok else None


def _train_key(d: Demo, name: str) -> dict:
    cfg = d.config
    manifest = json.loads((Path(d.state["shards_train"]) / "manifest.json").read_text())
    steps, lr = _train_recipe(cfg, name)
    return {"drafter": name, "steps": steps, "lr": lr, "seed": cfg.seed, "frames": manifest["frames"],
            "model_hash": manifest["model_hash"], "utterances": cfg.train_utterances}


def _train_recipe(cfg: DemoConfig, name: str) -> tuple[int, float]:
    """(steps, Adam learning rate) of one drafter: Medusa's heads start as the frozen heads and take
    the seed's recipe; the shift drafters start at zero and take the shift recipe (DemoConfig)."""
    if not drafter_class(name).starts_at_zero:
        return cfg.train_steps, DrafterTrainConfig().lr
    return cfg.shift_train_steps, cfg.shift_lr


def step_train(d: Demo) -> dict:
    cfg = d.config
    cp = d.tts().code_predictor
    drafters, curves, val = {}, {}, {}
    (d.work / "drafters").mkdir(parents=True, exist_ok=True)
    val_data = ShardDataset(d.state["shards_validation"], batch_size=64, shuffle=False)
    for name in cfg.drafters:
        path, side = d.work / "drafters" / f"{name}.safetensors", d.work / "drafters" / f"{name}.json"
        key = _train_key(d, name)
        cached = json.loads(side.read_text()) if side.is_file() and path.is_file() else {}
        if cached.get("key") == key:  # same model, data and recipe: reuse (notebooks share work)
            drafter = load_drafter(path, cp)
            losses = cached.get("losses", [])
        else:
            drafter, losses = make_drafter(name, cp), []
            if name != "reused":  # (i) reuses the frozen heads as they are: zero offsets, nothing to train
                steps, lr = _train_recipe(cfg, name)
                tc = DrafterTrainConfig(lr=lr, max_steps=steps, epochs=1000, seed=cfg.seed, threads=cfg.threads)
                drafter, losses = train_drafter(drafter, cp, d.state["shards_train"], tc)
            drafter.save(path, cp)
            side.write_text(json.dumps({"key": key, "losses": losses}))
        if name != "reused":
            curves[name] = losses
        drafter.eval()
        val[name] = evaluate_loss(drafter, cp, val_data)
        drafters[name] = drafter
    d.state["drafters"] = drafters
    params = code_predictor_parameters(cp)
    d.state["added_params"] = {n: (0 if n == "reused" else int(dr.num_parameters)) for n, dr in drafters.items()}
    main = cfg.main_drafter if cfg.main_drafter in curves else next(iter(curves), None)
    train = {"drafter": main, "loss": curves.get(main, []), "curves": curves, "val_loss_by_drafter": val,
             "code_predictor_params": params}
    return {"train": train, "_step": {"note": ", ".join(f"{k}: val loss {v:.3f}" for k, v in val.items())}}


def _free_running(d: Demo, split: str, language: str, n: int, tag: str) -> Path:
    """Free-running hidden-state shards (the code predictor samples its own c1..c15 under the
    deployed sampling; seed §3.3 measures acceptance on free-running synthesis)."""
    key = f"fr_{tag}"
    if key not in d.state:
        shard_dir = d.work / f"shards_{tag}"
        extra = {"split": split, "language": language, "utterances": n, "source": "free_running",
                 "seed": d.config.seed}
        if _cached_manifest(d, shard_dir, extra) is None:
            g = torch.Generator().manual_seed(d.config.seed)
            extract(d.tts().code_predictor, d.utterances(d.rows(split, language, n)), shard_dir,
                    source="free_running", generator=g, extra=extra)
        d.state[key] = shard_dir
    return d.state[key]


def step_trees(d: Demo) -> dict:
    cfg = d.config
    cp = d.tts().code_predictor
    shards = _free_running(d, "calibration", "en", cfg.calibration_utterances, "calibration")
    tables, trees = {}, {}
    for name, drafter in d.state["drafters"].items():
        t = acceptance_table(drafter, cp, ShardDataset(shards, batch_size=256, shuffle=False), source="calibration")
        tables[name] = t.acc
        trees[name] = {n: SparseTree.grow(t.acc, budget=n, max_depth=drafter.num_offsets) for n in cfg.budgets}
    d.state["tables"], d.state["trees"] = tables, trees
    (d.work / "trees").mkdir(parents=True, exist_ok=True)
    for name, by_n in trees.items():
        for n, tree in by_n.items():
            tree.save(d.work / "trees" / f"{name}_N{n}.json")
    expected = {name: [by_n[n].expected_length(tables[name]) for n in cfg.budgets] for name, by_n in trees.items()}
    return {"trees": {name: {str(n): [list(p) for p in tree.paths] for n, tree in by_n.items()}
                      for name, by_n in trees.items()},
            "acceptance": {"budgets": list(cfg.budgets), "table": {k: v.tolist() for k, v in tables.items()},
                           "expected": expected}}


def step_acceptance(d: Demo) -> dict:
    cfg = d.config
    cp = d.tts().code_predictor
    per_lang: dict = {}
    for lang in cfg.languages:
        shards = _free_running(d, "eval", lang, cfg.eval_utterances, f"eval_{lang}")
        data = lambda: ShardDataset(shards, batch_size=256, shuffle=False)  # noqa: E731
        row = {}
        for name, drafter in d.state["drafters"].items():
            row[name] = [replay_tokens_per_call(drafter, cp, d.state["trees"][name][n], data()).tokens_per_call
                         for n in cfg.budgets]
        main_trees = d.state["trees"][cfg.main_drafter if cfg.main_drafter in d.state["trees"] else name]
        row["oracle"] = [oracle_tokens_per_call(cp, main_trees[n], data()).tokens_per_call for n in cfg.budgets]
        per_lang[lang] = row
    acc = dict(d.results.get("acceptance", {}))
    en = per_lang.get("en") or next(iter(per_lang.values()))
    acc.update(curves={k: v for k, v in en.items() if k != "oracle"}, oracle=en["oracle"], per_language=per_lang,
               language="en" if "en" in per_lang else next(iter(per_lang)))
    d.state["per_language_tpc"] = per_lang
    main = cfg.main_drafter if cfg.main_drafter in en else next(iter(en))
    note = f"{main}, English: " + ", ".join(f"N={n}: {t:.2f}" for n, t in zip(cfg.budgets, en[main])) + " tokens/call"
    return {"acceptance": acc, "_step": {"note": note}}


def step_profile(d: Demo) -> dict:
    prof = _run_profile(d, profile)
    k = prof["budgets"].index(prof["best_N"])
    note = (f"AR call {prof['ar_ms']:.2f} ms; N* = {prof['best_N']} (verify {prof['verify_ms'][k]:.2f} ms, "
            f"speedup {prof['speedup'][k]:.2f}x)")
    return {"profile": prof, "_step": {"note": note}}


def _run_profile(d: Demo, profile) -> dict:
    """AR (q = 1) vs fused verify (q = N + 1) latency of the mini code predictor on this device
    (torch-cpu, fp32), against the English tokens-per-call curve measured by step acceptance (or,
    without it, the calibration table's expectation); N* = argmax speedup (seed 000 §3.4)."""
    cfg = d.config
    name = cfg.main_drafter if cfg.main_drafter in d.state["tables"] else next(iter(d.state["tables"]))
    table = d.state["tables"][name]
    curve = {}
    per = d.state.get("per_language_tpc", {})
    en = per.get("en") or next(iter(per.values()), {})
    if name in en:
        curve = {int(n): float(t) for n, t in zip(cfg.budgets, en[name])}
    acc = profile.Acceptance(table=table, curve=curve,
                             source=f"{name}: " + ("measured tokens/call, eval split" if curve else "calibration table"))
    pc = profile.ProfileConfig(backend="torch-cpu", dtype="fp32", calls=cfg.profile_calls,
                               warmup=min(20, max(3, cfg.profile_calls // 5)), sizes=tuple(cfg.budgets), threads=cfg.threads,
                               seed=cfg.seed)
    raw = profile.profile(pc, acceptance=acc, code_predictor=d.tts().code_predictor)
    (d.work / "device_profile.json").write_text(json.dumps(raw, indent=1))
    ns = [int(n) for n in cfg.budgets]
    return {"device": raw["device"], "backend": raw["backend"], "dtype": raw["dtype"], "budgets": ns,
            "ar_ms": raw["ar"]["p50"], "verify_ms": [raw["verify"][str(n)]["p50"] for n in ns],
            "tokens_per_call": [raw["tokens_per_call"][str(n)] for n in ns],
            "speedup": [raw["speedup"][str(n)] for n in ns], "best_N": int(raw["n_star"]),
            "acceptance_source": raw["acceptance_source"], "raw": raw}


def step_wallclock(d: Demo) -> dict:
    """Inner-loop wall clock per drafter at the operating N: AR `generate_frame` and the speculative
    decoder alternate frame by frame on the same English eval frames (rvqspec.measure.bench_spec)."""
    cfg = d.config
    n = d.main_n()
    frames = frames_for_timing(d.utterances(d.rows("eval", "en", max(1, cfg.eval_utterances))), cfg.wallclock_frames)
    rows = []
    for name in d.state["drafters"]:
        if n not in d.state["trees"].get(name, {}):
            continue
        r = bench_inner_loop(d.tts().code_predictor, d.spec(name, n), frames, seed=cfg.seed, threads=cfg.threads,
                             progress=False)
        rows.append({"drafter": name, "N": n, "frames": r["frames"], "ar_ms_per_frame": r["ar_ms_per_frame"],
                     "spec_ms_per_frame": r["spec_ms_per_frame"], "ratio": r["speedup"],
                     "tokens_per_call": r["tokens_per_call"], "verdict": speed_word(r["speedup"])})
    main = next((r for r in rows if r["drafter"] == cfg.main_drafter), rows[0] if rows else None)
    note = "" if main is None else f"{main['drafter']}, N={n}: {main['ratio']:.2f}x ({main['verdict']})"
    return {"wallclock": {"N": n, "main_drafter": cfg.main_drafter, "rows": rows}, "_step": {"note": note}}


def step_stream(d: Demo) -> dict:
    """Streamed synthesis of the benchmark sentences, AR and speculative interleaved: time to first
    audio, real-time factor and model calls per second of audio (the seed's real-time budget)."""
    cfg = d.config
    b = bench_stream(d.tts(), d.spec(), sentences=SENTENCES[:cfg.stream_sentences], repeats=cfg.stream_repeats,
                     seed=cfg.seed, progress=False)
    b.update(drafter=cfg.main_drafter, N=d.main_n())
    note = (f"TTFA p50 AR {b['ar']['ttfa_ms_p50']:.0f} ms / spec {b['spec']['ttfa_ms_p50']:.0f} ms; RTF AR "
            f"{b['ar']['rtf']:.2f} / spec {b['spec']['rtf']:.2f}")
    return {"stream": b, "_step": {"note": note}}


def speed_word(ratio: float) -> str:
    """A ratio of speeds in words: below 1 is a slowdown, everywhere it is shown."""
    return "speed-up" if ratio > 1.0 else ("slowdown" if ratio < 1.0 else "no change")


def _table2(d: Demo) -> list[dict]:
    """Seed Table 2 on the mini world: tokens/call (English eval, free-running replay) at the
    operating N, and added parameters relative to the code predictor."""
    cfg = d.config
    n = d.main_n()
    per = d.state.get("per_language_tpc", {})
    en = per.get("en") or next(iter(per.values()), {})
    params = d.results.get("train", {}).get("code_predictor_params") or 1
    rows = []
    for name in d.state.get("drafters", {}):
        if name not in en:
            continue
        added = d.state["added_params"][name]
        rows.append({"drafter": DRAFTER_LABELS.get(name, name), "name": name,
                     "tokens_per_call": en[name][cfg.budgets.index(n)],
                     "added_params": added, "added_params_pct": 100.0 * added / params, "N": n})
    return rows


def step_wer(d: Demo) -> dict:
    cfg = d.config
    tts, rec = d.tts(), d.recognizer()
    spec = d.spec()
    n = d.main_n()
    rows, clips = [], {}
    for lang in cfg.languages:
        texts = [r["text"] for r in d.rows("eval", lang, cfg.wer_utterances)]
        ar = intelligibility(tts, texts, lang, rec, seeds=cfg.wer_seeds, inner=None)
        sp = intelligibility(tts, texts, lang, rec, seeds=cfg.wer_seeds, inner=spec)
        seconds = sum(c["frames"] for c in ar["clips"] + sp["clips"]) * 0.080 / 2
        rows.append({"language": lang, "n_clips": ar["n"], "audio_min": seconds / 60.0,
                     "ar_tokens_per_call": ar["tokens_per_call"], "spec_tokens_per_call": sp["tokens_per_call"],
                     "ar_wer": ar["wer"], "spec_wer": sp["wer"], "ar_cer": ar["cer"], "spec_cer": sp["cer"],
                     "ar_per": ar.get("per"), "spec_per": sp.get("per"),
                     "metric": "cer" if lang in ("ja", "zh") else "wer", "N": n})
        clips[lang] = {"ar": ar["clips"], "spec": sp["clips"]}
    note = "; ".join(f"{r['language']}: {r['metric'].upper()} AR {r['ar_' + r['metric']]:.2f} / spec "
                     f"{r['spec_' + r['metric']]:.2f}" for r in rows)
    return {"languages": rows, "wer_clips": clips, "drafters": _table2(d), "_step": {"note": f"N={n}; {note}"}}


def step_ab(d: Demo) -> dict:
    cfg = d.config
    items = [(d.rows("eval", lang, 1)[0]["text"], lang) for lang in cfg.ab_languages if lang in cfg.languages]
    pairs = make_pairs(d.tts(), items, seeds=cfg.ab_seeds, inner=d.spec(), recognizer=d.recognizer())
    audio_dir = Path(cfg.out) / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for k, p in enumerate(pairs):
        item = {"text": p.text, "language": p.language, "seed": p.seed}
        for side, clip in (("ar", p.ar), ("spec", p.spec)):
            name = f"audio/{k:02d}_{p.language}_seed{p.seed}_{side}.wav"
            (Path(cfg.out) / name).write_bytes(wav_bytes(clip.audio, clip.sample_rate))
            item[side] = {"wav": name, "tokens_per_call": clip.tokens_per_call, "wer": clip.wer, "cer": clip.cer,
                          "hypothesis": clip.hypothesis, "duration_s": len(clip.audio) / clip.sample_rate}
        out.append(item)
    return {"ab": out}


def step_lossless(d: Demo) -> dict:
    """The main decoder on one English eval frame context: its codes against the exact AR law of
    (c1, c2) and c3 and against AR frames for every code; the always-accept and full-p rules must fail."""
    cfg = d.config
    cp = d.tts().code_predictor
    drafter = cfg.lossless_drafter if cfg.lossless_drafter in d.state.get("trees", {}) else cfg.main_drafter
    trees = d.state.get("trees", {}).get(drafter, {})
    n = cfg.lossless_N if cfg.lossless_N in trees else d.main_n()
    spec = d.spec(drafter, n=n)
    rows = d.rows("eval", "en", 1)
    (th, codes), = d.utterances(rows)  # talker_hidden (T, E), codes (T, 16) of one eval utterance
    t = th.shape[0] // 2  # a mid-utterance frame (speech, not the leading silence)
    context = (th[t].view(1, 1, -1), codes[t, :1].view(1, 1))
    controls = {c: SpeculativeCodePredictor(cp, spec.drafter, spec.tree, rule="walk", _control=c)
                for c in ("always_accept", "full_p")}
    rep = lossless_report(cp, spec, [context], config=LosslessConfig(frames=cfg.lossless_frames, seed=cfg.seed),
                          controls=controls, progress=False,
                          control_frames={"always_accept": cfg.lossless_always_accept_frames,
                                          "full_p": cfg.lossless_control_frames})
    rep.update(drafter=drafter, N=n)
    ctx = rep["contexts"][0]
    dec = ctx["decoder"]
    verdicts = ", ".join(f"{k[len('control_'):]} ({v['frames']} frames) {'failed' if not v['passed'] else 'NOT detected'}"
                         for k, v in ctx.items() if k.startswith("control_"))
    note = (f"{drafter}, N={n}, {cfg.lossless_frames} frames: {'passed' if dec['passed'] else 'FAILED'} (min p "
            f"{dec['min_p']:.3g}, threshold {dec['threshold']:.2g}); controls (must fail): {verdicts}")
    return {"lossless": rep, "_step": {"note": note}}


SPADE_FILES = {"ablation": "ablation.json", "combined": "combined.json"}
SPADE_LENGTH = "length.json"  # optional: the 50% student distilled for longer (`spade ablate --sweep-steps`)
SPADE_RECIPE = "recipe.json"  # optional: other recipes' students against the teacher (`spade evaluate --against`)


def step_spade(d: Demo) -> dict:
    """The committed SPADE study (not rerun): the ratio / length / ablation rows with their paired
    intervals and the interleaved pruned x speculative timing, for the report's SPADE section."""
    folder = Path(d.config.spade_dir) if d.config.spade_dir else d.data_dir().parent / "spade"
    out = {}
    for key, name in SPADE_FILES.items():
        path = folder / name
        if not path.is_file():
            raise StepUnavailable(f"{path}: no committed SPADE result (run `rvqspec spade ablate` / `spade combined`)")
        out[key] = json.loads(path.read_text())
    ab, cb = out["ablation"], out["combined"]
    keep = ("name", "group", "ratio", "layers", "keep", "selection", "distilled", "recipe", "wer", "cer", "clips",
            "wer_diff", "wer_diff_ci95", "cer_diff", "cer_diff_ci95", "data", "timing")
    rows = [{k: r[k] for k in keep if k in r} for r in ab["rows"]]
    source = {k: f"{folder.name}/{name}" for k, name in SPADE_FILES.items()}
    length = folder / SPADE_LENGTH
    if length.is_file():  # the longer distillations: their own run, each paired against that run's teacher pass
        rows += [{k: r[k] for k in keep if k in r} for r in json.loads(length.read_text())["rows"]
                 if r["group"] == "steps"]
        source["length"] = f"{folder.name}/{SPADE_LENGTH}"
    recipe = folder / SPADE_RECIPE
    if recipe.is_file():  # students of other recipes, paired against their own run's teacher pass
        rows += rows_from_evaluation(json.loads(recipe.read_text()))
        source["recipe"] = f"{folder.name}/{SPADE_RECIPE}"
    spade = {"ablation": dict(teacher_layers=ab["teacher_layers"], eval=ab["eval"],
                              config=dict(ablation_ratio=ab["config"]["ablation_ratio"],
                                          bootstrap=ab["config"]["bootstrap"]), rows=rows),
             "combined": {k: cb[k] for k in ("texts", "reps", "threads", "speculative", "rows", "method") if k in cb},
             "source": source}
    best = next(r for r in cb["rows"] if r["name"] == "pruned / speculative")
    return {"spade": spade, "_step": {"note": f"recorded study: pruned / speculative {best['speedup_vs_teacher_ar']:.2f}x "
                                              f"over teacher / AR"}}


STEPS = [
    Step("extract", step_extract),
    Step("train", step_train, needs=("extract",)),
    Step("trees", step_trees, needs=("train",)),
    Step("acceptance", step_acceptance, needs=("trees",)),
    Step("profile", step_profile, needs=("trees",)),
    Step("wallclock", step_wallclock, needs=("trees",)),
    Step("stream", step_stream, needs=("trees",)),
    Step("wer", step_wer, needs=("trees",)),
    Step("ab", step_ab, needs=("trees",)),
    Step("lossless", step_lossless, needs=("trees",)),
    Step("spade", step_spade),
]


def notebook_config(data_dir: str | None = None, out_dir: str = "runs/nb", n_utterances: int = 8,
                    steps: int = 50, threads: int = 1, seed: int = 0, **kw) -> DemoConfig:
    """The numbered notebooks' shared configuration: the quick preset scaled by the notebooks'
    parameters. Every notebook builds it from the same parameters, so they share one work
    directory (`{out_dir}/work`): shards and drafters made by one are reused by the next."""
    base = dict(data_dir=data_dir, out=str(Path(out_dir) / "report"), work=str(Path(out_dir) / "work"),
                train_utterances=n_utterances, validation_utterances=max(2, n_utterances // 4),
                calibration_utterances=max(2, n_utterances // 2), eval_utterances=max(1, n_utterances // 4),
                train_steps=steps, shift_train_steps=steps, threads=threads, seed=seed, mode="notebook")
    base.update(kw)
    return DemoConfig.quick(**base)


def run_demo(config: DemoConfig = DemoConfig(), log: Callable[[str], None] = print) -> tuple[dict, Path]:
    """Run every step and write the report; returns (results, path of index.html)."""
    demo = Demo(config=config, log=log)
    results = demo.run()
    if "drafters" not in results and demo.state.get("per_language_tpc"):
        results["drafters"] = _table2(demo)  # Table 2 even when the WER step could not run
    for name, tb in demo.state.get("tracebacks", {}).items():
        log(f"--- traceback of step {name} ---\n{tb}")
    path = render_report(results, config.out)
    return results, path
