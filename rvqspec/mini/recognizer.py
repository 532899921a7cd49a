"""The mini world's speech recognizer: a small CTC model on log-mel features, characters and phonemes.

It measures the intelligibility of synthesized speech offline (no hub weights can be fetched here),
playing the part that Whisper / Parakeet play in the seed's WER tables (seed 000 Table 3).

* Features: 80 log-mel bins, 25 ms windows every 10 ms (torch STFT, our own mel filterbank),
  normalized per utterance and mel bin, so the absolute level of the audio does not matter.
* Model: two stride-2 1-D convolutions (10 ms -> 40 ms frames, 25 Hz, still above the ~15
  characters per second that espeak-ng speaks), then residual depthwise-separable convolution
  blocks (default; a bidirectional GRU stack is the alternative) and a linear CTC head; a second
  linear CTC head over espeak-ng phoneme symbols reads the same encoder (PER, issue 14).
* Vocabulary: blank + the characters of the normalized training text of all six languages
  (space included for the space-delimited ones; ja/zh text has no spaces after normalization).
  Each language keeps its own character set; decoding for a language only admits its characters.
* Phonemes: blank + the segmental phoneme mnemonics espeak-ng gives for the training texts
  (`rvqspec.mini.phonemes.text_phonemes`; stress and tone dropped), per language like the
  characters. A model trained with `phoneme_weight = 0` (or an artifact from before the phoneme
  head) has no phoneme head and transcribes characters only.
* Decoding: greedy CTC (argmax, merge repeats, drop blanks). The text of en/de/es/ru is by default
  spelled from the phoneme head with a word list and unigram frequencies (`rvqspec.mini.lexicon`,
  decoding "lexicon"); decoding "greedy" keeps the character head's own output (the figures before
  the lexicon), and `CTCRecognizer.decoding_for` says which one produced a language's text.
* Training (`train_recognizer`): the `model_train` split of the mini corpus in all six languages,
  augmented by codec resynthesis (encode -> decode with the mini codec, precomputed once for a
  fraction of the utterances) so that it also reads codec and model speech, plus cheap gain,
  noise, speed and SpecAugment perturbations.

Artifact layout (`save_recognizer` / `load_recognizer`): `recognizer.json` (RecognizerConfig),
`vocab.json` (tokens, per-language character sets, phoneme tokens and per-language phoneme sets),
`model.safetensors` (fp16 weights),
`metrics.json` (training summary).
"""
from __future__ import annotations

import copy
import dataclasses
import io
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from datasets import load_from_disk
from safetensors.torch import load_file, save_file
from scipy.signal import resample_poly
from torch import nn
from tqdm import tqdm

from rvqspec.measure.metrics import normalize, phoneme_score, score
from rvqspec.mini.codec import RVQCodec
from rvqspec.mini.codec import mel_filterbank as codec_mel_filterbank
from rvqspec.mini.phonemes import text_phonemes

SAMPLE_RATE = 16000
BLANK = "<blank>"
SPLIT_TRAIN = "model_train"
# text decodings (`CTCRecognizer.decoding_for`): "auto" = lexicon where available, else greedy
DECODINGS = ("auto", "lexicon", "greedy")

_ROOT = Path(__file__).resolve().parents[2]  # the repository checkout
DEFAULT_CORPUS = _ROOT / "runs" / "mini" / "corpus"
DEFAULT_CODEC = _ROOT / "data" / "mini" / "codec"
DEFAULT_OUT = _ROOT / "data" / "mini" / "recognizer"


@dataclass(frozen=True)
class RecognizerConfig:
    # --- features (10 ms hop: CTC needs more output frames than characters; see `subsample`)
    sample_rate: int = SAMPLE_RATE
    n_fft: int = 512
    win_length: int = 400  # 25 ms
    hop_length: int = 160  # 10 ms
    n_mels: int = 80
    # --- model
    conv_channels: int = 256
    conv_kernel: int = 5
    # "gru": a bidirectional GRU stack; "conv": residual depthwise-separable convolution blocks
    # (time-parallel, several times faster per step on a CPU, receptive field about +-0.5 s)
    encoder: str = "conv"  # conv left the CTC blank plateau in 1/3 of the steps the GRU needed (dev run)
    rnn_hidden: int = 192
    rnn_layers: int = 3
    conv_blocks: int = 8
    conv_block_kernel: int = 11
    dropout: float = 0.15
    # weight of the phoneme CTC loss beside the character loss; 0 trains no phoneme head
    phoneme_weight: float = 1.0
    # --- training
    epochs: int = 6
    batch_seconds: float = 60.0  # audio seconds per batch (batches are built from similar lengths)
    lr: float = 3e-3
    weight_decay: float = 1e-2
    warmup_fraction: float = 0.05
    grad_clip: float = 1.0
    # wall-clock cap on the optimisation loop (the mini build's budget); the learning-rate schedule
    # follows whichever of steps and time runs out first, so a capped run still ends annealed
    max_minutes: float = 40.0
    max_utterances_per_language: int | None = None  # cap on model_train utterances per language
    val_per_language: int = 16  # model_train utterances held out per language to report progress
    # English is issue 3's headline and the hardest to spell from sound: at 1x (v1 artifact, 15 min)
    # it stayed at 12.6% CER on the eval split while ja/zh reached ~1%
    language_repeats: dict = field(default_factory=lambda: {"en": 3})
    seed: int = 0
    # --- augmentation
    # share of training utterances given a codec-resynthesized copy (Griffin-Lim makes each copy
    # cost ~0.3 s of CPU, so the share is bounded by the build budget)
    codec_fraction: float = 0.1
    codec_prob: float = 1.0  # when a copy exists: chance an epoch reads the copy instead
    # Griffin-Lim iterations for the training copies only (the codec's own setting, 48, costs
    # ~3x more; fast Griffin-Lim is near convergence by 16). Evaluation always uses the codec as is.
    codec_gl_iters: int | None = 16
    # share of the codec copies whose deep levels are those an imperfect code predictor would give:
    # from a random depth k in [1, Q), every frame's levels k.. are taken from a random frame with the
    # same c0 (`resample_deep_levels`). A synthesizer's audio never carries the codec's exact residual,
    # and a recognizer that has only heard exact residuals mistakes a plausible one for another sound.
    # The copies are codec outputs only (no model is involved); 0 = every copy is plain resynthesis.
    codec_deep_share: float = 0.0
    gain_db: float = 6.0  # uniform random gain in [-gain_db, +gain_db]
    noise_prob: float = 0.5
    snr_db: tuple[float, float] = (15.0, 40.0)  # white noise at a uniform SNR in this range
    speed_prob: float = 0.5
    speed_range: tuple[float, float] = (0.9, 1.1)  # resampling speed perturbation
    freq_masks: int = 2
    freq_mask_width: int = 12  # mel bins
    time_mask_ratio: float = 0.04  # per mask, at most this share of the frames
    time_masks: int = 2

    @property
    def subsample(self) -> int:
        return 4  # two stride-2 convolutions

    @classmethod
    def toy(cls) -> RecognizerConfig:
        """A config that trains in seconds: for smoke tests, not for measurements."""
        return cls(n_mels=32, conv_channels=32, conv_blocks=2, rnn_hidden=32, rnn_layers=1, epochs=2,
                   batch_seconds=20.0, max_minutes=1.0, val_per_language=2, codec_fraction=0.5)

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> RecognizerConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown RecognizerConfig keys {unknown}")
        data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**data)


