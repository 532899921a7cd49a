"""Real speech datasets on local disk -> teacher-forced hidden-state shards (seed 000 §2.2, §3.1).

The seed trains the offsets on VoxPopuli (English train split), calibrates the tree on LibriSpeech
test-clean and evaluates on Fleurs (six languages). This module reads those corpora from local
disk -- no hub access here -- in whichever form they were saved, and yields one unified item type:

    RealItem(id, text, language, audio (n,) float32 mono, sampling_rate)

Layouts (`open_dataset(path)` detects them):
* a Hugging Face `datasets` directory written by `save_to_disk` (Dataset or DatasetDict; pick the
  split with `split=`), e.g. `load_dataset("facebook/voxpopuli", "en").save_to_disk(...)`
  on a machine with hub access;
* a folder of parquet / arrow files as the hub stores them (`<dir>/**/*.parquet`), read with the
  packaged `load_dataset("parquet", data_files=...)` builder; dataset *scripts* are not supported by
  `datasets` >= 4.0, so the old script-based repos must be converted first (see docs/real_weights.md);
* a plain folder of audio files with transcripts: `metadata.csv` (audiofolder convention: a
  `file_name` column and a `text`/`transcription`/`sentence` column, optional `language`, `id`) or
  one `<stem>.txt` side file per audio file.

Columns per corpus (first present wins; the raw, punctuated text is preferred, as TTS input):
VoxPopuli `raw_text` > `normalized_text`; LibriSpeech `text`; Fleurs `raw_transcription` >
`transcription`, language from `language`/`lang_id`/the config name. Audio is never decoded by
`datasets` (that needs torchcodec, absent here): the column is cast to `Audio(decode=False)` and the
bytes/paths are read with soundfile, downmixed to mono float32.

Encoding audio to codes: the official 12 Hz speech tokenizer (`Qwen3TTSTokenizer`, 16 codebooks,
24 kHz input) from a local directory when one is given (`official_speech_encoder`), or any callable
`encoder(audio (n,), sampling_rate) -> codes (T, 16) long` (the tests use a tiny deterministic one).

Teacher forcing the talker (`OfficialTeacherForcer`): the talker's input for an utterance is built
by the official prompt builder itself -- `Qwen3TTSForConditionalGeneration.generate` is run up to the
point where it calls `talker.generate(inputs_embeds=..., trailing_text_hidden=..., ...)`, and that
call is intercepted -- so role tokens, codec think/language/speaker tags, tts_bos/eos/pad and the
(non-)streaming text layout are exactly the official ones. The ground-truth frames are then appended
as the official generation loop would feed them (sum of the 16 code embeddings + next text
embedding or tts_pad) and one causal talker pass gives the hidden state that conditions each frame's
code predictor. `tests/test_datasets_real.py` checks this against the hidden states the official
`generate` itself returns. The shards are written by `rvqspec.measure.extract`.

The mini world's checkpoint (data/mini/model) is in the official layout but reads one phoneme token
per frame instead of the chat prompt: `MiniTeacherForcer` teacher-forces it with the mini front end
(`--backend mini` on the command line), and `write_mini_layouts` writes the mini corpus in the three
layouts above, so the real-data runbook can be rehearsed end to end (docs/real_weights.md).
"""
from __future__ import annotations

import csv
import importlib
import importlib.util
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import datasets
import numpy as np
import soundfile as sf
import torch

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.frame_loop import teacher_forced_frames
from rvqspec.core.sampling import Sampling
from rvqspec.measure.extract import ExtractConfig, extract
from rvqspec.mini.codec import RVQCodec
from rvqspec.mini.phonemes import TOKENIZER_FILE, PhonemeTokenizer
from rvqspec.real.asr import resample
from rvqspec.real.official import import_official
from rvqspec.real.official_pipeline import shared_code_predictor

AUDIO_EXTS = (".wav", ".flac", ".ogg", ".mp3", ".opus")
TEXT_COLUMNS = ("raw_text", "raw_transcription", "text", "transcription", "normalized_text", "sentence")
ID_COLUMNS = ("audio_id", "id", "segment_id", "file_name", "path")
LANGUAGE_COLUMNS = ("language", "lang_id", "locale", "lang")

# ISO code <-> names seen in the corpora and in Qwen3-TTS `codec_language_id` (lower-case keys).
LANGUAGES = {
    "en": ("english", "en_us", "en-us", "en_gb", "eng"),
    "de": ("german", "de_de", "de-de", "deu", "ger"),
    "es": ("spanish", "es_419", "es_es", "es-es", "spa"),
    "ru": ("russian", "ru_ru", "ru-ru", "rus"),
    "ja": ("japanese", "ja_jp", "ja-jp", "jpn"),
    "zh": ("chinese", "cmn_hans_cn", "cmn", "zh_cn", "zh-cn", "mandarin", "mandarin_chinese", "zho"),
    "fr": ("french", "fr_fr", "fra"),
    "it": ("italian", "it_it", "ita"),
    "ko": ("korean", "ko_kr", "kor"),
    "pt": ("portuguese", "pt_br", "por"),
}
QWEN_LANGUAGE = {"en": "english", "de": "german", "es": "spanish", "ru": "russian", "ja": "japanese",
                 "zh": "chinese", "fr": "french", "it": "italian", "ko": "korean", "pt": "portuguese"}


