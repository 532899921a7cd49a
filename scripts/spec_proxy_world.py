"""A minutes-scale proxy for the mini world, to exercise the whole spec pipeline on a *trained* code
predictor before `data/mini/model` exists (seed 000 §2.2-§3.4 end to end).

Synthetic RVQ data: a latent x (16-d, a mixture of 32 Gaussians) is residual-quantized by 16
random codebooks of decreasing scale (c0..c15, codebook size 64); the talker hidden state is a
noisy linear image of x. A mini-size MultiCodeDecoder (hidden 128, 3 layers, as MiniModelConfig)
is trained with teacher forcing on (talker hidden, c0..c14) -> c1..c15. Then: teacher-forced and
free-running extraction, drafter training (offsets, per-position, low-rank, Medusa), calibration
acceptance tables, greedy trees, tokens per call (decoder run, replay, oracle) and the interleaved
wall-clock AR vs speculative inner loop.

    .venv/bin/python scripts/spec_proxy_world.py --out runs/spec_proxy   # about 10-15 minutes on 2 busy cores
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def make_world(n_frames: int, seed: int, cb: int = 64, dim: int = 16, talker_hidden: int = 192):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(32, dim, generator=g) * 2.0  # (32, dim)
    books = [torch.randn(cb, dim, generator=g) * (0.75 ** k) * 1.5 for k in range(16)]  # 16 x (cb, dim)
    proj = torch.randn(dim, talker_hidden, generator=g) / dim ** 0.5  # (dim, E)

    def sample(n: int, gen: torch.Generator):
        x = centers[torch.randint(0, 32, (n,), generator=gen)] + 0.6 * torch.randn(n, dim, generator=gen)  # (n, dim)
        r = x.clone()
        codes = torch.empty(n, 16, dtype=torch.long)
        for k in range(16):  # greedy residual quantization
            j = torch.cdist(r, books[k]).argmin(1)
            codes[:, k] = j
            r = r - books[k][j]
        th = x @ proj + 0.3 * torch.randn(n, talker_hidden, generator=gen)  # (n, E)
        return th, codes

    return sample(n_frames, g), sample


def train_cp(th, codes, steps: int, seed: int):
    from tqdm import tqdm

    from rvqspec.mini.talker_train import MiniModelConfig, model_config
    from rvqspec.core.model import MultiCodeDecoder, causal_mask
    from rvqspec.core.frame_loop import training_cache

    torch.manual_seed(seed)
    cfg = model_config(MiniModelConfig(), text_vocab_size=8, codebook_size=64).code_predictor
    cp = MultiCodeDecoder(cfg)
    c0_emb = torch.nn.Embedding(64, cfg.talker_hidden_size)
    cp.set_c0_embedding(c0_emb)
    params = list(cp.parameters()) + list(c0_emb.parameters())
    opt = torch.optim.Adam(params, lr=2e-3)
    n = 16
    pos = torch.arange(n).view(1, n)
    mask = causal_mask(pos, n)
    losses = []
    for step in tqdm(range(steps), desc="train proxy code predictor"):
        idx = torch.randint(0, th.shape[0], (128,))
        t, c = th[idx], codes[idx]
        x = torch.cat([t.unsqueeze(1), cp.embed_codes(c[:, :15], list(range(15)))], 1)  # (B, 16, E)
        cache = training_cache(cp, 128, n, torch.float32)  # per-layer tensors: differentiable
        hidden, logits = cp(x, pos.expand(128, n), cache, torch.arange(n), mask, heads=None)
        logits = cp.lm_logits(hidden[:, 1:], list(range(15)))  # (B, 15, V)
        loss = F.cross_entropy(logits.flatten(0, 1), c[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    cp.eval()
    return cp, losses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("runs/spec_proxy"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--drafter-steps", type=int, default=500)
    ap.add_argument("--timing-frames", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drafter-source", choices=["teacher_forced", "free_running"], default="teacher_forced",
                    help="train drafters on ground-truth codes (seed §2.2) or on the model's own samples")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)

    from rvqspec.measure.acceptance import (acceptance_table, measure_tokens_per_call, oracle_tokens_per_call,
                                    replay_tokens_per_call)
    from rvqspec.measure.bench_spec import bench_inner_loop
    from rvqspec.core.drafters import code_predictor_parameters, make_drafter
    from rvqspec.measure.extract import ExtractConfig, ShardDataset, extract
    from rvqspec.core.sampling import Sampling
    from rvqspec.core.speculative import SpeculativeCodePredictor
    from rvqspec.measure.train_drafter import DrafterTrainConfig, evaluate_loss, train_drafter
    from rvqspec.core.tree import SparseTree

    t0 = time.time()
    (th, codes), sample = make_world(60_000, args.seed)
    cp, cp_losses = train_cp(th, codes, args.steps, args.seed)
    g = torch.Generator().manual_seed(args.seed + 1)
    utts = lambda n, seed: [sample(100, torch.Generator().manual_seed(seed + i)) for i in range(n // 100)]  # noqa: E731
    cfg = ExtractConfig(dtype="float32")
    extract(cp, utts(8_000, 100), args.out / "train_tf", args.drafter_source, cfg, Sampling(), g)
    extract(cp, utts(2_000, 200), args.out / "val_tf", "teacher_forced", cfg)
    extract(cp, utts(2_000, 300), args.out / "calib_fr", "free_running", cfg, Sampling(), g)
    extract(cp, utts(1_000, 400), args.out / "eval_fr", "free_running", cfg, Sampling(), g)
    eval_utts = utts(1_000, 500)
    n_cp = code_predictor_parameters(cp)
    torch.save({"state_dict": cp.state_dict(), "c0": cp.c0_embedding.state_dict()}, args.out / "proxy_cp.pt")
    res: dict = {"drafter_source": args.drafter_source, "cp_final_loss": sum(cp_losses[-50:]) / 50, "code_predictor_parameters": n_cp, "drafters": {}}
    calib = list(ShardDataset(args.out / "calib_fr", batch_size=512, shuffle=False))
    evald = list(ShardDataset(args.out / "eval_fr", batch_size=512, shuffle=False))
    val = list(ShardDataset(args.out / "val_tf", batch_size=512, shuffle=False))
    drafters = {}
    for kind in ("reused", "offsets", "per_position", "low_rank", "medusa"):
        d = make_drafter(kind, cp)
        losses = []
        if kind != "reused":
            tc = DrafterTrainConfig(epochs=1000, max_steps=args.drafter_steps, seed=args.seed)
            d, losses = train_drafter(d, cp, args.out / "train_tf", tc)
        drafters[kind] = d
        table = acceptance_table(d, cp, calib, max_rank=16)
        row = {"added_parameters": 0 if kind == "reused" else d.num_parameters,
               "added_percent": 0.0 if kind == "reused" else 100.0 * d.num_parameters / n_cp,
               "val_loss": evaluate_loss(d, cp, val), "acc_top1": table.acc[:, 0].round(4).tolist(),
               "train_loss_first_last": [losses[0], losses[-1]] if losses else None, "by_N": {}}
        for N in (4, 8, 16, 32):
            tree = SparseTree.grow(table.acc, N)
            spec = SpeculativeCodePredictor(cp, d, tree)
            run = measure_tokens_per_call(spec, [(t, c[:, 0]) for t, c in eval_utts], Sampling(), g, max_frames=150)
            row["by_N"][N] = {"tokens_per_call": round(run.tokens_per_call, 4),
                              "replay": round(replay_tokens_per_call(d, cp, tree, evald).tokens_per_call, 4),
                              "oracle": round(oracle_tokens_per_call(cp, tree, evald).tokens_per_call, 4),
                              "expected_length": round(tree.expected_length(table.acc), 4)}
        res["drafters"][kind] = row
        print(kind, json.dumps(row), flush=True)
    frames = [(t[i].view(1, 1, -1), c[i, :1].view(1, 1)) for t, c in eval_utts for i in range(t.shape[0])]
    res["timing"] = {}
    for kind in ("offsets", "low_rank"):
        table = acceptance_table(drafters[kind], cp, calib, max_rank=16)
        for N in (4, 8, 16):
            spec = SpeculativeCodePredictor(cp, drafters[kind], SparseTree.grow(table.acc, N))
            r = bench_inner_loop(cp, spec, frames[: args.timing_frames])
            res["timing"][f"{kind}_N{N}"] = r
            print(kind, N, json.dumps(r), flush=True)
    res["seconds"] = time.time() - t0
    (args.out / "result.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
