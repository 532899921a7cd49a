"""The mini world end to end: text -> frame-aligned phonemes -> talker + code predictor -> codes ->
codec -> waveform, and intelligibility of the result through a recognizer.

This is what `rvqspec synthesize`, `rvqspec wer`, the notebooks, the SPADE evaluation and the main
job share. The inner loop is pluggable (`inner=`): the AR code predictor by default, or a
`SpeculativeCodePredictor` over the same weights.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.frame_loop import (FrameCompleter, SynthesisStats, codec_vocab_mask, synthesize_codes,
                                     teacher_forced_talker)
from rvqspec.core.sampling import Sampling, probs
from rvqspec.mini.codec import RVQCodec
from rvqspec.mini.phonemes import TOKENIZER_FILE, PhonemeTokenizer
from rvqspec.mini.recognizer import decoding_of, intelligibility_score, transcribe_scored

REPO_DATA = Path(__file__).resolve().parents[2] / "data" / "mini"


def default_data_dir() -> Path:
    """The committed artifacts of the embedded default (data/mini in the repository)."""
    return REPO_DATA


@dataclass
class Synthesis:
    text: str
    language: str
    seed: int
    audio: np.ndarray  # (samples,) float32 at `sample_rate`
    codes: torch.Tensor  # (T, 16) long
    stats: SynthesisStats
    sample_rate: int = 16000
    seconds: float = 0.0  # wall-clock of synthesis (codes only, without the codec decoder)


@dataclass
class MiniTTS:
    """The mini Qwen3-TTS: model (official layout), phoneme tokenizer, codec."""

    model: object  # rvqspec.core.checkpoint.Qwen3TTS
    tokenizer: object  # rvqspec.mini.phonemes.PhonemeTokenizer
    codec: object  # rvqspec.mini.codec.RVQCodec
    model_dir: Path | None = None
    _text_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, data_dir: str | Path | None = None, model_dir: str | Path | None = None,
             codec_dir: str | Path | None = None, dtype: torch.dtype = torch.float32) -> "MiniTTS":
        data_dir = Path(data_dir) if data_dir else default_data_dir()
        model_dir = Path(model_dir) if model_dir else data_dir / "model"
        codec_dir = Path(codec_dir) if codec_dir else data_dir / "codec"
        tok = model_dir / TOKENIZER_FILE
        if not tok.exists():
            raise FileNotFoundError(f"{tok}: the mini model's phoneme tokenizer is missing "
                                    f"(run `rvqspec mini build` or pass model_dir=)")
        model = load_qwen3_tts(model_dir, dtype=dtype)
        codec = RVQCodec.load(codec_dir)
        cb, k0 = int(codec.config.codebook_size), int(codec.config.level_sizes[0])
        if model.code_predictor.config.vocab_size != cb:
            raise ValueError(f"{model_dir}: code predictor vocab {model.code_predictor.config.vocab_size} != "
                             f"codec codebook_size {cb} ({codec_dir})")
        if model.talker.config.vocab_size < k0:
            raise ValueError(f"{model_dir}: talker codec vocab {model.talker.config.vocab_size} is smaller than "
                             f"the codec's {k0} level-0 codes ({codec_dir})")
        return cls(model=model, tokenizer=PhonemeTokenizer.load(tok), codec=codec, model_dir=model_dir)

    @property
    def talker(self):
        return self.model.talker

    @property
    def code_predictor(self):
        return self.model.code_predictor

    @property
    def codebook_size(self) -> int:
        """Level 0's codes: the talker's c0 vocabulary (the code predictor's is its config's vocab_size)."""
        return int(self.codec.config.level_sizes[0])

    def text_ids(self, text: str, language: str) -> torch.Tensor:
        """Frame-aligned phoneme tokens (T,) for `text` (espeak-ng timing; cached per text)."""
        key = (text, language)
        if key not in self._text_cache:
            ids, _ = self.tokenizer.phonemize(text, language)
            self._text_cache[key] = torch.as_tensor(np.asarray(ids), dtype=torch.long)
        return self._text_cache[key]

    @torch.inference_mode()
    def c0_law(self, text_ids, codes, sampling: Sampling = Sampling()) -> tuple[torch.Tensor, torch.Tensor]:
        """The talker's c0 reading of an utterance with the true code history (teacher-forced):
        (the deployed sampling law over the K codes (T, K) float64, greedy code (T,)) for frame
        tokens (T,) and codes (T, 16)."""
        text = torch.as_tensor(np.asarray(text_ids), dtype=torch.long)  # (T,)
        codes = torch.as_tensor(np.asarray(codes), dtype=torch.long)  # (T, 16)
        _, logits = teacher_forced_talker(self.talker, self.code_predictor, text.view(1, -1), codes.view(1, -1, 16))
        K = self.codebook_size
        law = probs(logits[0] + codec_vocab_mask(self.talker, K), sampling)[:, :K].double()  # (T, K)
        return law, logits[0, :, :K].argmax(-1)

    def synthesize(self, text: str, language: str = "en", seed: int = 0, sampling: Sampling = Sampling(),
                   inner: FrameCompleter | None = None, decode: bool = True) -> Synthesis:
        ids = self.text_ids(text, language)
        g = torch.Generator().manual_seed(seed)
        t0 = time.perf_counter()
        codes, stats = synthesize_codes(self.talker, self.code_predictor, ids, self.codebook_size,
                                        sampling=sampling, generator=g, inner=inner)
        seconds = time.perf_counter() - t0
        audio = self.codec.decode(codes) if decode else np.zeros(0, dtype=np.float32)
        return Synthesis(text=text, language=language, seed=seed, audio=np.asarray(audio, dtype=np.float32),
                         codes=codes, stats=stats, sample_rate=int(self.codec.config.sample_rate), seconds=seconds)


# per-clip scores kept: the rates, and the edit counts that sum to corpus rates (paired bootstraps)
CLIP_SCORES = ("per", "wer", "cer", "phoneme_errors", "ref_phonemes", "word_errors", "ref_words", "char_errors",
               "ref_chars")


def intelligibility(tts: MiniTTS, texts: Sequence[str], language: str, recognizer, seeds: Sequence[int] = (0,),
                    sampling: Sampling = Sampling(), inner: FrameCompleter | None = None,
                    progress: bool = True) -> dict:
    """Synthesize every text with every seed, transcribe, and score: PER (phoneme error rate against
    espeak-ng's phonemes of the text, the mini world's headline; None when the recognizer has no
    phoneme head), WER and CER (CER the headline for ja/zh as in seed 000 Table 3). Returns
    corpus-level rates plus per-clip rows."""
    clips, refs, hyps, phons = [], [], [], []
    items = [(t, s) for s in seeds for t in texts]
    for text, seed in tqdm(items, desc=f"synthesize+transcribe {language}", disable=not progress):
        syn = tts.synthesize(text, language, seed=seed, sampling=sampling, inner=inner)
        hyp, ph = transcribe_scored(recognizer, [syn.audio], syn.sample_rate, language)
        ph = None if ph is None else ph[0]
        clip_score = intelligibility_score([text], hyp, language, None if ph is None else [ph])
        clips.append(dict(text=text, seed=seed, hypothesis=hyp[0], frames=syn.stats.frames,
                          tokens_per_call=syn.stats.tokens_per_call, seconds=syn.seconds,
                          **{k: v for k, v in clip_score.items() if k in CLIP_SCORES},
                          **({} if ph is None else {"phonemes": " ".join(ph)})))
        refs.append(text)
        hyps.append(hyp[0])
        phons.append(ph)
    total = intelligibility_score(refs, hyps, language, None if any(p is None for p in phons) else phons)
    frames = sum(c["frames"] for c in clips)
    calls = sum(15 * c["frames"] / c["tokens_per_call"] for c in clips)
    return dict(language=language, n=len(clips), per=total["per"], wer=total["wer"], cer=total["cer"],
                decoding=decoding_of(recognizer, language),
                tokens_per_call=15 * frames / max(calls, 1e-9), clips=clips)
