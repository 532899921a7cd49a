"""Incremental mini-codec decoding against the whole-utterance decode (rvqspec.mini.stream): per
sentence, the log-mel distance (dB RMS, `reference_log_mel_db`) of the concatenated stream to the
whole decode, for a few Griffin-Lim iteration counts and chunk sizes, next to the floor (two whole
decodes that differ only in their initial phase) and the stated tolerance 1.5 x floor + 0.5 dB.

    PYTHONPATH=$PWD python scripts/stream_tolerance.py --out data/mini/bench/stream_tolerance.json
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys

import numpy as np
import torch

from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.mini.bench_stream import SENTENCES
from rvqspec.mini.codec import reference_log_mel_db
from rvqspec.mini.pipeline import MiniTTS
from rvqspec.mini.stream import TOLERANCE_DB, TOLERANCE_FACTOR, StreamConfig, StreamingDecoder


def distance(a: np.ndarray, ref: np.ndarray) -> float:
    r = reference_log_mel_db(ref)
    return float((reference_log_mel_db(a, floor_db=r.min().item()) - r).pow(2).mean().sqrt())


def stream(codec, codes, cfg: StreamConfig) -> np.ndarray:
    dec = StreamingDecoder(codec, cfg)
    outs = [dec.push(codes[i:i + cfg.chunk_frames]) for i in range(0, len(codes), cfg.chunk_frames)]
    return np.concatenate(outs + [dec.flush()])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tts = MiniTTS.load()
    other = copy.copy(tts.codec)
    other.config = dataclasses.replace(tts.codec.config, seed=tts.codec.config.seed + 1)
    settings = [dict(chunk_frames=4, griffin_lim_iters=16), dict(chunk_frames=4, griffin_lim_iters=48),
                dict(chunk_frames=1, griffin_lim_iters=16), dict(chunk_frames=8, griffin_lim_iters=16)]
    rows = []
    for text, lang in SENTENCES:
        codes = tts.synthesize(text, lang, seed=args.seed, decode=False).codes
        whole = tts.codec.decode(codes, peak_limit=False)
        floor = distance(other.decode(codes, peak_limit=False), whole)
        row = {"text": text, "lang": lang, "frames": len(codes), "floor_db": round(floor, 3),
               "tolerance_db": round(TOLERANCE_FACTOR * floor + TOLERANCE_DB, 3), "stream_db": {}}
        for s in settings:
            d = distance(stream(tts.codec, codes, StreamConfig(peak_limit=False, **s)), whole)
            row["stream_db"][f"chunk{s['chunk_frames']}_gl{s['griffin_lim_iters']}"] = round(d, 3)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    res = {"command": "PYTHONPATH=$PWD python scripts/stream_tolerance.py --out data/mini/bench/stream_tolerance.json",
           "tolerance": f"{TOLERANCE_FACTOR} x floor + {TOLERANCE_DB} dB", "seed": args.seed, "sentences": rows,
           "all_within": all(v <= r["tolerance_db"] for r in rows for v in r["stream_db"].values())}
    if args.out:
        write_json_atomic(args.out, res, indent=2)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
