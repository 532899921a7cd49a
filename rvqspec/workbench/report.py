"""The main job's HTML report: `report/index.html` rendered from `report/results.json`.

Everything on the page is derived from the results dict (plus the WAV files it names), so a report
can be re-rendered from a results file alone (`render_report(results, out_dir)`), and tests can
render one from a small fixture. The page is self-contained (there is no network for a CDN):
plotly.js is embedded once, gzip-compressed, and audio as MP3 data URIs (the WAV files stay next
to the HTML too).

Results layout (each key optional; a missing or 'not available' step shows as a note):

    steps:      {name: {status: ok | not available | failed, seconds, note}}
    drafters:   [{drafter, tokens_per_call, added_params, added_params_pct, N}]       (seed Table 2)
    languages:  [{language, ar_tokens_per_call, spec_tokens_per_call, ar_wer, spec_wer,
                  ar_cer, spec_cer, metric, n_clips, audio_min}]                     (seed Table 3)
    acceptance: {budgets: [N...], curves: {drafter: [tokens/call per N]}, oracle: [...],
                 table: {drafter: acc[d][r]}}
    profile:    {device, budgets: [N...], ar_ms, verify_ms: [...], tokens_per_call: [...],
                 speedup: [...], best_N}                                             (seed Figure 4)
    train:      {loss: [...], val_loss: [...]}
    trees:      {drafter: {N: paths}}
    ab:         [{text, language, seed, ar: {wav, tokens_per_call, wer, cer, hypothesis}, spec: {...}}]
    lossless:   rvqspec.measure.lossless.lossless_report output: {contexts: [{decoder: {...}, control_*: {...}}]}
    spade:      {ablation: {teacher_layers, eval, config, rows}, combined: {texts, reps, rows}, source}
                (the committed `rvqspec spade ablate` / `spade combined` JSONs, read by the demo)
"""
from __future__ import annotations

import base64
import datetime as _dt
import gzip
import html
import io
import json
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.offline
import soundfile as sf

from rvqspec.core.jsonfile import atomic_path, write_json_atomic
from rvqspec.spade.ablation import ablation_figure
from rvqspec.spade.combined import combined_figure
from rvqspec.workbench.listening import ABPair, Clip, ab_figure
from rvqspec.workbench.notebook_results import to_jsonable

NOT_AVAILABLE = "not available"


def _esc(x) -> str:
    return html.escape(str(x))


def _fmt(x, digits: int = 2) -> str:
    if x is None:
        return "&mdash;"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not np.isfinite(x):
            return "&mdash;"
        return f"{x:.{digits}f}"
    return _esc(x)


def table_html(rows: Sequence[dict], columns: Sequence[tuple[str, str]], caption: str = "", table_id: str = "",
               digits: dict | None = None) -> str:
    """An HTML table: columns = [(key, header)], numbers formatted, text escaped."""
    digits = digits or {}
    head = "".join(f"<th>{_esc(h)}</th>" for _, h in columns)
    body = []
    for r in rows:
        body.append("<tr>" + "".join(f"<td>{_fmt(r.get(k), digits.get(k, 2))}</td>" for k, _ in columns) + "</tr>")
    cap = f"<caption>{caption}</caption>" if caption else ""
    tid = f' id="{_esc(table_id)}"' if table_id else ""
    return f'<table{tid} class="results">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# CJK text (Japanese and Mandarin sentences) needs a font with those glyphs: Debian's
