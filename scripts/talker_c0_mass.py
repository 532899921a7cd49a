"""Where does the talker's sampled c0 go? (issue 14, intelligibility; docs/design.md "Where the
talker's c0 mass goes")

On the v4 world the talker's sampled c0 costs about 8.5 points of CER over the true c0
(docs/measurements/world_v4/diagnose_en.json), and it names the corpus's c0 on 70% of frames. A c0
cell is nearly a sound (level 0 is phonetic), so a different code of the same sound costs little and
a code of another sound costs a phoneme. This reads the teacher-forced talker (true history) on
English eval sentences and splits its deployed law (rvqspec.core.sampling.Sampling: top-k 50,
T = 0.9) over the codebook into: the true code, other codes of the frame's sound, codes of other
sounds; separately for frames inside one phoneme and frames holding a boundary.

A frame's sound is the phoneme at its centre (`rvqspec.mini.phonemes.centre_phoneme`); a code's sound is the majority sound of the training
frames (`model_train`, English) it takes. `true_code_same_sound` is the share of frames whose own
corpus code has the frame's sound: the ceiling of the measure (codes are not pure).

usage: python scripts/talker_c0_mass.py [--model DIR] [--corpus DIR] [--sentences 40] --out JSON
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.frame_loop import codec_vocab_mask, teacher_forced_talker
from rvqspec.core.jsonfile import portable_path, write_json_atomic
from rvqspec.core.sampling import Sampling, probs
from rvqspec.mini.corpus import load_corpus
from rvqspec.mini.phonemes import PhonemeTokenizer, centre_phoneme
from rvqspec.mini.pipeline import MiniTTS, default_data_dir


def boundary(token: str) -> bool:
    return ":" in token and len(set(token.split(":", 1)[1].split(" "))) > 1


def code_sounds(corpus, tok: PhonemeTokenizer, size: int) -> tuple[np.ndarray, float]:
    """(K,) majority sound id per c0 code over English model_train frames, and the codes' mean purity."""
    ds = corpus["model_train"].filter(lambda l: l == "en", input_columns="language", keep_in_memory=True)
    counts: dict[int, Counter] = defaultdict(Counter)
    for row in ds:
        sounds = [centre_phoneme(s) for s in tok.decode(row["phoneme_frames"])]
        for c0, s in zip(np.asarray(row["codes"])[:, 0], sounds):
            counts[int(c0)][s] += 1
    out = np.array([counts[k].most_common(1)[0][0] if counts[k] else "" for k in range(size)], dtype=object)
    total = sum(sum(c.values()) for c in counts.values())
    purity = sum(c.most_common(1)[0][1] for c in counts.values() if c) / total
    return out, float(purity)


@torch.inference_mode()
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="mini model dir (default: data/mini/model)")
    ap.add_argument("--corpus", default=None, help="corpus with codes (default: data/mini/corpus)")
    ap.add_argument("--tokenizer", default=None, help="phoneme tokenizer JSON (default: data/mini's)")
    ap.add_argument("--sentences", type=int, default=40)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    data = default_data_dir()
    tts = MiniTTS.load(data, model_dir=args.model)
    corpus_dir = Path(args.corpus) if args.corpus else data / "corpus"
    corpus = load_corpus(corpus_dir)
    tok = PhonemeTokenizer.load(args.tokenizer or data / "phoneme_tokenizer.json")
    size = tts.codebook_size
    sound_of_code, purity = code_sounds(corpus, tok, size)
    sampling = Sampling()
    mask = codec_vocab_mask(tts.talker, size)  # (V,)
    ev = corpus["eval"].filter(lambda l: l == "en", input_columns="language", keep_in_memory=True)
    ev = ev.select(range(min(args.sentences, len(ev))))
    rows = defaultdict(list)  # kind -> per-frame (p_true, p_same_other, p_other, greedy_true, greedy_same, code_same)
    for row in ev:
        text = torch.as_tensor(row["phoneme_frames"], dtype=torch.long)  # (T,)
        codes = torch.as_tensor(np.asarray(row["codes"]), dtype=torch.long)  # (T, 16)
        _, logits = teacher_forced_talker(tts.talker, tts.code_predictor, text.view(1, -1), codes.view(1, -1, 16))
        p = probs(logits[0] + mask, sampling)[:, :size].double().numpy()  # (T, K) the deployed law
        greedy = logits[0, :, :size].argmax(-1).numpy()  # (T,)
        for t, s in enumerate(tok.decode(row["phoneme_frames"])):
            sound, c = centre_phoneme(s), int(codes[t, 0])
            same = sound_of_code == sound  # (K,)
            p_same = float(p[t, same].sum())
            p_true = float(p[t, c])
            rec = (p_true, p_same - (p_true if same[c] else 0.0), 1.0 - p_same - (0.0 if same[c] else p_true),
                   float(greedy[t] == c), float(same[greedy[t]]), float(same[c]))
            rows["all"].append(rec)
            rows["boundary" if boundary(s) else "steady"].append(rec)
    keys = ("p_true_code", "p_other_codes_same_sound", "p_other_sounds", "greedy_is_true_code",
            "greedy_has_frame_sound", "true_code_same_sound")
    table = {kind: dict(frames=len(v), **{k: round(float(m), 4) for k, m in zip(keys, np.mean(v, axis=0))})
             for kind, v in rows.items()}
    result = dict(model=str(args.model or "data/mini/model"), corpus=portable_path(corpus_dir),
                  sentences=len(ev), sampling=f"top-k {sampling.top_k}, T = {sampling.temperature}",
                  code_purity=round(purity, 4), frames=table,
                  command="python scripts/talker_c0_mass.py " + " ".join(argv or sys.argv[1:]))
    write_json_atomic(args.out, result, indent=2)
    print(result)
    return result


if __name__ == "__main__":
    main()
