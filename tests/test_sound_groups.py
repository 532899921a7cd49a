"""The c0 codebook grouped by sound and the talker's sound-level c0 loss (rvqspec.mini.sound_groups,
MiniModelConfig.c0_sound_weight)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rvqspec.mini.phonemes import SPECIAL_TOKENS, centre_phoneme
from rvqspec.mini.sound_groups import code_sound_groups, sound_group_loss


@pytest.mark.parametrize("token, sound", [("en:a a b b", "b"), ("en:a b", "b"), ("en:k", "k"),
                                          ("en:a - - -", "<sil>"), ("<unk>", "<sil>"), ("de:A: f", "f")])
def test_centre_phoneme(token, sound):
    assert centre_phoneme(token) == sound


def test_code_groups_follow_the_majority_sound_of_the_frames():
    tokens = list(SPECIAL_TOKENS) + ["en:a", "en:b", "en:a b"]  # ids 5, 6, 7 (centre: a, b, b)
    texts = [np.array([5, 5, 6, 7, 5])]  # (T,)
    codes = [np.zeros((5, 16), dtype=np.int64)]
    codes[0][:, 0] = [0, 1, 2, 2, 0]  # code 0 and 1 take 'a' frames, code 2 two 'b' frames
    groups = code_sound_groups(texts, codes, tokens, 4)
    assert groups[0] == groups[1] != groups[2]
    assert groups[3] not in (groups[0], groups[2])  # code 3 unused: a group of its own


def test_sound_group_loss_is_the_group_part_of_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 12, generator=g)  # 10 codes + 2 control tokens
    target = torch.randint(0, 10, (64,), generator=g)
    singletons = torch.arange(10)
    # one code per group: the term is the plain cross-entropy over the codes
    assert torch.allclose(sound_group_loss(logits, target, singletons), F.cross_entropy(logits, target), atol=1e-5)
    # every code in one group: only the control tokens' mass is left to lose
    one = torch.zeros(10, dtype=torch.long)
    ctrl = logits.log_softmax(-1)[:, :10].exp().sum(-1)
    assert torch.allclose(sound_group_loss(logits, target, one), -ctrl.log().mean(), atol=1e-5)
    # grouped: no larger than the cross-entropy (a group holds the true code)
    pairs = torch.arange(10) // 2
    assert sound_group_loss(logits, target, pairs) < F.cross_entropy(logits, target)

