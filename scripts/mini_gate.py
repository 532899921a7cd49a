"""One gate experiment of issue 14 ("Mini world v2"): a codec x model-layout variant of the mini world,
trained at reduced scale and measured with the same measures as every other variant.

Steps (each reuses the package: codec.py, talker_train.py, extract.py, drafters.py, acceptance.py):
1. codec: fit the variant's codec on the gate corpus's model_train audio, encode every clip;
2. model: train a mini model (talker + code predictor) on those codes, `--steps` steps;
3. shards: teacher-forced hidden states of the `train` split (drafter training, seed 000 §2.2) and
   free-running ones (deployed sampling, §3.3) of the calibration and eval splits;
4. measures, all on free-running frames of English text the model never read:
   - entropy per level c1..c15 of the verifier's tempered softmax (T = 0.9) and of the deployed
     top-k 50 distribution;
   - the verifier's probability (deployed sampling) of the reused-head draft (seed 000 §2.2 (i): the
     top-1 of LM head p+j-1 applied to h_p), per lookahead j = 1..3;
   - predictor hidden-state geometry (`rvqspec.measure.geometry`, also `rvqspec spec geometry`):
     cosine of consecutive position means mu_p, mu_{p+1}, and the
     R^2 of h_{p+1} predicted by the single shift h_p + (mu_{p+1} - mu_p) (what shared offsets can
     express, §2.2 (iii)) next to a per-position affine map fitted on half the frames (held-out half);
   - tokens per call (exact replay, `replay_tokens_per_call`) of reused / offsets / shared_low_rank /
     medusa at N = 4 and 16, trees grown from calibration acceptance (§2.3), and the oracle
     (drafts = the verifier's own top-m) on a tree grown from the verifier's own rank statistics;
   - codec: marginal entropy per level (deep codes used?), cross-entropy per level of a count model
     given the frame's phoneme (fitted on model_train, scored on eval), and CER of codec
     resynthesis and of free-running AR synthesis through the COMMITTED recognizer (trained on the
     current codec's resynthesis: a relative figure, biased towards the current codec).

    PYTHONPATH=$PWD python scripts/mini_gate.py --codec kmeans --layout mini --out docs/measurements/gate_baseline.json
    PYTHONPATH=$PWD python scripts/mini_gate.py --toy --out /tmp/gate_toy.json   # seconds, for the test
    --codec-dir data/mini/codec   encode with an already fitted codec (the baseline row uses the committed one)
    --codec-from NAME             reuse the codec and codes of run NAME under --work (e.g. R2 on the baseline's codes)
    --codec-only                  the codec half: code statistics and resynthesis CER, no model
    --world data/mini             the same measures on an existing world (the anchor row)
    --table docs/measurements/gate_*.json   the markdown table of docs/design.md ("Mini world v2 gates")

The gate corpus (English only, built once under --work) is `rvqspec.mini.corpus.build_corpus` with the
`--corpus-*` sizes. No loss here teaches the predictor to look ahead: the model trains with the
package's own teacher-forced next-code losses only.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.core.defaults import NUM_CODES, K
from rvqspec.core.drafters import code_predictor_parameters, make_drafter
from rvqspec.core.frame_loop import synthesize_codes, teacher_forced_frames
from rvqspec.core.jsonfile import write_json_atomic
from rvqspec.core.sampling import Sampling, probs
from rvqspec.core.tree import SparseTree
from rvqspec.measure.acceptance import (
    acceptance_table,
    oracle_tokens_per_call,
    replay_tokens_per_call,
    verifier_ranks,
)
from rvqspec.measure.extract import ExtractConfig, ShardDataset, extract
from rvqspec.measure.geometry import hidden_geometry
from rvqspec.measure.metrics import score
from rvqspec.measure.train_drafter import DrafterTrainConfig, train_drafter
from rvqspec.mini.codec import CodecConfig, RVQCodec
from rvqspec.mini.corpus import build_corpus, codes_dtype, in_language, load_corpus, rows_from_corpus, save_corpus
from rvqspec.mini.learned_codec import LearnedCodec, LearnedCodecConfig, load_codec
from rvqspec.mini.phonemes import PhonemeTokenizer
from rvqspec.mini.recognizer import load_recognizer
from rvqspec.mini.talker_train import MiniModelConfig, train_mini_model
from rvqspec.mini.text import CorpusConfig

BUDGETS = (4, 16)
DRAFTERS = ("reused", "offsets", "shared_low_rank", "medusa")
REPO = Path(__file__).resolve().parents[1]

# codec variants: the current world's plain residual k-means, R1 (texture removed from the target),
# R3 (a small learned codec; num_phonemes is set from the gate corpus's tokenizer)
CODECS = {
    "kmeans": CodecConfig(),
    "r1_envelope": CodecConfig(scaling="global", lifter=20, subframe_keep=3),
    "r3_learned": LearnedCodecConfig(),
    # R1 with the entropy-constrained assignment of the earlier skewed-codec world (docs/design.md)
    "r1_envelope_rate": CodecConfig(scaling="global", lifter=20, subframe_keep=3, rate_lambda=0.001),
}


def layout(name: str, base: MiniModelConfig) -> MiniModelConfig:
    """mini: the committed layout (1.7B-like: predictor 128 wide, projection Linear, 3 layers);
    0.6b: predictor width = talker width (identity small_to_mtp_projection), 5 predictor layers."""
    if name == "mini":
        return base
    if name == "0.6b":
        return dataclasses.replace(base, cp_hidden=base.talker_hidden, cp_layers=5, cp_heads=base.talker_heads,
                                   cp_kv_heads=base.talker_kv_heads, cp_mlp=base.talker_mlp)
    raise SystemExit(f"--layout: unknown layout {name!r}; choose mini or 0.6b")


def ensure_corpus(work: Path, cfg: CorpusConfig) -> tuple[Path, Path]:
    audio, tok = work / "corpus_audio", work / "phoneme_tokenizer.json"
    if not (audio / "dataset_dict.json").is_file():
        build_corpus(audio, work / "corpus_text", tok, cfg, progress=False)
    return audio, tok


def fit_codec(codec_cfg, audio_corpus: Path, out: Path, log, fitted=None):
    """Fit the variant's codec on model_train audio (or take `fitted`), encode every clip, save both."""
    dd = load_corpus(audio_corpus, need_audio=True)
    fit = [np.asarray(a, dtype=np.float32) for a in dd["model_train"].with_format("numpy")["audio"]]
    t0 = time.time()
    g = torch.Generator().manual_seed(codec_cfg.seed)
    if fitted is not None:
        codec = fitted
    elif isinstance(codec_cfg, LearnedCodecConfig):
        phon = [np.asarray(p, dtype=np.int64) for p in dd["model_train"]["phoneme_frames"]]
        codec = LearnedCodec(codec_cfg).fit(fit, phon, g, progress=False)
    else:
        codec = RVQCodec(codec_cfg).fit(fit, g, progress=False)
    log(f"codec fit {time.time() - t0:.0f} s on {len(fit)} clips")
    rows = rows_from_corpus(dd, with_audio=True)
    for r in rows:
        r["codes"] = codec.encode(r["audio"]).numpy().astype(codes_dtype(codec_cfg.codebook_size))
    codec.save(out / "codec")
    save_corpus(rows, out / "corpus", with_audio=False, codebook_size=codec_cfg.codebook_size)
    return codec, out / "corpus"


