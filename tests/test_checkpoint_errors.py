"""load_qwen3_tts / save_qwen3_tts: round trips, and every bad input gives a CheckpointError that
names the file, key and shapes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rvqspec.core.checkpoint import (CheckpointError, Qwen3TTS, load_qwen3_tts, model_hash, save_qwen3_tts)
from rvqspec.core.config import CodePredictorConfig, Qwen3TTSConfig, TalkerConfig
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.core.sampling import Sampling


def tiny_model(seed: int = 0) -> Qwen3TTS:
    torch.manual_seed(seed)
    t = TalkerConfig(vocab_size=30, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=12, mrope_section=(2, 2, 2), text_vocab_size=20, text_hidden_size=16)
    c = CodePredictorConfig(vocab_size=16, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, talker_hidden_size=48)
    cfg = Qwen3TTSConfig(talker=t, code_predictor=c, tts_model_type="custom_voice")
    talker, cp = CodeDecoder(t), MultiCodeDecoder(c)
    cp.set_c0_embedding(talker.model.codec_embedding)
    return Qwen3TTS(config=cfg, talker=talker, code_predictor=cp)


@pytest.fixture()
def ckpt(tmp_path: Path) -> Path:
    return save_qwen3_tts(tiny_model(), tmp_path / "ckpt")


def test_round_trip_is_exact(ckpt: Path) -> None:
    m = tiny_model()
    loaded = load_qwen3_tts(ckpt)
    for a, b in ((m.talker, loaded.talker), (m.code_predictor, loaded.code_predictor)):
        assert model_hash(a) == model_hash(b)
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert loaded.code_predictor.c0_embedding is loaded.talker.model.codec_embedding
    assert loaded.config.talker == m.config.talker and loaded.config.code_predictor == m.config.code_predictor
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_tts" and cfg["talker_config"]["code_predictor_config"]["hidden_size"] == 32
    keys = load_file(str(ckpt / "model.safetensors")).keys()
    assert "talker.code_predictor.lm_head.14.weight" in keys and "talker.model.text_embedding.weight" in keys
    assert "talker.code_predictor.small_to_mtp_projection.weight" in keys  # 48 != 32
    assert not any(p.name.startswith(".") for p in ckpt.parent.iterdir()), "temporary directory left behind"


def test_hash_changes_with_a_weight(ckpt: Path) -> None:
    m = load_qwen3_tts(ckpt)
    h = model_hash(m.code_predictor)
    with torch.no_grad():
        m.code_predictor.lm_head[3].weight[0, 0] += 1e-3
    assert model_hash(m.code_predictor) != h


def test_bf16_and_code_predictor_only(ckpt: Path) -> None:
    m = load_qwen3_tts(ckpt, dtype=torch.bfloat16, parts=("code_predictor",))
    assert m.talker is None and m.code_predictor is not None
    assert all(p.dtype == torch.bfloat16 for p in m.code_predictor.parameters())
    full = load_qwen3_tts(ckpt)
    assert torch.equal(m.c0_embedding.weight, full.talker.model.codec_embedding.weight.bfloat16())
    th, c0 = torch.randn(3, 1, 48), torch.tensor([[1], [2], [3]])
    assert m.code_predictor.generate_frame(th, c0, Sampling.greedy()).shape == (3, 15)
    t_only = load_qwen3_tts(ckpt, parts=("talker",))
    assert t_only.code_predictor is None and t_only.talker is not None


def test_save_into_existing_dir_keeps_other_files(ckpt: Path) -> None:
    (ckpt / "vocab.json").write_text("{}")
    m2 = tiny_model(seed=1)
    save_qwen3_tts(m2, ckpt)
    assert (ckpt / "vocab.json").read_text() == "{}"
    assert model_hash(load_qwen3_tts(ckpt).talker) == model_hash(m2.talker)


def test_sharded_checkpoint_loads(ckpt: Path) -> None:
    sd = load_file(str(ckpt / "model.safetensors"))
    keys = sorted(sd)
    half = len(keys) // 2
    save_file({k: sd[k] for k in keys[:half]}, str(ckpt / "model-00001-of-00002.safetensors"))
    save_file({k: sd[k] for k in keys[half:]}, str(ckpt / "model-00002-of-00002.safetensors"))
    (ckpt / "model.safetensors").unlink()
    wm = {k: ("model-00001-of-00002.safetensors" if i < half else "model-00002-of-00002.safetensors")
          for i, k in enumerate(keys)}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    assert model_hash(load_qwen3_tts(ckpt).code_predictor) == model_hash(tiny_model().code_predictor)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        load_qwen3_tts(ckpt)


# ---- bad inputs ----------------------------------------------------------------------------------------
def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="nope.*not found"):
        load_qwen3_tts(tmp_path / "nope")


def test_missing_config(ckpt: Path) -> None:
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        load_qwen3_tts(ckpt)


def test_invalid_json(ckpt: Path) -> None:
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json.*not valid JSON"):
        load_qwen3_tts(ckpt)


def test_config_of_another_model(ckpt: Path) -> None:
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(CheckpointError, match="config.json.*model_type is 'llama'"):
        load_qwen3_tts(ckpt)


def test_config_missing_required_key(ckpt: Path) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    del cfg["talker_config"]["text_vocab_size"]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="text_vocab_size"):
        load_qwen3_tts(ckpt)


def test_missing_weights_file(ckpt: Path) -> None:
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors.*missing"):
        load_qwen3_tts(ckpt)


def test_corrupt_weights_file(ckpt: Path) -> None:
    (ckpt / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_qwen3_tts(ckpt)


def test_missing_tensor_names_key_and_file(ckpt: Path) -> None:
    sd = load_file(str(ckpt / "model.safetensors"))
    del sd["talker.code_predictor.model.layers.1.self_attn.k_norm.weight"]
    save_file(sd, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*missing tensor 'talker\.code_predictor\.model\.layers\.1\.self_attn\.k_norm\.weight'"):
        load_qwen3_tts(ckpt)
    # the talker alone does not need that tensor
    assert load_qwen3_tts(ckpt, parts=("talker",)).talker is not None


def test_wrong_shape_names_key_and_shapes(ckpt: Path) -> None:
    sd = load_file(str(ckpt / "model.safetensors"))
    sd["talker.model.layers.0.mlp.up_proj.weight"] = torch.zeros(65, 48)
    save_file(sd, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"'talker\.model\.layers\.0\.mlp\.up_proj\.weight' has shape \[65, 48\].*expects \[64, 48\]"):
        load_qwen3_tts(ckpt)


def test_weights_of_another_model(ckpt: Path) -> None:
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.zeros(4, 4)}, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*no 'talker\.\*' tensors"):
        load_qwen3_tts(ckpt)


def test_config_and_weights_disagree(ckpt: Path) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["talker_config"]["num_hidden_layers"] = 1  # the weights hold 2 layers
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'talker\.model\.layers\.1\."):
        load_qwen3_tts(ckpt)


def test_bad_arguments(ckpt: Path) -> None:
    with pytest.raises(CheckpointError, match="parts"):
        load_qwen3_tts(ckpt, parts=("vocoder",))
    with pytest.raises(CheckpointError, match="floating"):
        load_qwen3_tts(ckpt, dtype=torch.int8)
    with pytest.raises(CheckpointError, match="both"):
        save_qwen3_tts(load_qwen3_tts(ckpt, parts=("talker",)), ckpt.parent / "other")
    (ckpt.parent / "afile").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        save_qwen3_tts(tiny_model(), ckpt.parent / "afile")


def test_other_parts_are_not_read_and_info_counts_them(ckpt: Path) -> None:
    """A speaker encoder (as in the Base checkpoints) is ignored by the loader, which never reads
    it (an int tensor there would fail the float check if it were read), and counted by info."""
    from rvqspec.core.checkpoint import checkpoint_info

    sd = load_file(str(ckpt / "model.safetensors"))
    sd["speaker_encoder.fc.weight"] = torch.zeros(3, 5, dtype=torch.int32)
    save_file(sd, str(ckpt / "model.safetensors"))
    m = load_qwen3_tts(ckpt)
    assert model_hash(m.talker) == model_hash(tiny_model().talker)
    info = checkpoint_info(ckpt)
    assert info["parameters"]["other"]["speaker_encoder"] == 15
    assert info["parameters"]["code_predictor"]["total"] == sum(p.numel() for p in m.code_predictor.parameters())
