"""Synthetic speech for the mini world: espeak-ng through the `espeakng-loader` wheel (no apt).

espeak-ng is loaded with ctypes and initialised in synchronous mode with phoneme events, so one
`espeak_Synth` call hands our callback both the samples (22050 Hz, int16) and, for every phoneme,
its audio position in milliseconds and its mnemonic. Those events give frame-aligned phoneme labels
for free (see `rvqspec.mini.phonemes`). Audio is resampled to 16 kHz, the codec's rate.

espeak-ng keeps global state (one voice, one callback), so all calls go through one process-wide
`_Espeak` object guarded by a lock. Synthesis is deterministic: same text and voice -> same samples.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import resample_poly

from rvqspec.core.defaults import LANGUAGES

# language code (seed 000 Table 3: the six Fleurs languages) -> espeak-ng voice name.
# Every voice gets the "michel" variant: it sets flutter 0, echo 0 and roughness 0. With the default
# variant espeak-ng keeps pitch-flutter and echo state across calls (seen here: the same text gave
# 18460, 18468, 18464 samples on three calls), so synthesis depended on what was spoken before.
VARIANT = "michel"
VOICES: dict[str, str] = {
    "en": "en-us",
    "de": "de",
    "es": "es",
    "ru": "ru",
    "ja": "ja",  # reads kana only (kanji are spelled out as "Chinese letter"), so text.py writes kana
    "zh": "cmn",  # Mandarin, reads hanzi
}
if tuple(VOICES) != LANGUAGES:
    raise ImportError(f"espeak-ng voices {tuple(VOICES)} do not cover rvqspec.core.defaults.LANGUAGES {LANGUAGES}")

ESPEAK_RATE = 22050  # espeak-ng's native output rate
SAMPLE_RATE = 16000  # the codec's rate

# espeak-ng API constants (speak_lib.h)
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_EVENT_LIST_TERMINATED = 0
_EVENT_PHONEME = 7
_PARAM_RATE = 1
_PARAM_PITCH = 3


class SpeechError(RuntimeError):
    """espeak-ng could not be loaded or could not speak the given text."""


@dataclass(frozen=True)
class SpeechConfig:
    rate_wpm: int = 160  # a little slower than espeak's 175 default: longer phonemes, fewer lost
    pitch: int = 50  # espeak default (0..100)
    sample_rate: int = SAMPLE_RATE


@dataclass
class Utterance:
    text: str
    language: str
    audio: np.ndarray  # (num_samples,) float32 in [-1, 1] at `sample_rate`
    sample_rate: int
    phonemes: list[tuple[float, str]] = field(default_factory=list)  # (start seconds, mnemonic)

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


class _EspeakEvent(ctypes.Structure):
    class _Id(ctypes.Union):
        _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),  # milliseconds from the start of this synth call
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _Id),
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                             ctypes.POINTER(_EspeakEvent))


class _Espeak:
    """The one espeak-ng instance of this process."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError as exc:  # pragma: no cover - a dependency of the project
            raise SpeechError("the espeakng-loader wheel is not installed (pip install espeakng-loader)") from exc
        lib_path = espeakng_loader.get_library_path()
        data_path = espeakng_loader.get_data_path()
        try:
            self.lib = ctypes.CDLL(lib_path)
        except OSError as exc:
            raise SpeechError(f"cannot load espeak-ng library {lib_path}: {exc}") from exc
        self.lib.espeak_Initialize.restype = ctypes.c_int
        self.lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_SetVoiceByName.restype = ctypes.c_int
        self.lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                          ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.espeak_Synth.restype = ctypes.c_int
        self.lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        self.lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        rate = self.lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(),
                                          _INITIALIZE_PHONEME_EVENTS)
        if rate != ESPEAK_RATE:
            raise SpeechError(f"espeak_Initialize returned {rate} (expected sample rate {ESPEAK_RATE}); "
                              f"data path {data_path}")
        self._chunks: list[np.ndarray] = []
        self._events: list[tuple[int, str]] = []  # (ms, mnemonic)
        self._callback = _CALLBACK(self._on_audio)  # keep a reference: espeak holds the pointer
        self.lib.espeak_SetSynthCallback(self._callback)
        self.lock = threading.Lock()
        self.libc = ctypes.CDLL(None)
        self._voice: str | None = None

    def _on_audio(self, wav, num_samples, events) -> int:
        if num_samples > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            ev = events[i]
            if ev.type == _EVENT_PHONEME:
                name = bytes(ev.id.string).split(b"\0", 1)[0].decode("utf-8", "replace")
                self._events.append((ev.audio_position, name))
            i += 1
        return 0  # 0 = continue synthesis

    def speak(self, text: str, voice: str, config: SpeechConfig) -> tuple[np.ndarray, list[tuple[int, str]]]:
        with self.lock:
            if self._voice != voice:
                if self.lib.espeak_SetVoiceByName(f"{voice}+{VARIANT}".encode()) != 0:
                    raise SpeechError(f"espeak-ng has no voice {voice!r}")
                self._voice = voice
            # parameters are re-set every call: SetVoiceByName resets them
            self.lib.espeak_SetParameter(_PARAM_RATE, config.rate_wpm, 0)
            self.lib.espeak_SetParameter(_PARAM_PITCH, config.pitch, 0)
            self._chunks, self._events = [], []
            self.libc.srand(0)  # espeak-ng draws noise (aspiration) from libc rand()
            data = text.encode("utf-8") + b"\0"
            buf = ctypes.create_string_buffer(data)
            err = self.lib.espeak_Synth(buf, len(data), 0, 0, 0, _CHARS_UTF8 | _ENDPAUSE, None, None)
            if err != 0:
                raise SpeechError(f"espeak_Synth failed with code {err} for {voice} text {text!r}")
            audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)  # (n,) int16
            return audio, list(self._events)


    def phoneme_clauses(self, text: str, voice: str, separator: str = " ") -> list[str]:
        """espeak-ng's phoneme mnemonics of `text` without synthesizing audio, one string per clause:
        phonemes joined by `separator`, words by spaces."""
        with self.lock:
            if self._voice != voice:
                if self.lib.espeak_SetVoiceByName(f"{voice}+{VARIANT}".encode()) != 0:
                    raise SpeechError(f"espeak-ng has no voice {voice!r}")
                self._voice = voice
            buf = ctypes.create_string_buffer(text.encode("utf-8") + b"\0")
            ptr = ctypes.c_void_p(ctypes.addressof(buf))
            out = []
            # each call consumes one clause and advances ptr; NULL once the text is used up.
            # phonememode: bits 8-23 hold the separator character put between phoneme names
            while ptr.value:
                res = self.lib.espeak_TextToPhonemes(ctypes.byref(ptr), _CHARS_UTF8, ord(separator) << 8)
                if res:
                    out.append(res.decode("utf-8", "replace"))
            return out

    def text_to_phonemes(self, text: str, voice: str) -> str:
        """espeak-ng's phoneme mnemonics of `text`, space-separated, without synthesizing audio."""
        return " ".join(" ".join(self.phoneme_clauses(text, voice)).split())


