"""The tree-mask explorer (seed 000 Figure 2): a sparse draft tree, its packed q x q attention mask,
and real decoding rounds with the accepted path marked.

The figure builders are pure functions of a `SparseTree` (and an acceptance table / recorded rounds),
so tests check them without a browser:

* `tree_figure(tree, acc, highlight=node, accepted=path)`: nodes placed by depth, labelled with
  their candidate rank, coloured by expected acceptance (product of acc[d, r] along the path, the
  Medusa score the greedy growth maximises); the highlighted node's ancestors and the accepted path
  are separate traces.
* `mask_figure(tree, highlight=node, accepted=path)`: `tree.buffers().mask` as a heatmap with the
  same token order on both axes; `mask_matrix` gives the coded cells (0 hidden, 1 attends,
  2 the highlighted node's row over its ancestors, 3 the accepted path).
* `rounds_figure(rounds)`: which codes c1..c15 each verify round committed, drafts accepted vs the
  token the verifier emits itself.

`record_rounds` runs the real `SpeculativeCodePredictor` with its callback (seed 000 §2.2: one fused
call per round) and `TreeMaskExplorer` wires everything into ipywidgets + plotly FigureWidgets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from rvqspec.core.defaults import NUM_CODES, K
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree

# mask_matrix cell codes and their colours (grey hidden, blue attends as in Figure 2, orange
# highlighted ancestors, green accepted path)
HIDDEN, ATTENDS, HIGHLIGHT, ACCEPTED = 0, 1, 2, 3
MASK_COLORS = ["#f2f2f2", "#4c78a8", "#f58518", "#54a24b"]


def node_labels(tree: SparseTree) -> list[str]:
    """Axis / hover label of every query index: 'root' then 'd{depth}r{rank}#{index}'."""
    b = tree.buffers()
    return ["root"] + [f"d{int(b.depth[i])}r{int(b.rank[i])}#{i}" for i in range(1, b.q)]


def ancestors(tree: SparseTree, node: int) -> list[int]:
    """Query indices node attends to (its ancestors, the root and itself), from `tree.buffers().mask`."""
    b = tree.buffers()
    if not 0 <= node < b.q:
        raise IndexError(f"node {node} is outside the tree (q = {b.q}, valid 0..{b.q - 1})")
    return b.mask[node].nonzero().flatten().tolist()


def node_expectations(tree: SparseTree, acc: np.ndarray | None) -> np.ndarray:
    """(q,) expected acceptance of each node: product of acc[d, r] along its path (root = 1).

    Their sum is `tree.expected_length(acc)` (Medusa's estimate of tokens per call)."""
    b = tree.buffers()
    out = np.ones(b.q)
    if acc is None:
        return out * np.nan
    acc = np.asarray(acc, dtype=np.float64)
    for i, path in enumerate(b.paths, start=1):
        if len(path) > acc.shape[0] or max(path) >= acc.shape[1]:
            raise ValueError(f"acceptance table of shape {acc.shape} does not cover node path {list(path)}")
        out[i] = float(np.prod([acc[d, r] for d, r in enumerate(path)]))
    return out


def tree_layout(tree: SparseTree) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) per query index: leaves spread left to right in rank order, a parent centred over its
    children, y = -depth (root on top)."""
    b = tree.buffers()
    children: list[list[int]] = [[] for _ in range(b.q)]
    for i in range(1, b.q):
        children[int(b.parent[i])].append(i)
    x = np.zeros(b.q)
    next_leaf = [0.0]

    def place(i: int) -> float:
        if not children[i]:
            x[i] = next_leaf[0]
            next_leaf[0] += 1.0
        else:
            x[i] = float(np.mean([place(c) for c in sorted(children[i], key=lambda c: int(b.rank[c]))]))
        return x[i]

    place(0)
    return x, -b.depth.numpy().astype(float)


def _check_path(tree: SparseTree, accepted: Sequence[int] | None) -> list[int]:
    if accepted is None:
        return []
    q = tree.buffers().q
    bad = [i for i in accepted if not 1 <= int(i) < q]
    if bad:
        raise IndexError(f"accepted path {list(accepted)} holds indices outside 1..{q - 1}")
    return [int(i) for i in accepted]


def tree_figure(tree: SparseTree, acc: np.ndarray | None = None, highlight: int | None = None,
                accepted: Sequence[int] | None = None, tokens: Sequence[int] | None = None,
                title: str | None = None) -> go.Figure:
    """The draft tree: traces 'edges', 'nodes' (q points), 'ancestors' (the highlighted node's
    ancestors incl. root and itself) and 'accepted' (root + accepted path)."""
    b = tree.buffers()
    x, y = tree_layout(tree)
    exp = node_expectations(tree, acc)
    accepted = _check_path(tree, accepted)
    ex, ey = [], []
    for i in range(1, b.q):
        p = int(b.parent[i])
        ex += [x[p], x[i], None]
        ey += [y[p], y[i], None]
    hover = []
    for i in range(b.q):
        tok = f"<br>token {tokens[i]}" if tokens is not None else ""
        e = "n/a" if np.isnan(exp[i]) else f"{exp[i]:.3f}"
        path = "root (committed)" if i == 0 else str(list(b.paths[i - 1]))
        hover.append(f"#{i} {path}<br>depth {int(b.depth[i])}, rank {int(b.rank[i])}<br>expected acceptance {e}{tok}")
    text = ["root"] + [f"r{int(b.rank[i])}" for i in range(1, b.q)]
    marker = dict(size=18, line=dict(width=1, color="#333"))
    if acc is not None:
        marker.update(color=exp, colorscale="Blues", cmin=0.0, cmax=1.0,
                      colorbar=dict(title="E[accept]", thickness=12))
    else:
        marker.update(color="#9ecae1")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#999", width=1.5), name="edges",
                             hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(x=x, y=y, mode="markers+text", text=text, textposition="top center",
                             marker=marker, hovertext=hover, hoverinfo="text", name="nodes",
                             customdata=np.arange(b.q), showlegend=False))
    anc = ancestors(tree, highlight) if highlight is not None else []
    fig.add_trace(go.Scatter(x=x[anc], y=y[anc], mode="markers", name="ancestors",
                             marker=dict(size=26, color="rgba(0,0,0,0)", line=dict(width=3, color=MASK_COLORS[HIGHLIGHT])),
                             hoverinfo="skip", customdata=np.asarray(anc, dtype=int)))
    acc_nodes = [0] + accepted if accepted else []
    fig.add_trace(go.Scatter(x=x[acc_nodes], y=y[acc_nodes], mode="markers+lines", name="accepted path",
                             marker=dict(size=12, color=MASK_COLORS[ACCEPTED]),
                             line=dict(color=MASK_COLORS[ACCEPTED], width=4), hoverinfo="skip",
                             customdata=np.asarray(acc_nodes, dtype=int)))
    n = b.q - 1
    e_len = "" if acc is None else f", expected tokens/call {float(np.nansum(exp)):.2f}"
    fig.update_layout(title=title or f"Sparse draft tree, N = {n} (q = {b.q}){e_len}",
                      xaxis=dict(visible=False), yaxis=dict(title="depth", tickvals=-np.arange(b.max_depth + 1),
                                                            ticktext=[str(d) for d in range(b.max_depth + 1)]),
                      height=360, margin=dict(l=40, r=20, t=50, b=20), legend=dict(orientation="h"))
    return fig


def mask_matrix(tree: SparseTree, highlight: int | None = None, accepted: Sequence[int] | None = None) -> np.ndarray:
    """(q, q) int cell codes of the packed verify mask: HIDDEN / ATTENDS (tree.buffers().mask),
    HIGHLIGHT on the highlighted node's row at its ancestors, ACCEPTED on the accepted path's rows
    at their (accepted) ancestors -- the columns the committed KV cache keeps."""
    b = tree.buffers()
    z = b.mask.numpy().astype(int) * ATTENDS  # (q, q)
    if highlight is not None:
        z[highlight, ancestors(tree, highlight)] = HIGHLIGHT
    path = _check_path(tree, accepted)
    if path:
        keep = [0] + path
        for i in keep:
            cols = [j for j in keep if b.mask[i, j]]
            z[i, cols] = ACCEPTED
    return z


def mask_figure(tree: SparseTree, highlight: int | None = None, accepted: Sequence[int] | None = None,
                title: str | None = None) -> go.Figure:
    """Heatmap of `mask_matrix` (row = query token i, column = key j; row and column share order)."""
    z = mask_matrix(tree, highlight, accepted)
    labels = node_labels(tree)
    q = z.shape[0]
    # discrete colour scale: code k occupies [k/4, (k+1)/4)
    scale = []
    for k, c in enumerate(MASK_COLORS):
        scale += [[k / len(MASK_COLORS), c], [(k + 1) / len(MASK_COLORS), c]]
    names = {HIDDEN: "hidden", ATTENDS: "attends", HIGHLIGHT: "ancestor of selected", ACCEPTED: "accepted path"}
    hover = [[f"query {labels[i]}<br>key {labels[j]}<br>{names[int(z[i, j])]}" for j in range(q)] for i in range(q)]
    fig = go.Figure(go.Heatmap(z=z, zmin=-0.5, zmax=len(MASK_COLORS) - 0.5, colorscale=scale, showscale=False,
                               x=list(range(q)), y=list(range(q)), hovertext=hover, hoverinfo="text",
                               xgap=1, ygap=1, name="mask"))
    tick = dict(tickmode="array", tickvals=list(range(q)), ticktext=labels if q <= 40 else None,
                tickfont=dict(size=8))
    fig.update_layout(title=title or f"Sparse tree attention mask, q = N + 1 = {q}",
                      xaxis=dict(title="key j", side="top", **tick),
                      yaxis=dict(title="query i", autorange="reversed", scaleanchor="x", **tick),
                      height=440, margin=dict(l=60, r=20, t=100, b=20), title_y=0.97)
    return fig


# ---- decoding rounds ---------------------------------------------------------------------------
@dataclass
class Round:
    """One verify round as the speculative decoder's callback reports it (`rvqspec.core.speculative.RoundInfo`),
    tagged with its frame."""

    frame: int
    start: int            # m: the committed code c_m fed at query index 0
    accepted: int         # a: accepted drafted nodes
    path: list[int]       # accepted node indices (tree order), root excluded
    tokens: list[int] = field(default_factory=list)  # codes committed this round: c_{m+1}..


def record_rounds(spec, frames: Sequence[tuple], sampling=None, seed: int = 0) -> list[Round]:
    """Run the speculative decoder over frames [(talker_hidden (1, 1, E), c0 (1, 1)), ...] with an
    explicit generator; every round the callback reports becomes a `Round`."""
    sampling = sampling or Sampling()
    g = torch.Generator().manual_seed(seed)
    rounds: list[Round] = []
    for f, (h, c0) in enumerate(frames):
        spec.generate_frame(h, c0, sampling=sampling, generator=g,
                            callback=lambda r, f=f: rounds.append(Round(frame=f, start=int(r.start),
                                                                        accepted=int(r.accepted),
                                                                        path=[int(i) for i in r.path],
                                                                        tokens=[int(t) for t in r.tokens])))
    return rounds


class RecordingInner:
    """A frame completer for `synthesize_codes(inner=...)` that forwards to a speculative decoder
    and keeps every frame's (talker_hidden, c0) and rounds (the pipeline does not pass callbacks)."""

    def __init__(self, spec, keep_frames: int = 64):
        self.spec = spec
        self.keep_frames = keep_frames
        self.frames: list[tuple] = []
        self.rounds: list[Round] = []
        self._frame = 0

    def generate_frame(self, talker_hidden, c0, sampling=None, generator=None):
        if len(self.frames) < self.keep_frames:
            self.frames.append((talker_hidden.detach().clone(), c0.detach().clone()))
        f = self._frame
        self._frame += 1

        def cb(r):
            self.rounds.append(Round(frame=f, start=int(r.start), accepted=int(r.accepted),
                                     path=[int(i) for i in r.path], tokens=[int(t) for t in r.tokens]))

        kw = {} if sampling is None else {"sampling": sampling}
        return self.spec.generate_frame(talker_hidden, c0, generator=generator, callback=cb, **kw)


