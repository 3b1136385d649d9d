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
        backbone: a `BatchEnsembleBertBackbone` built with the arguments
            below, or a built `keras_hub.models.BertBackbone`: the
            classifier then runs a new, converted backbone with its config
            and weights; `backbone` is not changed.
        num_classes: int.
        num_members: int. Defaults to `4`.
        dropout: float, dropout before the head. Defaults to `0.1`
            (keras-hub's `BertTextClassifier`).
        fast_weight_initializer: `"normal"` (default) or `"random_sign"`;
            see `ez.layers.BatchEnsembleDense`.
        fast_weight_stddev: float. Defaults to `0.5`.
        seed: optional int for the fast weights.
            The method arguments (`num_members`, `fast_weight_initializer`,
            `fast_weight_stddev`, `seed`) left `None` are the backbone's
            when it is a BatchEnsemble backbone, else the defaults named
            here.
        preprocessor: optional `keras_hub.models.TextClassifierPreprocessor`.
        member_batching: `"auto"` (default), `"tiled"` or `"sequential"`:
            inference in one pass or one per member (`MemberTiledClassifier`).
        **kwargs: other `keras_hub.models.Task` arguments.

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    bert = keras_hub.models.BertBackbone(
        vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=12,
    )
    model = ez.models.BatchEnsembleTextClassifier.from_keras_hub(
        bert, num_members=4, num_classes=2, seed=0
    )
    inputs = {
        "token_ids": np.ones((2, 12), "int32"),
        "segment_ids": np.zeros((2, 12), "int32"),
        "padding_mask": np.ones((2, 12), "int32"),
    }
    model.predict(inputs, verbose=0).shape  # (2, 4, 2)
    ```
    """

    backbone_cls = BatchEnsembleBertBackbone

    def __init__(
        self,
        backbone,
        num_classes,
        num_members=None,
        dropout=0.1,
        fast_weight_initializer=None,
        fast_weight_stddev=None,
        seed=None,
        preprocessor=None,
        member_batching="auto",
        **kwargs,
    ):
        # Rows of member m use W * outer(r_m, s_m) and b_m in every projection.
        super().__init__(**self._constructor_arguments(locals()))

    _plain_task = plain_bert_classifier
