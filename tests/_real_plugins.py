"""Test doubles named on the `rvqspec real` command line (FILE.py:NAME): a deterministic toy codec
in place of the 12 Hz speech tokenizer and the fake text tokenizer of the tiny official model."""
from __future__ import annotations

import numpy as np
import torch

from _tiny_official import CODEBOOK, FakeProcessor


def toy_encode(a: np.ndarray, sr: int) -> torch.Tensor:
    """(ceil(n / hop), 16) codes in [0, CODEBOOK) at 12.5 frames/s, a function of the audio."""
    hop = int(sr / 12.5)
    T = -(-len(a) // hop)
    e = np.array([np.abs(a[t * hop:(t + 1) * hop]).mean() for t in range(T)])  # (T,)
    base = (e * 1e4).astype(np.int64)[:, None] + 7 * np.arange(16)[None, :] + np.arange(T)[:, None]
    return torch.from_numpy(base % CODEBOOK)


def toy_decode(codes: torch.Tensor) -> tuple[np.ndarray, int]:
    return np.repeat(codes.float().numpy().mean(1) / CODEBOOK, 1280).astype(np.float32), 16000


class ToyCodec:
    encode = staticmethod(toy_encode)
    decode = staticmethod(toy_decode)


def text_ids(s: str) -> torch.Tensor:
    return FakeProcessor()(text=s)["input_ids"]


class EchoASR:
    """A 'recognizer' that spells the audio level of each 80 ms as a word: deterministic, so two
    identical waveforms get identical transcripts."""

    def transcribe(self, audios, sampling_rate, language):
        hop = int(sampling_rate * 0.08)
        return [" ".join(f"w{int(abs(a[i:i + hop]).mean() * 40) % 7}" for i in range(0, len(a), hop)) for a in audios]
