"""The mini world's corpus as Hugging Face datasets on disk: text, speech, phoneme frames, codec codes.

Two copies, both `datasets.DatasetDict` keyed by split (`rvqspec.mini.text.SPLITS`):

- `runs/mini/corpus` (not committed, ~2 GB): columns id, text, language, split, duration, audio
  (float32 samples at 16 kHz), phoneme_frames, and codes once the codec is fitted.
- `data/mini/corpus` (committed, a few MB): the same without audio, its Arrow files zstd-compressed
  (`compress_arrow_files`). CI, model training and hidden state extraction read this one.

Columns: `phoneme_frames` is a (T,) int32 list of `PhonemeTokenizer` ids, one per 80 ms frame;
`codes` is (T, num_codebooks) (uint8 when codebook_size <= 256), from the same T frames.

Tables are built directly with pyarrow (no per-sample Python float lists) and written to a temporary
directory that replaces the target only when complete.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
from datasets import Dataset, DatasetDict, load_from_disk
from tqdm.auto import tqdm

from rvqspec.mini.phonemes import PhonemeTokenizer, num_frames
from rvqspec.mini.speech import SAMPLE_RATE, SpeechConfig, synthesize
from rvqspec.mini.text import SPLITS, CorpusConfig, TextItem, make_texts

TEXT_COLUMNS = ("id", "text", "language", "split", "duration")
REQUIRED_COLUMNS = TEXT_COLUMNS + ("phoneme_frames",)


class CorpusError(ValueError):
    """A corpus directory is missing or does not have the expected splits and columns."""


@dataclass
class Record:
    item: TextItem
    audio: np.ndarray  # (n,) float32 at 16 kHz
    phonemes: list  # [(start s, mnemonic)]

    @property
    def num_frames(self) -> int:
        return num_frames(len(self.audio))


def synthesize_items(items: Sequence[TextItem], speech: SpeechConfig = SpeechConfig(),
                     progress: bool = True) -> list[Record]:
    out = []
    for it in tqdm(items, desc="espeak-ng synthesis", disable=not progress):
        utt = synthesize(it.text, it.language, speech)
        out.append(Record(it, utt.audio, utt.phonemes))
    return out


def fit_tokenizer(records: Sequence[Record], split: str = "model_train", min_pair_count: int = 3,
                  points: int = 2) -> PhonemeTokenizer:
    """Phoneme vocabulary from the model's own training split (the held-out splits may map to <unk>)."""
    fit = [(r.item.language, r.phonemes, r.num_frames) for r in records if r.item.split == split]
    if not fit:
        raise CorpusError(f"no records in split {split!r} to fit the phoneme tokenizer on")
    return PhonemeTokenizer.fit(fit, min_pair_count=min_pair_count, points=points)


def _list_array(arrays: Sequence[np.ndarray], pa_type, chunk_rows: int = 256):
    """pyarrow list<pa_type> from 1-D arrays, or list<fixed_size_list<pa_type>[Q]> from (T, Q) arrays,
    built from flat numpy buffers (no per-sample Python scalars), `chunk_rows` rows per chunk.

    Chunks bound the extra memory to one chunk's flat copy instead of a copy of the whole column."""
    if len(arrays) > chunk_rows:
        return pa.chunked_array([_list_array(arrays[s:s + chunk_rows], pa_type, chunk_rows)
                                 for s in range(0, len(arrays), chunk_rows)])
    arrays = [np.asarray(a) for a in arrays]
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)  # (N,) rows per item
    total = int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32 if total < 2**31 else np.int64)
    flat = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.zeros(0)
    inner = pa.array(flat, type=pa_type)
    if arrays and arrays[0].ndim == 2:  # (T, Q) -> T fixed-size lists of Q values
        inner = pa.FixedSizeListArray.from_arrays(inner, arrays[0].shape[1])
    cls = pa.ListArray if offsets.dtype == np.int32 else pa.LargeListArray
    return cls.from_arrays(pa.array(offsets), inner)


def codes_dtype(codebook_size: int) -> np.dtype:
    """The stored type of a corpus's codes: one byte while every code fits in it, else int16
    (the real tokenizer's 2,048 codes per level)."""
    return np.dtype(np.uint8 if codebook_size <= 256 else np.int16)


def _codes_type(codebook_size: int):
    return pa.from_numpy_dtype(codes_dtype(codebook_size))


