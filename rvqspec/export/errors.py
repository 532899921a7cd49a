"""The one error type of the export layer: a request that does not fit (tree, drafter, model)."""
from __future__ import annotations


class ExportError(ValueError):
    """An export request that does not fit (tree, drafter, model); the message names the value."""
