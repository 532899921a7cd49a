"""`rvqspec mini build`: every step of the mini world, in order, recorded in data/mini/manifest.json.

Steps (issue 3):
- corpus: sentences (text.py) -> espeak-ng speech (speech.py) -> phoneme tokenizer and frame tokens
  (phonemes.py) -> runs/mini/corpus (with audio) and data/mini/corpus (without).
- codec: fit the RVQ codec (codec.py) on model_train audio, encode every clip (codes column in both
  corpus copies), measure quality on the held-out eval split; writes runs/mini/CORPUS_READY.
- recognizer: `rvqspec.mini.recognizer.train_recognizer(corpus_dir, codec_dir, out_dir, config)`.
- model: `rvqspec.mini.talker_train.train_mini_model(corpus_dir, codec_dir, out_dir, toy=...)`; with
  `parallel` (the default) the recognizer trains in a second process beside it, one core each.

The manifest keeps, per step, its config, timing and results, and for every file under data/mini its
size and sha256; `verify_artifacts` checks both.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import multiprocessing
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from rvqspec.core.jsonfile import read_json, write_json_atomic
from rvqspec.mini.codec import CONFIG_FILE as CODEC_CONFIG_FILE
from rvqspec.mini.codec import CodecConfig, RVQCodec, codec_quality
from rvqspec.mini.corpus import add_codes, build_corpus, clips_with_share, load_corpus
from rvqspec.mini.paths import MANIFEST_FILE, MiniPaths
from rvqspec.mini.phonemes import POINTS
from rvqspec.mini.text import CorpusConfig

STEPS = ("corpus", "codec", "recognizer", "model")
MANIFEST_FORMAT = "rvqspec-mini-manifest"
MANIFEST_VERSION = 1


class BuildError(RuntimeError):
    """A build step cannot run (a missing input or a missing step module)."""


class ArtifactError(ValueError):
    """data/mini does not match its manifest (a checksum, a size, a missing file, a config)."""


@dataclass
class BuildConfig:
    toy: bool = False
    steps: tuple[str, ...] = ("corpus", "codec")
    codec_fit_clips: int | None = None  # None: all model_train clips (the codec caps frames itself)
    quality_clips: int = 60  # eval clips for codec_quality (all languages; decoded: quality_decode)
    quality_decode: int = 24
    threads: int | None = None  # torch threads; None leaves torch's default
    progress: bool = True
    write_ready_flag: bool = True
    reuse_codec: bool = False  # codec step: keep a fitted codec already at data/mini/codec (same config)
    # the recognizer and the model read only corpus and codec, and each trains on one core: on a
    # 2-core machine running them side by side halves the build's longest stretch (only with a
    # one-thread model step: `side_step`)
    parallel: bool = True
    # the committed world's phonetic level 0 (CodecConfig.level0_lda; docs/design.md, "Mini world v3", kept in v4):
    # free-running English CER 45.0% -> 36.2% against the plain residual level 0 (0)
    level0_lda: int = 64  # 0: plain residual k-means at level 0 (CodecConfig's own default)
    # model step: code-predictor steps on the frozen talker after the joint training
    # (MiniModelConfig.cp_refine_steps; docs/design.md, "A code predictor trained for more epochs")
    cp_refine_steps: int | None = None  # None: the model config's own
    # the levers that made the mini world v4 (docs/design.md, "The talker's text table as phoneme
    # parts"), each defaulting to its config's own (the v4 recipe; None keeps it): codes per level
    # (CodecConfig.codebook_size), phonemes per frame in the talker's tokens
    # (CorpusConfig.tokenizer_points) and the text table trained as quarter-frame parts
    # (MiniModelConfig.text_parts)
    codebook_size: int | None = None
    # codes at level 0 alone (CodecConfig.level0_codebook_size: the talker's c0 vocabulary); None keeps
    # the config's own (level 0 as large as the others)
    level0_codebook_size: int | None = None
    tokenizer_points: int | None = None
    text_parts: bool | None = None
    # model step: joint training steps (MiniModelConfig.steps) and its torch threads
    # (MiniModelConfig.threads, 1 so the recognizer has the other core); None keeps the config's own.
    # A model step alone on a 2-core box runs 1.6x faster per step with 2 threads (0.36 against
    # 0.58 s, candidate v4 layout), which buys the talker more epochs in the same build time.
    model_steps: int | None = None
    model_threads: int | None = None
    # the coverage levers (docs/design.md, "Three times the data and the steps together"): another
    # model_train size for some languages (CorpusConfig.model_train_by_language, e.g. {"en": 6000})
    # and each step's share of draws for some languages (MiniModelConfig.language_share, e.g.
    # {"en": 0.5}); None keeps the config's own (every language 3,000 sentences, uniform draws)
    model_train_by_language: dict | None = None
    language_share: dict | None = None
    # codec step: one language's share of the codec's fit clips (all its model_train clips, the
    # others drawn equally; rvqspec.mini.corpus.clips_with_share), e.g. {"en": 0.5}: level 0's
    # cells follow the fit's frames (docs/design.md, "Candidate v5"); None fits on every clip
    codec_share: dict | None = None

    def __post_init__(self):
        if self.codec_share is not None and (len(self.codec_share) != 1
                                             or not all(0 < v < 1 for v in self.codec_share.values())):
            raise ValueError(f"codec share must name one language with a share in (0, 1), got {self.codec_share!r}")
        if self.tokenizer_points is not None and self.tokenizer_points not in POINTS:
            raise ValueError(f"tokenizer points must be one of {POINTS}, got {self.tokenizer_points!r}")

    def corpus_config(self):
        return _with(CorpusConfig.toy() if self.toy else CorpusConfig(), tokenizer_points=self.tokenizer_points,
                     model_train_by_language=self.model_train_by_language)

    def codec_config(self):
        return _with(CodecConfig.toy() if self.toy else CodecConfig(), level0_lda=self.level0_lda,
                     codebook_size=self.codebook_size, level0_codebook_size=self.level0_codebook_size)

    def model_config(self, config_cls):
        return _with(config_cls.toy() if self.toy else config_cls(), cp_refine_steps=self.cp_refine_steps,
                     text_parts=self.text_parts, steps=self.model_steps, threads=self.model_threads,
                     language_share=self.language_share)


def _with(config, **fields):
    """`config` with the given fields replaced, except those that are None (the config's own stays)."""
    return dataclasses.replace(config, **{k: v for k, v in fields.items() if v is not None})


def _jsonable(obj):
    if dataclasses.is_dataclass(obj):
        return _jsonable(asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def artifact_table(data_dir: Path) -> dict[str, dict]:
    """relative path -> {bytes, sha256} for every file under data_dir except the manifest itself."""
    out = {}
    for p in sorted(data_dir.rglob("*")):
        rel = p.relative_to(data_dir).as_posix()
        if not p.is_file() or rel == MANIFEST_FILE or any(part.startswith(".") for part in p.relative_to(data_dir).parts):
            continue
        out[rel] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
    return out


def _write_json_atomic(path: Path, payload: dict) -> None:
    write_json_atomic(path, payload, indent=2, ensure_ascii=False)


def read_manifest(data_dir: str | os.PathLike) -> dict:
    path = Path(data_dir) / MANIFEST_FILE
    manifest = read_json(path, ArtifactError, "no manifest (run: rvqspec mini build)")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ArtifactError(f"{path}: key 'format' is {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    return manifest


# ------------------------------------------------------------------------------------------ steps
def step_corpus(paths: MiniPaths, cfg: BuildConfig) -> dict:
    corpus_config = cfg.corpus_config()
    stats = build_corpus(paths.runs_corpus, paths.corpus, paths.tokenizer, corpus_config, progress=cfg.progress)
    return {"config": {"corpus": _jsonable(corpus_config)}, "result": stats}


def step_codec(paths: MiniPaths, cfg: BuildConfig) -> dict:
    codec_config = cfg.codec_config()
    dd = load_corpus(paths.runs_corpus, need_audio=True)
    if "model_train" not in dd:
        raise BuildError(f"{paths.runs_corpus} has no model_train split to fit the codec on")
    saved_quality = None
    if cfg.reuse_codec and (paths.codec / CODEC_CONFIG_FILE).is_file():
        codec = RVQCodec.load(paths.codec)
        if codec.config != codec_config:
            raise BuildError(f"--reuse-codec: {paths.codec} was fitted with a different config than this build's")
        meta = json.loads((paths.codec / CODEC_CONFIG_FILE).read_text())
        fit = meta.get("fit", {})
        if fit.get("share") != cfg.codec_share:
            raise BuildError(f"--reuse-codec: {paths.codec} was fitted with codec share "
                             f"{fit.get('share')}, this build asks for {cfg.codec_share}")
        n, fit_s = int(fit.get("clips", -1)), float(fit.get("seconds", float("nan")))
        saved_quality = meta.get("quality")
    else:
        fit_ds = dd["model_train"]
        n = len(fit_ds) if cfg.codec_fit_clips is None else min(cfg.codec_fit_clips, len(fit_ds))
        rng = np.random.default_rng(codec_config.seed)
        if cfg.codec_share:
            (lang, share), = cfg.codec_share.items()
            pick = clips_with_share(list(fit_ds["language"]), lang, share, rng)
            if n < len(pick):  # --codec-fit-clips: a random subset keeps the shares
                pick = np.sort(rng.permutation(pick)[:n])
            n = len(pick)
        else:
            pick = np.sort(rng.permutation(len(fit_ds))[:n])
        picked = fit_ds.select(pick)
        audios = [np.asarray(a, dtype=np.float32) for a in picked.with_format("numpy")["audio"]]
        labels = [np.asarray(t, dtype=np.int64) for t in picked["phoneme_frames"]] if codec_config.level0_lda else None
        t0 = time.time()
        codec = RVQCodec(codec_config).fit(audios, torch.Generator().manual_seed(codec_config.seed),
                                           progress=cfg.progress, labels=labels)
        fit_s = time.time() - t0
        del audios, labels
        # save and encode before the quality report: training the recognizer and the model waits
        # for codes and codec, and decoding with Griffin-Lim is the slow part of this step
        languages = dict(Counter(picked["language"]))
        codec.save(paths.codec, extra={"fit": {"clips": int(n), "seconds": round(fit_s, 1), "languages": languages,
                                               "share": cfg.codec_share}})
    has_eval = "eval" in dd
    del dd  # release the memory-mapped audio before add_codes rewrites the directory
    stats = add_codes(paths.runs_corpus, paths.corpus, lambda a: codec.encode(a).numpy(),
                      max(codec_config.level_sizes), progress=cfg.progress)
    if cfg.write_ready_flag:
        _write_ready_flag(paths, stats)
    # held-out quality: the eval split (never seen by the codec fit), all languages, a fixed subset
    quality = saved_quality or {}
    held = load_corpus(paths.runs_corpus, need_audio=True)["eval"] if has_eval and not quality else None
    if held is not None and len(held):
        order = np.random.default_rng(1).permutation(len(held))[:cfg.quality_clips]
        clips = held.select(np.sort(order)).with_format("numpy")
        audios = [np.asarray(a, dtype=np.float32) for a in clips["audio"]]
        langs = list(clips["language"])
        quality = codec_quality(codec, audios, decode_limit=cfg.quality_decode, progress=cfg.progress)
        en = [a for a, lang in zip(audios, langs) if lang == "en"]
        if en:
            quality["english"] = codec_quality(codec, en, decode_limit=min(cfg.quality_decode, len(en)),
                                               progress=cfg.progress)
    return {"config": {"codec": _jsonable(codec_config), "fit_clips": int(n)},
            "result": {"fit_seconds": round(fit_s, 1), "quality": quality, "corpus": stats}}


def _import_step(module: str, name: str) -> Callable:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name) or exc.name == module:
            raise BuildError(f"build step needs {module}.{name}, but {module} does not exist yet") from exc
        raise
    if not hasattr(mod, name):
        raise BuildError(f"build step needs {module}.{name}, which {module} does not define")
    return getattr(mod, name)


def step_recognizer(paths: MiniPaths, cfg: BuildConfig) -> dict:
    train_recognizer = _import_step("rvqspec.mini.recognizer", "train_recognizer")
    mod = importlib.import_module("rvqspec.mini.recognizer")
    config = None
    config_cls = getattr(mod, "RecognizerConfig", None)
    if config_cls is not None:
        config = config_cls.toy() if cfg.toy and hasattr(config_cls, "toy") else config_cls()
    result = train_recognizer(paths.runs_corpus, paths.codec, paths.recognizer, config)
    return {"config": {"recognizer": _jsonable(config)}, "result": _jsonable(result) if result is not None else None}


def step_model(paths: MiniPaths, cfg: BuildConfig) -> dict:
    train_mini_model = _import_step("rvqspec.mini.talker_train", "train_mini_model")
    config_cls = _import_step("rvqspec.mini.talker_train", "MiniModelConfig")
    config = cfg.model_config(config_cls)
    result = train_mini_model(paths.corpus, paths.codec, paths.model, config=config)  # config decides toy
    # the whole recipe, as the other steps record theirs (the model's mini_model.json holds the same)
    return {"config": _jsonable(config), "result": _jsonable(result) if result is not None else None}


STEP_FUNCTIONS: dict[str, Callable[[MiniPaths, BuildConfig], dict]] = {
    "corpus": step_corpus, "codec": step_codec, "recognizer": step_recognizer, "model": step_model}


def parse_steps(text: str | Sequence[str]) -> tuple[str, ...]:
    steps = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        raise ValueError(f"unknown build steps {bad or steps}; choose from {','.join(STEPS)}")
    return tuple(s for s in STEPS if s in steps)  # always in dependency order


def side_step(cfg: BuildConfig, steps: Sequence[str]) -> str | None:
    """The step that trains in a second process beside the model, or None. Only when the model step
    runs on one thread: a 2-thread model beside the recognizer oversubscribes the 2-core box (measured:
    0.36 s per step alone, about 5 s with another job beside it), so then the recognizer follows."""
    if not (cfg.parallel and {"recognizer", "model"} <= set(steps)):
        return None
    model_config = cfg.model_config(_import_step("rvqspec.mini.talker_train", "MiniModelConfig"))
    return "recognizer" if model_config.threads == 1 else None


def build(paths: MiniPaths = MiniPaths(), cfg: BuildConfig = BuildConfig(),
          log: Callable[[str], None] = print) -> dict:
    """Run the chosen steps in order; after each, rewrite the manifest (configs, timings, checksums)."""
    steps = parse_steps(cfg.steps)
    paths.data.mkdir(parents=True, exist_ok=True)
    try:
        manifest = read_manifest(paths.data)
    except ArtifactError:
        manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "steps": {}}
    if manifest.get("toy") is False and cfg.toy:
        raise BuildError(f"{paths.data} holds a real (non-toy) build; a toy build would overwrite it. "
                         "Pass another --out/--runs (e.g. /tmp/mini-toy/data, /tmp/mini-toy/runs)")
    if manifest.get("toy") is True and not cfg.toy:
        manifest["steps"] = {}  # a real build over a toy one: the toy steps no longer describe the files
    manifest["toy"] = cfg.toy
    done: dict[str, dict] = {}
    side = side_step(cfg, steps)
    pool = future = None
    try:
        for step in steps:
            if step == side:
                log(f"[mini build] step {step} ... (in a second process, beside the model)")
                pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
                future = pool.submit(_timed_step, step, paths, cfg, 1)  # one core, the model has the other
                continue
            log(f"[mini build] step {step} ...")
            manifest = _record(paths, cfg, manifest, done, step, _timed_step(step, paths, cfg), log)
        if future is not None:
            manifest = _record(paths, cfg, manifest, done, side, future.result(), log)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return manifest


def _timed_step(step: str, paths: MiniPaths, cfg: BuildConfig, threads: int | None = None) -> dict:
    threads = threads or cfg.threads
    if threads:  # every step sets them: the recognizer may run in a fresh process
        torch.set_num_threads(threads)
    t0 = time.time()
    entry = STEP_FUNCTIONS[step](paths, cfg)
    entry["seconds"] = round(time.time() - t0, 1)
    entry["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return entry


def _record(paths: MiniPaths, cfg: BuildConfig, manifest: dict, done: dict, step: str, entry: dict,
            log: Callable[[str], None]) -> dict:
    # re-read: another build process may have recorded a step meanwhile (the recognizer and
    # the model train in parallel, one core each)
    try:
        on_disk = read_manifest(paths.data)
    except ArtifactError:
        on_disk = None
    done[step] = entry
    if on_disk is not None and on_disk.get("toy") == cfg.toy:
        manifest["steps"] = {**on_disk.get("steps", {}), **done}
    manifest["steps"][step] = entry
    manifest["artifacts"] = artifact_table(paths.data)
    manifest["total_bytes"] = sum(a["bytes"] for a in manifest["artifacts"].values())
    _write_json_atomic(paths.manifest, manifest)
    log(f"[mini build] step {step} done in {entry['seconds']} s")
    return manifest


def record_step(data_dir: str | os.PathLike, step: str, entry: dict) -> dict:
    """Record a step that ran outside `build` (e.g. a model retrained by hand, or the drafters the
    main job trains) and re-checksum every artifact, so `verify_artifacts` covers its files."""
    data_dir = Path(data_dir)
    manifest = read_manifest(data_dir)
    entry = dict(_jsonable(entry))
    entry.setdefault("finished_utc", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    manifest.setdefault("steps", {})[step] = entry
    manifest["artifacts"] = artifact_table(data_dir)
    manifest["total_bytes"] = sum(a["bytes"] for a in manifest["artifacts"].values())
    _write_json_atomic(data_dir / MANIFEST_FILE, manifest)
    return manifest


def _write_ready_flag(paths: MiniPaths, stats: dict) -> None:
    """One line in runs/mini/CORPUS_READY: the signal that codes and codec are on disk."""
    splits = stats["splits"]
    n = sum(v["samples"] for s in splits.values() for v in s.values())
    frames = sum(v["frames"] for s in splits.values() for v in s.values())
    hours = sum(v["seconds"] for s in splits.values() for v in s.values()) / 3600
    line = (f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} corpus+codec ready: {n} utterances, "
            f"{hours:.2f} h, {frames} frames; codes in {paths.corpus}, codec in {paths.codec}, "
            f"tokenizer {paths.tokenizer}, audio corpus in {paths.runs_corpus}; quality -> {paths.manifest}\n")
    paths.runs.mkdir(parents=True, exist_ok=True)
    paths.ready_flag.write_text(line)


# ---------------------------------------------------------------------------------- verification
def verify_artifacts(data_dir: str | os.PathLike = MiniPaths().data) -> dict:
    """Check every file recorded in data_dir/manifest.json (size, sha256), that no recorded file is
    missing and none is unrecorded, and that the codec's saved config equals the recorded one.
    Returns the manifest; raises ArtifactError naming the first problems found."""
    data_dir = Path(data_dir)
    manifest = read_manifest(data_dir)
    recorded = manifest.get("artifacts")
    if not isinstance(recorded, dict) or not recorded:
        raise ArtifactError(f"{data_dir / MANIFEST_FILE}: key 'artifacts' is missing or empty")
    problems = []
    actual_files = {p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*") if p.is_file()
                    and not any(part.startswith(".") for part in p.relative_to(data_dir).parts)}
    actual_files.discard(MANIFEST_FILE)
    for rel, info in recorded.items():
        p = data_dir / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
            continue
        if p.stat().st_size != info.get("bytes"):
            problems.append(f"{rel}: {p.stat().st_size} bytes, manifest says {info.get('bytes')}")
        elif sha256_file(p) != info.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest")
    for rel in sorted(actual_files - set(recorded)):
        problems.append(f"{rel}: not recorded in the manifest")
    codec_step = manifest.get("steps", {}).get("codec")
    codec_cfg = data_dir / "codec" / "codec_config.json"
    if codec_step and codec_cfg.is_file():
        saved = json.loads(codec_cfg.read_text()).get("config")
        if saved != codec_step.get("config", {}).get("codec"):
            problems.append("codec/codec_config.json: config differs from manifest steps.codec.config.codec")
    if problems:
        raise ArtifactError(f"{data_dir} does not match its manifest: " + "; ".join(problems[:10])
                            + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""))
    return manifest
