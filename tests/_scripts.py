"""Load a file of scripts/ as a module (scripts are not a package; tests call their functions)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str):
    """scripts/<name>.py -> its module, executed once per call."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up in sys.modules while the file runs
    spec.loader.exec_module(mod)
    return mod
