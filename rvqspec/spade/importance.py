"""Layer importance of the talker (seed 001 §2.1): WER-based (WLI) and cosine-based.

* WLI (seed 001): remove layer i (a pruned copy without it), synthesize held-out English texts with
  a few seeds through the usual pipeline (AR code predictor), transcribe with the recognizer, and
  take the WER (and CER) increase over the unpruned model. It ties the criterion to intelligibility.
* cosine (the text-LLM criterion the seed argues against): 1 - cos(input, output) of layer i's
  residual stream, averaged over teacher-forced real frames; a layer that barely changes its input
  looks unimportant.

Both return plain dicts (JSON-ready) and `importance_figure` draws them side by side per layer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.core.sampling import Sampling
from rvqspec.spade.prune import prune_talker, select_layers


@dataclass(frozen=True)
class ImportanceConfig:
    """Held-out subset and seeds for WLI; teacher-forced utterances for the cosine criterion."""

    wli_split: str = "validation"   # English, disjoint from the final evaluation ("eval")
    wli_texts: int = 24
    wli_seeds: tuple[int, ...] = (0, 1)
    language: str = "en"
    cosine_split: str = "validation"
    cosine_utterances: int = 64


@torch.no_grad()
def cosine_importance(talker: CodeDecoder, code_predictor: MultiCodeDecoder, text: torch.Tensor,
                      codes: torch.Tensor, valid: torch.Tensor) -> list[float]:
    """Per layer: mean over real frames of 1 - cos(layer input, layer output) (residual stream),
    teacher-forced on text (B, T), codes (B, T, 16), valid (B, T) bool."""
    from rvqspec.spade.trace import trace_talker
    from rvqspec.core.frame_loop import talker_inputs

    tr = trace_talker(talker, talker_inputs(talker, code_predictor, text, codes), attentions=False, logits=False)
    valid = F.pad(valid, (talker.config.text_lead, 0), value=False)  # a text-lead prefix is not a frame
    ins = [tr.embeddings] + tr.hidden[:-1]
    return [float(1.0 - F.cosine_similarity(a[valid], b[valid], dim=-1).mean()) for a, b in zip(ins, tr.hidden)]


def cosine_importance_corpus(talker: CodeDecoder, code_predictor: MultiCodeDecoder, corpus_dir: str | Path,
                             config: ImportanceConfig = ImportanceConfig()) -> dict:
    """Cosine importance over the first `cosine_utterances` of `cosine_split` (whole utterances)."""
    import numpy as np

    from rvqspec.mini.talker_train import training_batch, load_split

    texts, codes = load_split(Path(corpus_dir), config.cosine_split)
    idx = np.arange(min(config.cosine_utterances, len(texts)))
    text, code, valid = training_batch(texts, codes, idx, 10_000, np.random.default_rng(0), talker.config.text_lead)
    scores = cosine_importance(talker, code_predictor, text, code, valid)
    return dict(criterion="cosine", split=config.cosine_split, utterances=int(len(idx)),
                frames=int(valid.sum()), scores=scores)


def heldout_texts(corpus_dir: str | Path, split: str, language: str = "en", limit: int | None = None) -> list[str]:
    """Texts of one corpus split in one language (the corpus order; first `limit`)."""
    import datasets

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
    from rvqspec.core.checkpoint import Qwen3TTS
    from rvqspec.mini.pipeline import MiniTTS

    m = tts.model
    model = Qwen3TTS(config=dataclasses.replace(m.config, talker=talker.config), talker=talker,
                     code_predictor=code_predictor or m.code_predictor, path=None)
    return MiniTTS(model=model, tokenizer=tts.tokenizer, codec=tts.codec, model_dir=None,
                   _text_cache=tts._text_cache)


def wli(tts, texts: Sequence[str], recognizer, seeds: Sequence[int] = (0, 1), language: str = "en",
        progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """WER-based layer importance (seed 001): WER/CER increase when each talker layer is removed.

    Returns dict(baseline={wer, cer}, layers=[{layer, wer, cer, d_wer, d_cer}], scores=[d_wer...])."""
    from tqdm.auto import tqdm

    from rvqspec.mini.pipeline import intelligibility

    talker = tts.talker
    L = talker.config.num_hidden_layers
    base = intelligibility(tts, texts, language, recognizer, seeds=seeds, sampling=sampling, progress=False)
    rows = []
    for i in tqdm(range(L), desc="WLI: skip each layer", disable=not progress):
        pruned = prune_talker(talker, [j for j in range(L) if j != i])
        r = intelligibility(with_talker(tts, pruned), texts, language, recognizer, seeds=seeds, sampling=sampling,
                            progress=False)
        rows.append(dict(layer=i, wer=r["wer"], cer=r["cer"], d_wer=r["wer"] - base["wer"],
                         d_cer=r["cer"] - base["cer"]))
    return dict(criterion="wli", language=language, texts=len(texts), seeds=list(seeds),
                baseline=dict(wer=base["wer"], cer=base["cer"]), layers=rows,
                scores=[r["d_wer"] for r in rows])


def wli_ranking_scores(result: dict) -> list[tuple[float, float]]:
    """(WER increase, CER increase) per layer: CER breaks WER ties (few short texts give ties)."""
    return [(r["d_wer"], r["d_cer"]) for r in result["layers"]]


def select_by(criterion: str, importance: dict, depth: int) -> list[int]:
    """Layers to keep under 'wli' or 'cosine' from an `importance` dict as `layer_importance` returns."""
    if criterion == "wli":
        return select_layers(wli_ranking_scores(importance["wli"]), depth)
    if criterion == "cosine":
        return select_layers(importance["cosine"]["scores"], depth)
    raise ValueError(f"criterion must be 'wli' or 'cosine', got {criterion!r}")


def layer_importance(tts, corpus_dir: str | Path, recognizer, config: ImportanceConfig = ImportanceConfig(),
                     depth: int | None = None, progress: bool = True, sampling: Sampling = Sampling()) -> dict:
    """Both criteria on one model and the layers each keeps at `depth` (default: half); WLI draws
    its syntheses with `sampling`."""
    from rvqspec.spade.prune import default_depth

    texts = heldout_texts(corpus_dir, config.wli_split, config.language, config.wli_texts)
    out = dict(wli=wli(tts, texts, recognizer, config.wli_seeds, config.language, progress, sampling),
               cosine=cosine_importance_corpus(tts.talker, tts.code_predictor, corpus_dir, config))
    depth = depth or default_depth(tts.talker.config.num_hidden_layers)
    out["depth"] = depth
    out["keep"] = {c: select_by(c, out, depth) for c in ("wli", "cosine")}
    return out


def importance_figure(result: dict):
    """Plotly figure: WLI (WER and CER increase, %) and cosine importance per layer, side by side."""
    from plotly.subplots import make_subplots

    w, c = result["wli"], result["cosine"]
    layers = [r["layer"] for r in w["layers"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        f"WLI: error increase when the layer is removed (base WER {100 * w['baseline']['wer']:.1f}%)",
        "cosine: 1 - cos(layer input, output)"))
    fig.add_bar(x=layers, y=[100 * r["d_wer"] for r in w["layers"]], name="WER increase (pts)", row=1, col=1)
    fig.add_bar(x=layers, y=[100 * r["d_cer"] for r in w["layers"]], name="CER increase (pts)", row=1, col=1)
    fig.add_bar(x=list(range(len(c["scores"]))), y=c["scores"], name="1 - cosine", row=1, col=2)
    keep = result.get("keep", {})
    fig.update_xaxes(title_text="talker layer", dtick=1)
    fig.update_yaxes(title_text="percentage points", row=1, col=1)
    fig.update_layout(title=f"Talker layer importance (seed 001); kept at depth {result.get('depth')}: "
                            f"WLI {keep.get('wli')}, cosine {keep.get('cosine')}", barmode="group", height=420)
    return fig
