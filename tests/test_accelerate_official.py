"""`rvqspec.accelerate` on tiny random *official* Qwen3-TTS models (qwen_tts 0.1.1 classes).

What is covered, exactly:
* the patch point itself (`talker.code_predictor.generate`, called as the official talker calls it):
  greedy codes identical; sampled (c1, c2) joint equal in distribution to the exact AR joint
  (chi-square, 8e3 frames in one batched call, fails at p < 1e-6) with a positive control (HF's own
  sampling passes) and negative controls that must fail (wrong temperature, through HF and through
  the accelerated path);
* `Qwen3TTSForConditionalGeneration.generate` end to end (prompt builder, talker sampling, our inner
  loop) on a model saved with `save_pretrained` and reloaded from disk: greedy codes identical;
* the user-facing `qwen_tts.Qwen3TTSModel.generate_custom_voice / generate_voice_design /
  generate_voice_clone` with the text processor and speech tokenizer replaced by fakes
  (tests/_tiny_official.py) and `tts_model_type` switched per method: identical greedy codes
  and the accelerated path really ran;
* `.restore()` / the context manager: the original method is back (no instance attribute, same
  function) and greedy output is unchanged; weights are shared, not copied.
Not covered here: real weights, the real processor and the 12 Hz speech tokenizer (not obtainable).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from _tiny_official import CODEBOOK, LANGUAGE, SPEAKER, tiny_official, wrapper
from rvqspec.core.drafters import PositionOffsets
from rvqspec.real.official_pipeline import AccelerateError, _sampling_from_call, accelerate, load_official_model
from rvqspec.core.sampling import Sampling, probs
from rvqspec.core.tree import SparseTree

ALPHA = 1e-6
# Frames of each chi-square sample (the accelerated path runs rows one by one, ~3 ms a frame). Power
# at 8e3 (measured): a wrong residual rule (verify_walk's _control="full_p": after a rejection the
# next code drawn from the full p) gives p = 2.4e-102 (1.7e-248 at 2e4), wrong temperature 0.6
# through the accelerated path p ~ 1e-74 at 2e3; the correct decoder p = 0.38.
N_FRAMES = 8_000
N_HOT = 2_000  # frames of the accelerated wrong-temperature control
TREES = {"chain3": SparseTree.chain(3), "wide": SparseTree([(0,), (1,), (2,), (0, 0), (1, 0), (0, 0, 0)])}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny official model saved in the official layout and reloaded from that directory."""
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("official")
    tiny_official(seed=0).save_pretrained(path)
    return path


@pytest.fixture()
def model(saved):
    return load_official_model(saved)


def prompt_ids(seed: int, n: int = 9) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # official layout: <|im_start|> assistant \n  text...  <|im_end|> \n <|im_start|> assistant \n
    body = torch.randint(3, 58, (1, n), generator=g)
    return [torch.cat([torch.tensor([[58, 1, 0]]), body, torch.tensor([[59, 0, 58, 1, 0]])], 1)]


def talker_generate(model, ids, **kw):
    codes, _ = model.generate(input_ids=ids, languages=[LANGUAGE], speakers=[SPEAKER], max_new_tokens=10,
                              do_sample=False, subtalker_dosample=False, non_streaming_mode=True, **kw)
    return codes


def frame_inputs(model, B: int, seed: int, c0: int = 3):
    g = torch.Generator().manual_seed(seed)
    th = torch.randn(1, 1, model.talker.config.hidden_size, generator=g)
    with torch.no_grad():
        x = torch.cat([th, model.talker.get_input_embeddings()(torch.tensor([[c0]]))], 1)  # (1, 2, E)
    return x.expand(B, 2, -1).contiguous()


def predictor_call(model, x, **kw):
    """The code-predictor call exactly as the official talker makes it."""
    with torch.no_grad():
        return model.talker.code_predictor.generate(inputs_embeds=x, max_new_tokens=15, output_hidden_states=True,
                                                    return_dict_in_generate=True, **kw).sequences


@pytest.mark.parametrize("tree", sorted(TREES))
def test_greedy_talker_generate_identical(model, tree) -> None:
    for seed in (1, 2):
        ref = talker_generate(model, prompt_ids(seed))
        with accelerate(model, None, TREES[tree]) as h:
            got = talker_generate(model, prompt_ids(seed))
        assert len(ref) == len(got) == 1 and ref[0].shape[0] > 1
        assert torch.equal(ref[0], got[0])
        assert h.stats.fallbacks == 0 and h.stats.frames == ref[0].shape[0]
        assert h.stats.model_calls <= 15 * h.stats.frames and h.stats.tokens_per_call >= 1.0


