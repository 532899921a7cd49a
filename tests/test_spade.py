"""SPADE on the talker (seed 001): pruning, the layer-by-layer forward, distillation losses and the
student checkpoint, on tiny random models (seconds on one CPU thread)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rvqspec.core.checkpoint import load_qwen3_tts
from rvqspec.mini.talker_train import MiniModelConfig, model_config
from rvqspec.core.model import CodeDecoder, MultiCodeDecoder, causal_mask
from rvqspec.spade.distill import (DistillConfig, code_predictor_kd, distill, distill_losses, kd_terms, save_student,
                                   skew_kl, student_code_predictor, target_layers)
from rvqspec.spade.prune import prune_talker, select_layers
from rvqspec.spade.trace import trace_talker
from rvqspec.core.frame_loop import talker_inputs

CB = 24          # codebook size
TEXT_VOCAB = 30


def tiny(layers: int = 4, seed: int = 0):
    torch.set_num_threads(1)
    cfg = MiniModelConfig(talker_hidden=32, talker_layers=layers, talker_heads=4, talker_kv_heads=2, talker_mlp=48,
                          text_hidden=16, cp_hidden=16, cp_layers=1, cp_heads=2, cp_kv_heads=1, cp_mlp=24)
    qcfg = model_config(cfg, TEXT_VOCAB, CB)
    torch.manual_seed(seed)
    talker, cp = CodeDecoder(qcfg.talker).eval(), MultiCodeDecoder(qcfg.code_predictor).eval()
    with torch.no_grad():  # break the symmetry of the default init: norms != 1, larger weights
        for name, p in talker.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    cp.set_c0_embedding(talker.model.codec_embedding)
    return qcfg, talker, cp


def batch(B=3, T=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, TEXT_VOCAB, (B, T), generator=g)
    codes = torch.randint(0, CB, (B, T, 16), generator=g)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 7:] = False  # right padding
    valid[2, 4:] = False
    return text, codes, valid


def sdpa_forward(talker, x):
    B, T, _ = x.shape
    pos = torch.arange(T).view(1, T).expand(B, T)
    cache = talker.new_cache(B, T)
    return talker(x, pos, cache, torch.arange(T), causal_mask(pos[:1], T))


# ---- the layer-by-layer forward ---------------------------------------------------------------------
def test_trace_equals_codedecoder_forward():
    _, talker, cp = tiny()
    text, codes, _ = batch()
    x = talker_inputs(talker, cp, text, codes)
    with torch.no_grad():
        hidden, logits = sdpa_forward(talker, x)
        tr = trace_talker(talker, x)
    assert len(tr.hidden) == 4 and len(tr.attentions) == 4
    torch.testing.assert_close(tr.final, hidden, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tr.logits, logits, atol=1e-5, rtol=1e-5)
    # attention rows are causal probability distributions
    p = tr.attentions[1]  # (B, nh, T, T)
    torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
    assert float(p.triu(1).abs().max()) == 0.0
    # each intermediate state equals the model truncated after that layer (final norm applied)
    from rvqspec.core.model import rms_norm
    for i in range(4):
        with torch.no_grad():
            h_i, _ = sdpa_forward(prune_talker(talker, range(i + 1)), x)
        torch.testing.assert_close(rms_norm(tr.hidden[i], talker.model.norm.weight, talker.config.rms_norm_eps),
                                   h_i, atol=1e-5, rtol=1e-5)


def test_trace_detects_a_wrong_weight():  # the equality test above can fail
    _, talker, cp = tiny()
    text, codes, _ = batch()
    x = talker_inputs(talker, cp, text, codes)
    other = prune_talker(talker, range(4))
    with torch.no_grad():
        other.model.layers[2].self_attn.v_proj.weight.mul_(1.5)  # (k is RMS-normed: scale-free)
        _, logits = sdpa_forward(talker, x)
        tr = trace_talker(other, x)
    assert float((tr.logits - logits).abs().max()) > 1e-3


# ---- pruning -----------------------------------------------------------------------------------------
def test_prune_keep_all_equals_full_model():
    _, talker, cp = tiny()
    text, codes, _ = batch()
    x = talker_inputs(talker, cp, text, codes)
    full = prune_talker(talker, [0, 1, 2, 3])
    assert full is not talker and full.config.num_hidden_layers == 4
    with torch.no_grad():
        a, la = sdpa_forward(talker, x)
        b, lb = sdpa_forward(full, x)
    assert torch.equal(a, b) and torch.equal(la, lb)


def test_prune_keeps_the_right_layers_and_copies():
    _, talker, _ = tiny()
    student = prune_talker(talker, [0, 3])
    assert student.config.num_hidden_layers == 2 and talker.config.num_hidden_layers == 4
    assert len(student.model.layers) == 2
    sd_t, sd_s = talker.state_dict(), student.state_dict()
    for j, i in enumerate([0, 3]):
        for k in ("self_attn.q_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"):
            assert torch.equal(sd_s[f"model.layers.{j}.{k}"], sd_t[f"model.layers.{i}.{k}"])
    assert not torch.equal(sd_s["model.layers.1.self_attn.q_proj.weight"],
                           sd_t["model.layers.1.self_attn.q_proj.weight"])
    for k in ("model.norm.weight", "codec_head.weight", "model.text_embedding.weight",
              "text_projection.linear_fc1.weight"):
        assert torch.equal(sd_s[k], sd_t[k])
    # a copy, not a view: training the student leaves the teacher alone
    with torch.no_grad():
        student.model.layers[0].mlp.up_proj.weight.add_(1.0)
    assert not torch.equal(student.model.layers[0].mlp.up_proj.weight, talker.model.layers[0].mlp.up_proj.weight)


@pytest.mark.parametrize("keep", [[], [1, 0], [0, 4], [2, 2]])
def test_prune_rejects_bad_keep(keep):
    _, talker, _ = tiny()
    with pytest.raises(ValueError, match="keep_layers"):
        prune_talker(talker, keep)


def test_select_layers():
    assert select_layers([0.3, 0.0, 0.1, 0.5], 2) == [0, 3]
    assert select_layers({0: 1.0, 1: 1.0, 2: 0.0}, 1) == [0]  # ties keep the earlier layer
    assert select_layers([(0.0, 0.2), (0.0, 0.1), (0.1, 0.0)], 2) == [0, 2]  # tuples: CER breaks WER ties
    with pytest.raises(ValueError, match="depth"):
        select_layers([1.0, 2.0], 3)


# ---- distillation pieces ---------------------------------------------------------------------------
def test_dynamic_targets_by_hand():
    # keep [0, 3] of 4: layer 0 must stand for teacher layers 0..2 -> target 2; layer 3 -> 3
    assert target_layers([0, 3], 4, "dynamic") == [2, 3]
    assert target_layers([0, 3], 4, "index") == [0, 3]
    assert target_layers([1, 2], 4, "dynamic") == [1, 3]
    assert target_layers([0, 5, 9, 27], 28, "dynamic") == [4, 8, 26, 27]
    assert target_layers([0, 1, 2, 3], 4, "dynamic") == [0, 1, 2, 3]  # nothing pruned: identity
    with pytest.raises(ValueError):
        target_layers([3, 0], 4)


def test_skew_kl_zero_for_equal_and_finite_with_zeros():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, 7, generator=g), -1)
    assert float(skew_kl(p.log(), p.log(), 0.1).abs().max()) < 1e-6
    q = p.clone()
    q[:, :3] = 0.0  # the student puts no mass where the teacher does
    q = q / q.sum(-1, keepdim=True)
    lq = q.log()  # -inf entries
    s = skew_kl(p.log(), lq, 0.1)
    assert torch.isfinite(s).all() and (s > 0).all()
    # bounded by -log(alpha): the mixture keeps alpha * p
    assert float(s.max()) <= -math.log(0.1) + 1e-5
    assert float(skew_kl(p.log(), lq, 0.0).min()) > 100  # plain KL (alpha 0) explodes there
    # against a direct computation: KL(p || a p + (1 - a) q)
    q2 = torch.softmax(torch.randn(5, 7, generator=g), -1)
    m = 0.1 * p + 0.9 * q2
    torch.testing.assert_close(skew_kl(p.log(), q2.log(), 0.1), (p * (p / m).log()).sum(-1))
    # gradient stays finite with zeros in q
    lq_var = lq.clone().requires_grad_(True)
    skew_kl(p.log(), lq_var, 0.1).sum().backward()
    assert torch.isfinite(lq_var.grad).all()


def test_kd_terms_zero_for_teacher_itself():
    _, talker, cp = tiny()
    text, codes, valid = batch()
    x = talker_inputs(talker, cp, text, codes)
    with torch.no_grad():
        tr = trace_talker(talker, x)
        terms = kd_terms(tr, tr, [0, 1, 2, 3], valid)
        assert all(float(v) < 1e-6 for v in terms.values())
        student = prune_talker(talker, [0, 3])
        st = trace_talker(student, talker_inputs(student, cp, text, codes))
        dyn = kd_terms(st, tr, target_layers([0, 3], 4, "dynamic"), valid)
        idx = kd_terms(st, tr, target_layers([0, 3], 4, "index"), valid)
    assert float(dyn["latent"]) > 0 and float(idx["latent"]) > 0
    assert float(idx["latent"]) != float(dyn["latent"])
    assert float(dyn["emb"]) < 1e-9


def test_code_predictor_kd_zero_for_the_teacher_and_positive_for_a_pruned_student():
    _, talker, cp = tiny()
    text, codes, valid = batch()
    T = codes.shape[1]  # a text-lead prefix precedes the T frames
    t_final = trace_talker(talker, talker_inputs(talker, cp, text, codes)).final[:, -T:].detach()
    g = lambda: torch.Generator().manual_seed(5)
    with torch.no_grad():
        same = code_predictor_kd(cp, cp, t_final, t_final, codes, valid, 8, 0.1, g())
    assert float(same) < 1e-8
    student = prune_talker(talker, [0, 3])
    s_cp = student_code_predictor(cp, student)
    s_final = trace_talker(student, talker_inputs(student, s_cp, text, codes)).final[:, -T:]
    term = code_predictor_kd(s_cp, cp, s_final, t_final, codes, valid, 8, 0.1, g())
    assert float(term.detach()) > 1e-5  # a tiny random predictor's laws are near uniform: small but not 0
    term.backward()  # the term trains the student's talker, never the frozen predictor
    assert student.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in s_cp.parameters())


def test_code_predictor_kd_enters_the_total_only_with_its_weight():
    _, talker, cp = tiny()
    text, codes, valid = batch()
    student = prune_talker(talker, [0, 3])
    s_cp = student_code_predictor(cp, student)
    with torch.no_grad():
        base = distill_losses(student, talker, s_cp, cp, [2, 3], text, codes, valid, DistillConfig(cp_frames=8),
                              torch.Generator().manual_seed(3))
        with_cp = distill_losses(student, talker, s_cp, cp, [2, 3], text, codes, valid,
                                 DistillConfig(cp_frames=8, w_cp=2.0), torch.Generator().manual_seed(3))
    assert "cp" not in base and float(with_cp["cp"]) > 0
    torch.testing.assert_close(with_cp["kd"], base["kd"] + 2.0 * with_cp["cp"])


def test_distillation_step_lowers_loss_on_fixed_batch():
    _, talker, cp = tiny()
    text, codes, valid = batch()
    cfg = DistillConfig(steps=25, lr=3e-3, warmup_steps=1, cp_frames=64)
    res = distill(talker, cp, [0, 3], corpus_dir="unused", config=cfg, progress=False,
                  batches=[(text, codes, valid)])
    student, s_cp = res.student, res.code_predictor
    t_cp = cp
    with torch.no_grad():
        before = distill_losses(prune_talker(talker, [0, 3]), talker,
                                student_code_predictor(cp, prune_talker(talker, [0, 3])), t_cp,
                                res.targets, text, codes, valid, cfg, torch.Generator().manual_seed(0))
        after = distill_losses(student, talker, s_cp, t_cp, res.targets, text, codes, valid, cfg,
                               torch.Generator().manual_seed(0))
    assert float(after["total"]) < 0.9 * float(before["total"])
    assert res.targets == [2, 3]
    # the teacher and its code predictor are untouched, the student's predictor is frozen
    assert all(not p.requires_grad for p in s_cp.parameters())
    torch.testing.assert_close(s_cp.lm_head[0].weight, cp.lm_head[0].weight)
    assert cp.c0_embedding is talker.model.codec_embedding
    assert s_cp.c0_embedding is student.model.codec_embedding


def test_saved_student_loads(tmp_path):
    qcfg, talker, cp = tiny()
    student = prune_talker(talker, [1, 2])
    s_cp = student_code_predictor(cp, student)
    teacher_dir = tmp_path / "teacher"
    teacher_dir.mkdir()
    (teacher_dir / "mini_model.json").write_text("{}")
    out = save_student(student, s_cp, qcfg, tmp_path / "student", teacher_dir=teacher_dir,
                       info=dict(keep_layers=[1, 2]))
    m = load_qwen3_tts(out)
    assert m.config.talker.num_hidden_layers == 2 and m.config.code_predictor.num_hidden_layers == 1
    assert (out / "mini_model.json").exists() and (out / "spade.json").exists()
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary left behind
    text, codes, _ = batch()
    x = talker_inputs(student, s_cp, text, codes)
    with torch.no_grad():
        a, la = sdpa_forward(student, x)
        b, lb = sdpa_forward(m.talker, x)
        torch.testing.assert_close(la, lb)
        h = a[:, :1]
        c0 = codes[:, 0, :1]
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        from rvqspec.core.sampling import Sampling
        f1 = s_cp.generate_frame(h, c0, Sampling(), g1)
        f2 = m.code_predictor.generate_frame(h, c0, Sampling(), g2)
    assert torch.equal(f1, f2)


# ---- evaluation helpers ------------------------------------------------------------------------------
def test_projection_runs_on_tiny_configs():
    from rvqspec.spade.evaluate import project_full_size, projection_table

    qcfg, _, _ = tiny()
    out = project_full_size(keep_layers=2, context=20, tree_nodes=4, tokens_per_call={"student": 3.0, "ref": [2.5, 6]},
                            reps=2, progress=False, talker_config=qcfg.talker, cp_config=qcfg.code_predictor)
    t = out["talker"]
    assert t["full"]["layers"] == 4 and t["pruned"]["layers"] == 2
    assert t["pruned"]["layer_params"] * 2 == t["full"]["layer_params"]
    assert len(out["variants"]) == 6
    assert sorted(out["code_predictor"]["tree_call_ms_by_nodes"]) == ["4", "6"]
    spec = [v for v in out["variants"] if "student" in v["inner"]]
    assert len(spec) == 2 and all(abs(v["calls_per_frame"] - 5.0) < 1e-9 and v["tree_nodes"] == 4 for v in spec)
    ref = [v for v in out["variants"] if "ref" in v["inner"]]
    assert all(abs(v["calls_per_frame"] - 6.0) < 1e-9 and v["tree_nodes"] == 6 for v in ref)
    # frame time = talker step + inner loop; speed-ups relative to the full talker with AR
    for v in out["variants"]:
        assert abs(v["frame_ms"] - v["talker_ms"] - v["inner_ms"]) < 1e-9
    assert all(v["projected_rtf"] > 0 for v in out["variants"])
    assert "| 2 layers |" in projection_table(out)


def test_static_memory_and_parameters():
    from rvqspec.spade.evaluate import parameters, static_memory_bytes

    _, talker, cp = tiny()
    small = prune_talker(talker, [0, 3])
    pf, ps = parameters(talker, cp), parameters(small, cp)
    assert pf["talker_layer_params"] == 2 * ps["talker_layer_params"]
    assert pf["total"] - ps["total"] == ps["talker_layer_params"]
    mf, ms = static_memory_bytes(talker, cp, 100), static_memory_bytes(small, cp, 100)
    assert mf["weights_mb"] > ms["weights_mb"] and mf["kv_cache_mb"] > ms["kv_cache_mb"]


# ---- importance --------------------------------------------------------------------------------------
def test_cosine_importance_sees_an_identity_layer():
    from rvqspec.spade.importance import cosine_importance

    _, talker, cp = tiny()
    with torch.no_grad():  # layer 1 adds nothing to the residual stream: an identity
        talker.model.layers[1].self_attn.o_proj.weight.zero_()
        talker.model.layers[1].mlp.down_proj.weight.zero_()
    text, codes, valid = batch()
    scores = cosine_importance(talker, cp, text, codes, valid)
    assert len(scores) == 4
    assert abs(scores[1]) < 1e-6
    assert all(s > 1e-4 for i, s in enumerate(scores) if i != 1)
    assert all(0.0 <= s <= 2.0 for s in scores)


def test_select_by_criteria():
    from rvqspec.spade.importance import select_by

    imp = dict(wli=dict(layers=[dict(layer=i, d_wer=w, d_cer=c) for i, (w, c) in
                                enumerate([(0.2, 0.1), (0.0, 0.05), (0.0, 0.01), (0.3, 0.2)])]),
               cosine=dict(scores=[0.5, 0.01, 0.4, 0.02]))
    assert select_by("wli", imp, 2) == [0, 3]
    assert select_by("wli", imp, 3) == [0, 1, 3]   # the CER increase breaks the WER tie of layers 1, 2
    assert select_by("cosine", imp, 2) == [0, 2]
    with pytest.raises(ValueError):
        select_by("random", imp, 2)


def test_distill_supervised_terms_equal_the_trainers_losses():
    """The distillation step reads c0 / c1..c15 CE from its traced student forward (one forward per
    step); they must equal the trainer's own `losses` (SDPA forward) on the same batch and frames."""
    from rvqspec.mini.talker_train import losses

    _, talker, cp = tiny()
    text, codes, valid = batch()
    student = prune_talker(talker, [0, 3])
    s_cp = student_code_predictor(cp, student)
    cfg = DistillConfig(cp_frames=16)
    with torch.no_grad():
        got = distill_losses(student, talker, s_cp, cp, [2, 3], text, codes, valid, cfg,
                             torch.Generator().manual_seed(3))
        c0, ccp = losses(student, s_cp, text, codes, valid, 16, torch.Generator().manual_seed(3))
        other = losses(student, s_cp, text, codes, valid, 16, torch.Generator().manual_seed(4))
    torch.testing.assert_close(got["ce_c0"], c0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["ce_cp"], ccp, rtol=1e-5, atol=1e-5)
    assert abs(float(other[1]) - float(ccp)) > 1e-4  # other frames give another value: the check can fail


