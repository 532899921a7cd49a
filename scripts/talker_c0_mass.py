"""Where does the talker's sampled c0 go? (issue 14, intelligibility; docs/design.md "Where the
talker's c0 mass goes")

On the v4 world the talker's sampled c0 costs about 8.5 points of CER over the true c0
(docs/measurements/world_v4/diagnose_en.json), and it names the corpus's c0 on 70% of frames. A c0
cell is nearly a sound (level 0 is phonetic), so a different code of the same sound costs little and
a code of another sound costs a phoneme. This reads the teacher-forced talker (true history) on
English eval sentences and splits its deployed law (rvqspec.core.sampling.Sampling: top-k 50,
T = 0.9) over the codebook into: the true code, other codes of the frame's sound, codes of other
sounds; separately for frames inside one phoneme and frames holding a boundary. The mass on other
sounds is split again into the sounds of the frames within `NEIGHBOURS` frames either side (a
boundary placed a frame early or late) and the rest (a sound the text does not put there).

A frame's sound is the phoneme at its centre (`rvqspec.mini.phonemes.centre_phoneme`); a code's sound is the majority sound of the training
frames (`model_train`, English) it takes. `true_code_same_sound` is the share of frames whose own
corpus code has the frame's sound: the ceiling of the measure (codes are not pure). The soft pair
reads each code as its training frames' mix of sounds, P(sound | code), instead of its majority:
`soft_law_frame_sound` is the chance that a code drawn from the law is a frame of the frame's sound,
`soft_true_code_frame_sound` the same for the corpus's code (the ceiling); their gap is the sound
the sampled c0 loses, free of the majority labels' noise.

usage: python scripts/talker_c0_mass.py [--model DIR] [--corpus DIR] [--sentences 40] --out JSON
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from rvqspec.core.jsonfile import portable_path, write_json_atomic
from rvqspec.core.sampling import Sampling
from rvqspec.mini.corpus import in_language, load_corpus
from rvqspec.mini.phonemes import PhonemeTokenizer, centre_phoneme
from rvqspec.mini.pipeline import MiniTTS, default_data_dir
from rvqspec.mini.sound_groups import code_sound_counts


NEIGHBOURS = 2  # frames either side (160 ms): about one phoneme at espeak-ng's rate


def boundary(token: str) -> bool:
    return ":" in token and len(set(token.split(":", 1)[1].split(" "))) > 1


def code_sounds(corpus, tok: PhonemeTokenizer, size: int) -> tuple[np.ndarray, float, np.ndarray, list[str]]:
    """Over English model_train frames: (K,) majority sound per c0 code, the codes' mean purity, and
    (K, S) P(sound | code) over the S sounds listed (a code no frame takes: uniform)."""
    ds = in_language(corpus["model_train"])
    counts = code_sound_counts(ds["phoneme_frames"], ds["codes"], tok.tokens, size)  # K Counters
    out = np.array([counts[k].most_common(1)[0][0] if counts[k] else "" for k in range(size)], dtype=object)
    total = sum(sum(c.values()) for c in counts)
    purity = sum(c.most_common(1)[0][1] for c in counts if c) / total
    sounds = sorted({snd for c in counts for snd in c})
    index = {snd: i for i, snd in enumerate(sounds)}
    given = np.full((size, len(sounds)), 1.0 / len(sounds))  # (K, S)
    for k, c in enumerate(counts):
        n = sum(c.values())
        if n:
            given[k] = 0.0
            for snd, m in c.items():
                given[k, index[snd]] = m / n
    return out, float(purity), given, sounds


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
    sound_of_code, purity, sound_given_code, sounds = code_sounds(corpus, tok, size)
    sound_index = {snd: i for i, snd in enumerate(sounds)}
    sampling = Sampling()
    ev = in_language(corpus["eval"])
    ev = ev.select(range(min(args.sentences, len(ev))))
    rows = defaultdict(list)  # kind -> per-frame records in the order of `keys` below
    for row in ev:
        law, greedy = tts.c0_law(row["phoneme_frames"], row["codes"], sampling)
        p, greedy = law.numpy(), greedy.numpy()  # (T, K) the deployed law, (T,)
        codes = np.asarray(row["codes"])  # (T, 16)
        frame_tokens = tok.decode(row["phoneme_frames"])
        frame_sounds = [centre_phoneme(s) for s in frame_tokens]
        for t, s in enumerate(frame_tokens):
            sound, c = frame_sounds[t], int(codes[t, 0])
            same = sound_of_code == sound  # (K,)
            near = set(frame_sounds[max(0, t - NEIGHBOURS): t + NEIGHBOURS + 1]) - {sound}
            p_near = float(p[t, np.isin(sound_of_code, list(near))].sum()) - (p[t, c] if sound_of_code[c] in near else 0.0)
            p_same = float(p[t, same].sum())
            p_true = float(p[t, c])
            p_other = 1.0 - p_same - (0.0 if same[c] else p_true)
            # soft: the chance that a code drawn from the law (or the corpus's code) is a frame of this sound
            col = sound_given_code[:, sound_index[sound]] if sound in sound_index else np.zeros(size)  # (K,)
            rec = (p_true, p_same - (p_true if same[c] else 0.0), p_other, float(p_near), p_other - float(p_near),
                   float(greedy[t] == c), float(same[greedy[t]]), float(same[c]),
                   float(p[t] @ col), float(col[c]))
            rows["all"].append(rec)
            rows["boundary" if boundary(s) else "steady"].append(rec)
    keys = ("p_true_code", "p_other_codes_same_sound", "p_other_sounds", "p_neighbour_sounds", "p_distant_sounds",
            "greedy_is_true_code",
            "greedy_has_frame_sound", "true_code_same_sound", "soft_law_frame_sound", "soft_true_code_frame_sound")
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