def test_greedy_predictor_batch_identical(model) -> None:
    x = torch.cat([frame_inputs(model, 1, s, c0=s % CODEBOOK) for s in range(12)])  # (12, 2, E) distinct rows
    ref = predictor_call(model, x, do_sample=False)
    with accelerate(model, PositionOffsets.zeros(3, 32, CODEBOOK), TREES["wide"]) as h:
        got = predictor_call(model, x, do_sample=False)
    assert torch.equal(ref, got) and h.stats.frames == 12


def test_weights_shared_not_copied(model) -> None:
    with accelerate(model) as h:
        off = dict(model.talker.code_predictor.named_parameters())
        for name, p in h.code_predictor.named_parameters():
            assert p.data_ptr() == off[name].data_ptr(), name
        assert h.code_predictor.c0_embedding is model.talker.get_input_embeddings()


def test_restore_gives_back_the_original(model) -> None:
    cp = model.talker.code_predictor
    original = type(cp).generate
    assert "generate" not in cp.__dict__
    ref = talker_generate(model, prompt_ids(3))
    h = accelerate(model, None, TREES["chain3"])
    assert "generate" in cp.__dict__  # the instance attribute shadows the class method
    with pytest.raises(AccelerateError, match="already accelerated"):
        accelerate(model)
    h.restore()
    h.restore()  # idempotent
    assert "generate" not in cp.__dict__ and cp.generate.__func__ is original
    assert torch.equal(talker_generate(model, prompt_ids(3))[0], ref[0])
    frames = h.stats.frames
    talker_generate(model, prompt_ids(3))
    assert h.stats.frames == frames == 0  # nothing ran through the restored handle
    with accelerate(model) as h2:  # context-manager form restores on exit, even after an error
        with pytest.raises(RuntimeError):
            with h2:
                raise RuntimeError("boom")
    assert "generate" not in cp.__dict__


def test_wrapper_generate_methods(model) -> None:
    """The three user-facing methods reach the patched call (fake processor / speech tokenizer)."""
    from qwen_tts import VoiceClonePromptItem

    w = wrapper(model)
    greedy = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=8)
    g = torch.Generator().manual_seed(4)
    item = VoiceClonePromptItem(ref_code=torch.randint(0, CODEBOOK, (5, 16), generator=g),
                                ref_spk_embedding=torch.randn(32, generator=g), x_vector_only_mode=False,
                                icl_mode=True, ref_text="hi there")
    calls = {
        "custom_voice": lambda: w.generate_custom_voice("hello world", speaker=SPEAKER, language=LANGUAGE, **greedy),
        "voice_design": lambda: w.generate_voice_design("hello world", instruct="calm voice", language=LANGUAGE,
                                                        **greedy),
        "base": lambda: w.generate_voice_clone("hello world", language=LANGUAGE, voice_clone_prompt=[item], **greedy),
    }
    for kind, call in calls.items():
        model.tts_model_type = kind  # the wrappers gate on this attribute only
        ref, sr = call()
        with accelerate(w, None, TREES["wide"]) as h:
            got, sr2 = call()
        assert sr == sr2 and len(ref) == len(got) == 1
        np.testing.assert_array_equal(ref[0], got[0])
        assert h.stats.frames > 0 and h.stats.fallbacks == 0, kind


def test_sampling_arguments_and_fallbacks(model) -> None:
    gc = model.talker.code_predictor.generation_config
    assert _sampling_from_call(gc, True, 50, 1.0, 0.9) == Sampling(True, 50, 1.0, 0.9)
    assert _sampling_from_call(gc, False, 50, 1.0, 0.9) == Sampling.greedy()
    assert _sampling_from_call(gc, True, None, None, None) == Sampling(True, 50, 1.0, 1.0)  # HF defaults
    x = frame_inputs(model, 2, seed=5)
    with accelerate(model) as h:
        # a call shape we do not reproduce goes to the original generate, and is counted
        with torch.no_grad():
            model.talker.code_predictor.generate(inputs_embeds=x, max_new_tokens=4, do_sample=False)
        assert h.stats.fallbacks == 1 and "max_new_tokens=4" in h.stats.fallback_reasons
        gc.repetition_penalty = 1.3
        try:
            predictor_call(model, x, do_sample=False)
        finally:
            gc.repetition_penalty = None
        assert h.stats.fallbacks == 2 and h.stats.frames == 0
    with pytest.raises(AccelerateError, match="not an official"):
        accelerate(torch.nn.Linear(2, 2))


def test_seed_policy(model) -> None:
    x = frame_inputs(model, 6, seed=6)
    samp = dict(do_sample=True, top_k=8, top_p=1.0, temperature=0.9)
    runs = []
    for _ in range(2):
        with accelerate(model, seed=11):
            runs.append(predictor_call(model, x, **samp))
    assert torch.equal(runs[0], runs[1])  # dedicated generator: reproducible
    glob = []
    for _ in range(2):
        torch.manual_seed(5)
        with accelerate(model):
            glob.append(predictor_call(model, x, **samp))
    assert torch.equal(glob[0], glob[1])  # default: the global generator, as the official code