def _split_table(rows: list[dict], with_audio: bool, codebook_size: int | None):
    """pyarrow Table for one split. rows: dicts with the text columns, phoneme_frames, [audio], [codes]."""
    cols = {
        "id": pa.array([r["id"] for r in rows], pa.string()),
        "text": pa.array([r["text"] for r in rows], pa.string()),
        "language": pa.array([r["language"] for r in rows], pa.string()),
        "split": pa.array([r["split"] for r in rows], pa.string()),
        "duration": pa.array([float(r["duration"]) for r in rows], pa.float32()),
        "phoneme_frames": _list_array([r["phoneme_frames"] for r in rows], pa.int32()),
    }
    if with_audio:
        cols["audio"] = _list_array([r["audio"] for r in rows], pa.float32())
    if codebook_size is not None:
        cols["codes"] = _list_array([r["codes"] for r in rows], _codes_type(codebook_size))
    return pa.table(cols)


def save_corpus(rows: list[dict], directory: str | os.PathLike, with_audio: bool,
                codebook_size: int | None = None) -> Path:
    """Write rows as a DatasetDict keyed by split, atomically (temp dir, then rename)."""
    directory = Path(directory)
    by_split: dict[str, list[dict]] = {}
    for r in rows:
        by_split.setdefault(r["split"], []).append(r)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.tmp"))
    try:
        # Each split goes through an Arrow stream file that the Dataset memory-maps: `Dataset(table)`
        # on an in-memory table took ~6x the table's size (5 GB for 0.8 GB of audio, measured), which
        # put the 19,780-clip corpus out of a 24 GB machine's memory.
        splits = {}
        for s in SPLITS:
            if s not in by_split:
                continue
            table = _split_table(by_split[s], with_audio, codebook_size)
            with pa.OSFile(str(tmp / f"{s}.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
                for batch in table.to_batches(max_chunksize=256):
                    w.write_batch(batch)
            del table
            splits[s] = Dataset.from_file(str(tmp / f"{s}.arrow"))
        dd = DatasetDict(splits)
        dd.save_to_disk(str(tmp / "ds"))
        del dd, splits  # release the memory maps before the temporary files go
        if not with_audio:
            compress_arrow_files(tmp / "ds")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp / "ds", directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory


def compress_arrow_files(directory: str | os.PathLike, codec: str = "zstd") -> list[Path]:
    """Rewrite every Arrow stream file under `directory` (a `save_to_disk` folder) with compressed
    buffers, in place; `datasets.load_from_disk` reads them unchanged. For the committed copy only:
    its codes are mostly the deep levels' few codes, so zstd takes the 1,024-code candidate's
    `model_train` split from 26.8 to 5.5 MB; the audio copy stays uncompressed for memory mapping."""
    written = []
    options = pa.ipc.IpcWriteOptions(compression=codec)
    for path in sorted(Path(directory).rglob("*.arrow")):
        with pa.OSFile(str(path), "rb") as src:  # read into memory: the file is replaced below
            table = pa.ipc.open_stream(src).read_all()
        tmp = path.with_name(path.name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_stream(f, table.schema, options=options) as w:
            for batch in table.to_batches(max_chunksize=1024):
                w.write_batch(batch)
        del table
        os.replace(tmp, path)
        written.append(path)
    return written


def load_corpus(directory: str | os.PathLike, need_audio: bool = False, need_codes: bool = False):
    """The corpus DatasetDict at `directory`, with a clear error when it is missing or incomplete."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CorpusError(f"no corpus at {directory} (build it: rvqspec mini build --steps corpus,codec)")
    try:
        dd = load_from_disk(str(directory))
    except Exception as exc:  # datasets raises FileNotFoundError / various on a foreign directory
        raise CorpusError(f"cannot load the corpus at {directory}: {exc}") from exc
    if not isinstance(dd, DatasetDict):
        raise CorpusError(f"{directory} holds a single Dataset, expected a DatasetDict keyed by split")
    need = set(REQUIRED_COLUMNS) | ({"audio"} if need_audio else set()) | ({"codes"} if need_codes else set())
    for split, ds in dd.items():
        missing = need - set(ds.column_names)
        if missing:
            raise CorpusError(f"{directory} split {split!r} lacks columns {sorted(missing)}")
    return dd


def in_language(ds: Dataset, lang: str = "en") -> Dataset:
    """The rows of one corpus split in one language (in memory: the split's order kept)."""
    return ds.filter(lambda value: value == lang, input_columns="language", keep_in_memory=True)


def clips_with_share(languages: Sequence[str], lang: str, share: float, rng: np.random.Generator,
                     count: int | None = None) -> np.ndarray:
    """Sorted indices of every clip of `lang` (or `count` of them, drawn) plus the other languages'
    clips drawn equally so that `lang` is `share` of the selection (all of a language when it has
    fewer). The codec's fit with English at half its clips gives level 0 more English cells
    (docs/design.md, "Candidate v5"; BuildConfig.codec_share)."""
    langs = np.asarray(languages)
    mine = np.flatnonzero(langs == lang)
    if count is not None:
        mine = np.sort(rng.permutation(mine)[:count])
    others = [other for other in dict.fromkeys(languages) if other != lang]
    per = int(round(len(mine) * (1 - share) / share / max(len(others), 1)))
    picks = [mine] + [np.sort(rng.permutation(np.flatnonzero(langs == other))[:per]) for other in others]
    return np.sort(np.concatenate(picks))


def corpus_rows(records: Sequence[Record], tokenizer: PhonemeTokenizer) -> list[dict]:
    rows = []
    for r in records:
        rows.append({"id": r.item.id, "text": r.item.text, "language": r.item.language, "split": r.item.split,
                     "duration": len(r.audio) / SAMPLE_RATE, "audio": r.audio,
                     "phoneme_frames": tokenizer.frame_tokens(r.phonemes, r.num_frames, r.item.language).astype(np.int32)})
    return rows


def rows_from_corpus(dd, with_audio: bool) -> list[dict]:
    """All rows of a saved corpus as dicts of numpy arrays (split order of SPLITS)."""
    rows = []
    for split in SPLITS:
        if split not in dd:
            continue
        ds = dd[split].with_format("numpy")
        cols = [c for c in ds.column_names if with_audio or c != "audio"]
        for r in ds.select_columns(cols):
            rows.append({k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()})
    return rows


def build_corpus(runs_corpus: str | os.PathLike, data_corpus: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 config: CorpusConfig = CorpusConfig(), speech: SpeechConfig = SpeechConfig(),
                 progress: bool = True) -> dict:
    """Step `corpus`: texts -> espeak-ng speech -> tokenizer -> both corpus copies (without codes yet)."""
    items = make_texts(config)
    records = synthesize_items(items, speech, progress)
    tokenizer = fit_tokenizer(records, points=config.tokenizer_points)
    tokenizer.save(tokenizer_path)
    rows = corpus_rows(records, tokenizer)
    save_corpus(rows, runs_corpus, with_audio=True)
    save_corpus(rows, data_corpus, with_audio=False)
    return corpus_stats(rows, tokenizer)


def corpus_stats(rows: Sequence[dict], tokenizer: PhonemeTokenizer | None = None) -> dict:
    stats: dict = {}
    for r in rows:
        s = stats.setdefault(r["split"], {}).setdefault(r["language"], {"samples": 0, "seconds": 0.0, "frames": 0})
        s["samples"] += 1
        s["seconds"] = round(s["seconds"] + float(r["duration"]), 3)
        s["frames"] += len(r["phoneme_frames"])
    out = {"splits": stats}
    if tokenizer is not None:
        out["phoneme_vocab_size"] = tokenizer.vocab_size
        from rvqspec.mini.phonemes import UNK
        n = sum(len(r["phoneme_frames"]) for r in rows)
        out["unk_frame_fraction"] = round(sum(int((np.asarray(r["phoneme_frames"]) == UNK).sum()) for r in rows) / max(n, 1), 6)
    return out


def add_codes(runs_corpus: str | os.PathLike, data_corpus: str | os.PathLike,
              encode: Callable[[np.ndarray], np.ndarray], codebook_size: int, progress: bool = True) -> dict:
    """Step `codec` (second half): encode every clip, rewrite both corpus copies with a codes column."""
    dd = load_corpus(runs_corpus, need_audio=True)
    rows = rows_from_corpus(dd, with_audio=True)
    for r in tqdm(rows, desc="codec encode corpus", disable=not progress):
        codes = np.asarray(encode(r["audio"]))  # (T, Q)
        if codes.shape[0] != len(r["phoneme_frames"]):
            raise CorpusError(f"{r['id']}: codec gave {codes.shape[0]} frames, phoneme_frames has "
                              f"{len(r['phoneme_frames'])}")
        r["codes"] = codes.astype(codes_dtype(codebook_size))
    del dd  # release the memory-mapped files before replacing the directory
    save_corpus(rows, runs_corpus, with_audio=True, codebook_size=codebook_size)
    save_corpus(rows, data_corpus, with_audio=False, codebook_size=codebook_size)
    return corpus_stats(rows)
