"""Read and write Qwen3-TTS checkpoints in the official layout (config.json + model.safetensors).

Only the tensors of the requested parts are read (memory-mapped with `safe_open`), into freshly
built modules, and the model is returned only when every tensor was found with the right shape:
nothing is ever left loaded half-way. Any problem raises `CheckpointError` naming the file, the
key and the shapes involved.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from rvqspec.core.config import ConfigError, Qwen3TTSConfig
from rvqspec.core.jsonfile import atomic_dir
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder

TALKER_PREFIX = "talker."
CP_PREFIX = "talker.code_predictor."
C0_KEY = "talker.model.codec_embedding.weight"  # the talker table that also embeds c0 for the predictor
PARTS = ("talker", "code_predictor")
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (or written) as Qwen3-TTS; the message names the
    file, the key and the shapes involved."""


@dataclass
class Qwen3TTS:
    """A loaded Qwen3-TTS: the talker and/or the code predictor, its config and where it came from.

    When only the code predictor is loaded, `c0_embedding` holds the talker's codec embedding it
    needs for c0 (otherwise it is `talker.model.codec_embedding`)."""

    config: Qwen3TTSConfig
    talker: CodeDecoder | None = None
    code_predictor: MultiCodeDecoder | None = None
    path: Path | None = None
    c0_embedding: nn.Embedding | None = None

    def modules(self) -> dict[str, nn.Module]:
        return {k: m for k, m in (("talker", self.talker), ("code_predictor", self.code_predictor)) if m is not None}


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------
def read_config(path: str | os.PathLike) -> Qwen3TTSConfig:
    """Parse `path/config.json` (official layout) into a Qwen3TTSConfig."""
    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(f"{d}: checkpoint directory not found")
    f = d / CONFIG_NAME
    if not f.is_file():
        raise CheckpointError(f"{f}: missing (a Qwen3-TTS checkpoint directory holds config.json and model.safetensors)")
    try:
        raw = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{f}: not valid JSON ({exc})") from exc
    try:
        return Qwen3TTSConfig.from_official(raw, where=str(f))
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from exc


def weight_map(path: str | os.PathLike) -> dict[str, Path]:
    """tensor name -> safetensors file, from the shard index if there is one, else model.safetensors."""
    d = Path(path)
    index = d / INDEX_NAME
    if index.is_file():
        try:
            wm = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index}: not a safetensors shard index with a 'weight_map' ({exc})") from exc
        out = {k: d / v for k, v in wm.items()}
        root = d.resolve()
        for k, f in out.items():  # an index must not make the loader read files outside the checkpoint
            if not f.resolve().is_relative_to(root):
                raise CheckpointError(f"{index}: weight_map[{k!r}] = {wm[k]!r} points outside {d}")
        for f in sorted(set(out.values())):
            if not f.is_file():
                raise CheckpointError(f"{f}: shard named in {index} is missing")
        return out
    f = d / WEIGHTS_NAME
    if not f.is_file():
        raise CheckpointError(f"{f}: missing (and no {INDEX_NAME} either)")

    try:
        with safe_open(str(f), framework="pt", device="cpu") as h:
            return {k: f for k in h.keys()}
    except Exception as exc:  # safetensors raises its own SafetensorError
        raise CheckpointError(f"{f}: not a readable safetensors file ({exc})") from exc