def split_arrays(corpus: Path, split: str, limit: int | None = None) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """English rows of one split (the gate corpus is English only; a committed world's eval is not)."""
    ds = load_corpus(corpus)[split]
    ds = in_language(ds)
    ds = ds.select(range(min(limit or len(ds), len(ds))))
    return ([np.asarray(t, dtype=np.int64) for t in ds["phoneme_frames"]],
            [np.asarray(c, dtype=np.int64) for c in ds["codes"]], list(ds["text"]))


def entropy_nats(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def codec_statistics(corpus: Path, cb: int, vocab: int) -> dict:
    """Marginal entropy per level (model_train) and the cross-entropy on eval of a per-level count
    model p(c_k | phoneme of the frame), add-one smoothed: how much of each level the text decides."""
    tt, cc, _ = split_arrays(corpus, "model_train")
    te, ce, _ = split_arrays(corpus, "eval")
    t, c = np.concatenate(tt), np.concatenate(cc)  # (N,), (N, 16)
    t2, c2 = np.concatenate(te), np.concatenate(ce)
    marg, cond = [], []
    for k in range(c.shape[1]):
        marg.append(round(entropy_nats(np.bincount(c[:, k], minlength=cb)), 4))
        table = np.ones((vocab, cb))  # (V, cb) add-one counts
        np.add.at(table, (t, c[:, k]), 1)
        p = table / table.sum(1, keepdims=True)
        cond.append(round(float(-np.log(p[t2, c2[:, k]]).mean()), 4))
    return {"marginal_entropy_nats": marg, "phoneme_count_model_xent_nats": cond, "log_codebook_size": round(math.log(cb), 4)}


@torch.no_grad()
def frames_of(model, texts, codes) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(talker hidden (T, E), codes (T, 16)) per utterance, talker teacher-forced on the true codes."""
    return [teacher_forced_frames(model.talker, model.code_predictor, torch.from_numpy(t), torch.from_numpy(c))
            for t, c in zip(texts, codes)]


@torch.no_grad()
def entropy_and_reuse(cp, batches, sampling: Sampling) -> dict:
    """Free-running entropy per level and the verifier's probability of the reused-head draft."""
    tempered = Sampling(do_sample=True, top_k=0, top_p=1.0, temperature=sampling.temperature)
    ent_soft, ent_samp, n = torch.zeros(NUM_CODES), torch.zeros(NUM_CODES), 0
    reuse_p, reuse_top1, reuse_n = torch.zeros(K), torch.zeros(K), torch.zeros(K)
    for hidden, codes in batches:  # (b, 15, H), (b, 16)
        logits = cp.lm_logits(hidden, torch.arange(NUM_CODES))  # (b, 15, V): head p-1 at h_p
        ps = probs(logits, sampling)  # (b, 15, V) deployed
        pt = probs(logits, tempered)
        ent_soft += -(pt * pt.clamp_min(1e-30).log()).sum(-1).sum(0)
        ent_samp += -(ps * ps.clamp_min(1e-30).log()).sum(-1).sum(0)
        n += hidden.shape[0]
        for p in range(1, NUM_CODES + 1):
            for j in range(1, K + 1):
                if p + j > NUM_CODES:
                    continue
                draft = F.linear(hidden[:, p - 1], cp.lm_head[p + j - 1].weight).argmax(-1)  # (b,) head of c_{p+j} at h_p
                reuse_p[j - 1] += ps[:, p + j - 1].gather(1, draft[:, None]).sum()  # verifier at h_{p+j}
                reuse_top1[j - 1] += (draft == codes[:, p + j]).float().sum()
                reuse_n[j - 1] += hidden.shape[0]
    return {"entropy_softmax_T0.9": (ent_soft / n).round(decimals=4).tolist(),
            "entropy_sampled_topk50": (ent_samp / n).round(decimals=4).tolist(),
            "reused_draft_verifier_prob": (reuse_p / reuse_n).round(decimals=4).tolist(),
            "reused_draft_top1_acceptance": (reuse_top1 / reuse_n).round(decimals=4).tolist(), "frames": n}


@torch.no_grad()
def verifier_table(cp, batches, max_rank: int = 16) -> np.ndarray:
    """(K, max_rank) acceptance table of the oracle: P(rank of c_{m+d} under the verifier = r) over
    round starts m, for d = 1..K (drafts = the verifier's own top-m at each depth)."""
    counts, totals = np.zeros((K, max_rank)), np.zeros(K)
    for hidden, codes in batches:
        vr = verifier_ranks(cp, hidden, codes).numpy()  # (b, 15): vr[:, p-1] rank of c_p
        for d in range(1, K + 1):
            r = vr[:, d:].ravel()  # c_{m+d} for round starts m = 1..15-d
            totals[d - 1] += r.size
            counts[d - 1] += np.bincount(r[r < max_rank], minlength=max_rank)[:max_rank]
    return counts / np.maximum(totals[:, None], 1)


def cer_of(recognizer, audios, texts) -> dict:
    hyps = recognizer.transcribe(audios, "en")
    s = score(texts, hyps, "en")
    return {"cer": round(s["cer"], 4), "wer": round(s["wer"], 4), "n": len(texts), "examples": [[texts[0], hyps[0]]]}


def _mean(xs) -> float:
    return float(np.mean(xs)) if xs else float("nan")


def markdown_table(results: list[dict]) -> str:
    """The common measures of several gate JSONs as one markdown table (rows: measures, columns: runs)."""
    def row(label, fn):
        cells = []
        for r in results:
            try:
                v = fn(r)
                cells.append(v if isinstance(v, str) else f"{v:.2f}")
            except (KeyError, TypeError, IndexError, ZeroDivisionError):
                cells.append("-")
        return f"| {label} | " + " | ".join(cells) + " |"

    head = "| measure | " + " | ".join(r["gate"] for r in results) + " |\n|---|" + "---|" * len(results)
    fr = lambda r: r["free_running"]  # noqa: E731
    lines = [head,
             row("codec marginal entropy c1 / c8 / c15 (nats)", lambda r: " / ".join(
                 f"{r['codec']['marginal_entropy_nats'][k]:.2f}" for k in (1, 8, 15))),
             row("count model given the phoneme, mean c8..c15 (nats)", lambda r: _mean(r["codec"]["phoneme_count_model_xent_nats"][8:])),
             row("free-running entropy T=0.9, mean c1..c7 (nats)", lambda r: _mean(fr(r)["entropy_softmax_T0.9"][:7])),
             row("free-running entropy T=0.9, mean c8..c15 (nats)", lambda r: _mean(fr(r)["entropy_softmax_T0.9"][7:])),
             row("free-running entropy top-k 50, mean c8..c15 (nats)", lambda r: _mean(fr(r)["entropy_sampled_topk50"][7:])),
             row("verifier p(reused draft), j = 1 / 2 / 3", lambda r: " / ".join(
                 f"{x:.2f}" for x in fr(r)["reused_draft_verifier_prob"])),
             row("position-mean cosine, mean (min..max)", lambda r: "{:.2f} ({:.2f}..{:.2f})".format(
                 r["hidden_geometry"]["position_mean_cosine_mean"], min(r["hidden_geometry"]["position_mean_cosine"]),
                 max(r["hidden_geometry"]["position_mean_cosine"]))),
             row("shift R^2, mean", lambda r: r["hidden_geometry"]["shift_r2_mean"]),
             row("affine R^2 (held out), mean", lambda r: r["hidden_geometry"]["affine_r2_mean"])]
    for kind in ("reused", "offsets", "shared_low_rank", "medusa", "oracle"):
        lines.append(row(f"tokens per call {kind}, N = 4 / 16", lambda r, k=kind: "{:.2f} / {:.2f}".format(
            r["tokens_per_call"][k]["4"], r["tokens_per_call"][k]["16"])))
    lines += [row("offsets share of Medusa, N = 16", lambda r: f"{100 * r['offsets_share_of_medusa']['16']:.0f}%"),
              row("CER clean / codec resynthesis (committed recognizer)", lambda r: "{:.1%} / {:.1%}".format(
                  r["cer"]["clean"]["cer"], r["cer"]["codec_resynthesis"]["cer"])),
              row("CER free-running AR", lambda r: f"{r['cer']['ar_free_running']['cer']:.1%}"),
              row("predictor val loss (nats per code)", lambda r: r["train"]["val_loss_cp"])]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--codec", default="kmeans", choices=sorted(CODECS))
    ap.add_argument("--layout", default="mini", choices=("mini", "0.6b"))
    ap.add_argument("--out", type=Path, help="JSON result")
    ap.add_argument("--table", type=Path, nargs="+", help="print the markdown table of these gate JSONs and exit")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "gates")
    ap.add_argument("--name", default=None, help="run folder under --work (default: codec_layout)")
    ap.add_argument("--steps", type=int, default=2500, help="mini-model training steps")
    ap.add_argument("--drafter-steps", type=int, default=1500)
    ap.add_argument("--corpus-model-train", type=int, default=2000)
    ap.add_argument("--corpus-train", type=int, default=400)
    ap.add_argument("--ar-sentences", type=int, default=20, help="eval sentences synthesized free-running for CER")
    ap.add_argument("--falsified-if", default="", help="the result that would falsify this gate, written before the run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codec-from", default=None,
                    help="reuse the codec and encoded corpus of this earlier run under --work (same codec config)")
    ap.add_argument("--world", type=Path, default=None,
                    help="measure an existing world instead (DIR/model, DIR/codec, DIR/corpus, e.g. data/mini): "
                         "no training, no resynthesis CER (its corpus has no audio); the same split sizes")
    ap.add_argument("--codec-dir", type=Path, default=None,
                    help="encode the gate corpus with this already fitted codec (e.g. data/mini/codec) instead of fitting")
    ap.add_argument("--rate-lambda", type=float, default=None,
                    help="override the k-means codec's rate_lambda (entropy-constrained RVQ) for a rate sweep")
    ap.add_argument("--codec-steps", type=int, default=None, help="training steps of the learned codec (R3)")
    ap.add_argument("--codec-only", action="store_true",
                    help="fit and measure the codec only (codes statistics and resynthesis CER), no model")
    ap.add_argument("--toy", action="store_true", help="toy corpus, codec and model: seconds, for the test")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table([json.loads(p.read_text()) for p in args.table]))
        return
    if args.out is None:
        ap.error("--out is required")
    torch.set_num_threads(args.threads)
    t_start = time.time()
    name = args.name or f"{args.codec}_{args.layout}" + ("_toy" if args.toy else "")
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(f"[gate {name} {time.time() - t_start:6.0f}s] {m}", flush=True)

    if args.toy:
        ccfg = CorpusConfig(model_train_per_language=12, train=12, validation=3, calibration=4, eval_per_language=3,
                            languages=("en",))
        codec_cfg = (LearnedCodecConfig.toy() if args.codec == "r3_learned" else
                     dataclasses.replace(CODECS[args.codec], codebook_size=16, kmeans_iters=4, kmeans_init_sample=2000,
                                         griffin_lim_iters=4))
        mcfg = dataclasses.replace(MiniModelConfig.toy(), steps=min(args.steps, 30))
        args.drafter_steps, args.ar_sentences = min(args.drafter_steps, 20), min(args.ar_sentences, 2)
        corpus_root = work
    else:
        ccfg = CorpusConfig(model_train_per_language=args.corpus_model_train, train=args.corpus_train, validation=40,
                            calibration=60, eval_per_language=40, languages=("en",))
        codec_cfg = CODECS[args.codec]
        if args.rate_lambda is not None:
            if not isinstance(codec_cfg, CodecConfig):
                raise SystemExit(f"--rate-lambda applies to k-means codecs, not --codec {args.codec}")
            codec_cfg = dataclasses.replace(codec_cfg, rate_lambda=args.rate_lambda)
        mcfg = dataclasses.replace(MiniModelConfig(), steps=args.steps, threads=args.threads, seed=args.seed)
        corpus_root = args.work
    mcfg = layout(args.layout, mcfg)
    if args.world:
        vocab = int(load_qwen3_tts(args.world / "model").config.talker.text_vocab_size)
        return measure(args, name, work, ccfg, load_codec(args.world / "codec"), args.world / "corpus",
                       args.world / "model", vocab, None, None, None, log, t_start, argv)
    audio_corpus, tok = ensure_corpus(corpus_root, ccfg)
    log("corpus ready")
    if isinstance(codec_cfg, LearnedCodecConfig):
        codec_cfg = dataclasses.replace(codec_cfg, num_phonemes=PhonemeTokenizer.load(tok).vocab_size,
                                        steps=args.codec_steps or codec_cfg.steps)
    if args.codec_from:
        src = args.work / args.codec_from
        codec, corpus, codec_dir = load_codec(src / "codec"), src / "corpus", src / "codec"
        if codec.config != codec_cfg:
            raise SystemExit(f"--codec-from: {src / 'codec'} was fitted with another config than --codec {args.codec}")
        log(f"codec and codes reused from {src}")
    elif args.codec_dir:
        codec = load_codec(args.codec_dir)
        if codec.config != codec_cfg:
            raise SystemExit(f"--codec-dir: {args.codec_dir} has another config than --codec {args.codec}")
        codec, corpus = fit_codec(codec_cfg, audio_corpus, work, log, fitted=codec)
        codec_dir = work / "codec"
        log(f"codec {args.codec_dir} (already fitted) encoded the corpus")
    else:
        codec, corpus = fit_codec(codec_cfg, audio_corpus, work, log)
        codec_dir = work / "codec"
    train_metrics = None
    if not args.codec_only:
        # --codec-from trains on the source run's codec (its codes are what the corpus holds)
        train_metrics = train_mini_model(corpus, codec_dir, work / "model", config=mcfg, tokenizer_path=tok)
        log(f"model trained {train_metrics}")
    measure(args, name, work, ccfg, codec, corpus, work / "model", PhonemeTokenizer.load(tok).vocab_size, audio_corpus,
            mcfg, train_metrics, log, t_start, argv)


