"""Evaluation harness: `evaluate` any zoo classifier, reports, plots and
the preset leaderboard behind `ensemble-zoo compare`."""

from ensemble_zoo.evaluation import plots
from ensemble_zoo.evaluation.eliciting_prompt import eliciting_attention
from ensemble_zoo.evaluation.evaluate import evaluate
from ensemble_zoo.evaluation.generation_evaluation import GenerationReport
from ensemble_zoo.evaluation.generation_evaluation import evaluate_generation
from ensemble_zoo.evaluation.preset_evaluation import Leaderboard
from ensemble_zoo.evaluation.preset_evaluation import compare_presets
from ensemble_zoo.evaluation.preset_evaluation import evaluate_preset
from ensemble_zoo.evaluation.preset_evaluation import trained_presets
from ensemble_zoo.evaluation.prompt_free_scoring import prompt_free_log_probs
from ensemble_zoo.evaluation.report import EvaluationReport
from ensemble_zoo.evaluation.sentence_similarity import EncoderSimilarity
