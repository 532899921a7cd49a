"""`rvqspec demo` (the README's `make demo`) and `rvqspec report` (re-render from results.json).

Defaults live in `rvqspec.workbench.demo.DemoConfig`; options left unset keep them.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rvqspec.commands import options as opt


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        out: Path = opt.out_dir(Path("report"), "Report folder (index.html, results.json, audio/)."),
        quick: bool = typer.Option(False, "--quick", help="A minute or two: every step on a few utterances."),
        data: Optional[Path] = typer.Option(None, "--data", help="Mini world artifacts (default data/mini)."),
        work: Optional[Path] = typer.Option(None, "--work", help="Shards and drafters (default runs/demo)."),
        language: Optional[List[str]] = opt.langs(None, "Restrict to these languages (repeatable)."),
        threads: Optional[int] = opt.threads(None, "torch CPU threads (default: DemoConfig.threads)."),
    ) -> None:
        """Run the whole pipeline on the mini world and write report/index.html + report/results.json."""
        import dataclasses

        from rvqspec.workbench.demo import DemoConfig, run_demo

        for lang in language or ():
            opt.check_lang(lang)
        over = {k: v for k, v in dict(out=str(out), data_dir=str(data) if data else None,
                                      work=str(work) if work else None,
                                      languages=tuple(language) if language else None, threads=threads).items()
                if v is not None}
        cfg = DemoConfig.quick(**over) if quick else dataclasses.replace(DemoConfig(), **over)
        if cfg.main_drafter not in cfg.drafters:
            raise typer.BadParameter(f"main drafter {cfg.main_drafter!r} is not among {cfg.drafters}")
        from rvqspec.mini.pipeline import default_data_dir

        data_dir = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
        missing = [p for p in ("model", "codec", "corpus", "recognizer") if not (data_dir / p).exists()]
        if missing:
            typer.echo(f"error: the mini world at {data_dir} lacks {', '.join(missing)} "
                       f"(build it with `rvqspec mini build --out-dir {data_dir}`, or pass --data)", err=True)
            raise typer.Exit(2)
        results, path = run_demo(cfg, log=lambda m: typer.echo(m, err=True))
        steps = results.get("steps", {})
        typer.echo(f"report: {path}")
        typer.echo(f"results: {path.parent / 'results.json'}")
        for name, st in steps.items():
            typer.echo(f"  {name:<11} {st['status']:<14} {st['seconds']:>7.1f} s  {st.get('note', '')}")
        if any(st["status"] == "failed" for st in steps.values()):
            raise typer.Exit(1)

    @app.command("report")
    def report(
        results: Path = typer.Argument(..., help="results.json written by `rvqspec demo`."),
        out: Optional[Path] = opt.out_dir(None, "Folder for index.html (default: next to results.json)."),
    ) -> None:
        """Re-render index.html from a results.json (audio paths relative to its folder); never rewrites it."""
        from rvqspec.core.jsonfile import read_json
        from rvqspec.workbench.report import render_report

        data = read_json(results, ValueError, "cannot read results JSON (no such file)")
        check_results(data, results)
        path = render_report(data, out or results.parent, audio_root=results.parent, write_results=False)
        typer.echo(f"report: {path}")


def check_results(data, source: Path) -> None:
    """Refuse a JSON that is not a `rvqspec demo` results file, and audio paths that leave its folder."""
    if not isinstance(data, dict) or not isinstance(data.get("steps"), dict):
        raise ValueError(f"{source}: not a results file of `rvqspec demo` (needs a 'steps' object)")
    for name, step in data["steps"].items():
        if not isinstance(step, dict) or "status" not in step:
            raise ValueError(f"{source}: steps[{name!r}] has no 'status'")
    root = source.parent.resolve()
    for i, item in enumerate(data.get("ab") or []):
        for side in ("ar", "spec"):
            wav = (item.get(side) or {}).get("wav") if isinstance(item, dict) else None
            if wav is None:
                raise ValueError(f"{source}: ab[{i}].{side} has no 'wav' path")
            if not (root / str(wav)).resolve().is_relative_to(root):
                raise ValueError(f"{source}: ab[{i}].{side}.wav {wav!r} points outside {root}")
