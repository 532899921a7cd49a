"""8-bit weights for the ONNX graphs (issue 16's full-size whole-frame target on the CPU).

Why: a full-size (0.6B layout) code-predictor pass streams about 320 MB of fp32 weights, so on the
2-core box the fp32 frame is capped by read bandwidth (about 8.6 ms a pass, 129 ms a frame, against
the official fp32 `generate`'s 339 ms: at most 2.6x). 8-bit weights read a quarter of the bytes.
onnxruntime's `MatMulNBits` (block-wise symmetric int8 weights, one fp32 scale per `block_size`
inputs) with `accuracy_level=4` quantizes the activations per block to int8 on the fly and runs
integer dot products; accuracy level 1 keeps fp32 activations but has no fast 8-bit kernel on this
CPU (measured 2.7 s a frame, a slowdown). This is a different precision from Core ML's W8A16 (int8
weights, fp16 activations): the bench reports it under its own name, with the codes' agreement
with the fp32 graph.

The TorchScript exporter reaches a weight used by several unrolled passes through `Identity` nodes;
the quantizer only rewrites a `MatMul` whose weight is an initializer, so those aliases are removed
first (every pass then shares one quantized tensor).
"""
from __future__ import annotations

from pathlib import Path

W8_BLOCK = 32          # inputs per fp32 scale
W8_ACCURACY_LEVEL = 4  # int8 activations per block, integer dot products (module docstring)


def drop_initializer_aliases(model) -> int:
    """Point every input of `model` (an onnx.ModelProto) that reads an `Identity` of an initializer at
    the initializer itself and remove those Identity nodes; returns how many were removed."""
    g = model.graph
    inits = {i.name for i in g.initializer}
    alias = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity" and n.input[0] in inits}
    outputs = {o.name for o in g.output}
    alias = {k: v for k, v in alias.items() if k not in outputs}
    for n in g.node:
        n.input[:] = [alias.get(x, x) for x in n.input]
    keep = [n for n in g.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    del g.node[:]
    g.node.extend(keep)
    return len(alias)


def quantize_w8(src: str | Path, dst: str | Path, block_size: int = W8_BLOCK,
                accuracy_level: int = W8_ACCURACY_LEVEL) -> dict:
    """Write `src` (an fp32 ONNX graph) with its MatMul weights as 8-bit `MatMulNBits` to `dst`
    (a temp file, then renamed). Returns counts for the record."""
    import onnx  # the optional `onnx` extra, imported where it is used as in `rvqspec.export.onnx`
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(src))
    removed = drop_initializer_aliases(model)
    q = MatMulNBitsQuantizer(model, bits=8, block_size=block_size, is_symmetric=True, accuracy_level=accuracy_level)
    q.process()
    out = q.model.model
    ops = [n.op_type for n in out.graph.node]
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".partial")
    onnx.save(out, str(tmp))
    tmp.replace(dst)
    return {"bits": 8, "block_size": block_size, "accuracy_level": accuracy_level, "aliases_removed": removed,
            "matmul_nbits": ops.count("MatMulNBits"), "matmul_fp32": ops.count("MatMul"),
            "initializer_mb": round(sum(i.ByteSize() for i in out.graph.initializer) / 1e6, 1)}
