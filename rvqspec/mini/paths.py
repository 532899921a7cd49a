"""Where the mini world's artifacts live: one place for every path, so steps and readers agree.

`data/mini/` is committed (small: codes without audio, codec, tokenizer, recognizer, model);
`runs/mini/` is ignored by git (the corpus with audio, about 2 GB).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DATA_DIR = Path("data/mini")
DEFAULT_RUNS_DIR = Path("runs/mini")
MANIFEST_FILE = "manifest.json"
READY_FILE = "CORPUS_READY"


@dataclass(frozen=True)
class MiniPaths:
    data: Path = DEFAULT_DATA_DIR
    runs: Path = DEFAULT_RUNS_DIR

    @classmethod
    def at(cls, data: str | os.PathLike = DEFAULT_DATA_DIR, runs: str | os.PathLike = DEFAULT_RUNS_DIR) -> "MiniPaths":
        return cls(Path(data), Path(runs))

    @property
    def corpus(self) -> Path:  # audio-free corpus with codes (committed)
        return self.data / "corpus"

    @property
    def codec(self) -> Path:
        return self.data / "codec"

    @property
    def tokenizer(self) -> Path:  # JSON phoneme vocabulary (goes into the model checkpoint too)
        return self.data / "phoneme_tokenizer.json"

    @property
    def recognizer(self) -> Path:
        return self.data / "recognizer"

    @property
    def model(self) -> Path:
        return self.data / "model"

    @property
    def manifest(self) -> Path:
        return self.data / MANIFEST_FILE

    @property
    def runs_corpus(self) -> Path:  # corpus with audio (not committed)
        return self.runs / "corpus"

    @property
    def ready_flag(self) -> Path:
        return self.runs / READY_FILE
