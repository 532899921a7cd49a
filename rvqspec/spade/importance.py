"""Layer importance of the talker (seed 001 §2.1): WER-based (WLI) and cosine-based.

* WLI (seed 001): remove layer i (a pruned copy without it), synthesize held-out English texts with
  a few seeds through the usual pipeline (AR code predictor), transcribe with the recognizer, and
  take the WER (and CER) increase over the unpruned model. It ties the criterion to intelligibility.
* cosine (the text-LLM criterion the seed argues against): 1 - cos(input, output) of layer i's
  residual stream, averaged over teacher-forced real frames; a layer that barely changes its input
  looks unimportant.
* random: a permutation from an explicit torch.Generator, the baseline both must beat.

All return plain dicts (JSON-ready). `bootstrap_importance` gives each layer's score a 95% interval
(resampling text x seed clips for WLI, utterances for cosine) and says how stable the ranking is:
the mean Kendall tau between resampled and point scores and the share of resamples that keep the
same layers. `importance_figure` draws the criteria side by side per layer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots
from tqdm.auto import tqdm

from rvqspec.core.checkpoint import Qwen3TTS
from rvqspec.core.frame_loop import talker_inputs
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.core.sampling import Sampling
from rvqspec.measure.stats import bootstrap_ranking, kendall_tau
from rvqspec.mini.pipeline import MiniTTS, intelligibility
from rvqspec.mini.talker_train import load_split, training_batch
from rvqspec.spade.prune import default_depth, prune_talker, select_layers
from rvqspec.spade.trace import trace_talker


@dataclass(frozen=True)
class ImportanceConfig:
    """Held-out subset and seeds for WLI; teacher-forced utterances for the cosine criterion."""

    wli_split: str = "validation"   # English, disjoint from the final evaluation ("eval")
    wli_texts: int = 24
    wli_seeds: tuple[int, ...] = (0, 1)
    language: str = "en"
    cosine_split: str = "validation"
    cosine_utterances: int = 64
    random_seed: int = 0            # torch.Generator seed of the random-order baseline
    bootstrap: int = 1000           # resamples of sentence x seed clips (WLI) and utterances (cosine)
    bootstrap_seed: int = 0


@torch.no_grad()
def cosine_per_utterance(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text: torch.Tensor,
                         codes: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer and utterance: the sum over real frames of 1 - cos(layer input, layer output) of the
    residual stream, teacher-forced on text (B, T), codes (B, T, 16), valid (B, T) bool.
    Returns (sums (L, B), frames (B,)): ratios of sums, so utterances can be resampled."""
    tr = trace_talker(talker, talker_inputs(talker, code_predictor, text, codes), attentions=False, logits=False)
    valid = F.pad(valid, (talker.config.text_lead, 0), value=False)  # (B, T'): a text-lead prefix is not a frame
    ins = [tr.embeddings] + tr.hidden[:-1]
    dist = torch.stack([1.0 - F.cosine_similarity(a, b, dim=-1) for a, b in zip(ins, tr.hidden)])  # (L, B, T')
    sums = (dist * valid).sum(-1)  # (L, B)
    return sums, valid.sum(-1)  # (L, B), (B,)


def cosine_importance(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text: torch.Tensor,
                      codes: torch.Tensor, valid: torch.Tensor) -> list[float]:
    """Per layer: mean over real frames of 1 - cos(layer input, layer output) (residual stream)."""
    sums, frames = cosine_per_utterance(talker, code_predictor, text, codes, valid)
    return (sums.sum(-1) / frames.sum().clamp(min=1)).tolist()


def random_importance(num_layers: int, generator: torch.Generator) -> list[float]:
    """The random-order baseline: a uniformly random permutation as scores (layer i gets rank
    scores[i]); whatever a criterion gains over this is what its measurement buys."""
    return (torch.randperm(num_layers, generator=generator).double() / max(num_layers - 1, 1)).tolist()


def cosine_importance_corpus(talker: CodeDecoder, code_predictor: MultiCodeDecoder, corpus_dir: str | Path,
                             config: ImportanceConfig = ImportanceConfig()) -> dict:
    """Cosine importance over the first `cosine_utterances` of `cosine_split` (whole utterances)."""
    texts, codes = load_split(Path(corpus_dir), config.cosine_split)
    idx = np.arange(min(config.cosine_utterances, len(texts)))
    text, code, valid = training_batch(texts, codes, idx, 10_000, np.random.default_rng(0), talker.config.text_lead)
    sums, frames = cosine_per_utterance(talker, code_predictor, text, code, valid)  # (L, B), (B,)
    scores = (sums.sum(-1) / frames.sum().clamp(min=1)).tolist()
    return dict(criterion="cosine", split=config.cosine_split, utterances=int(len(idx)),
                frames=int(valid.sum()), scores=scores, per_utterance=dict(sums=sums.tolist(), frames=frames.tolist()))


