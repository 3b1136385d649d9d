"""Which presets `ensemble-zoo compare` ranks (import-free: the command's
`list` reads it without importing Keras).

The leaderboard ranks the trained ensemble classifiers: every preset whose
metadata says `kind: "trained"` and whose task is a keras-hub
`ImageClassifier` or `TextClassifier`, except the loss-prediction head
(`method: "loss_prediction"`, one model with a learned uncertainty, not an
ensemble; `ensemble-zoo evaluate` reports it). The language-model presets
of the arithmetic task have no classifier task and are evaluated on their
answers. A test checks that this rule picks exactly the presets that load
as `ensemble_zoo.models.EnsembleClassifier`.
"""

#: The keras-hub tasks of a ranked preset (metadata `tasks`).
CLASSIFIER_TASKS = ("ImageClassifier", "TextClassifier")


def is_compared(metadata):
    """Whether a preset, given its parsed `metadata.json`, is on the
    leaderboard of `ensemble-zoo compare`."""
    return (
        metadata.get("kind") == "trained"
        and metadata.get("method") != "loss_prediction"
        and any(task in CLASSIFIER_TASKS for task in metadata.get("tasks", ()))
    )
