"""A tiny random *official* Qwen3-TTS model (qwen_tts 0.1.1 classes) that can run the official
`Qwen3TTSForConditionalGeneration.generate` end to end on CPU, plus fakes for the two components
that cannot be had here (the text processor and the 12 Hz speech tokenizer).

Why the sizes: the official generate suppresses talker ids [vocab - 1024, vocab) except EOS, so
the talker vocabulary is 1024 + codebook; every special codec id sits in that suppressed band.
"""
from __future__ import annotations

import numpy as np
import torch

CODEBOOK = 16            # talker c0 values and code-predictor vocabulary (c1..c15)
TEXT_VOCAB = 64
IM_START, IM_END, TTS_PAD, TTS_BOS, TTS_EOS = 58, 59, 60, 61, 62
SPEAKER, LANGUAGE = "alice", "english"


def official_config(C, talker_hidden: int = 32, cp_hidden: int = 32, cp_layers: int = 2, model_type="custom_voice"):
    cb = CODEBOOK
    return C.Qwen3TTSConfig(
        talker_config=dict(
            hidden_size=talker_hidden, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8,
            rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 2], "interleaved": False},
            rope_theta=10000, text_vocab_size=TEXT_VOCAB, text_hidden_size=24, vocab_size=1024 + cb,
            num_code_groups=16, codec_pad_id=cb, codec_bos_id=cb + 1, codec_eos_token_id=cb + 2,
            codec_think_id=cb + 6, codec_nothink_id=cb + 7, codec_think_bos_id=cb + 8, codec_think_eos_id=cb + 9,
            spk_id={SPEAKER: cb + 20}, spk_is_dialect={SPEAKER: False}, codec_language_id={LANGUAGE: cb + 30},
            code_predictor_config=dict(
                vocab_size=cb, hidden_size=cp_hidden, intermediate_size=64, num_hidden_layers=cp_layers,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_code_groups=16)),
        tts_model_type=model_type, tts_model_size="tiny", im_start_token_id=IM_START, im_end_token_id=IM_END,
        tts_pad_token_id=TTS_PAD, tts_bos_token_id=TTS_BOS, tts_eos_token_id=TTS_EOS)


def tiny_official(seed: int = 0, head_scale: float = 8.0, **kw):
    """Random official model; predictor heads sharpened so sampling tests have power and drafts
    are sometimes accepted; EOS kept from winning early."""
    from rvqspec.real.official import import_official

    M, C = import_official()
    torch.manual_seed(seed)
    model = M.Qwen3TTSForConditionalGeneration(official_config(C, **kw)).eval()
    with torch.no_grad():
        for head in model.talker.code_predictor.lm_head:
            head.weight.mul_(head_scale)
        model.talker.codec_head.weight.mul_(4.0)
        # EOS logit 0: it loses to any positive code logit, so utterances usually run to max_new_tokens
        model.talker.codec_head.weight[model.config.talker_config.codec_eos_token_id].zero_()
    return model


class FakeProcessor:
    """Stands in for the Qwen2 text processor: the chat markers and 'assistant' become single
    tokens (so the official slicing [:, :3], [:, 3:-5] lands where it should), other characters map
    to ids 3..57."""

    def __call__(self, text: str, return_tensors: str = "pt", padding: bool = True):
        ids, i = [], 0
        marks = {"<|im_start|>": IM_START, "<|im_end|>": IM_END, "assistant": 1, "user": 2}
        while i < len(text):
            for m, tok in marks.items():
                if text.startswith(m, i):
                    ids.append(tok)
                    i += len(m)
                    break
            else:
                ids.append(0 if text[i] == "\n" else 3 + ord(text[i]) % 55)
                i += 1
        return {"input_ids": torch.tensor([ids])}


class FakeSpeechTokenizer:
    """decode(codes) -> the codes themselves as a float 'waveform', so comparing wavs compares codes."""

    def decode(self, items):
        return [np.asarray(it["audio_codes"].cpu(), dtype=np.float32).ravel() for it in items], 24000


def wrapper(model):
    """The official user-facing `qwen_tts.Qwen3TTSModel` around `model`, with the fakes above."""
    from rvqspec.real.official import import_official

    import_official()
    from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel

    model.speech_tokenizer = FakeSpeechTokenizer()
    return Qwen3TTSModel(model=model, processor=FakeProcessor(), generate_defaults={})
