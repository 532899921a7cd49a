"""Train the mini Qwen3-TTS model (talker + code predictor) on the mini corpus's codes.

The model is the exact Qwen3-TTS architecture at small size: a 4-layer talker of width
192 and a 3-layer code predictor of width 128, so `small_to_mtp_projection` is a real Linear as in
the 1.7B release. Both are trained jointly with teacher forcing on the Qwen3-TTS input scheme
(`rvqspec.core.frame_loop.talker_inputs`): cross-entropy on c0 from the talker's codec head plus cross-entropy
on c1..c15 from the code predictor, whose prefill is [talker hidden, emb(c0)] exactly as at
inference (the talker hidden carries gradient, as in the official sub-talker fine-tuning).
The result is saved in the official checkpoint layout, so `load_qwen3_tts` reads it exactly as it
reads a real checkpoint, with the phoneme tokenizer and the codec config beside it.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rvqspec.core.checkpoint import Qwen3TTS, load_qwen3_tts, save_qwen3_tts
from rvqspec.core.config import CodePredictorConfig, Qwen3TTSConfig, TalkerConfig
from rvqspec.core.frame_loop import teacher_forced_inner, teacher_forced_talker
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.mini.learned_codec import load_codec
from rvqspec.mini.phonemes import TOKENIZER_FILE, PhonemeTokenizer
from rvqspec.mini.predictor_refine import refine_code_predictor, talker_states
from rvqspec.mini.schedule import warmup_cosine
from rvqspec.mini.sound_groups import code_sound_groups, sound_group_loss
from rvqspec.mini.text_parts import factorize, materialize

NUM_SPECIAL_CODEC_TOKENS = 8  # pad, bos, eos, think, nothink, think_bos, think_eos, spare


@dataclass(frozen=True)
class MiniModelConfig:
    """Sizes and training recipe of the mini model (one place for every default)."""

    # talker (CodeDecoder)
    talker_hidden: int = 192
    talker_layers: int = 8  # depth for SPADE to prune (seed 001 halves the talker)
    talker_heads: int = 4
    talker_kv_heads: int = 2
    talker_mlp: int = 576
    text_hidden: int = 128
    # code predictor (MultiCodeDecoder) in the 0.6B layout: as wide as the talker (an identity
    # small_to_mtp_projection) with 5 layers; docs/design.md, gate R2
    cp_hidden: int = 192
    cp_layers: int = 5
    cp_heads: int = 4
    cp_kv_heads: int = 2
    cp_mlp: int = 576
    # training
    steps: int = 6000  # 0.5 s per step on one core in the 0.6B layout: the build's 2 h budget
    batch_utterances: int = 8
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    # Residual dropout in the talker's layers while training (CodeDecoder.residual_dropout): the
    # talker over-fits its text (validation c0 well above training at every gate scale). 0: none
    # (the v3 and v4 worlds' recipe).
    talker_dropout: float = 0.0
    # Weight of the sound-level term in the talker's c0 loss (rvqspec.mini.sound_groups): -log of
    # the c0 law's mass on the codes of the true code's sound, beside the plain cross-entropy.
    # 0: none (the v3 and v4 worlds' recipe).
    c0_sound_weight: float = 0.0
    cp_loss_weight: float = 1.0
    # Exposure bias through the residual channel: free-running, the talker reads its own predicted
    # c1..c15 of the previous frame, which the code predictor gets mostly wrong. With probability
    # `history_noise` a training frame's INPUT residuals c_k, k >= k0 (k0 uniform in 1..15), are
    # replaced by random codes, and with probability `c0_history_noise` its input c0 is (targets
    # stay the true codes), so the talker learns not to lean on them.
    history_noise: float = 0.5
    c0_history_noise: float = 0.1
    # The text stream leads the audio by this many frames (TalkerConfig.text_lead): espeak's
    # spectrum of a frame depends on the phoneme that follows, which a talker reading one token
    # per frame would otherwise only see after the frame.
    text_lead: int = 2
    # Train the text-embedding table as a sum of quarter-frame phoneme parts
    # (rvqspec.mini.text_parts): a rare pair token borrows from its phonemes' frames. The saved
    # table is the plain (V, D) one. False: one free row per token (the v3 world's recipe).
    text_parts: bool = True
    # corpus splits the model trains on: `model_train` (all six languages) and, by default, `train`
    # (English): the drafters' teacher-forced split. A real TTS model has usually heard its offset
    # training audio too (seed 000 trains offsets on VoxPopuli); calibration, validation and eval
    # stay unseen, so every acceptance and CER figure is measured on text the model never read.
    train_splits: tuple[str, ...] = ("model_train", "train")
    # Share of each step's draws given to a language, e.g. {"en": 0.5}: the named languages get these
    # shares, the others split the rest in proportion to their utterances (`draw_probabilities`).
    # Empty: every utterance equally likely (the v3 and v4 worlds' recipe, where English, the language
    # the targets are measured in, got about a fifth of the steps).
    language_share: dict = field(default_factory=dict)
    cp_frames: int = 128  # frames per step for the code-predictor loss (it dominates the compute)
    # After the joint steps: the code predictor alone for this many steps of `cp_frames` frames on
    # the frozen talker's cached states of the training frames (rvqspec.mini.predictor_refine; no
    # talker pass per step, about 3 steps per second on one core). 0: none (the v3 and v4 worlds' recipe).
    cp_refine_steps: int = 0
    cp_refine_lr: float = 1e-3
    max_frames: int = 80  # longer utterances are cropped to a random window
    seed: int = 0
    threads: int = 1  # 2 threads oversubscribe a shared 2-core machine
    # From step `late_threads_step` on, `late_threads` torch threads (0: `threads` throughout). The
    # build trains the recognizer beside the model's first steps, one core each (BuildConfig.parallel);
    # once it has finished the model can take both cores. A fixed step, not the recognizer's end, so
    # the model's arithmetic does not depend on how the build was scheduled.
    late_threads: int = 0
    late_threads_step: int = 0

    @classmethod
    def toy(cls) -> "MiniModelConfig":
        """Seconds on a CPU: for the CI smoke test of the whole recipe."""
        return cls(talker_hidden=32, talker_layers=1, talker_heads=2, talker_kv_heads=1, talker_mlp=64,
                   text_hidden=16, cp_hidden=16, cp_layers=1, cp_heads=2, cp_kv_heads=1, cp_mlp=32,
                   steps=20, batch_utterances=4, max_frames=32)


def model_config(cfg: MiniModelConfig, text_vocab_size: int, codebook_size: int,
                 level0_size: int | None = None) -> Qwen3TTSConfig:
    """The official-layout config of the mini model: codec control tokens sit after level 0's codes
    (`level0_size`, default codebook_size: the talker's c0 vocabulary); the code predictor's heads
    and embeddings have codebook_size codes (c1..c15)."""
    cb = level0_size or codebook_size
    t_head_dim = cfg.talker_hidden // cfg.talker_heads
    half = t_head_dim // 2
    # mrope sections must cover head_dim/2 frequencies; TTS passes one position to all three
    mrope = (half - 2 * (half // 3), half // 3, half // 3)
    talker = TalkerConfig(
        vocab_size=cb + NUM_SPECIAL_CODEC_TOKENS, hidden_size=cfg.talker_hidden, intermediate_size=cfg.talker_mlp,
        num_hidden_layers=cfg.talker_layers, num_attention_heads=cfg.talker_heads,
        num_key_value_heads=cfg.talker_kv_heads, head_dim=t_head_dim, max_position_embeddings=4096,
        mrope_section=mrope, text_vocab_size=text_vocab_size, text_hidden_size=cfg.text_hidden,
        text_lead=cfg.text_lead, text_lead_pad_id=0,  # 0 = the tokenizer's <pad> (rvqspec.mini.phonemes.PAD)
        codec_pad_id=cb, codec_bos_id=cb + 1, codec_eos_token_id=cb + 2, codec_think_id=cb + 3,
        codec_nothink_id=cb + 4, codec_think_bos_id=cb + 5, codec_think_eos_id=cb + 6)
    cp = CodePredictorConfig(
        vocab_size=codebook_size, hidden_size=cfg.cp_hidden, intermediate_size=cfg.cp_mlp, num_hidden_layers=cfg.cp_layers,
        num_attention_heads=cfg.cp_heads, num_key_value_heads=cfg.cp_kv_heads, head_dim=cfg.cp_hidden // cfg.cp_heads,
        max_position_embeddings=64, talker_hidden_size=cfg.talker_hidden)
    return Qwen3TTSConfig(talker=talker, code_predictor=cp, tts_model_type="mini", tts_model_size="mini",
                          tokenizer_type="rvqspec_phoneme")


def load_split(corpus_dir: Path, split: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(text ids per utterance (T,), codes per utterance (T, 16)) of one corpus split."""
    ds = datasets.load_from_disk(str(corpus_dir))
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise KeyError(f"{corpus_dir}: no split {split!r} (has {list(ds)})")
        ds = ds[split]
    else:
        ds = ds.filter(lambda s: s == split, input_columns="split", keep_in_memory=True)
    for col in ("phoneme_frames", "codes"):
        if col not in ds.column_names:
            raise KeyError(f"{corpus_dir}: column {col!r} is missing (has {ds.column_names})")
    texts, codes = [], []
    for row in ds.select_columns(["phoneme_frames", "codes"]):
        t = np.asarray(row["phoneme_frames"], dtype=np.int64)  # (T,)
        c = np.asarray(row["codes"], dtype=np.int64)  # (T, 16)
        if c.ndim != 2 or c.shape[1] != 16 or c.shape[0] != t.shape[0]:
            raise ValueError(f"{corpus_dir}: codes {c.shape} do not match phoneme_frames {t.shape}")
        texts.append(t)
        codes.append(c)
    if not texts:
        raise ValueError(f"{corpus_dir}: split {split!r} is empty")
    return texts, codes


def training_batch(texts, codes, idx, max_frames: int, rng: np.random.Generator, text_lead: int = 0):
    """Right-padded batch: text (B, T + text_lead), codes (B, T, 16), valid (B, T) bool. A crop keeps
    the text_lead text tokens that follow it (the talker reads text text_lead frames ahead)."""
    crops = []
    for i in idx:
        T = len(codes[i])
        s = int(rng.integers(0, T - max_frames + 1)) if T > max_frames else 0
        crops.append((texts[i][s:s + max_frames + text_lead], codes[i][s:s + max_frames]))
    T = max(len(c) for _, c in crops)
    tb = np.zeros((len(idx), T + text_lead), dtype=np.int64)  # (B, T + lead); 0 = <pad> = text_lead_pad_id
    cb = np.zeros((len(idx), T, 16), dtype=np.int64)  # (B, T, 16)
    vb = np.zeros((len(idx), T), dtype=bool)  # (B, T)
    for b, (t, c) in enumerate(crops):
        tb[b, :len(t)], cb[b, :len(c)], vb[b, :len(c)] = t, c, True
    return torch.from_numpy(tb), torch.from_numpy(cb), torch.from_numpy(vb)


def corrupt_history(codes: torch.Tensor, codebook_size: int, residual_p: float, c0_p: float,
                    generator: torch.Generator, level0_size: int | None = None) -> torch.Tensor:
    """A copy of codes (B, T, 16) for the talker's input: per frame, with probability residual_p
    the codes of levels k0..15 (k0 uniform in 1..15) become random, and with probability c0_p c0
    does (see MiniModelConfig.history_noise); a random c0 is one of `level0_size` codes."""
    B, T, n = codes.shape
    out = codes.clone()
    rand = torch.randint(0, codebook_size, codes.shape, generator=generator)  # (B, T, 16)
    if level0_size and level0_size != codebook_size:  # a larger level 0 (CodecConfig.level0_codebook_size)
        rand[..., 0] = torch.randint(0, level0_size, (B, T), generator=generator)
    k0 = torch.randint(1, n, (B, T, 1), generator=generator)  # (B, T, 1)
    hit = torch.rand(B, T, 1, generator=generator) < residual_p  # (B, T, 1)
    level = torch.arange(n).view(1, 1, n)  # (1, 1, 16)
    swap = hit & (level >= k0)  # (B, T, 16)
    swap[..., 0] = torch.rand(B, T, generator=generator) < c0_p
    out[swap] = rand[swap]
    return out


def losses(talker: CodeDecoder, cp: MultiCodeDecoder, text: torch.Tensor, codes: torch.Tensor,
           valid: torch.Tensor, cp_frames: int | None = None, generator: torch.Generator | None = None,
           input_codes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced (c0 loss, c1..c15 loss) of one batch: text (B, T), codes (B, T, 16), valid (B, T).
    The code-predictor loss uses at most `cp_frames` random frames of the batch. `input_codes`
    (B, T, 16): what the talker reads as the previous frames' codes (default: codes)."""
    hidden, logits = teacher_forced_talker(talker, cp, text, codes if input_codes is None else input_codes)
    return losses_from_talker(cp, hidden, logits, codes, valid, cp_frames, generator)


def losses_from_talker(cp: MultiCodeDecoder, hidden: torch.Tensor, logits: torch.Tensor, codes: torch.Tensor,
                       valid: torch.Tensor, cp_frames: int | None = None,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`losses` given the talker's output over the T frames: hidden (B, T, E) after the final norm and
    c0 logits (B, T, V). SPADE's distillation passes its own traced forward here, so the student
    runs once per step."""
    loss_c0 = F.cross_entropy(logits[valid], codes[..., 0][valid])
    h = hidden[valid].unsqueeze(1)  # (N, 1, E): one code-predictor sequence per real frame
    fc = codes[valid]  # (N, 16)
    if cp_frames is not None and h.shape[0] > cp_frames:
        keep = torch.randperm(h.shape[0], generator=generator)[:cp_frames]
        h, fc = h[keep], fc[keep]
    # prefill [h_talker, emb(c0)] then emb(c1..c14): the whole inner loop teacher-forced at once
    hid = teacher_forced_inner(cp, h[:, 0], fc, differentiable=True)  # (N, 15, H)
    cp_logits = cp.lm_logits(hid, torch.arange(15))  # (N, 15, V): head p-1 at position p emits c_p
    loss_cp = F.cross_entropy(cp_logits.reshape(-1, cp_logits.shape[-1]), fc[:, 1:].reshape(-1))
    return loss_c0, loss_cp


def train_mini_model(corpus_dir: str | Path, codec_dir: str | Path, out_dir: str | Path, toy: bool = False,
                     config: MiniModelConfig | None = None, tokenizer_path: str | Path | None = None,
                     init_dir: str | Path | None = None) -> dict:
    """Train the mini model and save it in the official layout at out_dir. Returns metrics.
    `init_dir`: continue from that checkpoint's weights (same sizes) instead of a random init."""
    cfg = config or (MiniModelConfig.toy() if toy else MiniModelConfig())
    corpus_dir, codec_dir, out_dir = Path(corpus_dir), Path(codec_dir), Path(out_dir)
    torch.set_num_threads(cfg.threads)
    tok_path = Path(tokenizer_path) if tokenizer_path else _find_tokenizer(corpus_dir)
    tokenizer = PhonemeTokenizer.load(tok_path)
    codec = load_codec(codec_dir)  # k-means or learned: the model only needs its codebook size
    cb, k0 = int(codec.config.codebook_size), int(codec.config.level_sizes[0])  # residual codes, c0's
    qcfg = model_config(cfg, tokenizer.vocab_size, cb, k0)
    texts, codes = load_splits(corpus_dir, cfg.train_splits)
    draw_p = (draw_probabilities(load_languages(corpus_dir, cfg.train_splits), cfg.language_share)
              if cfg.language_share else None)  # (N,) or uniform
    if max(int(c[:, 1:].max()) for c in codes) >= cb or max(int(c[:, 0].max()) for c in codes) >= k0:
        raise ValueError(f"{corpus_dir}: codes exceed the codec's codebook sizes (c0 {k0}, c1..c15 {cb})")

    groups = code_sound_groups(texts, codes, tokenizer.tokens, k0) if cfg.c0_sound_weight else None  # (K,)
    g = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    talker, cp = CodeDecoder(qcfg.talker), MultiCodeDecoder(qcfg.code_predictor)
    cp.set_c0_embedding(talker.model.codec_embedding)
    talker.residual_dropout = cfg.talker_dropout
    if init_dir is not None:
        init = load_qwen3_tts(init_dir)
        talker.load_state_dict(init.talker.state_dict())
        cp.load_state_dict(init.code_predictor.state_dict())
    if cfg.text_parts:
        factorize(talker.model.text_embedding, tokenizer.tokens, g)
    params = list(talker.parameters()) + list(cp.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(cfg.warmup_steps, cfg.steps))
    rng = np.random.default_rng(cfg.seed)
    t0 = time.time()
    history = []
    bar = tqdm(range(cfg.steps), desc="mini model", unit="step")
    for step in bar:
        if cfg.late_threads and step == cfg.late_threads_step:
            torch.set_num_threads(cfg.late_threads)
        idx = rng.choice(len(texts), size=min(cfg.batch_utterances, len(texts)), replace=False, p=draw_p)
        text, code, valid = training_batch(texts, codes, idx, cfg.max_frames, rng, cfg.text_lead)
        noisy = (corrupt_history(code, cb, cfg.history_noise, cfg.c0_history_noise, g, k0)
                 if cfg.history_noise or cfg.c0_history_noise else None)
        hidden, logits = teacher_forced_talker(talker, cp, text, code if noisy is None else noisy)
        l0, lc = losses_from_talker(cp, hidden, logits, code, valid, cfg.cp_frames, g)
        loss = l0 + cfg.cp_loss_weight * lc
        if cfg.c0_sound_weight:
            loss = loss + cfg.c0_sound_weight * sound_group_loss(logits[valid], code[..., 0][valid], groups)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        history.append((l0.item(), lc.item()))
        if step % 20 == 0:
            bar.set_postfix(c0=f"{l0.item():.3f}", cp=f"{lc.item():.3f}")
    talker.eval(), cp.eval()
    materialize(talker.model.text_embedding)
    refined = {}
    if cfg.cp_refine_steps:
        refined = _refine_on_frozen_talker(talker, cp, texts, codes, cfg.cp_refine_steps, cfg, g)
    val = validation_loss(talker, cp, corpus_dir)
    metrics = dict(train_seconds=round(time.time() - t0, 1), steps=cfg.steps,
                   final_train_loss_c0=float(np.mean([h[0] for h in history[-50:]])),
                   final_train_loss_cp=float(np.mean([h[1] for h in history[-50:]])), **refined, **val)
    _save_model_folder(Qwen3TTS(talker=talker, code_predictor=cp, config=qcfg, path=None), tokenizer, out_dir,
                       dict(config=asdict(cfg), codebook_size=cb, **({"level0_codebook_size": k0} if k0 != cb else {}),
                            codec=str(codec_dir), metrics=metrics,
                            init_from=str(init_dir) if init_dir else None))
    return metrics


def load_splits(corpus_dir: Path, splits) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """load_split of each split, concatenated in order: (text ids (T,), codes (T, 16)) per utterance."""
    texts, codes = [], []
    for split in splits:
        t, c = load_split(corpus_dir, split)
        texts += t
        codes += c
    return texts, codes


def load_languages(corpus_dir: Path, splits) -> list[str]:
    """The language of each utterance of `splits`, in load_splits' order."""
    ds = datasets.load_from_disk(str(corpus_dir))
    return [lang for split in splits for lang in ds[split]["language"]]


def draw_probabilities(languages: list[str], share: dict) -> np.ndarray:
    """Per-utterance draw probabilities (N,) that give each language in `share` that share of the
    draws and the other languages the rest, in proportion to their utterance counts; within a
    language every utterance is equally likely."""
    langs = np.asarray(languages)
    named = {lang: float(w) for lang, w in share.items()}
    missing = [lang for lang in named if not (langs == lang).any()]
    if missing:
        raise ValueError(f"language_share names {missing}, which the training splits do not have")
    if any(w < 0 for w in named.values()) or sum(named.values()) > 1:
        raise ValueError(f"language_share {named}: shares must be >= 0 and sum to at most 1")
    rest = ~np.isin(langs, list(named))
    p = np.zeros(len(langs))  # (N,)
    for lang, w in named.items():
        mask = langs == lang
        p[mask] = w / mask.sum()
    if rest.any():
        p[rest] = (1.0 - sum(named.values())) / rest.sum()
    elif not np.isclose(sum(named.values()), 1.0):
        raise ValueError(f"language_share {named} names every language but sums to {sum(named.values())}, not 1")
    return p / p.sum()


def _refine_on_frozen_talker(talker, cp, texts, codes, steps: int, cfg: MiniModelConfig,
                             g: torch.Generator) -> dict:
    """The code predictor alone for `steps` steps on the frozen talker's teacher-forced states."""
    talker.requires_grad_(False)  # frozen: its codec embedding is the predictor's c0 table, too
    hidden, frame_codes = talker_states(talker, cp, texts, codes)  # (N, E), (N, 16)
    return refine_code_predictor(cp, hidden, frame_codes, steps, cfg.cp_frames, cfg.cp_refine_lr,
                                 cfg.weight_decay, g)


def _save_model_folder(model: Qwen3TTS, tokenizer: PhonemeTokenizer, out_dir: Path, meta: dict) -> None:
    """The official layout plus tokenizer and mini_model.json, written to a temp folder, then renamed."""
    tmp = out_dir.with_name(out_dir.name + ".tmp-save")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_qwen3_tts(model, tmp)
    tokenizer.save(tmp / TOKENIZER_FILE)
    (tmp / "mini_model.json").write_text(json.dumps(meta, indent=2))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)


@torch.no_grad()
def validation_loss(talker, cp, corpus_dir: Path, split: str = "validation", limit: int = 64) -> dict:
    """Teacher-forced losses on held-out English text (nats per code)."""
    try:
        texts, codes = load_split(corpus_dir, split)
    except (KeyError, ValueError):
        return {}
    rng = np.random.default_rng(0)
    idx = np.arange(min(limit, len(texts)))
    text, code, valid = training_batch(texts, codes, idx, 10_000, rng, talker.config.text_lead)
    l0, lc = losses(talker, cp, text, code, valid)
    return dict(val_loss_c0=float(l0), val_loss_cp=float(lc))


def _find_tokenizer(corpus_dir: Path) -> Path:
    for cand in (corpus_dir / TOKENIZER_FILE, corpus_dir.parent / TOKENIZER_FILE,
                 corpus_dir.parent / "tokenizer" / TOKENIZER_FILE):
        if cand.exists():
            return cand
    raise FileNotFoundError(f"no {TOKENIZER_FILE} next to {corpus_dir}; pass tokenizer_path=")


def refine_saved_model(model_dir: str | Path, corpus_dir: str | Path, out_dir: str | Path, steps: int,
                       lr: float | None = None, frames: int | None = None, seed: int | None = None,
                       threads: int | None = None) -> dict:
    """The build's refinement (MiniModelConfig.cp_refine_steps) applied to a trained model: the
    saved talker frozen, its code predictor trained `steps` more steps on the cached states of the
    model's own training splits. Writes a complete model folder at out_dir (temp folder, then
    rename) whose mini_model.json records the refinement; the talker's weights are unchanged."""
    model_dir, corpus_dir, out_dir = Path(model_dir), Path(corpus_dir), Path(out_dir)
    if out_dir.resolve() == model_dir.resolve():
        raise ValueError(f"{out_dir}: write the refined model to a new folder, not over --model")
    meta_file = model_dir / "mini_model.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{meta_file}: not a mini model folder (no mini_model.json)")
    meta = json.loads(meta_file.read_text())
    known = set(MiniModelConfig.__dataclass_fields__)
    rec = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items() if k in known}
    base = MiniModelConfig(**rec)
    cfg = replace(base, cp_refine_steps=base.cp_refine_steps + steps,
                  cp_refine_lr=base.cp_refine_lr if lr is None else lr,
                  cp_frames=base.cp_frames if frames is None else frames)
    seed = base.seed if seed is None else seed
    torch.set_num_threads(threads or base.threads)
    model = load_qwen3_tts(model_dir)
    talker, cp = model.talker, model.code_predictor
    talker.eval()
    texts, codes = load_splits(corpus_dir, cfg.train_splits)
    g = torch.Generator().manual_seed(seed)
    refined = _refine_on_frozen_talker(talker, cp, texts, codes, steps, cfg, g)
    metrics = {**meta.get("metrics", {}), **refined, "cp_refine_steps": cfg.cp_refine_steps,
               **validation_loss(talker, cp, corpus_dir)}
    _save_model_folder(Qwen3TTS(talker=talker, code_predictor=cp, config=model.config, path=None),
                       PhonemeTokenizer.load(model_dir / TOKENIZER_FILE), out_dir,
                       dict(meta, config=asdict(cfg), metrics=metrics, refined_from=str(model_dir),
                            refine_seed=seed))
    return metrics
