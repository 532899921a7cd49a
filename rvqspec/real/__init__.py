"""Real Qwen3-TTS checkpoints: the official package's import shim, acceleration of the official
pipeline, real datasets, ASR adapters, distributed jobs and the real-weights WER evaluation."""