def heldout_texts(corpus_dir: str | Path, split: str, language: str = "en", limit: int | None = None) -> list[str]:
    """Texts of one corpus split in one language (the corpus order; first `limit`)."""
    ds = datasets.load_from_disk(str(corpus_dir))
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise KeyError(f"{corpus_dir}: no split {split!r} (has {list(ds)})")
        ds = ds[split]
        rows = [(t, lang) for t, lang in zip(ds["text"], ds["language"])]
    else:
        for col in ("split", "language", "text"):
            if col not in ds.column_names:
                raise KeyError(f"{corpus_dir}: column {col!r} is missing (has {ds.column_names})")
        rows = [(t, lang) for t, s, lang in zip(ds["text"], ds["split"], ds["language"]) if s == split]
    out = [t for t, lang in rows if lang == language]
    if not out:
        raise ValueError(f"{corpus_dir}: split {split!r} has no {language!r} texts")
    return out[:limit] if limit else out


def with_talker(tts, talker: CodeDecoder, code_predictor: MultiCodeDecoder | None = None):
    """A MiniTTS sharing tokenizer and codec with `tts` but synthesizing with another talker."""
    m = tts.model
    model = Qwen3TTS(config=dataclasses.replace(m.config, talker=talker.config), talker=talker,
                     code_predictor=code_predictor or m.code_predictor, path=None)
    return MiniTTS(model=model, tokenizer=tts.tokenizer, codec=tts.codec, model_dir=None,
                   _text_cache=tts._text_cache)


