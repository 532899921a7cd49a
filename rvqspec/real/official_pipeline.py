"""`rvqspec.accelerate`: speculative code prediction inside the official Qwen3-TTS objects.

The official talker completes every frame with one call (qwen_tts 0.1.1,
`Qwen3TTSTalkerForConditionalGeneration.forward`, generation stage):

    self.code_predictor.generate(inputs_embeds=cat([past_hidden, codec_embedding(c0)], 1),
                                 max_new_tokens=15, do_sample=..., top_p=..., top_k=...,
                                 temperature=..., output_hidden_states=True,
                                 return_dict_in_generate=True).sequences          # (B, 15)

`accelerate(model, drafter, tree)` replaces that one bound method, on that one code-predictor
object, by our `SpeculativeCodePredictor` (seed 000 §2.2-2.3) over a `MultiCodeDecoder` whose
parameters *are* the official tensors (no copy: `build_from_state_dict` assigns them). Everything
else -- the talker, its own sampling, prompts, the speech tokenizer -- is untouched, so
`Qwen3TTSModel.generate_custom_voice / generate_voice_clone / generate_voice_design` (which all go
through `Qwen3TTSForConditionalGeneration.generate` -> talker -> this call) run the speculative
inner loop with the same output distribution (lossless verification, seed 000 §3.2).

Details that keep the replacement exact:
* Sampling arguments are the ones the call passes; `None` falls back to the code predictor's
  `generation_config`, as HF `generate` does. Settings HF would apply that we do not reproduce
  (repetition penalty, eos/min length, suppressed tokens, typical/min/eta sampling, ...) or an
  unusual call shape send that call to the original `generate` (counted in `stats.fallbacks`).
* c0 arrives embedded. The code predictor only ever sees that embedding, so we recover an id whose
  talker codec-embedding row equals it exactly (any such id gives the very same frame); no exact
  row -> the original `generate` handles the call.
* RNG policy: the official path draws from torch's global generator (`torch.multinomial` inside HF
  `generate`). By default we do the same (generator=None), so `torch.manual_seed` still makes runs
  repeatable, though not equal draw for draw to the AR path (equal in distribution only). Pass
  `seed=` or `generator=` to draw from a dedicated `torch.Generator` instead, which leaves the
  global stream to the talker's own sampling.
"""
from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rvqspec.core.checkpoint import build_from_state_dict
from rvqspec.core.config import CodePredictorConfig
from rvqspec.core.defaults import NUM_CODES
from rvqspec.core.drafters import Drafter, PositionOffsets, load_drafter
from rvqspec.core.model import MultiCodeDecoder
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.real.official import import_official

MARK = "_rvqspec_accelerated"
NUM_NEW = NUM_CODES  # codes c1..c15 per frame

# generation_config fields that add HF logits processors / stopping rules we do not reproduce, with
# the value that means "off". If any differs, calls fall back to the original generate.
_OFF = {
    "repetition_penalty": (None, 1.0), "no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,),
    "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,), "min_length": (None, 0), "min_new_tokens": (None, 0),
    "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "min_p": (None,),
    "encoder_repetition_penalty": (None, 1.0), "sequence_bias": (None,), "renormalize_logits": (None, False),
    "num_beams": (None, 1), "num_return_sequences": (None, 1), "eos_token_id": (None,),
    "exponential_decay_length_penalty": (None,), "watermarking_config": (None,), "top_h": (None,),
}
# keyword arguments of the official call that do not change the sequences
_HARMLESS = {"output_hidden_states", "return_dict_in_generate", "output_scores", "output_logits",
             "output_attentions", "use_cache", "pad_token_id"}


class AccelerateError(ValueError):
    """The object is not an official Qwen3-TTS model, or the drafter/tree do not fit it."""


@dataclass
class AccelStats:
    """What the accelerated calls did: frames, code-predictor model calls, accepted draft lengths."""

    calls: int = 0                 # generate() calls served (one per talker step, B frames each)
    frames: int = 0
    model_calls: int = 0           # MultiCodeDecoder forward calls (prefill + verify rounds)
    accepted_lengths: list[int] = field(default_factory=list)
    fallbacks: int = 0             # calls passed to the original generate (with reasons below)
    fallback_reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def tokens_per_call(self) -> float:
        """Codes c1..c15 per code-predictor model call (1.0 for the AR loop; seed 000 Table 3)."""
        return NUM_NEW * self.frames / max(self.model_calls, 1)

    def as_dict(self) -> dict:
        return {"calls": self.calls, "frames": self.frames, "model_calls": self.model_calls,
                "tokens_per_call": self.tokens_per_call, "fallbacks": self.fallbacks,
                "fallback_reasons": dict(self.fallback_reasons), "seconds": self.seconds,
                "mean_accepted": (sum(self.accepted_lengths) / len(self.accepted_lengths)
                                  if self.accepted_lengths else 0.0)}


