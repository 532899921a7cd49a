"""The mini world's audio codec: residual k-means over per-frame log-mel features, 12.5 Hz x 16 codes.

Qwen3-TTS speaks through a 12.5 Hz tokenizer with 16 RVQ codebooks (c0 from the talker, c1..c15 from
the code predictor). The mini codec keeps that shape with no neural network:

- analysis: log-mel spectra of `subframes` sub-frames per 80 ms frame (hop 1280 samples at 16 kHz),
  stacked into one vector of `subframes * n_mels` values per frame, standardized per dimension;
- quantization: residual vector quantization. Codebook q is k-means (k-means++ init) fitted to the
  residual left by codebooks 0..q-1, so codebook 0 carries the coarse spectral shape and each later
  codebook carries less (the depth structure that seed 000's position-aware drafting exploits).
  With `rate_lambda > 0` the k-means is entropy-constrained: a code costs its squared error plus
  lambda * -log(its frequency). Plain residual k-means uses every code of every level about equally
  (balanced clusters), so a deep code is close to a uniform draw over 256 values that no model can
  anticipate; a learned codec's deep levels are skewed towards a few frequent refinements. The rate
  term gives the mini codec that shape: early levels stay rich, deep ones mostly take a few small
  corrections. The default stays 0: the skew makes the per-level entropy FALL with depth, the
  opposite of the depth structure the mini world is asked to show (`scripts/codec_rate_sweep.py`
  measures both sides; docs/design.md has the figures);
- synthesis: mel -> linear magnitude by the pseudo-inverse of our own mel filterbank, sub-frames
  interpolated to a finer hop, then Griffin-Lim with torch.stft / torch.istft (no torchaudio).

`codec_quality` measures feature SNR against the number of codebooks used and the log-mel distance
of decoded audio to the original.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.linalg
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from rvqspec.core.jsonfile import atomic_dir
from rvqspec.mini.phonemes import num_frames

FORMAT = "rvqspec-mini-codec"
FORMAT_VERSION = 1
CONFIG_FILE = "codec_config.json"
WEIGHTS_FILE = "codec.safetensors"


class CodecError(ValueError):
    """A codec directory is missing, unreadable, or its tensors do not match its config."""


@dataclass(frozen=True)
class CodecConfig:
    sample_rate: int = 16000
    frame_rate: float = 12.5  # Hz -> hop of 1280 samples (Qwen3-TTS-Tokenizer-12Hz)
    num_codebooks: int = 16  # c0..c15
    # codes per level: 1,024, the mini world v4's (docs/design.md, "The next world built at full scale"):
    # more codes per level leave the talker less of the mel to guess; corpus codes are int16, the
    # committed codebooks float16 (`rvqspec mini cast --codec`) to keep data/ small
    codebook_size: int = 1024
    # codes at level 0 alone (0: codebook_size), the talker's c0 vocabulary. Level 0 is the phonetic
    # level the talker names from the text, and six languages share its cells: at 2,048 codes with
    # English at half the fit, English c0 alone reads 6.5% CER against 14.0% at 1,024
    # (docs/measurements/world_v5_candidate/codec_k2048_en_share50.json). A larger level 0 alone keeps
    # the code predictor's heads (and the drafters sized by them) at codebook_size, within data/'s 80 MB.
    level0_codebook_size: int = 0
    # feature design: `subframes` log-mel spectra per frame, each from an `n_fft` window
    subframes: int = 4  # 20 ms sub-frame hop
    n_fft: int = 640  # 40 ms analysis window
    # 64 bands: on 20 English clips (codec fit on 1060 s of model_train audio) the decoded audio's
    # log-mel distance was 3.3 dB with 64 bands vs 4.0 dB with 40 (feature SNR 16.2 vs 18.0 dB at 16
    # codebooks: finer bands cost quantization accuracy but gain more in synthesis)
    n_mels: int = 64
    fmin: float = 0.0
    fmax: float = 8000.0
    log_floor: float = 1e-5  # power floor before the log: silence maps to one point
    # fitting
    kmeans_iters: int = 15
    # Entropy-constrained RVQ (Chou, Lookabaugh & Gray 1989): a frame takes the code j minimising
    # |r - c_j|^2 / D + rate_lambda * (-log p_j), p_j the code's frequency in the fitting data. The
    # distortion is absolute (standardized feature units), so the early codebooks, whose residuals
    # are large, barely notice the rate term while the deep ones, which refine little, settle on a
    # few frequent small corrections. 0 = plain residual k-means (balanced, near-uniform codes).
    # 0.001 puts the deep levels at the seed's regime (docs/design.md, "Mini world v2 gates": with
    # plain k-means every deep level is a near-uniform draw and no drafter passes 1.4 tokens per
    # call; the 0.001 world reached Medusa 2.56 at N = 16, docs/measurements/skewed_codec).
    rate_lambda: float = 0.001
    kmeans_init_sample: int = 20000  # k-means++ runs on a subsample (it is sequential in K)
    fit_max_frames: int = 100000  # frames drawn (without replacement) for fitting: ~400 per centroid
    # synthesis
    synth_hop: int = 160  # Griffin-Lim hop (10 ms: 75% window overlap, sub-frames interpolated)
    griffin_lim_iters: int = 48
    griffin_lim_momentum: float = 0.99  # "fast Griffin-Lim" (Perraudin et al. 2013)
    # Non-negative least squares (multiplicative updates) after the pseudo-inverse: measured on 8 English
    # clips with 40 mels, it cut the vocoder-only log-mel distance from 4.8 dB to 2.7 dB
    mel_inverse_iters: int = 30
    # The space the RVQ quantizes (defaults: the stacked log-mel itself, standardized per dimension).
    # Per-dimension standardization gives a quiet, near-constant band the same weight as a formant
    # band, so the deep codebooks spend themselves on low-energy texture nobody can predict from
    # the text (docs/design.md, "Mini world v2 gates", R1). The three knobs below remove that texture
    # from the quantized target while the decoder still receives a full log-mel:
    # - scaling "global": subtract the per-dimension mean but divide by ONE scale, so a band's
    #   weight in the k-means distortion is its own log-energy variance (loud, moving bands dominate);
    # - lifter L > 0: keep the first L coefficients of an orthonormal DCT-II of each sub-frame's
    #   log-mel (cepstral liftering: the smooth spectral envelope, not the fine structure);
    # - subframe_keep k > 0: keep the first k DCT-II coefficients across the `subframes` sub-frames
    #   of a frame (smoothing in time inside the 80 ms frame).
    scaling: str = "per_dim"
    lifter: int = 0
    subframe_keep: int = 0
    # Phonetic level 0 (Qwen3-TTS's level 0 is semantic, distilled from a speech representation model):
    # level0_lda d > 0 assigns c0 by k-means in the first d Fisher-discriminant directions of the
    # standardized frame against its phoneme token, and c0's codeword is the mean of the frames it
    # takes, so decoding stays the plain RVQ sum. Labels are needed only to fit; encoding projects and
    # assigns. At gate scale, d = 64 took free-running English CER from 48.0% to 28.8% and c0 alone
    # from 31.0% to 15.3% (docs/measurements/intelligibility/level0_lda64.json, scripts/level0_gate.py).
    # 0 = level 0 is residual k-means like every other level (the v2 world's codec); the mini build
    # uses 64 (BuildConfig.level0_lda, since the v3 world).
    level0_lda: int = 0
    # Split level 0 (Mimi's and Qwen3-TTS's tokenizers keep a semantic codebook apart from the
    # acoustic RVQ): with level0_split the residual levels c1.. quantize only what lies outside the
    # span of level 0's discriminant directions, so a wrong residual code cannot move the frame's
    # discriminant (phonetic) coordinates; c0's codeword alone carries them. Needs level0_lda > 0.
    # False: the residual levels quantize the whole residual (the v3 and v4 worlds' codec).
    level0_split: bool = False
    seed: int = 0

    @property
    def hop(self) -> int:
        return int(round(self.sample_rate / self.frame_rate))

    @property
    def sub_hop(self) -> int:
        return self.hop // self.subframes

    @property
    def feature_dim(self) -> int:
        return self.subframes * self.n_mels

    @property
    def code_dim(self) -> int:
        """Width of the quantized vector: (subframe_keep or subframes) * (lifter or n_mels)."""
        return (self.subframe_keep or self.subframes) * (self.lifter or self.n_mels)

    def validate(self) -> None:
        if self.hop * self.frame_rate != self.sample_rate:
            raise CodecError(f"sample_rate {self.sample_rate} / frame_rate {self.frame_rate} is not a whole hop")
        if self.hop % self.subframes or self.hop % self.synth_hop or self.sub_hop % self.synth_hop:
            raise CodecError(f"hop {self.hop} must split into {self.subframes} sub-frames that are multiples "
                             f"of synth_hop {self.synth_hop}")
        if self.n_fft < self.sub_hop:
            raise CodecError(f"n_fft {self.n_fft} is shorter than the sub-frame hop {self.sub_hop}")
        if not (1 <= self.num_codebooks and 2 <= self.codebook_size):
            raise CodecError(f"bad num_codebooks {self.num_codebooks} / codebook_size {self.codebook_size}")
        if self.level0_codebook_size and self.level0_codebook_size < 2:
            raise CodecError(f"level0_codebook_size {self.level0_codebook_size} must be 0 (codebook_size) or >= 2")
        if self.scaling not in ("per_dim", "global"):
            raise CodecError(f"scaling must be 'per_dim' or 'global', got {self.scaling!r}")
        if not 0 <= self.lifter <= self.n_mels:
            raise CodecError(f"lifter {self.lifter} must lie in [0, n_mels={self.n_mels}]")
        if not 0 <= self.subframe_keep <= self.subframes:
            raise CodecError(f"subframe_keep {self.subframe_keep} must lie in [0, subframes={self.subframes}]")
        if not 0 <= self.level0_lda <= self.code_dim:
            raise CodecError(f"level0_lda {self.level0_lda} must lie in [0, code_dim={self.code_dim}]")
        if self.level0_split and not self.level0_lda:
            raise CodecError("level0_split needs level0_lda > 0 (the subspace level 0 keeps to itself)")

    @property
    def level_sizes(self) -> tuple[int, ...]:
        """Codes per level, c0 first: (level0_codebook_size or codebook_size, codebook_size, ...)."""
        return (self.level0_codebook_size or self.codebook_size,) + (self.codebook_size,) * (self.num_codebooks - 1)

    @classmethod
    def toy(cls) -> "CodecConfig":
        """Tiny codebooks and few iterations: fits in about a second for tests and CI."""
        return cls(codebook_size=16, kmeans_iters=6, kmeans_init_sample=2000, griffin_lim_iters=8)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> torch.Tensor:
    """(n_mels, n_fft // 2 + 1) triangular filters on the HTK mel scale, peak 1."""
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)  # (F,)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  # (M + 2,)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (M, 1) each
    fb = np.maximum(0.0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))  # (M, F)
    return torch.from_numpy(fb.astype(np.float32))


