"""The whole speculative frame as ONE onnxruntime call: the whole-round graph (`SpecRoundGraph`) as the
body of an ONNX ``Loop`` that runs rounds until c1..c15 are out (seed 000 §2.2-2.3; issue 16, item 2).

Why: onnxruntime on the 2-core CPU box pays per executed node (about 3.4 us), not per FLOP, and
driving rounds one call at a time adds host work per round (feeds, state hand-back; the loop frame
takes 0.89x the time of the same rounds one call at a time, docs/measurements/streaming/graph_levers.json).
A round of the N = 4 tree executes 429 nodes against about 261 for one AR pass
(docs/measurements/streaming/graph_levers.json), so at about 2.1 tokens per call the round-by-round
loop costs nearly as much as the whole AR frame graph (16 passes in one call). The loop keeps the state in
the graph and stops as soon as 15 codes are out, so a frame executes only the rounds it needs, with
no host work between them.

Graph (`spec_frame_model`):

    inputs   talker_hidden (1, E), c0 (1,) int32, noise (R, 1, q, V) (row r: round r's Gumbel
             noise; zeros = greedy), temperature (1,), top_k (1,) int32, top_p_tail (1,)
    outputs  codes (1, 15) int32, cache_lengths (rounds, 1) int32 (the cache length after each round:
             round r accepted cache_lengths[r] - cache_lengths[r-1] - 1 drafted nodes)

Loop-carried: the round graph's state (tokens, cache length, K/V cache), a code buffer of 15 + D + 1
slots (each round scatters its D + 1 code slots at the number emitted so far; slots past its count
are overwritten by the next round, and the last round's spill lands past slot 15), and the number
emitted. R = 15 rounds at most (each emits at least one code). The round body is the exported
`SpecRoundGraph` itself, node for node, so the acceptance rule is the one of
`rvqspec.core.verify.accept`; given the same per-round noise rows it returns the round-by-round
host loop's codes (tests/test_spec_frame.py). With a generator it draws all R noise rows per frame
up front, so its draws (not its law) differ from the round-by-round backends.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpecStats
from rvqspec.core.verify import check_noise
from rvqspec.export.host import TimedCall, _frame_inputs, _Sampler, frame_rows, sampling_feeds
from rvqspec.export.onnx import OnnxGraph, export_module
from rvqspec.export.wrappers import ExportError, SpecRoundGraph

SPEC_FRAME_FILE = "code_predictor_spec_frame.onnx"
_STATE = ("tokens", "cache_length", "key_cache", "value_cache")  # round graph state, in and next_ out
_ROUND_OUT = ("codes", "count", "next_tokens", "next_cache_length", "next_key_cache", "next_value_cache")


def _vi(name: str, elem: int, shape):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, list(shape))


def spec_frame_model(round_model, graph: SpecRoundGraph):
    """Wrap the exported round graph (an onnx.ModelProto) of `graph` in a Loop over rounds (module
    docstring). onnx is the optional `onnx` extra, imported here as `rvqspec.export.onnx` does."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    G = round_model.graph
    names = [i.name for i in G.input]
    if names[:4] != list(_STATE) or [o.name for o in G.output] != list(_ROUND_OUT):
        raise ExportError(f"round graph I/O {names} -> {[o.name for o in G.output]} is not SpecRoundGraph's")
    q, V, E, n, D = graph.q, graph.V, graph.E, graph.n, graph.D
    kv = graph.spec().inputs["key_cache"][0]  # (L, n_kv, S, hd)
    R = n  # rounds at most: each emits >= 1 code
    i32, i64, f32 = TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT
    # ---- the body: the round's nodes, its state and noise renamed to the loop's values
    rename = {"tokens": "b_tokens", "cache_length": "b_cache_length", "key_cache": "b_key_cache",
              "value_cache": "b_value_cache", "noise": "b_noise", **{o: f"r_{o}" for o in _ROUND_OUT}}
    body_nodes = [helper.make_node("Gather", ["noise", "iter"], ["b_noise"], axis=0)]  # (1, q, V) of round iter
    for node in G.node:
        nn_ = onnx.NodeProto()
        nn_.CopyFrom(node)
        nn_.input[:] = [rename.get(x, x) for x in node.input]
        nn_.output[:] = [rename.get(x, x) for x in node.output]
        body_nodes.append(nn_)
    consts = [numpy_helper.from_array(np.arange(D + 1, dtype=np.int64), "k_slots"),
              numpy_helper.from_array(np.array([n], np.int32), "k_n")]
    body_nodes += [
        helper.make_node("Cast", ["b_emitted"], ["b_emitted64"], to=i64),
        helper.make_node("Add", ["b_emitted64", "k_slots"], ["b_idx1"]),  # (D+1,) where this round's codes go
        helper.make_node("Unsqueeze", ["b_idx1", "k_axis0"], ["b_idx"]),  # (1, D+1)
        helper.make_node("ScatterElements", ["b_buf", "b_idx", "r_codes"], ["o_buf"], axis=1),
        helper.make_node("Add", ["b_emitted", "r_count"], ["o_emitted"]),
        helper.make_node("Less", ["o_emitted", "k_n"], ["o_more"]),  # (1,) bool
        helper.make_node("Squeeze", ["o_more", "k_axis0"], ["o_cond"]),  # () bool
        helper.make_node("Identity", ["r_next_cache_length"], ["s_cache_length"]),
    ]
    body = helper.make_graph(
        body_nodes, "spec_round",
        inputs=[_vi("iter", i64, []), _vi("cond", TensorProto.BOOL, []), _vi("b_tokens", i32, (1, q)),
                _vi("b_cache_length", i32, (1,)), _vi("b_key_cache", f32, kv), _vi("b_value_cache", f32, kv),
                _vi("b_buf", i32, (1, n + D + 1)), _vi("b_emitted", i32, (1,))],
        outputs=[_vi("o_cond", TensorProto.BOOL, []), _vi("r_next_tokens", i32, (1, q)),
                 _vi("r_next_cache_length", i32, (1,)), _vi("r_next_key_cache", f32, kv),
                 _vi("r_next_value_cache", f32, kv), _vi("o_buf", i32, (1, n + D + 1)),
                 _vi("o_emitted", i32, (1,)), _vi("s_cache_length", i32, (1,))],
        initializer=consts)
    # ---- the outer graph: initial state, the loop, the first 15 codes
    init = [numpy_helper.from_array(np.zeros(kv, np.float32), "kv0"),
            numpy_helper.from_array(np.zeros((1, n + D + 1), np.int32), "buf0"),
            numpy_helper.from_array(np.zeros(1, np.int32), "zero1"),
            numpy_helper.from_array(np.zeros(max(q - 2, 0), np.int32), "zeros_q2"),
            numpy_helper.from_array(np.array(R, np.int64), "trip"),
            numpy_helper.from_array(np.array(True), "cond0"),
            numpy_helper.from_array(np.array([0], np.int64), "k_axis0"),
            numpy_helper.from_array(np.array([0], np.int64), "k_start"),
            numpy_helper.from_array(np.array([n], np.int64), "k_end"),
            numpy_helper.from_array(np.array([1, q], np.int64), "k_tok_shape")]
    init += list(G.initializer)  # the round's weights, read by the body from the outer scope
    outer_nodes = [
        helper.make_node("Concat", ["zero1", "c0", "zeros_q2"], ["tok_flat"], axis=0),  # (q,) [any, c0, any...]
        helper.make_node("Reshape", ["tok_flat", "k_tok_shape"], ["tokens0"]),
        helper.make_node("Loop", ["trip", "cond0", "tokens0", "zero1", "kv0", "kv0", "buf0", "zero1"],
                         ["f_tokens", "f_cache_length", "f_key_cache", "f_value_cache", "f_buf", "f_emitted",
                          "cache_lengths"], body=body),
        helper.make_node("Slice", ["f_buf", "k_start", "k_end", "k_axis1"], ["codes"]),
    ]
    init.append(numpy_helper.from_array(np.array([1], np.int64), "k_axis1"))
    samp = {i.name: i for i in G.input if i.name in ("talker_hidden", "temperature", "top_k", "top_p_tail")}
    outer = helper.make_graph(
        outer_nodes, "spec_frame",
        inputs=[samp["talker_hidden"], _vi("c0", i32, (1,)), _vi("noise", f32, (R, 1, q, V)),
                samp["temperature"], samp["top_k"], samp["top_p_tail"]],
        outputs=[_vi("codes", i32, (1, n)), _vi("cache_lengths", i32, ("rounds", 1))],
        initializer=init)
    if samp["talker_hidden"].type.tensor_type.shape.dim[1].dim_value != E:
        raise ExportError(f"round graph talker_hidden is not (1, {E})")
    model = helper.make_model(outer, opset_imports=list(round_model.opset_import))
    model.ir_version = round_model.ir_version
    onnx.checker.check_model(model)
    return model