# ----------------------------------------------------------------------------- features


def mel_filterbank(n_fft: int, n_mels: int, sample_rate: int, f_min: float = 20.0,
                   f_max: float | None = None) -> torch.Tensor:
    """Triangular filters on the HTK mel scale: (n_fft // 2 + 1, n_mels) (the codec's, transposed)."""
    f_max = sample_rate / 2 if f_max is None else f_max
    return codec_mel_filterbank(sample_rate, n_fft, n_mels, f_min, f_max).T.contiguous()  # (F, M)


class LogMel(nn.Module):
    """Waveforms (B, N) at `sample_rate` -> normalized log-mel features (B, n_mels, T)."""

    def __init__(self, config: RecognizerConfig):
        super().__init__()
        self.config = config
        self.register_buffer("window", torch.hann_window(config.win_length), persistent=False)
        self.register_buffer("fbank", mel_filterbank(config.n_fft, config.n_mels, config.sample_rate),
                             persistent=False)

    def frames(self, num_samples: torch.Tensor) -> torch.Tensor:
        return num_samples // self.config.hop_length + 1  # center=True framing

    def forward(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        # zero (not reflect) padding at the edges: an utterance then gives the same features alone
        # and inside a zero-padded batch
        spec = torch.stft(audio, c.n_fft, c.hop_length, c.win_length, self.window, center=True,
                          pad_mode="constant", return_complex=True)  # (B, F, T)
        power = spec.real.square() + spec.imag.square()
        mel = torch.log(torch.einsum("bft,fm->bmt", power, self.fbank) + 1e-6)  # (B, M, T)
        n = self.frames(lengths)  # (B,)
        mask = (torch.arange(mel.shape[-1], device=mel.device)[None] < n[:, None]).unsqueeze(1)  # (B,1,T)
        count = n.clamp(min=1).to(mel.dtype)[:, None, None]
        mean = (mel * mask).sum(-1, keepdim=True) / count  # (B, M, 1)
        var = ((mel - mean).square() * mask).sum(-1, keepdim=True) / count
        mel = (mel - mean) / (var + 1e-5).sqrt() * mask
        return mel, n


# ----------------------------------------------------------------------------- model


class ConvBlock(nn.Module):
    """x + pointwise(GELU(LayerNorm(depthwise(x)))) over (B, C, T), masked past each length."""

    def __init__(self, channels: int, kernel: int, dropout: float):
        super().__init__()
        self.depthwise = nn.Conv1d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.pointwise = nn.Linear(channels, channels)
        self.act = nn.GELU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.depthwise(x * mask).transpose(1, 2)  # (B, T, C)
        h = self.drop(self.pointwise(self.act(self.norm(h)))).transpose(1, 2)  # (B, C, T)
        return (x + h) * mask


class CTCModel(nn.Module):
    """Log-mel (B, n_mels, T) -> CTC log-probabilities (B, T/4, vocab)."""

    def __init__(self, config: RecognizerConfig, vocab_size: int, phoneme_vocab_size: int = 0):
        super().__init__()
        c = config
        self.config = config
        self.features = LogMel(c)
        pad = c.conv_kernel // 2
        self.conv1 = nn.Conv1d(c.n_mels, c.conv_channels, c.conv_kernel, stride=2, padding=pad)
        self.conv2 = nn.Conv1d(c.conv_channels, c.conv_channels, c.conv_kernel, stride=2, padding=pad)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(c.conv_channels)
        if c.encoder == "gru":
            self.rnn = nn.GRU(c.conv_channels, c.rnn_hidden, num_layers=c.rnn_layers, batch_first=True,
                              bidirectional=True, dropout=c.dropout if c.rnn_layers > 1 else 0.0)
            width = 2 * c.rnn_hidden
        elif c.encoder == "conv":
            self.blocks = nn.ModuleList(ConvBlock(c.conv_channels, c.conv_block_kernel, c.dropout)
                                        for _ in range(c.conv_blocks))
            width = c.conv_channels
        else:
            raise ValueError(f"RecognizerConfig.encoder must be 'gru' or 'conv', got {c.encoder!r}")
        self.drop = nn.Dropout(c.dropout)
        self.head = nn.Linear(width, vocab_size)
        # phonemes and characters share the encoder: the phoneme head costs one small matmul
        self.phoneme_head = nn.Linear(width, phoneme_vocab_size) if phoneme_vocab_size else None

    @staticmethod
    def _halve(frames: torch.Tensor) -> torch.Tensor:
        return (frames + 1) // 2  # a stride-2 conv with padding k//2 maps T -> ceil(T / 2)

    def output_lengths(self, frames: torch.Tensor) -> torch.Tensor:
        return self._halve(self._halve(frames))

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Character CTC log-probabilities (B, T', V) and output lengths (B,)."""
        out, n = self.encode(feats, frames)
        return self.head(self.drop(out)).log_softmax(-1), n

    def phoneme_log_probs(self, encoded: torch.Tensor) -> torch.Tensor:
        """Phoneme CTC log-probabilities (B, T', P) from `encode`'s (B, T', C) output."""
        if self.phoneme_head is None:
            raise ValueError("this recognizer has no phoneme head (trained with phoneme_weight=0 or "
                             "an artifact without phoneme tokens in vocab.json)")
        return self.phoneme_head(self.drop(encoded)).log_softmax(-1)

    def encode(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-mel (B, n_mels, T) -> encoder states (B, T', C) and output lengths (B,)."""
        h = self.act(self.conv1(feats))  # (B, C, T/2)
        # zero the outputs past each utterance's end (GELU(bias) there is not 0), so that conv2
        # sees the same zeros as its own padding: batching never changes a member's output
        n1 = self._halve(frames)
        h = h * (torch.arange(h.shape[-1], device=h.device)[None] < n1[:, None]).unsqueeze(1)
        x = self.act(self.conv2(h)).transpose(1, 2)  # (B, T/4, C)
        x = self.drop(self.norm(x))
        n = self.output_lengths(frames).clamp(max=x.shape[1])  # (B,)
        if self.config.encoder == "gru":
            # packing: the backward direction starts at each utterance's own end, not in padding
            packed = nn.utils.rnn.pack_padded_sequence(x, n.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        else:
            mask = (torch.arange(x.shape[1], device=x.device)[None] < n[:, None]).unsqueeze(1)  # (B, 1, T')
            h = x.transpose(1, 2)  # (B, C, T')
            for block in self.blocks:
                h = block(h, mask)
            out = h.transpose(1, 2)  # (B, T', C)
        return out, n


# ----------------------------------------------------------------------------- vocabulary


@dataclass
class Vocab:
    tokens: list[str]  # index 0 is the CTC blank
    languages: dict[str, str] = field(default_factory=dict)  # language -> its characters
    # phoneme head: index 0 is the blank; mnemonics are several characters, hence lists
    phonemes: list[str] = field(default_factory=list)
    phoneme_languages: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self):
        if not self.tokens or self.tokens[0] != BLANK:
            raise ValueError(f"vocab: token 0 must be {BLANK!r}, got {self.tokens[:1]}")
        if self.phonemes and self.phonemes[0] != BLANK:
            raise ValueError(f"vocab: phoneme 0 must be {BLANK!r}, got {self.phonemes[:1]}")
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.phoneme_index = {p: i for i, p in enumerate(self.phonemes)}

    def with_phonemes(self, phonemes_by_language: dict[str, Sequence[Sequence[str]]]) -> Vocab:
        """This vocabulary plus a phoneme inventory from (language -> phoneme sequences)."""
        langs = {lang: sorted({p for seq in seqs for p in seq}) for lang, seqs in sorted(phonemes_by_language.items())}
        inventory = sorted({p for ps in langs.values() for p in ps})
        return Vocab(self.tokens, self.languages, [BLANK, *inventory], langs)

    def encode_phonemes(self, phonemes: Sequence[str]) -> list[int]:
        """Phoneme mnemonics -> ids; symbols outside the inventory are dropped."""
        return [self.phoneme_index[p] for p in phonemes if p in self.phoneme_index]

    def phoneme_mask(self, language: str) -> torch.Tensor | None:
        """(P,) bool of the phonemes `language` may emit (blank included), None if unknown."""
        names = self.phoneme_languages.get(language)
        if names is None:
            return None
        mask = torch.zeros(len(self.phonemes), dtype=torch.bool)
        mask[0] = True
        mask[[self.phoneme_index[p] for p in names]] = True
        return mask

    @classmethod
    def build(cls, texts_by_language: dict[str, Sequence[str]]) -> Vocab:
        languages = {}
        for lang, texts in sorted(texts_by_language.items()):
            languages[lang] = "".join(sorted({ch for t in texts for ch in normalize(t, lang)}))
        chars = sorted({ch for s in languages.values() for ch in s})
        return cls([BLANK, *chars], languages)

    def encode(self, text: str, language: str) -> list[int]:
        """Normalized `text` -> token ids; characters outside the vocabulary are dropped."""
        return [self.index[ch] for ch in normalize(text, language) if ch in self.index]

    def language_mask(self, language: str) -> torch.Tensor | None:
        """(V,) bool of the tokens `language` may emit (blank included), None if unknown."""
        chars = self.languages.get(language)
        if chars is None:
            return None
        mask = torch.zeros(len(self.tokens), dtype=torch.bool)
        mask[0] = True
        mask[[self.index[ch] for ch in chars]] = True
        return mask

    def to_json(self) -> dict:
        out = {"tokens": self.tokens, "languages": self.languages}
        if self.phonemes:
            out.update(phonemes=self.phonemes, phoneme_languages=self.phoneme_languages)
        return out

    @classmethod
    def from_json(cls, data: dict, source: str = "vocab.json") -> Vocab:
        if "tokens" not in data:
            raise ValueError(f"{source}: missing key 'tokens'")
        return cls(list(data["tokens"]), dict(data.get("languages", {})), list(data.get("phonemes", [])),
                   {k: list(v) for k, v in data.get("phoneme_languages", {}).items()})


def _greedy_ids(log_probs: torch.Tensor, lengths: torch.Tensor, allowed: torch.Tensor | None) -> list[list[int]]:
    if allowed is not None:
        log_probs = log_probs.masked_fill(~allowed.to(log_probs.device), float("-inf"))
    best = log_probs.argmax(-1).cpu()  # (B, T)
    return [[i for i in torch.unique_consecutive(row[:n]).tolist() if i != 0]
            for row, n in zip(best, lengths.tolist())]


def greedy_decode(log_probs: torch.Tensor, lengths: torch.Tensor, vocab: Vocab,
                  allowed: torch.Tensor | None = None) -> list[str]:
    """CTC greedy decoding of (B, T, V) log-probabilities; `allowed` (V,) bool masks the argmax."""
    return ["".join(vocab.tokens[i] for i in ids) for ids in _greedy_ids(log_probs, lengths, allowed)]


def greedy_decode_phonemes(log_probs: torch.Tensor, lengths: torch.Tensor, vocab: Vocab,
                           allowed: torch.Tensor | None = None) -> list[list[str]]:
    """CTC greedy decoding of (B, T, P) phoneme log-probabilities into mnemonic lists."""
    return [[vocab.phonemes[i] for i in ids] for ids in _greedy_ids(log_probs, lengths, allowed)]


# ----------------------------------------------------------------------------- inference


class CTCRecognizer:
    """A trained CTC model with its vocabulary: 16 kHz float32 audio -> text."""

    def __init__(self, model: CTCModel, vocab: Vocab, device: str = "cpu", batch_seconds: float = 120.0,
                 decoding: str = "auto"):
        if decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
        self.model = model.to(device).eval()
        self.vocab = vocab
        self.config = model.config
        self.device = device
        self.batch_seconds = batch_seconds
        self.decoding = decoding

    def decoding_for(self, language: str | None, decoding: str | None = None) -> str:
        """The decoding that produces text for `language`: "lexicon" (`rvqspec.mini.lexicon`:
        the phoneme head's greedy string spelled with a word list) where a lexicon exists and the
        model has a phoneme head, else "greedy" (the character head's greedy CTC output)."""
        from rvqspec.mini.lexicon import LEXICON_LANGUAGES

        decoding = decoding or self.decoding
        if decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
        usable = self.has_phonemes and language in LEXICON_LANGUAGES
        if decoding == "lexicon" and not usable:
            raise ValueError(f"lexicon decoding needs a phoneme head and a lexicon language "
                             f"({', '.join(LEXICON_LANGUAGES)}); got language {language!r}, "
                             f"phoneme head: {self.has_phonemes}")
        return "lexicon" if decoding == "lexicon" or (decoding == "auto" and usable) else "greedy"

    @property
    def has_phonemes(self) -> bool:
        return self.model.phoneme_head is not None and bool(self.vocab.phonemes)

    def transcribe(self, audios: Sequence[np.ndarray], language: str | None = None,
                   decoding: str | None = None) -> list[str]:
        """Transcribe 16 kHz mono float32 arrays; batches are formed from similar lengths."""
        return self.transcribe_both(audios, language, phonemes=False, decoding=decoding)[0]

    def transcribe_phonemes(self, audios: Sequence[np.ndarray], language: str | None = None) -> list[list[str]]:
        """Phoneme mnemonics (espeak-ng's symbols) heard in each 16 kHz float32 array."""
        return self.transcribe_both(audios, language)[1]

    @torch.no_grad()
    def transcribe_both(self, audios: Sequence[np.ndarray], language: str | None = None,
                        phonemes: bool = True, decoding: str | None = None
                        ) -> tuple[list[str], list[list[str]] | None]:
        """(texts, phoneme lists) from one encoder pass; phoneme lists are None when not asked.
        `decoding` ("auto", "lexicon", "greedy"; default: the recognizer's) picks how the text is
        spelled (`decoding_for`); the phoneme lists are the phoneme head's greedy output either way."""
        if phonemes and not self.has_phonemes:
            raise ValueError("this recognizer has no phoneme head; retrain it with phoneme_weight > 0")
        lexicon = self.decoding_for(language, decoding) == "lexicon"
        decoder = None
        if lexicon:
            from rvqspec.mini.lexicon import LexiconDecoder, load_lexicon

            decoder = LexiconDecoder(load_lexicon(language))
        allowed = self.vocab.language_mask(language) if language else None
        allowed_ph = self.vocab.phoneme_mask(language) if language and (phonemes or lexicon) else None
        order = sorted(range(len(audios)), key=lambda i: len(audios[i]))
        out: list[str] = [""] * len(audios)
        out_ph: list[list[str]] | None = [[] for _ in audios] if phonemes else None
        for batch in _length_batches(order, [len(a) for a in audios],
                                     self.batch_seconds * self.config.sample_rate):
            wave, lengths = _pad([np.asarray(audios[i], np.float32) for i in batch])
            wave, lengths = wave.to(self.device), lengths.to(self.device)
            feats, frames = self.model.features(wave, lengths)
            encoded, n = self.model.encode(feats, frames)  # (B, T', C), (B,)
            log_probs = self.model.head(encoded).log_softmax(-1)  # (B, T', V)
            if decoder is not None:
                from rvqspec.mini.lexicon import align_fallback, greedy_tokens

                ph = self.model.phoneme_log_probs(encoded)  # (B, T', P)
                for b, i in enumerate(batch):
                    m = int(n[b])
                    chars = greedy_tokens(log_probs[b, :m].cpu().numpy(), self.vocab.tokens,
                                          None if allowed is None else allowed.numpy())
                    heard = greedy_tokens(ph[b, :m].cpu().numpy(), self.vocab.phonemes,
                                          None if allowed_ph is None else allowed_ph.numpy())
                    out[i] = decoder.decode([t.symbol for t in heard], align_fallback(heard, chars))
            else:
                for i, text in zip(batch, greedy_decode(log_probs, n, self.vocab, allowed)):
                    out[i] = text.strip()
            if phonemes:
                ph = self.model.phoneme_log_probs(encoded)  # (B, T', P)
                for i, seq in zip(batch, greedy_decode_phonemes(ph, n, self.vocab, allowed_ph)):
                    out_ph[i] = seq
        return out, out_ph


def _pad(audios: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([max(len(a), 1) for a in audios])  # (B,)
    wave = torch.zeros(len(audios), int(lengths.max()))  # (B, N)
    for i, a in enumerate(audios):
        wave[i, : len(a)] = torch.from_numpy(np.asarray(a, np.float32))
    return wave, lengths


def _length_batches(order: Sequence[int], lengths: Sequence[int], max_samples: float) -> list[list[int]]:
    """Consecutive runs of `order` whose padded size (count x longest) stays under `max_samples`."""
    batches, current, longest = [], [], 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if current and new_longest * (len(current) + 1) > max_samples:
            batches.append(current)
            current, new_longest = [], lengths[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


# ----------------------------------------------------------------------------- save / load

# `recognizer.json` (not config.json) so a transformers checkpoint is never mistaken for ours
_FILES = ("recognizer.json", "vocab.json", "model.safetensors")


def save_recognizer(model: CTCModel, vocab: Vocab, out_dir: str | Path, metrics: dict | None = None) -> Path:
    """Write the artifact into a temporary sibling directory, then rename it over `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        # fp16 halves the artifact; inference converts back to fp32 (CTC argmax is insensitive).
        state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / "model.safetensors"))
        (tmp / "recognizer.json").write_text(json.dumps(asdict(model.config), indent=2) + "\n")
        (tmp / "vocab.json").write_text(json.dumps(vocab.to_json(), ensure_ascii=False, indent=1) + "\n")
        if metrics is not None:
            (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600; the artifact is committed and shared
        if out_dir.exists():
            out_dir.rename(old)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not out_dir.exists():
            old.rename(out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return out_dir


def is_recognizer_dir(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and all((path / f).is_file() for f in _FILES)


def load_recognizer(path: str | Path, device: str = "cpu", decoding: str = "auto") -> CTCRecognizer:
    """Load an artifact written by `save_recognizer`."""
    path = Path(path)
    missing = [f for f in _FILES if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} is not a mini recognizer directory: missing {missing}")
    config = RecognizerConfig.from_dict(json.loads((path / "recognizer.json").read_text()),
                                        str(path / "recognizer.json"))
    vocab = Vocab.from_json(json.loads((path / "vocab.json").read_text()), str(path / "vocab.json"))
    model = CTCModel(config, len(vocab.tokens), len(vocab.phonemes))
    state = load_file(str(path / "model.safetensors"))
    expected = model.state_dict()
    for key, value in state.items():
        if key in expected and expected[key].shape != value.shape:
            raise ValueError(f"{path / 'model.safetensors'}: {key} has shape {tuple(value.shape)}, "
                             f"config and vocab ({len(vocab.tokens)} tokens) expect {tuple(expected[key].shape)}")
    missing_keys, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    if missing_keys or unexpected:
        raise ValueError(f"{path / 'model.safetensors'}: missing {missing_keys}, unexpected {unexpected}")
    return CTCRecognizer(model, vocab, device=device, decoding=decoding)


# ----------------------------------------------------------------------------- corpus access


def load_split(corpus_dir: str | Path, split: str, languages: Sequence[str] | None = None,
               max_per_language: int | None = None, pcm16: bool = False) -> list[dict]:
    """Rows {text, language, audio (float32 16 kHz)} of one split of the mini corpus.

    `pcm16=True` keeps the audio as int16 (half the memory of float32: model_train is ~6 h).
    """
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.exists():
        raise FileNotFoundError(f"corpus {corpus_dir} does not exist (build it with the mini corpus command)")
    corpus = load_from_disk(str(corpus_dir))
    if split not in corpus:
        raise KeyError(f"corpus {corpus_dir} has no split {split!r}; it has {sorted(corpus)}")
    ds = corpus[split]
    for col in ("text", "language", "audio"):
        if col not in ds.column_names:
            raise KeyError(f"corpus {corpus_dir} split {split!r} lacks column {col!r}; has {ds.column_names}")
    is_audio_feature = type(ds.features["audio"]).__name__ == "Audio"
    if is_audio_feature:
        # datasets 4 decodes Audio with torchcodec, which is not installed: read the bytes ourselves.
        from datasets import Audio

        ds = ds.cast_column("audio", Audio(decode=False))
    texts, langs = ds["text"], ds["language"]
    keep, seen = [], {}
    for i, lang in enumerate(langs):
        if languages is not None and lang not in languages:
            continue
        if max_per_language is not None and seen.get(lang, 0) >= max_per_language:
            continue
        seen[lang] = seen.get(lang, 0) + 1
        keep.append(i)
    audio_col = ds.select(keep).select_columns(["audio"])
    if not is_audio_feature:
        audio_col = audio_col.with_format("numpy")  # sample arrays without a detour through lists
    rows = []
    for i, item in tqdm(zip(keep, audio_col), total=len(keep), desc=f"read {split}", leave=False,
                        disable=len(keep) < 500):
        audio = _decode_audio(item["audio"], f"{corpus_dir}:{split}[{i}]")
        if pcm16:
            audio = to_pcm16(audio)
        rows.append({"text": texts[i], "language": langs[i], "audio": audio})
    return rows


def to_pcm16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 32767 / 32768) * 32768).astype(np.int16)


def to_float(audio: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] from int16 or float audio."""
    return audio.astype(np.float32) / 32768.0 if audio.dtype == np.int16 else audio.astype(np.float32)


def _decode_audio(value, where: str) -> np.ndarray:
    if isinstance(value, dict) and value.get("bytes") is not None:
        import soundfile as sf

        audio, sr = sf.read(io.BytesIO(value["bytes"]), dtype="float32")
    elif isinstance(value, dict) and value.get("array") is not None:
        audio, sr = np.asarray(value["array"], np.float32), int(value["sampling_rate"])
    elif isinstance(value, dict) and value.get("path"):
        import soundfile as sf

        audio, sr = sf.read(value["path"], dtype="float32")
    elif isinstance(value, (list, np.ndarray)):
        value = np.asarray(value)
        # integer PCM columns hold 16-bit samples
        audio = value.astype(np.float32) / 32768.0 if value.dtype.kind == "i" else value.astype(np.float32)
        sr = SAMPLE_RATE
    else:
        raise ValueError(f"{where}: cannot read audio value of type {type(value).__name__}")
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    if sr != SAMPLE_RATE:
        g = math.gcd(sr, SAMPLE_RATE)
        audio = resample_poly(audio, SAMPLE_RATE // g, sr // g).astype(np.float32)
    return audio


def resample_deep_levels(codes: Sequence[torch.Tensor], share: float,
                         rng: np.random.Generator) -> list[torch.Tensor]:
    """Clips of (T, Q) codes; each is chosen with probability `share` and gets, from a depth k drawn
    uniformly in [1, Q), every frame's levels k.. from a random frame (of any clip) with the same c0:
    right c0, a plausible residual that is not the frame's own. A frame whose c0 no other frame has
    keeps its own codes. The others are returned as they are."""
    if not codes:
        return []
    pool = torch.cat(list(codes))  # (F, Q): every frame of every clip
    order = np.argsort(pool[:, 0].numpy(), kind="stable")
    c0_sorted = pool[order, 0].numpy()
    out = []
    for clip in codes:
        if rng.random() >= share:
            out.append(clip)
            continue
        k = int(rng.integers(1, clip.shape[1]))
        c0 = clip[:, 0].numpy()
        lo, hi = np.searchsorted(c0_sorted, c0, "left"), np.searchsorted(c0_sorted, c0, "right")
        pick = order[lo + (rng.random(len(c0)) * (hi - lo)).astype(np.int64)]  # (T,) frames, same c0
        new = clip.clone()
        new[:, k:] = pool[torch.from_numpy(pick), k:]
        out.append(new)
    return out


def resynthesize(codec, audios: Sequence[np.ndarray], desc: str = "codec resynthesis",
                 griffin_lim_iters: int | None = None,
                 recode: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = None) -> list[np.ndarray]:
    """encode -> decode each waveform with the mini codec (its loss is what the model hears).

    `griffin_lim_iters` overrides the codec's synthesis iterations (for cheap training copies);
    `recode` maps the list of every clip's codes to the codes decoded instead.
    """
    if griffin_lim_iters is not None and hasattr(codec, "config"):
        codec = copy.copy(codec)  # the caller's codec keeps its own config
        codec.config = dataclasses.replace(codec.config, griffin_lim_iters=griffin_lim_iters)
    def decode(clip) -> np.ndarray:
        decoded = codec.decode(clip)
        decoded = decoded.detach().cpu().numpy() if torch.is_tensor(decoded) else np.asarray(decoded)
        return decoded.reshape(-1).astype(np.float32)

    with torch.no_grad():
        if recode is None:  # one clip's codes at a time
            return [decode(codec.encode(audio)) for audio in tqdm(audios, desc=desc, leave=False)]
        # `recode` pools across clips, so every clip is encoded first
        codes = recode([codec.encode(audio) for audio in tqdm(audios, desc=f"{desc}: encode", leave=False)])
        return [decode(clip) for clip in tqdm(codes, desc=desc, leave=False)]


def load_codec(codec_dir: str | Path):
    return RVQCodec.load(codec_dir)


# ----------------------------------------------------------------------------- training


def _augment(audio: np.ndarray, config: RecognizerConfig, rng: np.random.Generator) -> np.ndarray:
    """Random speed (resampling), gain and white noise: cheap stand-ins for unseen voices and rooms."""
    x = audio
    if rng.random() < config.speed_prob:
        speed = rng.uniform(*config.speed_range)
        n_out = max(int(len(x) / speed), 1)
        # linear interpolation: changes tempo and pitch together, like sox's "speed"
        x = np.interp(np.linspace(0, len(x) - 1, n_out), np.arange(len(x)), x).astype(np.float32)
    x = x * np.float32(10 ** (rng.uniform(-config.gain_db, config.gain_db) / 20))
    if rng.random() < config.noise_prob:
        power = float(np.mean(x.astype(np.float64) ** 2)) + 1e-10
        snr = rng.uniform(*config.snr_db)
        x = x + rng.standard_normal(len(x)).astype(np.float32) * np.float32(math.sqrt(power / 10 ** (snr / 10)))
    return x


def _spec_augment(feats: torch.Tensor, frames: torch.Tensor, config: RecognizerConfig,
                  gen: torch.Generator) -> torch.Tensor:
    """Zero random mel bands and time spans of (B, M, T) features (SpecAugment, no warping)."""
    feats = feats.clone()
    B, M, _ = feats.shape
    for b in range(B):
        for _ in range(config.freq_masks):
            w = int(torch.randint(0, config.freq_mask_width + 1, (1,), generator=gen))
            f0 = int(torch.randint(0, max(M - w, 1), (1,), generator=gen))
            feats[b, f0 : f0 + w] = 0
        n = int(frames[b])
        for _ in range(config.time_masks):
            w = int(torch.randint(0, max(int(n * config.time_mask_ratio), 1) + 1, (1,), generator=gen))
            t0 = int(torch.randint(0, max(n - w, 1), (1,), generator=gen))
            feats[b, :, t0 : t0 + w] = 0
    return feats


def _lr_at(step: int, progress: float, total: int, config: RecognizerConfig) -> float:
    """Linear warm-up over the first steps, then cosine decay over `progress` in [0, 1]."""
    warm = max(int(total * config.warmup_fraction), 1)
    if step < warm:
        return config.lr * (step + 1) / warm
    return config.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def train_on_utterances(train: list[dict], val: list[dict], config: RecognizerConfig,
                        vocab: Vocab | None = None, progress: bool = True) -> tuple[CTCModel, Vocab, dict]:
    """Train a CTC model on rows {text, language, audio, [codec_audio], [phonemes]}; returns
    (model, vocab, metrics).

    `codec_audio`, when present, is a codec-resynthesized copy read instead of `audio` with
    probability `config.codec_prob` each epoch. With `config.phoneme_weight > 0` a phoneme head is
    trained too, on `phonemes` (a mnemonic list) or, where absent, espeak-ng's phonemes of the text.
    """
    if not train:
        raise ValueError("train_recognizer: no training utterances")
    rng = np.random.default_rng(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)  # parameter initialisation and dropout
    if vocab is None:
        by_lang: dict[str, list[str]] = {}
        for row in train:
            by_lang.setdefault(row["language"], []).append(row["text"])
        vocab = Vocab.build(by_lang)
    targets = [vocab.encode(r["text"], r["language"]) for r in train]
    with_phonemes = config.phoneme_weight > 0
    ph_targets: list[list[int]] = []
    if with_phonemes:
        seqs = [r.get("phonemes") or text_phonemes(r["text"], r["language"]) for r in train]
        if not vocab.phonemes:
            by_lang_ph: dict[str, list[list[str]]] = {}
            for row, seq in zip(train, seqs):
                by_lang_ph.setdefault(row["language"], []).append(seq)
            vocab = vocab.with_phonemes(by_lang_ph)
        ph_targets = [vocab.encode_phonemes(seq) for seq in seqs]
    model = CTCModel(config, len(vocab.tokens), len(vocab.phonemes) if with_phonemes else 0)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    lengths = [len(r["audio"]) for r in train]
    max_samples = config.batch_seconds * config.sample_rate

    # each epoch reads an utterance `language_repeats[lang]` times (differently augmented)
    pool = [i for i, r in enumerate(train) for _ in range(int(config.language_repeats.get(r["language"], 1)))]

    def epoch_batches() -> list[list[int]]:
        # sort by length with a little jitter so batches differ between epochs, then shuffle them
        jitter = rng.uniform(0.9, 1.1, len(pool))
        order = [pool[k] for k in sorted(range(len(pool)), key=lambda k: lengths[pool[k]] * jitter[k])]
        batches = _length_batches(order, lengths, max_samples / 1.1)  # room for speed-up to 1/0.9
        rng.shuffle(batches)
        return batches

    steps_per_epoch = len(epoch_batches())
    total = steps_per_epoch * config.epochs
    start = time.monotonic()
    step, losses, stopped_early = 0, [], False
    bar = tqdm(total=total, desc="train recognizer", disable=not progress)
    for epoch in range(config.epochs):
        model.train()
        for batch in epoch_batches():
            audios = []
            for i in batch:
                row = train[i]
                src = row["audio"]
                if row.get("codec_audio") is not None and rng.random() < config.codec_prob:
                    src = row["codec_audio"]
                audios.append(_augment(to_float(src), config, rng))
            wave, wave_len = _pad(audios)
            with torch.no_grad():
                feats, frames = model.features(wave, wave_len)
                feats = _spec_augment(feats, frames, config, gen)
            encoded, out_len = model.encode(feats, frames)  # (B, T', C), (B,)
            log_probs = model.head(model.drop(encoded)).log_softmax(-1)  # (B, T', V)
            tgt = [torch.tensor(targets[i], dtype=torch.long) for i in batch]
            tgt_len = torch.tensor([len(t) for t in tgt])
            loss = ctc(log_probs.transpose(0, 1), torch.cat(tgt), out_len, tgt_len)
            if with_phonemes:
                ph_log_probs = model.phoneme_log_probs(encoded)  # (B, T', P)
                ph_tgt = [torch.tensor(ph_targets[i], dtype=torch.long) for i in batch]
                ph_len = torch.tensor([len(t) for t in ph_tgt])
                loss = loss + config.phoneme_weight * ctc(ph_log_probs.transpose(0, 1), torch.cat(ph_tgt),
                                                          out_len, ph_len)
            # progress = the larger of steps done and time used: on a busy machine the time cap
            # binds first, and the learning rate still anneals to zero by then
            elapsed = (time.monotonic() - start) / 60
            progress = max(step / total, elapsed / config.max_minutes)
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, progress, total, config)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            opt.step()
            losses.append(float(loss.detach()))
            step += 1
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses[-20:]):.3f}")
            if (time.monotonic() - start) / 60 > config.max_minutes:
                stopped_early = True
                break
        if stopped_early:
            break
    bar.close()
    model.eval()
    metrics = {
        "train_utterances": len(train),
        "train_hours": sum(lengths) / config.sample_rate / 3600,
        "codec_copies": sum(r.get("codec_audio") is not None for r in train),
        "steps": step,
        "planned_steps": total,
        "stopped_at_time_cap": stopped_early,
        "train_minutes": (time.monotonic() - start) / 60,
        "first_loss": float(np.mean(losses[:5])) if losses else float("nan"),
        "final_loss": float(np.mean(losses[-20:])) if losses else float("nan"),
        # mean CTC loss of each tenth of the steps: the learning curve, for the manifest
        "loss_curve": [round(float(np.mean(c)), 4) for c in np.array_split(losses, min(10, len(losses)))
                       if len(c)],
        "vocab_size": len(vocab.tokens),
        "phoneme_vocab_size": len(vocab.phonemes) if with_phonemes else 0,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if val:
        recognizer = CTCRecognizer(model, vocab)
        per_lang = {}
        for lang in sorted({r["language"] for r in val}):
            rows = [r for r in val if r["language"] == lang]
            hyps, ph = recognizer.transcribe_both([to_float(r["audio"]) for r in rows], lang,
                                                  phonemes=recognizer.has_phonemes, decoding="greedy")
            s = score([r["text"] for r in rows], hyps, lang)
            if ph is not None:
                s.update(phoneme_score([text_phonemes(r["text"], lang) for r in rows], ph))
            per_lang[lang] = _round(s)
        metrics["heldout"] = per_lang
    return model, vocab, metrics


def _round(s: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()}


def train_recognizer(corpus_dir: str | Path, codec_dir, out_dir: str | Path,
                     config: RecognizerConfig = RecognizerConfig(), progress: bool = True) -> dict:
    """Train on the corpus's `model_train` split (all languages) and save the artifact to `out_dir`.

    `codec_dir` is the mini codec's directory (or a codec object with encode/decode, or None for
    no resynthesis augmentation).
    """
    rows = load_split(corpus_dir, SPLIT_TRAIN, max_per_language=config.max_utterances_per_language, pcm16=True)
    rng = np.random.default_rng(config.seed + 1)
    train, val = [], []
    by_lang: dict[str, list[dict]] = {}
    for row in rows:
        by_lang.setdefault(row["language"], []).append(row)
    for lang, lang_rows in sorted(by_lang.items()):
        idx = rng.permutation(len(lang_rows))
        n_val = min(config.val_per_language, len(lang_rows) // 10)
        val += [lang_rows[i] for i in idx[:n_val]]
        train += [lang_rows[i] for i in idx[n_val:]]
    deep_copies = 0
    codec_is_path = isinstance(codec_dir, (str, os.PathLike))  # a str has .encode, too
    if codec_dir is not None and config.codec_fraction > 0:
        codec = load_codec(codec_dir) if codec_is_path else codec_dir
        chosen = rng.permutation(len(train))[: int(round(config.codec_fraction * len(train)))]
        deep_rng = np.random.default_rng(config.seed + 2)  # its own stream: share 0 keeps older builds' draws

        def recode(codes: list[torch.Tensor]) -> list[torch.Tensor]:
            nonlocal deep_copies
            new = resample_deep_levels(codes, config.codec_deep_share, deep_rng)
            deep_copies = sum(a is not b for a, b in zip(codes, new))
            return new

        copies = resynthesize(codec, [to_float(train[i]["audio"]) for i in chosen],
                              griffin_lim_iters=config.codec_gl_iters,
                              recode=recode if config.codec_deep_share > 0 else None)
        for i, audio in zip(chosen, copies):
            train[i]["codec_audio"] = to_pcm16(audio)
    model, vocab, metrics = train_on_utterances(train, val, config, progress=progress)
    if config.codec_deep_share > 0:
        metrics["codec_deep_copies"] = deep_copies
    metrics["corpus"] = str(corpus_dir)
    metrics["codec"] = (str(codec_dir) if codec_is_path
                        else None if codec_dir is None else type(codec_dir).__name__)
    save_recognizer(model, vocab, out_dir, metrics)
    return metrics


# ----------------------------------------------------------------------------- evaluation


def transcribe_scored(recognizer, audios: Sequence[np.ndarray], sample_rate: int,
                      language: str) -> tuple[list[str], list[list[str]] | None]:
    """(texts, phoneme lists or None) from any `rvqspec.real.asr.Recognizer`; phonemes come from
    recognizers that have a phoneme head (`has_phonemes`, `transcribe_both`)."""
    if getattr(recognizer, "has_phonemes", False):
        return recognizer.transcribe_both(audios, sample_rate, language)
    return recognizer.transcribe(audios, sample_rate, language), None


def decoding_of(recognizer, language: str) -> str | None:
    """Which decoding spells `recognizer`'s text in `language` ("lexicon", "greedy"), None for a
    recognizer that does not say (e.g. a transformers model)."""
    fn = getattr(recognizer, "decoding_for", None)
    return fn(language) if fn is not None else None


def intelligibility_score(references: Sequence[str], hypotheses: Sequence[str], language: str,
                          phoneme_hypotheses: Sequence[Sequence[str]] | None = None) -> dict:
    """`metrics.score` (WER, CER) plus, given phoneme hypotheses, PER against espeak-ng's phonemes
    of the references (`per` is None without them: a character-only recognizer)."""
    s = score(references, hypotheses, language)
    if phoneme_hypotheses is None:
        s["per"] = None
    else:
        s.update(phoneme_score([text_phonemes(r, language) for r in references], phoneme_hypotheses))
    return s


def evaluate_recognizer(recognizer, corpus_dir: str | Path, codec=None, split: str = "eval",
                        languages: Sequence[str] | None = None, max_per_language: int | None = None,
                        progress: bool = True) -> list[dict]:
    """Per-language WER/CER of `recognizer` (an `rvqspec.real.asr.Recognizer`) on a corpus split.

    Rows {split, language, condition, n, wer, cer, per, error, metric}: condition "clean" is the
    espeak-ng audio as stored; with `codec` (an RVQCodec or its directory) each language also gets
    a "codec" row on the same utterances after encode -> decode, i.e. what the codec alone costs.
    """
    if codec is not None and not hasattr(codec, "encode"):
        codec = load_codec(codec)
    rows = load_split(corpus_dir, split, languages=languages, max_per_language=max_per_language)
    if not rows:
        raise ValueError(f"corpus {corpus_dir} split {split!r} has no utterances for languages {languages}")
    table = []
    langs = sorted({r["language"] for r in rows}, key=_language_order)
    for lang in tqdm(langs, desc=f"evaluate {split}", disable=not progress):
        subset = [r for r in rows if r["language"] == lang]
        refs = [r["text"] for r in subset]
        conditions = [("clean", [r["audio"] for r in subset])]
        if codec is not None:
            conditions.append(("codec", resynthesize(codec, conditions[0][1], desc=f"codec {lang}")))
        for condition, audios in conditions:
            hyps, phonemes = transcribe_scored(recognizer, audios, SAMPLE_RATE, lang)
            s = intelligibility_score(refs, hyps, lang, phonemes)
            table.append({"split": split, "language": lang, "condition": condition, "n": s["n"],
                          "wer": s["wer"], "cer": s["cer"], "per": s["per"], "error": s["error"],
                          "metric": s["metric"], "decoding": decoding_of(recognizer, lang)})
    return table


def _language_order(lang: str) -> tuple[int, str]:
    order = ("en", "de", "es", "ru", "ja", "zh")  # seed 000 Table 3, English first (the headline)
    return (order.index(lang) if lang in order else len(order), lang)


def format_table(table: Sequence[dict]) -> str:
    """A fixed-width text table of `evaluate_recognizer` rows (rates in percent; PER "-" when the
    recognizer has no phoneme head)."""
    lines = [f"{'split':<8} {'lang':<5} {'condition':<9} {'n':>4} {'PER %':>7} {'WER %':>7} {'CER %':>7}  primary"]
    for r in table:
        per = f"{100 * r['per']:>7.2f}" if r.get("per") is not None else f"{'-':>7}"
        lines.append(f"{r['split']:<8} {r['language']:<5} {r['condition']:<9} {r['n']:>4} {per} "
                     f"{100 * r['wer']:>7.2f} {100 * r['cer']:>7.2f}  {r['metric'].upper()}")
    return "\n".join(lines)
