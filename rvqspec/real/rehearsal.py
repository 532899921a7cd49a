"""A tiny *official* Qwen3-TTS checkpoint and tiny corpora, to rehearse the real-weights runbook.

`write_tiny_checkpoint(dir)` writes the file set a published checkpoint has (docs/real_weights.md,
"Pre-flight"), every part made here with random weights and nothing downloaded:

    config.json, model.safetensors        Qwen3TTSForConditionalGeneration (qwen-tts 0.1.1 classes)
    generation_config.json                the official sampling defaults (subtalker top-k 50, T 0.9)
    vocab.json, merges.txt, tokenizer*    a Qwen2-style byte-level BPE trained here on a few sentences,
                                          with the chat markers as special tokens
    speech_tokenizer/                     the 12 Hz speech tokenizer (Qwen3TTSTokenizerV2Model: a Mimi
                                          encoder, 16 codebooks at 12.5 frames/s, 24 kHz) with random weights

so the default code paths run: the checkpoint's own text tokenizer, `--codec` defaulting to
`<model>/speech_tokenizer`, and `qwen_tts.Qwen3TTSModel.from_pretrained` (the runbook's snippet).
Sizes are tiny (talker hidden 32, codebook 16) so every step runs on a CPU in seconds.

`write_tiny_corpora(dir)` writes the three corpora of seed Table 1 in their documented layouts:
VoxPopuli-like `save_to_disk` (train/validation), LibriSpeech-like hub parquet
(`test.clean-00000-of-00001.parquet` beside a train file) and Fleurs-like refs/convert/parquet
(`<lang>/{train,test}/0000.parquet`, six languages), so `--split` matters in each.
"""
from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import datasets
import numpy as np
import soundfile as sf
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from rvqspec.real.official import import_official

CODEBOOK = 16                 # talker c0 values, code-predictor vocabulary and speech-tokenizer bins
SPEAKER = "ryan"              # the CustomVoice speaker the runbook names ("Ryan"; the wrapper lower-cases)
LANGUAGES = {"en": "english", "de": "german", "es": "spanish", "ru": "russian", "ja": "japanese", "zh": "chinese"}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>"]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "Hello there, how are you today?",
    "assistant user assistant user", "Der schnelle braune Fuchs.", "El zorro marron rapido.",
    "Быстрая коричневая лиса.", "素早い茶色の狐。", "敏捷的棕色狐狸。", "One, two, three: the end!",
]
RATE = 16000                  # corpus audio rate (the speech tokenizer resamples to 24 kHz)


