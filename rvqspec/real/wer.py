"""WER/CER harness for real Qwen3-TTS runs, in the form of seed 000 Table 3.

For each evaluation item (text, language) and each seed, the official model synthesizes codes twice:
autoregressively (the untouched official code predictor) and speculatively (`rvqspec.accelerate`
with the trained offsets and calibrated tree) -- same talker, same seed policy (torch's global
generator seeded per item and seed, which the official sampling draws from). Codes are decoded to
audio by the speech tokenizer (or any decoder callable), transcribed by a recognizer, and scored
with `rvqspec.measure.metrics.score` (Whisper-style normalization; CER for ja/zh, WER otherwise).

Recognizers (`rvqspec.real.asr.load_recognizer`, local paths only): the seed used whisper-large-v3-turbo
for Japanese and Mandarin and parakeet-v3 for the others (through WhisperKit/OpenBench). parakeet-tdt
-0.6b-v3 is a NeMo model that transformers cannot load; `asr_for` maps languages to recognizers, e.g.
`{"ja": whisper_dir, "zh": whisper_dir, "*": other_dir}` with whisper-large-v3-turbo for every
language, or a transformers Parakeet CTC checkpoint (English only) for `en` -- say which in the report.

Output: `table3.json` (rows + per-system details) and `table3.md`:

    | Language | Audio (min) | AR toks/step | AR WER/CER | Spec toks/step | Spec WER/CER |

"Audio (min)" is the reference audio of the evaluated items (as seed Table 1/3 count it); the
minutes synthesized per system are in the JSON. AR tokens/step is 1.00 by construction (HF
`generate` makes one code-predictor call per code); the speculative value is measured
(codes c1..c15 per code-predictor call, `AccelStats.tokens_per_call`).

Data-parallel: `evaluate_units` runs one work unit of items (see `rvqspec.real.distributed`) and writes its
transcripts; `merge_eval` scores the union, so `accelerate launch` spreads the synthesis.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from rvqspec.core.drafters import load_drafter
from rvqspec.core.sampling import Sampling
from rvqspec.core.speculative import SpeculativeCodePredictor
from rvqspec.core.tree import SparseTree
from rvqspec.measure.metrics import is_character_language, score
from rvqspec.mini.pipeline import MiniTTS
from rvqspec.real.datasets import QWEN_LANGUAGE, OfficialTeacherForcer, codec_from_spec, text_ids_from_spec
from rvqspec.real.distributed import DONE_SUFFIX, ScaleError, placement, unit_name, write_json_atomic
from rvqspec.real.official_pipeline import as_drafter, as_tree, accelerate, load_official_model, shared_code_predictor

SYSTEMS = ("ar", "spec")
Decoder = Callable[[torch.Tensor], tuple[np.ndarray, int]]   # codes (T, 16) -> (audio (n,), rate)


@dataclass(frozen=True)
class EvalConfig:
    seeds: tuple[int, ...] = (0,)          # the seed averaged over ten seeds per system
    max_new_tokens: int = 2048             # frames per utterance (the wrappers' default)
    speaker: str | None = None
    non_streaming_mode: bool = True
    use_language: bool = True
    subtalker_top_k: int = 50              # deployed code-predictor sampling (seed 000 §3.1)
    subtalker_top_p: float = 1.0
    subtalker_temperature: float = 0.9
    subtalker_dosample: bool = True


def synthesize(model, text_ids: Callable[[str], torch.Tensor], text: str, language: str, seed: int,
               cfg: EvalConfig) -> torch.Tensor:
    """Official `Qwen3TTSForConditionalGeneration.generate` for one utterance -> codes (T, 16)."""
    ids = torch.as_tensor(text_ids(OfficialTeacherForcer.format_text(text))).long().view(1, -1)
    lang = QWEN_LANGUAGE.get(language, language) if cfg.use_language else "auto"
    torch.manual_seed(seed)  # the official sampling (talker and code predictor) draws from the global RNG
    codes, _ = model.generate(input_ids=[ids.to(model.talker.device)], languages=[lang], speakers=[cfg.speaker],
                              non_streaming_mode=cfg.non_streaming_mode, max_new_tokens=cfg.max_new_tokens,
                              subtalker_dosample=cfg.subtalker_dosample, subtalker_top_k=cfg.subtalker_top_k,
                              subtalker_top_p=cfg.subtalker_top_p, subtalker_temperature=cfg.subtalker_temperature)
    return codes[0].cpu()


@dataclass
class Synth:
    """One synthesized utterance: codes, code-predictor calls, and its audio."""

    codes: torch.Tensor            # (T, 16)
    calls: int                     # code-predictor model calls for the T frames
    audio: np.ndarray
    rate: int


class OfficialSynthesizer:
    """AR = the untouched official model; spec = the same model under `rvqspec.accelerate`."""

    def __init__(self, model, text_ids, decoder: Decoder, drafter=None, tree=None, cfg: EvalConfig = EvalConfig()):
        self.model, self.text_ids, self.decoder = model, text_ids, decoder
        self.drafter, self.tree, self.cfg = drafter, tree, cfg

    def __call__(self, item, seed: int, system: str) -> Synth:
        if system == "ar":
            codes = synthesize(self.model, self.text_ids, item.text, item.language, seed, self.cfg)
            calls = 15 * codes.shape[0]  # HF generate: one code-predictor forward per code
        else:
            with accelerate(self.model, self.drafter, self.tree) as h:
                codes = synthesize(self.model, self.text_ids, item.text, item.language, seed, self.cfg)
            if h.stats.fallbacks:
                raise RuntimeError(f"item {item.id}: {h.stats.fallbacks} code-predictor calls fell back to the "
                                   f"original generate ({h.stats.fallback_reasons})")
            calls = h.stats.model_calls
        audio, rate = self.decoder(codes)
        return Synth(codes, int(calls), audio, int(rate))


class MiniSynthesizer:
    """The mini world's model (data/mini/model, our CodeDecoder/MultiCodeDecoder, its phoneme front end
    and codec): AR = `MultiCodeDecoder.generate_frame`, spec = `SpeculativeCodePredictor` over the
    same weights. The official `generate` cannot run this checkpoint (8 codec control tokens instead
    of 1024, a phoneme text vocabulary), hence a separate synthesizer; seeds and scoring are shared."""

    def __init__(self, model_dir, codec_dir, drafter=None, tree=None, cfg: EvalConfig = EvalConfig(),
                 verify_hash: bool = True):
        self.tts = MiniTTS.load(model_dir=model_dir, codec_dir=codec_dir)
        d = as_drafter(drafter, self.tts.code_predictor, verify_hash=verify_hash)
        self.spec = SpeculativeCodePredictor(self.tts.code_predictor, d, as_tree(tree, d.num_offsets))
        self.cfg = cfg

    def __call__(self, item, seed: int, system: str) -> Synth:
        c = self.cfg
        samp = Sampling(c.subtalker_dosample, c.subtalker_top_k, c.subtalker_top_p, c.subtalker_temperature)
        syn = self.tts.synthesize(item.text, item.language, seed=seed, sampling=samp,
                                  inner=None if system == "ar" else self.spec)
        # inner_calls: 15 per frame for AR, prefill + verify rounds for the speculative decoder
        return Synth(syn.codes, int(syn.stats.inner_calls), syn.audio, int(syn.sample_rate))


def run_items(synth: Callable[..., Synth], items: Iterable, recognizers: "RecognizerMap",
              cfg: EvalConfig = EvalConfig(), log: Callable[[str], None] | None = None) -> list[dict]:
    """Synthesize (AR and speculative) + transcribe every item for every seed -> one record per
    (item, seed, system) with reference, hypothesis, frames, calls and audio seconds."""
    records = []
    for item in items:
        for seed in cfg.seeds:
            for system in SYSTEMS:
                t0 = time.perf_counter()
                out = synth(item, seed, system)
                seconds = time.perf_counter() - t0
                frames = int(out.codes.shape[0])
                hyp = recognizers.get(item.language).transcribe([out.audio], out.rate, item.language)[0]
                records.append({"id": item.id, "language": item.language, "seed": seed, "system": system,
                                "reference": item.text, "hypothesis": hyp, "frames": frames,
                                "calls": out.calls, "audio_seconds": len(out.audio) / float(out.rate),
                                "reference_seconds": item.seconds, "synthesis_seconds": seconds})
                if log:
                    log(f"{item.id} [{item.language}] seed {seed} {system}: {frames} frames, "
                        f"{15 * frames / max(out.calls, 1):.2f} toks/step, hyp={hyp[:40]!r}")
    return records


class RecognizerMap:
    """language -> recognizer, with '*' as the fallback; recognizers are loaded lazily, once."""

    def __init__(self, specs: dict[str, str | Path], device: str = "cpu", loader=None):
        if not specs:
            raise ValueError("RecognizerMap needs at least one recognizer (e.g. {'*': path})")
        self.specs = {k: str(v) for k, v in specs.items()}
        self.device = device
        self.loader = loader
        self._loaded: dict[str, object] = {}

    def path_for(self, language: str) -> str:
        if language in self.specs:
            return self.specs[language]
        if "*" in self.specs:
            return self.specs["*"]
        raise KeyError(f"no recognizer for language {language!r} (configured: {sorted(self.specs)}; add '*')")

    def get(self, language: str):
        path = self.path_for(language)
        if path not in self._loaded:
            if self.loader is not None:
                self._loaded[path] = self.loader(path)
            elif ".py:" in path:  # a plugin object/class (test doubles): FILE.py:NAME
                from rvqspec.real.datasets import load_object

                obj = load_object(path)
                self._loaded[path] = obj() if isinstance(obj, type) else obj
            else:
                from rvqspec.real.asr import load_recognizer

                self._loaded[path] = load_recognizer(path, device=self.device)
        return self._loaded[path]


def parse_asr_for(values: Sequence[str]) -> dict[str, str]:
    """['ja=/m/whisper', 'zh=/m/whisper', '*=/m/other'] or ['/m/whisper'] -> {lang: path}."""
    out = {}
    for v in values:
        lang, sep, path = v.partition("=")
        if not sep:
            lang, path = "*", v
        if not path:
            raise ValueError(f"--asr {v!r}: expected LANG=PATH or PATH")
        out[lang.strip() or "*"] = path.strip()
    return out


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------
def table3(records: Sequence[dict]) -> dict:
    """Seed Table 3 rows from per-(item, seed, system) records; errors summed per seed, then the
    per-seed rates averaged (the seed reports WER averaged over ten seeds)."""
    langs = sorted({r["language"] for r in records})
    rows, details = [], {}
    for lang in langs:
        rl = [r for r in records if r["language"] == lang]
        ref_minutes = sum({r["id"]: r["reference_seconds"] for r in rl}.values()) / 60.0
        row = {"language": lang, "metric": "cer" if is_character_language(lang) else "wer",
               "audio_minutes": round(ref_minutes, 3), "items": len({r["id"] for r in rl})}
        for system in SYSTEMS:
            rs = [r for r in rl if r["system"] == system]
            if not rs:
                continue
            per_seed = []
            for seed in sorted({r["seed"] for r in rs}):
                sel = [r for r in rs if r["seed"] == seed]
                per_seed.append(score([r["reference"] for r in sel], [r["hypothesis"] for r in sel], lang))
            frames = sum(r["frames"] for r in rs)
            calls = sum(r["calls"] for r in rs)
            row[f"{system}_tokens_per_step"] = round(15 * frames / max(calls, 1), 4)
            row[f"{system}_error"] = round(100 * float(np.mean([s["error"] for s in per_seed])), 3)
            details[f"{lang}/{system}"] = {"per_seed": per_seed, "frames": frames, "calls": calls,
                                           "synth_minutes": sum(r["audio_seconds"] for r in rs) / 60.0,
                                           "synthesis_seconds": sum(r["synthesis_seconds"] for r in rs)}
        rows.append(row)
    return {"rows": rows, "details": details}


def markdown(table: dict) -> str:
    lines = ["| Language | Audio (min) | AR toks/step | AR WER/CER (%) | Spec toks/step | Spec WER/CER (%) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in table["rows"]:
        m = r["metric"].upper()
        lines.append(f"| {r['language']} | {r['audio_minutes']:.1f} | {r.get('ar_tokens_per_step', float('nan')):.2f} | "
                     f"{r.get('ar_error', float('nan')):.2f} ({m}) | {r.get('spec_tokens_per_step', float('nan')):.2f} | "
                     f"{r.get('spec_error', float('nan')):.2f} ({m}) |")
    return "\n".join(lines) + "\n"


def write_table(records: Sequence[dict], out_dir: str | os.PathLike, meta: dict | None = None) -> dict:
    """table3.json (+ records) and table3.md into out_dir, atomically; returns the table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t = table3(records)
    t["meta"] = meta or {}
    write_json_atomic(out / "table3.json", {**t, "records": list(records)})
    tmp = out / ".table3.md.tmp"
    tmp.write_text(markdown(t))
    os.replace(tmp, out / "table3.md")
    return t