def _find_code_predictor(model: Any) -> tuple[Any, Any]:
    """(official code predictor, official talker) of a Qwen3TTSModel wrapper, a
    Qwen3TTSForConditionalGeneration or a Qwen3TTSTalkerForConditionalGeneration."""
    obj = model
    for attr in ("model", "talker"):  # wrapper.model -> CG model; CG.talker -> talker
        if not hasattr(obj, "code_predictor") and hasattr(obj, attr):
            obj = getattr(obj, attr)
    cp = getattr(obj, "code_predictor", None)
    if cp is None or not hasattr(cp, "generate") or not hasattr(cp, "lm_head"):
        raise AccelerateError(
            f"accelerate: {type(model).__name__} is not an official Qwen3-TTS model (expected a "
            "qwen_tts.Qwen3TTSModel, Qwen3TTSForConditionalGeneration or its .talker, with "
            ".talker.code_predictor)")
    if not hasattr(obj, "get_input_embeddings"):
        raise AccelerateError(f"accelerate: {type(obj).__name__} has no get_input_embeddings() (the c0 table)")
    return cp, obj


def shared_code_predictor(official_cp: Any, talker: Any):
    """Our MultiCodeDecoder whose parameters are the official tensors themselves (no copy), with
    the talker's codec embedding wired as the c0 table."""
    tcfg = talker.config
    raw = tcfg.code_predictor_config
    raw = raw.to_dict() if hasattr(raw, "to_dict") else dict(raw)
    cfg = CodePredictorConfig.from_official(raw, int(tcfg.hidden_size), where="talker_config.code_predictor_config")
    sd = official_cp.state_dict()  # detached tensors sharing storage with the official parameters
    device = next(official_cp.parameters()).device
    with torch.device("meta"):  # only the key set: our names are the official ones
        wanted = set(MultiCodeDecoder(cfg).state_dict())
    missing = sorted(wanted - set(sd))
    if missing:
        raise AccelerateError(f"accelerate: official code predictor lacks tensor {missing[0]!r}"
                              + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    ours = build_from_state_dict(MultiCodeDecoder, cfg, {k: sd[k] for k in wanted}, device=device)
    ours.set_c0_embedding(talker.get_input_embeddings())
    return ours


def _sampling_from_call(gc: Any, do_sample, top_k, top_p, temperature):
    """The HF generate sampling settings: explicit argument, else generation_config, else HF default."""
    def pick(v, name, default):
        if v is not None:
            return v
        g = getattr(gc, name, None) if gc is not None else None
        return default if g is None else g

    do_sample = bool(pick(do_sample, "do_sample", False))
    if not do_sample:
        return Sampling.greedy()
    return Sampling(do_sample=True, top_k=int(pick(top_k, "top_k", 50) or 0), top_p=float(pick(top_p, "top_p", 1.0)),
                    temperature=float(pick(temperature, "temperature", 1.0)))


def _unsupported_config(gc: Any) -> str | None:
    if gc is None:
        return None
    for name, off in _OFF.items():
        v = getattr(gc, name, None)
        if v not in off and not (isinstance(v, (list, tuple)) and len(v) == 0):
            return f"generation_config.{name}={v!r}"
    return None


class AcceleratedModel:
    """Handle returned by `accelerate`: `.stats`, `.restore()`, and a context-manager form."""

    def __init__(self, model, official_cp, talker, spec, generator: torch.Generator | None):
        self.model = model
        self.official_code_predictor = official_cp
        self.talker = talker
        self.spec = spec
        self.code_predictor = spec.code_predictor
        self.generator = generator
        self.stats = AccelStats()
        self._had_instance_attr = "generate" in official_cp.__dict__
        self._saved = official_cp.__dict__.get("generate")
        self._original = official_cp.generate  # bound method (or the earlier instance attribute)
        self._c0_weight = talker.get_input_embeddings().weight
        self.active = False
        # called as f(c0 (B,) long, codes (B, 15) long) for every frame the code predictor completes,
        # in order: what streaming (`rvqspec.real.stream`) decodes while the talker runs on
        self.frame_listeners: list = []

    # ---- patching ---------------------------------------------------------------------------------
    def _install(self) -> None:
        cp = self.official_code_predictor
        if getattr(cp, MARK, None) is not None:
            raise AccelerateError("accelerate: this model is already accelerated; call .restore() on the "
                                  "existing handle first")

        @functools.wraps(self._original)
        def generate(*args, **kwargs):
            return self._generate(*args, **kwargs)

        cp.__dict__["generate"] = generate
        cp.__dict__[MARK] = self
        self.active = True

    def restore(self) -> None:
        """Put the original `generate` back (idempotent)."""
        if not self.active:
            return
        cp = self.official_code_predictor
        if self._had_instance_attr:
            cp.__dict__["generate"] = self._saved
        else:
            cp.__dict__.pop("generate", None)
        cp.__dict__.pop(MARK, None)
        self.active = False

    def __enter__(self) -> "AcceleratedModel":
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def reset_stats(self) -> None:
        self.stats = AccelStats()

    # ---- the replacement --------------------------------------------------------------------------
    def _fallback(self, reason: str, args, kwargs):
        self.stats.fallbacks += 1
        self.stats.fallback_reasons[reason] = self.stats.fallback_reasons.get(reason, 0) + 1
        out = self._original(*args, **kwargs)
        if self.frame_listeners:
            emb = kwargs.get("inputs_embeds")
            c0 = self.c0_ids(emb[:, 1]) if torch.is_tensor(emb) and emb.dim() == 3 and emb.shape[1] == 2 else None
            seq = getattr(out, "sequences", out)
            if c0 is None or not torch.is_tensor(seq):
                raise AccelerateError(f"accelerate: a frame listener is set but a fallback call ({reason}) gives no "
                                      "recoverable c0 / codes")
            self._notify(c0, seq)
        return out

    def _notify(self, c0: torch.Tensor, codes: torch.Tensor) -> None:
        for f in self.frame_listeners:
            f(c0.detach().cpu(), codes.detach().cpu())

    def c0_ids(self, emb: torch.Tensor) -> torch.Tensor | None:
        """emb (B, E) -> ids (B,) whose c0-table row equals each embedding exactly, or None."""
        W = self._c0_weight.detach()  # (V, E)
        if emb.dtype != W.dtype or emb.device != W.device:
            return None
        out = []
        for row in emb:  # B is small (a talker batch)
            hit = (W == row).all(-1).nonzero()  # (n, 1)
            if hit.numel() == 0:
                return None
            out.append(hit[0, 0])
        return torch.stack(out)

    def _generate(self, *args, inputs_embeds=None, max_new_tokens=None, do_sample=None, top_k=None, top_p=None,
                  temperature=None, **kwargs):
        if args:
            return self._fallback("positional arguments", args, dict(inputs_embeds=inputs_embeds, **kwargs))
        call = dict(inputs_embeds=inputs_embeds, max_new_tokens=max_new_tokens, do_sample=do_sample, top_k=top_k,
                    top_p=top_p, temperature=temperature, **kwargs)
        extra = sorted(k for k, v in kwargs.items() if k not in _HARMLESS and v is not None)
        if extra:
            return self._fallback(f"argument {extra[0]}", (), call)
        if max_new_tokens != NUM_NEW:
            return self._fallback(f"max_new_tokens={max_new_tokens}", (), call)
        if not (torch.is_tensor(inputs_embeds) and inputs_embeds.dim() == 3 and inputs_embeds.shape[1] == 2):
            shape = tuple(inputs_embeds.shape) if torch.is_tensor(inputs_embeds) else type(inputs_embeds).__name__
            return self._fallback(f"inputs_embeds {shape}", (), call)
        gc = getattr(self.official_code_predictor, "generation_config", None)
        bad = _unsupported_config(gc)
        if bad:
            return self._fallback(bad, (), call)
        c0 = self.c0_ids(inputs_embeds[:, 1])
        if c0 is None:
            return self._fallback("c0 embedding not a codec_embedding row", (), call)
        sampling = _sampling_from_call(gc, do_sample, top_k, top_p, temperature)
        t0 = time.perf_counter()
        codes, st = self.spec.generate_frame(inputs_embeds[:, :1], c0.view(-1, 1), sampling=sampling,
                                             generator=self.generator)  # (B, 15)
        self.stats.seconds += time.perf_counter() - t0
        self.stats.calls += 1
        self.stats.frames += st.frames
        self.stats.model_calls += st.calls
        self.stats.accepted_lengths.extend(st.accepted_lengths)
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        if self.frame_listeners:
            self._notify(c0.view(-1), codes)
        # a normal tensor (generate_frame runs in inference mode); the talker embeds these codes
        return GenerateDecoderOnlyOutput(sequences=codes.clone().to(inputs_embeds.device))


def as_drafter(drafter, ours, verify_hash: bool):
    c = ours.config
    if drafter is None:  # seed 000 Table 2 (i): reused LM heads, zero offsets
        d = PositionOffsets.zeros(3, c.hidden_size, c.vocab_size)
    elif isinstance(drafter, (str, Path)):
        d = load_drafter(drafter, ours, check_hash=verify_hash)  # shapes are checked either way
    elif isinstance(drafter, Drafter):
        d = drafter
    else:
        raise AccelerateError(f"drafter must be a Drafter, a drafter file path or None, got {type(drafter).__name__}")
    if d.hidden_size != c.hidden_size or d.vocab_size != c.vocab_size:
        raise AccelerateError(f"drafter is for hidden_size={d.hidden_size}, vocab_size={d.vocab_size} but the "
                              f"code predictor has hidden_size={c.hidden_size}, vocab_size={c.vocab_size}")
    p = next(ours.parameters())
    return d.to(device=p.device).eval()


def as_tree(tree, num_offsets: int):
    if tree is None:
        return SparseTree.chain(num_offsets)
    if isinstance(tree, SparseTree):
        return tree
    if isinstance(tree, (str, Path)):
        return SparseTree.load(tree)
    if isinstance(tree, (list, tuple)):
        return SparseTree(tree)
    raise AccelerateError(f"tree must be a SparseTree, a tree JSON path, a list of rank paths or None, got "
                          f"{type(tree).__name__}")


def accelerate(model: Any, drafter: Any = None, tree: Any = None, *, seed: int | None = None,
               generator: torch.Generator | None = None, verify_hash: bool = True) -> AcceleratedModel:
    """Make the official model's code predictor speculative; returns a handle (`.restore()`, `.stats`,
    usable as a context manager).

    model: `qwen_tts.Qwen3TTSModel`, `Qwen3TTSForConditionalGeneration` or its `.talker`.
    drafter: a `Drafter`, a drafter file (`load_drafter`; its model hash is checked unless
             verify_hash=False), or None for zero offsets (reused heads).
    tree: a `SparseTree`, its JSON file, a list of rank paths, or None (top-1 chain of depth K).
    seed / generator: draw from a dedicated torch.Generator (see the module docstring); default:
             torch's global generator, as the official code.
    """
    if seed is not None and generator is not None:
        raise AccelerateError("pass seed or generator, not both")
    official_cp, talker = _find_code_predictor(model)
    if getattr(official_cp, MARK, None) is not None:
        raise AccelerateError("accelerate: this model is already accelerated; call .restore() on the existing "
                              "handle first")
    ours = shared_code_predictor(official_cp, talker)
    d = as_drafter(drafter, ours, verify_hash)
    t = as_tree(tree, d.num_offsets)
    spec = SpeculativeCodePredictor(ours, d, t)
    if seed is not None:
        generator = torch.Generator(device=next(ours.parameters()).device).manual_seed(int(seed))
    handle = AcceleratedModel(model, official_cp, talker, spec, generator)
    handle._install()
    return handle


def load_official_model(path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"):
    """`Qwen3TTSForConditionalGeneration` from a local checkpoint directory, *without* its speech
    tokenizer and generation config (the official `from_pretrained` insists on both; the talker and
    code predictor need neither). Raises FileNotFoundError naming the directory."""
    d = Path(path)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"{d}: not a Qwen3-TTS checkpoint directory (no config.json)")

    M, C = import_official()
    cls = M.Qwen3TTSForConditionalGeneration
    raw = json.loads((d / "config.json").read_text(encoding="utf-8"))
    sec = raw.get("speaker_encoder_config")
    if isinstance(sec, dict) and sec.get("model_type", None) == "":
        # the official save_pretrained writes model_type="" here, which its own config class rejects
        raw["speaker_encoder_config"] = {k: v for k, v in sec.items() if k != "model_type"}
    kw = {"local_files_only": True, "config": C.Qwen3TTSConfig(**raw)}
    if dtype is not None:
        kw["dtype"] = dtype
    # PreTrainedModel.from_pretrained (the parent of the official override), bound to the official class
    model = super(cls, cls).from_pretrained(str(d), **kw)
    return model.to(device).eval()
