"""scripts/diagnose_intelligibility.py: the decompositions of the frame loop behind docs/design.md's
"Where free-running speech loses its intelligibility"."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from _scripts import SCRIPTS, load_script
from rvqspec.core.sampling import Sampling
from rvqspec.mini.corpus import load_corpus
from rvqspec.mini.pipeline import MiniTTS, default_data_dir


@pytest.fixture(scope="module")
def world():
    tts = MiniTTS.load()
    row = load_corpus(default_data_dir() / "corpus")["eval"][0]
    text = torch.as_tensor(row["phoneme_frames"], dtype=torch.long)[:30]  # (30,)
    codes = torch.as_tensor(np.asarray(row["codes"]), dtype=torch.long)[:30]  # (30, 16)
    return tts, text, codes


@pytest.mark.parametrize("first", [1, 6])
def test_teacher_forced_levels_keep_the_true_lower_levels_and_draw_the_rest(world, first):
    diag = load_script("diagnose_intelligibility")
    tts, text, codes = world
    out = diag.teacher_forced_levels(tts, text, codes, first, Sampling(), torch.Generator().manual_seed(0))
    assert out.shape == codes.shape
    assert torch.equal(out[:, :first], codes[:, :first])
    assert 0 <= int(out.min()) and int(out.max()) < tts.codebook_size
    if first == 1:  # c1 has about 2 nats of entropy: 30 frames drawn all equal to the truth cannot happen
        assert not torch.equal(out[:, 1], codes[:, 1])


def test_smallest_codewords_are_the_minimum_norm_entries(world):
    diag = load_script("diagnose_intelligibility")
    tts, _, _ = world
    idx = tts.codec.smallest_codewords()  # (16,)
    norms = tts.codec.codebooks.norm(dim=-1)  # (16, K)
    assert idx.shape == (16,)
    assert torch.equal(norms.gather(1, idx.view(-1, 1)).view(-1), norms.min(dim=1).values)


def test_an_unknown_variant_exits_2_with_one_line():
    r = subprocess.run([sys.executable, str(SCRIPTS / "diagnose_intelligibility.py"), "--variants", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "'nope'" in r.stderr


def test_a_bad_sampling_option_exits_2_with_one_line():
    r = subprocess.run([sys.executable, str(SCRIPTS / "diagnose_intelligibility.py"), "--top-k", "-3"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "top_k" in r.stderr and "-3" in r.stderr



def test_teacher_forced_c0_modes_greedy_is_the_mode_and_fixed_residuals_are_kept(world):
    diag = load_script("diagnose_intelligibility")
    tts, text, codes = world
    greedy = Sampling(do_sample=False)
    silent = tts.codec.smallest_codewords()  # (16,)
    mode = diag.teacher_forced_codes(tts, text, codes, True, Sampling(), torch.Generator().manual_seed(0),
                                     c0_sampling=greedy)
    again = diag.teacher_forced_codes(tts, text, codes, True, Sampling(), torch.Generator().manual_seed(1),
                                      c0_sampling=greedy)
    assert torch.equal(mode[:, 0], again[:, 0])  # the mode does not depend on the generator
    drawn = diag.teacher_forced_codes(tts, text, codes, True, Sampling(), torch.Generator().manual_seed(0))
    assert not torch.equal(drawn[:, 0], mode[:, 0])  # negative control: 30 sampled c0s all at the mode
    alone = diag.teacher_forced_codes(tts, text, codes, True, Sampling(), torch.Generator().manual_seed(0),
                                      residuals=silent)
    assert torch.equal(alone[:, 1:], silent[1:].expand(len(codes), 15))
    assert not torch.equal(alone[:, 0], mode[:, 0])  # its c0s are drawn too
    assert 0 <= int(alone.min()) and int(alone.max()) < tts.codebook_size