# --------------------------------------------------------------------------------------------
# data-parallel evaluation
# --------------------------------------------------------------------------------------------
def evaluate_unit(tmp_dir: Path, records: list[dict]) -> dict:
    (tmp_dir / "records.json").write_text(json.dumps(records, indent=1))
    return {"records": len(records)}


def merge_eval(out_dir: str | os.PathLike, n_units: int | None = None, meta: dict | None = None) -> dict:
    """Score the union of every finished unit's records (rvqspec.real.distributed layout)."""
    out = Path(out_dir)
    units = sorted(int(p.name[5:10]) for p in out.glob("unit_*" + DONE_SUFFIX))
    if n_units is not None and len(units) != n_units:
        missing = sorted(set(range(n_units)) - set(units))
        raise ScaleError(f"{out}: units {missing[:5]} are not done; rerun the evaluation (finished units are skipped)")
    records = []
    for u in units:
        records += json.loads((out / unit_name(u) / "records.json").read_text())
    return write_table(records, out, meta)


# --------------------------------------------------------------------------------------------
# one official checkpoint behind `rvqspec synthesize` / `rvqspec wer`
# --------------------------------------------------------------------------------------------
def is_official_checkpoint(path: str | os.PathLike | None) -> bool:
    """A published Qwen3-TTS checkpoint directory (it ships `speech_tokenizer/`); the mini model
    shares the file layout of the weights but not the speech tokenizer."""
    return path is not None and (Path(path) / "speech_tokenizer" / "config.json").is_file()