# ---- importance statistics -------------------------------------------------------------------------
def _units(effects, units, noise, seed):
    """Per-unit extra errors (L, U) with mean `effects[l]` per reference word, and words per unit."""
    rng = np.random.default_rng(seed)
    den = rng.integers(5, 15, size=units).astype(float)  # (U,) words per clip
    num = np.array(effects)[:, None] * den + rng.normal(0.0, noise, size=(len(effects), units)) * np.sqrt(den)
    return num, den


def test_bootstrap_ranking_is_stable_for_clear_effects_and_not_for_noise():
    from rvqspec.measure.stats import bootstrap_ranking

    num, den = _units([0.30, 0.05, 0.20, 0.01, 0.15, 0.02], 80, 0.3, 0)
    res = bootstrap_ranking(num, den, 3, 400, np.random.default_rng(1))
    assert res["keep"] == [0, 2, 4]
    assert res["same_keep_share"] > 0.95 and res["kendall_tau_mean"] > 0.8
    # 95% intervals cover the true effects (at least 5 of 6: one may miss by chance)
    assert sum(lo <= t <= hi for (lo, hi), t in zip(res["ci95"], [0.30, 0.05, 0.20, 0.01, 0.15, 0.02])) >= 5
    # negative control: all layers equal, only noise: the ranking must not look stable
    num0, den0 = _units([0.1] * 6, 80, 0.3, 2)
    null = bootstrap_ranking(num0, den0, 3, 400, np.random.default_rng(1))
    assert null["same_keep_share"] < 0.5 and null["kendall_tau_mean"] < 0.5
    # the same generator seed gives the same interval
    again = bootstrap_ranking(num, den, 3, 400, np.random.default_rng(1))
    assert again["ci95"] == res["ci95"]
    with pytest.raises(ValueError, match="units"):
        bootstrap_ranking(num, den[:-1], 3, 10, np.random.default_rng(0))


