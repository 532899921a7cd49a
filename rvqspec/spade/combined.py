"""The pruned talker (seed 001) combined with the speculative code predictor (seed 000).

The two methods cut different parts of a frame: SPADE the talker step, speculative decoding the
15-code inner loop. `combined_benchmark` times the four pipelines {teacher, pruned} x {AR,
speculative} interleaved in one run (`evaluate.timing_benchmark`: every repetition runs every text
through every pipeline in turn, the fastest repetition per text counts) and reports, per pipeline,
RTF, ms per frame split into talker and inner loop, and the speed-up over the teacher with AR
(below 1 is a slowdown). `projection_from_acceptance` recomputes the full-size projection
(`evaluate.project_variants`) with the tokens per call of a `bench acceptance` JSON, for every tree
size both have.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import plotly.graph_objects as go

from rvqspec.core.defaults import DRAFTER_PREFERENCE
from rvqspec.core.jsonfile import portable_path
from rvqspec.measure.bench_spec import tokens_per_call_from_acceptance
from rvqspec.mini.pipeline import MiniTTS
from rvqspec.spade.evaluate import load_inner, parameters, project_variants, timing_benchmark

PIPELINES = ("teacher / AR", "teacher / speculative", "pruned / AR", "pruned / speculative")


def combined_benchmark(teacher_dir: str | Path, student_dir: str | Path, drafter: str | Path | None,
                       tree: str | Path | None, texts: Sequence[str], data_dir: str | Path | None = None,
                       language: str = "en", reps: int = 3, seed: int = 0, progress: bool = True) -> dict:
    """Interleaved timing of teacher / pruned talker x AR / speculative code predictor (see module)."""
    if not texts:
        raise ValueError("combined_benchmark: no texts to time")
    teacher = MiniTTS.load(data_dir, model_dir=teacher_dir)
    student = MiniTTS.load(data_dir, model_dir=student_dir)
    t_inner, desc = load_inner(teacher.code_predictor, drafter, tree)
    s_inner, _ = load_inner(student.code_predictor, drafter, tree)
    pipes = {"teacher / AR": (teacher, None), "teacher / speculative": (teacher, t_inner),
             "pruned / AR": (student, None), "pruned / speculative": (student, s_inner)}
    timing = timing_benchmark(pipes, list(texts), language, reps, seed, progress)
    base = timing["teacher / AR"]
    rows = []
    for name in PIPELINES:
        t = timing[name]
        tts = teacher if name.startswith("teacher") else student
        rows.append(dict(name=name, talker_layers=tts.talker.config.num_hidden_layers,
                         inner="AR" if name.endswith("AR") else "speculative",
                         rtf=t["rtf"], ms_per_frame=t["ms_per_frame"], ms_per_frame_median=t["ms_per_frame_median"],
                         talker_ms_per_frame=t["talker_ms_per_frame"], inner_ms_per_frame=t["inner_ms_per_frame"],
                         speedup_vs_teacher_ar=base["ms_per_frame"] / t["ms_per_frame"],
                         talker_speedup_vs_teacher=base["talker_ms_per_frame"] / t["talker_ms_per_frame"],
                         inner_speedup_vs_ar=base["inner_ms_per_frame"] / t["inner_ms_per_frame"],
                         params=parameters(tts.talker, tts.code_predictor)["total"], frames=t["frames"]))
    best = max(rows, key=lambda r: r["speedup_vs_teacher_ar"])
    return dict(teacher=portable_path(teacher_dir), student=portable_path(student_dir), speculative=desc,
                language=language, texts=len(texts), reps=reps, seed=seed, rows=rows,
                pruned_speculative_beats_teacher_ar=rows[3]["speedup_vs_teacher_ar"] > 1.0, fastest=best["name"],
                method="interleaved: each repetition runs every text through the four pipelines in turn; the "
                       "fastest repetition per text counts; codec decoding excluded")


def combined_figure(result: dict) -> go.Figure:
    """Stacked ms per frame (talker + inner loop) of the four pipelines of `combined_benchmark`,
    each labelled with its speed-up over the teacher with AR (below 1 is a slowdown)."""
    rows = result["rows"]
    names = [r["name"] for r in rows]
    fig = go.Figure()
    fig.add_bar(x=names, y=[r["talker_ms_per_frame"] for r in rows], name="talker")
    fig.add_bar(x=names, y=[r["inner_ms_per_frame"] for r in rows], name="code predictor (15 codes)",
                text=[f"{r['speedup_vs_teacher_ar']:.2f}x" + (" (slowdown)" if r["speedup_vs_teacher_ar"] < 1 else "")
                      for r in rows], textposition="outside", textfont=dict(size=12), cliponaxis=False)
    fig.update_layout(barmode="stack", height=440, yaxis_title="ms per frame (fastest repetition per text)",
                      uniformtext=dict(minsize=11, mode="show"), margin=dict(t=110),
                      title=dict(font=dict(size=14),
                                 text=f"Teacher / pruned talker x AR / speculative, interleaved<br><sup>{result['texts']} "
                                      f"texts x {result['reps']} reps; label: speed-up over teacher / AR</sup>"))
    return fig


def projection_from_acceptance(timings: dict, acceptance: dict, drafter: str | None = None,
                               label: str = "acceptance") -> dict:
    """The full-size projection recomputed from `project_full_size` timings (a projection JSON) and
    the tokens per call of a `bench acceptance` JSON (mean over languages) for every tree size N
    that both hold. `drafter` defaults to the first of DRAFTER_PREFERENCE present."""
    if "code_predictor" not in timings or "talker" not in timings:
        raise ValueError("timings: keys 'code_predictor' and 'talker' are needed (a `spade project` JSON, or the "
                         "'projection' of a `spade all` results.json)")
    have = sorted(acceptance.get("drafters", {}))
    if drafter is None:
        drafter = next((d for d in DRAFTER_PREFERENCE if d in have), None)
    if drafter not in have:
        raise ValueError(f"acceptance JSON has no drafter {drafter!r} (has {have})")
    tpc = tokens_per_call_from_acceptance(acceptance, drafter)
    nodes = {int(n) for n in timings["code_predictor"].get("tree_call_ms_by_nodes", {})}
    common = sorted(nodes & set(tpc))
    if not common:
        raise ValueError(f"no tree size in both: timings have N={sorted(nodes)}, the acceptance JSON N={sorted(tpc)}")
    out = project_variants(timings, {f"{label} {drafter} N={n}": [tpc[n], n] for n in common})
    out["acceptance"] = dict(drafter=drafter, tokens_per_call={str(n): tpc[n] for n in sorted(tpc)}, used_nodes=common)
    return out
