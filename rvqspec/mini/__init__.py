"""The embedded mini world: a small, fully synthetic stand-in for Qwen3-TTS's data and codec.

text (sentences in six languages) -> speech (espeak-ng) -> phonemes (frame tokens) -> corpus
(Hugging Face datasets on disk) -> codec (12.5 Hz, 16 residual k-means codebooks) -> build
(`rvqspec mini build`, manifest with checksums). Submodules import heavy libraries lazily.
"""