class DatasetError(ValueError):
    """A dataset directory, row or encoder output does not fit (message names path/key/value)."""


def iso_language(value: Any, where: str = "language") -> str:
    """'English', 'en_us', 'cmn_hans_cn', 'de' ... -> two-letter code; DatasetError if unknown."""
    v = str(value).strip().lower().replace(" ", "_")
    if v in LANGUAGES:
        return v
    for code, names in LANGUAGES.items():
        if v in names or v.split("_")[0] in (code,) or v.split("-")[0] == code:
            return code
    raise DatasetError(f"{where}: unknown language {value!r}; known: {sorted(LANGUAGES)} (or pass language=)")


@dataclass
class RealItem:
    id: str
    text: str
    language: str                 # ISO code (en, de, es, ru, ja, zh, ...)
    audio: np.ndarray             # (n,) float32 mono
    sampling_rate: int
    extra: dict = field(default_factory=dict)   # other small columns (e.g. the mini corpus's phoneme_frames)

    @property
    def seconds(self) -> float:
        return len(self.audio) / float(self.sampling_rate)


# --------------------------------------------------------------------------------------------
# audio decoding (never through datasets' decoder)
# --------------------------------------------------------------------------------------------
def read_audio(source: Any, where: str) -> tuple[np.ndarray, int]:
    """A path, a {'bytes', 'path'} dict or an {'array', 'sampling_rate'} dict -> (mono float32, rate)."""
    if isinstance(source, dict) and source.get("array") is not None:
        a = np.asarray(source["array"], dtype=np.float32)
        sr = source.get("sampling_rate")
        if sr is None:
            raise DatasetError(f"{where}: audio dict has 'array' but no 'sampling_rate'")
        return _mono(a, where), int(sr)
    try:
        if isinstance(source, dict):
            if source.get("bytes"):
                data, sr = sf.read(io.BytesIO(source["bytes"]), dtype="float32", always_2d=True)
            elif source.get("path"):
                data, sr = sf.read(source["path"], dtype="float32", always_2d=True)
            else:
                raise DatasetError(f"{where}: audio entry has neither bytes nor path")
        else:
            data, sr = sf.read(str(source), dtype="float32", always_2d=True)
    except DatasetError:
        raise
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError / OSError
        raise DatasetError(f"{where}: could not read audio ({exc})") from exc
    return _mono(data, where), int(sr)


