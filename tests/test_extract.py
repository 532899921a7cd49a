"""Hidden-state extraction and shard streaming (seed 000 §2.2 "Training the offsets", §3.3)."""
from __future__ import annotations

import json

import pytest
import torch

from _tiny_cp import tiny_code_predictor
from rvqspec.measure.extract import (ExtractConfig, ExtractError, ShardDataset, extract, free_running_codes, read_manifest,
                             teacher_forced_hidden)
from rvqspec.core.model import causal_mask
from rvqspec.core.sampling import Sampling


@pytest.fixture(scope="module")
def cp():
    torch.set_num_threads(1)
    return tiny_code_predictor(vocab=16, hidden=32, talker_hidden=48, seed=4)


def utterances(n=5, T=13, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(T + i, 48, generator=g), torch.randint(0, 16, (T + i, 16), generator=g)) for i in range(n)]


@torch.no_grad()
def test_teacher_forced_hidden_equals_stepwise(cp):
    """h_p from the batched call equals the hidden state of a step-by-step (q=1) run with the same codes."""
    th, codes = utterances(1, 3)[0]
    hid = teacher_forced_hidden(cp, th, codes)  # (T, 15, H)
    assert hid.shape == (3, 15, 32)
    for t in range(3):
        cache = cp.new_cache(1, 16)
        pos = torch.arange(16).view(1, 16)
        mask = causal_mask(pos, 16)
        x = th[t].view(1, 1, 48)  # forward applies small_to_mtp_projection itself
        cp(x, pos[:, :1], cache, torch.tensor([0]), mask[:, :, :1])
        for p in range(1, 16):
            e = cp.embed_codes(codes[t:t + 1, p - 1:p], [p - 1])  # c_{p-1} at position p
            h, _ = cp(e, pos[:, p:p + 1], cache, torch.tensor([p]), mask[:, :, p:p + 1])
            torch.testing.assert_close(hid[t, p - 1], h[0, 0], atol=1e-5, rtol=1e-5)


def test_free_running_codes_keep_c0_and_match_ar_greedy(cp):
    th, codes = utterances(1, 6)[0]
    fr = free_running_codes(cp, th, codes[:, 0], Sampling.greedy())
    assert torch.equal(fr[:, 0], codes[:, 0])
    assert torch.equal(fr[:, 1:], cp.generate_frame(th.unsqueeze(1), codes[:, :1], Sampling.greedy()))


@pytest.mark.parametrize("source", ["teacher_forced", "free_running"])
def test_shards_manifest_and_streaming(cp, source, tmp_path):
    utts = utterances()
    total = sum(u[0].shape[0] for u in utts)
    cfg = ExtractConfig(shard_frames=20, batch_frames=8, dtype="float32")
    path = extract(cp, utts, tmp_path / "x", source=source, config=cfg, generator=torch.Generator().manual_seed(0),
                   progress=False)
    m = json.loads(path.read_text())
    assert m["frames"] == total and m["source"] == source and m["num_offsets"] == 3
    assert sum(s["frames"] for s in m["shards"]) == total and len(m["shards"]) >= 3
    ds = ShardDataset(tmp_path / "x", batch_size=7, generator=torch.Generator().manual_seed(1), code_predictor=cp)
    seen_codes = []
    n_batches = 0
    for h, c in ds:
        assert h.dtype == torch.float32 and h.shape[1:] == (15, 32) and c.shape[1] == 16 and h.shape[0] <= 7
        seen_codes.append(c)
        n_batches += 1
    assert n_batches == len(ds)
    seen = torch.cat(seen_codes)
    assert seen.shape[0] == total
    if source == "teacher_forced":
        ref = torch.cat([u[1] for u in utts])
        # every frame exactly once (multiset equality of rows), in a shuffled order
        key = lambda x: sorted(map(tuple, x.tolist()))  # noqa: E731
        assert key(seen) == key(ref)
        assert not torch.equal(seen, ref)
        # stored hidden states are the teacher-forced ones
        ordered = ShardDataset(tmp_path / "x", batch_size=1000, shuffle=False)
        h_all = torch.cat([h for h, _ in ordered])
        torch.testing.assert_close(h_all, torch.cat([teacher_forced_hidden(cp, th, c) for th, c in utts]))
    else:
        ref_c0 = torch.cat([u[1][:, 0] for u in utts])
        ordered = ShardDataset(tmp_path / "x", batch_size=1000, shuffle=False)
        c_all = torch.cat([c for _, c in ordered])
        assert torch.equal(c_all[:, 0], ref_c0)
        assert m["sampling"]["top_k"] == 50


def test_manifest_errors(cp, tmp_path):
    extract(cp, utterances(2), tmp_path / "x", progress=False)
    other = tiny_code_predictor(vocab=16, hidden=32, talker_hidden=48, seed=9)
    with pytest.raises(ExtractError, match="model hash"):
        read_manifest(tmp_path / "x", other)
    (tmp_path / "x" / "shard_00000.safetensors").unlink()
    with pytest.raises(ExtractError, match="shard file 'shard_00000.safetensors' is missing"):
        read_manifest(tmp_path / "x")
    with pytest.raises(ExtractError, match="no manifest"):
        read_manifest(tmp_path / "nothing")
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "manifest.json").write_text(json.dumps({"frames": 1}))
    with pytest.raises(ExtractError, match="missing key 'model_hash'"):
        read_manifest(tmp_path / "y")


def test_bad_input(cp, tmp_path):
    th, codes = utterances(1)[0]
    with pytest.raises(ExtractError, match=r"codes must be \(T, 16\)"):
        teacher_forced_hidden(cp, th, codes[:, :15])
    with pytest.raises(ExtractError, match=r"talker_hidden must be \(T, 48\)"):
        teacher_forced_hidden(cp, th[:, :40], codes)
    bad = codes.clone()
    bad[0, 3] = 99
    with pytest.raises(ExtractError, match=r"codes must lie in \[0, 16\)"):
        teacher_forced_hidden(cp, th, bad)
    with pytest.raises(ExtractError, match="source must be one of"):
        extract(cp, [(th, codes)], tmp_path / "z", source="oracle", progress=False)
    with pytest.raises(ExtractError, match="same number of frames"):
        extract(cp, [(th, codes[:-1])], tmp_path / "z", progress=False)