def rounds_tokens_per_call(rounds: Sequence[Round]) -> float:
    """Tokens per code-predictor call over the recorded frames: 15 codes per frame over 1 prefill
    call plus one call per round (the decoder's own accounting, rvqspec.core.speculative)."""
    frames = {r.frame for r in rounds}
    if not frames:
        raise ValueError("no rounds recorded")
    return NUM_CODES * len(frames) / (len(frames) + len(rounds))


def rounds_matrix(rounds: Sequence[Round]) -> np.ndarray:
    """(rounds, 15) codes per round over c1..c15: 1 = accepted draft, 2 = emitted by the verifier
    (residual or bonus sample), 0 = not committed in that round."""
    z = np.zeros((len(rounds), NUM_CODES), dtype=int)
    for k, r in enumerate(rounds):
        for i in range(r.accepted):
            if r.start + 1 + i <= NUM_CODES:
                z[k, r.start + i] = 1  # column c-1 for code c = m+1+i
        e = r.start + r.accepted + 1
        if e <= NUM_CODES:
            z[k, e - 1] = 2
    return z


def rounds_figure(rounds: Sequence[Round], current: int | None = None, title: str | None = None) -> go.Figure:
    """Rows = rounds (frame f, start c_m), columns = c1..c15: green accepted drafts, grey the token
    the verifier emits itself; c1 comes from the prefill call of each frame and is never drafted."""
    if len(rounds) == 0:
        raise ValueError("rounds_figure needs at least one recorded round")
    z = rounds_matrix(rounds)
    ylab = [f"f{r.frame} m={r.start}" for r in rounds]
    colors = ["#ffffff", MASK_COLORS[ACCEPTED], "#bab0ac"]
    scale = []
    for k, c in enumerate(colors):
        scale += [[k / 3, c], [(k + 1) / 3, c]]
    hover = []
    for r in rounds:
        row = []
        for c in range(1, NUM_CODES + 1):
            off = c - r.start - 1
            tok = r.tokens[off] if 0 <= off < len(r.tokens) else None
            row.append(f"c{c}" + (f" = {tok}" if tok is not None else ""))
        hover.append(row)
    fig = go.Figure(go.Heatmap(z=z, zmin=-0.5, zmax=2.5, colorscale=scale, showscale=False,
                               x=[f"c{c}" for c in range(1, NUM_CODES + 1)], y=list(range(len(rounds))),
                               hovertext=hover, hoverinfo="text", xgap=1, ygap=1, name="rounds"))
    if current is not None:
        fig.add_hrect(y0=current - 0.5, y1=current + 0.5, line=dict(color="#e45756", width=2))
    tpc = rounds_tokens_per_call(rounds)
    fig.update_layout(title=title or f"Verify rounds: green = accepted drafts, grey = verifier sample "
                                     f"({tpc:.2f} tokens/call)",
                      yaxis=dict(autorange="reversed", tickvals=list(range(len(rounds))), ticktext=ylab,
                                 tickfont=dict(size=8)),
                      height=min(120 + 16 * len(rounds), 600), margin=dict(l=80, r=20, t=50, b=30))
    return fig


