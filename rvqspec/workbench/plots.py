"""Plotly figures. `figure4`: seed 000 Figure 4 (speed-up vs sparse tree size) for measured devices."""
from __future__ import annotations

from pathlib import Path


def _get(p, key):
    return (p if isinstance(p, dict) else getattr(p, "raw", {})).get(key)


def figure4(profiles, acceptance: dict | None = None, title: str | None = None):
    """Speed-up vs N per profile (device / backend / dtype) under the acceptance ceiling.

    profiles: device profile dicts (or `DeviceProfile`s) from `rvqspec.measure.profile`; acceptance: tokens
    per call by N for the grey dashed ceiling (seed 000 Figure 4); default: the first profile's."""
    import plotly.graph_objects as go

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
