"""`rvqspec profile`: per-device latency of the AR and verify calls, overhead, speed-up and N*."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from rvqspec.commands import options as opt
from rvqspec.measure.profile import BACKENDS, DTYPES, ProfileConfig

_P = ProfileConfig()  # the one place the profile defaults live


def register(app: typer.Typer) -> None:
    @app.command("profile")
    def profile_cmd(
            backend: str = typer.Option(_P.backend, "--backend", help=f"One of {', '.join(BACKENDS)}."),
            dtype: str = typer.Option(_P.dtype, "--dtype", help=f"One of {', '.join(DTYPES)}."),
            model: str = opt.model(_P.model, "Checkpoint folder or preset name (0.6b: random weights)."),
            calls: int = typer.Option(_P.calls, "--calls", help="Timed calls per graph (seed 000 §3.4: 200)."),
            warmup: int = typer.Option(_P.warmup, "--warmup", help="Excluded warm-up calls (seed: 20)."),
            sizes: Optional[List[int]] = opt.budgets(None, "Tree budgets N (repeatable); default "
                                                     + ", ".join(map(str, _P.sizes)) + "."),
            acceptance: Optional[Path] = typer.Option(None, "--acceptance", help="Acceptance JSON: {'N': {N: "
                                                      "tokens_per_call}} and/or {'acc': table}; default: "
                                                      "seed-fitted table."),
            acceptance_drafter: Optional[str] = typer.Option(None, "--acceptance-drafter", help="Drafter entry "
                                                             "of a `bench acceptance` JSON (default: offsets)."),
            threads: int = opt.threads(_P.threads, "CPU threads (torch / onnxruntime)."),
            compute_units: str = typer.Option(_P.compute_units, "--compute-units",
                                              help="coreml: ALL, CPU_AND_NE (ANE), CPU_AND_GPU, CPU_ONLY."),
            heads: str = typer.Option(_P.heads, "--heads", help="LM head access: window or all (see export)."),
            compile_: bool = typer.Option(_P.compile, "--compile", help="torch.compile the torch graphs."),
            budget: Optional[float] = typer.Option(_P.budget_s, "--max-seconds", help="Per-graph time cap in s: "
                                                   "fewer timed calls (>= 20) where it would be exceeded."),
            as_json: bool = opt.as_json("Print the profile JSON on stdout."),
            out: Optional[Path] = opt.out(None, "Write the device profile JSON here."),
            plot: Optional[Path] = typer.Option(None, "--plot", help="Also write the Figure 4 HTML here."),
            rescore_: Optional[Path] = typer.Option(None, "--rescore", help="Re-score this device profile's "
                                                    "latencies with --acceptance (no timing)."),
    ) -> None:
        """p10/p50/p90 of the AR call and the verify call per N; overhead, speed-up, N* (seed 000 §3.4)."""
        from rvqspec.core.jsonfile import read_json
        from rvqspec.measure.profile import (
            BackendUnavailable,
            ProfileError,
            load_acceptance,
            profile,
            rescore,
            save_device_profile,
        )

        try:
            if rescore_ is not None:
                old = read_json(rescore_, ProfileError, "no such device profile")
                result = rescore(old, load_acceptance(acceptance, int(old.get("max_depth", 3)), acceptance_drafter))
                backend, dtype = result["backend"], result["dtype"]
            else:
                cfg = ProfileConfig(backend=backend, dtype=dtype, model=model, calls=calls, warmup=warmup,
                                    sizes=tuple(sizes) if sizes else _P.sizes, threads=threads,
                                    compile=compile_, budget_s=budget, compute_units=compute_units,
                                    heads=heads)
                result = profile(cfg, load_acceptance(acceptance, cfg.max_depth, acceptance_drafter))
        except BackendUnavailable as exc:  # nothing was measured: a script must not read this as success
            if as_json:
                typer.echo(json.dumps({"backend": backend, "dtype": dtype, "skipped": str(exc)}))
            typer.echo(f"error: backend {backend} is not available here: {exc}", err=True)
            raise typer.Exit(2)
        if out is not None:
            save_device_profile(result, out)
        if plot is not None:
            from rvqspec.workbench.plots import figure4, write_figure

            write_figure(figure4([result]), plot)
        if as_json:
            typer.echo(json.dumps(result, indent=1))
        else:
            typer.echo(f"{result['device']}  {backend} {dtype}: AR p50 {result['ar']['p50']:.2f} ms")
            for n, v in result["verify"].items():
                s = result["speedup"][n]
                typer.echo(f"  N={n:>3} q={v['q']:>3}  p50 {v['p50']:8.2f} ms  overhead {result['overhead'][n]:+7.1%}  "
                           f"tokens/call {result['tokens_per_call'][n] or float('nan'):.3f}  "
                           f"speed-up {s if s is not None else float('nan'):.3f}")
            typer.echo(f"N* = {result['n_star']}  ({result['acceptance_source']})")

    @app.command("figure4")
    def figure4_cmd(profiles: list[Path] = typer.Argument(..., help="Device profile JSON files."),
                    out: Path = opt.out(..., "HTML file (a PNG next to it if kaleido exists)."),
                    title: Optional[str] = typer.Option(None, "--title", help="Figure title.")) -> None:
        """Seed 000 Figure 4 for measured devices: speed-up vs N per profile under the acceptance ceiling."""
        from rvqspec.measure.profile import ProfileError, load_device_profile
        from rvqspec.workbench.plots import figure4, write_figure

        try:
            dicts = [load_device_profile(p).raw for p in profiles]
        except ProfileError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        typer.echo(json.dumps(write_figure(figure4(dicts, title=title), out)))