# fonts-wqy-microhei (installed by .ci/run) or whatever CJK font the viewer's system has.
FONT_STACK = ('system-ui, "Noto Sans", "Noto Sans CJK JP", "Noto Sans CJK SC", "WenQuanYi Micro Hei", '
              '"Hiragino Sans", "PingFang SC", "Microsoft YaHei", sans-serif')


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A plotly figure as an empty div plus its JSON spec; the page's one loader script draws every
    spec once plotly.js is unpacked (`page_scripts`). The page shows no plotly toolbar (it covered
    the titles and legends); drag to zoom, double-click to reset and hover still work."""
    fig.update_layout(title=dict(x=0.0, xanchor="left", xref="paper"), font=dict(family=FONT_STACK))
    spec = json.loads(fig.to_json())
    spec["config"] = {"displaylogo": False, "responsive": True, "displayModeBar": False}
    # "</" inside a <script> element would end it early: escape the slash (still valid JSON)
    payload = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
    return (f'<div class="figure" data-figure="{_esc(div_id)}"><div id="{_esc(div_id)}" class="plotly-graph-div">'
            f'</div><script type="application/json" class="fig-spec" data-target="{_esc(div_id)}">{payload}'
            "</script></div>")


# plotly.js (4.8 MB) travels gzip-compressed and base64-encoded inside the page (2 MB), so the page
# stays one self-contained file with no network; the browser's DecompressionStream unpacks it.
_LOADER = """
(async () => {
  const b64 = document.getElementById('plotly-gz').textContent.trim();
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  const js = document.createElement('script');
  js.textContent = await new Response(stream).text();
  document.head.appendChild(js);
  for (const el of document.querySelectorAll('script.fig-spec')) {
    const spec = JSON.parse(el.textContent);
    Plotly.newPlot(el.dataset.target, spec.data, spec.layout, spec.config);
  }
})();
"""


def page_scripts() -> str:
    """The compressed plotly.js and the loader that draws every figure of the page."""
    packed = base64.b64encode(gzip.compress(plotly.offline.get_plotlyjs().encode("utf-8"), 9, mtime=0))
    return (f'<script id="plotly-gz" type="application/octet-stream">{packed.decode("ascii")}</script>'
            f"<script>{_LOADER}</script>")


def audio_bytes(audio: np.ndarray, rate: int) -> bytes:
    """MP3 (libsndfile's LAME encoder) of a mono clip: about a tenth of 16-bit PCM, and every
    browser plays it."""
    buf = io.BytesIO()
    sf.write(buf, np.asarray(audio, dtype=np.float32), int(rate), format="MP3", subtype="MPEG_LAYER_III")
    return buf.getvalue()


def audio_html(mp3: bytes, label: str) -> str:
    uri = "data:audio/mpeg;base64," + base64.b64encode(mp3).decode("ascii")
    return f'<figure class="clip"><figcaption>{label}</figcaption><audio controls preload="auto" src="{uri}"></audio></figure>'


def note_html(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


def speed_phrase(ratio: float) -> str:
    """'1.62x faster (a speed-up)' / '0.68x the speed (a slowdown)': below 1 is a slowdown."""
    if ratio > 1.0:
        return f"{ratio:.2f}x the speed of autoregressive decoding, a speed-up"
    if ratio < 1.0:
        return f"{ratio:.2f}x the speed of autoregressive decoding, a slowdown"
    return "the same speed as autoregressive decoding"


def verdict(results: dict) -> str:
    """The report's first sentence, computed from the run: the measured wall-clock ratio of the
    speculative inner loop to AR at the chosen N for the fastest drafter, the seed's offsets drafter
    beside it when another one was faster, and each drafter's tokens per call."""
    wc = results.get("wallclock") or {}
    rows = wc.get("rows") or []
    if not rows:
        why = (results.get("steps", {}).get("wallclock") or {}).get("note") or "the wall-clock step did not run"
        return f"Verdict: no wall-clock measurement in this run ({why})."
    best = max(rows, key=lambda r: r["ratio"])
    seed = next((r for r in rows if r["drafter"] == wc.get("main_drafter")), None)
    n = best["N"]
    tpc = {r.get("name") or r.get("drafter"): r["tokens_per_call"] for r in results.get("drafters") or []
           if r.get("tokens_per_call") is not None}
    others = "; ".join(f"{k} {v:.2f}" for k, v in tpc.items())
    out = (f"Verdict: on this machine the speculative inner loop ({best['drafter']} drafter, N = {n}) ran at "
           f"{speed_phrase(best['ratio'])} (measured, AR and speculative interleaved over {best['frames']} frames)")
    if seed is not None and seed is not best:
        out += f"; the {seed['drafter']} drafter ran at {speed_phrase(seed['ratio'])}"
    if others:
        out += f"; tokens per code-predictor call at N = {n} (English eval): {others}"
    return out + "."


# ---- figures from results ----------------------------------------------------------------------
def acceptance_figure(acc: dict) -> go.Figure:
    """Tokens per call vs tree size N for each drafter (measured on free-running decoding)."""
    budgets = acc["budgets"]
    fig = go.Figure()
    for name, ys in acc.get("curves", {}).items():
        fig.add_trace(go.Scatter(x=budgets, y=ys, mode="lines+markers", name=str(name)))
    if acc.get("oracle"):
        fig.add_trace(go.Scatter(x=budgets, y=acc["oracle"], mode="lines", name="oracle ceiling",
                                 line=dict(dash="dot", color="grey")))
    fig.update_layout(title="Acceptance: tokens per code-predictor call vs tree size N",
                      xaxis=dict(title="N (draft nodes)", type="log"), yaxis_title="tokens / call",
                      height=380, margin=dict(l=50, r=20, t=50, b=40))
    return fig


def language_figure(acc: dict, drafter: str) -> go.Figure:
    """Tokens per call vs N of one drafter in every evaluated language (seed 000 Table 3: the
    offsets are trained on English only, acceptance should hold across languages)."""
    fig = go.Figure()
    for lang, curves in acc.get("per_language", {}).items():
        if drafter in curves:
            fig.add_trace(go.Scatter(x=acc["budgets"], y=curves[drafter], mode="lines+markers", name=lang))
    fig.update_layout(title=f"Tokens per call by language ({drafter} drafter, eval split)",
                      xaxis=dict(title="N (draft nodes)", type="log"), yaxis_title="tokens / call",
                      height=380, margin=dict(l=50, r=20, t=50, b=40))
    return fig


def speedup_figure(profile: dict) -> go.Figure:
    """Seed Figure 4 on this device: the acceptance ceiling (tokens/call) and the realised speedup
    (tokens/call) / (verify latency / AR latency) vs N."""
    if profile.get("raw"):  # a full device profile (rvqspec.measure.profile): the profiling area's own figure
        from rvqspec.workbench.plots import figure4

        fig = figure4([profile["raw"]])
        fig.update_layout(title="Speed-up vs tree size N: tokens/call / (1 + verify overhead)", height=380,
                          margin=dict(l=50, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.25))
        return fig
    N = profile["budgets"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=N, y=profile["tokens_per_call"], mode="lines+markers", name="tokens/call (ceiling)",
                             line=dict(dash="dash", color="grey")))
    fig.add_trace(go.Scatter(x=N, y=profile["speedup"], mode="lines+markers", name=f"speedup on {profile.get('device', 'this device')}"))
    if profile.get("best_N") is not None:
        fig.add_vline(x=profile["best_N"], line=dict(color="#e45756", dash="dot"))
    fig.update_layout(title="Practical speedup vs sparse tree size (seed Figure 4, this device)",
                      xaxis=dict(title="N", type="log"), yaxis_title="x over AR", height=380,
                      margin=dict(l=50, r=20, t=50, b=40))
    return fig


