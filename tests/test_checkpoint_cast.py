"""`rvqspec.core.checkpoint.cast_checkpoint` / `rvqspec mini cast`: a checkpoint copy with its weights
stored in bfloat16 (data/'s budget for a 1,024-code world, docs/design.md "The next world built at
full scale") holds exactly the rounded tensors, under the same names, beside unchanged other files."""
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from rvqspec.cli import app
from rvqspec.core.checkpoint import CheckpointError, cast_checkpoint

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "data" / "mini" / "model"


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path / "model.safetensors"), framework="pt") as h:
        return {k: h.get_tensor(k) for k in h.keys()}


def _off_the_bf16_grid(tensors) -> None:
    """Nudge float32 tensors (read back from a bfloat16 file) off the bfloat16 grid in place, as a
    freshly trained model's weights are: a cast of them must round."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in tensors:
            t.add_(1e-4 * torch.randn(t.shape, generator=g))  # (shape of each tensor)


def _float32_source(tmp: Path) -> Path:
    """The committed model (stored in bfloat16 since the v4 world) as a float32 checkpoint whose
    weights are off the bfloat16 grid, as a freshly trained model's are: the cast must round them."""
    from rvqspec.core.checkpoint import load_qwen3_tts, save_qwen3_tts

    m = load_qwen3_tts(MODEL)
    _off_the_bf16_grid([t for part in (m.talker, m.code_predictor) for t in part.state_dict().values()])
    src = tmp / "fp32"
    for f in MODEL.iterdir():  # tokenizer, recipe
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            src.mkdir(parents=True, exist_ok=True)
            (src / f.name).write_bytes(f.read_bytes())
    return save_qwen3_tts(m, src)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    if not (MODEL / "config.json").is_file():
        pytest.skip("data/mini/model is not built (run: rvqspec mini build)")
    return _float32_source(tmp_path_factory.mktemp("source"))


@pytest.fixture(scope="module")
def cast(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("cast") / "bf16"
    res = CliRunner().invoke(app, ["mini", "cast", "--model", str(source), "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_cast_holds_the_rounded_tensors_under_the_same_names(source, cast):
    src, dst = _tensors(source), _tensors(cast)
    assert all(v.dtype == torch.float32 for v in src.values())
    assert src.keys() == dst.keys()
    assert all(v.dtype == torch.bfloat16 for v in dst.values())
    for k, v in src.items():
        assert torch.equal(dst[k], v.to(torch.bfloat16)), k
    # negative control: the float32 weights are not bf16-representable, so the copy does round
    assert any(not torch.equal(v.to(torch.bfloat16).float(), v.float()) for v in src.values())
    w_src, w_dst = (p / "model.safetensors" for p in (source, cast))
    assert w_dst.stat().st_size < 0.55 * w_src.stat().st_size
    assert json.loads((cast / "config.json").read_text())["dtype"] == "bfloat16"
    for f in source.iterdir():  # tokenizer, recipe: byte for byte
        if f.name not in ("model.safetensors", "config.json"):
            assert (cast / f.name).read_bytes() == f.read_bytes(), f.name


def test_cast_loads_as_float32_and_rejects_bad_targets(cast, tmp_path):
    from rvqspec.core.checkpoint import load_qwen3_tts

    m = load_qwen3_tts(cast)  # the loader's default dtype
    assert next(m.talker.parameters()).dtype == torch.float32
    with pytest.raises(CheckpointError, match="must not replace its source"):
        cast_checkpoint(cast, cast, torch.bfloat16)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((cast / "config.json").read_text())
    with pytest.raises(CheckpointError):
        cast_checkpoint(empty, tmp_path / "out", torch.bfloat16)
    assert not (tmp_path / "out").exists()  # nothing half-written
    nowhere = CliRunner().invoke(app, ["mini", "cast", "--model", str(tmp_path / "none"),
                                       "--out-dir", str(tmp_path / "x")])
    assert nowhere.exit_code == 2
    assert nowhere.stderr.strip().splitlines() == [f"error: {tmp_path / 'none'}: checkpoint directory not found"]
    bad = CliRunner().invoke(app, ["mini", "cast", "--model", str(cast), "--dtype", "int8",
                                   "--out-dir", str(tmp_path / "x")])
    assert bad.exit_code == 2
    assert bad.stderr.strip().splitlines() == ["error: --dtype 'int8' is not one of bfloat16, float16, float32"]


DRAFTER = REPO / "data" / "mini" / "drafters" / "medusa.safetensors"


def test_drafter_cast_keeps_its_metadata_and_loads_the_rounded_weights(tmp_path):
    """`rvqspec spec cast`: Medusa's heads (most of data/'s drafter bytes) stored in bfloat16, the
    metadata (kind, sizes, the model hash it was trained for) unchanged, so `load_drafter` accepts it
    for the same code predictor and fills its float32 parameters with the rounded values."""
    from rvqspec.core.checkpoint import load_qwen3_tts
    from rvqspec.core.drafters import load_drafter

    if not DRAFTER.is_file():
        pytest.skip("data/mini/drafters/medusa.safetensors is not built")
    cp = load_qwen3_tts(MODEL, parts=("code_predictor",)).code_predictor
    # the committed heads are stored in bfloat16 already: a float32 copy off that grid, as trained
    trained = load_drafter(DRAFTER, cp)
    _off_the_bf16_grid(trained.state_dict().values())
    fp32 = tmp_path / "medusa_fp32.safetensors"
    trained.save(fp32, cp)
    out = tmp_path / "medusa_bf16.safetensors"
    res = CliRunner().invoke(app, ["spec", "cast", "--drafter", str(fp32), "--out", str(out)])
    assert res.exit_code == 0, res.output
    with safe_open(str(fp32), framework="pt") as a, safe_open(str(out), framework="pt") as b:
        assert a.metadata() == b.metadata()
        assert set(a.keys()) == set(b.keys())
        src = {k: a.get_tensor(k) for k in a.keys()}
        assert all(b.get_tensor(k).dtype == torch.bfloat16 for k in b.keys())
    assert out.stat().st_size < 0.55 * fp32.stat().st_size
    loaded = load_drafter(out, cp).state_dict()  # raises if the model hash no longer matched
    assert all(v.dtype == torch.float32 for v in loaded.values())
    for k, v in src.items():
        assert torch.equal(loaded[k], v.to(torch.bfloat16).float()), k
    assert any(not torch.equal(loaded[k], v) for k, v in src.items())  # control: the copy did round

    same = CliRunner().invoke(app, ["spec", "cast", "--drafter", str(out), "--out", str(out)])
    assert same.exit_code == 2
    assert same.stderr.strip().splitlines() == [f"error: {out}: the cast copy must not replace its source"]
    missing = CliRunner().invoke(app, ["spec", "cast", "--drafter", str(tmp_path / "none.safetensors"),
                                       "--out", str(tmp_path / "y.safetensors")])
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [f"error: {tmp_path / 'none.safetensors'}: no such drafter file"]
    assert not (tmp_path / "y.safetensors").exists()