# ---- distribution ------------------------------------------------------------------------------
def peaked_tail_model(const: float = 20.0):
    """c1, c2 informative (c2 depends on c1), c3..c15 nearly deterministic: a depth-14 chain then
    accepts the tail in one round, so each frame costs about 3 model calls (the per-call host
    overhead, not the arithmetic, bounds this test's run time). Input embeddings get unit scale plus
    a constant `const` in feature 0, which keeps feature 0 of the final hidden state large and
    positive; heads 2..14 read mostly that feature (a fixed, peaked distribution), heads 0..1 never
    do (an input-dependent one)."""
    m = tiny_official(seed=7, head_scale=1.0)
    cp = m.talker.code_predictor
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for e in [m.talker.model.codec_embedding, *cp.model.codec_embedding]:
            e.weight.mul_(50.0)
            e.weight[:, 0] += const
        for k, head in enumerate(cp.lm_head):
            if k < 2:
                head.weight.mul_(60.0)
                head.weight[:, 0] = 0
            else:
                head.weight[:, 0] = 5 * torch.randn(CODEBOOK, generator=g)
    return m


def exact_joint(model, x1: torch.Tensor, sampling: Sampling) -> np.ndarray:
    """Exact AR p(c1, c2) (V, V) from the official forward: prefill -> c1, then every c1 -> c2."""
    cp = model.talker.code_predictor
    V = CODEBOOK
    with torch.no_grad():
        p1 = probs(cp(inputs_embeds=x1).logits[:, -1], sampling)[0]  # (V,)
        e1 = cp.get_input_embeddings()[0](torch.arange(V)).view(V, 1, -1)  # (V, 1, E)
        x3 = torch.cat([x1.expand(V, 2, -1), e1], 1)  # (V, 3, E)
        p2 = probs(cp(inputs_embeds=x3).logits[:, -1], sampling)  # (V, V) rows: c1
    return (p1[:, None] * p2).double().numpy()


def gof_p(codes: torch.Tensor, joint: np.ndarray) -> float:
    """Chi-square goodness of fit of (c1, c2) counts to the exact joint; cells with expected count
    < 5 pooled; an observed cell of exact probability 0 fails outright (p = 0)."""
    V = joint.shape[0]
    counts = torch.bincount(codes[:, 0] * V + codes[:, 1], minlength=V * V).double().numpy()
    p = joint.ravel()
    if counts[p == 0].sum() > 0:
        return 0.0
    exp = p * counts.sum()
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    ex = np.append(exp[big], exp[~big].sum())
    keep = ex > 0
    return float(stats.chisquare(obs[keep], ex[keep] * obs[keep].sum() / ex[keep].sum()).pvalue)


@pytest.mark.slow
def test_sampled_codes_equal_in_distribution() -> None:
    torch.set_num_threads(1)
    m = peaked_tail_model()
    samp = Sampling(do_sample=True, top_k=8, top_p=1.0, temperature=0.9)
    x1 = frame_inputs(m, 1, seed=9)
    with torch.no_grad():
        x1[:, 0, 0] += 20.0  # the talker hidden carries the same constant feature
    joint = exact_joint(m, x1, samp)
    assert (joint > 1e-3).sum() >= 30, "degenerate joint: the test would have no power"
    x = x1.expand(N_FRAMES, 2, -1).contiguous()
    kw = dict(do_sample=True, top_k=samp.top_k, top_p=samp.top_p, temperature=samp.temperature)
    # positive control: HF's own AR sampling (global RNG) fits the exact joint
    torch.manual_seed(0)
    p_ref = gof_p(predictor_call(m, x, **kw), joint)
    # negative control at the same sample size: another temperature must be detected
    p_hot_ref = gof_p(predictor_call(m, x, **{**kw, "temperature": 0.6}), joint)
    K = 14
    with accelerate(m, PositionOffsets.zeros(K, 32, CODEBOOK), SparseTree.chain(K), seed=1) as h:
        p_spec = gof_p(predictor_call(m, x, **kw), joint)
        tpc = h.stats.tokens_per_call
        # negative control through the accelerated path (2e3 frames: expected chi-square ~400 here)
        p_hot = gof_p(predictor_call(m, x[:N_HOT], **{**kw, "temperature": 0.6}), joint)
    print(f"chi-square p: HF AR {p_ref:.3g}, accelerated {p_spec:.3g} ({tpc:.2f} tokens/call); "
          f"negative controls T=0.6: HF {p_hot_ref:.3g}, accelerated {p_hot:.3g}")
    assert p_ref > ALPHA
    assert p_spec > ALPHA
    assert tpc > 2.0  # the tail really was accepted speculatively
    assert p_hot_ref < ALPHA and p_hot < ALPHA
