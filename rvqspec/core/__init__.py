"""The bottom layer: the Qwen3-TTS model core and the speculative method (config, model, sampling,
tree, verification, drafters, the speculative and compiled code predictors, checkpoints, the frame
loop, and the project's defaults). It imports nothing else from rvqspec."""
