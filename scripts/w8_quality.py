"""What 8-bit weights with int8 dot products (`rvqspec.export.quantize.quantize_w8`, the variant
`rvqspec bench ar --onnx-frame w8` times at full size) do to the trained mini predictor: the whole
AR frame as one onnxruntime call, fp32 against w8.

* greedy codes on the talker states of real English sentences (seed-0 AR decoding): frames whose 15
  codes agree, and codes that agree;
* free-running intelligibility on the hand-written English test set (data/testset/en.txt), the
  deployed sampling, the same seeds for both: PER / CER / WER and the paired bootstrap 95% interval
  of w8 - fp32 over clips (`rvqspec.measure.stats.paired_rate_difference`).

    python scripts/w8_quality.py --seeds 2 --out docs/measurements/w8_mini_quality.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.sampling import Sampling
from rvqspec.export.backends import GraphInner
from rvqspec.export.host import graph_ar_frame
from rvqspec.export.onnx import OnnxGraph, export_module
from rvqspec.export.quantize import quantize_w8
from rvqspec.export.wrappers import frame_graph
from rvqspec.measure.stats import paired_rate_difference
from rvqspec.mini.bench_stream import SENTENCES
from rvqspec.mini.pipeline import MiniTTS, intelligibility
from rvqspec.real.asr import load_recognizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_levers import talker_states  # noqa: E402  (the same states as the levers' timings)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tts = MiniTTS.load()
    cp = tts.code_predictor
    fg = frame_graph(cp)
    res: dict = {"threads": 1}
    with tempfile.TemporaryDirectory() as d:
        fp32, w8 = Path(d) / "fp32.onnx", Path(d) / "w8.onnx"
        export_module(fg, fp32)
        res["quantize"] = quantize_w8(fp32, w8)
        calls = {"fp32": OnnxGraph(fp32), "w8": OnnxGraph(w8)}
        states = talker_states(tts, [t for t, _ in SENTENCES])
        same_frames = same_codes = 0
        for h, c0 in states:
            a = graph_ar_frame(calls["fp32"], fg, h, int(c0), Sampling.greedy())
            b = graph_ar_frame(calls["w8"], fg, h, int(c0), Sampling.greedy())
            same_frames += a == b
            same_codes += sum(x == y for x, y in zip(a, b))
        res["greedy"] = {"frames": len(states), "frames_agree": same_frames, "codes_agree": same_codes,
                         "codes": 15 * len(states)}
        texts = [ln.strip() for ln in Path("data/testset/en.txt").read_text(encoding="utf-8").splitlines() if ln.strip()]
        rec = load_recognizer()
        runs = {}
        for v, call in calls.items():
            inner = GraphInner(fg, call, "onnx")
            runs[v] = intelligibility(tts, texts, "en", rec, seeds=range(args.seeds), sampling=Sampling(), inner=inner)
        res["testset_en"] = {v: {k: r[k] for k in ("n", "per", "cer", "wer")} for v, r in runs.items()}
        res["testset_en"]["w8_minus_fp32"] = paired_rate_difference(runs["fp32"]["clips"], runs["w8"]["clips"], 2000, 0)
    write_json_atomic(args.out, res, indent=2)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
