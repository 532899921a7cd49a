"""A small learned codec for the mini world, in the spirit of Qwen3-TTS's 12 Hz tokenizer (a Mimi-style
neural codec): a temporal convolutional encoder, residual vector quantization trained with
quantizer dropout and dead-code resets, level 0 tied to phonetic content, a convolutional decoder.

Same frame layout as `rvqspec.mini.codec.RVQCodec` (12.5 Hz x 16 codes, log-mel analysis of
`subframes` sub-frames per frame) and the same synthesis (its Griffin-Lim path), so only the
quantized representation differs:

- encoder: frames of stacked log-mel (T, S*M), scaled by one global mean/std, -> Conv1d over frames
  (kernel 3, two layers: each frame sees 2 neighbours on each side) -> latent z (T, D);
- RVQ: codebook q quantizes the residual left by 0..q-1 (greedy nearest code). Codebooks are EMA
  k-means updates of their assignments (van den Oord et al. 2017, appendix), the encoder gets the
  straight-through gradient plus a commitment loss. Quantizer dropout (SoundStream, Zeghidour et
  al. 2021): a training step uses only the first n_q levels, n_q uniform in 1..Q, with probability
  `quantizer_dropout`, so early levels must carry a usable coarse reconstruction by themselves.
  Dead-code reset: a code whose EMA usage falls below `dead_code_threshold` of uniform is moved onto
  a random residual of the current batch, so deep levels keep all their codes in use;
- level 0 tied to phonetic content: a linear phoneme classifier reads the straight-through level-0
  quantized vector (cross-entropy on the frame's phoneme, weight `phoneme_weight`), standing in for
  the real tokenizer's semantic distillation into its first quantizer;
- decoder: Conv1d over frames from the quantized latent back to (T, S*M), trained with MSE in the
  global-scaled log-mel space (loud, moving bands dominate, as in the R1 target).

Nothing here looks at the TTS model: the codec is fitted on audio and phoneme labels only.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from rvqspec.core.jsonfile import atomic_dir
from rvqspec.mini.codec import CONFIG_FILE, WEIGHTS_FILE, CodecConfig, CodecError, RVQCodec

FORMAT = "rvqspec-mini-learned-codec"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class LearnedCodecConfig:
    analysis: CodecConfig = field(default_factory=CodecConfig)  # log-mel analysis and synthesis
    num_codebooks: int = 16
    codebook_size: int = 256
    latent_dim: int = 64
    channels: int = 256
    num_phonemes: int = 1  # classifier size for the level-0 phonetic loss (the tokenizer's vocab)
    steps: int = 1500
    batch_utterances: int = 16
    max_frames: int = 64
    lr: float = 2e-3
    commitment: float = 0.25
    phoneme_weight: float = 0.5
    quantizer_dropout: float = 0.5
    dead_code_threshold: float = 0.1  # fraction of the uniform usage 1/K below which a code is reset
    ema_decay: float = 0.95  # usage and centroids follow the moving encoder within ~20 steps
    seed: int = 0

    @property
    def sample_rate(self) -> int:
        return self.analysis.sample_rate

    @property
    def level_sizes(self) -> tuple[int, ...]:
        """Codes per level (every level the same size; CodecConfig.level_sizes)."""
        return (self.codebook_size,) * self.num_codebooks

    @property
    def feature_dim(self) -> int:
        return self.analysis.feature_dim

    def validate(self) -> None:
        self.analysis.validate()
        if not (1 <= self.num_codebooks and 2 <= self.codebook_size and 1 <= self.num_phonemes):
            raise CodecError(f"bad num_codebooks {self.num_codebooks} / codebook_size {self.codebook_size} / "
                             f"num_phonemes {self.num_phonemes}")
        if not 0.0 <= self.quantizer_dropout <= 1.0:
            raise CodecError(f"quantizer_dropout {self.quantizer_dropout} must lie in [0, 1]")

    @classmethod
    def toy(cls, num_phonemes: int = 1) -> "LearnedCodecConfig":
        return cls(analysis=CodecConfig(griffin_lim_iters=4), codebook_size=16, latent_dim=8, channels=16,
                   num_phonemes=num_phonemes, steps=30, batch_utterances=4, max_frames=16,
                   ema_decay=0.8)  # a short run: usage estimates must follow within a few steps


def _convnet(d_in: int, channels: int, d_out: int) -> nn.Sequential:
    """(B, d_in, T) -> (B, d_out, T): two kernel-3 convolutions over frames, then a 1x1 projection."""
    return nn.Sequential(nn.Conv1d(d_in, channels, 3, padding=1), nn.GELU(),
                         nn.Conv1d(channels, channels, 3, padding=1), nn.GELU(), nn.Conv1d(channels, d_out, 1))


class LearnedCodec(nn.Module):
    def __init__(self, config: LearnedCodecConfig = LearnedCodecConfig()) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.frontend = RVQCodec(config.analysis)  # analysis (log-mel) and synthesis (Griffin-Lim) only
        c = config
        self.encoder = _convnet(c.feature_dim, c.channels, c.latent_dim)
        self.decoder = _convnet(c.latent_dim, c.channels, c.feature_dim)
        self.phoneme_head = nn.Linear(c.latent_dim, c.num_phonemes)
        self.register_buffer("codebooks", torch.zeros(c.num_codebooks, c.codebook_size, c.latent_dim))  # (Q, K, D)
        self.register_buffer("mean", torch.zeros(c.feature_dim))  # (S*M,)
        self.register_buffer("scale", torch.ones(()))  # one global scale
        self.fitted = False

    # -- coding -----------------------------------------------------------------------------------
    def _latent(self, feats: torch.Tensor) -> torch.Tensor:
        """(B, T, S*M) raw features -> (B, T, D) latent."""
        x = (feats - self.mean) / self.scale
        return self.encoder(x.transpose(1, 2)).transpose(1, 2)

    def _quantize(self, z: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """z (N, D) -> (sum of the first `levels` quantized residuals (N, D), codes (N, levels), residuals)."""
        resid, total, codes, resids = z, torch.zeros_like(z), [], []
        for q in range(levels):
            cb = self.codebooks[q]  # (K, D)
            d = (resid * resid).sum(1, keepdim=True) - 2 * resid @ cb.T + (cb * cb).sum(1)[None]  # (N, K)
            idx = d.argmin(1)  # (N,)
            resids.append(resid)
            total = total + cb[idx]
            resid = resid - cb[idx]
            codes.append(idx)
        return total, torch.stack(codes, 1), resids

    def _check(self) -> None:
        if not self.fitted:
            raise CodecError("the learned codec is not fitted: call fit() or LearnedCodec.load(dir)")

    @torch.no_grad()
    def encode(self, audio) -> torch.Tensor:
        """(T, num_codebooks) long codes of 1-D 16 kHz audio."""
        self._check()
        z = self._latent(self.frontend.features(audio)[None])[0]  # (T, D)
        return self._quantize(z, self.config.num_codebooks)[1]

    def check_codes(self, codes) -> torch.Tensor:
        codes = torch.as_tensor(codes).long()
        if codes.ndim != 2 or not 1 <= codes.shape[1] <= self.config.num_codebooks:
            raise ValueError(f"codes must have shape (T, <= {self.config.num_codebooks}), got {tuple(codes.shape)}")
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.config.codebook_size):
            raise ValueError(f"codes must lie in [0, {self.config.codebook_size}), got [{codes.min()}, {codes.max()}]")
        return codes

    @torch.no_grad()
    def decode_features(self, codes) -> torch.Tensor:
        """(T, S*M) raw log-mel features from codes (T, q), q <= num_codebooks (the first q levels)."""
        self._check()
        codes = self.check_codes(codes)
        zq = sum(self.codebooks[q][codes[:, q]] for q in range(codes.shape[1]))  # (T, D)
        return self.decoder(zq.T[None])[0].T * self.scale + self.mean  # (T, S*M)

    def decode(self, codes, num_codebooks: int | None = None) -> np.ndarray:
        """Waveform (T * hop,) float32 at 16 kHz from codes (T, Q) (optionally only the first few)."""
        codes = self.check_codes(codes)
        if num_codebooks is not None:
            codes = codes[:, :num_codebooks]
        return self.frontend.synthesize(self.decode_features(codes))

    # -- fitting ----------------------------------------------------------------------------------
    def fit(self, audios: Sequence, phonemes: Sequence[np.ndarray], generator: torch.Generator | None = None,
            progress: bool = True) -> "LearnedCodec":
        """Train on 1-D 16 kHz clips with their frame-aligned phoneme ids (T,) per clip."""
        c = self.config
        g = generator if generator is not None else torch.Generator().manual_seed(c.seed)
        torch.manual_seed(c.seed)
        feats = [self.frontend.features(a) for a in audios]  # each (T, S*M)
        labs = [torch.as_tensor(np.asarray(p), dtype=torch.long) for p in phonemes]
        for f, p in zip(feats, labs):
            if f.shape[0] != p.shape[0]:
                raise ValueError(f"phoneme labels have {p.shape[0]} frames, the audio {f.shape[0]}")
            if p.numel() and int(p.max()) >= c.num_phonemes:
                raise ValueError(f"phoneme id {int(p.max())} >= num_phonemes {c.num_phonemes}")
        allf = torch.cat(feats)  # (N, S*M)
        self.mean.copy_(allf.mean(0))
        self.scale.copy_((allf - self.mean).pow(2).mean().sqrt().clamp_min(1e-3))
        # codebooks start on encoder outputs of random frames (a data-dependent init, as k-means++ would)
        with torch.no_grad():
            z0 = self._latent(allf[torch.randperm(allf.shape[0], generator=g)[:4096]][None])[0]  # (n, D)
            for q in range(c.num_codebooks):
                pick = torch.randint(0, z0.shape[0], (c.codebook_size,), generator=g)
                self.codebooks[q] = z0[pick] * (0.5 ** q) + 1e-3 * torch.randn(c.codebook_size, c.latent_dim, generator=g)
        ema_n = torch.full((c.num_codebooks, c.codebook_size), 1.0 / c.codebook_size)  # (Q, K) usage share
        ema_sum = self.codebooks.clone()  # (Q, K, D) running mean of assigned residuals
        params = [*self.encoder.parameters(), *self.decoder.parameters(), *self.phoneme_head.parameters()]
        opt = torch.optim.AdamW(params, lr=c.lr, weight_decay=0.01)
        rng = np.random.default_rng(c.seed)
        self.fitted = True
        bar = tqdm(range(c.steps), desc="learned codec", disable=not progress)
        for step in bar:
            idx = rng.choice(len(feats), size=min(c.batch_utterances, len(feats)), replace=False)
            xs, ys = [], []
            for i in idx:
                T = feats[i].shape[0]
                s = int(rng.integers(0, T - c.max_frames + 1)) if T > c.max_frames else 0
                xs.append(feats[i][s:s + c.max_frames])
                ys.append(labs[i][s:s + c.max_frames])
            n = [len(x) for x in xs]
            Tm = max(n)
            x = torch.stack([F.pad(v, (0, 0, 0, Tm - len(v)), value=0.0) for v in xs])  # (B, Tm, S*M)
            x = torch.where(torch.arange(Tm)[None, :, None] < torch.tensor(n)[:, None, None], x, self.mean)
            valid = torch.arange(Tm)[None] < torch.tensor(n)[:, None]  # (B, Tm)
            y = torch.stack([F.pad(v, (0, Tm - len(v))) for v in ys])  # (B, Tm)
            z = self._latent(x)  # (B, Tm, D)
            levels = (int(torch.randint(1, c.num_codebooks + 1, (1,), generator=g))
                      if torch.rand((), generator=g) < c.quantizer_dropout else c.num_codebooks)
            zf = z.reshape(-1, c.latent_dim)  # (B*Tm, D)
            with torch.no_grad():
                zq, codes, resids = self._quantize(zf.detach(), levels)
            zst = zf + (zq - zf).detach()  # straight-through
            recon = self.decoder(zst.reshape(z.shape).transpose(1, 2)).transpose(1, 2)  # (B, Tm, S*M)
            target = (x - self.mean) / self.scale
            loss_rec = (recon - target).pow(2).mean(-1)[valid].mean()
            loss_commit = (zf - zq).pow(2).mean(-1).reshape(valid.shape)[valid].mean()
            q0 = self.codebooks[0][codes[:, 0]]  # (B*Tm, D)
            logits = self.phoneme_head(zf + (q0 - zf).detach())  # level-0 vector, gradient to the encoder
            loss_ph = F.cross_entropy(logits.reshape(*valid.shape, -1)[valid], y[valid])
            loss = loss_rec + c.commitment * loss_commit + c.phoneme_weight * loss_ph
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():  # EMA k-means update of the used levels, then dead-code resets
                keep = valid.reshape(-1)
                for q in range(levels):
                    r, i = resids[q][keep], codes[keep, q]  # (n, D), (n,)
                    cnt = torch.bincount(i, minlength=c.codebook_size).float()  # (K,)
                    sums = torch.zeros(c.codebook_size, c.latent_dim).index_add_(0, i, r)  # (K, D)
                    ema_n[q] = c.ema_decay * ema_n[q] + (1 - c.ema_decay) * cnt / max(len(i), 1)
                    ema_sum[q] = c.ema_decay * ema_sum[q] + (1 - c.ema_decay) * sums / max(len(i), 1)
                    used = ema_n[q] > 1e-8
                    self.codebooks[q][used] = ema_sum[q][used] / ema_n[q][used, None]
                    dead = (ema_n[q] < c.dead_code_threshold / c.codebook_size).nonzero().flatten()
                    if len(dead) and len(r):
                        pick = torch.randint(0, len(r), (len(dead),), generator=g)
                        self.codebooks[q][dead] = r[pick]
                        ema_n[q][dead] = 1.0 / c.codebook_size
                        ema_sum[q][dead] = r[pick] / c.codebook_size
            if step % 20 == 0:
                bar.set_postfix(rec=f"{loss_rec.item():.3f}", ph=f"{loss_ph.item():.3f}", q=levels)
        self.eval()
        return self

    # -- files ------------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike, extra: dict | None = None) -> Path:
        self._check()
        directory = Path(directory)
        with atomic_dir(directory) as tmp:
            save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(tmp / WEIGHTS_FILE))
            meta = {"format": FORMAT, "version": FORMAT_VERSION, "config": asdict(self.config)}
            meta.update(extra or {})
            (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "LearnedCodec":
        directory = Path(directory)
        meta = _read_meta(directory)
        if meta.get("format") != FORMAT:
            raise CodecError(f"{directory / CONFIG_FILE}: key 'format' is {meta.get('format')!r}, expected {FORMAT!r}")
        raw = dict(meta.get("config") or {})
        known = {f.name for f in fields(LearnedCodecConfig)}
        if set(raw) - known or not isinstance(raw.get("analysis"), dict):
            raise CodecError(f"{directory / CONFIG_FILE}: key 'config' has unknown fields {sorted(set(raw) - known)} "
                             f"or no 'analysis'")
        config = LearnedCodecConfig(**{**raw, "analysis": CodecConfig(**raw["analysis"])})
        codec = cls(config)
        try:
            state = load_file(str(directory / WEIGHTS_FILE))
            codec.load_state_dict(state)
        except (OSError, RuntimeError, ValueError) as exc:
            raise CodecError(f"{directory / WEIGHTS_FILE}: {exc}".splitlines()[0]) from exc
        codec.fitted = True
        return codec.eval()


def _read_meta(directory: Path) -> dict:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CodecError(f"codec file missing: {path}")
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CodecError(f"cannot read codec config {path}: {exc}") from exc
    if not isinstance(meta, dict):
        raise CodecError(f"{path} is not a codec config")
    return meta


def load_codec(directory: str | os.PathLike):
    """The codec saved at `directory`, whichever kind (k-means `RVQCodec` or `LearnedCodec`)."""
    directory = Path(directory)
    return LearnedCodec.load(directory) if _read_meta(directory).get("format") == FORMAT else RVQCodec.load(directory)
