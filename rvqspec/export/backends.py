"""Inner loops (code predictor frame completers) on every backend, behind one `generate_frame`.

`make_inner(backend, code_predictor, drafter, tree)`:

* ``eager``: `SpeculativeCodePredictor` (speculative) or None (the AR `MultiCodeDecoder` itself);
* ``compiled``: the whole round / whole frame graph (`rvqspec.export.wrappers.SpecRoundGraph`,
  `FrameGraph`) under `torch.compile` (Inductor, static shapes, CPU here; CUDA where present);
* ``onnx``: the same two graphs exported to ONNX and run by onnxruntime;
* ``onnx-loop``: the AR frame graph of ``onnx``, and the whole speculative frame in one call (the
  round graph as the body of an ONNX Loop, `rvqspec.export.spec_frame`).

Sampling with the same generator gives the same codes on all three in speculative mode: the eager
decoder and the graphs draw the same Gumbel noise blocks in the same order and decide with the one
rule `rvqspec.core.verify.accept` (up to float rounding; tests/test_graphs.py). ``onnx-loop`` draws
all 15 rounds' noise blocks per frame up front: given the same blocks it returns the codes of the
round-by-round graph (tests/test_spec_frame.py), with a generator the same law, other draws. In AR mode the
eager and compiled-stack loops draw with `torch.multinomial` like the official `generate`, while the
frame graph uses Gumbel-max: the same law, other draws.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from rvqspec.core.compiled import CompileConfig
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpecStats, SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.export.host import Call, TimedCall, frame_rows, graph_ar_frame, graph_spec_frame, module_call
from rvqspec.export.onnx import OnnxGraph, export_module
from rvqspec.export.spec_frame import SPEC_FRAME_FILE, SpecFrameInner, export_spec_frame
from rvqspec.export.wrappers import ExportError, FrameGraph, SpecRoundGraph, as_float32, frame_graph, spec_round_graph

BACKENDS = ("eager", "compiled", "onnx", "onnx-loop")
ROUND_BACKENDS = BACKENDS[:3]  # the speculative frame round by round: the same noise blocks, the same codes


class GraphInner:
    """`generate_frame` over a whole-round graph (speculative) or a whole-frame graph (AR): one
    graph call per round / per frame; the host only feeds state and noise. Rows run one by one."""

    def __init__(self, graph: FrameGraph | SpecRoundGraph, call: Call, backend: str):
        self.graph, self.call, self.backend = graph, TimedCall(call), backend
        self.speculative = isinstance(graph, SpecRoundGraph)

    def generate_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = Sampling(),
                       generator: torch.Generator | None = None):
        rows, stats = [], SpecStats()
        for b in range(frame_rows(talker_hidden, c0)):
            if self.speculative:
                accepted: list[int] = []
                codes, calls = graph_spec_frame(self.call, self.graph, talker_hidden[b:b + 1], int(c0[b, 0]),
                                                sampling, generator, accepted=accepted)
                stats.merge(SpecStats(calls=calls, accepted_lengths=accepted, frames=1))
            else:
                codes = graph_ar_frame(self.call, self.graph, talker_hidden[b:b + 1], int(c0[b, 0]), sampling,
                                       generator)
                stats.merge(SpecStats(calls=1, frames=1))
            rows.append(codes)
        return torch.tensor(rows, dtype=torch.long, device=talker_hidden.device), stats


def compiled_call(graph, config: CompileConfig = CompileConfig()) -> Call:
    """`graph` under torch.compile (static shapes, full graph), every call under the Inductor options
    of `config` (frozen, prepacked weights: `rvqspec.core.compiled`). Compiles on the first call."""
    import torch._inductor.config as inductor_config

    fn = torch.compile(graph, fullgraph=True, dynamic=False)

    def run(*args):
        with inductor_config.patch(config.inductor_options()):
            return fn(*args)

    return module_call(graph, run)


def make_inner(backend: str, code_predictor, drafter=None, tree: SparseTree | None = None,
               workdir: str | Path | None = None, threads: int = 1, compile_config: CompileConfig = CompileConfig()):
    """The inner loop for `backend` (module docstring); speculative when `tree` is given. The onnx
    backend exports into `workdir` (default: a fresh temporary directory)."""
    if backend not in BACKENDS:
        raise ExportError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "eager":
        return None if tree is None else SpeculativeCodePredictor(code_predictor, drafter, tree)
    cp = as_float32(code_predictor.eval())
    # the loop reads all 15 heads in one matmul each round instead of gathering a window of head
    # weights (measured on the mini predictor: 4% faster frames inside the loop)
    heads = "all" if backend == "onnx-loop" else "window"
    graph = frame_graph(cp) if tree is None else spec_round_graph(cp, tree, drafter, heads=heads)
    if backend == "compiled":
        return GraphInner(graph, compiled_call(graph, compile_config), backend)

    out = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="rvqspec-onnx-"))
    out.mkdir(parents=True, exist_ok=True)
    if backend == "onnx-loop" and tree is not None:
        return SpecFrameInner(graph, export_spec_frame(graph, out / SPEC_FRAME_FILE), threads=threads)
    path = out / ("code_predictor_round.onnx" if tree is not None else "code_predictor_frame.onnx")
    export_module(graph, path)
    return GraphInner(graph, OnnxGraph(path, threads=threads), backend)
