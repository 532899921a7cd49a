"""The frame loop of Qwen3-TTS (seed 000 Figure 1) over our model core.

Input scheme (official talker generate): the talker input of frame t is the text embedding of
that frame's text token plus the sum of the 16 code embeddings of frame t-1 (the codec BOS
embedding at t = 0); the talker's last hidden state and its sampled c0 condition the code
predictor, which completes c1..c15. Once the text runs out the official model adds the tts_pad
embedding; the mini world's text stream is frame-aligned (one phoneme token per frame, timing from
espeak-ng), so it never runs out and the frame count is the length of the text stream.

The inner loop is pluggable: any object with `generate_frame(talker_hidden, c0, sampling=,
generator=)` (the AR `MultiCodeDecoder`, or `rvqspec.SpeculativeCodePredictor`, which also
returns stats) completes a frame, so AR and speculative synthesis share everything else.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import torch

from rvqspec.core.model import CodeDecoder, MultiCodeDecoder, causal_mask
from rvqspec.core.sampling import Sampling, sample_logits


class TalkerSteps(Protocol):
    """The talker on a graph backend (`rvqspec.export.talker.TalkerSteps`): a per-utterance cache of
    `length` slots filled in order."""

    def start(self, length: int) -> None: ...

    def prefill(self, x: torch.Tensor) -> None: ...

    def step(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class FrameCompleter(Protocol):
    def generate_frame(self, talker_hidden: torch.Tensor, c0: torch.Tensor, sampling: Sampling = ...,
                       generator: torch.Generator | None = ...): ...


@dataclass
class SynthesisStats:
    """What one utterance cost: frames, code-predictor calls, and the time split between the talker
    (outer loop) and the code predictor (inner loop)."""

    frames: int = 0
    inner_calls: int = 0
    talker_seconds: float = 0.0
    inner_seconds: float = 0.0
    accepted_lengths: list[int] = field(default_factory=list)

    @property
    def tokens_per_call(self) -> float:
        """Inner-loop codes (15 per frame) per code-predictor call; 1.0 for AR."""
        return 15 * self.frames / max(self.inner_calls, 1)


def codec_vocab_mask(talker: CodeDecoder, codebook_size: int) -> torch.Tensor:
    """Additive (V,) mask that keeps c0 inside the codebook: control tokens (BOS, pad, ...) share
    the talker's codec vocabulary but are never audio codes (the official generate suppresses them)."""
    m = torch.zeros(talker.config.vocab_size)
    m[codebook_size:] = float("-inf")
    return m


def synthesize_codes(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text_ids: torch.Tensor,
                     codebook_size: int, sampling: Sampling = Sampling(), generator: torch.Generator | None = None,
                     inner: FrameCompleter | None = None, talker_sampling: Sampling | None = None,
                     on_frame: Callable[[int, torch.Tensor], None] | None = None
                     ) -> tuple[torch.Tensor, SynthesisStats]:
    """Free-running synthesis of one utterance: text_ids (T,) long frame-aligned text tokens ->
    codes (T, 16) long. `inner` completes c1..c15 (default: the AR code predictor); `sampling` is
    the code predictor's (subtalker) sampling and `talker_sampling` the talker's (default: same)."""
    stats = SynthesisStats()
    codes = torch.empty(text_ids.numel() if text_ids.dim() == 1 else 0, 16, dtype=torch.long)  # (T, 16)
    for t, frame in iter_frames(talker, code_predictor, text_ids, codebook_size, sampling, generator, inner,
                                talker_sampling, stats):
        codes[t] = frame[0]
        if on_frame is not None:
            on_frame(t, frame)
    return codes, stats