@dataclass
class TextItem:
    """What a synthesizer reads of an evaluation item."""

    text: str
    language: str             # ISO code (en, de, ...)
    id: str = "text"


def official_synthesizer(model_dir: str | os.PathLike, drafter=None, tree=None, *, seeds: Sequence[int] = (0,),
                         greedy: bool = False, device=None, dtype=None, speaker: str | None = None,
                         max_new_tokens: int | None = None) -> "OfficialSynthesizer":
    """An `OfficialSynthesizer` for a checkpoint directory: text through the checkpoint's own text
    tokenizer, audio through its `speech_tokenizer/`, the model on `placement(device, dtype)`,
    speculation through `rvqspec.accelerate`. The frame cap is the checkpoint's
    generation_config.json `max_new_tokens` unless given (the official wrappers do the same)."""
    d = Path(model_dir)
    dev, dt = placement(device, dtype)
    gen_path = d / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    cfg = EvalConfig(seeds=tuple(seeds), speaker=speaker,
                     max_new_tokens=int(max_new_tokens or gen.get("max_new_tokens", EvalConfig.max_new_tokens)),
                     subtalker_dosample=not greedy)
    model = load_official_model(d, dtype=dt, device=dev)
    ours = shared_code_predictor(model.talker.code_predictor, model.talker)
    # a cast copy (bf16) has another hash than the float32 weights the drafter was trained for
    dr = load_drafter(drafter, ours if dt == torch.float32 else None) if drafter else None
    t = SparseTree.load(tree) if tree else None
    return OfficialSynthesizer(model, text_ids_from_spec(None, d), codec_from_spec(None, d, device=dev, dtype=dt).decode,
                               dr, t, cfg)


def official_intelligibility(synth: "OfficialSynthesizer", texts: Sequence[str], language: str, recognizer,
                             system: str = "ar") -> dict:
    """`rvqspec wer` on an official checkpoint: every text with every seed of `synth.cfg`, one
    system, scored as `rvqspec.mini.pipeline.intelligibility` scores the mini model (same keys)."""
    clips, refs, hyps, frames, calls = [], [], [], 0, 0
    for seed in synth.cfg.seeds:
        for text in texts:
            out = synth(TextItem(text, language), seed, system)
            hyp = recognizer.transcribe([out.audio], out.rate, language)[0]
            n = int(out.codes.shape[0])
            clip_score = score([text], [hyp], language)
            clips.append(dict(text=text, seed=seed, hypothesis=hyp, frames=n, tokens_per_call=15 * n / max(out.calls, 1),
                              wer=clip_score["wer"], cer=clip_score["cer"]))
            refs.append(text)
            hyps.append(hyp)
            frames, calls = frames + n, calls + out.calls
    total = score(refs, hyps, language)
    return dict(language=language, n=len(clips), wer=total["wer"], cer=total["cer"], system=system,
                tokens_per_call=15 * frames / max(calls, 1), clips=clips)
