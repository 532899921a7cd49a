"""Plotly figures. `figure4`: seed 000 Figure 4 (speed-up vs sparse tree size) for measured devices."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go


def _get(p, key):
    return (p if isinstance(p, dict) else getattr(p, "raw", {})).get(key)


def figure4(profiles, acceptance: dict | None = None, title: str | None = None):
    """Speed-up vs N per profile (device / backend / dtype) under the acceptance ceiling.

    profiles: device profile dicts (or `DeviceProfile`s) from `rvqspec.measure.profile`; acceptance: tokens
    per call by N for the grey dashed ceiling (seed 000 Figure 4); default: the first profile's."""
    if not profiles:
        raise ValueError("figure4 needs at least one device profile")
    fig = go.Figure()
    ceil = acceptance if acceptance is not None else _get(profiles[0], "tokens_per_call")
    pts = sorted((int(n), float(t)) for n, t in (ceil or {}).items() if t is not None)
    if pts:
        fig.add_trace(go.Scatter(x=[n for n, _ in pts], y=[t for _, t in pts], name="acceptance (tokens/call)",
                                 mode="lines+markers", line=dict(color="grey", dash="dash")))
    for p in profiles:
        sp = sorted((int(n), float(s)) for n, s in _get(p, "speedup").items() if s is not None)
        ns = _get(p, "n_star")
        heads = _get(p, "heads")
        extra = f" heads={heads}" if heads not in (None, "window") else ""
        label = f"{_get(p, 'backend')} {_get(p, 'dtype')}{extra} ({_get(p, 'device')[:40]}), N*={ns}"
        fig.add_trace(go.Scatter(x=[n for n, _ in sp], y=[s for _, s in sp], name=label, mode="lines+markers"))
    fig.add_hline(y=1.0, line=dict(color="black", width=1, dash="dot"))
    fig.update_layout(title=title or "Speed-up vs sparse tree size N (seed 000 Figure 4): "
                                      "tokens/call / (1 + verify overhead)",
                      xaxis=dict(title="tree size N (verify query q = N + 1)", type="log", dtick=0.30103),
                      yaxis=dict(title="speed-up over AR / tokens per call"), template="plotly_white")
    return fig