def measure(args, name, work, ccfg, codec, corpus, model_dir, vocab, audio_corpus, mcfg, train_metrics, log, t_start,
            argv):
    """Every common measure of one world (codec, corpus with codes, trained model) -> args.out."""
    cb = int(codec.config.codebook_size)
    res: dict = {"gate": name, "codec_variant": "world:" + str(args.world) if args.world else args.codec,
                 "layout": args.layout, "toy": args.toy, "falsified_if": args.falsified_if,
                 "command": "PYTHONPATH=$PWD python scripts/mini_gate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "codec_config": dataclasses.asdict(codec.config)}
    res["codec"] = codec_statistics(corpus, cb, vocab)
    recognizer = None
    recog_dir = REPO / "data" / "mini" / "recognizer"
    if recog_dir.is_dir():
        recognizer = load_recognizer(recog_dir)
    if recognizer is not None and audio_corpus is not None:
        dd = load_corpus(audio_corpus, need_audio=True)["eval"]
        audios = [np.asarray(a, dtype=np.float32) for a in dd.with_format("numpy")["audio"]]
        texts = list(dd["text"])
        res["cer"] = {"recognizer": "data/mini/recognizer (committed; trained on the current codec's resynthesis)",
                      "clean": cer_of(recognizer, audios, texts),
                      "codec_resynthesis": cer_of(recognizer, [codec.decode(codec.encode(a)) for a in audios], texts)}
        log(f"cer {json.dumps(res['cer'])}")
    if args.codec_only:
        res["scale"] = {"corpus": dataclasses.asdict(ccfg)}
        res["seconds"] = round(time.time() - t_start, 1)
        write_json_atomic(args.out, res, indent=1)
        log(f"wrote {args.out} (codec only)")
        return
    model = load_qwen3_tts(model_dir)
    cp = model.code_predictor
    g = torch.Generator().manual_seed(args.seed)
    sampling = Sampling()
    xc = ExtractConfig(dtype="float32")
    tr_t, tr_c, _ = split_arrays(corpus, "train", ccfg.train)
    ca_t, ca_c, _ = split_arrays(corpus, "calibration", ccfg.calibration)
    ev_t, ev_c, ev_text = split_arrays(corpus, "eval", ccfg.eval_per_language)
    extract(cp, frames_of(model, tr_t, tr_c), work / "tf_train", "teacher_forced", xc, progress=False)
    extract(cp, frames_of(model, ca_t, ca_c), work / "fr_calib", "free_running", xc, sampling, g, progress=False)
    extract(cp, frames_of(model, ev_t, ev_c), work / "fr_eval", "free_running", xc, sampling, g, progress=False)
    calib = list(ShardDataset(work / "fr_calib", batch_size=512, shuffle=False))
    evald = list(ShardDataset(work / "fr_eval", batch_size=512, shuffle=False))
    log("shards extracted")

    res.update({"scale": {"corpus": dataclasses.asdict(ccfg), "model_steps": mcfg.steps if mcfg else None,
                           "drafter_steps": args.drafter_steps, "threads": args.threads,
                           "calibration_frames": sum(b[0].shape[0] for b in calib),
                           "eval_frames": sum(b[0].shape[0] for b in evald)},
                 "model_config": dataclasses.asdict(mcfg) if mcfg else json.loads(
                     (model_dir / "mini_model.json").read_text()).get("config"),
                 "code_predictor_parameters": code_predictor_parameters(cp),
                 "projection": type(cp.small_to_mtp_projection).__name__, "train": train_metrics})
    res["free_running"] = entropy_and_reuse(cp, calib, sampling)
    res["hidden_geometry"] = hidden_geometry(calib, res["scale"]["calibration_frames"], args.seed).to_json()
    log("entropy / geometry done")

    tpc: dict = {}
    oracle_acc = verifier_table(cp, calib)
    tpc["oracle"] = {str(N): round(oracle_tokens_per_call(cp, SparseTree.grow(oracle_acc, N, max_depth=K), evald)
                                   .tokens_per_call, 4) for N in BUDGETS}
    drafter_rows = {}
    for kind in DRAFTERS:
        d = make_drafter(kind, cp)
        losses = []
        if kind != "reused":
            d, losses = train_drafter(d, cp, work / "tf_train",
                                      DrafterTrainConfig(epochs=1000, max_steps=args.drafter_steps, seed=args.seed,
                                                         threads=args.threads))
        table = acceptance_table(d, cp, calib, max_rank=16)
        row = {"acc_top1_by_lookahead": table.acc[:, 0].round(4).tolist(),
               "added_parameters": 0 if kind == "reused" else d.num_parameters,
               "train_loss_first_last": [round(losses[0], 4), round(losses[-1], 4)] if losses else None}
        for N in BUDGETS:
            tree = SparseTree.grow(table.acc, N, max_depth=K)
            row[f"tokens_per_call_N{N}"] = round(replay_tokens_per_call(d, cp, tree, evald).tokens_per_call, 4)
            row[f"oracle_on_this_tree_N{N}"] = round(oracle_tokens_per_call(cp, tree, evald).tokens_per_call, 4)
        drafter_rows[kind] = row
        tpc[kind] = {str(N): row[f"tokens_per_call_N{N}"] for N in BUDGETS}
        log(f"{kind} {json.dumps(row)}")
    res["tokens_per_call"] = tpc
    res["drafters"] = drafter_rows
    res["offsets_share_of_medusa"] = {str(N): round(tpc["offsets"][str(N)] / tpc["medusa"][str(N)], 4) for N in BUDGETS}

    if recognizer is not None:
        n = min(args.ar_sentences, len(ev_t))
        ar = []
        for i in range(n):
            c, _ = synthesize_codes(model.talker, cp, torch.from_numpy(ev_t[i]), cb, sampling=sampling,
                                    generator=torch.Generator().manual_seed(i))
            ar.append(codec.decode(c))
        res.setdefault("cer", {"recognizer": "data/mini/recognizer (committed)"})["ar_free_running"] = cer_of(
            recognizer, ar, ev_text[:n])
        log(f"ar cer {json.dumps(res['cer']['ar_free_running'])}")
    res["seconds"] = round(time.time() - t_start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, res, indent=1)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
