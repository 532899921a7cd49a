"""The `rvqspec` command line (typer).

Each area of the project owns one module under `rvqspec.commands` with a `register(app)` function;
those modules import heavy libraries inside the command bodies so that `rvqspec --help` is instant.
The shared option names live in `rvqspec.commands.options`.

Bad input ends the same way in every command: exit code 2 and one plain line on stderr,
`error: <what>` naming the file, key, shape or value; `rvqspec --debug ...` (or RVQSPEC_DEBUG=1)
shows the traceback instead. The line is printed with `typer.echo`, not rich, so that no console
width wraps it.
"""
from __future__ import annotations

import importlib
import os
import pkgutil

import typer
import typer.core

try:  # typer >= 0.29 vendors click as typer._click; its exceptions are the ones commands raise
    from typer._click import exceptions as _click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as _click_errors

ClickException, UsageError = _click_errors.ClickException, _click_errors.UsageError
# click >= 8.2 signals "no arguments: show the help" with this UsageError; it must stay help
NoArgsIsHelpError = getattr(_click_errors, "NoArgsIsHelpError", ())

# What a routine mistake raises: the project's named errors derive from ValueError (CheckpointError,
# TreeError, DrafterError, ProfileError, ...); OSError covers missing, unreadable and mis-typed paths.
USER_ERRORS = (ValueError, OSError)


def one_line(exc: BaseException) -> str:
    """The message of `exc` as one line; an OSError names its path first."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    elif isinstance(exc, ClickException):
        text = exc.format_message()
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


class _Group(typer.core.TyperGroup):
    """The top-level group: turns a routine mistake anywhere below it into one line and exit code 2."""

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except (UsageError, *USER_ERRORS) as exc:
            if ctx.params.get("debug") or os.environ.get("RVQSPEC_DEBUG"):
                raise
            typer.echo(f"error: {one_line(exc)}", err=True)
            raise typer.Exit(2) from None


def _flag_type(self, ctx):
    """typer labels flags `<bool>` although they take no value; show no type for them."""
    if self.is_flag:
        return None
    return _option_type(self, ctx)


_option_type = getattr(typer.core.TyperOption, "display_type_rich", None)
if _option_type is not None:  # only typer versions with this hook print the <bool> label
    typer.core.TyperOption.display_type_rich = _flag_type

app = typer.Typer(
    cls=_Group,
    help="rvqspec: fast codec-language-model TTS (Qwen3-TTS) on the devices people own.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error instead of one line.")):
    """rvqspec: fast codec-language-model TTS (Qwen3-TTS) on the devices people own."""


def _register_all() -> None:
    import rvqspec.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"rvqspec.commands.{info.name}")
        if hasattr(module, "register"):
            module.register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