def test_bootstrap_importance_from_wli_clips_and_random_baseline():
    from rvqspec.spade.importance import bootstrap_importance, random_importance, select_by

    L, U = 4, 40
    rng = np.random.default_rng(0)
    ref_w = rng.integers(5, 12, size=U)
    base_w = rng.integers(0, 3, size=U)
    extra = np.array([0.05, 0.4, 0.0, 0.2])[:, None] * ref_w  # layer 1 most important, then 3
    word = base_w + np.round(extra + rng.uniform(0, 1, size=(L, U)))
    imp = dict(wli=dict(clips=dict(ref_words=ref_w.tolist(), ref_chars=(5 * ref_w).tolist(),
                                   base_word_errors=base_w.tolist(), base_char_errors=(2 * base_w).tolist(),
                                   word_errors=word.tolist(), char_errors=(2 * word).tolist())),
               random=dict(scores=random_importance(L, torch.Generator().manual_seed(0))))
    b = bootstrap_importance(imp, 2, n=300, seed=0)
    assert b["wli"]["keep"] == [1, 3] and b["wli"]["same_keep_share"] > 0.9
    assert b["wli"]["ci95"][1][0] > b["wli"]["ci95"][2][1]  # layer 1's interval lies above layer 2's
    # the random baseline: a permutation, reproducible from its generator, and unstable by construction
    r = imp["random"]["scores"]
    assert sorted(r) == sorted(random_importance(L, torch.Generator().manual_seed(5)))
    assert r == random_importance(L, torch.Generator().manual_seed(0))
    assert b["random"]["same_keep_share"] < 0.5 and abs(b["random"]["kendall_tau_mean"]) < 0.3
    assert select_by("random", imp, 2) == select_layers(r, 2)