def _mono(a: np.ndarray, where: str) -> np.ndarray:
    if a.ndim == 2:
        a = a.mean(axis=1)
    if a.ndim != 1 or a.size == 0:
        raise DatasetError(f"{where}: audio must be a non-empty mono or (n, channels) array, got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


# --------------------------------------------------------------------------------------------
# layouts
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DatasetSpec:
    """Where a corpus lives and how to read it (defaults: detect everything)."""

    path: str
    split: str | None = None          # DatasetDict split (e.g. "train", "test"); required if several
    language: str | None = None       # override / supply the language (LibriSpeech has none)
    text_column: str | None = None
    limit: int | None = None          # first N items (after sharding is applied by the caller)


def detect_layout(path: str | os.PathLike) -> str:
    """'hf_disk' | 'parquet' | 'folder'; DatasetError naming the directory otherwise."""
    d = Path(path)
    if not d.is_dir():
        raise DatasetError(f"{d}: dataset directory not found")
    if (d / "dataset_dict.json").is_file() or (d / "state.json").is_file():
        return "hf_disk"
    if any(d.rglob("*.parquet")) or any(d.rglob("*.arrow")):
        return "parquet"
    if (d / "metadata.csv").is_file() or any(p.suffix.lower() in AUDIO_EXTS for p in d.rglob("*")):
        return "folder"
    raise DatasetError(f"{d}: not a dataset directory (no dataset_dict.json/state.json from save_to_disk, no "
                       f"parquet/arrow files, no audio files or metadata.csv)")


def _hf_table(spec: DatasetSpec, layout: str):
    d = Path(spec.path)
    if layout == "hf_disk":
        ds = datasets.load_from_disk(str(d))
    else:
        files, builder = sorted(d.rglob("*.parquet")), "parquet"
        if not files:
            files, builder = sorted(d.rglob("*.arrow")), "arrow"
        files = _split_files(d, files, spec.split)
        ds = datasets.load_dataset(builder, data_files={"data": [str(f) for f in files]}, split="data")
    if isinstance(ds, datasets.DatasetDict):
        splits = sorted(ds)
        if spec.split is None:
            if len(splits) != 1:
                raise DatasetError(f"{d}: holds splits {splits}; choose one with split=")
            ds = ds[splits[0]]
        elif spec.split not in ds:
            raise DatasetError(f"{d}: no split {spec.split!r} (splits: {splits})")
        else:
            ds = ds[spec.split]
    if "audio" not in ds.column_names:
        raise DatasetError(f"{d}: no 'audio' column (columns: {ds.column_names})")
    ds = ds.cast_column("audio", datasets.Audio(decode=False))
    return ds


_SHARD_NAME = re.compile(r"^(?P<split>.+?)-\d{5}-of-\d{5}$")  # the hub's "<split>-00000-of-00001"


def split_of(root: Path, file: Path) -> str | None:
    """The split a hub parquet file belongs to: `<split>-00000-of-00003.parquet` (the hub's own
    names, e.g. LibriSpeech `test.clean-...`) or `<split>/0000.parquet` (the refs/convert/parquet
    layout, e.g. Fleurs `en_us/test/0000.parquet`); None when the name says nothing."""
    m = _SHARD_NAME.match(file.stem)
    if m:
        return m.group("split")
    if file.stem.isdigit() and file.parent != root:
        return file.parent.name
    return None


def _split_files(root: Path, files: list[Path], split: str | None) -> list[Path]:
    """The files of `split` (all files when no split is asked and the names show at most one)."""
    splits = {f: split_of(root, f) for f in files}
    named = sorted({v for v in splits.values() if v is not None})
    if split is None:
        if len(named) > 1:
            raise DatasetError(f"{root}: holds splits {named}; choose one with split= (--split)")
        return files
    chosen = [f for f in files if splits[f] == split]
    if not chosen:
        raise DatasetError(f"{root}: no split {split!r} among its parquet files (splits: {named or 'none named'}; "
                           f"files are named <split>-00000-of-00001.parquet or <split>/0000.parquet)")
    return chosen


def _pick(row: dict, names: Sequence[str], chosen: str | None, where: str, what: str) -> tuple[str, Any]:
    if chosen is not None:
        if chosen not in row:
            raise DatasetError(f"{where}: no column {chosen!r} (columns: {sorted(row)})")
        return chosen, row[chosen]
    for n in names:
        v = row.get(n)
        if v is not None and (not isinstance(v, str) or v.strip()):
            return n, v
    raise DatasetError(f"{where}: no {what} column among {list(names)} (columns: {sorted(row)})")


def _language_of(row: dict, spec: DatasetSpec, features: Any, where: str) -> str:
    if spec.language is not None:
        return iso_language(spec.language, where=f"{where}: language=")
    for col in LANGUAGE_COLUMNS:
        if col in row and row[col] is not None:
            v = row[col]
            feat = features.get(col) if features is not None else None
            if isinstance(v, (int, np.integer)) and feat is not None and hasattr(feat, "int2str"):
                v = feat.int2str(int(v))  # ClassLabel (VoxPopuli 'language', Fleurs 'lang_id')
            if isinstance(v, (int, np.integer)):
                continue
            return iso_language(v, where=f"{where}: column {col!r}")
    raise DatasetError(f"{where}: no language column among {list(LANGUAGE_COLUMNS)}; pass language= "
                       f"(e.g. 'en' for LibriSpeech)")


EXTRA_COLUMNS = ("phoneme_frames", "speaker_id", "gender")


def _hf_item(spec: DatasetSpec, ds, i: int) -> RealItem:
    row = ds[i]
    where = f"{spec.path}[{i}]"
    _, text = _pick(row, TEXT_COLUMNS, spec.text_column, where, "text")
    idc = next((c for c in ID_COLUMNS if row.get(c) not in (None, "")), None)
    audio, sr = read_audio(row["audio"], where=f"{where}.audio")
    return RealItem(id=str(row[idc]) if idc else str(i), text=str(text).strip(),
                    language=_language_of(row, spec, ds.features, where), audio=audio, sampling_rate=sr,
                    extra={k: row[k] for k in EXTRA_COLUMNS if row.get(k) is not None})


def _folder_rows(d: Path) -> list[dict]:
    meta = d / "metadata.csv"
    if meta.is_file():
        with meta.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            raise DatasetError(f"{meta}: no rows")
        if "file_name" not in rows[0]:
            raise DatasetError(f"{meta}: needs a 'file_name' column (columns: {list(rows[0])})")
        for r in rows:
            r["_audio"] = d / r["file_name"]
        return rows
    rows = []
    for p in sorted(q for q in d.rglob("*") if q.suffix.lower() in AUDIO_EXTS):
        side = p.with_suffix(".txt")
        if not side.is_file():
            raise DatasetError(f"{p}: no transcript (expected {side.name} beside it, or a metadata.csv in {d})")
        rows.append({"file_name": str(p.relative_to(d)), "text": side.read_text(encoding="utf-8").strip(),
                     "_audio": p})
    return rows


def _folder_item(spec: DatasetSpec, row: dict) -> RealItem:
    where = f"{spec.path}/{row['file_name']}"
    if not Path(row["_audio"]).is_file():
        raise DatasetError(f"{where}: audio file listed in metadata.csv is missing")
    _, text = _pick(row, TEXT_COLUMNS, spec.text_column, where, "text")
    audio, sr = read_audio(row["_audio"], where=where)
    return RealItem(id=row.get("id") or Path(row["file_name"]).stem, text=str(text).strip(),
                    language=_language_of(row, spec, None, where), audio=audio, sampling_rate=sr)


def _as_spec(spec: DatasetSpec | str | os.PathLike) -> DatasetSpec:
    return DatasetSpec(str(spec)) if isinstance(spec, (str, os.PathLike)) else spec


def _table(spec: DatasetSpec):
    """(layout, rows-or-dataset, length) without decoding any audio."""
    layout = detect_layout(spec.path)
    if layout == "folder" and spec.split is not None:
        # audiofolder convention: one subfolder per split (train/, test/, ...)
        sub = Path(spec.path) / spec.split
        if not sub.is_dir():
            names = sorted(q.name for q in Path(spec.path).iterdir() if q.is_dir())
            raise DatasetError(f"{spec.path}: no split folder {spec.split!r} (audio folders hold one subfolder per "
                               f"split; subfolders: {names})")
        spec = DatasetSpec(str(sub), split=None, language=spec.language, text_column=spec.text_column,
                           limit=spec.limit)
    t = _folder_rows(Path(spec.path)) if layout == "folder" else _hf_table(spec, layout)
    n = len(t) if spec.limit is None else min(len(t), spec.limit)
    return layout, t, n


def count_items(spec: DatasetSpec | str) -> int:
    """Number of items (after `limit`), without decoding audio (for sharding)."""
    return _table(_as_spec(spec))[2]


def iter_range(spec: DatasetSpec | str, indices: Iterable[int] | None = None) -> Iterator[tuple[int, RealItem]]:
    """(index, item) for the given item indices (all if None), in increasing order. Data-parallel
    sharding reads only its own rows: audio of other rows is never decoded."""
    spec = _as_spec(spec)
    layout, t, n = _table(spec)
    wanted = range(n) if indices is None else sorted(set(int(i) for i in indices))
    for i in wanted:
        if not 0 <= i < n:
            raise DatasetError(f"{spec.path}: item index {i} out of range ({n} items)")
        yield i, (_folder_item(spec, t[i]) if layout == "folder" else _hf_item(spec, t, i))


def iter_items(spec: DatasetSpec | str) -> Iterator[RealItem]:
    """The unified iterator over any supported layout (see the module docstring)."""
    for _, item in iter_range(spec):
        yield item


# --------------------------------------------------------------------------------------------
# audio -> codes
# --------------------------------------------------------------------------------------------
Encoder = Callable[[np.ndarray, int], torch.Tensor]


def _official_tokenizer(path: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
    d = Path(path)
    if not (d / "config.json").is_file():
        raise DatasetError(f"{d}: no speech tokenizer here (expected config.json of the 12 Hz Qwen3-TTS "
                           f"tokenizer, e.g. <Qwen3-TTS checkpoint>/speech_tokenizer)")

    import_official()
    try:
        from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

        kw = {"dtype": dtype} if dtype is not None else {}
        if torch.device(device).type != "cpu":
            # not for the CPU: under a torchrun-style launch without GPUs, transformers' device_map
            # path asks for an accelerator and raises; weights load on the CPU by default anyway
            kw["device_map"] = str(device)
        return Qwen3TTSTokenizer.from_pretrained(str(d), **kw)
    except Exception as exc:  # missing optional deps (librosa, ...) or a malformed directory
        raise DatasetError(f"{d}: could not load the official speech tokenizer ({type(exc).__name__}: {exc})") from exc


def official_speech_encoder(path: str | os.PathLike, device: str = "cpu", tokenizer=None) -> Encoder:
    """The official 12 Hz speech tokenizer from a local directory (e.g. `<checkpoint>/speech_tokenizer`).

    Audio is resampled to the tokenizer's input rate here (scipy), because the official resampler is
    librosa, which this environment lacks."""
    tok = tokenizer or _official_tokenizer(path, device)
    rate = int(tok.get_input_sample_rate())

    def encode(audio: np.ndarray, sampling_rate: int) -> torch.Tensor:
        wav = resample(audio, sampling_rate, rate)
        return tok.encode(wav, sr=rate).audio_codes[0].long().cpu()  # (T, 16)

    return encode


def check_codes(codes: Any, where: str, num_groups: int, c0_vocab: int, vocab: int) -> torch.Tensor:
    codes = torch.as_tensor(codes).long()
    if codes.dim() != 2 or codes.shape[1] != num_groups or codes.shape[0] == 0:
        raise DatasetError(f"{where}: encoder returned codes of shape {tuple(codes.shape)}, expected (T>0, {num_groups})")
    if int(codes.min()) < 0 or int(codes[:, 0].max()) >= c0_vocab or int(codes[:, 1:].max()) >= vocab:
        raise DatasetError(f"{where}: codes out of range (c0 < {c0_vocab}, c1..c15 < {vocab}); got max c0 "
                           f"{int(codes[:, 0].max())}, max rest {int(codes[:, 1:].max())}")
    return codes


# --------------------------------------------------------------------------------------------
# teacher forcing the official talker with the official prompt
# --------------------------------------------------------------------------------------------
class _Captured(Exception):
    def __init__(self, kwargs: dict):
        self.kwargs = kwargs


@dataclass
class PromptConfig:
    """How the official prompt is built for an utterance (Qwen3TTSForConditionalGeneration.generate)."""

    speaker: str | None = None            # CustomVoice speaker name (None: no speaker tag)
    instruct: str | None = None           # optional instruction (not for 0.6B CustomVoice)
    non_streaming_mode: bool = True       # the Qwen3TTSModel wrappers' default
    use_language: bool = True             # pass the item's language (else "auto")
    extra: dict = field(default_factory=dict)


class OfficialTeacherForcer:
    """(text, language, codes (T, 16)) -> the talker hidden state conditioning each frame (T, E),
    built with the official prompt builder (see the module docstring).

    model: an official `Qwen3TTSForConditionalGeneration`; text_ids: callable str -> (1, L) long ids
    of the *formatted* text (the Qwen3TTSModel wrapper's `<|im_start|>assistant\\n{text}<|im_end|>\\n
    <|im_start|>assistant\\n`); `text_tokenizer_from_checkpoint` gives that for a real checkpoint."""

    def __init__(self, model, text_ids: Callable[[str], torch.Tensor], prompt: PromptConfig = PromptConfig()):
        self.model = model
        self.text_ids = text_ids
        self.prompt = prompt
        cfg = model.config.talker_config
        self.num_groups = int(cfg.num_code_groups)
        self.languages = {k.lower() for k in (cfg.codec_language_id or {})}

    def qwen_language(self, iso: str) -> str:
        if not self.prompt.use_language:
            return "auto"
        name = QWEN_LANGUAGE.get(iso, iso)
        if name not in self.languages:
            raise DatasetError(f"language {iso!r} ({name!r}) is not in this checkpoint's codec_language_id "
                               f"{sorted(self.languages)}; set PromptConfig(use_language=False) to use 'auto'")
        return name

    @staticmethod
    def format_text(text: str) -> str:
        return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"

    def prompt_inputs(self, text: str, language: str) -> dict:
        """The official talker.generate inputs (inputs_embeds (1, P, E), attention_mask,
        trailing_text_hidden (1, L, E), tts_pad_embed (1, 1, E)) for one utterance."""
        m = self.model
        ids = torch.as_tensor(self.text_ids(self.format_text(text))).long().view(1, -1).to(m.talker.device)
        instruct = None
        if self.prompt.instruct:
            instruct = [torch.as_tensor(self.text_ids(f"<|im_start|>user\n{self.prompt.instruct}<|im_end|>\n")).long()
                        .view(1, -1).to(m.talker.device)]
        talker = m.talker
        had = "generate" in talker.__dict__
        saved = talker.__dict__.get("generate")

        def capture(**kwargs):
            raise _Captured(kwargs)

        talker.__dict__["generate"] = capture
        try:
            m.generate(input_ids=[ids], instruct_ids=instruct, languages=[self.qwen_language(language)],
                       speakers=[self.prompt.speaker], non_streaming_mode=self.prompt.non_streaming_mode,
                       **self.prompt.extra)
        except _Captured as cap:
            return cap.kwargs
        finally:
            if had:
                talker.__dict__["generate"] = saved
            else:
                talker.__dict__.pop("generate", None)
        raise DatasetError("the official generate returned without calling talker.generate")  # pragma: no cover

    @torch.no_grad()
    def __call__(self, text: str, language: str, codes: torch.Tensor) -> torch.Tensor:
        """codes (T, 16) -> talker hidden (T, E): hidden[t] is what the official loop passes to the code
        predictor as `past_hidden` when it completes frame t."""
        m = self.model
        talker = m.talker
        inp = self.prompt_inputs(text, language)
        prefill = inp["inputs_embeds"]  # (1, P, E)
        trailing = inp["trailing_text_hidden"]  # (1, L, E)
        pad = inp["tts_pad_embed"]  # (1, 1, E)
        codes = codes.to(prefill.device).long()
        T = codes.shape[0]
        cp = talker.code_predictor
        # frame t's embedding sum, as Qwen3TTSTalkerForConditionalGeneration.forward builds it
        emb = [talker.get_input_embeddings()(codes[:, :1])]  # (T, 1, E)
        emb += [cp.get_input_embeddings()[i](codes[:, i + 1:i + 2]) for i in range(self.num_groups - 1)]
        frame = torch.cat(emb, 1).sum(1).unsqueeze(0)  # (1, T, E)
        steps = torch.arange(T - 1, device=prefill.device)
        text_add = torch.where((steps < trailing.shape[1]).view(1, -1, 1),
                               trailing[:, steps.clamp(max=trailing.shape[1] - 1)], pad)  # (1, T-1, E)
        x = torch.cat([prefill, frame[:, : T - 1] + text_add], 1)  # (1, P + T - 1, E)
        mask = torch.ones(1, x.shape[1], dtype=torch.long, device=x.device)
        position_ids, _ = talker.get_rope_index(mask)  # (3, 1, L) as the official prefill computes it
        out = talker.model(inputs_embeds=x, attention_mask=mask, position_ids=position_ids, use_cache=False)
        P = prefill.shape[1]
        return out.last_hidden_state[0, P - 1:]  # (T, E)


def text_tokenizer_from_checkpoint(path: str | os.PathLike) -> Callable[[str], torch.Tensor]:
    """The checkpoint's own text tokenizer (Qwen2 BPE files beside config.json), as the official
    processor applies it."""
    d = Path(path)
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except Exception as exc:
        raise DatasetError(f"{d}: no usable text tokenizer (vocab.json/merges.txt/tokenizer_config.json) "
                           f"({type(exc).__name__}: {exc})") from exc
    return lambda s: torch.tensor([tok(s)["input_ids"]])


# --------------------------------------------------------------------------------------------
# items -> (talker hidden, codes) -> shards
# --------------------------------------------------------------------------------------------
def utterances(items: Iterable[RealItem], encoder: Encoder, forcer: Callable[[str, str, torch.Tensor], torch.Tensor],
               num_groups: int, c0_vocab: int, vocab: int, max_frames: int | None = None,
               on_item: Callable[[RealItem, int], None] | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(talker_hidden (T, E), codes (T, 16)) per item: what `rvqspec.measure.extract.extract` consumes."""
    for item in items:
        where = f"item {item.id!r}"
        codes = check_codes(encoder(item.audio, item.sampling_rate), where, num_groups, c0_vocab, vocab)
        if max_frames is not None:
            codes = codes[:max_frames]
        hidden = forcer.for_item(item, codes) if hasattr(forcer, "for_item") else forcer(item.text, item.language, codes)
        if hidden.shape[0] != codes.shape[0]:
            raise DatasetError(f"{where}: teacher forcing gave {hidden.shape[0]} hidden states for {codes.shape[0]} frames")
        if on_item is not None:
            on_item(item, codes.shape[0])
        yield hidden, codes  # hidden in the model's dtype: the code predictor reads it next


def extract_with(code_predictor, forcer, items: Iterable[RealItem], encoder: Encoder, out_dir: str | os.PathLike,
                 c0_vocab: int, source: str = "teacher_forced", config=None, progress: bool = False,
                 extra: dict | None = None, sampling=None, generator: torch.Generator | None = None,
                 model_hash: str | None = None) -> Path:
    """Items -> hidden-state shards with any teacher forcer (`forcer.for_item(item, codes)` or
    `forcer(text, language, codes)` -> (T, E)); `code_predictor` is our MultiCodeDecoder."""
    stats = {"items": 0, "frames": 0, "audio_seconds": 0.0}

    def count(item: RealItem, frames: int) -> None:
        stats["items"] += 1
        stats["frames"] += frames
        stats["audio_seconds"] += item.seconds

    cfg = code_predictor.config
    utts = utterances(items, encoder, forcer, int(cfg.num_code_groups), int(c0_vocab), int(cfg.vocab_size),
                      on_item=count)
    return extract(code_predictor, utts, out_dir, source=source, config=config or ExtractConfig(), progress=progress,
                   sampling=sampling or Sampling(), generator=generator, model_hash=model_hash,
                   extra={**(extra or {}), "dataset_stats": stats})


def extract_items(official_model, items: Iterable[RealItem], encoder: Encoder, text_ids: Callable[[str], torch.Tensor],
                  out_dir: str | os.PathLike, prompt: PromptConfig = PromptConfig(), source: str = "teacher_forced",
                  config=None, progress: bool = False, extra: dict | None = None, sampling=None,
                  generator: torch.Generator | None = None, model_hash: str | None = None) -> Path:
    """Real items -> hidden-state shards in out_dir (rvqspec.measure.extract format) for an official model;
    returns the manifest path. h_1..h_15 come from our MultiCodeDecoder sharing the official tensors."""
    talker = official_model.talker
    ours = shared_code_predictor(talker.code_predictor, talker)
    forcer = OfficialTeacherForcer(official_model, text_ids, prompt)
    c0_vocab = int(official_model.config.talker_config.vocab_size) - 1024  # the official control-token band
    return extract_with(ours, forcer, items, encoder, out_dir, c0_vocab, source=source, config=config,
                        progress=progress, extra=extra, sampling=sampling, generator=generator, model_hash=model_hash)


# --------------------------------------------------------------------------------------------
# the mini world's checkpoint (official layout, its own text front end)
# --------------------------------------------------------------------------------------------
class MiniTeacherForcer:
    """Teacher forcing for the mini world's model (data/mini/model): its talker reads one phoneme
    token per frame (rvqspec.core.frame_loop), not the official chat prompt, so the official prompt builder does
    not apply. Text ids: the item's own `phoneme_frames` when it has them with one token per code
    frame (datasets made from the mini corpus), else espeak-ng's phoneme timing for the text,
    stretched linearly to the audio's frame count (an approximation for foreign audio)."""

    def __init__(self, model_dir: str | os.PathLike):
        d = Path(model_dir)
        tok = d / TOKENIZER_FILE
        if not tok.is_file():
            raise DatasetError(f"{tok}: missing; --backend mini needs the mini model directory (data/mini/model)")
        self.model = load_qwen3_tts(d)
        self.tokenizer = PhonemeTokenizer.load(tok)
        self.stretched = 0

    @property
    def code_predictor(self):
        return self.model.code_predictor

    @property
    def c0_vocab(self) -> int:
        return int(self.model.code_predictor.config.vocab_size)  # mini: c0 shares the codebook size

    def text_ids(self, item: RealItem, frames: int) -> torch.Tensor:
        pf = item.extra.get("phoneme_frames")
        if pf is not None and len(pf) == frames:
            return torch.as_tensor(np.asarray(pf), dtype=torch.long)
        ids, _ = self.tokenizer.phonemize(item.text, item.language)
        ids = np.asarray(ids)
        self.stretched += 1
        pick = np.minimum((np.arange(frames) * len(ids)) // max(frames, 1), len(ids) - 1)  # (T,)
        return torch.as_tensor(ids[pick], dtype=torch.long)

    @torch.no_grad()
    def for_item(self, item: RealItem, codes: torch.Tensor) -> torch.Tensor:
        ids = self.text_ids(item, codes.shape[0])
        hidden, _ = teacher_forced_frames(self.model.talker, self.model.code_predictor, ids, codes)
        return hidden  # (T, E)


# --------------------------------------------------------------------------------------------
# codecs and text tokenizers named on the command line
# --------------------------------------------------------------------------------------------
@dataclass
class Codec:
    """encode(audio (n,), rate) -> codes (T, 16); decode(codes (T, 16)) -> (audio (n,), rate)."""

    encode: Encoder
    decode: Callable[[torch.Tensor], tuple[np.ndarray, int]]
    name: str = ""


def load_object(spec: str) -> Any:
    """'path/to/file.py:NAME' or 'package.module:NAME' -> the object (for test doubles and plugins)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise DatasetError(f"{spec!r}: expected FILE.py:NAME or module:NAME")
    if target.endswith(".py"):
        p = Path(target)
        if not p.is_file():
            raise DatasetError(f"{spec!r}: no such file {p}")
        import sys

        if str(p.resolve().parent) not in sys.path:  # sibling imports work, as for a script
            sys.path.insert(0, str(p.resolve().parent))
        mod_spec = importlib.util.spec_from_file_location(f"_rvqspec_plugin_{p.stem}", p)
        mod = importlib.util.module_from_spec(mod_spec)
        assert mod_spec.loader is not None
        mod_spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(target)
    if not hasattr(mod, name):
        raise DatasetError(f"{spec!r}: {target} has no attribute {name!r}")
    return getattr(mod, name)


def official_codec(path: str | os.PathLike, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> Codec:
    """The official 12 Hz speech tokenizer, both directions (decode gives 24 kHz audio)."""
    tok = _official_tokenizer(path, device, dtype)
    enc = official_speech_encoder(path, device, tokenizer=tok)

    def decode(codes: torch.Tensor) -> tuple[np.ndarray, int]:
        wavs, rate = tok.decode([{"audio_codes": codes.to(tok.device)}])
        return np.asarray(wavs[0], dtype=np.float32), int(rate)

    return Codec(enc, decode, name=f"official:{path}")


def mini_codec(path: str | os.PathLike) -> Codec:
    """The mini world's RVQ codec (16 codebooks, 16 kHz, Griffin-Lim decoder)."""
    codec = RVQCodec.load(path)
    rate = int(codec.config.sample_rate)

    def encode(audio: np.ndarray, sampling_rate: int) -> torch.Tensor:
        return codec.encode(torch.from_numpy(resample(audio, sampling_rate, rate)))

    def decode(codes: torch.Tensor) -> tuple[np.ndarray, int]:
        return np.asarray(codec.decode(codes.cpu()), dtype=np.float32), rate

    return Codec(encode, decode, name=f"mini:{path}")


def codec_from_spec(spec: str | None, model_dir: str | os.PathLike, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> Codec:
    """'official:DIR' | 'mini:DIR' | 'FILE.py:NAME' (a Codec, or an object with encode/decode) |
    None (= official:<model>/speech_tokenizer). device/dtype: where the official tokenizer runs."""
    if spec is None:
        return official_codec(Path(model_dir) / "speech_tokenizer", device, dtype)
    kind, sep, rest = spec.partition(":")
    if sep and kind == "official":
        return official_codec(rest, device, dtype)
    if sep and kind == "mini":
        return mini_codec(rest)
    obj = load_object(spec)
    obj = obj() if isinstance(obj, type) else obj
    if isinstance(obj, Codec):
        return obj
    if hasattr(obj, "encode") and hasattr(obj, "decode"):
        return Codec(obj.encode, obj.decode, name=spec)
    raise DatasetError(f"--codec {spec!r}: expected official:DIR, mini:DIR, or FILE.py:NAME naming an object "
                       f"with encode(audio, rate) and decode(codes)")


def text_ids_from_spec(spec: str | None, model_dir: str | os.PathLike) -> Callable[[str], torch.Tensor]:
    """None: the checkpoint's own text tokenizer; else 'FILE.py:NAME' naming a callable str -> (1, L) ids."""
    if spec is None:
        return text_tokenizer_from_checkpoint(model_dir)
    obj = load_object(spec)
    if not callable(obj):
        raise DatasetError(f"--text-tokenizer {spec!r} is not callable")
    return obj


# --------------------------------------------------------------------------------------------
# the mini world's corpus in the three real layouts (for the runbook demonstration)
# --------------------------------------------------------------------------------------------
LANGUAGE_NAMES = {"en": "English", "de": "German", "es": "Spanish", "ru": "Russian", "ja": "Japanese", "zh": "Mandarin Chinese"}


def _wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.asarray(audio, dtype=np.float32), rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def write_mini_layouts(corpus: str | os.PathLike, out: str | os.PathLike, train: int | None = None,
                       calibration: int | None = None, eval_per_language: int | None = None, rate: int = 16000) -> dict:
    """Write the mini corpus (with audio, runs/mini/corpus) as a VoxPopuli-like `save_to_disk` dir
    (train split: audio_id, raw_text, normalized_text, language ClassLabel), a LibriSpeech-like parquet
    folder (calibration split: id, text; no language column) and a Fleurs-like `save_to_disk` dir
    (eval split as 'test': id, raw_transcription, transcription, language names), each keeping the
    corpus's `phoneme_frames`. Audio is stored the way the `Audio` feature stores it (WAV bytes)."""
    src = datasets.load_from_disk(str(corpus))
    need = {"train", "calibration", "eval"}
    if not isinstance(src, datasets.DatasetDict) or not need <= set(src):
        raise DatasetError(f"{corpus}: expected the mini corpus DatasetDict with splits {sorted(need)}")
    if "audio" not in src["train"].column_names:
        raise DatasetError(f"{corpus}: no 'audio' column (the committed data/mini/corpus has none; use runs/mini/corpus)")
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    audio_feat = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}

    def rows(split, n, per_language=False):
        ds = src[split]
        if per_language:
            keep, seen = [], {}
            for i, lang in enumerate(ds["language"]):
                if n is None or seen.get(lang, 0) < n:
                    keep.append(i)
                    seen[lang] = seen.get(lang, 0) + 1
            ds = ds.select(keep)
        elif n is not None:
            ds = ds.select(range(min(n, len(ds))))
        for r in ds:
            yield r, {"bytes": _wav_bytes(np.asarray(r["audio"], np.float32), rate), "path": None}

    def finish(cols, feats):
        d = datasets.Dataset.from_dict(cols, features=datasets.Features(feats))
        return d.cast_column("audio", datasets.Audio(decode=False))

    pf = datasets.List(datasets.Value("int32"))
    vox = {"audio_id": [], "raw_text": [], "normalized_text": [], "language": [], "phoneme_frames": [], "audio": []}
    for r, a in rows("train", train):
        vox["audio_id"].append(r["id"]); vox["raw_text"].append(r["text"])
        vox["normalized_text"].append(r["text"].lower()); vox["language"].append(0)
        vox["phoneme_frames"].append(r["phoneme_frames"]); vox["audio"].append(a)
    feats = {"audio_id": datasets.Value("string"), "raw_text": datasets.Value("string"),
             "normalized_text": datasets.Value("string"), "language": datasets.ClassLabel(names=["en"]),
             "phoneme_frames": pf, "audio": audio_feat}
    datasets.DatasetDict({"train": finish(vox, feats)}).save_to_disk(str(o / "voxpopuli"))

    libri = {"id": [], "text": [], "phoneme_frames": [], "audio": []}
    for r, a in rows("calibration", calibration):
        libri["id"].append(r["id"]); libri["text"].append(r["text"].upper())
        libri["phoneme_frames"].append(r["phoneme_frames"]); libri["audio"].append(a)
    feats = {"id": datasets.Value("string"), "text": datasets.Value("string"), "phoneme_frames": pf, "audio": audio_feat}
    (o / "librispeech" / "data").mkdir(parents=True, exist_ok=True)
    finish(libri, feats).to_parquet(str(o / "librispeech" / "data" / "test.clean-00000-of-00001.parquet"))

    fl = {"id": [], "raw_transcription": [], "transcription": [], "language": [], "phoneme_frames": [], "audio": []}
    for k, (r, a) in enumerate(rows("eval", eval_per_language, per_language=True)):
        fl["id"].append(k); fl["raw_transcription"].append(r["text"]); fl["transcription"].append(r["text"].lower())
        fl["language"].append(LANGUAGE_NAMES.get(r["language"], r["language"]))
        fl["phoneme_frames"].append(r["phoneme_frames"]); fl["audio"].append(a)
    feats = {"id": datasets.Value("int64"), "raw_transcription": datasets.Value("string"),
             "transcription": datasets.Value("string"), "language": datasets.Value("string"), "phoneme_frames": pf,
             "audio": audio_feat}
    datasets.DatasetDict({"test": finish(fl, feats)}).save_to_disk(str(o / "fleurs"))
    return {"voxpopuli": len(vox["audio_id"]), "librispeech": len(libri["id"]), "fleurs": len(fl["id"]),
            "fleurs_languages": sorted(set(fl["language"])), "out": str(o)}
