"""scripts/mini_gate.py at --toy scale: every common measure is present and obeys its invariants."""
import json
import math

import pytest
import torch

from _scripts import load_script


@pytest.mark.parametrize("codec", ["r1_envelope"])
def test_gate_harness_toy(tmp_path, codec):
    torch.set_num_threads(1)
    gate = load_script("mini_gate")
    out = tmp_path / "gate.json"
    gate.main(["--toy", "--codec", codec, "--out", str(out), "--work", str(tmp_path / "w"),
               "--falsified-if", "toy run"])
    r = json.loads(out.read_text())
    assert r["falsified_if"] == "toy run" and r["codec_variant"] == codec and r["toy"]
    cb = r["codec_config"]["codebook_size"]
    fr = r["free_running"]
    assert len(fr["entropy_softmax_T0.9"]) == 15 and len(fr["reused_draft_verifier_prob"]) == 3
    assert all(0 <= e <= math.log(cb) + 1e-4 for e in fr["entropy_softmax_T0.9"] + fr["entropy_sampled_topk50"])
    # top-k 50 >= codebook 16 here: the sampled distribution is the tempered softmax itself
    assert fr["entropy_sampled_topk50"] == pytest.approx(fr["entropy_softmax_T0.9"], abs=1e-3)
    assert all(0 <= p <= 1 for p in fr["reused_draft_verifier_prob"] + fr["reused_draft_top1_acceptance"])
    geo = r["hidden_geometry"]
    assert len(geo["position_mean_cosine"]) == 14 and all(-1 <= c <= 1 for c in geo["position_mean_cosine"])
    assert all(x <= 1 for x in geo["shift_r2"] + geo["affine_r2_heldout"])
    for kind in ("oracle", "reused", "offsets", "shared_low_rank", "medusa"):
        tpc = r["tokens_per_call"][kind]
        assert 1.0 <= tpc["4"] <= 4.0 and 1.0 <= tpc["16"] <= 4.0
        assert tpc["16"] >= tpc["4"] - 1e-9  # the N=16 tree contains the N=4 tree (greedy growth)
    assert r["drafters"]["reused"]["added_parameters"] == 0 and r["drafters"]["medusa"]["added_parameters"] > 0
    cod = r["codec"]
    assert len(cod["marginal_entropy_nats"]) == 16 and max(cod["marginal_entropy_nats"]) <= math.log(cb) + 1e-4
    if "cer" in r:
        assert {"clean", "codec_resynthesis", "ar_free_running"} <= set(r["cer"])


def test_gate_harness_codec_only_learned_codec(tmp_path):
    torch.set_num_threads(1)
    gate = load_script("mini_gate")
    out = tmp_path / "gate.json"
    gate.main(["--toy", "--codec", "r3_learned", "--codec-only", "--out", str(out), "--work", str(tmp_path / "w")])
    r = json.loads(out.read_text())
    assert "tokens_per_call" not in r and r["codec_config"]["num_phonemes"] > 1
    cod = r["codec"]
    assert len(cod["phoneme_count_model_xent_nats"]) == 16
    assert all(x > 0 for x in cod["phoneme_count_model_xent_nats"])


def test_gate_harness_measures_an_existing_world(tmp_path):
    """--world: the same measures on a finished world (here the toy gate's own model, codec, corpus)."""
    torch.set_num_threads(1)
    gate = load_script("mini_gate")
    first = tmp_path / "gate.json"
    gate.main(["--toy", "--out", str(first), "--work", str(tmp_path / "w")])
    out = tmp_path / "world.json"
    gate.main(["--toy", "--world", str(tmp_path / "w" / "kmeans_mini_toy"), "--name", "again", "--out", str(out),
               "--work", str(tmp_path / "w")])
    a, b = json.loads(first.read_text()), json.loads(out.read_text())
    assert b["codec_variant"].startswith("world:") and "ar_free_running" in b.get("cer", {"ar_free_running": 0})
    # the same model, codes and splits: the codec statistics agree exactly, the geometry closely
    assert b["codec"] == a["codec"]
    assert b["hidden_geometry"]["position_mean_cosine"] == pytest.approx(a["hidden_geometry"]["position_mean_cosine"],
                                                                         abs=0.05)