def write_figure(fig, path: str | Path, png: bool = True) -> dict:
    """Write HTML (self-contained plotly.js) and, when kaleido is installed, a PNG next to it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    html = p.with_suffix(".html")
    fig.write_html(str(html), include_plotlyjs="cdn")
    out = {"html": str(html), "png": None}
    if png:
        try:
            import kaleido  # noqa: F401
        except ImportError:
            out["png_skipped"] = "kaleido is not installed"
            return out
        fig.write_image(str(p.with_suffix(".png")))
        out["png"] = str(p.with_suffix(".png"))
    return out


def playback_schedule(timeline: list[dict]) -> list[dict]:
    """Per streamed chunk: when it was ready and when playback needs it, playback starting the moment
    the first chunk is ready (seconds since the stream started); `late_s` > 0 is an underrun."""
    if not timeline:
        raise ValueError("playback_schedule needs at least one chunk")
    t0 = next((c["ready_s"] for c in timeline if c["seconds"] > 0), timeline[0]["ready_s"])
    return [dict(c, needed_s=t0 + c["start_s"], late_s=c["ready_s"] - (t0 + c["start_s"])) for c in timeline]


def stream_timeline(bench: dict, title: str | None = None):
    """One streamed sentence (`rvqspec bench stream` JSON, key "timeline"): for AR and speculative
    decoding, when each chunk was ready against when playback needs it. A point above its dashed
    line is an underrun (the listener hears a gap)."""
    tl = bench.get("timeline") or {}
    if not tl:
        raise ValueError("stream_timeline: the bench result has no 'timeline' (run `rvqspec bench stream`)")
    fig = go.Figure()
    colors = {"ar": "#1f77b4", "spec": "#d62728"}
    for mode, chunks in tl.items():
        sched = playback_schedule(chunks)
        late = sum(1 for c in sched if c["late_s"] > 1e-9)
        x = [c["start_s"] for c in sched]
        fig.add_trace(go.Scatter(x=x, y=[c["ready_s"] for c in sched], mode="lines+markers",
                                 name=f"{mode}: chunk ready ({late} late)", line=dict(color=colors.get(mode))))
        fig.add_trace(go.Scatter(x=x, y=[c["needed_s"] for c in sched], mode="lines",
                                 name=f"{mode}: playback needs it", line=dict(color=colors.get(mode), dash="dash")))
    sentence = bench.get("timeline_sentence", "")
    fig.update_layout(title=title or f"Streaming timeline of one sentence: {sentence!r}",
                      xaxis=dict(title="position in the audio (s)"),
                      yaxis=dict(title="wall clock since the request (s)"), template="plotly_white")
    return fig


def calls_budget(bench: dict, title: str | None = None):
    """Sequential model calls per second of audio (talker + code predictor, stacked) next to the
    seed's real-time budget, 200 (AR) -> 88 (speculative, 2.47 tokens per call; seed 000 §1): the
    seed's figures, the measured mini streams, and the full-size projections when present."""
    seed = bench.get("seed_calls_per_audio_s", {"ar": 200.0, "spec": 88.0})
    bars = [("seed 000 AR", 12.5, seed["ar"] - 12.5), ("seed 000 spec", 12.5, seed["spec"] - 12.5)]
    for mode in ("ar", "spec"):
        if mode in bench:
            bars.append((f"mini {mode} (measured)", bench[mode]["talker_calls_per_audio_s"],
                         bench[mode]["predictor_calls_per_audio_s"]))
    full = bench.get("full_size") or {}
    if full:
        bars.append(("full-size AR", full["ar"]["talker_calls_per_audio_s"], full["ar"]["predictor_calls_per_audio_s"]))
        for label, row in full.get("spec", {}).items():
            bars.append((f"full-size spec ({label})", row["talker_calls_per_audio_s"],
                         row["predictor_calls_per_audio_s"]))
    names = [b[0] for b in bars]
    fig = go.Figure([go.Bar(x=names, y=[b[1] for b in bars], name="talker"),
                     go.Bar(x=names, y=[b[2] for b in bars], name="code predictor",
                            text=[f"{b[1] + b[2]:.0f}" for b in bars], textposition="outside")])
    fig.update_layout(barmode="stack", template="plotly_white",
                      title=title or "Sequential model calls per second of audio (seed 000: 200 -> 88)",
                      yaxis=dict(title="model calls per second of audio"))
    return fig


def geometry_figure(geometry: dict, title: str | None = None):
    """Per position pair (p, p+1): the cosine of the position means and the held-out R^2 of one shift
    and of an affine map (`rvqspec.measure.geometry`), with 0 marked: where one shift explains less
    than 0, a shared offset cannot carry h_p to where the frozen head of p+1 reads (seed 000 §2.2 (iii))."""
    pairs = list(range(1, len(geometry["shift_r2"]) + 1))
    fig = go.Figure()
    for key, name in (("position_mean_cosine", "cosine of the position means"),
                      ("shift_r2", "R^2, one shift per pair (what an offset can express)"),
                      ("affine_r2_heldout", "R^2, an affine map per pair")):
        fig.add_trace(go.Scatter(x=pairs, y=geometry[key], name=name, mode="lines+markers"))
    fig.add_hline(y=0.0, line=dict(color="black", width=1, dash="dot"))
    fig.update_layout(title=title or f"Can one shift carry h_p to h_(p+1)? ({geometry['frames']} frames, held out)",
                      xaxis=dict(title="position pair (p, p+1)", dtick=1), yaxis=dict(title="cosine / R^2"),
                      template="plotly_white", height=350)
    return fig
