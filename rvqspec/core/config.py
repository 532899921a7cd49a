"""Configuration of the Qwen3-TTS talker (CodeDecoder) and code predictor (MultiCodeDecoder).

Our dataclass defaults are the real 0.6B sizes (one place for them). The official `config.json`
is read with `from_official`, which falls back to the *official* class defaults for any key that
is absent (HF `save_pretrained` writes only the keys that differ from those defaults), and
written back with `to_official`, which keeps every key we do not model verbatim.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Defaults of the official classes (qwen_tts 0.1.1, configuration_qwen3_tts.py), used only for keys
# missing from a config.json. They differ from the deployed sizes (e.g. num_code_groups=32).
_OFFICIAL_CP_DEFAULTS: dict[str, Any] = dict(
    vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_act="silu",
    max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
    attention_bias=False, use_sliding_window=False, num_code_groups=32,
)
_OFFICIAL_TALKER_DEFAULTS: dict[str, Any] = dict(
    vocab_size=3072, hidden_size=1024, intermediate_size=2048, num_hidden_layers=20,
    num_attention_heads=16, num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
    rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None, attention_bias=False,
    use_sliding_window=False, num_code_groups=32, text_hidden_size=2048,
    codec_eos_token_id=4198, codec_think_id=4202, codec_nothink_id=4203, codec_think_bos_id=4204,
    codec_think_eos_id=4205, codec_pad_id=4196, codec_bos_id=4197,
    spk_id=None, spk_is_dialect=None, codec_language_id=None,
)
_OFFICIAL_TOP_DEFAULTS: dict[str, Any] = dict(
    tokenizer_type=None, tts_model_size=None, tts_model_type=None, im_start_token_id=151644,
    im_end_token_id=151645, tts_pad_token_id=151671, tts_bos_token_id=151672, tts_eos_token_id=151673,
)


class ConfigError(ValueError):
    """A config.json (or dict) that does not describe a supported Qwen3-TTS model."""


def _need(d: dict, key: str, defaults: dict, where: str) -> Any:
    if key in d:
        return d[key]
    if key in defaults:
        return defaults[key]
    raise ConfigError(f"{where}: required key {key!r} is missing")


def _kv_heads(d: dict, defaults: dict, heads: int) -> int:
    # official: a missing key takes the class default; an explicit null means "as many as query heads"
    kv = d.get("num_key_value_heads", defaults["num_key_value_heads"])
    return heads if kv is None else kv


def _check_common(d: dict, defaults: dict, where: str) -> None:
    if _need(d, "hidden_act", defaults, where) != "silu":
        raise ConfigError(f"{where}: hidden_act={d.get('hidden_act')!r} is not supported (only 'silu')")
    if _need(d, "use_sliding_window", defaults, where):
        raise ConfigError(f"{where}: use_sliding_window=True is not supported")


@dataclass
class CodePredictorConfig:
    """MultiCodeDecoder: 5 Qwen3 layers that emit codes c1..c15 of one frame (seed 000 §2.1)."""

    vocab_size: int = 2048
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 5
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 65536
    num_code_groups: int = 16          # c0..c15; the predictor holds num_code_groups - 1 tables/heads
    talker_hidden_size: int = 1024     # width of the talker hidden state and of the codec embeddings
    attention_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "talker_hidden_size"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"CodePredictorConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"CodePredictorConfig: num_attention_heads={self.num_attention_heads} is not a "
                              f"multiple of num_key_value_heads={self.num_key_value_heads}")
        if self.num_code_groups < 2:
            raise ConfigError(f"CodePredictorConfig.num_code_groups must be >= 2, got {self.num_code_groups}")
        if self.head_dim % 2:
            raise ConfigError(f"CodePredictorConfig.head_dim must be even for RoPE, got {self.head_dim}")

    @property
    def has_projection(self) -> bool:
        """`small_to_mtp_projection` is a Linear only when talker and predictor widths differ (1.7B)."""
        return self.hidden_size != self.talker_hidden_size

    def params_per_call(self) -> dict[str, int]:
        """Parameters one single-token call reads: every layer, the final norm, one LM head, one
        embedding row (the input code) and the talker->predictor projection when present. The KV
        cache (16 slots) and activations are not counted: they are tiny next to the weights."""
        H, I, hd = self.hidden_size, self.intermediate_size, self.head_dim
        nh, nkv = self.num_attention_heads, self.num_key_value_heads
        attn = H * nh * hd * 2 + H * nkv * hd * 2 + 2 * hd  # q, o, k, v, q_norm, k_norm
        if self.attention_bias:
            attn += nh * hd + 2 * nkv * hd + H
        layer = attn + 3 * H * I + 2 * H  # + MLP + two RMSNorms
        out = {"layers": self.num_hidden_layers * layer, "final_norm": H, "lm_head": H * self.vocab_size,
               "embedding_row": self.talker_hidden_size,
               "projection": (self.talker_hidden_size * H + H) if self.has_projection else 0}
        out["total"] = sum(out.values())
        return out

    @classmethod
    def from_name(cls, name: str) -> "CodePredictorConfig":
        """Real sizes: the predictor is the same in 0.6B and 1.7B, only the talker width differs."""
        talker = TalkerConfig.from_name(name)
        return cls(talker_hidden_size=talker.hidden_size)

    @classmethod
    def from_official(cls, cp: dict, talker_hidden_size: int, where: str = "code_predictor_config") -> "CodePredictorConfig":
        if not isinstance(cp, dict):
            raise ConfigError(f"{where}: expected a dict, got {type(cp).__name__}")
        D = _OFFICIAL_CP_DEFAULTS
        _check_common(cp, D, where)
        rs = cp.get("rope_scaling")
        if rs is not None and rs.get("rope_type", rs.get("type", "default")) != "default":
            raise ConfigError(f"{where}: rope_scaling={rs!r} is not supported (only default RoPE)")
        if cp.get("partial_rotary_factor", 1.0) != 1.0:
            raise ConfigError(f"{where}: partial_rotary_factor != 1 is not supported")
        get = lambda k: _need(cp, k, D, where)  # noqa: E731
        head_dim = cp.get("head_dim", D["head_dim"])
        return cls(vocab_size=int(get("vocab_size")), hidden_size=int(get("hidden_size")),
                   intermediate_size=int(get("intermediate_size")), num_hidden_layers=int(get("num_hidden_layers")),
                   num_attention_heads=int(get("num_attention_heads")),
                   num_key_value_heads=int(_kv_heads(cp, D, int(get("num_attention_heads")))),
                   head_dim=int(head_dim), rms_norm_eps=float(get("rms_norm_eps")),
                   rope_theta=float(get("rope_theta")), max_position_embeddings=int(get("max_position_embeddings")),
                   num_code_groups=int(get("num_code_groups")), talker_hidden_size=int(talker_hidden_size),
                   attention_bias=bool(get("attention_bias")))

    def to_official(self) -> dict:
        d = asdict(self)
        d.pop("talker_hidden_size")  # lives in the talker config (its hidden_size)
        d.update(hidden_act="silu", rope_scaling=None, use_sliding_window=False,
                 model_type="qwen3_tts_talker_code_predictor")
        return d


def _text_lead_from_official(tc: dict, where: str) -> dict:
    """TalkerConfig.text_lead / text_lead_pad_id from talker_config["rvqspec_text_lead"] (absent: 0)."""
    v = tc.get("rvqspec_text_lead")
    if v is None:
        return {}
    if not isinstance(v, dict) or not isinstance(v.get("frames"), int) or not isinstance(v.get("pad_id", 0), int):
        raise ConfigError(f"{where}: rvqspec_text_lead must be {{'frames': int, 'pad_id': int}}, got {v!r}")
    return {"text_lead": v["frames"], "text_lead_pad_id": v.get("pad_id", 0)}


@dataclass
class TalkerConfig:
    """CodeDecoder (the talker): Qwen3 layers over text+codec embeddings, emits c0 per frame."""

    vocab_size: int = 3072             # codec vocabulary of c0 (incl. control tokens)
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 32768
    # Multimodal RoPE sections; with the same position id in all three sections (always the case
    # in TTS: `get_rope_index` expands one 1-D position to 3) M-RoPE equals plain RoPE.
    mrope_section: tuple[int, ...] = (24, 20, 20)
    mrope_interleaved: bool = True
    attention_bias: bool = False
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    num_code_groups: int = 16
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    spk_id: dict = field(default_factory=dict)
    spk_is_dialect: dict = field(default_factory=dict)
    codec_language_id: dict = field(default_factory=dict)
    # rvqspec extension (0 = the official scheme): the text stream leads the audio by `text_lead`
    # frames. Frame t reads text token t + text_lead (then `text_lead_pad_id`), and text tokens
    # 0..text_lead-1 enter through a prefix of text_lead positions summed with the codec pad
    # embedding (`rvqspec.core.frame_loop.talker_inputs`). Saved as talker_config["rvqspec_text_lead"] only
    # when non-zero, so a real checkpoint's config.json is untouched.
    text_lead: int = 0
    text_lead_pad_id: int = 0

    def __post_init__(self) -> None:
        self.mrope_section = tuple(int(s) for s in self.mrope_section)
        if self.text_lead < 0:
            raise ConfigError(f"TalkerConfig.text_lead must be >= 0, got {self.text_lead}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"TalkerConfig: num_attention_heads={self.num_attention_heads} is not a multiple "
                              f"of num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"TalkerConfig.head_dim must be even for RoPE, got {self.head_dim}")

    _PRESETS = {
        # Qwen3-TTS-12Hz-0.6B: Qwen3-0.6B-sized talker.
        "0.6b": dict(hidden_size=1024, intermediate_size=3072),
        # Qwen3-TTS-12Hz-1.7B: Qwen3-1.7B-sized talker (hidden 2048, MLP 6144).
        "1.7b": dict(hidden_size=2048, intermediate_size=6144),
    }

    @classmethod
    def from_name(cls, name: str) -> "TalkerConfig":
        key = {"0b6": "0.6b", "1b7": "1.7b"}.get(name.lower(), name.lower())  # official tts_model_size spelling
        if key not in cls._PRESETS:
            raise ConfigError(f"unknown preset {name!r}; known: {sorted(cls._PRESETS)}")
        return cls(**cls._PRESETS[key])

    @classmethod
    def from_official(cls, tc: dict, where: str = "talker_config") -> "TalkerConfig":
        if not isinstance(tc, dict):
            raise ConfigError(f"{where}: expected a dict, got {type(tc).__name__}")
        D = _OFFICIAL_TALKER_DEFAULTS
        _check_common(tc, D, where)
        rs = tc.get("rope_scaling")
        if not isinstance(rs, dict) or "mrope_section" not in rs:
            raise ConfigError(f"{where}: rope_scaling must hold 'mrope_section' (the official talker "
                              f"attention reads it), got {rs!r}")
        if rs.get("rope_type", rs.get("type", "default")) != "default":
            raise ConfigError(f"{where}: rope_scaling rope_type={rs.get('rope_type')!r} is not supported")
        get = lambda k: _need(tc, k, D, where)  # noqa: E731
        hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
        head_dim = int(tc.get("head_dim", hidden // heads))  # official: getattr(config, "head_dim", H // nh)
        if "text_vocab_size" not in tc:
            raise ConfigError(f"{where}: required key 'text_vocab_size' is missing")
        return cls(vocab_size=int(get("vocab_size")), hidden_size=hidden, intermediate_size=int(get("intermediate_size")),
                   num_hidden_layers=int(get("num_hidden_layers")), num_attention_heads=heads,
                   num_key_value_heads=int(_kv_heads(tc, D, heads)),
                   head_dim=head_dim, rms_norm_eps=float(get("rms_norm_eps")), rope_theta=float(get("rope_theta")),
                   max_position_embeddings=int(get("max_position_embeddings")),
                   mrope_section=tuple(rs["mrope_section"]), mrope_interleaved=bool(rs.get("interleaved", False)),
                   attention_bias=bool(get("attention_bias")), text_vocab_size=int(tc["text_vocab_size"]),
                   text_hidden_size=int(get("text_hidden_size")), num_code_groups=int(get("num_code_groups")),
                   **{k: int(get(k)) for k in ("codec_eos_token_id", "codec_think_id", "codec_nothink_id",
                                               "codec_think_bos_id", "codec_think_eos_id", "codec_pad_id",
                                               "codec_bos_id")},
                   spk_id=dict(tc.get("spk_id") or {}), spk_is_dialect=dict(tc.get("spk_is_dialect") or {}),
                   codec_language_id=dict(tc.get("codec_language_id") or {}),
                   **_text_lead_from_official(tc, where))

    def to_official(self) -> dict:
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}
        lead, pad = d.pop("text_lead"), d.pop("text_lead_pad_id")
        if lead:
            d["rvqspec_text_lead"] = {"frames": lead, "pad_id": pad}
        d["rope_scaling"] = {"rope_type": "default", "mrope_section": list(d.pop("mrope_section")),
                             "interleaved": d.pop("mrope_interleaved")}
        d.update(hidden_act="silu", use_sliding_window=False, model_type="qwen3_tts_talker")
        return d


@dataclass
class Qwen3TTSConfig:
    """The whole official config: talker + code predictor + top-level ids, the rest kept verbatim."""

    talker: TalkerConfig = field(default_factory=TalkerConfig)
    code_predictor: CodePredictorConfig = field(default_factory=CodePredictorConfig)
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_model_type: str | None = None
    tts_model_size: str | None = None
    tokenizer_type: str | None = None
    raw: dict = field(default_factory=dict)  # the config.json as read (written back for keys we do not model)

    def __post_init__(self) -> None:
        if self.code_predictor.talker_hidden_size != self.talker.hidden_size:
            raise ConfigError(f"code predictor talker_hidden_size={self.code_predictor.talker_hidden_size} != "
                              f"talker hidden_size={self.talker.hidden_size}")
        if self.code_predictor.num_code_groups != self.talker.num_code_groups:
            raise ConfigError(f"code predictor num_code_groups={self.code_predictor.num_code_groups} != "
                              f"talker num_code_groups={self.talker.num_code_groups}")

    @classmethod
    def from_name(cls, name: str) -> "Qwen3TTSConfig":
        return cls(talker=TalkerConfig.from_name(name), code_predictor=CodePredictorConfig.from_name(name))

    @classmethod
    def from_official(cls, d: dict, where: str = "config.json") -> "Qwen3TTSConfig":
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(d).__name__}")
        if d.get("model_type") != "qwen3_tts":
            raise ConfigError(f"{where}: model_type is {d.get('model_type')!r}, expected 'qwen3_tts'")
        tc = d.get("talker_config") or {}
        talker = TalkerConfig.from_official(tc, where=f"{where}: talker_config")
        cp = CodePredictorConfig.from_official(tc.get("code_predictor_config") or {}, talker.hidden_size,
                                               where=f"{where}: talker_config.code_predictor_config")
        top = {k: d.get(k, v) for k, v in _OFFICIAL_TOP_DEFAULTS.items()}
        return cls(talker=talker, code_predictor=cp, raw=copy.deepcopy(d), **top)

    def to_official(self) -> dict:
        """The official config.json layout (as `Qwen3TTSConfig.save_pretrained` would read back)."""
        out = copy.deepcopy(self.raw)
        out["model_type"] = "qwen3_tts"
        out.setdefault("architectures", ["Qwen3TTSForConditionalGeneration"])
        for k in _OFFICIAL_TOP_DEFAULTS:
            out[k] = getattr(self, k)
        sec = out.get("speaker_encoder_config")
        if isinstance(sec, dict) and sec.get("model_type", None) == "":
            # The official save_pretrained writes model_type="" here, which its own
            # Qwen3TTSSpeakerEncoderConfig(**d) then rejects; dropping it makes our output loadable.
            out["speaker_encoder_config"] = {k: v for k, v in sec.items() if k != "model_type"}
        tc = dict(out.get("talker_config") or {})
        tc.update(self.talker.to_official())
        cp = dict(tc.get("code_predictor_config") or {})
        cp.update(self.code_predictor.to_official())
        tc["code_predictor_config"] = cp
        out["talker_config"] = tc
        return out
