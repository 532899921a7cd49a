"""The `rvqspec bench ...` sub-app; each area adds its own benchmark commands to `bench_app`.

Kept minimal on purpose: `rvqspec.commands.core` adds `bench ar`, the spec area adds
`bench acceptance` / `bench spec`, all by decorating `bench_app.command(...)` in their own module.
"""
from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks (latency, acceptance); JSON to stdout, progress to stderr.",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