def dct_basis(n: int, keep: int) -> torch.Tensor:
    """(keep, n) rows of the orthonormal DCT-II matrix: the first `keep` cosine coefficients."""
    k = torch.arange(keep, dtype=torch.float64).view(-1, 1)  # (keep, 1)
    i = torch.arange(n, dtype=torch.float64).view(1, -1)  # (1, n)
    basis = torch.cos(math.pi * (i + 0.5) * k / n) * math.sqrt(2.0 / n)  # (keep, n)
    basis[0] /= math.sqrt(2.0)
    return basis.float()


def lda_basis(x: torch.Tensor, labels: torch.Tensor, d: int, reg: float = 1e-3) -> torch.Tensor:
    """(D, d) Fisher discriminant directions of x (N, D) for integer labels (N,): the top-d
    generalized eigenvectors of (between-class, within-class) scatter, scaled so that the
    within-class covariance is the identity in the projected space. `reg` adds that share of the
    mean within-class variance to the diagonal (a class-poor direction stays finite)."""
    n, D = x.shape
    _, inv = torch.unique(labels, return_inverse=True)
    counts = torch.bincount(inv).to(x.dtype)  # (C,)
    means = torch.zeros(len(counts), D, dtype=x.dtype).index_add_(0, inv, x) / counts[:, None]  # (C, D)
    within = x - means[inv]  # (N, D)
    sw = (within.T @ within / n).double().numpy()  # (D, D)
    centred = means - x.mean(0)  # (C, D)
    sb = ((centred * counts[:, None]).T @ centred / n).double().numpy()  # (D, D)
    sw += reg * np.trace(sw) / D * np.eye(D)
    _, vecs = scipy.linalg.eigh(sb, sw)  # ascending eigenvalues; vecs.T @ sw @ vecs = I
    return torch.from_numpy(vecs[:, ::-1][:, :d].copy()).to(x.dtype)  # (D, d)


