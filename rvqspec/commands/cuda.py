"""`rvqspec bench cuda-graphs`: the talker step, the whole AR frame and the speculative round, each
captured as one CUDA graph, at full size with random weights (`rvqspec.measure.cuda_graphs`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from rvqspec.commands.bench import bench_app
from rvqspec.core.defaults import BUDGET


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @bench_app.command("cuda-graphs")
    def bench_cuda_graphs_cmd(
            model: str = typer.Option("0.6b", "--model", help="Architecture preset (random weights): 0.6b or 1.7b."),
            dtype: str = typer.Option("bf16", "--dtype", help="bf16 or fp32."),
            budget: Optional[List[int]] = typer.Option(None, "--budget", help=f"Tree size N (repeatable; default {BUDGET})."),
            calls: int = typer.Option(200, "--calls", help="Timed replays per graph (seed 000 §3.4: 200)."),
            warmup: int = typer.Option(20, "--warmup", help="Untimed replays first (seed 000 §3.4: 20)."),
            device: str = typer.Option("cuda", "--device", help="cuda (graphs captured) or cpu (eager, a smoke run)."),
            out: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON here (atomically)."),
            as_json: bool = typer.Option(True, "--json/--no-json", help="JSON on stdout (the only output format).")):
        """Time the captured graphs side by side; project the speculative frame at the seed's
        acceptance (2.47 tokens per call) against the captured AR frame."""
        import torch

        from rvqspec.core.config import CodePredictorConfig, ConfigError, TalkerConfig
        from rvqspec.core.jsonfile import write_json_atomic
        from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
        from rvqspec.measure.cuda_graphs import bench_cuda_graphs
        from rvqspec.mini.bench_stream import SEED_TOKENS_PER_CALL

        dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
        if dtype not in dtypes:
            _fail(f"--dtype must be one of {', '.join(dtypes)}, got {dtype!r}")
        if device not in ("cuda", "cpu"):
            _fail(f"--device must be cuda or cpu, got {device!r}")
        if device == "cuda" and not torch.cuda.is_available():
            _fail("--device cuda: torch.cuda.is_available() is False on this machine (torch "
                  f"{torch.__version__}); use --device cpu for an eager smoke run")
        budgets = tuple(budget or (BUDGET,))
        if any(n < 1 for n in budgets) or calls < 1 or warmup < 0:
            _fail(f"--budget and --calls must be >= 1 and --warmup >= 0, got {budgets}, {calls}, {warmup}")
        try:
            tcfg, ccfg = TalkerConfig.from_name(model), CodePredictorConfig.from_name(model)
        except ConfigError as e:
            _fail(f"--model: {e}")
        torch.manual_seed(0)
        with torch.device(device):
            talker = CodeDecoder(tcfg).to(dtypes[dtype]).eval()
            cp = MultiCodeDecoder(ccfg).to(dtypes[dtype]).eval()
            cp.set_c0_embedding(torch.nn.Embedding(ccfg.vocab_size, ccfg.talker_hidden_size).to(dtypes[dtype]))
        res = bench_cuda_graphs(talker, cp, budgets, {"seed 000 Table 2 (iii) offsets": SEED_TOKENS_PER_CALL},
                                calls=calls, warmup=warmup)
        res.update(model=model, weights="random", torch=torch.__version__)
        if out is not None:
            write_json_atomic(out, res, indent=2)
        typer.echo(json.dumps(res, indent=2))
