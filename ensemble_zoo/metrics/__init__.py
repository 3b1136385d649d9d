"""Uncertainty, calibration, OOD, selective-prediction, retrieval and
generated-answer metrics.

Plain functions on arrays (NumPy, float64, exact sorting-based
computations) and `keras.metrics.Metric` classes for
`compile(metrics=...)`.

Example:

```python
import numpy as np
import ensemble_zoo

rng = np.random.default_rng(0)
id_scores, ood_scores = rng.normal(0, 1, 500), rng.normal(1, 1, 300)
ensemble_zoo.metrics.ood_auroc(id_scores, ood_scores)  # ~0.76
```
"""

from ensemble_zoo.metrics.calibration_metrics import BrierScore
from ensemble_zoo.metrics.calibration_metrics import ExpectedCalibrationError
from ensemble_zoo.metrics.calibration_metrics import NegativeLogLikelihood
from ensemble_zoo.metrics.claim_estimators import claim_conditioned_probability
from ensemble_zoo.metrics.classification import NLL_EPSILON
from ensemble_zoo.metrics.classification import accuracy
from ensemble_zoo.metrics.classification import adaptive_calibration_error
from ensemble_zoo.metrics.classification import brier_score
from ensemble_zoo.metrics.classification import calibration_bins
from ensemble_zoo.metrics.classification import expected_calibration_error
from ensemble_zoo.metrics.classification import maximum_calibration_error
from ensemble_zoo.metrics.classification import negative_log_likelihood
from ensemble_zoo.metrics.distribution_estimators import boosted_probability
from ensemble_zoo.metrics.distribution_estimators import fisher_rao
from ensemble_zoo.metrics.distribution_estimators import renyi_negentropy
from ensemble_zoo.metrics.distribution_estimators import self_certainty
from ensemble_zoo.metrics.diversity import disagreement
from ensemble_zoo.metrics.diversity import entropy
from ensemble_zoo.metrics.diversity import mutual_information
from ensemble_zoo.metrics.ensemble_accuracy import EnsembleAccuracy
from ensemble_zoo.metrics.ensembles_of_ensembles import ensemble_of_ensembles_mutual_information
from ensemble_zoo.metrics.ensembles_of_ensembles import weighted_mutual_information
from ensemble_zoo.metrics.generation import accuracy_rejection_curve
from ensemble_zoo.metrics.generation import answer_aurc
from ensemble_zoo.metrics.generation import answer_auroc
from ensemble_zoo.metrics.generation import prediction_rejection_ratio
from ensemble_zoo.metrics.lexical_similarity import lexical_similarity
from ensemble_zoo.metrics.lexical_similarity import rouge_l
from ensemble_zoo.metrics.ood import fpr_at_95_tpr
from ensemble_zoo.metrics.ood import ood_aupr
from ensemble_zoo.metrics.ood import ood_auroc
from ensemble_zoo.metrics.retrieval import nearest_neighbour_correct
from ensemble_zoo.metrics.retrieval import r_auroc
from ensemble_zoo.metrics.retrieval import recall_at_one
from ensemble_zoo.metrics.retrieval import recall_at_one_with_rejection
from ensemble_zoo.metrics.sampled_answer_estimators import cocoa
from ensemble_zoo.metrics.sampled_answer_estimators import monte_carlo_sequence_entropy
from ensemble_zoo.metrics.sampled_answer_estimators import sar
from ensemble_zoo.metrics.sampled_answer_estimators import semantic_density
from ensemble_zoo.metrics.sampled_answer_estimators import sentence_sar
from ensemble_zoo.metrics.sampled_answer_estimators import token_sar
from ensemble_zoo.metrics.selective import aurc
from ensemble_zoo.metrics.selective import risk_coverage_curve
from ensemble_zoo.metrics.semantic_sets import number_of_semantic_sets
from ensemble_zoo.metrics.semantic_sets import semantic_classes
from ensemble_zoo.metrics.semantic_sets import semantic_entropy
from ensemble_zoo.metrics.sequence_uncertainty import sequence_uncertainty
from ensemble_zoo.metrics.similarity_estimators import degree_matrix
from ensemble_zoo.metrics.similarity_estimators import eccentricity
from ensemble_zoo.metrics.similarity_estimators import eigenscore
from ensemble_zoo.metrics.similarity_estimators import kernel_language_entropy
from ensemble_zoo.metrics.similarity_estimators import laplacian_eigenvalue_sum
from ensemble_zoo.metrics.similarity_estimators import luq
from ensemble_zoo.metrics.white_box_estimators import attention_score
from ensemble_zoo.metrics.white_box_estimators import conditional_pointwise_mutual_information
from ensemble_zoo.metrics.white_box_estimators import contextualized_sequence_likelihood
from ensemble_zoo.metrics.white_box_estimators import maximum_token_probability
from ensemble_zoo.metrics.white_box_estimators import pointwise_mutual_information
from ensemble_zoo.metrics.white_box_estimators import rauq