def _assign(x: torch.Tensor, c: torch.Tensor, chunk: int = 8192,
            cost: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest centroid per row: (N,) long indices and (N,) squared distances; chunked for memory.
    `cost` (K,): added to each centroid's squared distance before the minimum (the rate term of
    entropy-constrained VQ); the distances returned stay plain squared distances. The row's own
    |x|^2 does not change its argmin, so each chunk is one fused product |c|^2 + cost - 2 x.c
    (half the time of the three-term distance; measured on the v6 codec, same codes)."""
    bias = (c * c).sum(1)  # (K,)
    if cost is not None:
        bias = bias + cost
    xx = (x * x).sum(1)  # (N,)
    idx, dist = [], []
    for s in range(0, x.shape[0], chunk):
        part = torch.addmm(bias, x[s:s + chunk], c.T, alpha=-2.0)  # (n, K)
        i = part.argmin(1)  # (n,)
        d = part.gather(1, i[:, None])[:, 0] + xx[s:s + chunk]  # (n,)
        idx.append(i)
        dist.append((d if cost is None else d - cost[i]).clamp_min(0))
    return torch.cat(idx), torch.cat(dist)


def rate_cost(log_prior: torch.Tensor, rate_lambda: float, dim: int) -> torch.Tensor | None:
    """(K,) squared-distance penalty of each code, D * lambda * (-log p_j); None when lambda is 0."""
    return None if rate_lambda <= 0 else -log_prior * (rate_lambda * dim)


def kmeans(x: torch.Tensor, k: int, iters: int, generator: torch.Generator, init_sample: int = 20000,
           progress: tqdm | None = None, rate_lambda: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(k, D) centroids of x (N, D) and (k,) log code frequencies: k-means++ init on a subsample,
    then Lloyd iterations.

    Plain k-means (rate_lambda 0) re-seeds an empty cluster at the point farthest from its centroid,
    so all k codes stay in use. Entropy-constrained (rate_lambda > 0) assignments pay
    D * rate_lambda * (-log frequency), frequencies re-estimated every iteration; codes that empty
    out stay unused (that is how it lowers the rate), at a floor frequency of 1e-3 / N.
    """
    n = x.shape[0]
    if n < k:
        raise ValueError(f"k-means needs at least k={k} points, got {n}")
    sub = x[torch.randperm(n, generator=generator)[:min(n, init_sample)]]  # (S, D)
    # k-means++: each new centroid drawn with probability proportional to squared distance
    centroids = torch.empty(k, x.shape[1], dtype=x.dtype)  # (k, D)
    centroids[0] = sub[torch.randint(sub.shape[0], (1,), generator=generator)]
    d2 = ((sub - centroids[0]) ** 2).sum(1)  # (S,)
    for j in range(1, k):
        total = d2.sum()
        if total <= 0:  # fewer distinct points than k: duplicate (later re-seeded if empty)
            centroids[j] = sub[torch.randint(sub.shape[0], (1,), generator=generator)]
            continue
        pick = torch.multinomial(d2 / total, 1, generator=generator)
        centroids[j] = sub[pick]
        d2 = torch.minimum(d2, ((sub - centroids[j]) ** 2).sum(1))
    log_prior = torch.full((k,), -math.log(k), dtype=x.dtype)  # (k,)
    floor = 1e-3 / n
    for _ in range(iters):
        idx, dist = _assign(x, centroids, cost=rate_cost(log_prior, rate_lambda, x.shape[1]))
        counts = torch.bincount(idx, minlength=k).to(x.dtype)  # (k,)
        sums = torch.zeros_like(centroids).index_add_(0, idx, x)  # (k, D)
        nonempty = counts > 0
        centroids[nonempty] = sums[nonempty] / counts[nonempty, None]
        if rate_lambda > 0:
            log_prior = (counts / n).clamp_min(floor).log()
        else:
            empty = (~nonempty).nonzero().flatten()
            if len(empty):
                far = dist.topk(len(empty)).indices
                centroids[empty] = x[far]
        if progress is not None:
            progress.update(1)
    # the frequencies the final centroids induce (what entropy-constrained encoding will pay)
    idx, _ = _assign(x, centroids, cost=rate_cost(log_prior, rate_lambda, x.shape[1]))
    log_prior = (torch.bincount(idx, minlength=k).to(x.dtype) / n).clamp_min(floor).log()
    return centroids, log_prior


