"""The project's small JSON artifacts (shard and artifact manifests, trees, acceptance tables,
profiles, benchmark results): reading one so that a failure names the file, and writing one so
that a crash never leaves half a file behind."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


def write_json_atomic(path: str | os.PathLike, obj: Any, **dumps: Any) -> Path:
    """Write `json.dumps(obj, **dumps)` plus a newline to `path` through a temporary file in the
    same directory and one `os.replace`: readers see the old file or the whole new one. Creates the
    parent directory; the file gets mode 0644 (mkstemp's 0600 would hide committed artifacts)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(obj, **dumps) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: str | os.PathLike, error: type[Exception], missing: str) -> Any:
    """The parsed JSON of `path`. A missing file raises `error("<path>: <missing>")`; text that is
    not JSON raises `error("<path>: not valid JSON (<reason>)")`."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{p}: {missing}")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise error(f"{p}: not valid JSON ({e})") from None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to `path` for a writer that takes a file name (safetensors, soundfile,
    write_text); on a clean exit it replaces `path` in one `os.replace`, on an error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(directory: str | os.PathLike) -> Iterator[Path]:
    """A temporary folder next to `directory` for a writer of several files; on a clean exit its
    files become 0644, the folder 0755, and it replaces `directory`; on an error it is removed."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.tmp"))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; artifact folders are committed and shared
        yield tmp
        for f in tmp.iterdir():
            if f.is_file():
                os.chmod(f, 0o644)
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


REPO_ROOT = Path(__file__).resolve().parents[2]

# A path of one machine inside committed text: it starts a quoted string, follows whitespace or
# punctuation, or opens a line; URLs (https://host/tmp/...) name no path here, so a preceding host
# name is excluded. tests/test_no_absolute_paths.py scans data/ and docs/ with it, and
# scripts/stage_world.sh refuses a staged world whose JSON or Markdown it finds in.
MACHINE_PATH = re.compile(r"(?<![\w.:/-])(/(?:work|tmp|home|root|Users|mnt|var/folders|private/tmp|scratch)/[^\s\"'<>)]*"
                          r"|[A-Za-z]:\\\\?Users\\[^\s\"'<>]*)")


def machine_paths(text: str) -> list[str]:
    """Every machine path `text` names (MACHINE_PATH), in order."""
    return MACHINE_PATH.findall(text)


def portable_path(path: str | os.PathLike | None) -> str | None:
    """How a committed artifact names a file: relative to the repository root when inside it,
    else relative to the working directory when below it, else the bare name. A machine's absolute
    paths (home folders, worktrees, temp dirs) would make results differ per checkout and leak
    the layout of one machine (tests/test_no_absolute_paths.py scans data/ and docs/)."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    p = p.resolve()
    for base in (REPO_ROOT, Path.cwd().resolve()):
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            continue
    return p.name