def test_cosine_per_utterance_sums_to_the_corpus_mean():
    from rvqspec.spade.importance import cosine_importance, cosine_per_utterance

    _, talker, cp = tiny()
    text, codes, valid = batch()
    sums, frames = cosine_per_utterance(talker, cp, text, codes, valid)
    assert sums.shape == (4, text.shape[0]) and torch.equal(frames, valid.sum(-1))
    torch.testing.assert_close(torch.tensor(cosine_importance(talker, cp, text, codes, valid), dtype=sums.dtype),
                               sums.sum(-1) / frames.sum())


def test_importance_figure_draws_the_bootstrap_intervals():
    from rvqspec.spade.importance import importance_figure

    res = dict(wli=dict(baseline=dict(wer=0.1), layers=[dict(layer=i, d_wer=0.1 * i, d_cer=0.0) for i in range(3)]),
               cosine=dict(scores=[0.1, 0.2, 0.3]), depth=2, keep=dict(wli=[1, 2], cosine=[1, 2], random=[0, 2]))
    assert importance_figure(res).data[0].error_y.array is None  # no bootstrap: no bars invented
    res["bootstrap"] = dict(wli=dict(scores=[0.0, 0.1, 0.2], ci95=[[-0.1, 0.05], [0.05, 0.2], [0.1, 0.25]],
                                     same_keep_share=0.8))
    fig = importance_figure(res)
    assert fig.data[0].error_y.array == pytest.approx((5.0, 10.0, 5.0))
    assert fig.data[0].error_y.arrayminus == pytest.approx((10.0, 5.0, 10.0))
    assert "80% of resamples" in fig.layout.title.text


def test_bootstrap_importance_says_when_one_clip_is_too_few():
    from rvqspec.spade.importance import bootstrap_importance, importance_figure

    imp = dict(wli=dict(clips=dict(ref_words=[5], ref_chars=[20], base_word_errors=[1], base_char_errors=[2],
                                   word_errors=[[2], [1]], char_errors=[[3], [2]]),
                        baseline=dict(wer=0.2), layers=[dict(layer=i, d_wer=0.0, d_cer=0.0) for i in range(2)]),
               cosine=dict(scores=[0.1, 0.2], per_utterance=dict(sums=[[1.0], [2.0]], frames=[10])))
    b = bootstrap_importance(imp, 1, n=10)
    assert "at least 2" in b["wli"]["skipped"] and "at least 2" in b["cosine"]["skipped"]
    importance_figure(dict(imp, bootstrap=b, depth=1, keep={}))  # draws without intervals
