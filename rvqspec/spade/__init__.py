"""SPADE (seed 001): structured depth pruning and multi-level distillation of the talker.

- `trace`: a layer-by-layer talker forward returning per-layer states and attention maps;
- `importance`: WER-based layer importance (WLI), the cosine criterion and a random baseline, with
  bootstrap intervals, ranking stability and a plot;
- `prune`: `prune_talker(talker, keep_layers)` and selection to a target depth;
- `distill`: `DistillConfig`, Skew KL, dynamic target selection, `distill`, `save_student`;
- `evaluate`: WER/CER, parameters, RTF, latency, memory; the full-size projection;
- `experiment`: the whole study in one call (`run_experiment`);
- `ablation`: pruning ratios and per-term ablations with paired intervals (`run_ablation`);
- `combined`: the pruned talker with the speculative code predictor, timed interleaved.
"""
from rvqspec.spade.ablation import AblationConfig, keep_count, run_ablation
from rvqspec.spade.combined import combined_benchmark, projection_from_acceptance
from rvqspec.spade.distill import (
                                   DistillConfig,
                                   DistillResult,
                                   distill,
                                   distill_losses,
                                   kd_terms,
                                   save_student,
                                   skew_kl,
                                   student_code_predictor,
                                   target_layers,
)
from rvqspec.spade.evaluate import (
                                   EvalConfig,
                                   evaluate_models,
                                   evaluate_variant,
                                   project_full_size,
                                   project_variants,
                                   results_figure,
                                   timing_benchmark,
)
from rvqspec.spade.importance import (
                                   ImportanceConfig,
                                   bootstrap_importance,
                                   cosine_importance,
                                   cosine_importance_corpus,
                                   importance_figure,
                                   layer_importance,
                                   random_importance,
                                   select_by,
                                   wli,
)
from rvqspec.spade.prune import count_parameters, default_depth, prune_talker, select_layers
from rvqspec.spade.trace import Trace, trace_talker

__all__ = [
    "AblationConfig", "keep_count", "run_ablation", "combined_benchmark", "projection_from_acceptance",
    "bootstrap_importance", "random_importance",
    "DistillConfig", "DistillResult", "distill", "distill_losses", "kd_terms", "save_student", "skew_kl",
    "student_code_predictor", "target_layers", "EvalConfig", "evaluate_models", "evaluate_variant",
    "project_full_size", "project_variants", "results_figure", "timing_benchmark", "ImportanceConfig",
    "cosine_importance", "cosine_importance_corpus", "importance_figure", "layer_importance", "select_by", "wli",
    "count_parameters", "default_depth", "prune_talker", "select_layers", "Trace", "trace_talker",
]
