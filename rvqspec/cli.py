"""The `rvqspec` command line (typer).

Each area of the project owns one module under `rvqspec.commands` with a `register(app)` function;
those modules import heavy libraries inside the command bodies so that `rvqspec --help` is instant.
"""
from __future__ import annotations

import importlib
import pkgutil

import typer

app = typer.Typer(
    help="rvqspec: fast codec-language-model TTS (Qwen3-TTS) on the devices people own.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _register_all() -> None:
    import rvqspec.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"rvqspec.commands.{info.name}")
        module.register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
