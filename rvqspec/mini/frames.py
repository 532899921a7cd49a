"""Frames of the mini world for the measurement commands: corpus rows run through the talker."""
from __future__ import annotations

from pathlib import Path

import torch
from datasets import load_from_disk

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.frame_loop import teacher_forced_frames
from rvqspec.mini.pipeline import default_data_dir


def mini_frames(model_dir=None, split: str = "eval", language: str | None = None, max_utterances: int | None = None,
                data_dir=None):
    """The default frames function of the spec CLI: mini-world corpus rows of one split (and language),
    run through the teacher-forced talker (`rvqspec.core.frame_loop.teacher_forced_frames`) -> yields
    (talker_hidden (T, E), codes (T, 16)) per utterance. Needs the corpus `codes` column."""
    data_dir = Path(data_dir) if data_dir else default_data_dir()
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