def _read_tensors(wanted: dict[str, torch.Size], wmap: dict[str, Path], dtype: torch.dtype,
                  device: torch.device | str) -> dict[str, torch.Tensor]:
    """Read exactly the tensors in `wanted` (name -> expected shape), checking presence and shape."""
    files = sorted({str(p) for p in wmap.values()})
    missing = [k for k in wanted if k not in wmap]
    if missing:
        raise CheckpointError(f"{', '.join(files)}: missing tensor {missing[0]!r}"
                              + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    by_file: dict[Path, list[str]] = {}
    for k in wanted:
        by_file.setdefault(wmap[k], []).append(k)
    out: dict[str, torch.Tensor] = {}
    for f, keys in by_file.items():
        try:
            with safe_open(str(f), framework="pt", device="cpu") as h:
                for k in keys:
                    shape = tuple(h.get_slice(k).get_shape())
                    if shape != tuple(wanted[k]):
                        raise CheckpointError(f"{f}: tensor {k!r} has shape {list(shape)}, the config expects "
                                              f"{list(wanted[k])}")
                    t = h.get_tensor(k)
                    if not t.is_floating_point():
                        raise CheckpointError(f"{f}: tensor {k!r} has dtype {t.dtype}, expected a float")
                    out[k] = t.to(device=device, dtype=dtype)
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"{f}: could not read tensors ({exc})") from exc
    return out


def build_from_state_dict(cls, cfg, state_dict: dict[str, torch.Tensor], device: torch.device | str = "cpu"):
    """A CodeDecoder / MultiCodeDecoder whose parameters *are* the given tensors (no copy, no random
    init), e.g. to run our model on the very weights of an official module."""
    module = _fresh(cls, cfg)
    _fill(module, "", state_dict)
    return module.eval()


def _fresh(cls, cfg) -> nn.Module:
    # Built on the meta device: no time or memory spent on a random init we overwrite anyway.
    with torch.device("meta"):
        return cls(cfg)


