"""Listening A/B: the same sentences synthesized by the AR inner loop and the speculative one.

Speculative decoding is distributionally lossless (seed 000 §3.2): for a fixed seed the two decoders
draw different samples, but from the same distribution, so neither a listener nor the recognizer
should tell them apart beyond chance. This module gives

* `make_pairs`: AR and speculative synthesis of each (text, language) under several seeds, with
  WER/CER per clip through a recognizer (the same scoring as the demo's Table 3);
* `spectrogram_figure` / `ab_figure`: log-mel heatmaps (plotly) next to the players;
* `BlindTest`: A and B shuffled with an explicit generator, the listener says which one is the
  speculative decoder, the answer is revealed, and the choices go to a JSON file with a binomial
  test against chance (lossless => accuracy near 0.5). `simulate_picks` drives it in CI.
* `ab_widget` / `blind_widget`: the notebook front ends (IPython.display.Audio players).
"""
from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
import soundfile as sf
from plotly.subplots import make_subplots
from scipy.stats import binomtest
from tqdm.auto import tqdm

from rvqspec.core.sampling import Sampling
from rvqspec.measure.metrics import score
from rvqspec.mini.codec import reference_log_mel_db

AR, SPEC = "AR", "speculative"


@dataclass
class Clip:
    label: str                 # AR | speculative
    text: str
    language: str
    seed: int
    audio: np.ndarray          # (samples,) float32
    sample_rate: int
    tokens_per_call: float
    seconds: float = 0.0       # synthesis wall-clock (codes)
    hypothesis: str | None = None
    wer: float | None = None
    cer: float | None = None

    def meta(self) -> dict:
        d = asdict(self)
        d.pop("audio")
        d["duration_s"] = len(self.audio) / self.sample_rate
        return d


@dataclass
class ABPair:
    text: str
    language: str
    seed: int
    ar: Clip
    spec: Clip

    def meta(self) -> dict:
        return {"text": self.text, "language": self.language, "seed": self.seed,
                "ar": self.ar.meta(), "spec": self.spec.meta()}


def clip_from_synthesis(label: str, syn) -> Clip:
    """A `Clip` from a `rvqspec.mini.pipeline.Synthesis`."""
    return Clip(label=label, text=syn.text, language=syn.language, seed=int(syn.seed),
                audio=np.asarray(syn.audio, dtype=np.float32), sample_rate=int(syn.sample_rate),
                tokens_per_call=float(syn.stats.tokens_per_call), seconds=float(syn.seconds))


def score_clip(clip: Clip, recognizer) -> Clip:
    """Transcribe and score one clip in place (WER and CER, rvqspec.measure.metrics.score)."""
    clip.hypothesis = recognizer.transcribe([clip.audio], clip.sample_rate, clip.language)[0]
    s = score([clip.text], [clip.hypothesis], clip.language)
    clip.wer, clip.cer = float(s["wer"]), float(s["cer"])
    return clip


def make_pairs(tts, items: Sequence[tuple[str, str]], seeds: Sequence[int], inner, recognizer=None,
               sampling=None, progress: bool = True) -> list[ABPair]:
    """AR and speculative clips for every (text, language) in `items` and every seed.

    `tts` is a `MiniTTS` (anything with `.synthesize(text, language, seed=, sampling=, inner=)`),
    `inner` the speculative frame completer; both decoders get the same seed (the same generator
    state at the start), which is the fair comparison: equal in distribution, not sample by sample."""
    if inner is None:
        raise ValueError("make_pairs needs the speculative inner loop (inner=SpeculativeCodePredictor(...))")
    if not items or not seeds:
        raise ValueError("make_pairs needs at least one (text, language) item and one seed")
    sampling = sampling or Sampling()
    pairs = []
    jobs = [(t, l, s) for t, l in items for s in seeds]
    for text, lang, seed in tqdm(jobs, desc="A/B synthesis", disable=not progress):
        a = clip_from_synthesis(AR, tts.synthesize(text, lang, seed=seed, sampling=sampling, inner=None))
        b = clip_from_synthesis(SPEC, tts.synthesize(text, lang, seed=seed, sampling=sampling, inner=inner))
        if recognizer is not None:
            score_clip(a, recognizer)
            score_clip(b, recognizer)
        pairs.append(ABPair(text=text, language=lang, seed=int(seed), ar=a, spec=b))
    return pairs


def pairs_table(pairs: Sequence[ABPair]) -> list[dict]:
    """One row per pair: text, language, seed, tokens/call and WER/CER of both decoders."""
    rows = []
    for p in pairs:
        rows.append({"language": p.language, "seed": p.seed, "text": p.text,
                     "ar_tokens_per_call": p.ar.tokens_per_call, "spec_tokens_per_call": p.spec.tokens_per_call,
                     "ar_wer": p.ar.wer, "spec_wer": p.spec.wer, "ar_cer": p.ar.cer, "spec_cer": p.spec.cer,
                     "ar_hypothesis": p.ar.hypothesis, "spec_hypothesis": p.spec.hypothesis})
    return rows


