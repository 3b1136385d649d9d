import keras
import keras_hub

from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BatchEnsembleBertBackbone
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import BatchEnsembleTask
from ensemble_zoo.models.member_tiled_classifier import MemberTiledClassifier
from ensemble_zoo.models.text_inputs import TextInputsMixin
from ensemble_zoo.models.text_inputs import plain_bert_classifier


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleTextClassifier(
    TextInputsMixin, BatchEnsembleTask, MemberTiledClassifier, keras_hub.models.TextClassifier
):
    """BatchEnsemble on a keras-hub BERT: one shared network, rank-1 members.

    The text counterpart of `BatchEnsembleImageClassifier`: every attention
    projection and both feed-forward layers of every `TransformerEncoder`
    become `BatchEnsembleDense` layers (shared `W`, per-member `r_m`,
    `s_m`, `b_m`), and so does the classifier head; the embeddings, layer
    norms and the pooler (a layer of BERT's functional graph) stay shared.
    `call` takes keras-hub's BERT inputs, a dict of int `(batch, tokens)`
    tensors `token_ids`, `segment_ids` and `padding_mask`, tiles each once
    to `(members * batch, tokens)` and returns member logits `(batch,
    members, classes)`.

    Args:
        backbone: a `BatchEnsembleBertBackbone`, or a built
            `keras_hub.models.BertBackbone`: the classifier then runs a new,
            converted backbone with its config and weights; `backbone` is
            not changed.
        num_classes: int.
        num_members: int. Defaults to `4`.
        fast_weight_initializer: `"normal"` (default) or `"random_sign"`.
            Keyword-only, as are the arguments after it.
        fast_weight_stddev: float. Defaults to `0.5`.
        seed: optional int for the fast weights. The method arguments left
            `None` are the backbone's, as for `BatchEnsembleImageClassifier`.
        **kwargs: `MemberTiledClassifier`'s `preprocessor` (a
            `keras_hub.models.TextClassifierPreprocessor`), `dropout`
            (default `0.1`, keras-hub's `BertTextClassifier`'s) and
            `member_batching`, and other `keras_hub.models.Task` arguments.

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    classifier = keras_hub.models.BertTextClassifier(
        keras_hub.models.BertBackbone(
            vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=6,
        ),
        num_classes=3,
        preprocessor=None,
    )
    # Every member starts from the classifier's weights, head included.
    model = ez.models.BatchEnsembleTextClassifier.from_keras_hub(
        classifier, num_members=2, seed=0
    )
    tokens = {"token_ids": np.array([[2, 7, 9, 3, 0, 0]])}
    tokens["segment_ids"] = np.zeros_like(tokens["token_ids"])
    tokens["padding_mask"] = tokens["token_ids"] > 0
    model.predict(tokens, verbose=0).shape  # (1, 2, 3)
    model.member_model(1).predict(tokens, verbose=0).shape  # (1, 3)
    ```
    """

    backbone_cls = BatchEnsembleBertBackbone

    _plain_task = plain_bert_classifier