def _fill(module: nn.Module, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
    sd = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    module.load_state_dict(sd, strict=True, assign=True)
    leftover = [n for n, t in list(module.named_parameters()) + list(module.named_buffers()) if t.is_meta]
    if leftover:  # every tensor must have come from the state dict (the RoPE table is not a buffer)
        raise CheckpointError(f"internal: tensors left on the meta device after loading: {leftover[:3]}")


def _expected(module: nn.Module, prefix: str) -> dict[str, torch.Size]:
    return {prefix + k: v.shape for k, v in module.state_dict().items()}


def load_qwen3_tts(path: str | os.PathLike, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                   parts: Iterable[str] = PARTS) -> Qwen3TTS:
    """Load the talker and/or code predictor of an official Qwen3-TTS checkpoint directory.

    Tensors of other parts (speaker encoder, ...) are never read. Raises CheckpointError."""
    parts = tuple(parts)
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise CheckpointError(f"parts must be a non-empty subset of {PARTS}, got {parts!r}")
    if not torch.empty(0, dtype=dtype).is_floating_point():
        raise CheckpointError(f"dtype must be a floating dtype, got {dtype}")
    d = Path(path)
    cfg = read_config(d)
    wmap = weight_map(d)
    if not any(k.startswith(TALKER_PREFIX) for k in wmap):
        files = ", ".join(sorted({str(p) for p in wmap.values()}))
        raise CheckpointError(f"{files}: no '{TALKER_PREFIX}*' tensors: not a Qwen3-TTS checkpoint "
                              f"(first keys: {sorted(wmap)[:3]})")

    talker = _fresh(CodeDecoder, cfg.talker) if "talker" in parts else None
    cp = _fresh(MultiCodeDecoder, cfg.code_predictor) if "code_predictor" in parts else None
    wanted: dict[str, torch.Size] = {}
    if talker is not None:
        wanted.update(_expected(talker, TALKER_PREFIX))
    if cp is not None:
        wanted.update(_expected(cp, CP_PREFIX))
        wanted[C0_KEY] = torch.Size([cfg.talker.vocab_size, cfg.talker.hidden_size])
    # Tensors of a requested part that the config does not account for (e.g. a 29th layer) mean the
    # config and the weights disagree: refuse rather than silently drop them.
    prefixes = ([CP_PREFIX] if cp is not None else []) + ([TALKER_PREFIX] if talker is not None else [])
    for k in sorted(wmap):
        if any(k.startswith(p) for p in prefixes) and k not in wanted and not (
                talker is not None and cp is None and k.startswith(CP_PREFIX)):
            raise CheckpointError(f"{wmap[k]}: unexpected tensor {k!r} for the architecture in "
                                  f"{d / CONFIG_NAME} (config and weights disagree)")
    tensors = _read_tensors(wanted, wmap, dtype, device)

    c0 = None
    if talker is not None:
        _fill(talker, TALKER_PREFIX, {k: v for k, v in tensors.items() if not k.startswith(CP_PREFIX)})
        talker.eval()
        c0 = talker.model.codec_embedding
    if cp is not None:
        _fill(cp, CP_PREFIX, {k: v for k, v in tensors.items() if k.startswith(CP_PREFIX)})
        cp.eval()
        if c0 is None:
            c0 = nn.Embedding(cfg.talker.vocab_size, cfg.talker.hidden_size, device="meta")
            c0.weight = nn.Parameter(tensors[C0_KEY])
        cp.set_c0_embedding(c0)
    return Qwen3TTS(config=cfg, talker=talker, code_predictor=cp, path=d, c0_embedding=c0)


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------
def official_state_dict(model: Qwen3TTS) -> dict[str, torch.Tensor]:
    """All tensors under their official checkpoint names (talker.* and talker.code_predictor.*)."""
    if model.talker is None or model.code_predictor is None:
        raise CheckpointError("save_qwen3_tts needs both the talker and the code predictor (an official "
                              "checkpoint holds both); load with parts=('talker', 'code_predictor')")
    sd = {TALKER_PREFIX + k: v for k, v in model.talker.state_dict().items()}
    sd.update({CP_PREFIX + k: v for k, v in model.code_predictor.state_dict().items()})
    return sd


def save_qwen3_tts(model: Qwen3TTS, path: str | os.PathLike) -> Path:
    """Write config.json + model.safetensors in the official layout into directory `path`.

    Both files are written into a temporary sibling directory first; a new `path` is then created by
    one rename, an existing one gets each file by an atomic `os.replace` (other files in it, e.g.
    tokenizer files, are left alone). Nothing half-written is ever visible under `path`."""
    dst = Path(path)
    sd = official_state_dict(model)
    dtypes = {v.dtype for v in sd.values()}
    cfg = model.config.to_official()
    cfg["dtype"] = str(next(iter(dtypes))).replace("torch.", "") if len(dtypes) == 1 else "float32"
    if dst.exists() and not dst.is_dir():
        raise CheckpointError(f"{dst}: exists and is not a directory")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save_file({k: v.detach().to("cpu").contiguous() for k, v in sd.items()}, str(tmp / WEIGHTS_NAME),
                  metadata={"format": "pt"})
        (tmp / CONFIG_NAME).write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
        if not dst.exists():
            os.rename(tmp, dst)
        else:
            stale = dst / INDEX_NAME  # a shard index would shadow the new single file
            if stale.exists():
                stale.unlink()
            for name in (WEIGHTS_NAME, CONFIG_NAME):
                os.replace(tmp / name, dst / name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dst


def cast_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, dtype: torch.dtype) -> Path:
    """Copy checkpoint folder `src` to `dst` with the talker's and code predictor's tensors stored in
    `dtype` and config.json's "dtype" to match (the official Qwen3-TTS checkpoints ship bfloat16; the
    loader casts to the dtype it is asked for). The folder's other plain files (tokenizer, mini
    recipe) are copied unchanged; `dst` is written whole, then renamed. Raises CheckpointError."""
    src, dst = Path(src), Path(dst)
    if src.resolve() == dst.resolve():
        raise CheckpointError(f"{dst}: the cast copy must not replace its source")
    read_config(src)  # the folder and its config.json first, so a wrong --model is named as such
    if set(weight_map(src).values()) != {src / WEIGHTS_NAME}:
        raise CheckpointError(f"{src}: sharded weights are not cast here (a mini checkpoint is one file)")
    model = load_qwen3_tts(src, dtype=dtype)  # checks the layout and every shape first
    with atomic_dir(dst) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.name not in (WEIGHTS_NAME, CONFIG_NAME, INDEX_NAME):
                shutil.copy2(f, tmp / f.name)
        save_qwen3_tts(model, tmp)
    return dst


def model_hash(module: nn.Module | dict[str, torch.Tensor], n: int = 16) -> str:
    """Short sha256 hex over sorted state_dict names, dtypes, shapes and bytes (for manifests)."""
    sd = module if isinstance(module, dict) else module.state_dict()
    h = hashlib.sha256()
    for name in sorted(sd):
        t = sd[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:n]


# --------------------------------------------------------------------------------------------
# inspection (headers only, no tensor data read)
# --------------------------------------------------------------------------------------------
def _group(key: str) -> tuple[str, str]:
    """(part, group) of an official tensor name, for parameter counts."""
    if key.startswith(CP_PREFIX):
        k = key[len(CP_PREFIX):]
        if k.startswith("model.layers."):
            return "code_predictor", "layers"
        if k.startswith("model.codec_embedding."):
            return "code_predictor", "embeddings"
        if k.startswith("lm_head."):
            return "code_predictor", "lm_heads"
        if k.startswith("small_to_mtp_projection."):
            return "code_predictor", "projection"
        return "code_predictor", "norm" if k.startswith("model.norm.") else "other"
    if key.startswith(TALKER_PREFIX):
        k = key[len(TALKER_PREFIX):]
        for prefix, group in (("model.layers.", "layers"), ("model.text_embedding.", "text_embedding"),
                              ("model.codec_embedding.", "codec_embedding"), ("text_projection.", "text_projection"),
                              ("codec_head.", "codec_head"), ("model.norm.", "norm")):
            if k.startswith(prefix):
                return "talker", group
        return "talker", "other"
    return "other", key.split(".", 1)[0]


def checkpoint_info(path: str | os.PathLike) -> dict:
    """Architecture, parameter counts per part and group, stored dtypes, and the weight bytes one
    code-predictor call reads, from config.json and the safetensors headers only."""
    d = Path(path)
    cfg = read_config(d)
    wmap = weight_map(d)
    counts: dict[str, dict[str, int]] = {}
    dtypes: dict[str, int] = {}
    by_file: dict[Path, list[str]] = {}
    for k, f in wmap.items():
        by_file.setdefault(f, []).append(k)
    for f, keys in by_file.items():
        with safe_open(str(f), framework="pt", device="cpu") as h:
            for k in keys:
                sl = h.get_slice(k)
                n = 1
                for s in sl.get_shape():
                    n *= int(s)
                part, group = _group(k)
                counts.setdefault(part, {}).setdefault(group, 0)
                counts[part][group] += n
                dt = str(sl.get_dtype())
                dtypes[dt] = dtypes.get(dt, 0) + n
    for part in counts.values():
        part["total"] = sum(v for g, v in part.items() if g != "total")
    size = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}
    stored = max(dtypes, key=dtypes.get) if dtypes else "F32"
    per_call = cfg.code_predictor.params_per_call()
    talker, cp = cfg.talker, cfg.code_predictor
    return {
        "path": str(d), "tts_model_type": cfg.tts_model_type, "tts_model_size": cfg.tts_model_size,
        "talker": {k: getattr(talker, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                   "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                                                   "text_vocab_size", "text_hidden_size", "rope_theta")}
        | {"mrope_section": list(talker.mrope_section), "mrope_interleaved": talker.mrope_interleaved},
        "code_predictor": {k: getattr(cp, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                       "num_key_value_heads", "head_dim", "intermediate_size",
                                                       "vocab_size", "num_code_groups", "rope_theta")}
        | {"small_to_mtp_projection": cp.has_projection},
        "parameters": counts, "stored_dtypes": dtypes, "stored_dtype": stored,
        "code_predictor_call": {
            "params": per_call,
            "bytes_stored_dtype": per_call["total"] * size.get(stored, 4),
            "bytes_bfloat16": per_call["total"] * 2, "bytes_float32": per_call["total"] * 4,
            "counts": "all predictor layers + final norm + one LM head + one embedding row (+ projection); "
                      "KV cache and activations not counted",
        },
    }
