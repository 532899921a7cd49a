"""Real-dataset ingestion and official teacher forcing (rvqspec.real.datasets), on generated data.

* each layout (VoxPopuli-, LibriSpeech-, Fleurs-like `save_to_disk` dirs, a parquet folder, a plain
  audio folder with metadata.csv or .txt side files) yields the same unified items: ids, the raw
  text column preferred, ISO languages (ClassLabel and names decoded), audio bit-exact;
* bad input -> DatasetError naming the path/key/value;
* the official-prompt teacher forcing reproduces the talker hidden states that the official
  `Qwen3TTSForConditionalGeneration.generate` returns for its own codes (streaming and
  non-streaming prompts), and wrong codes are detected (negative control);
* items -> shards end to end: frame counts and hidden states match `teacher_forced_hidden`.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
import torch

from _real_plugins import toy_encode as toy_encoder
from _tiny_official import CODEBOOK, FakeProcessor, LANGUAGE, SPEAKER, tiny_official
from rvqspec.real.datasets import (DatasetError, DatasetSpec, OfficialTeacherForcer, PromptConfig, count_items,
                                   detect_layout, extract_items, iso_language, iter_items, iter_range,
                                   official_speech_encoder)

SR = 16000
TEXTS = ["Hello there, world.", "A second line!", "Third: the end."]


def audio(i: int) -> np.ndarray:
    g = np.random.default_rng(i)
    return (0.1 * g.standard_normal(int(SR * (0.3 + 0.1 * i)))).astype(np.float32)  # (n,)


def wav_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, a, SR, format="WAV", subtype="FLOAT")  # float WAV: bit-exact round trip
    return buf.getvalue()


def hf_dataset(columns: dict, class_labels: dict | None = None):
    import datasets

    feats = {k: datasets.Value("string") if isinstance(v[0], str) else datasets.Value("int64")
             for k, v in columns.items()}
    for k, names in (class_labels or {}).items():
        feats[k] = datasets.ClassLabel(names=names)
    # stored as the Audio feature stores it (struct of bytes/path), then cast: building it through
    # Audio.encode_example would need torchcodec, which this environment lacks
    feats["audio"] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    rows = dict(columns, audio=[{"bytes": wav_bytes(audio(i)), "path": None} for i in range(len(TEXTS))])
    ds = datasets.Dataset.from_dict(rows, features=datasets.Features(feats))
    return ds.cast_column("audio", datasets.Audio(decode=False))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    import datasets

    root = tmp_path_factory.mktemp("layouts")
    n = len(TEXTS)
    vox = hf_dataset({"audio_id": [f"vp{i}" for i in range(n)], "raw_text": TEXTS,
                      "normalized_text": [t.lower() for t in TEXTS], "language": [0] * n},
                     class_labels={"language": ["en", "de"]})
    datasets.DatasetDict({"train": vox, "validation": vox.select([0])}).save_to_disk(str(root / "voxpopuli"))
    libri = hf_dataset({"id": [f"ls-{i}" for i in range(n)], "text": [t.upper() for t in TEXTS]})
    libri.save_to_disk(str(root / "librispeech"))
    (root / "libri_parquet" / "data").mkdir(parents=True)
    libri.to_parquet(str(root / "libri_parquet" / "data" / "test-00000-of-00001.parquet"))
    fleurs = hf_dataset({"id": list(range(n)), "raw_transcription": TEXTS,
                         "transcription": [t.lower() for t in TEXTS], "language": ["German"] * n})
    datasets.DatasetDict({"test": fleurs}).save_to_disk(str(root / "fleurs"))
    folder = root / "folder"
    (folder / "wavs").mkdir(parents=True)
    lines = ["file_name,text,language"]
    for i, t in enumerate(TEXTS):
        sf.write(folder / "wavs" / f"u{i}.wav", audio(i), SR, subtype="FLOAT")
        lines.append(f'wavs/u{i}.wav,"{t}",es')
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    side = root / "side"
    side.mkdir()
    for i, t in enumerate(TEXTS):
        sf.write(side / f"s{i}.flac", audio(i), SR)
        (side / f"s{i}.txt").write_text(t + "\n", encoding="utf-8")
    return root


def check(items, ids, texts, lang, exact=True):
    assert [it.id for it in items] == ids
    assert [it.text for it in items] == texts
    assert {it.language for it in items} == {lang}
    for i, it in enumerate(items):
        assert it.sampling_rate == SR and it.audio.dtype == np.float32
        if exact:
            np.testing.assert_array_equal(it.audio, audio(i))
        else:  # FLAC stores 16-bit PCM
            np.testing.assert_allclose(it.audio, audio(i), atol=2 / 32768)


def test_layouts_yield_unified_items(layouts) -> None:
    r = layouts
    assert detect_layout(r / "voxpopuli") == "hf_disk" and detect_layout(r / "libri_parquet") == "parquet"
    assert detect_layout(r / "folder") == "folder"
    check(list(iter_items(DatasetSpec(str(r / "voxpopuli"), split="train"))), [f"vp{i}" for i in range(3)], TEXTS, "en")
    upper = [t.upper() for t in TEXTS]
    ls_ids = [f"ls-{i}" for i in range(3)]
    check(list(iter_items(DatasetSpec(str(r / "librispeech"), language="en"))), ls_ids, upper, "en")
    check(list(iter_items(DatasetSpec(str(r / "libri_parquet"), language="en"))), ls_ids, upper, "en")
    check(list(iter_items(str(r / "fleurs"))), ["0", "1", "2"], TEXTS, "de")
    check(list(iter_items(str(r / "folder"))), ["u0", "u1", "u2"], TEXTS, "es")
    check(list(iter_items(DatasetSpec(str(r / "side"), language="ru"))), ["s0", "s1", "s2"], TEXTS, "ru", exact=False)
    # sharded reading: only the requested rows, in order; limit applies
    assert [i for i, _ in iter_range(str(r / "fleurs"), [2, 0])] == [0, 2]
    assert count_items(DatasetSpec(str(r / "voxpopuli"), split="train", limit=2)) == 2
    # explicit text column: VoxPopuli's normalized text instead of the raw one
    items = list(iter_items(DatasetSpec(str(r / "voxpopuli"), split="train", text_column="normalized_text")))
    assert [it.text for it in items] == [t.lower() for t in TEXTS]


def test_bad_input_is_named(layouts, tmp_path) -> None:
    r = layouts
    with pytest.raises(DatasetError, match="splits.*choose one"):
        list(iter_items(str(r / "voxpopuli")))
    with pytest.raises(DatasetError, match="no split 'test'"):
        list(iter_items(DatasetSpec(str(r / "voxpopuli"), split="test")))
    with pytest.raises(DatasetError, match="no language column.*LibriSpeech"):
        list(iter_items(str(r / "librispeech")))
    with pytest.raises(DatasetError, match="no column 'sentence'"):
        list(iter_items(DatasetSpec(str(r / "folder"), text_column="sentence")))
    with pytest.raises(DatasetError, match="unknown language 'klingon'"):
        iso_language("klingon")
    (tmp_path / "x.wav").write_bytes(wav_bytes(audio(0)))
    with pytest.raises(DatasetError, match=r"x.wav: no transcript \(expected x.txt"):
        list(iter_items(str(tmp_path)))
    (tmp_path / "x.txt").write_text("hi")
    (tmp_path / "x.wav").write_bytes(b"not audio")
    with pytest.raises(DatasetError, match="x.wav: could not read audio"):
        list(iter_items(DatasetSpec(str(tmp_path), language="en")))
    with pytest.raises(DatasetError, match="dataset directory not found"):
        detect_layout(tmp_path / "nope")
    with pytest.raises(DatasetError, match="no speech tokenizer here"):
        official_speech_encoder(tmp_path)
    assert [iso_language(v) for v in ("English", "en_us", "cmn_hans_cn", "Japanese", "de")] == ["en", "en", "zh", "ja", "de"]


# ---- official teacher forcing --------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return tiny_official(seed=3)


def text_ids(s: str) -> torch.Tensor:
    return FakeProcessor()(text=s)["input_ids"]


@pytest.mark.parametrize("non_streaming", [True, False])
def test_teacher_forcing_matches_official_generate(model, non_streaming) -> None:
    text = "teacher forcing check"
    ids = text_ids(OfficialTeacherForcer.format_text(text))
    codes, hidden = model.generate(input_ids=[ids], languages=[LANGUAGE], speakers=[SPEAKER], max_new_tokens=12,
                                   do_sample=False, subtalker_dosample=False, non_streaming_mode=non_streaming)
    codes, hidden = codes[0], hidden[0]  # (T, 16), (T, E)
    assert codes.shape[0] >= 4
    forcer = OfficialTeacherForcer(model, text_ids, PromptConfig(speaker=SPEAKER, non_streaming_mode=non_streaming))
    mine = forcer(text, "en", codes)
    assert mine.shape == hidden.shape
    assert (mine - hidden).abs().max().item() < 1e-5
    # negative control: another frame 0 changes every later hidden state (and not the first)
    bad = codes.clone()
    bad[0, 0] = (bad[0, 0] + 1) % CODEBOOK
    other = forcer(text, "en", bad)
    assert (other[0] - hidden[0]).abs().max().item() < 1e-5
    assert (other[1:] - hidden[1:]).abs().amax(-1).min().item() > 1e-4


def test_items_to_shards(model, layouts, tmp_path) -> None:
    from safetensors.torch import load_file

    from rvqspec.measure.extract import ExtractConfig, read_manifest, teacher_forced_hidden
    from rvqspec.real.official_pipeline import shared_code_predictor

    items = list(iter_items(DatasetSpec(str(layouts / "folder"), language="en")))  # the tiny model knows English only
    man = extract_items(model, items, toy_encoder, text_ids, tmp_path / "shards",
                        prompt=PromptConfig(speaker=SPEAKER), config=ExtractConfig(shard_frames=5, dtype="float32"))
    m = read_manifest(man.parent)
    T = [toy_encoder(it.audio, it.sampling_rate).shape[0] for it in items]
    assert m["frames"] == sum(T) and len(m["shards"]) >= 2
    assert m["extra"]["dataset_stats"]["items"] == 3
    hidden = torch.cat([load_file(str(man.parent / s["file"]))["hidden"] for s in m["shards"]])
    codes = torch.cat([load_file(str(man.parent / s["file"]))["codes"] for s in m["shards"]])
    forcer = OfficialTeacherForcer(model, text_ids, PromptConfig(speaker=SPEAKER))
    cp = shared_code_predictor(model.talker.code_predictor, model.talker)
    it = items[1]
    c = toy_encoder(it.audio, SR)
    lo = T[0]
    ref = teacher_forced_hidden(cp, forcer(it.text, it.language, c), c)
    assert torch.equal(codes[lo:lo + T[1]], c)
    assert (hidden[lo:lo + T[1]] - ref).abs().max().item() < 1e-6


def test_parquet_split_is_honoured(tmp_path) -> None:
    """--split picks the split's files in both hub parquet layouts; a missing split or an unchosen
    one among several is a named error (it used to load every file whatever the split)."""
    n = len(TEXTS)
    libri = hf_dataset({"id": [f"ls-{i}" for i in range(n)], "text": TEXTS})
    hub = tmp_path / "hub" / "data"  # the hub's <split>-00000-of-00001.parquet names (LibriSpeech)
    hub.mkdir(parents=True)
    libri.select([0, 1]).to_parquet(str(hub / "test.clean-00000-of-00001.parquet"))
    libri.select([2]).to_parquet(str(hub / "train.clean.100-00000-of-00001.parquet"))
    conv = tmp_path / "conv"  # refs/convert/parquet: <config>/<split>/0000.parquet (Fleurs)
    for lang, split, rows in (("en_us", "train", [0]), ("en_us", "test", [1, 2]), ("de_de", "test", [0])):
        (conv / lang / split).mkdir(parents=True)
        libri.select(rows).to_parquet(str(conv / lang / split / "0000.parquet"))
    ids = lambda path, split: [it.id for it in iter_items(DatasetSpec(str(path), split=split, language="en"))]
    assert ids(tmp_path / "hub", "test.clean") == ["ls-0", "ls-1"]
    assert ids(tmp_path / "hub", "train.clean.100") == ["ls-2"]
    assert sorted(ids(conv, "test")) == ["ls-0", "ls-1", "ls-2"] and ids(conv, "train") == ["ls-0"]
    assert count_items(DatasetSpec(str(conv), split="test")) == 3
    with pytest.raises(DatasetError, match=r"no split 'test' among its parquet files \(splits: \['test.clean', "):
        ids(tmp_path / "hub", "test")
    with pytest.raises(DatasetError, match=r"conv: holds splits \['test', 'train'\]; choose one"):
        count_items(str(conv))
    # one split only (names saying nothing, or one name): no split needed
    assert ids(tmp_path / "hub" / "data" / ".." / "data", "test.clean") == ["ls-0", "ls-1"]


def test_folder_split_is_a_subfolder(tmp_path) -> None:
    """An audio folder takes --split as its subfolder (audiofolder's train/, test/); it was ignored."""
    for split, idx in (("train", [0, 1]), ("test", [2])):
        (tmp_path / split).mkdir()
        lines = ["file_name,text,language"]
        for i in idx:
            sf.write(tmp_path / split / f"u{i}.wav", audio(i), SR, subtype="FLOAT")
            lines.append(f'u{i}.wav,"{TEXTS[i]}",en')
        (tmp_path / split / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [it.id for it in iter_items(DatasetSpec(str(tmp_path), split="train"))] == ["u0", "u1"]
    assert [it.id for it in iter_items(DatasetSpec(str(tmp_path), split="test"))] == ["u2"]
    with pytest.raises(DatasetError, match=r"no split folder 'validation'.*subfolders: \['test', 'train'\]"):
        count_items(DatasetSpec(str(tmp_path), split="validation"))
