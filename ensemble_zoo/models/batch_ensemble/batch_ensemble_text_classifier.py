import keras
import keras_hub

from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BatchEnsembleBertBackbone
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import batch_ensemble_backbone
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import batch_ensemble_config
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import batch_ensemble_from_keras_hub
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import batch_ensemble_head
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import batch_ensemble_logits
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import batch_ensemble_member_model
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import set_batch_ensemble_config
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import task_batch_ensemble_layers
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.member_passes import check_member_batching
from ensemble_zoo.models.text_inputs import bert_parts
from ensemble_zoo.models.text_inputs import check_bert_backbone
from ensemble_zoo.models.text_inputs import plain_bert_classifier
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleTextClassifier(EnsembleClassifier, keras_hub.models.TextClassifier):
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
        preprocessor: optional `keras_hub.models.TextClassifierPreprocessor`
            run on raw strings by `fit`, `predict` and `evaluate`.
        dropout: float, dropout before the head. Defaults to `0.1`
            (keras-hub's `BertTextClassifier`).
        member_batching: `"auto"` (default), `"tiled"` or `"sequential"`
            (`ensemble_zoo.models.member_passes`).
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

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

    def __init__(
        self,
        backbone,
        num_classes,
        num_members=None,
        *,
        fast_weight_initializer=None,
        fast_weight_stddev=None,
        seed=None,
        preprocessor=None,
        dropout=0.1,
        member_batching="auto",
        **kwargs,
    ):
        check_bert_backbone(backbone)
        member_batching = check_member_batching(member_batching)
        backbone = batch_ensemble_backbone(
            backbone,
            num_members=num_members,
            fast_weight_initializer=fast_weight_initializer,
            fast_weight_stddev=fast_weight_stddev,
            seed=seed,
        )
        num_classes = check_positive_int(num_classes, "num_classes")
        dropout = check_rate(dropout, "dropout")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout, self.head = batch_ensemble_head(backbone, dropout, num_classes)

        # === Functional Model ===
        # BERT's pooled output of every member's rows.
        inputs = backbone.input
        outputs = batch_ensemble_logits(backbone, inputs, None, self.output_dropout, self.head)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        set_batch_ensemble_config(self, backbone, num_classes, None, dropout)
        self._set_member_batching(member_batching)

    def get_config(self):
        return {**super().get_config(), **batch_ensemble_config(self)}

    batch_ensemble_layers = property(task_batch_ensemble_layers)

    def member_model(self, member):
        """Member `member` as a plain keras-hub `BertTextClassifier`: every converted
        projection holds `W * outer(r_m, s_m)` and `b_m`.

        Useful to inspect or export one member alone; running the M member
        models one by one gives the same logits as this model (tested).
        """
        return batch_ensemble_member_model(self, member, plain_bert_classifier)

    @classmethod
    def from_keras_hub(cls, model, num_members=None, num_classes=None, reuse_head=None, **kwargs):
        """A BatchEnsemble built from a copy of a keras-hub BERT (as
        `BatchEnsembleImageClassifier.from_keras_hub` from a ViT).

        Args:
            model: a `keras_hub.models.BertTextClassifier` or
                `BertBackbone`; not changed.
            num_members, num_classes, reuse_head, **kwargs: as
                `BatchEnsembleImageClassifier.from_keras_hub` takes them.
        """
        return batch_ensemble_from_keras_hub(
            cls, bert_parts, model, num_members, num_classes, reuse_head, kwargs
        )
