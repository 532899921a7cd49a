"""Frames of the mini world for the measurement commands: corpus rows run through the talker."""
from __future__ import annotations

from pathlib import Path

import torch
from datasets import load_from_disk

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.frame_loop import teacher_forced_frames
from rvqspec.mini.pipeline import default_data_dir


def world_of(model_dir=None) -> Path:
    """The mini-world directory whose corpus a model reads: the model's own world when it sits in one
    (`<world>/model` beside `<world>/corpus`, as `rvqspec mini build --out-dir <world>` lays it out),
    else the committed data/mini (a SPADE student or a gate's model elsewhere, trained on its codes)."""
    if model_dir is not None:
        world = Path(model_dir).parent
        if (world / "corpus" / "dataset_dict.json").is_file():
            return world
    return default_data_dir()


def mini_frames(model_dir=None, split: str = "eval", language: str | None = None, max_utterances: int | None = None,
                data_dir=None):
    """The default frames function of the spec CLI: mini-world corpus rows of one split (and language),
    run through the teacher-forced talker (`rvqspec.core.frame_loop.teacher_forced_frames`) -> yields
    (talker_hidden (T, E), codes (T, 16)) per utterance. Needs the corpus `codes` column. The corpus
    is `data_dir`'s, by default the model's own world (`world_of`)."""
    data_dir = Path(data_dir) if data_dir else world_of(model_dir)
    corpus = load_from_disk(str(data_dir / "corpus"))
    if split not in corpus:
        raise KeyError(f"{data_dir / 'corpus'}: no split {split!r} (has {sorted(corpus)})")
    ds = corpus[split]
    if "codes" not in ds.column_names:
        raise KeyError(f"{data_dir / 'corpus'}[{split}]: no 'codes' column (columns: {ds.column_names}); "
                       "build the mini world's codes first")
    idx = [i for i, lang in enumerate(ds["language"]) if language is None or lang == language]
    idx = idx[:max_utterances] if max_utterances else idx
    model = load_qwen3_tts(Path(model_dir) if model_dir else data_dir / "model")
    for r in ds.select(idx).select_columns(["phoneme_frames", "codes"]):
        ids = torch.as_tensor(r["phoneme_frames"], dtype=torch.long)  # (T,)
        codes = torch.as_tensor(r["codes"], dtype=torch.long)  # (T, 16)
        yield teacher_forced_frames(model.talker, model.code_predictor, ids, codes)
