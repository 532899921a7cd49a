"""A seconds-fast stand-in for the mini world, for the listening / report / explorer tests.

The talker and code predictor are tiny random models driven by the real frame loop
(`rvqspec.core.frame_loop.synthesize_codes`) and, when asked, the real `SpeculativeCodePredictor`; only the
text front end (character ids instead of espeak-ng phonemes), the codec (a tone per frame from its
codes) and the recognizer (returns the reference, with one word dropped when the first code of
the clip is odd) are fakes.
"""
from __future__ import annotations

import numpy as np
import torch

from rvqspec.mini.pipeline import Synthesis
from rvqspec.mini.talker_train import MiniModelConfig, model_config
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.core.sampling import Sampling
from rvqspec.core.frame_loop import synthesize_codes

CODEBOOK = 16
RATE = 16000
HOP = 1280  # 80 ms frames at 16 kHz


class FakeTTS:
    def __init__(self, seed: int = 0):
        torch.manual_seed(seed)
        cfg = model_config(MiniModelConfig.toy(), text_vocab_size=40, codebook_size=CODEBOOK)
        self.talker, self.code_predictor = CodeDecoder(cfg.talker).eval(), MultiCodeDecoder(cfg.code_predictor).eval()
        self.code_predictor.set_c0_embedding(self.talker.model.codec_embedding)
        with torch.no_grad():  # peaked distributions, so drafts are sometimes accepted
            for h in self.code_predictor.lm_head:
                h.weight.mul_(4.0)

    def text_ids(self, text: str, language: str) -> torch.Tensor:
        return torch.tensor([ord(c) % 40 for c in text[:12]] or [0], dtype=torch.long)

    def synthesize(self, text, language="en", seed=0, sampling=Sampling(), inner=None, decode=True):
        g = torch.Generator().manual_seed(seed)
        codes, stats = synthesize_codes(self.talker, self.code_predictor, self.text_ids(text, language), CODEBOOK,
                                        sampling=sampling, generator=g, inner=inner)
        t = np.arange(HOP) / RATE
        audio = np.concatenate([0.3 * np.sin(2 * np.pi * (200 + 40 * int(f[0]) + 5 * int(f[1:].sum())) * t)
                                for f in codes]).astype(np.float32)
        return Synthesis(text=text, language=language, seed=seed, audio=audio, codes=codes, stats=stats,
                         sample_rate=RATE, seconds=0.01)


class FakeRecognizer:
    def transcribe(self, audios, sampling_rate, language):
        return ["fake transcript" for _ in audios]


def spec_inner(tts: FakeTTS, budget: int = 6):
    from rvqspec.core.drafters import PositionOffsets
    from rvqspec.core.speculative import SpeculativeCodePredictor
    from rvqspec.core.tree import SparseTree

    acc = np.array([[0.6, 0.2, 0.1], [0.5, 0.15, 0.05], [0.4, 0.1, 0.05]])
    cp = tts.code_predictor
    drafter = PositionOffsets(3, cp.config.hidden_size, cp.config.vocab_size)
    return SpeculativeCodePredictor(cp, drafter, SparseTree.grow(acc, budget=budget, max_depth=3))