def lossless_figure(lossless: dict, context: int = 0) -> go.Figure:
    """-log10 p of every test of one context (rvqspec.measure.lossless): the decoder and each negative
    control, with the pass threshold; a run fails where its marker is above the line."""
    ctx = lossless["contexts"][context]
    fig = go.Figure()
    for name, run in ctx.items():
        if not isinstance(run, dict) or "tests" not in run:
            continue
        tests = list(run["tests"])
        y = [min(-np.log10(max(run["tests"][t]["p"], 1e-300)), 300.0) for t in tests]
        label = "decoder" if name == "decoder" else name.replace("control_", "control: ")
        fig.add_trace(go.Scatter(x=tests, y=y, mode="markers", name=f"{label} ({run['frames']} frames)",
                                 marker=dict(size=9, symbol="circle" if name == "decoder" else "x")))
    thr = ctx["decoder"]["threshold"]
    line = -np.log10(thr)
    fig.add_hline(y=line, line=dict(color="#e45756", dash="dot"))
    # placed by hand: add_hline's annotation takes y as log10 on a log axis and lands off the chart
    fig.add_annotation(x=1, xref="paper", y=np.log10(line), yref="y", text=f"fail above (p < {thr:.2g})",
                       showarrow=False, xanchor="right", yanchor="bottom", font=dict(color="#e45756"))
    fig.update_layout(title="Lossless check: speculative codes against the exact AR law and AR frames",
                      # log axis range in decades: 0.005 .. 400 (-log10 p is capped at 300 above)
                      yaxis=dict(title="-log10 p", type="log", range=[-2.3, 2.6]), height=380,
                      margin=dict(l=50, r=20, t=50, b=80),
                      legend=dict(orientation="h", y=-0.35))
    return fig