_ENGINE: _Espeak | None = None


def _engine() -> _Espeak:
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = _Espeak()
    return _ENGINE


def check_language(lang: str) -> str:
    if lang not in VOICES:
        raise ValueError(f"unknown language {lang!r}; the mini world speaks {', '.join(LANGUAGES)}")
    return VOICES[lang]


def text_to_phonemes(text: str, lang: str) -> list[str]:
    """espeak-ng's phoneme mnemonics for `text` in `lang` (no audio; a voice switch shows as "(en)")."""
    voice = check_language(lang)
    return _engine().text_to_phonemes(text, voice).split()


def text_to_phoneme_words(text: str, lang: str) -> list[list[str]]:
    """espeak-ng's phoneme mnemonics for `text` in `lang`, one list per word it reads (no audio)."""
    voice = check_language(lang)
    return [w.split("|") for clause in _engine().phoneme_clauses(text, voice, "|") for w in clause.split()]


def synthesize(text: str, lang: str, config: SpeechConfig = SpeechConfig()) -> Utterance:
    """Speak `text` in language `lang` with espeak-ng: 16 kHz float32 audio + phoneme timings."""
    voice = check_language(lang)
    if not text.strip():
        raise ValueError(f"cannot synthesize empty text (language {lang!r})")
    raw, events = _engine().speak(text, voice, config)  # (n,) int16 at 22050 Hz
    if raw.size == 0:
        raise SpeechError(f"espeak-ng produced no audio for {lang} text {text!r}")
    audio = raw.astype(np.float32) / 32768.0
    if config.sample_rate != ESPEAK_RATE:
        g = np.gcd(config.sample_rate, ESPEAK_RATE)
        audio = resample_poly(audio, config.sample_rate // g, ESPEAK_RATE // g).astype(np.float32)
    np.clip(audio, -1.0, 1.0, out=audio)
    phonemes = [(ms / 1000.0, name) for ms, name in events if name]
    return Utterance(text=text, language=lang, audio=audio, sample_rate=config.sample_rate, phonemes=phonemes)