def export_spec_frame(graph: SpecRoundGraph, path: str | Path) -> Path:
    """Export `graph` (the round) and write the loop model at `path` (a temp file, then renamed)."""
    import onnx

    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="rvqspec-round-") as d:
        rnd = Path(d) / "round.onnx"
        export_module(graph, rnd)
        model = spec_frame_model(onnx.load(str(rnd)), graph)
    tmp = path.with_name(path.name + ".partial")
    onnx.save(model, str(tmp))
    tmp.replace(path)
    return path


class SpecFrameInner:
    """`generate_frame` over the loop model: one onnxruntime call per frame (module docstring)."""

    speculative = True

    def __init__(self, graph: SpecRoundGraph, path: str | Path, threads: int = 1):
        self.graph, self.backend = graph, "onnx-loop"
        self.call = TimedCall(OnnxGraph(path, threads=threads))
        self.rounds = graph.n  # noise rows per frame

    def frame(self, talker_hidden: torch.Tensor, c0: int, sampling: Sampling = Sampling(),
              generator: torch.Generator | None = None, noise: torch.Tensor | None = None) -> tuple[list[int], list[int]]:
        """c1..c15 and the accepted drafted nodes of each round after round 0. noise (R, 1, q, V):
        given (checked) or drawn from `generator` (zeros when greedy)."""
        g = self.graph
        shape = (self.rounds, 1, g.q, g.V)
        if noise is None:
            noise = _Sampler(sampling, generator).noise(*shape)
        else:
            check_noise(noise, shape)
        out = self.call({"talker_hidden": _frame_inputs(talker_hidden, g.E), "c0": np.array([int(c0)], np.int32),
                         "noise": noise.float().numpy(), **sampling_feeds(sampling)})
        cl = [0] + out["cache_lengths"][:, 0].tolist()
        accepted = [b - a - 1 for a, b in zip(cl[1:], cl[2:])]  # rounds after round 0
        return out["codes"][0].tolist(), accepted

    def generate_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = Sampling(),
                       generator: torch.Generator | None = None):
        rows, stats = [], SpecStats()
        for b in range(frame_rows(talker_hidden, c0)):
            codes, accepted = self.frame(talker_hidden[b:b + 1], int(c0[b, 0]), sampling, generator)
            stats.merge(SpecStats(calls=len(accepted) + 1, accepted_lengths=accepted, frames=1))
            rows.append(codes)
        return torch.tensor(rows, dtype=torch.long, device=talker_hidden.device), stats