def lossless_rows(lossless: dict) -> list[dict]:
    """One table row per (context, run) of a `lossless_report`: frames, tokens per call, min p,
    threshold, codes of probability 0 sampled, verdict."""
    rows = []
    for i, ctx in enumerate(lossless["contexts"]):
        for name, run in ctx.items():
            if isinstance(run, dict) and "tests" in run:
                rows.append({"context": i, "run": name, "frames": run["frames"], "tokens_per_call": run["tokens_per_call"],
                             # scientific notation: fixed-point digits would print 1e-120 as 0.0000
                             "min_p": f"{run['min_p']:.3g}", "threshold": f"{run['threshold']:.3g}",
                             "impossible": run["impossible"],
                             "verdict": "pass" if run["passed"] else "FAIL"})
    return rows


def latency_figure(profile: dict) -> go.Figure:
    N = profile["budgets"]
    fig = go.Figure(go.Scatter(x=N, y=profile["verify_ms"], mode="lines+markers", name="verify call (q = N + 1)"))
    fig.add_hline(y=profile["ar_ms"], line=dict(dash="dash", color="grey"), annotation_text="AR call (q = 1)")
    fig.update_layout(title=f"Code-predictor call latency ({profile.get('device', '')})", xaxis=dict(title="N", type="log"),
                      yaxis_title="ms (median)", height=340, margin=dict(l=50, r=20, t=50, b=40))
    return fig


