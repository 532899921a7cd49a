"""A layer-by-layer talker forward that keeps what distillation needs (seed 001 §3, multi-level KD).

`CodeDecoder.forward` runs `decoder_stack`, which uses SDPA over a static cache and so never
materialises attention probabilities or per-layer states. SPADE's distillation aligns latents,
attention maps and the embedding output, so this module recomputes the same function explicitly
(whole-sequence causal attention, no cache) from the model's own weights and helpers, returning:

* `embeddings`  (B, T, H): the talker input (text + codec embedding sums), the "embedding output";
* `hidden[i]`   (B, T, H): the residual stream after layer i (before the final norm);
* `attentions[i]` (B, nh, T, T): softmax attention probabilities of layer i (row = query);
* `final` (B, T, H) after the final norm, and the c0 `logits` (B, T, V).

`tests/test_spade.py` checks it equals `CodeDecoder.forward` (and the layer-i states equal a model
pruned to layers 0..i), so the distillation targets are those of the real model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rvqspec.core.model import CodeDecoder, attention_qkv, mlp_residual, rms_norm


@dataclass
class Trace:
    embeddings: torch.Tensor            # (B, T, H)
    hidden: list[torch.Tensor]          # num_layers x (B, T, H), residual stream after each layer
    attentions: list[torch.Tensor]      # num_layers x (B, nh, T, T) probabilities (empty if not kept)
    final: torch.Tensor                 # (B, T, H) after model.norm
    logits: torch.Tensor | None         # (B, T, V) c0 logits


def trace_talker(talker: CodeDecoder, inputs_embeds: torch.Tensor, attentions: bool = True,
                 logits: bool = True) -> Trace:
    """Causal whole-sequence forward of `talker` on inputs_embeds (B, T, H) at positions 0..T-1.

    Right padding needs no key mask: the causal mask already hides later (padded) frames from every
    real frame (as in `rvqspec.core.frame_loop.teacher_forced_talker`)."""
    c = talker.config
    if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != c.hidden_size:
        raise ValueError(f"trace_talker: inputs_embeds must be (B, T, {c.hidden_size}), "
                         f"got {tuple(inputs_embeds.shape)}")
    B, T, _ = inputs_embeds.shape
    eps, hd = c.rms_norm_eps, c.head_dim
    n_rep = c.num_attention_heads // c.num_key_value_heads
    x = inputs_embeds
    positions = torch.arange(T, device=x.device).view(1, T)  # (1, T)
    cos, sin = talker.rope(positions, x.dtype)  # (1, 1, T, hd) each
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T) query row sees keys <= row
    bias = torch.zeros(T, T, dtype=x.dtype, device=x.device).masked_fill(~causal, float("-inf"))  # (T, T)
    hidden, probs_all = [], []
    for layer in talker.model.layers:
        att = layer.self_attn
        q, k, v = attention_qkv(att, rms_norm(x, layer.input_layernorm.weight, eps), cos, sin, hd, eps)  # (B, nh|nkv, T, hd)
        # GQA: query head j uses kv head j // n_rep (official repeat_kv)
        k = k.repeat_interleave(n_rep, dim=1)  # (B, nh, T, hd)
        v = v.repeat_interleave(n_rep, dim=1)  # (B, nh, T, hd)
        scores = (q @ k.transpose(-1, -2)) * hd ** -0.5 + bias  # (B, nh, T, T)
        p = scores.softmax(dim=-1)  # (B, nh, T, T)
        o = (p @ v).transpose(1, 2).flatten(2)  # (B, T, nh*hd)
        x = x + F.linear(o, att.o_proj.weight, att.o_proj.bias)
        x = mlp_residual(layer, x, eps)
        hidden.append(x)
        if attentions:
            probs_all.append(p)
    final = rms_norm(x, talker.model.norm.weight, eps)  # (B, T, H)
    out_logits = F.linear(final, talker.codec_head.weight) if logits else None  # (B, T, V)
    return Trace(embeddings=inputs_embeds, hidden=hidden, attentions=probs_all, final=final, logits=out_logits)