def iter_frames(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text_ids: torch.Tensor,
                codebook_size: int, sampling: Sampling = Sampling(), generator: torch.Generator | None = None,
                inner: FrameCompleter | None = None, talker_sampling: Sampling | None = None,
                stats: SynthesisStats | None = None, talker_steps: TalkerSteps | None = None
                ) -> Iterator[tuple[int, torch.Tensor]]:
    """The frame loop as a generator: yields (t, frame (1, 16) long) as soon as frame t is complete,
    which is what streaming synthesis consumes (`rvqspec.mini.stream`). `stats` (updated in place)
    collects frames, inner calls and the talker / inner time split. `talker_steps`: the talker on a
    graph backend (`rvqspec.export.talker.TalkerSteps`); None runs the talker module itself."""
    if text_ids.dim() != 1 or text_ids.numel() == 0:
        raise ValueError(f"text_ids must be a non-empty (T,) tensor, got shape {tuple(text_ids.shape)}")
    inner = inner or code_predictor
    talker_sampling = talker_sampling or sampling
    stats = stats if stats is not None else SynthesisStats()
    T = text_ids.numel()
    L = talker.config.text_lead
    # inference mode is entered per step, not around the generator: a suspended generator must not
    # leave the caller's code (decoding, playback) running in inference mode
    with torch.inference_mode():
        dtype = next(talker.parameters()).dtype
        stream = text_stream(talker, text_ids.view(1, T), T).to(dtype)  # (1, T + L, E): frame t reads stream[t + L]
        bos = talker.codec_embed(torch.tensor([[talker.config.codec_bos_id]])).to(dtype)  # (1, 1, E)
        cache = talker.new_cache(1, L + T)
        positions = torch.arange(L + T).view(1, L + T)  # (1, L + T): prefix, then one per frame
        mask = causal_mask(positions, L + T, dtype)  # (1, 1, L + T, L + T)
        vocab_mask = codec_vocab_mask(talker, codebook_size).to(dtype)  # (V,)
        if talker_steps is not None:
            talker_steps.start(L + T)
        if L:  # text tokens 0..L-1 enter first (TalkerConfig.text_lead)
            pad = talker.codec_embed(torch.tensor([[talker.config.codec_pad_id]])).to(dtype)  # (1, 1, E)
            if talker_steps is not None:
                talker_steps.prefill(stream[:, :L] + pad)
            else:
                talker(stream[:, :L] + pad, positions[:, :L], cache, positions[0, :L], mask[:, :, :L], logits=False)
        x = stream[:, L:L + 1] + bos  # (1, 1, E)
    for t in range(T):
        with torch.inference_mode():
            t0 = time.perf_counter()
            p = L + t
            if talker_steps is not None:
                h, logits = talker_steps.step(x)  # (1, 1, E), (1, 1, V)
            else:
                h, logits = talker(x, positions[:, p:p + 1], cache, positions[0, p:p + 1], mask[:, :, p:p + 1])
            c0 = sample_logits(logits[:, -1] + vocab_mask, talker_sampling, generator).view(1, 1)  # (1, 1)
            t1 = time.perf_counter()
            out = inner.generate_frame(h[:, -1:], c0, sampling=sampling, generator=generator)
            rest, spec_stats = out if isinstance(out, tuple) else (out, None)
            t2 = time.perf_counter()
            frame = torch.cat([c0, rest.view(1, 15)], dim=1)  # (1, 16)
            stats.frames += 1
            stats.talker_seconds += t1 - t0
            stats.inner_seconds += t2 - t1
            if spec_stats is None:
                stats.inner_calls += 15
            else:
                stats.inner_calls += int(spec_stats.calls)
                stats.accepted_lengths.extend(int(a) for a in spec_stats.accepted_lengths)
        yield t, frame.clone()  # a normal tensor outside inference mode
        if t + 1 < T:
            with torch.inference_mode():
                x = talker.frame_embedding(frame, code_predictor).to(dtype) + stream[:, L + t + 1:L + t + 2]  # (1, 1, E)


def text_stream(talker: CodeDecoder, text_ids: torch.Tensor, frames: int) -> torch.Tensor:
    """Embedded text stream (B, frames + L, E), L = talker.config.text_lead, from text_ids (B, Tt):
    the tokens, then `text_lead_pad_id` (the text runs out L frames before the audio), cut to
    frames + L. Tt may exceed `frames` (a training crop keeps the text that follows it)."""
    L = talker.config.text_lead
    n = frames + L
    if text_ids.shape[1] < n:
        pad = torch.full((text_ids.shape[0], n - text_ids.shape[1]), talker.config.text_lead_pad_id,
                         dtype=torch.long, device=text_ids.device)  # (B, n - Tt)
        text_ids = torch.cat([text_ids, pad], dim=1)
    return talker.text_embed(text_ids[:, :n])