def wli(tts, texts: Sequence[str], recognizer, seeds: Sequence[int] = (0, 1), language: str = "en",
        progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """WER-based layer importance (seed 001): WER/CER increase when each talker layer is removed.

    Returns dict(baseline={wer, cer}, layers=[{layer, wer, cer, d_wer, d_cer}], scores=[d_wer...],
    clips=...): `clips` keeps the edit counts of every text x seed clip (baseline and each removed
    layer) so `bootstrap_importance` can resample them."""
    talker = tts.talker
    L = talker.config.num_hidden_layers
    base = intelligibility(tts, texts, language, recognizer, seeds=seeds, sampling=sampling, progress=False)
    per_layer = []
    rows = []
    for i in tqdm(range(L), desc="WLI: skip each layer", disable=not progress):
        pruned = prune_talker(talker, [j for j in range(L) if j != i])
        r = intelligibility(with_talker(tts, pruned), texts, language, recognizer, seeds=seeds, sampling=sampling,
                            progress=False)
        rows.append(dict(layer=i, wer=r["wer"], cer=r["cer"], d_wer=r["wer"] - base["wer"],
                         d_cer=r["cer"] - base["cer"]))
        per_layer.append(r["clips"])
    clips = dict(text=[c["text"] for c in base["clips"]], seed=[c["seed"] for c in base["clips"]],
                 ref_words=[c["ref_words"] for c in base["clips"]], ref_chars=[c["ref_chars"] for c in base["clips"]],
                 base_word_errors=[c["word_errors"] for c in base["clips"]],
                 base_char_errors=[c["char_errors"] for c in base["clips"]],
                 word_errors=[[c["word_errors"] for c in cl] for cl in per_layer],  # (L, clips)
                 char_errors=[[c["char_errors"] for c in cl] for cl in per_layer])  # (L, clips)
    return dict(criterion="wli", language=language, texts=len(texts), seeds=list(seeds),
                baseline=dict(wer=base["wer"], cer=base["cer"]), layers=rows,
                scores=[r["d_wer"] for r in rows], clips=clips)


def wli_ranking_scores(result: dict) -> list[tuple[float, float]]:
    """(WER increase, CER increase) per layer: CER breaks WER ties (few short texts give ties)."""
    return [(r["d_wer"], r["d_cer"]) for r in result["layers"]]


CRITERIA = ("wli", "cosine", "random")


def select_by(criterion: str, importance: dict, depth: int) -> list[int]:
    """Layers to keep under 'wli', 'cosine' or 'random' from an `importance` dict as `layer_importance` returns."""
    if criterion == "wli":
        return select_layers(wli_ranking_scores(importance["wli"]), depth)
    if criterion in ("cosine", "random"):
        if criterion not in importance:
            raise ValueError(f"importance has no {criterion!r} scores (keys: {sorted(importance)})")
        return select_layers(importance[criterion]["scores"], depth)
    raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")


def bootstrap_importance(importance: dict, depth: int, n: int = 1000, seed: int = 0) -> dict:
    """Confidence intervals of each layer's importance and the stability of the ranking, per
    criterion (`rvqspec.measure.stats.bootstrap_ranking`): WLI resamples its text x seed clips (the
    score is the WER increase, CER breaking ties), cosine its teacher-forced utterances. The random
    baseline has nothing to resample; its stability is that of a fresh permutation per resample."""
    rng = np.random.default_rng(seed)
    out = {}
    w = importance["wli"].get("clips")
    too_few = lambda n: dict(skipped=f"{n} unit(s): a bootstrap needs at least 2")  # noqa: E731
    if w and len(w["ref_words"]) < 2:
        out["wli"] = too_few(len(w["ref_words"]))
    elif w:
        base_w = np.asarray(w["base_word_errors"], float)  # (U,)
        base_c = np.asarray(w["base_char_errors"], float)  # (U,)
        out["wli"] = bootstrap_ranking(np.asarray(w["word_errors"], float) - base_w, np.asarray(w["ref_words"], float),
                                       depth, n, rng, np.asarray(w["char_errors"], float) - base_c,
                                       np.asarray(w["ref_chars"], float))
        out["wli"]["unit"] = "text x seed clip"
    cu = importance.get("cosine", {}).get("per_utterance")
    if cu and len(cu["frames"]) < 2:
        out["cosine"] = too_few(len(cu["frames"]))
    elif cu:
        out["cosine"] = bootstrap_ranking(np.asarray(cu["sums"], float), np.asarray(cu["frames"], float), depth, n, rng)
        out["cosine"]["unit"] = "utterance"
    if "random" in importance:
        L = len(importance["random"]["scores"])
        g = torch.Generator().manual_seed(seed)
        point = importance["random"]["scores"]
        keep0 = select_layers(point, depth)
        draws = [random_importance(L, g) for _ in range(n)]
        taus = [kendall_tau(d, point) for d in draws]
        out["random"] = dict(scores=point, keep=keep0, depth=depth, resamples=n, unit="fresh permutation",
                             same_keep_share=float(np.mean([select_layers(d, depth) == keep0 for d in draws])),
                             kendall_tau_mean=float(np.mean(taus)))
    return out


def layer_importance(tts, corpus_dir: str | Path, recognizer, config: ImportanceConfig = ImportanceConfig(),
                     depth: int | None = None, progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """WLI, cosine and the random baseline on one model, the layers each keeps at `depth` (default:
    half), and their bootstrap intervals and rank stability (`bootstrap_importance`); WLI draws its
    syntheses with `sampling`."""
    texts = heldout_texts(corpus_dir, config.wli_split, config.language, config.wli_texts)
    L = tts.talker.config.num_hidden_layers
    out = dict(wli=wli(tts, texts, recognizer, config.wli_seeds, config.language, progress, sampling),
               cosine=cosine_importance_corpus(tts.talker, tts.code_predictor, corpus_dir, config),
               random=dict(criterion="random", seed=config.random_seed,
                           scores=random_importance(L, torch.Generator().manual_seed(config.random_seed))))
    depth = depth or default_depth(L)
    out["depth"] = depth
    out["keep"] = {c: select_by(c, out, depth) for c in CRITERIA}
    out["bootstrap"] = bootstrap_importance(out, depth, config.bootstrap, config.bootstrap_seed)
    return out


def importance_figure(result: dict):
    """Plotly figure: WLI (WER and CER increase, %) and cosine importance per layer, side by side,
    with the bootstrap 95% intervals as error bars when `result` has them."""
    w, c = result["wli"], result["cosine"]
    boot = result.get("bootstrap") or {}

    def err(crit: str, scale: float):
        b = boot.get(crit)
        if not b or "ci95" not in b:
            return None
        return dict(type="data", symmetric=False, array=[scale * (hi - s) for s, (lo, hi) in zip(b["scores"], b["ci95"])],
                    arrayminus=[scale * (s - lo) for s, (lo, hi) in zip(b["scores"], b["ci95"])])
    layers = [r["layer"] for r in w["layers"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        f"WLI: error increase when the layer is removed (base WER {100 * w['baseline']['wer']:.1f}%)",
        "cosine: 1 - cos(layer input, output)"))
    fig.add_bar(x=layers, y=[100 * r["d_wer"] for r in w["layers"]], name="WER increase (pts)", row=1, col=1,
                error_y=err("wli", 100.0))
    fig.add_bar(x=layers, y=[100 * r["d_cer"] for r in w["layers"]], name="CER increase (pts)", row=1, col=1)
    fig.add_bar(x=list(range(len(c["scores"]))), y=c["scores"], name="1 - cosine", row=1, col=2, error_y=err("cosine", 1.0))
    keep = result.get("keep", {})
    stab = "; ".join(f"{k} keeps the same layers in {100 * b['same_keep_share']:.0f}% of resamples"
                     for k, b in boot.items() if k in ("wli", "cosine") and "same_keep_share" in b)
    fig.update_xaxes(title_text="talker layer", dtick=1)
    fig.update_yaxes(title_text="percentage points", row=1, col=1)
    fig.update_layout(title=f"Talker layer importance (seed 001); kept at depth {result.get('depth')}: "
                            f"WLI {keep.get('wli')}, cosine {keep.get('cosine')}, random {keep.get('random')}"
                            + (f"<br><sub>{stab}</sub>" if stab else ""), barmode="group", height=440)
    return fig
