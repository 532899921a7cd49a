"""Frame-aligned phoneme tokens: the mini talker's text input, one token per 80 ms codec frame.

Qwen3-TTS feeds its talker one text token per frame. The mini world gets frame-aligned phonemes
for free from espeak-ng's own timing (phoneme events, `rvqspec.mini.speech`).

Token design (chosen after measuring, see below):
- Phonemes are LANGUAGE-TAGGED (`en:k`, `ru:k`): espeak mnemonics are per-language tables, and the
  tag tells the talker the language (Qwen3-TTS gets a language id).
- An 80 ms frame often holds two phonemes: espeak speaks 10.6 (en) to 15.3 (ru) phonemes per second
  at our rate, and labelling each frame by the phoneme at its centre drops 16% (en) to 32% (ru) of
  all phonemes (measured on 150 sentences per language). So a frame's token is the PAIR of the
  phonemes active at 1/4 and 3/4 of the frame (`en:k w`; a single `en:k` when both are the same).
  Pairs seen fewer than `min_pair_count` times in the tokenizer's fitting data fall back to the
  phoneme at the frame centre, so the vocabulary stays a few thousand tokens.
- `points = 4` (an option, `CorpusConfig.tokenizer_points`) resolves the frame in quarters: the
  token is the phonemes at 1/8, 3/8, 5/8 and 7/8 of the frame (`en:k k w w`: where in the frame the
  boundary falls), falling back to the pair token when that quadruple is rare.
- Frames before the first phoneme are `<sil>`; `<pad>` pads batches; `<bos>`/`<eos>` are for the
  model's own use; `<unk>` is any phoneme never seen while fitting.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from rvqspec.mini.speech import synthesize, text_to_phonemes

SPECIAL_TOKENS = ("<pad>", "<sil>", "<bos>", "<eos>", "<unk>")
PAD, SIL, BOS, EOS, UNK = range(len(SPECIAL_TOKENS))
FRAME_RATE = 12.5  # Hz: the codec's frame rate (one talker step per 80 ms frame)
SAMPLE_RATE = 16000
TOKENIZER_FILE = "phoneme_tokenizer.json"
FORMAT_VERSION = 1

Events = Sequence[tuple[float, str]]  # (start seconds, espeak mnemonic), sorted by start


class TokenizerError(ValueError):
    """A tokenizer file is missing, unreadable or inconsistent."""


def num_frames(num_samples: int, sample_rate: int = SAMPLE_RATE, frame_rate: float = FRAME_RATE) -> int:
    """Frames covering `num_samples`: the last partial frame counts (the codec zero-pads it)."""
    hop = int(round(sample_rate / frame_rate))
    return max(1, -(-int(num_samples) // hop))


def _active(events: Events, times: np.ndarray) -> np.ndarray:
    """Index of the phoneme active at each time (-1 before the first one). times: (N,) seconds."""
    starts = np.asarray([s for s, _ in events], dtype=np.float64)  # (P,)
    return np.searchsorted(starts, times, side="right") - 1  # (N,)


def frame_phonemes(events: Events, n_frames: int, frame_rate: float = FRAME_RATE) -> list[tuple[str | None, str | None, str | None]]:
    """Per frame: the phoneme (mnemonic) at 1/4, at 3/4 and at the centre; None before the first."""
    t = np.arange(n_frames, dtype=np.float64)  # (T,)
    if not events:
        return [(None, None, None)] * n_frames
    idx = [_active(events, (t + q) / frame_rate) for q in (0.25, 0.75, 0.5)]  # 3 x (T,)
    names = [e for _, e in events]
    return [tuple(names[i[k]] if i[k] >= 0 else None for i in idx) for k in range(n_frames)]


def frame_quarters(events: Events, n_frames: int, frame_rate: float = FRAME_RATE) -> list[tuple[str | None, ...]]:
    """Per frame: the phoneme (mnemonic) at 1/8, 3/8, 5/8 and 7/8 of it; None before the first."""
    t = np.arange(n_frames, dtype=np.float64)  # (T,)
    if not events:
        return [(None,) * 4] * n_frames
    idx = [_active(events, (t + q) / frame_rate) for q in (0.125, 0.375, 0.625, 0.875)]  # 4 x (T,)
    names = [e for _, e in events]
    return [tuple(names[i[k]] if i[k] >= 0 else None for i in idx) for k in range(n_frames)]


POINTS = (2, 4)  # phonemes sampled per frame: the pair at 1/4 and 3/4, or the four quarter centres


@dataclass
class PhonemeTokenizer:
    tokens: list[str]  # id -> token string
    min_pair_count: int = 3
    points: int = 2  # 4: quarter-resolved tokens first (module docstring), pairs as the fallback

    def __post_init__(self) -> None:
        if self.points not in POINTS:
            raise TokenizerError(f"points must be one of {POINTS}, got {self.points!r}")
        if tuple(self.tokens[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise TokenizerError(f"tokenizer must start with the special tokens {SPECIAL_TOKENS}, "
                                 f"got {self.tokens[:len(SPECIAL_TOKENS)]}")
        self.index = {tok: i for i, tok in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            dup = [t for t, c in Counter(self.tokens).items() if c > 1][:5]
            raise TokenizerError(f"tokenizer has duplicate tokens, e.g. {dup}")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    # -- building ---------------------------------------------------------------------------------
    @staticmethod
    def _pair_key(lang: str, a: str | None, b: str | None) -> str | None:
        if a is None and b is None:
            return None
        if a is None or a == b:
            return f"{lang}:{b}"
        if b is None:
            return f"{lang}:{a}"
        return f"{lang}:{a} {b}"

    @staticmethod
    def _quad_key(lang: str, names: tuple[str | None, ...]) -> str | None:
        """Quarter-resolved token of a frame that holds a boundary (None: no boundary, or all silence)."""
        if len(set(names)) == 1:
            return None
        return f"{lang}:" + " ".join("-" if n is None else n for n in names)

    @classmethod
    def fit(cls, utterances: Iterable[tuple[str, Events, int]], min_pair_count: int = 3,
            points: int = 2) -> "PhonemeTokenizer":
        """Vocabulary from (language, phoneme events, number of frames) of the fitting utterances."""
        singles: set[str] = set()
        pairs: Counter = Counter()
        quads: Counter = Counter()
        for lang, events, n_frames in utterances:
            for _, name in events:
                singles.add(f"{lang}:{name}")
            for a, b, _ in frame_phonemes(events, n_frames):
                key = cls._pair_key(lang, a, b)
                if key is not None and " " in key:
                    pairs[key] += 1
            if points == 4:
                for names in frame_quarters(events, n_frames):
                    key = cls._quad_key(lang, names)
                    if key is not None:
                        quads[key] += 1
        kept = sorted(p for p, c in pairs.items() if c >= min_pair_count)
        kept_quads = sorted(q for q, c in quads.items() if c >= min_pair_count)
        return cls(tokens=list(SPECIAL_TOKENS) + sorted(singles) + kept + kept_quads, min_pair_count=min_pair_count,
                   points=points)

    # -- encoding ---------------------------------------------------------------------------------
    def frame_tokens(self, events: Events, n_frames: int, lang: str, frame_rate: float = FRAME_RATE) -> np.ndarray:
        """(T,) int64 token per frame: the quarter token if known (points = 4), else the pair token,
        else the centre phoneme, else <unk>."""
        out = np.empty(n_frames, dtype=np.int64)  # (T,)
        quarters = frame_quarters(events, n_frames, frame_rate) if self.points == 4 else None
        for k, (a, b, c) in enumerate(frame_phonemes(events, n_frames, frame_rate)):
            key = self._pair_key(lang, a, b)
            quad = None if quarters is None else self._quad_key(lang, quarters[k])
            if quad is not None and quad in self.index:
                out[k] = self.index[quad]
            elif key is None:
                out[k] = SIL
            elif key in self.index:
                out[k] = self.index[key]
            else:
                out[k] = self.index.get(f"{lang}:{c}", UNK)
        return out

    def phonemize(self, text: str, lang: str) -> tuple[np.ndarray, float]:
        """Synthesis-time input: run espeak-ng for its timing -> ((T,) frame tokens, duration s)."""
        utt = synthesize(text, lang)
        n = num_frames(len(utt.audio), utt.sample_rate)
        return self.frame_tokens(utt.phonemes, n, lang), utt.duration

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[int(i)] if 0 <= int(i) < len(self.tokens) else "<?>" for i in ids]

    # -- files ------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the JSON vocabulary atomically (temp file, then rename). `path`: file or directory."""
        path = Path(path)
        if path.is_dir() or path.suffix != ".json":
            path = path / TOKENIZER_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": "rvqspec-phoneme-tokenizer", "version": FORMAT_VERSION, "frame_rate": FRAME_RATE,
                   "min_pair_count": self.min_pair_count, "points": self.points,
                   "special_tokens": list(SPECIAL_TOKENS),
                   "tokens": self.tokens}
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f, ensure_ascii=False, indent=0)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; this file is committed and shared
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PhonemeTokenizer":
        path = Path(path)
        if path.is_dir():
            path = path / TOKENIZER_FILE
        if not path.is_file():
            raise TokenizerError(f"no phoneme tokenizer file at {path}")
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise TokenizerError(f"cannot read phoneme tokenizer {path}: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != "rvqspec-phoneme-tokenizer":
            raise TokenizerError(f"{path} is not an rvqspec phoneme tokenizer (key 'format')")
        if payload.get("version") != FORMAT_VERSION:
            raise TokenizerError(f"{path}: tokenizer version {payload.get('version')!r}, expected {FORMAT_VERSION}")
        tokens = payload.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise TokenizerError(f"{path}: key 'tokens' must be a list of strings")
        points = payload.get("points", 2)
        if points not in POINTS:
            raise TokenizerError(f"{path}: key 'points' must be one of {POINTS}, got {points!r}")
        return cls(tokens=tokens, min_pair_count=int(payload.get("min_pair_count", 3)), points=points)


def phonemize(text: str, lang: str, tokenizer: PhonemeTokenizer) -> tuple[np.ndarray, float]:
    """Synthesis-time text input: ((T,) frame tokens from espeak-ng's timing, duration in seconds)."""
    return tokenizer.phonemize(text, lang)


# ------------------------------------------------------------------------- phoneme transcriptions
# The recognizer's phoneme head and PER (phoneme error rate, the mini world's headline
# intelligibility figure, issue 14) use espeak-ng's phonemes of the TEXT: segmental phonemes only.
# Stress marks (' and ,) and Mandarin tone numbers are dropped (prosody, not segments; the hanzi
# CER still sees tone errors), as are pauses ("_", "_:", "_|", "_!") and voice switches ("(en)").
_STRESS = "',"
_PAUSE_CHARS = set("_:|!^")  # a pause is "_" followed by these only ("_j" is ja's palatal glide)


def centre_phoneme(token: str) -> str:
    """The phoneme at a frame's centre from its token string: the third of a quarter token
    (`en:a a b b` -> `b`, the phoneme at 5/8 of the frame), the second of a pair (`en:a b` -> `b`, at
    3/4), the one phoneme of a single (`en:a`); special tokens and silent quarters are `<sil>`."""
    if ":" not in token:
        return SPECIAL_TOKENS[SIL]
    parts = token.split(":", 1)[1].split(" ")
    name = parts[2] if len(parts) == 4 else parts[-1]
    return SPECIAL_TOKENS[SIL] if name == "-" else name


def clean_phonemes(names: Sequence[str], lang: str) -> list[str]:
    """espeak-ng mnemonics -> the segmental phoneme sequence PER is computed on."""
    out = []
    for name in names:
        if not name or name.startswith("(") or (name.startswith("_") and set(name) <= _PAUSE_CHARS):
            continue
        name = name.lstrip(_STRESS)
        if lang == "zh":
            name = name.rstrip("0123456789")  # cmn tones: "'Au55" -> "Au"
        if name:
            out.append(name)
    return out


def text_phonemes(text: str, lang: str) -> list[str]:
    """The phonemes espeak-ng says for `text` in `lang` (no audio is synthesized)."""
    return clean_phonemes(text_to_phonemes(text, lang), lang)
