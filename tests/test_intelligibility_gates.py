"""The intelligibility gates behind docs/design.md's "Where free-running speech loses its
intelligibility": scripts/level0_gate.py (phonetic level 0), scripts/predictor_cell_probe.py (where
the code predictor's probability goes) and scripts/cp_capacity_gate.py (fresh predictors on a
frozen talker)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from _scripts import SCRIPTS, load_script
from rvqspec.mini.codec import lda_basis

sys.path.insert(0, str(SCRIPTS))  # the gates import their sibling scripts


def test_lda_basis_finds_the_direction_that_separates_the_classes():
    g = torch.Generator().manual_seed(0)
    n, D = 6000, 8
    labels = torch.randint(0, 3, (n,), generator=g)  # (N,)
    x = torch.randn(n, D, generator=g) * torch.tensor([3.0, 3, 3, 3, 3, 3, 3, 0.5])  # (N, D): loud noise
    x[:, 7] += labels.float() * 2.0  # the classes differ only along the quietest axis
    w = lda_basis(x, labels, 2)  # (D, 2)
    top = w[:, 0] / w[:, 0].norm()
    assert abs(float(top[7])) > 0.99  # PCA would pick a loud axis; Fisher picks the separating one
    # within-class covariance is the identity in the projected space (up to the regularizer)
    z = x @ w
    within = torch.cat([z[labels == c] - z[labels == c].mean(0) for c in range(3)])
    cov = within.T @ within / n
    assert torch.allclose(cov, torch.eye(2), atol=0.05)  # the ridge (1e-3 of the mean variance) shrinks the quiet axis 3%


def test_shuffled_residuals_copy_a_frame_of_the_same_cell():
    level0 = load_script("level0_gate")
    pool_c0 = {5: np.arange(30).reshape(2, 15) + 100}  # two frames with c0 = 5
    pool = {(7, 5): np.full((1, 15), 9)}  # one frame with token 7 and c0 = 5
    codes = torch.zeros(3, 16, dtype=torch.long)
    codes[:, 0] = torch.tensor([5, 5, 6])  # c0 = 6 has no pool: left as it is
    tokens = np.array([7, 8, 7])
    g = np.random.default_rng(0)
    by_c0 = level0.shuffled_residuals(codes, tokens, pool, pool_c0, g, by_token=False)
    assert torch.equal(by_c0[:, 0], codes[:, 0]) and torch.equal(by_c0[2], codes[2])
    for t in range(2):
        assert any(np.array_equal(by_c0[t, 1:].numpy(), row) for row in pool_c0[5])
    by_tok = level0.shuffled_residuals(codes, tokens, pool, pool_c0, g, by_token=True)
    assert torch.equal(by_tok[0, 1:], torch.full((15,), 9))  # token 7 and c0 5: the one such frame
    assert any(np.array_equal(by_tok[1, 1:].numpy(), row) for row in pool_c0[5])  # token 8: back off to c0
    levelwise = level0.shuffled_residuals(codes, tokens, pool, pool_c0, np.random.default_rng(3), False, True)
    for k in range(15):  # each level from one of the frames of the cell, chosen per level
        assert int(levelwise[0, k + 1]) in (int(pool_c0[5][0, k]), int(pool_c0[5][1, k]))
    mixed = [np.array_equal(levelwise[t, 1:].numpy(), row) for t in range(2) for row in pool_c0[5]]
    assert not all(mixed)  # with 15 independent picks, a whole-frame copy in both frames is (1/2)^28


def test_cell_counts_count_codes_per_token_and_c0():
    probe = load_script("predictor_cell_probe")
    c = np.zeros((3, 16), dtype=np.int64)
    c[:, 0] = [1, 1, 2]
    c[:, 1] = [4, 4, 5]
    rows = [(np.array([7, 7, 7]), c, "x")]
    tabs = probe.cell_counts(rows, 8)
    assert set(tabs) == {(7, 1), (7, 2)}
    assert tabs[(7, 1)][0, 4] == 2 and tabs[(7, 1)][0].sum() == 2
    assert tabs[(7, 2)][0, 5] == 1
    assert tabs[(7, 1)][1, 0] == 2  # c2 = 0 in both frames
    c0 = probe.token_c0_counts(rows + [(np.array([9]), c[:1], "y")], 8)
    assert set(c0) == {7, 9} and list(c0[7][:3]) == [0, 2, 1] and c0[9][1] == 1 and c0[9].sum() == 1


@pytest.mark.parametrize("arm", ["base", "token", "dropout"])
def test_a_fresh_predictor_learns_a_fixed_batch(arm):
    gate = load_script("cp_capacity_gate")
    torch.manual_seed(0)
    V, E, n = 16, 16, 64
    c0_emb = torch.nn.Embedding(V + 8, E)
    pred = gate.Predictor(arm, E, V, c0_emb, token_vocab=10)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(n, E, generator=g)  # (n, E)
    codes = torch.randint(0, V, (n, 16), generator=g)  # (n, 16)
    toks = torch.randint(0, 10, (n,), generator=g)  # (n,)
    if arm == "token":  # the token embedding starts at zero: the state is the talker's own
        assert torch.equal(pred.state(h, toks), h)
    hist = gate.train(pred, h, codes, toks, steps=60, batch=n, lr=3e-3, g=g)
    assert np.mean(hist[-5:]) < np.mean(hist[:5]) - 0.3
    pred.eval()
    assert torch.equal(pred.state(h, toks), pred.state(h, toks))  # no dropout at evaluation
    if arm == "dropout":
        pred.train()
        assert not torch.equal(pred.state(h, toks), h)


def test_an_unknown_arm_exits_2():
    import subprocess

    r = subprocess.run([sys.executable, str(SCRIPTS / "cp_capacity_gate.py"), "--arm", "nope", "--out", "x.json"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "nope" in r.stderr


def test_level0_gate_codec_half_on_a_small_english_corpus(tmp_path):
    """scripts/level0_gate.py --codec-only end to end: a phonetic level 0 with more than 256 codes is
    fitted, saved beside the corpus it encoded (int16 codes), and resynthesis reads better than c0
    alone (the residual levels carry the rest of the sound)."""
    import json

    from rvqspec.mini.codec import RVQCodec
    from rvqspec.mini.corpus import build_corpus, load_corpus
    from rvqspec.mini.text import CorpusConfig

    level0 = load_script("level0_gate")
    gate = tmp_path / "gate"
    build_corpus(gate / "corpus_audio", gate / "corpus_text", gate / "phoneme_tokenizer.json",
                 CorpusConfig(model_train_per_language=30, train=4, validation=2, calibration=2, eval_per_language=3,
                              languages=("en",)), progress=False)
    out = tmp_path / "out.json"
    level0.main(["--lda", "4", "--codebook-size", "300", "--codec-only", "--sentences", "2", "--gate", str(gate),
                 "--work", str(tmp_path / "work"), "--out", str(out)])
    work = tmp_path / "work" / "level0_lda4_k300"
    assert RVQCodec.load(work / "codec").config.codebook_size == 300
    train = load_corpus(work / "corpus", need_codes=True)["model_train"]
    assert str(train.data.schema.field("codes").type) == "list<item: fixed_size_list<item: int16>[16]>"
    assert max(int(np.asarray(c).max()) for c in train["codes"]) < 300
    rec = json.loads(out.read_text())
    v = rec["codec_half"]["variants"]
    assert rec["codebook_size"] == 300 and "steps" not in rec  # the codec half only
    assert v["resynth"]["cer"] + 0.2 < v["c0_only"]["cer"]
