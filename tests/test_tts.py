"""The frame loop (rvqspec.core.frame_loop) and the mini trainer's loss on tiny random models.

The key property: training (teacher forcing over a whole utterance) and inference (the
frame-by-frame loop with a KV cache) build the same talker inputs, so the talker hidden states and
c0 logits agree frame by frame when the loop is fed the codes it produced itself.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rvqspec.mini.talker_train import MiniModelConfig, training_batch, losses, model_config
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder
from rvqspec.core.sampling import Sampling
from rvqspec.core.frame_loop import synthesize_codes, teacher_forced_frames, teacher_forced_talker

CODEBOOK = 16


def tiny_model(seed: int = 0, text_lead: int = 0):
    from dataclasses import replace

    torch.manual_seed(seed)
    cfg = model_config(replace(MiniModelConfig.toy(), text_lead=text_lead), text_vocab_size=20, codebook_size=CODEBOOK)
    talker, cp = CodeDecoder(cfg.talker), MultiCodeDecoder(cfg.code_predictor)
    cp.set_c0_embedding(talker.model.codec_embedding)
    return talker.eval(), cp.eval()


@pytest.mark.parametrize("text_lead", [0, 2])
def test_free_running_equals_teacher_forced_on_own_codes(text_lead):
    talker, cp = tiny_model(text_lead=text_lead)
    text = torch.randint(0, 20, (9,), generator=torch.Generator().manual_seed(1))
    seen = []
    codes, stats = synthesize_codes(talker, cp, text, CODEBOOK, sampling=Sampling(),
                                    generator=torch.Generator().manual_seed(2),
                                    on_frame=lambda t, frame: seen.append(frame.clone()))
    assert codes.shape == (9, 16) and stats.frames == 9 and stats.inner_calls == 9 * 15
    assert int(codes.max()) < CODEBOOK, "c0 must stay inside the codebook (control tokens suppressed)"
    assert torch.equal(torch.cat(seen), codes)
    # re-run the talker with teacher forcing on the loop's own codes: same c0 argmax per frame
    with torch.no_grad():
        hidden, logits = teacher_forced_talker(talker, cp, text.view(1, -1), codes.view(1, -1, 16))
    greedy_codes, _ = synthesize_codes(talker, cp, text, CODEBOOK, sampling=Sampling.greedy())
    with torch.no_grad():
        _, tf_logits = teacher_forced_talker(talker, cp, text.view(1, -1), greedy_codes.view(1, -1, 16))
    tf_c0 = tf_logits[0, :, :CODEBOOK].argmax(-1)
    assert torch.equal(tf_c0, greedy_codes[:, 0]), "teacher-forced talker disagrees with the frame loop"
    h, c = teacher_forced_frames(talker, cp, text, codes)
    assert h.shape == (9, talker.config.hidden_size) and torch.allclose(h, hidden[0], atol=1e-6)


def test_text_lead_reads_ahead_exactly_lead_frames_and_round_trips(tmp_path):
    """With text_lead L, frame t depends on text token t + L and not on t + L + 1; with L = 0 it
    does not depend on token t + 1 (the control). The lead survives save/load."""
    from rvqspec.core.checkpoint import Qwen3TTS, load_qwen3_tts, save_qwen3_tts

    g = torch.Generator().manual_seed(3)
    text = torch.randint(5, 20, (1, 10), generator=g)
    codes = torch.randint(0, CODEBOOK, (1, 10, 16), generator=g)
    for lead in (0, 2):
        talker, cp = tiny_model(text_lead=lead)
        with torch.no_grad():
            _, ref = teacher_forced_talker(talker, cp, text, codes)
            for j, expect in ((4 + lead, True), (5 + lead, False)):
                alt = text.clone()
                alt[0, j] = (alt[0, j] + 1 - 5) % 15 + 5
                _, got = teacher_forced_talker(talker, cp, alt, codes)
                changed = (got[0, 4] - ref[0, 4]).abs().max().item() > 1e-6
                assert changed == expect, (lead, j)
    cfg = model_config(MiniModelConfig.toy(), text_vocab_size=20, codebook_size=CODEBOOK)
    talker, cp = tiny_model(text_lead=2)
    from dataclasses import replace
    save_qwen3_tts(Qwen3TTS(talker=talker, code_predictor=cp, config=replace(cfg, talker=talker.config), path=None),
                   tmp_path / "m")
    back = load_qwen3_tts(tmp_path / "m")
    assert back.talker.config.text_lead == 2 and back.talker.config.text_lead_pad_id == 0
    import json
    assert json.loads((tmp_path / "m" / "config.json").read_text())["talker_config"]["rvqspec_text_lead"] == \
        {"frames": 2, "pad_id": 0}


def test_frame_loop_rejects_bad_text():
    talker, cp = tiny_model()
    with pytest.raises(ValueError, match="text_ids"):
        synthesize_codes(talker, cp, torch.zeros(0, dtype=torch.long), CODEBOOK)
    with pytest.raises(ValueError, match="text_ids"):
        synthesize_codes(talker, cp, torch.zeros(2, 3, dtype=torch.long), CODEBOOK)


def test_training_step_lowers_loss_and_uses_inner_loop_layout():
    talker, cp = tiny_model()
    talker.train(), cp.train()
    rng = np.random.default_rng(0)
    texts = [rng.integers(0, 20, size=n) for n in (7, 12, 9, 5)]
    codes = [rng.integers(0, CODEBOOK, size=(len(t), 16)) for t in texts]
    text, code, valid = training_batch(texts, codes, np.arange(4), 32, rng)
    assert text.shape == (4, 12) and code.shape == (4, 12, 16) and int(valid.sum()) == 33
    opt = torch.optim.Adam(list(talker.parameters()) + list(cp.parameters()), lr=1e-2)
    first = None
    for _ in range(25):
        l0, lc = losses(talker, cp, text, code, valid)
        first = first if first is not None else (l0.item(), lc.item())
        opt.zero_grad()
        (l0 + lc).backward()
        opt.step()
    assert float(l0) < 0.7 * first[0] and float(lc) < 0.9 * first[1]
    # the code-predictor loss is the AR inner loop: teacher-forcing the predictor (the layout
    # `losses` trains) on its own greedy frame reproduces that frame's 15 argmaxes
    talker.eval(), cp.eval()
    with torch.no_grad():
        hid, _ = teacher_forced_talker(talker, cp, text[:1, :3], code[:1, :3])
        h, c0 = hid[:, 2:3], code[:1, 2, :1]  # (1, 1, E), (1, 1)
        ar = cp.generate_frame(h, c0, sampling=Sampling.greedy())  # (1, 15)
        frame = torch.cat([c0, ar], dim=1)  # (1, 16)
        x = torch.cat([h, cp.embed_codes(frame[:, :15], torch.arange(15))], dim=1)  # (1, 16, E)
        pos = torch.arange(16).view(1, 16)
        from rvqspec.core.model import causal_mask
        hid_cp, _ = cp(x, pos, cp.new_cache(1, 16), torch.arange(16), causal_mask(pos, 16))
        tf = cp.lm_logits(hid_cp[:, 1:], torch.arange(15)).argmax(-1)  # (1, 15)
    assert torch.equal(tf, ar)


def test_talker_residual_dropout_acts_only_while_training():
    """CodeDecoder.residual_dropout (MiniModelConfig.talker_dropout): in train mode it changes the
    talker's output (seeded masks repeat); in eval mode, and at 0, the output is the plain forward's
    to the last bit, so inference, export and every saved model are untouched by it."""
    talker, cp = tiny_model()
    text = torch.randint(0, 20, (2, 7), generator=torch.Generator().manual_seed(3))
    codes = torch.randint(0, CODEBOOK, (2, 7, 16), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref, ref_logits = teacher_forced_talker(talker, cp, text, codes)
        talker.train()
        same, _ = teacher_forced_talker(talker, cp, text, codes)  # train mode, dropout 0
        talker.residual_dropout = 0.5
        torch.manual_seed(0)
        a, _ = teacher_forced_talker(talker, cp, text, codes)
        torch.manual_seed(0)
        a2, _ = teacher_forced_talker(talker, cp, text, codes)
        torch.manual_seed(1)
        b, _ = teacher_forced_talker(talker, cp, text, codes)
        talker.eval()
        off, off_logits = teacher_forced_talker(talker, cp, text, codes)  # eval mode ignores it
    assert torch.equal(same, ref) and torch.equal(off, ref) and torch.equal(off_logits, ref_logits)
    assert torch.equal(a, a2), "the dropout masks come from torch's generator: seeded, they repeat"
    assert not torch.allclose(a, ref, atol=1e-3) and not torch.allclose(a, b, atol=1e-3), \
        "with p = 0.5 in train mode the output must move, and with another seed differently"