# ---- the widget --------------------------------------------------------------------------------
@dataclass
class DrafterChoice:
    """A drafter the explorer offers: the module and its measured acceptance table acc[d, r]."""

    drafter: object
    acc: np.ndarray


class TreeMaskExplorer:
    """ipywidgets front end: choose N and the drafter; click a tree node (or move the node slider)
    to highlight its ancestors in the tree and the mask; step through real decoding rounds.

    `frames`: [(talker_hidden (1, 1, E), c0 (1, 1)), ...] to decode (e.g. `RecordingInner.frames`);
    without a code predictor or frames the round stepper is hidden."""

    def __init__(self, drafters: Mapping[str, DrafterChoice], budgets: Sequence[int] = (4, 8, 16, 32),
                 code_predictor=None, frames: Sequence[tuple] | None = None, max_depth: int = K,
                 sampling=None, seed: int = 0):
        if not drafters:
            raise ValueError("TreeMaskExplorer needs at least one drafter")
        if not budgets or min(budgets) < 1:
            raise ValueError(f"budgets must be positive node counts, got {list(budgets)}")
        self.drafters = dict(drafters)
        self.budgets = [int(n) for n in budgets]
        self.code_predictor = code_predictor
        self.frames = list(frames or [])
        self.max_depth = max_depth
        self.sampling = sampling
        self.seed = seed
        self.rounds: list[Round] = []
        self._build()

    # state ---------------------------------------------------------------------------------------
    def tree(self) -> SparseTree:
        choice = self.drafters[self.w_drafter.value]
        return SparseTree.grow(choice.acc, budget=self.w_n.value, max_depth=self.max_depth)

    def decode(self) -> list[Round]:
        """Decode `frames` with the chosen drafter and tree; returns and keeps the rounds."""
        if self.code_predictor is None or not self.frames:
            self.rounds = []
            return self.rounds
        spec = SpeculativeCodePredictor(self.code_predictor, self.drafters[self.w_drafter.value].drafter, self.tree())
        self.rounds = record_rounds(spec, self.frames, sampling=self.sampling, seed=self.seed)
        return self.rounds

    # widgets -------------------------------------------------------------------------------------
    def _build(self) -> None:
        import ipywidgets as w

        self.w_drafter = w.Dropdown(options=list(self.drafters), description="drafter")
        self.w_n = w.Dropdown(options=self.budgets, value=self.budgets[min(1, len(self.budgets) - 1)], description="N")
        self.w_node = w.IntSlider(min=0, max=1, value=0, description="node")
        self.w_round = w.IntSlider(min=0, max=0, value=0, description="round")
        self.w_info = w.HTML()
        self.fig_tree = go.FigureWidget()
        self.fig_mask = go.FigureWidget()
        self.fig_rounds = go.FigureWidget()
        self.w_drafter.observe(lambda _: self._on_tree(), names="value")
        self.w_n.observe(lambda _: self._on_tree(), names="value")
        self.w_node.observe(lambda _: self._redraw(), names="value")
        self.w_round.observe(lambda _: self._redraw(), names="value")
        self._on_tree()
        decodes = self.code_predictor is not None and bool(self.frames)
        self.widget = w.VBox([w.HBox([self.w_drafter, self.w_n, self.w_node] + ([self.w_round] if decodes else [])),
                              self.w_info, w.HBox([self.fig_tree, self.fig_mask])]
                             + ([self.fig_rounds] if decodes else []))

    def _on_tree(self) -> None:
        tree = self.tree()
        self.w_node.max = len(tree)
        self.w_node.value = min(self.w_node.value, len(tree))
        self.decode()
        self.w_round.max = max(len(self.rounds) - 1, 0)
        self.w_round.value = 0
        self._redraw()

    def _set(self, target: go.FigureWidget, fig: go.Figure) -> None:
        with target.batch_update():
            target.data = []
            target.layout = fig.layout
            for tr in fig.data:
                target.add_trace(tr)
            target.layout.shapes = fig.layout.shapes

    def _redraw(self) -> None:
        tree = self.tree()
        acc = self.drafters[self.w_drafter.value].acc
        node = self.w_node.value
        rnd = self.rounds[self.w_round.value] if self.rounds else None
        path = rnd.path if rnd else None
        self._set(self.fig_tree, tree_figure(tree, acc, highlight=node, accepted=path))
        self._set(self.fig_mask, mask_figure(tree, highlight=node, accepted=path))
        if self.rounds:
            self._set(self.fig_rounds, rounds_figure(self.rounds, current=self.w_round.value))
        # clicking a node in the tree selects it (the scatter trace named 'nodes' is data[1])
        self.fig_tree.data[1].on_click(self._on_click)
        info = f"N = {len(tree)}, expected tokens/call {tree.expected_length(acc):.2f}"
        if rnd:
            info += (f" | round {self.w_round.value}: frame {rnd.frame}, committed c{rnd.start}, "
                     f"accepted {rnd.accepted} drafts {rnd.path}; decoded tokens/call "
                     f"{rounds_tokens_per_call(self.rounds):.2f}")
        self.w_info.value = info

    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            self.w_node.value = int(points.point_inds[0])

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)
