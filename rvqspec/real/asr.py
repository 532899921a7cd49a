"""Speech recognizers behind one interface, for WER/CER of synthesized speech.

`Recognizer.transcribe(audios, sampling_rate, language) -> one string per input` is all that the
evaluation code (SPADE's WER-based layer importance, seed 001; WER parity, seed 000 section 3.2)
needs. Two implementations:

* `MiniCTCRecognizer`: the mini world's own CTC model (`rvqspec.mini.recognizer`), loaded from an
  artifact directory such as `data/mini/recognizer/` (the default).
* `TransformersASR`: any local Hugging Face speech-recognition checkpoint (Whisper, wav2vec2 CTC,
  ...) through `transformers.pipeline`, strictly from a local path: this project has no hub access.
  The seed measured with whisper-large-v3-turbo (ja, zh) and parakeet-v3 (others).

`load_recognizer(spec)` picks the implementation from what `spec` points to.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.signal import resample_poly

from rvqspec.mini.recognizer import is_recognizer_dir
from rvqspec.mini.recognizer import load_recognizer as load_ctc

# The committed mini recognizer, next to the package in the repository checkout.
DEFAULT_RECOGNIZER = Path(__file__).resolve().parents[2] / "data" / "mini" / "recognizer"


@runtime_checkable
class Recognizer(Protocol):
    def transcribe(self, audios: Sequence[np.ndarray], sampling_rate: int, language: str) -> list[str]:
        """Mono float32 waveforms at `sampling_rate` in `language` -> one transcript per waveform."""
        ...


def resample(audio: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Polyphase resampling (scipy); mono float32 in and out."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"expected mono audio of shape (num_samples,), got shape {audio.shape}")
    if from_rate <= 0 or to_rate <= 0:
        raise ValueError(f"sampling rates must be positive, got {from_rate} -> {to_rate}")
    if from_rate == to_rate:
        return audio

    g = math.gcd(from_rate, to_rate)
    return resample_poly(audio, to_rate // g, from_rate // g).astype(np.float32)


class MiniCTCRecognizer:
    """The mini world's character CTC recognizer (see `rvqspec.mini.recognizer`)."""

    def __init__(self, directory: str | Path = DEFAULT_RECOGNIZER, device: str = "cpu", decoding: str = "auto"):
        self.directory = Path(directory)
        self.model = load_ctc(self.directory, device=device, decoding=decoding)
        self.sampling_rate = self.model.config.sample_rate

    def decoding_for(self, language: str) -> str:
        """"lexicon" or "greedy": how the text of `language` is spelled (see `rvqspec.mini.lexicon`)."""
        return self.model.decoding_for(language)

    def transcribe(self, audios: Sequence[np.ndarray], sampling_rate: int, language: str) -> list[str]:
        audios = [resample(a, sampling_rate, self.sampling_rate) for a in audios]
        return self.model.transcribe(audios, language)

    @property
    def has_phonemes(self) -> bool:
        """True when the artifact has a phoneme head (PER can be measured)."""
        return self.model.has_phonemes

    def transcribe_both(self, audios: Sequence[np.ndarray], sampling_rate: int,
                        language: str) -> tuple[list[str], list[list[str]]]:
        """(texts, espeak-ng phoneme lists) from one pass of the recognizer."""
        audios = [resample(a, sampling_rate, self.sampling_rate) for a in audios]
        return self.model.transcribe_both(audios, language)


class TransformersASR:
    """A local transformers speech-recognition checkpoint (`save_pretrained` directory)."""

    def __init__(self, model_path: str | Path, device: str = "cpu", batch_size: int = 8):
        path = Path(model_path)
        if not (path.is_dir() and (path / "config.json").is_file()):
            raise FileNotFoundError(
                f"TransformersASR: {model_path} is not a local transformers model directory "
                "(no config.json); this project cannot download from the hub, pass a saved checkpoint"
            )
        import transformers

        self.path = path
        self.batch_size = batch_size
        self.pipe = transformers.pipeline(
            "automatic-speech-recognition",
            model=str(path),
            device=device,
            model_kwargs={"local_files_only": True},
        )
        self.model_type = self.pipe.model.config.model_type
        self.sampling_rate = int(self.pipe.feature_extractor.sampling_rate)

    def generate_kwargs(self, language: str) -> dict:
        """Whisper must be told the language (else it guesses); CTC models take no kwargs."""
        if self.model_type == "whisper":
            return {"language": language, "task": "transcribe"}
        return {}

    def prepare(self, audios: Sequence[np.ndarray], sampling_rate: int) -> list[np.ndarray]:
        # The pipeline resamples only through torchaudio (not installed here): resample ourselves.
        return [resample(a, sampling_rate, self.sampling_rate) for a in audios]

    def transcribe(self, audios: Sequence[np.ndarray], sampling_rate: int, language: str) -> list[str]:
        inputs = self.prepare(audios, sampling_rate)
        if not inputs:
            return []
        kwargs = {}
        gen = self.generate_kwargs(language)
        if gen:
            kwargs["generate_kwargs"] = gen
        outputs = self.pipe(inputs, batch_size=self.batch_size, **kwargs)
        if isinstance(outputs, dict):  # a single input comes back unwrapped
            outputs = [outputs]
        texts = [o["text"].strip() for o in outputs]
        if len(texts) != len(inputs):
            raise RuntimeError(f"TransformersASR: {len(inputs)} inputs but {len(texts)} transcripts")
        return texts


def load_recognizer(spec: str | Path | None = None, device: str = "cpu", batch_size: int = 8,
                    decoding: str = "auto") -> Recognizer:
    """A mini recognizer directory (default: the committed one) or a local transformers model path.
    `decoding` ("auto", "lexicon", "greedy") is the mini recognizer's text decoding."""
    path = Path(spec) if spec is not None else DEFAULT_RECOGNIZER
    if is_recognizer_dir(path):
        return MiniCTCRecognizer(path, device=device, decoding=decoding)
    if path.is_dir() and (path / "config.json").is_file():
        return TransformersASR(path, device=device, batch_size=batch_size)
    raise FileNotFoundError(
        f"no recognizer at {path}: expected a mini recognizer directory (recognizer.json, vocab.json, "
        "model.safetensors; train one with `rvqspec asr train`) or a local transformers model "
        "directory (config.json)"
    )