def stack_levels(levels: Sequence[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """Per-level tensors (K_q, ...) as one (Q, K, ...) tensor when every level has K codes, else the
    list (a larger level 0: CodecConfig.level0_codebook_size). Both index and iterate by level."""
    return torch.stack(list(levels)) if len({t.shape for t in levels}) == 1 else list(levels)


class RVQCodec:
    def __init__(self, config: CodecConfig = CodecConfig(), codebooks: torch.Tensor | None = None,
                 mean: torch.Tensor | None = None, std: torch.Tensor | None = None,
                 log_prior: torch.Tensor | None = None, level0_basis: torch.Tensor | None = None,
                 level0_centroids: torch.Tensor | None = None) -> None:
        config.validate()
        self.config = config
        # (Q, K, D) float32 in standardized feature space, or per level (K_q, D) when level 0 is larger
        self.codebooks = codebooks
        # (Q, K) log frequency of each code in the fitting data: the rate term of entropy-constrained
        # encoding (unused when config.rate_lambda is 0)
        self.log_prior = (log_prior if log_prior is not None or codebooks is None
                          else stack_levels([torch.full(cb.shape[:1], -math.log(cb.shape[0])) for cb in codebooks]))
        self.mean = mean  # (D,)
        self.std = std  # (D,)
        # config.level0_lda > 0: the level-0 assignment space, (D, d) directions and (K, d) centroids
        self.level0_basis, self.level0_centroids = level0_basis, level0_centroids
        self.fb = mel_filterbank(config.sample_rate, config.n_fft, config.n_mels, config.fmin, config.fmax)  # (M, F)
        self.fb_pinv = torch.linalg.pinv(self.fb)  # (F, M)
        self.window = torch.hann_window(config.n_fft)  # (n_fft,)
        # code-space bases (None = identity): mel -> cepstrum per sub-frame, sub-frames -> temporal DCT
        self.mel_basis = dct_basis(config.n_mels, config.lifter) if config.lifter else None  # (L, M)
        self.time_basis = (dct_basis(config.subframes, config.subframe_keep)
                           if config.subframe_keep else None)  # (k, S)

    @property
    def fitted(self) -> bool:
        return self.codebooks is not None

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise CodecError("the codec is not fitted: call fit() or RVQCodec.load(dir)")

    # -- analysis ---------------------------------------------------------------------------------
    def num_frames(self, num_samples: int) -> int:
        return num_frames(num_samples, self.config.sample_rate, self.config.frame_rate)

    def _as_tensor(self, audio) -> torch.Tensor:
        a = torch.as_tensor(np.asarray(audio, dtype=np.float32))
        if a.ndim != 1:
            raise ValueError(f"audio must be 1-D mono samples, got shape {tuple(a.shape)}")
        return a

    def log_mel(self, audio) -> torch.Tensor:
        """(T * subframes, n_mels) log-mel power; sub-frame j of frame t centred at t*hop + j*sub_hop."""
        c = self.config
        a = self._as_tensor(audio)
        T = self.num_frames(len(a))
        a = torch.nn.functional.pad(a, (0, T * c.hop - len(a)))  # zero-pad the last partial frame
        spec = torch.stft(a, c.n_fft, hop_length=c.sub_hop, window=self.window, center=True,
                          return_complex=True)[:, :T * c.subframes]  # (F, T*S)
        mel = self.fb @ spec.abs().pow(2)  # (M, T*S)
        return mel.clamp_min(c.log_floor).log().T.contiguous()  # (T*S, M)

    def features(self, audio) -> torch.Tensor:
        """(T, D) raw (unstandardized) stacked log-mel features, D = subframes * n_mels."""
        lm = self.log_mel(audio)  # (T*S, M)
        return lm.reshape(-1, self.config.feature_dim)  # (T, S*M)

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        """Raw features (T, S*M) -> unstandardized code-space vectors (T, code_dim)."""
        c = self.config
        x = feats.reshape(-1, c.subframes, c.n_mels)  # (T, S, M)
        if self.mel_basis is not None:
            x = x @ self.mel_basis.T  # (T, S, L)
        if self.time_basis is not None:
            x = torch.einsum("ks,tsl->tkl", self.time_basis, x)  # (T, k, L)
        return x.reshape(x.shape[0], -1)  # (T, code_dim)

    def unproject(self, y: torch.Tensor) -> torch.Tensor:
        """Code-space vectors (T, code_dim) -> raw features (T, S*M); the transpose of the
        orthonormal bases, so dropped coefficients come back as zero (a smoothed log-mel)."""
        c = self.config
        x = y.reshape(y.shape[0], c.subframe_keep or c.subframes, c.lifter or c.n_mels)  # (T, k, L)
        if self.time_basis is not None:
            x = torch.einsum("ks,tkl->tsl", self.time_basis, x)  # (T, S, L)
        if self.mel_basis is not None:
            x = x @ self.mel_basis  # (T, S, M)
        return x.reshape(x.shape[0], -1)  # (T, S*M)

    def standardize(self, feats: torch.Tensor) -> torch.Tensor:
        """Raw features (T, S*M) -> the standardized vectors the codebooks quantize (T, code_dim)."""
        return (self.project(feats) - self.mean) / self.std

    def destandardize(self, x: torch.Tensor) -> torch.Tensor:
        """Standardized code-space vectors (T, code_dim) -> raw features (T, S*M)."""
        return self.unproject(x * self.std + self.mean)

    # -- fitting ----------------------------------------------------------------------------------
    def fit(self, audios: Sequence, generator: torch.Generator | None = None, progress: bool = True,
            labels: Sequence | None = None) -> "RVQCodec":
        """Fit standardization and residual k-means codebooks to a list of 1-D 16 kHz audio arrays.
        With config.level0_lda > 0, `labels` gives each audio's (T,) phoneme-token frames (the
        discriminant classes of level 0); they are not needed to encode."""
        c = self.config
        if generator is None:
            generator = torch.Generator().manual_seed(c.seed)
        if len(audios) == 0:
            raise ValueError("RVQCodec.fit needs at least one audio array")
        if c.level0_lda and (labels is None or len(labels) != len(audios)):
            raise ValueError(f"level0_lda {c.level0_lda} needs one phoneme-frame label array per audio, got "
                             f"{'none' if labels is None else len(labels)} for {len(audios)} audios")
        feats = torch.cat([self.project(self.features(a))
                           for a in tqdm(audios, desc="codec features", disable=not progress)])  # (N, D)
        lab = None
        if c.level0_lda:
            lab = torch.cat([torch.as_tensor(np.asarray(t), dtype=torch.long) for t in labels])  # (N,)
            if lab.shape[0] != feats.shape[0]:
                raise ValueError(f"{feats.shape[0]} codec frames against {lab.shape[0]} phoneme-frame labels")
        self.mean = feats.mean(0)  # (D,)
        if c.scaling == "global":  # one scale: each dimension weighs by its own variance
            self.std = ((feats - self.mean).pow(2).mean().sqrt().clamp_min(1e-3)
                        * torch.ones(feats.shape[1]))  # (D,)
        else:
            self.std = feats.std(0).clamp_min(1e-3)  # (D,)
        x = (feats - self.mean) / self.std  # (N, D)
        if x.shape[0] > c.fit_max_frames:
            keep = torch.randperm(x.shape[0], generator=generator)[:c.fit_max_frames]
            x, lab = x[keep], (lab[keep] if lab is not None else None)
        if x.shape[0] < max(c.level_sizes):
            raise ValueError(f"RVQCodec.fit got {x.shape[0]} frames, fewer than codebook size {max(c.level_sizes)}")
        books, priors = [], []
        resid = x.clone()
        bar = tqdm(total=c.num_codebooks * c.kmeans_iters, desc="codec k-means", disable=not progress)
        for q in range(c.num_codebooks):
            if q == 0 and c.level0_lda:
                cb, lp, idx = self._fit_level0(x, lab, generator, bar)
            else:
                cb, lp = kmeans(resid, c.level_sizes[q], c.kmeans_iters, generator, c.kmeans_init_sample, bar,
                                c.rate_lambda)  # (K, D), (K,)
                idx, _ = _assign(resid, cb, cost=rate_cost(lp, c.rate_lambda, resid.shape[1]))
            resid -= cb[idx]
            if q == 0 and c.level0_split:
                resid = self.acoustic_part(resid)
            books.append(cb)
            priors.append(lp)
            bar.set_postfix(codebook=q, resid=f"{resid.pow(2).mean().item():.3f}")
        bar.close()
        self.codebooks = stack_levels(books)  # (Q, K, D)
        self.log_prior = stack_levels(priors)  # (Q, K)
        return self

    def _fit_level0(self, x: torch.Tensor, labels: torch.Tensor, generator: torch.Generator,
                    bar: tqdm) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Level 0 in the phoneme-discriminant subspace: plain k-means there (no rate term: every
        phonetic cell stays in use), codeword = mean of its frames in the full space. Returns the
        (K, D) codebook, (K,) log frequencies and (N,) assignments; keeps basis and centroids."""
        c = self.config
        self.level0_basis = lda_basis(x, labels, c.level0_lda)  # (D, d)
        z = x @ self.level0_basis  # (N, d)
        k = c.level_sizes[0]
        self.level0_centroids, _ = kmeans(z, k, c.kmeans_iters, generator, c.kmeans_init_sample, bar)
        idx, _ = _assign(z, self.level0_centroids)  # (N,)
        counts = torch.bincount(idx, minlength=k).to(x.dtype)  # (K,)
        cb = torch.zeros(k, x.shape[1]).index_add_(0, idx, x) / counts.clamp_min(1)[:, None]  # (K, D)
        lp = (counts / x.shape[0]).clamp_min(1e-3 / x.shape[0]).log()  # (K,)
        return cb, lp, idx

    def acoustic_part(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, D) with its component in the span of level0_basis removed (orthogonal projection):
        what the residual levels of a level0_split codec quantize."""
        q, _ = torch.linalg.qr(self.level0_basis)  # (D, d) orthonormal basis of the discriminant span
        return x - (x @ q) @ q.T  # (N, D)

    # -- coding -----------------------------------------------------------------------------------
    def encode(self, audio) -> torch.Tensor:
        """(T, num_codebooks) long codes of 1-D 16 kHz audio, T = ceil(len / hop)."""
        self._check_fitted()
        return self.encode_features(self.features(audio))

    def encode_features(self, feats: torch.Tensor) -> torch.Tensor:
        """(T, Q) codes of raw features (T, D): greedy residual assignment, codebook by codebook."""
        resid = self.standardize(feats)  # (T, D)
        codes = []
        for q, (cb, lp) in enumerate(zip(self.codebooks, self.log_prior)):  # (K, D), (K,)
            if q == 0 and self.config.level0_lda:
                idx, _ = _assign(resid @ self.level0_basis, self.level0_centroids)
            else:
                idx, _ = _assign(resid, cb, cost=rate_cost(lp, self.config.rate_lambda, resid.shape[1]))
            resid = resid - cb[idx]
            if q == 0 and self.config.level0_split:
                resid = self.acoustic_part(resid)
            codes.append(idx)
        return torch.stack(codes, 1)  # (T, Q)

    def smallest_codewords(self) -> torch.Tensor:
        """(Q,) per level the index of the codeword nearest the zero residual: the codes that add the
        least, so a frame with them at levels 1.. sounds as its level 0 alone ("c0 alone")."""
        self._check_fitted()
        return torch.stack([cb.norm(dim=-1).argmin() for cb in self.codebooks])

    def check_codes(self, codes) -> torch.Tensor:
        codes = torch.as_tensor(codes).long()
        c = self.config
        if codes.ndim != 2 or codes.shape[1] > c.num_codebooks or codes.shape[1] < 1:
            raise ValueError(f"codes must have shape (T, <= {c.num_codebooks}), got {tuple(codes.shape)}")
        sizes = torch.tensor(c.level_sizes[:codes.shape[1]])  # (q,)
        if codes.numel() and (codes.min() < 0 or (codes >= sizes).any()):
            c0 = f", c0 in [0, {c.level_sizes[0]})" if c.level0_codebook_size else ""
            raise ValueError(f"codes must lie in [0, {c.codebook_size}){c0}, got [{codes.min()}, {codes.max()}]")
        return codes

    def decode_features(self, codes) -> torch.Tensor:
        """(T, D) raw features from codes (T, q); q < num_codebooks uses only the first q codebooks."""
        self._check_fitted()
        codes = self.check_codes(codes)
        x = torch.zeros(codes.shape[0], self.config.code_dim)  # (T, code_dim)
        for q in range(codes.shape[1]):
            x += self.codebooks[q][codes[:, q]]
        return self.destandardize(x)  # (T, S*M)

    def decode(self, codes, num_codebooks: int | None = None, peak_limit: bool = True) -> np.ndarray:
        """Waveform (T * hop,) float32 at 16 kHz from codes (T, Q) (optionally only the first few);
        peak_limit=False skips the final scaling to a 0.99 peak (a look at the whole signal)."""
        codes = self.check_codes(codes)
        if num_codebooks is not None:
            codes = codes[:, :num_codebooks]
        return self.synthesize(self.decode_features(codes), peak_limit=peak_limit)

    # -- synthesis --------------------------------------------------------------------------------
    def synthesize(self, feats: torch.Tensor, peak_limit: bool = True) -> np.ndarray:
        """Waveform from raw features (T, D): mel -> linear magnitude (pseudo-inverse) -> Griffin-Lim."""
        c = self.config
        T = feats.shape[0]
        lm = feats.reshape(T * c.subframes, c.n_mels)  # (T*S, M) log-mel, sub_hop apart
        mag = self.magnitude(lm, 0, self.synthesis_columns(T), T * c.subframes)  # (F, n_out)
        return griffin_lim(mag, c.n_fft, c.synth_hop, self.window, c.griffin_lim_iters, c.griffin_lim_momentum,
                           T * c.hop, torch.Generator().manual_seed(c.seed), peak_limit)

    def synthesis_columns(self, frames: int) -> int:
        """Griffin-Lim STFT columns of a `frames`-frame utterance (synth_hop apart, centred)."""
        return frames * self.config.hop // self.config.synth_hop + 1

    def magnitude(self, lm: torch.Tensor, start: int, stop: int, total_sub: int) -> torch.Tensor:
        """(F, stop - start) linear STFT magnitude of synthesis columns start..stop-1 from log-mel
        sub-frames lm (>= the ones those columns read, M per row), for an utterance of `total_sub`
        sub-frames. Column j reads sub-frames floor(j / up) and the next one (clamped to the
        utterance's last), and every later step is per column, so any column range computed alone
        equals the same columns of the whole utterance: that is what streaming decoding relies on
        (`rvqspec.mini.stream`)."""
        c = self.config
        # interpolate log-mel to the synthesis hop (finer, 75% overlap makes Griffin-Lim converge better)
        up = c.sub_hop // c.synth_hop
        pos = torch.arange(start, stop, dtype=torch.float32) / up  # (n,) in sub-frame units
        i0 = pos.floor().long().clamp(max=total_sub - 1)
        i1 = (i0 + 1).clamp(max=total_sub - 1)
        w = (pos - i0.float()).clamp(0, 1)[:, None]
        lm = lm[i0] * (1 - w) + lm[i1] * w  # (n, M)
        mel = (lm.exp() - c.log_floor).clamp_min(0).T  # (M, n) mel power; the floor decodes to silence
        power = (self.fb_pinv @ mel).clamp_min(0) + 1e-10  # (F, n) least squares, clipped
        if c.mel_inverse_iters:
            # NNLS by multiplicative updates: power stays >= 0 and fb @ power approaches mel
            target = self.fb.T @ mel  # (F, n)
            for _ in range(c.mel_inverse_iters):
                power = power * target / (self.fb.T @ (self.fb @ power) + 1e-12)
        return power.sqrt()

    # -- files ------------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike, extra: dict | None = None,
             codebook_dtype: torch.dtype = torch.float32) -> Path:
        """Write codec.safetensors + codec_config.json into `directory` atomically (temp dir, rename).
        `codebook_dtype` stores the (Q, K, D) codebooks, the bulk of the file, in another dtype (float16
        halves it); `load` casts them back to float32."""
        self._check_fitted()
        directory = Path(directory)
        with atomic_dir(directory) as tmp:
            books, priors, tensors = self.codebooks, self.log_prior, {}
            if self.config.level0_codebook_size:  # level 0 apart: (K0, D), then the (Q-1, K, D) residual levels
                tensors.update(level0_codebook=books[0].to(codebook_dtype).contiguous(),
                               level0_log_prior=priors[0].contiguous())
                books, priors = torch.stack(list(books[1:])), torch.stack(list(priors[1:]))
            tensors.update(codebooks=books.to(codebook_dtype).contiguous(), mean=self.mean.contiguous(),
                           std=self.std.contiguous())
            if self.config.rate_lambda > 0:  # plain k-means codecs keep their two-tensor layout
                tensors["log_prior"] = priors.contiguous()
            if self.config.level0_lda:
                tensors["level0_basis"] = self.level0_basis.contiguous()
                tensors["level0_centroids"] = self.level0_centroids.contiguous()
            save_file(tensors, str(tmp / WEIGHTS_FILE))
            meta = {"format": FORMAT, "version": FORMAT_VERSION, "config": asdict(self.config)}
            if extra:
                meta.update(extra)
            (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "RVQCodec":
        directory = Path(directory)
        cfg_path, w_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
        for p in (cfg_path, w_path):
            if not p.is_file():
                raise CodecError(f"codec file missing: {p}")
        try:
            meta = json.loads(cfg_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CodecError(f"cannot read codec config {cfg_path}: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CodecError(f"{cfg_path} is not an rvqspec mini codec config (key 'format')")
        if meta.get("version") != FORMAT_VERSION:
            raise CodecError(f"{cfg_path}: version {meta.get('version')!r}, expected {FORMAT_VERSION}")
        known = {f.name for f in fields(CodecConfig)}
        raw = meta.get("config")
        if not isinstance(raw, dict) or set(raw) - known:
            raise CodecError(f"{cfg_path}: key 'config' has unknown fields {sorted(set(raw or {}) - known)}")
        config = CodecConfig(**raw)
        try:
            tensors = load_file(str(w_path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise CodecError(f"cannot read codec weights {w_path}: {exc}") from exc
        apart = bool(config.level0_codebook_size)  # level 0 stored apart from the residual levels
        k0, stacked = config.level_sizes[0], config.num_codebooks - apart
        want = {"codebooks": (stacked, config.codebook_size, config.code_dim),
                "mean": (config.code_dim,), "std": (config.code_dim,)}
        if apart:
            want.update(level0_codebook=(k0, config.code_dim), level0_log_prior=(k0,))
        if config.rate_lambda > 0:
            want["log_prior"] = (stacked, config.codebook_size)
        if config.level0_lda:
            want["level0_basis"] = (config.code_dim, config.level0_lda)
            want["level0_centroids"] = (k0, config.level0_lda)
        for key, shape in want.items():
            if key not in tensors:
                raise CodecError(f"{w_path}: tensor {key!r} missing")
            if tuple(tensors[key].shape) != shape:
                raise CodecError(f"{w_path}: tensor {key!r} has shape {tuple(tensors[key].shape)}, "
                                 f"config says {shape}")
        books = tensors["codebooks"].float()
        lp = tensors["log_prior"].float() if "log_prior" in want else None
        if apart:
            residual_lp = lp if lp is not None else torch.full(books.shape[:2], -math.log(books.shape[1]))
            books = [tensors["level0_codebook"].float(), *books]
            lp = [tensors["level0_log_prior"].float(), *residual_lp]
        l0 = [tensors[k].float() if k in want else None for k in ("level0_basis", "level0_centroids")]
        return cls(config, books, tensors["mean"].float(), tensors["std"].float(), lp, *l0)


def cast_codec(src: str | os.PathLike, dst: str | os.PathLike, dtype: torch.dtype) -> Path:
    """Copy the codec folder `src` to `dst` with its codebooks stored in `dtype` (data/'s size budget:
    the 1,024-code world's (16, 1024, 256) codebooks are 16.8 MB in float32). The config and the
    recorded fit and quality are kept; from then on codes are those of the rounded codebooks (on the
    v4 world's test utterances every code encodes the same; tests/test_codec.py checks it on its own
    codec). `dst` is written whole, then renamed. Raises CodecError."""
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise CodecError(f"{dst}: the cast copy must not replace its source")
    codec = RVQCodec.load(src)
    meta = json.loads((src / CONFIG_FILE).read_text())
    extra = {k: v for k, v in meta.items() if k not in ("format", "version", "config")}
    return codec.save(dst, extra=extra, codebook_dtype=dtype)


def griffin_lim(mag: torch.Tensor, n_fft: int, hop: int, window: torch.Tensor, iters: int, momentum: float,
                length: int, generator: torch.Generator, peak_limit: bool = True) -> np.ndarray:
    """Waveform (length,) float32 whose STFT magnitude approximates mag (F, N); fast Griffin-Lim."""
    phase = torch.rand(mag.shape, generator=generator) * (2 * math.pi)  # (F, N)
    wav, _ = griffin_lim_from(mag, phase, n_fft, hop, window, iters, momentum, length)
    peak = wav.abs().max()
    if peak_limit and peak > 0.99:  # keep within [-1, 1] so writing to 16-bit audio never clips
        wav = wav * (0.99 / peak)
    return wav.numpy().astype(np.float32)


def griffin_lim_from(mag: torch.Tensor, phase: torch.Tensor, n_fft: int, hop: int, window: torch.Tensor,
                     iters: int, momentum: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fast Griffin-Lim (Perraudin et al. 2013) from an initial phase (F, N): the waveform (length,)
    and the final complex spectrum (F, N), whose phase can warm-start the next window of a stream."""
    spec = torch.polar(mag, phase)
    prev = torch.zeros_like(spec)
    for _ in range(iters):
        wav = torch.istft(spec, n_fft, hop_length=hop, window=window, center=True, length=length)
        est = torch.stft(wav, n_fft, hop_length=hop, window=window, center=True, return_complex=True)  # (F, N)
        accel = est + (momentum / (1 + momentum)) * (est - prev) if momentum else est
        prev = est
        spec = mag * torch.exp(1j * torch.angle(accel))
    wav = torch.istft(spec, n_fft, hop_length=hop, window=window, center=True, length=length)
    return wav, spec


_REF_FB: dict = {}


def reference_log_mel_db(audio, sample_rate: int = 16000, floor_db: float | None = None) -> torch.Tensor:
    """(N, 80) log-mel power in dB (10 ms hop, 40 ms window) of 1-D audio, clamped below at floor_db
    (default: 60 dB under the clip's peak, a speech dynamic range; digital silence would otherwise
    dominate any distance).

    A fixed analysis, independent of the codec's own feature design, so that codecs with different
    mel resolutions are compared on the same scale.
    """
    n_fft, hop, n_mels = 640, 160, 80
    key = (sample_rate, n_fft, n_mels)
    if key not in _REF_FB:
        _REF_FB[key] = (mel_filterbank(sample_rate, n_fft, n_mels, 0.0, sample_rate / 2), torch.hann_window(n_fft))
    fb, window = _REF_FB[key]
    a = torch.as_tensor(np.asarray(audio, dtype=np.float32))
    spec = torch.stft(a, n_fft, hop_length=hop, window=window, center=True, return_complex=True)  # (F, N)
    mel = fb @ spec.abs().pow(2)  # (80, N)
    db = 10 * torch.log10(mel.clamp_min(1e-12)).T  # (N, 80)
    return db.clamp_min(db.max().item() - 60.0 if floor_db is None else floor_db)


def codec_quality(codec: RVQCodec, audios: Sequence, codebook_counts: Sequence[int] = (1, 2, 4, 8, 16),
                  decode_limit: int = 20, progress: bool = True) -> dict:
    """Reconstruction quality on (held-out) audio.

    - feature_snr_db[q]: 10 log10(|x|^2 / |x - x_q|^2) in the standardized feature space, where x_q
      uses the first q codebooks (the depth structure: it grows with q, by less per codebook).
    - logmel_rmse_db[q]: RMS difference (dB) between the 80-band log-mel spectrogram
      (`reference_log_mel_db`) of decoded audio and of the original (on the first `decode_limit` clips), for q = 4 and all codebooks; `vocoder_only`
      is the same for unquantized features through Griffin-Lim: the floor set by synthesis alone.
    """
    codec._check_fitted()
    Q = codec.config.num_codebooks
    counts = [q for q in codebook_counts if q <= Q]
    sig, err = 0.0, {q: 0.0 for q in counts}
    for a in audios:
        f = codec.features(a)  # (T, S*M)
        x = codec.standardize(f)  # (T, code_dim)
        codes = codec.encode_features(f)  # (T, Q)
        sig += x.pow(2).sum().item()
        for q in counts:
            xq = codec.standardize(codec.decode_features(codes[:, :q]))
            err[q] += (x - xq).pow(2).sum().item()
    snr = {str(q): round(10 * math.log10(sig / max(err[q], 1e-12)), 3) for q in counts}

    def logmel_db(a):
        return reference_log_mel_db(a, codec.config.sample_rate)  # 60 dB under the clip's peak

    dist = {"vocoder_only": [], str(min(4, Q)): [], str(Q): []}
    clips = list(audios)[:decode_limit]
    for a in tqdm(clips, desc="codec decode check", disable=not progress):
        ref = logmel_db(a)
        floor = ref.min().item()  # the same floor for the decoded audio
        f = codec.features(a)
        codes = codec.encode_features(f)
        outs = {"vocoder_only": codec.synthesize(f), str(min(4, Q)): codec.decode(codes, min(4, Q)),
                str(Q): codec.decode(codes)}
        for key, wav in outs.items():
            hyp = reference_log_mel_db(wav, codec.config.sample_rate, floor)[: ref.shape[0]]
            dist[key].append((hyp - ref).pow(2).mean().sqrt().item())
    return {"feature_snr_db": snr,
            "logmel_rmse_db": {k: round(float(np.mean(v)), 3) for k, v in dist.items()},
            "num_clips": len(audios), "num_decoded": len(clips)}