def loss_figure(train: dict) -> go.Figure:
    fig = go.Figure()
    for key, name in (("loss", "train"), ("val_loss", "validation")):
        ys = train.get(key)
        if ys:
            xs = train.get(f"{key}_steps") or list(range(1, len(ys) + 1))
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, opacity=0.45 if key == "loss" else 1.0))
            if key == "loss" and len(ys) >= 20:  # per-batch losses are noisy: show a running mean too
                w = max(5, len(ys) // 20)
                smooth = np.convolve(np.asarray(ys, dtype=float), np.ones(w) / w, mode="valid")
                fig.add_trace(go.Scatter(x=xs[w - 1:], y=smooth, mode="lines", name=f"train (mean of {w})"))
    fig.update_layout(title="Drafter training: cross-entropy per drafted code", xaxis_title="step",
                      yaxis_title="nats per draft", height=320, margin=dict(l=50, r=20, t=50, b=40))
    return fig


# ---- the page ----------------------------------------------------------------------------------
CSS = """
body { font-family: FONT_STACK; margin: 2rem auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2rem; } .sub { color: #666; margin-top: 0; }
table.results { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
table.results caption { caption-side: top; text-align: left; color: #444; padding-bottom: 0.3rem; }
table.results th, table.results td { border: 1px solid #ddd; padding: 4px 10px; text-align: right; }
table.results th:first-child, table.results td:first-child { text-align: left; }
.note { background: #fff4e5; border-left: 4px solid #f58518; padding: 6px 10px; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
.clip { display: inline-block; margin: 0.3rem 1rem 0.3rem 0; } .clip audio { width: 320px; }
section { margin-bottom: 2.5rem; }
#steps td:last-child { text-align: left; max-width: 700px; }
.verdict { font-size: 1.15rem; background: #eef5ff; border-left: 4px solid #4c78a8; padding: 8px 12px; }
""".replace("FONT_STACK", FONT_STACK)


def _steps_section(steps: dict) -> str:
    rows = [{"step": k, "status": v.get("status"), "seconds": v.get("seconds"), "note": v.get("note", "")}
            for k, v in steps.items()]
    return ("<section id='steps'><h2>Pipeline steps</h2>"
            + table_html(rows, [("step", "step"), ("status", "status"), ("seconds", "seconds"), ("note", "note")],
                         table_id="steps", digits={"seconds": 1})
            + "".join(note_html(f"{r['step']}: {r['status']}: {r['note']}") for r in rows if r["status"] != "ok")
            + "</section>")


def _unavailable(results: dict, step: str, what: str) -> str:
    st = results.get("steps", {}).get(step, {})
    why = st.get("note") or "this step did not run"
    return note_html(f"{what}: {st.get('status', NOT_AVAILABLE)} ({why})")


def render_report(results: dict, out_dir: str | Path, audio_root: str | Path | None = None,
                  title: str = "rvqspec on the mini world", write_results: bool = True) -> Path:
    """Write `out_dir/index.html` (and, with `write_results`, `out_dir/results.json`) from a results
    dict; returns the HTML path.

    WAV paths in results['ab'] are relative to `audio_root` (default `out_dir`) and must stay inside it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    audio_root = Path(audio_root) if audio_root else out_dir
    clean = to_jsonable(results)
    if write_results:
        write_json_atomic(out_dir / "results.json", clean, indent=2, ensure_ascii=False)
    parts: list[str] = []
    meta = results.get("meta", {})
    stamp = meta.get("finished") or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f"<h1>{_esc(title)}</h1><p class='sub'>RVQ position-aware speculative decoding of the Qwen3-TTS "
                 f"code predictor (seed 000). {_esc(meta.get('mode', ''))} run, {_esc(stamp)}, "
                 f"{_fmt(meta.get('seconds'), 0)} s in all on {_esc(meta.get('device', 'cpu'))}.</p>")
    parts.append(f"<p id='verdict' class='verdict'>{_esc(verdict(results))}</p>")
    if results.get("steps"):
        parts.append(_steps_section(results["steps"]))

    # wall clock per drafter (the verdict's numbers)
    wc = results.get("wallclock") or {}
    parts.append("<section id='wallclock'><h2>Inner-loop wall clock, AR against speculative</h2>")
    if wc.get("rows"):
        rows = [dict(r, ratio_text=f"{r['ratio']:.2f}x ({r['verdict']})") for r in wc["rows"]]
        parts.append(table_html(rows, [("drafter", "Drafter"), ("frames", "frames"),
                                       ("ar_ms_per_frame", "AR ms / frame"), ("spec_ms_per_frame", "Spec ms / frame"),
                                       ("tokens_per_call", "Toks/step"), ("ratio_text", "AR time / spec time")],
                                caption=f"N = {_esc(wc['N'])}. Median per frame of the code predictor's 15 codes, "
                                        "the two decoders alternating frame by frame on the same English eval "
                                        "frames (one run, one machine); a ratio below 1 is a slowdown.",
                                table_id="wallclock-table", digits={"ar_ms_per_frame": 3, "spec_ms_per_frame": 3}))
    else:
        parts.append(_unavailable(results, "wallclock", "inner-loop wall clock"))
    parts.append("</section>")

    # streaming: timeline of one sentence and the real-time call budget
    st = results.get("stream") or {}
    parts.append("<section id='stream'><h2>Streaming: time to first audio and the real-time budget</h2>")
    if st.get("ar") and st.get("spec"):
        rows = [{"decoder": m, **{k: st[m].get(k) for k in ("ttfa_ms_p50", "ttfa_ms_p95", "rtf",
                                                             "talker_calls_per_audio_s", "predictor_calls_per_audio_s",
                                                             "host_ms_per_frame")}} for m in ("ar", "spec")]
        ratio = st.get("spec_over_ar_rtf")
        parts.append(table_html(rows, [("decoder", "decoder"), ("ttfa_ms_p50", "TTFA p50 ms"),
                                       ("ttfa_ms_p95", "TTFA p95 ms"), ("rtf", "RTF"),
                                       ("talker_calls_per_audio_s", "talker calls / audio s"),
                                       ("predictor_calls_per_audio_s", "predictor calls / audio s"),
                                       ("host_ms_per_frame", "host ms / frame")],
                                caption=f"N = {_esc(st.get('N', '?'))}, drafter {_esc(st.get('drafter', '?'))}. "
                                        "AR and speculative streams interleaved in one run; RTF = compute time / "
                                        "audio time (below 1 keeps ahead of playback)."
                                        + ("" if ratio is None else f" Speculative streaming ran at "
                                           f"{speed_phrase(float(ratio))}."), table_id="stream-table",
                                digits={"rtf": 3}))
        from rvqspec.workbench.plots import calls_budget, stream_timeline

        parts.append(f"<p>Timeline sentence: {_esc(st.get('timeline_sentence', ''))}</p>")
        parts.append("<div class='grid'>"
                     + figure_html(stream_timeline(st, title="Chunk ready vs playback need, one sentence"),
                                   "fig-stream-timeline")
                     + figure_html(calls_budget(st, title="Model calls per second of audio"), "fig-calls-budget")
                     + "</div>")
    else:
        parts.append(_unavailable(results, "stream", "streaming"))
    parts.append("</section>")

    # Table 2: drafter ablation
    parts.append("<section id='table2'><h2>Drafters (seed Table 2)</h2>")
    if results.get("drafters"):
        ns = sorted({r.get("N") for r in results["drafters"]}, key=str)
        parts.append(table_html(results["drafters"], [("drafter", "Drafter"), ("tokens_per_call", "Toks/step"),
                                                      ("added_params", "Added params"),
                                                      ("added_params_pct", "Added params (% of code predictor)")],
                                caption=f"N = {_esc(', '.join(map(str, ns)))}. Tokens per code-predictor call on "
                                        "free-running decoding (eval split, English), frozen backbone and LM heads.",
                                table_id="table2", digits={"added_params_pct": 4}))
    else:
        parts.append(_unavailable(results, "acceptance", "drafter ablation"))
    parts.append("</section>")

    # Table 3: per language AR vs speculative
    parts.append("<section id='table3'><h2>Per language (seed Table 3)</h2>")
    if results.get("languages"):
        ns = sorted({r.get("N") for r in results["languages"]}, key=str)
        pct = [{**r, **{k: (100.0 * r[k] if isinstance(r.get(k), (int, float)) else r.get(k))
                        for k in ("ar_wer", "spec_wer", "ar_cer", "spec_cer", "ar_per", "spec_per")}}
               for r in results["languages"]]
        # PER (phoneme error rate) needs a recognizer with a phoneme head; shown when there is one
        per_cols = ([("ar_per", "AR PER %"), ("spec_per", "Spec PER %")]
                    if any(r.get("ar_per") is not None for r in results["languages"]) else [])
        parts.append(table_html(pct,
                                [("language", "Language"), ("n_clips", "clips"), ("audio_min", "Audio (min)"),
                                 ("ar_tokens_per_call", "AR toks/step"), ("ar_wer", "AR WER %"), ("ar_cer", "AR CER %"),
                                 ("spec_tokens_per_call", "Spec toks/step"), ("spec_wer", "Spec WER %"),
                                 ("spec_cer", "Spec CER %")] + per_cols,
                                caption=f"N = {_esc(', '.join(map(str, ns)))}. WER/CER in percent of the mini "
                                        "recognizer on synthesized speech; the headline metric is CER for ja/zh, "
                                        "WER otherwise. Equal in distribution by construction (lossless "
                                        "verification), so differences are sampling noise.", table_id="table3",
                                digits={"audio_min": 2, "ar_wer": 1, "spec_wer": 1, "ar_cer": 1, "spec_cer": 1,
                                        "ar_per": 1, "spec_per": 1}))
    else:
        parts.append(_unavailable(results, "wer", "per-language WER parity"))
    parts.append("</section>")

    # lossless check at model scale
    parts.append("<section id='lossless'><h2>Lossless check on the mini model</h2>")
    if results.get("lossless"):
        ll = results["lossless"]
        parts.append(table_html(lossless_rows(ll), [("context", "context"), ("run", "run"), ("frames", "frames"),
                                                     ("tokens_per_call", "toks/step"), ("min_p", "min p"),
                                                     ("threshold", "threshold"), ("impossible", "p = 0 cells hit"),
                                                     ("verdict", "verdict")],
                                caption=f"N = {_esc(ll.get('N', '?'))}, drafter {_esc(ll.get('drafter', '?'))}. "
                                        "The speculative decoder's codes for one frame context against the exact AR "
                                        "law of (c1, c2) and of c3 (enumerated) and against as many AR frames for "
                                        "every code c1..c15 (two-sample chi-square). A run passes when every p is "
                                        "at least the threshold (1e-6 over the number of tests) and no code of "
                                        "probability 0 appears. The controls use deliberately wrong acceptance "
                                        "rules and must fail.", table_id="lossless-table"))
        parts.append(figure_html(lossless_figure(ll), "fig-lossless"))
    else:
        parts.append(_unavailable(results, "lossless", "lossless check"))
    parts.append("</section>")

    # Figure 4 and latency
    parts.append("<section id='figure4'><h2>Speedup vs tree size on this device (seed Figure 4)</h2>")
    prof = results.get("profile")
    if prof:
        parts.append("<div class='grid'>" + figure_html(speedup_figure(prof), "fig-speedup")
                     + figure_html(latency_figure(prof), "fig-latency") + "</div>")
        if prof.get("best_N") is not None:
            k = prof["budgets"].index(prof["best_N"]) if prof["best_N"] in prof["budgets"] else None
            proj = "" if k is None else f" (projected {speed_phrase(float(prof['speedup'][k]))})"
            parts.append(f"<p>Best tree size here: <b>N* = {_esc(prof['best_N'])}</b>{_esc(proj)}. The projection "
                         "is tokens per call over the measured verify / AR call-time ratio; the measured wall "
                         "clock of whole frames is the verdict above.</p>")
    else:
        parts.append(_unavailable(results, "profile", "device profile"))
    parts.append("</section>")

    # acceptance curves
    parts.append("<section id='acceptance'><h2>Acceptance vs N</h2>")
    if results.get("acceptance", {}).get("curves"):
        acc = results["acceptance"]
        main = (results.get("config") or {}).get("main_drafter") or next(iter(acc["curves"]))
        if len(acc.get("per_language", {})) > 1:
            parts.append("<div class='grid'>" + figure_html(acceptance_figure(acc), "fig-acceptance")
                         + figure_html(language_figure(acc, main), "fig-languages") + "</div>")
        else:
            parts.append(figure_html(acceptance_figure(acc), "fig-acceptance"))
    else:
        parts.append(_unavailable(results, "acceptance", "acceptance curves"))
    parts.append("</section>")

    # trees
    trees = results.get("trees") or {}
    table = (results.get("acceptance") or {}).get("table") or {}
    if trees:
        from rvqspec.core.tree import SparseTree
        from rvqspec.workbench.explorer import mask_figure, tree_figure

        parts.append("<section id='trees'><h2>Sparse trees (seed Figure 2)</h2>")
        # the first (main) drafter's trees: the smallest and the largest N side by side with their
        # masks; the notebook 04 explorer shows every N interactively
        main = (results.get("config") or {}).get("main_drafter")
        name = main if main in trees else next(iter(trees))
        by_n = trees[name]
        acc = np.asarray(table[name]) if name in table else None
        sizes = sorted(by_n, key=int)
        for n in dict.fromkeys([sizes[0], sizes[-1]]):
            tree = SparseTree(by_n[n])
            parts.append(f"<h3>{_esc(name)}, N = {_esc(n)}</h3><div class='grid'>"
                         + figure_html(tree_figure(tree, acc), f"fig-tree-{n}")
                         + figure_html(mask_figure(tree), f"fig-mask-{n}") + "</div>")
        parts.append("</section>")

    # training
    if results.get("train", {}).get("loss"):
        parts.append("<section id='train'><h2>Offset training</h2>" + figure_html(loss_figure(results["train"]), "fig-loss")
                     + "</section>")

    # SPADE (seed 001): the committed study
    parts.append("<section id='spade'><h2>SPADE: the pruned talker, alone and with speculative decoding (seed 001)</h2>")
    if results.get("spade"):
        parts.append(_spade_section(results["spade"]))
    else:
        parts.append(_unavailable(results, "spade", "SPADE study"))
    parts.append("</section>")

    # A/B audio
    parts.append("<section id='ab'><h2>Listening A/B: autoregressive vs speculative</h2>")
    if results.get("ab"):
        parts.append("<p>Same sentence, same seed, both decoders: equal in distribution, not sample by "
                     "sample.</p>")
        parts.append(_ab_section(results["ab"], audio_root))
    else:
        parts.append(_unavailable(results, "ab", "A/B audio"))
    parts.append("</section>")

    body = "\n".join(parts)
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<style>{CSS}</style></head><body>{body}{page_scripts()}</body></html>")
    path = out_dir / "index.html"
    with atomic_path(path) as tmp:  # a crash leaves the old page or the whole new one
        tmp.write_text(page, encoding="utf-8")
    return path


def _spade_section(spade: dict) -> str:
    """The recorded study (`rvqspec spade ablate` / `spade combined`, read by the demo's spade step):
    the differences to the teacher with paired intervals, and the four pipelines' frame time."""
    ab, cb, src = spade["ablation"], spade["combined"], spade.get("source", {})
    t = next(r for r in ab["rows"] if r["group"] == "teacher")
    half = next((r for r in ab["rows"] if r["group"] == "ratio" and r["ratio"] == ab["config"]["ablation_ratio"]), None)
    best = next((r for r in cb["rows"] if r["name"] == "pruned / speculative"), None)
    text = [f"Teacher: {ab['teacher_layers']} talker layers, WER {100 * t['wer']:.1f}%, CER {100 * t['cer']:.1f}% "
            f"on {ab['eval']['texts']} held-out {ab['eval']['language']} texts x seeds {ab['eval']['seeds']}."]
    if half is not None:
        text.append(f"Keeping {half['layers']} layers ({half['keep']}) costs {100 * half['wer_diff']:+.1f} WER points "
                    f"[{100 * half['wer_diff_ci95'][0]:+.1f}, {100 * half['wer_diff_ci95'][1]:+.1f}] and "
                    f"{100 * half['cer_diff']:+.1f} CER points.")
    longest = max((r for r in ab["rows"] if r["group"] == "steps"), key=lambda r: r["recipe"]["steps"], default=None)
    if longest is not None:
        text.append(f"Distilled {longest['recipe']['steps']} steps instead of {half['recipe']['steps'] if half else '?'}, "
                    f"the same layers cost {100 * longest['wer_diff']:+.1f} WER points "
                    f"[{100 * longest['wer_diff_ci95'][0]:+.1f}, {100 * longest['wer_diff_ci95'][1]:+.1f}] and "
                    f"{100 * longest['cer_diff']:+.1f} CER points.")
    for rec in (r for r in ab["rows"] if r["group"] == "recipe"):
        c = rec["recipe"]
        text.append(f"Recipe {rec['name']} ({rec['layers']} layers {rec['keep']}; kd weight {c['kd_weight']:g}, "
                    f"code-predictor KD {c.get('w_cp', 0):g}, {c['steps']} steps, seed {c.get('seed', 0)}): "
                    f"{100 * rec['wer_diff']:+.1f} WER points [{100 * rec['wer_diff_ci95'][0]:+.1f}, "
                    f"{100 * rec['wer_diff_ci95'][1]:+.1f}] and {100 * rec['cer_diff']:+.1f} CER points.")
    if best is not None:
        r = best["speedup_vs_teacher_ar"]
        text.append(f"Pruned talker with the speculative code predictor: {r:.2f}x the speed of the teacher with AR "
                    f"({'a speed-up' if r > 1 else 'a slowdown'}), measured interleaved in one run.")
    text.append(f"Recorded results, not rerun by the demo: {', '.join(src.values()) or 'data/spade'}.")
    return (f"<p>{_esc(' '.join(text))}</p>" + figure_html(ablation_figure(ab), "fig-spade-ablation")
            + "<div class='grid'>" + figure_html(combined_figure(cb), "fig-spade-combined") + "</div>")


def _ab_section(items: Iterable[dict], audio_root: Path) -> str:
    out = []
    for k, item in enumerate(items):
        clips = []
        row = []
        for side in ("ar", "spec"):
            c = item[side]
            wav_path = (audio_root / c["wav"]).resolve()
            if not wav_path.is_relative_to(audio_root.resolve()):  # results.json must not pull in other files
                row.append(note_html(f"audio path {c['wav']} is outside {audio_root}; not embedded"))
                clips.append(None)
                continue
            if not wav_path.is_file():
                row.append(note_html(f"missing audio file {c['wav']}"))
                clips.append(None)
                continue
            audio, rate = sf.read(str(wav_path), dtype="float32")
            clips.append(Clip(label="AR" if side == "ar" else "speculative", text=item["text"],
                              language=item["language"], seed=int(item["seed"]), audio=audio, sample_rate=int(rate),
                              tokens_per_call=float(c.get("tokens_per_call", float("nan"))),
                              hypothesis=c.get("hypothesis"), wer=c.get("wer"), cer=c.get("cer")))
            score = "" if c.get("wer") is None else f", WER {_fmt(c['wer'])}, CER {_fmt(c['cer'])}"
            heard = f"<br><small>heard: {_esc(c['hypothesis'])}</small>" if c.get("hypothesis") else ""
            row.append(audio_html(audio_bytes(audio, rate), f"{'AR' if side == 'ar' else 'Speculative'} "
                                       f"({_fmt(c.get('tokens_per_call'))} tok/call{score}){heard}"))
        out.append(f"<h3>[{_esc(item['language'])}, seed {_esc(item['seed'])}] {_esc(item['text'])}</h3>" + "".join(row))
        if all(clips):
            pair = ABPair(text=item["text"], language=item["language"], seed=int(item["seed"]), ar=clips[0], spec=clips[1])
            out.append(figure_html(ab_figure(pair, height=260), f"fig-ab-{k}"))
    return "\n".join(out)