def talker_inputs(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text_ids: torch.Tensor,
                  codes: torch.Tensor) -> torch.Tensor:
    """Teacher-forced talker inputs (B, L + T, E) for text_ids (B, Tt >= T) and codes (B, T, 16), with
    L = talker.config.text_lead (0 in the official scheme): frame t (position L + t) sees text token
    t + L plus frame t-1's code-embedding sum (codec BOS at t = 0); positions 0..L-1 carry text
    tokens 0..L-1 plus the codec pad embedding."""
    B, T = codes.shape[:2]
    if text_ids.shape[0] != B or text_ids.shape[1] < T:
        raise ValueError(f"talker_inputs: text_ids {tuple(text_ids.shape)} must be (B={B}, >= T={T}) for codes "
                         f"{tuple(codes.shape)}")
    L = talker.config.text_lead
    stream = text_stream(talker, text_ids, T)  # (B, T + L, E)
    bos = talker.codec_embed(torch.full((B, 1), talker.config.codec_bos_id, dtype=torch.long))  # (B, 1, E)
    prev = [bos]
    if T > 1:
        flat = codes[:, :-1].reshape(B * (T - 1), 16)  # (B*(T-1), 16)
        prev.append(talker.frame_embedding(flat, code_predictor).view(B, T - 1, -1))  # (B, T-1, E)
    codec_part = torch.cat(prev, dim=1)  # (B, T, E)
    if L:
        pad = talker.codec_embed(torch.full((B, L), talker.config.codec_pad_id, dtype=torch.long))  # (B, L, E)
        codec_part = torch.cat([pad, codec_part], dim=1)  # (B, L + T, E)
    return stream + codec_part


def teacher_forced_talker(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text_ids: torch.Tensor,
                          codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the talker over a whole utterance batch with teacher forcing: text_ids (B, T), codes
    (B, T, 16) -> (hidden (B, T, E), c0 logits (B, T, V)) of the T frames (a text-lead prefix is
    run and dropped). Right padding needs no key mask: the causal mask already hides later
    (padded) frames from every real frame. With a text lead, a padded row's trailing text pads
    sit inside the batch padding, which no real frame attends to."""
    B = text_ids.shape[0]
    L = talker.config.text_lead
    x = talker_inputs(talker, code_predictor, text_ids, codes)  # (B, L + T, E)
    n = x.shape[1]
    positions = torch.arange(n).view(1, n).expand(B, n)  # (B, L + T)
    cache = training_cache(talker, B, n, x.dtype)
    hidden, logits = talker(x, positions, cache, torch.arange(n), causal_mask(positions[:1], n, x.dtype))
    return hidden[:, L:], (None if logits is None else logits[:, L:])


@dataclass
class _LayerListCache:
    k: list
    v: list


def training_cache(model, batch: int, length: int, dtype: torch.dtype) -> _LayerListCache:
    """A cache with one separate tensor per layer: the static KVCache stacks all layers in one
    tensor, so writing layer i+1 bumps the version autograd saved for layer i; separate tensors
    let a whole-sequence teacher-forced forward be differentiated."""
    c = model.config
    shape = (batch, c.num_key_value_heads, length, c.head_dim)
    return _LayerListCache(k=[torch.zeros(shape, dtype=dtype) for _ in range(c.num_hidden_layers)],
                           v=[torch.zeros(shape, dtype=dtype) for _ in range(c.num_hidden_layers)])


@torch.inference_mode()
def teacher_forced_frames(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text_ids: torch.Tensor,
                          codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For drafter extraction (seed 000 §2.2 "Training the offsets"): one utterance, text_ids (T,),
    codes (T, 16) -> (talker hidden per frame (T, E), codes (T, 16))."""
    hidden, _ = teacher_forced_talker(talker, code_predictor, text_ids.view(1, -1), codes.view(1, -1, 16))
    return hidden[0], codes


def teacher_forced_inner(code_predictor: MultiCodeDecoder, talker_hidden: torch.Tensor, codes: torch.Tensor,
                         differentiable: bool = False) -> torch.Tensor:
    """The whole inner loop teacher-forced in one call: talker_hidden (N, E) and codes (N, 16) ->
    hidden states h_1..h_15 (N, 15, H); LM head p-1 applied to h_p gives the logits of c_p.

    The prefill is [h_talker, emb(c0)] and position p >= 2 embeds c_{p-1}, exactly as
    `generate_frame` sees them (docs/design.md). `differentiable=True` uses a per-layer cache so
    the call can be backpropagated (training)."""
    cp = code_predictor
    n = cp.config.num_code_groups
    N = talker_hidden.shape[0]
    dtype = next(cp.parameters()).dtype
    dev = talker_hidden.device  # a GPU extraction keeps every index beside the model
    emb = cp.embed_codes(codes[:, : n - 1], torch.arange(n - 1, device=dev))  # (N, 15, E): c0..c14 at positions 1..15
    x = torch.cat([talker_hidden.to(dtype).unsqueeze(1), emb.to(dtype)], dim=1)  # (N, 16, E)
    pos = torch.arange(n, device=dev).view(1, n)  # (1, 16)
    cache = training_cache(cp, N, n, dtype) if differentiable else cp.new_cache(N, n)
    hidden, _ = cp(x, pos.expand(N, n), cache, torch.arange(n, device=dev), causal_mask(pos, n, dtype))  # (N, 16, H)
    return hidden[:, 1:]  # (N, 15, H)
