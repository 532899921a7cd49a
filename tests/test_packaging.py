"""Packaging stays consistent: environment.yml mirrors pyproject.toml, and the Makefile's pins match."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_requirements(groups=("dev", "lab")) -> dict[str, str]:
    """name -> requirement for the core dependencies plus the closure of the given extras."""
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = proj["optional-dependencies"]
    out, todo, seen = {}, list(groups), set()
    for r in proj["dependencies"]:
        out[_name(r)] = r.replace(" ", "")
    while todo:
        g = todo.pop()
        if g in seen:
            continue
        seen.add(g)
        for r in extras[g]:
            m = re.fullmatch(r"rvqspec\[([^\]]+)\]", r.strip())
            if m:
                todo += [x.strip() for x in m.group(1).split(",")]
            else:
                out[_name(r)] = r.replace(" ", "")
    return out


def environment_requirements(text: str) -> dict[str, str]:
    pip = False
    out = {}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("- pip:"):
            pip = True
            continue
        if pip and s.startswith("- ") and not s.startswith("- -e"):
            out[_name(s[2:])] = s[2:].replace(" ", "")
    return out


def makefile_pins() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text()
    return {_name(m): m for m in re.findall(r"pip install -q (?:--no-deps )?([A-Za-z0-9_.-]+==[0-9.]+)", text)}


def test_environment_yml_mirrors_pyproject():
    env = environment_requirements((ROOT / "environment.yml").read_text())
    want = pyproject_requirements()
    pins = makefile_pins()
    # torch: a range in pyproject, the Makefile's pin (installed first) in both installs
    assert env.pop("torch") == pins["torch"] and want.pop("torch").startswith("torch>=")
    assert env == want


def test_parity_pins_are_not_core_dependencies():
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in proj["dependencies"]}
    assert not core & {"transformers", "huggingface-hub", "sox", "accelerate"}
    assert "transformers==4.57.3" in proj["optional-dependencies"]["real"]


def test_the_official_package_install_is_the_makefiles():
    env_text = (ROOT / "environment.yml").read_text()
    assert f"pip install --no-deps {makefile_pins()['qwen-tts']}" in env_text


def test_the_mirror_check_can_fail():
    text = (ROOT / "environment.yml").read_text().replace("      - playwright>=1.40\n", "")
    assert "playwright" not in environment_requirements(text)
    assert "playwright" in pyproject_requirements()
