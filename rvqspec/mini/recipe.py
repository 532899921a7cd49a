"""Is a built mini world the build's own recipe?

`rvqspec mini build` records what it built three times: the codec's codec_config.json, the manifest's
steps.<corpus|codec|model>.config and the model's mini_model.json. A world about to be committed must
be what the build's defaults (BuildConfig()) make, or the tests that read data/mini and the README's
figures describe a recipe nobody can rerun. `differences` names every field that is not.

The model's thread schedule is left out: it decides how long the step takes, not what the world is.
A field a record lacks predates it and loads as its config class's own default, so that is what is
compared for it.

    python -m rvqspec.mini.recipe data/mini     # one line per difference, exit 1 if any
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from rvqspec.mini.build import BuildConfig
from rvqspec.mini.codec import CONFIG_FILE, CodecConfig
from rvqspec.mini.talker_train import MiniModelConfig
from rvqspec.mini.text import CorpusConfig

SCHEDULE = frozenset({"threads", "late_threads", "late_threads_step"})


def _plain(value):
    # the records are JSON: tuples come back as lists
    return list(value) if isinstance(value, tuple) else value


def _compare(where: str, expected: dict, loaded_as: dict, found: dict) -> list[str]:
    out = []
    for key, value in expected.items():
        got = found.get(key, _plain(loaded_as[key]))
        if key not in SCHEDULE and got != _plain(value):
            note = "" if key in found else " (not recorded)"
            out.append(f"{where}: {key} is {got!r}{note}, the build's default is {_plain(value)!r}")
    return out


def differences(data_dir: Path, default: BuildConfig | None = None) -> list[str]:
    """Every field in which the world at `data_dir` differs from `default` (BuildConfig())."""
    data_dir = Path(data_dir)
    default = default or BuildConfig()
    manifest = json.loads((data_dir / "manifest.json").read_text())["steps"]
    codec_meta = json.loads((data_dir / "codec" / CONFIG_FILE).read_text())
    model = json.loads((data_dir / "model" / "mini_model.json").read_text())["config"]
    codec = (asdict(default.codec_config()), asdict(CodecConfig()))
    out = []
    if manifest.get("model", {}).get("config") != model:
        out.append(f"{data_dir}/manifest.json steps.model.config differs from model/mini_model.json (model not recorded)")
    out += _compare(f"{data_dir}/codec/{CONFIG_FILE} config", *codec, codec_meta["config"])
    out += _compare(f"{data_dir}/manifest.json steps.codec.config.codec", *codec,
                    manifest.get("codec", {}).get("config", {}).get("codec", {}))
    out += _compare(f"{data_dir}/manifest.json steps.corpus.config.corpus", asdict(default.corpus_config()),
                    asdict(CorpusConfig()), manifest.get("corpus", {}).get("config", {}).get("corpus", {}))
    out += _compare(f"{data_dir}/model/mini_model.json config", asdict(default.model_config(MiniModelConfig)),
                    asdict(MiniModelConfig()), model)
    share = codec_meta.get("fit", {}).get("share")
    if share != default.codec_share:
        out.append(f"{data_dir}/codec/{CONFIG_FILE} fit.share is {share!r}, the build's default is {default.codec_share!r}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rvqspec.mini.recipe DATA_DIR", file=sys.stderr)
        return 2
    try:
        found = differences(Path(argv[0]))
    except (OSError, KeyError, json.JSONDecodeError) as e:
        print(f"error: {argv[0]}: cannot read the world's records ({e.__class__.__name__}: {e})", file=sys.stderr)
        return 2
    for line in found:
        print("error:", line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