def text_tokenizer(vocab_size: int = 400):
    """A Qwen2TokenizerFast trained here: byte-level BPE with Qwen2's pre-tokenizer regex and the
    chat markers as single special tokens. 'assistant' and newline must each be one token: the
    official prompt builder slices the formatted text at fixed token offsets ([:, :3], [:, 3:-5])."""
    from transformers import Qwen2TokenizerFast

    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SENTENCES * 20 + ["assistant\n"] * 50, trainer=trainer)
    fast = Qwen2TokenizerFast(tokenizer_object=tok, unk_token=None, bos_token=None, eos_token="<|endoftext|>",
                              pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    ids = fast("<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    head, tail = fast.convert_ids_to_tokens(ids[:3]), fast.convert_ids_to_tokens(ids[-5:])
    if head[0] != "<|im_start|>" or head[2] != "Ċ" or tail[0] != "<|im_end|>" or len(set(tail[1:])) != 3:
        raise RuntimeError(f"tiny text tokenizer splits the chat markers wrongly: {head} ... {tail}")
    return fast


def speech_tokenizer(seed: int = 0):
    """A randomly initialised 12 Hz speech tokenizer (Qwen3TTSTokenizerV2Model) at the real frame
    rate (24 kHz in, 1920 samples per frame) with 16 codebooks of CODEBOOK bins."""
    import_official()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    # Mimi encoder: ratios 8*6*5*4 = 960 then a stride-2 downsample = 1920 samples per 12.5 Hz frame
    enc = dict(hidden_size=16, num_filters=4, num_residual_layers=1, upsampling_ratios=[8, 6, 5, 4], kernel_size=7,
               last_kernel_size=3, residual_kernel_size=3, dilation_growth_rate=2, codebook_size=CODEBOOK,
               codebook_dim=8, num_quantizers=16, num_semantic_quantizers=1, num_hidden_layers=1,
               num_attention_heads=2, num_key_value_heads=2, head_dim=8, intermediate_size=32, sliding_window=16,
               frame_rate=12.5, sampling_rate=24000, upsample_groups=16, vector_quantization_hidden_dimension=8)
    # decoder: upsample_rates 8*5*4*3 = 480 times upsampling_ratios 2*2 = 1920 samples per frame
    dec = dict(codebook_size=CODEBOOK, codebook_dim=16, hidden_size=16, latent_dim=16, num_attention_heads=2,
               num_key_value_heads=2, head_dim=8, intermediate_size=32, num_hidden_layers=1, num_quantizers=16,
               decoder_dim=16, sliding_window=8)
    cfg = Qwen3TTSTokenizerV2Config(encoder_config=enc, decoder_config=dec, encoder_valid_num_quantizers=16)
    torch.manual_seed(seed)
    model = Qwen3TTSTokenizerV2Model(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # codebooks start as zero sums (k-means fills them in training), so every frame would get
        # code 0 in every group; random centroids make the codes a function of the audio
        for name, buf in list(model.named_buffers()) + list(model.named_parameters()):
            if name.endswith(("embed_sum", "embedding_sum")):
                buf.copy_(torch.randn(buf.shape, generator=g))  # (CODEBOOK, dim)
            elif name.endswith("initialized"):
                buf.fill_(1)
    return model


def official_config(text_vocab: int, ids: dict, model_type: str = "custom_voice"):
    """Tiny Qwen3TTSConfig. The talker vocabulary is 1024 + CODEBOOK because the official generate
    suppresses ids [vocab - 1024, vocab) except EOS: every special codec id sits in that band."""
    _, C = import_official()
    cb = CODEBOOK
    return C.Qwen3TTSConfig(
        talker_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 2], "interleaved": False},
            rope_theta=10000, text_vocab_size=text_vocab, text_hidden_size=24, vocab_size=1024 + cb,
            num_code_groups=16, codec_pad_id=cb, codec_bos_id=cb + 1, codec_eos_token_id=cb + 2,
            codec_think_id=cb + 6, codec_nothink_id=cb + 7, codec_think_bos_id=cb + 8, codec_think_eos_id=cb + 9,
            spk_id={SPEAKER: cb + 20}, spk_is_dialect={SPEAKER: False},
            codec_language_id={name: cb + 30 + i for i, name in enumerate(LANGUAGES.values())},
            code_predictor_config=dict(vocab_size=cb, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_code_groups=16)),
        tts_model_type=model_type, tts_model_size="0b6", tokenizer_type="qwen3_tts_tokenizer_12hz",
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"], tts_pad_token_id=ids["<tts_pad>"],
        tts_bos_token_id=ids["<tts_text_bos>"], tts_eos_token_id=ids["<tts_text_eod>"])


# what the published checkpoints ship as generation_config.json (qwen_tts reads it in from_pretrained)
GENERATION_CONFIG = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
                     "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0,
                     "subtalker_temperature": 0.9, "max_new_tokens": 40}


def write_tiny_checkpoint(out: str | os.PathLike, seed: int = 0) -> Path:
    """The tiny official checkpoint in the published layout (module docstring) -> its directory."""
    from transformers import EncodecFeatureExtractor

    M, _ = import_official()
    from qwen_tts.core.models.processing_qwen3_tts import Qwen3TTSProcessor

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tok = text_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    torch.manual_seed(seed)
    model = M.Qwen3TTSForConditionalGeneration(official_config(len(tok), ids)).eval()
    with torch.no_grad():
        for head in model.talker.code_predictor.lm_head:  # sharper heads: drafts are sometimes accepted
            head.weight.mul_(8.0)
        model.talker.codec_head.weight.mul_(4.0)
        # EOS logit 0: it loses to any positive code logit, so utterances run to max_new_tokens
        model.talker.codec_head.weight[model.config.talker_config.codec_eos_token_id].zero_()
    model.save_pretrained(str(d))
    cfg_path = d / "config.json"
    raw = json.loads(cfg_path.read_text())
    sec = raw.get("speaker_encoder_config")
    if isinstance(sec, dict) and sec.get("model_type") == "":
        # save_pretrained writes model_type "" there, which the config class rejects on load
        raw["speaker_encoder_config"] = {k: v for k, v in sec.items() if k != "model_type"}
    cfg_path.write_text(json.dumps(raw, indent=2))
    (d / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    Qwen3TTSProcessor(tokenizer=tok).save_pretrained(str(d))
    st = d / "speech_tokenizer"
    speech_tokenizer(seed).save_pretrained(str(st))
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24000, padding_value=0.0).save_pretrained(str(st))
    return d


