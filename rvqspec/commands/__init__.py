"""Command groups of the `rvqspec` CLI; each module defines `register(app: typer.Typer)`."""
