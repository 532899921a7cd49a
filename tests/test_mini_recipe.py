"""rvqspec.mini.recipe: the committed world is the build's own recipe, and a world that is not is
named field by field (the rederive script's `check` stage runs it before anything is re-derived)."""
import json
import shutil
from pathlib import Path

from rvqspec.mini.build import BuildConfig
from rvqspec.mini.recipe import differences, main

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "mini"


def _records(tmp_path):
    """A copy of the three files that record the recipe (the weights are not read)."""
    out = tmp_path / "mini"
    for rel in ("manifest.json", "codec/codec_config.json", "model/mini_model.json"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / rel, out / rel)
    return out


def _edit(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def test_the_committed_world_is_the_builds_default_recipe():
    assert differences(DATA) == []


def test_a_changed_field_is_named_with_its_file(tmp_path):
    world = _records(tmp_path)
    steps = json.loads((world / "model" / "mini_model.json").read_text())["config"]["steps"]

    def more_steps(doc):
        doc["config"]["steps"] = steps + 1

    _edit(world / "model" / "mini_model.json", more_steps)
    _edit(world / "manifest.json", lambda doc: doc["steps"]["model"]["config"].update(steps=steps + 1))
    assert differences(world) == [
        f"{world}/model/mini_model.json config: steps is {steps + 1}, the build's default is {steps}"]


def test_the_thread_schedule_is_not_part_of_the_recipe(tmp_path):
    world = _records(tmp_path)
    for rel in ("model/mini_model.json",):
        _edit(world / rel, lambda doc: doc["config"].update(threads=7, late_threads=5))
    _edit(world / "manifest.json", lambda doc: doc["steps"]["model"]["config"].update(threads=7, late_threads=5))
    assert differences(world) == []


def test_an_unrecorded_field_compares_as_its_class_default(tmp_path):
    world = _records(tmp_path)
    _edit(world / "codec" / "codec_config.json", lambda doc: doc["config"].pop("codebook_size"))
    found = differences(world, BuildConfig(codebook_size=512))
    # the file lacks it (loads as CodecConfig's 1,024), the manifest records it: both differ from 512
    assert any("codec_config.json config: codebook_size is 1024 (not recorded)" in f for f in found), found
    assert any("steps.codec.config.codec: codebook_size is" in f for f in found), found


def test_another_default_recipe_is_a_negative_control():
    """The same committed world against a recipe it was not built with: every changed field is named."""
    found = differences(DATA, BuildConfig(model_steps=1, codec_share={"de": 0.25}))
    assert any("mini_model.json config: steps is" in f and "default is 1" in f for f in found), found
    assert any("fit.share is" in f and "'de': 0.25" in f for f in found), found


def test_cli_exit_codes(tmp_path, capsys):
    """`python -m rvqspec.mini.recipe DIR` (its `main`): 0 on the committed world, 1 with one line per
    difference, 2 with one line naming the folder when the records cannot be read."""
    assert main([str(DATA)]) == 0
    capsys.readouterr()
    assert main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    world = _records(tmp_path)
    _edit(world / "codec" / "codec_config.json", lambda doc: doc["config"].update(rate_lambda=0.5))
    assert main([str(world)]) == 1
    assert "rate_lambda is 0.5" in capsys.readouterr().err