# --------------------------------------------------------------------------------------------
# corpora
# --------------------------------------------------------------------------------------------
def _audio(i: int, seconds: float) -> np.ndarray:
    """A deterministic 'utterance': a few tones with an envelope plus noise, (n,) float32 at RATE."""
    g = np.random.default_rng(i)
    t = np.arange(int(RATE * seconds)) / RATE  # (n,)
    f = g.uniform(120, 400, size=3)  # (3,)
    env = np.sin(np.pi * t / seconds) ** 2  # (n,)
    wav = env * sum(np.sin(2 * np.pi * fi * t) for fi in f) / 3 + 0.02 * g.standard_normal(t.size)
    return (0.3 * wav).astype(np.float32)


def _wav_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, a, RATE, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def _dataset(columns: dict, seeds: list[int], seconds: list[float], class_labels: dict | None = None):
    feats = {k: datasets.Value("string") if isinstance(v[0], str) else datasets.Value("int64")
             for k, v in columns.items()}
    for k, names in (class_labels or {}).items():
        feats[k] = datasets.ClassLabel(names=names)
    # stored as the Audio feature stores it (bytes/path), then cast: Audio.encode_example needs torchcodec
    feats["audio"] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    rows = dict(columns, audio=[{"bytes": _wav_bytes(_audio(s, sec)), "path": None} for s, sec in zip(seeds, seconds)])
    return datasets.Dataset.from_dict(rows, features=datasets.Features(feats)).cast_column(
        "audio", datasets.Audio(decode=False))


def write_tiny_corpora(out: str | os.PathLike, train: int = 24, calibration: int = 8, eval_per_language: int = 2,
                       seconds: tuple[float, float] = (0.6, 1.4)) -> dict:
    """VoxPopuli-, LibriSpeech- and Fleurs-like corpora in their documented layouts (module docstring)."""
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    lo, hi = seconds
    dur = lambda i, n: lo + (hi - lo) * (i % max(n, 1)) / max(n - 1, 1)
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(max(train, calibration))]

    n = train
    vox = _dataset({"audio_id": [f"vp{i:04d}" for i in range(n)], "raw_text": texts[:n],
                    "normalized_text": [t.lower() for t in texts[:n]], "language": [0] * n},
                   list(range(n)), [dur(i, n) for i in range(n)], class_labels={"language": ["en", "de"]})
    datasets.DatasetDict({"train": vox, "validation": vox.select(range(min(2, n)))}).save_to_disk(str(o / "voxpopuli_en"))

    n = calibration
    libri = _dataset({"id": [f"ls-{i:04d}" for i in range(n)], "text": [t.upper() for t in texts[:n]]},
                     [1000 + i for i in range(n)], [dur(i, n) for i in range(n)])
    (o / "librispeech" / "all").mkdir(parents=True, exist_ok=True)
    libri.to_parquet(str(o / "librispeech" / "all" / "test.clean-00000-of-00001.parquet"))
    libri.select([0]).to_parquet(str(o / "librispeech" / "all" / "train.clean.100-00000-of-00001.parquet"))

    n = eval_per_language
    counts = {}
    for k, (iso, name) in enumerate(LANGUAGES.items()):
        fl_texts = [SENTENCES[(3 * k + i) % len(SENTENCES)] for i in range(n)]
        for split, base in (("test", 2000), ("train", 3000)):
            rows = n if split == "test" else 1
            ds = _dataset({"id": [100 * k + i for i in range(rows)], "raw_transcription": fl_texts[:rows],
                           "transcription": [t.lower() for t in fl_texts[:rows]],
                           "language": [name.capitalize()] * rows},
                          [base + 100 * k + i for i in range(rows)], [dur(i, n) for i in range(rows)])
            (o / "fleurs" / f"{iso}_xx" / split).mkdir(parents=True, exist_ok=True)
            ds.to_parquet(str(o / "fleurs" / f"{iso}_xx" / split / "0000.parquet"))
        counts[iso] = n
    return {"voxpopuli_en": train, "librispeech": calibration, "fleurs": counts, "out": str(o)}


def main(argv: list[str] | None = None) -> None:
    """`python -m rvqspec.real.rehearsal DIR`: DIR/model (the checkpoint) and DIR/data (the corpora)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rvqspec.real.rehearsal DIR", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(1)
    root = Path(args[0])
    model = write_tiny_checkpoint(root / "model")
    print(json.dumps({"model": str(model), "corpora": write_tiny_corpora(root / "data", eval_per_language=1)}))


if __name__ == "__main__":
    main()
