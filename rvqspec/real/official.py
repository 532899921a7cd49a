"""Import the official Qwen3-TTS modeling code (`qwen-tts` 0.1.1) for parity tests and benchmarks.

`import qwen_tts...` runs the package `__init__`, which imports the 25 Hz speech tokenizer and with
it `torchaudio`, `librosa`, `sox`, ... The talker and code-predictor classes never call them, so we
put placeholder modules in `sys.modules` for each one that is really missing (never shadowing an
installed module). Each placeholder carries a real `__spec__`: transformers probes optional
packages with `importlib.util.find_spec`, which raises on a module whose `__spec__` is None.
Importing names from a placeholder works; *calling* any of them raises a clear ImportError.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import types
from typing import Any

# Modules the qwen_tts package imports at import time but the talker/code predictor never use.
_OPTIONAL = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "torchaudio.transforms",
             "torchaudio.functional", "librosa", "librosa.filters", "einops", "onnxruntime", "sox", "gradio")


class _Placeholder(types.ModuleType):
    """A stand-in for a missing optional module: every attribute is a function raising ImportError."""

    __rvqspec_placeholder__ = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        # `from librosa.filters import mel` must succeed at import time; only a *call* fails.
        module = self.__name__

        def _missing(*args: Any, **kwargs: Any) -> Any:
            raise ImportError(f"{module}.{name} was called, but {module} is not installed (rvqspec put a "
                              f"placeholder for it so that the official qwen_tts modeling code imports)")

        _missing.__name__ = name
        return _missing


def _really_missing(name: str) -> bool:
    if name in sys.modules:
        return False
    parent = name.rpartition(".")[0]
    if parent and isinstance(sys.modules.get(parent), _Placeholder):
        return True
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _install_placeholders() -> list[str]:
    made = []
    for name in _OPTIONAL:
        if not _really_missing(name):
            continue
        mod = _Placeholder(name)
        mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
        mod.__path__ = []  # a package, so submodule placeholders can hang under it
        mod.__file__ = None
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, mod)
        made.append(name)
    return made


def placeholders() -> list[str]:
    """Names of the placeholder modules currently installed by this shim."""
    return sorted(n for n, m in list(sys.modules.items()) if isinstance(m, _Placeholder))


@contextlib.contextmanager
def _quiet_fds():
    """Send fds 1 and 2 to a temp file during the import: qwen_tts prints a flash-attn banner to
    stdout and `sox` shells out (`sox -h`) and logs "SoX could not be found!" at import time. This
    keeps `rvqspec ... --json` stdout clean; the captured text is replayed on stderr on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        ok = False
        try:
            with contextlib.redirect_stdout(sys.stderr):
                yield
            ok = True
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            if not ok:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode(errors="replace"))


def import_official() -> tuple[types.ModuleType, types.ModuleType]:
    """Return (modeling_qwen3_tts, configuration_qwen3_tts) of the installed `qwen-tts` package."""
    name = "qwen_tts.core.models.modeling_qwen3_tts"
    if name not in sys.modules:
        _install_placeholders()
        try:
            with _quiet_fds():
                importlib.import_module(name)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(f"could not import the official qwen_tts modeling code ({exc}); install it with "
                              f"`pip install --no-deps qwen-tts==0.1.1` and `pip install sox`") from exc
    return sys.modules[name], importlib.import_module("qwen_tts.core.models.configuration_qwen3_tts")


def qwen3_tts_model_class() -> type:
    """`qwen_tts.Qwen3TTSModel` (the official user-facing wrapper), imported through the shim above
    so that it loads without librosa, torchaudio or sox (the 12 Hz path never calls them)."""
    import_official()
    with _quiet_fds():
        from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel
    return Qwen3TTSModel


def __getattr__(name: str) -> Any:
    # `from rvqspec import Qwen3TTSModel` (the runbook's snippet) resolves here, on first use only
    if name == "Qwen3TTSModel":
        return qwen3_tts_model_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