# ---- audio and spectrograms --------------------------------------------------------------------
def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM WAV bytes (what <audio> elements and data URIs play everywhere)."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1 or audio.size == 0:
        raise ValueError(f"audio must be a non-empty 1-D array, got shape {audio.shape}")
    buf = io.BytesIO()
    sf.write(buf, np.clip(audio, -1.0, 1.0), int(sample_rate), format="WAV", subtype="PCM_16")
    return buf.getvalue()


def log_mel_db(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """(frames, 80) log-mel in dB, 10 ms hop: the codec module's fixed reference analysis, so the
    spectrograms here match the codec quality numbers."""
    return reference_log_mel_db(np.asarray(audio, dtype=np.float32), sample_rate).numpy()


def spectrogram_figure(clip: Clip, title: str | None = None, height: int = 260) -> go.Figure:
    db = log_mel_db(clip.audio, clip.sample_rate)  # (N, 80)
    t = np.arange(db.shape[0]) * 0.010
    fig = go.Figure(go.Heatmap(z=db.T, x=t, colorscale="Magma", colorbar=dict(title="dB", thickness=10),
                               name="log-mel"))
    extra = "" if clip.wer is None else f", WER {clip.wer:.2f} / CER {clip.cer:.2f}"
    fig.update_layout(title=title or f"{clip.label} (seed {clip.seed}, {clip.tokens_per_call:.2f} tok/call{extra})",
                      xaxis_title="time (s)", yaxis_title="mel bin", height=height,
                      margin=dict(l=50, r=10, t=40, b=40))
    return fig


def ab_figure(pair: ABPair, labels: tuple[str, str] | None = None, height: int = 300) -> go.Figure:
    """Both log-mel spectrograms side by side on one colour scale."""
    a, b = log_mel_db(pair.ar.audio, pair.ar.sample_rate), log_mel_db(pair.spec.audio, pair.spec.sample_rate)
    lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
    labels = labels or (f"{AR} ({pair.ar.tokens_per_call:.2f} tok/call)",
                        f"{SPEC} ({pair.spec.tokens_per_call:.2f} tok/call)")
    fig = make_subplots(rows=1, cols=2, subplot_titles=labels, shared_yaxes=True, horizontal_spacing=0.04)
    for k, db in enumerate((a, b)):
        # whole dB as int8 (the log-mel floor is -100 dB): a quarter of float32 in the report's page,
        # and 1 dB steps are below what the colour scale shows
        z = np.clip(np.round(db.T), -128, 127).astype(np.int8)  # (80, N)
        fig.add_trace(go.Heatmap(z=z, x=np.arange(db.shape[0]) * 0.010, zmin=lo, zmax=hi, colorscale="Magma",
                                 showscale=k == 1, colorbar=dict(title="dB", thickness=10), name=labels[k]),
                      row=1, col=k + 1)
    fig.update_layout(title=f"[{pair.language}, seed {pair.seed}] {pair.text}", height=height,
                      margin=dict(l=40, r=10, t=60, b=30))
    return fig


# ---- blind mode --------------------------------------------------------------------------------
@dataclass
class Pick:
    trial: int
    choice: str          # "A" or "B": the clip the listener says is the speculative decoder
    truth: str           # the clip that is the speculative decoder
    correct: bool


@dataclass
class BlindTest:
    """A/B trials with the order shuffled by an explicit generator (reproducible: the same seed gives
    the same assignment). The listener answers "which clip is the speculative decoder?"."""

    pairs: list[ABPair]
    seed: int = 0
    spec_is_a: list[bool] = field(default_factory=list)
    picks: dict[int, Pick] = field(default_factory=dict)
    question: str = "Which clip comes from the speculative decoder?"

    def __post_init__(self):
        if not self.pairs:
            raise ValueError("BlindTest needs at least one A/B pair")
        if not self.spec_is_a:
            rng = np.random.default_rng(self.seed)
            self.spec_is_a = [bool(x) for x in rng.integers(0, 2, size=len(self.pairs))]
        if len(self.spec_is_a) != len(self.pairs):
            raise ValueError(f"spec_is_a has {len(self.spec_is_a)} entries for {len(self.pairs)} pairs")

    def __len__(self) -> int:
        return len(self.pairs)

    def trial(self, i: int) -> tuple[Clip, Clip]:
        """(clip A, clip B) of trial i, in the shuffled order; labels must not be shown before `pick`."""
        self._check(i)
        p = self.pairs[i]
        return (p.spec, p.ar) if self.spec_is_a[i] else (p.ar, p.spec)

    def truth(self, i: int) -> str:
        return "A" if self.spec_is_a[i] else "B"

    def pick(self, i: int, choice: str) -> Pick:
        """Record the listener's answer for trial i and reveal the truth (one answer per trial)."""
        self._check(i)
        choice = str(choice).strip().upper()
        if choice not in ("A", "B"):
            raise ValueError(f"choice must be 'A' or 'B', got {choice!r}")
        if i in self.picks:
            raise ValueError(f"trial {i} was already answered ({self.picks[i].choice}); answers are final")
        p = Pick(trial=i, choice=choice, truth=self.truth(i), correct=choice == self.truth(i))
        self.picks[i] = p
        return p

    def _check(self, i: int) -> None:
        if not 0 <= i < len(self.pairs):
            raise IndexError(f"trial {i} is out of range (0..{len(self.pairs) - 1})")

    def summary(self) -> dict:
        """Answered trials, accuracy, and the two-sided binomial p-value against chance (0.5): a
        small p-value means listeners can tell the decoders apart, which losslessness says they
        cannot beyond chance."""
        n = len(self.picks)
        k = sum(p.correct for p in self.picks.values())
        return {"trials": len(self.pairs), "answered": n, "correct": k,
                "accuracy": (k / n) if n else None,
                "p_value_vs_chance": float(binomtest(k, n, 0.5).pvalue) if n else None}

    def to_json(self) -> dict:
        return {"question": self.question, "seed": self.seed, "spec_is_a": self.spec_is_a,
                "pairs": [{"text": p.text, "language": p.language, "seed": p.seed} for p in self.pairs],
                "picks": [asdict(self.picks[i]) for i in sorted(self.picks)], "summary": self.summary()}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")
        return path


def simulate_picks(test: BlindTest, seed: int = 0, p_correct: float = 0.5) -> list[Pick]:
    """Answer every open trial programmatically (CI): correct with probability `p_correct`,
    drawn from an explicit generator."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(len(test)):
        if i in test.picks:
            continue
        right = bool(rng.random() < p_correct)
        truth = test.truth(i)
        out.append(test.pick(i, truth if right else ("B" if truth == "A" else "A")))
    return out


# ---- notebook widgets --------------------------------------------------------------------------
def _player(clip: Clip):
    from IPython.display import Audio

    return Audio(data=clip.audio, rate=clip.sample_rate, normalize=False)


def ab_widget(pairs: Sequence[ABPair]):
    """Side-by-side players and spectrograms, with tokens/call and WER/CER per clip."""
    import ipywidgets as w
    from IPython.display import display

    rows = []
    for p in pairs:
        cols = []
        for clip in (p.ar, p.spec):
            out = w.Output()
            with out:
                score = "" if clip.wer is None else f" &middot; WER {clip.wer:.2f} &middot; CER {clip.cer:.2f} &middot; heard: <i>{clip.hypothesis}</i>"
                display(w.HTML(f"<b>{clip.label}</b> &middot; {clip.tokens_per_call:.2f} tokens/call{score}"))
                display(_player(clip))
                display(go.FigureWidget(spectrogram_figure(clip, height=220)))
            cols.append(out)
        rows.append(w.VBox([w.HTML(f"<h4>[{p.language}, seed {p.seed}] {p.text}</h4>"), w.HBox(cols)]))
    return w.VBox(rows)


def blind_widget(test: BlindTest, path: str | Path):
    """One trial at a time: players A and B, two answer buttons; the answer is revealed after the
    pick and every pick is saved to `path` at once."""
    import ipywidgets as w
    from IPython.display import display

    state = {"i": 0}
    out = w.Output()
    reveal = w.HTML()
    btn_a = w.Button(description="A is speculative")
    btn_b = w.Button(description="B is speculative")
    nxt = w.Button(description="next trial", disabled=True)

    def show():
        out.clear_output()
        reveal.value = ""
        i = state["i"]
        if i >= len(test):
            s = test.summary()
            reveal.value = (f"<b>done</b>: {s['correct']}/{s['answered']} correct, p = {s['p_value_vs_chance']:.3g} "
                            f"against chance; saved to {path}")
            btn_a.disabled = btn_b.disabled = nxt.disabled = True
            return
        a, b = test.trial(i)
        with out:
            display(w.HTML(f"<b>trial {i + 1}/{len(test)}</b> [{test.pairs[i].language}] {test.pairs[i].text}"
                           f"<br>{test.question}"))
            display(w.HTML("A:"), _player(a), w.HTML("B:"), _player(b))
        btn_a.disabled = btn_b.disabled = i in test.picks
        nxt.disabled = i not in test.picks

    def answer(choice):
        p = test.pick(state["i"], choice)
        test.save(path)
        reveal.value = (f"{'correct' if p.correct else 'wrong'}: {p.truth} was the speculative decoder "
                        f"(you picked {p.choice})")
        btn_a.disabled = btn_b.disabled = True
        nxt.disabled = False

    btn_a.on_click(lambda _: answer("A"))
    btn_b.on_click(lambda _: answer("B"))

    def advance(_):
        state["i"] += 1
        show()

    nxt.on_click(advance)
    show()
    return w.VBox([out, w.HBox([btn_a, btn_b, nxt]), reveal])
