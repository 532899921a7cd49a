"""The CLI's shared vocabulary: one definition per option name, reused by every command.

    --model        checkpoint folder (official layout) or preset name
    --lang         language code (repeatable where a command takes several)
    --budget       tree node budget N (repeatable where a command sweeps several)
    --drafter      drafter file (.safetensors)
    --tree         tree JSON (rank paths)
    --out          a file; folders are --out-dir
    --json         the full JSON result on stdout
    --threads      torch / onnxruntime CPU threads
    --temperature --top-k --top-p --greedy   code-predictor sampling (commands that decode)

Each function returns a fresh `typer.Option` so that commands can set their own default and help
while keeping the name. Defaults come from `rvqspec.core.defaults`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from rvqspec.core import defaults
from rvqspec.core.defaults import LANGUAGES
from rvqspec.core.jsonfile import write_json_atomic

if TYPE_CHECKING:
    from rvqspec.core.sampling import Sampling

LANG_HELP = "Language: en, de, es, ru, ja (kana) or zh."
THREADS_HELP = "torch CPU threads (1 by default: the shared 2-core machine ran small FFTs ~10x slower with 2)."


def model(default: Any = None, help: str = "Checkpoint folder (official layout) or preset name.") -> Any:
    return typer.Option(default, "--model", help=help)


def lang(default: Any = "en", help: str = LANG_HELP) -> Any:
    return typer.Option(default, "--lang", help=help)


def langs(default: Any = None, help: str = "Languages (repeatable); default: all.") -> Any:
    return typer.Option(default, "--lang", help=help)


def budget(default: Any = defaults.BUDGET, help: str = "Tree node budget N (seed 000 §2.3).") -> Any:
    return typer.Option(default, "--budget", min=1, help=help)


def budgets(default: Any = None, help: str = "Tree node budgets N (repeatable); default "
            + ", ".join(map(str, defaults.BUDGETS)) + ".") -> Any:
    return typer.Option(default, "--budget", min=1, help=help)


def drafter(default: Any = None, help: str = "Drafter file (.safetensors).") -> Any:
    return typer.Option(default, "--drafter", help=help)


def tree(default: Any = None, help: str = "Tree JSON (rank paths).") -> Any:
    return typer.Option(default, "--tree", help=help)


def out(default: Any = None, help: str = "Also write the result to this file.") -> Any:
    return typer.Option(default, "--out", help=help)


def out_dir(default: Any = None, help: str = "Output folder.") -> Any:
    return typer.Option(default, "--out-dir", help=help)


def as_json(help: str = "Print the full JSON result on stdout.") -> Any:
    return typer.Option(False, "--json", help=help)


CAST_DTYPES = ("bfloat16", "float16", "float32")


def cast_dtype(default: Any = "bfloat16", help: str = f"Stored dtype of the copy: {', '.join(CAST_DTYPES)}.") -> Any:
    return typer.Option(default, "--dtype", help=help)


def torch_dtype(name: str):
    """The torch dtype named by --dtype; ValueError naming the value (the CLI's group makes it one
    line and exit 2)."""
    import torch

    if name not in CAST_DTYPES:
        raise ValueError(f"--dtype {name!r} is not one of {', '.join(CAST_DTYPES)}")
    return getattr(torch, name)


def threads(default: Any = 1, help: str = THREADS_HELP) -> Any:
    return typer.Option(default, "--threads", help=help)


def temperature() -> Any:
    return typer.Option(defaults.TEMPERATURE, "--temperature",
                        help="Code-predictor sampling temperature (> 0; the deployed value by default).")


def top_k() -> Any:
    return typer.Option(defaults.TOP_K, "--top-k", help="Keep the k most likely codes (0: no top-k filter).")


def top_p() -> Any:
    return typer.Option(defaults.TOP_P, "--top-p", help="Nucleus mass in (0, 1] (1: no top-p filter).")


def greedy() -> Any:
    return typer.Option(False, "--greedy", help="Greedy decoding (argmax) instead of sampling.")


def check_lang(lang: str) -> None:
    """The mini world's languages (rvqspec.core.defaults.LANGUAGES); checked before any model loads."""
    if lang not in LANGUAGES:
        raise typer.BadParameter(f"--lang {lang!r} is not one of {', '.join(LANGUAGES)}")


def sampling(temperature: float, top_k: int, top_p: float, greedy: bool) -> "Sampling":
    """The `Sampling` the four sampling options describe; a bad value names its option."""
    # the CLI layer imports torch only when a command runs, so `rvqspec --help` stays quick
    from rvqspec.core.sampling import Sampling

    if greedy:
        return Sampling.greedy()
    if not temperature > 0:
        raise typer.BadParameter(f"--temperature must be > 0, got {temperature}")
    if top_k < 0:
        raise typer.BadParameter(f"--top-k must be >= 0 (0: off), got {top_k}")
    if not 0 < top_p <= 1:
        raise typer.BadParameter(f"--top-p must be in (0, 1], got {top_p}")
    return Sampling(do_sample=True, top_k=top_k, top_p=top_p, temperature=temperature)


def summary(result: dict, out: Optional[Path] = None) -> str:
    """A few lines for a person: the result's scalar top-level entries, and where the rest is."""
    lines = [f"{k}: {v}" for k, v in result.items() if isinstance(v, (str, int, float, bool)) or v is None]
    lines.append(f"full result: {out}" if out is not None else "full result: rerun with --json or --out FILE")
    return "\n".join(lines)


def emit(result: dict, as_json: bool, out: Optional[Path], summary: Optional[str] = None) -> None:
    """--out writes the JSON atomically; --json prints all of it; otherwise a short summary (or the
    JSON, when the command has no summary) goes to stdout."""
    if out is not None:
        write_json_atomic(out, result, indent=1, default=str)
    if as_json or summary is None:
        typer.echo(json.dumps(result, indent=1, default=str, ensure_ascii=False))
    else:
        typer.echo(summary)


def skip_hash_check() -> Any:
    return typer.Option(False, "--skip-hash-check", help="Use a drafter trained for other weights (its model "
                                                         "hash differs): the draws stay lossless, acceptance drops.")
