"""The base of the classifiers whose backbone runs every member at once
along a member axis (Hydra, Packed-Ensembles, ViT-MoE / E³)."""

import keras
import keras_hub

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.member_head import pool_member_tokens
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


class MemberAxisClassifier(EnsembleClassifier):
    """A classifier on a backbone with a member axis: the backbone returns
    `(batch, members, tokens, dim)` (or, for text, a dict whose
    `pooled_output` is `(batch, members, dim)`), and the task pools each
    member's tokens, applies dropout and a head, and returns member logits
    `(batch, members, classes)` in float32.

    Like `EnsembleClassifier`, the class holds behaviour only: a task lists
    it before its keras-hub task class,
    `class HydraImageClassifier(MemberAxisClassifier, keras_hub.models.ImageClassifier)`,
    and sets:

    - `backbone_cls`: the backbone class it takes (another backbone is a
      `TypeError`);
    - `shared_head`: `False` (default) for one head per member (a
      `GroupedDense`, as Hydra's and Packed-Ensembles' members have),
      `True` for one `Dense` head shared by the members (E³ shares every
      non-expert weight);
    - `_pre_logits(x)`, optionally: a layer between the pooling and the
      dropout (ViT-MoE's `pre_logits`), built while the graph is.

    Args:
        backbone: an instance of the task's `backbone_cls`.
        num_classes: int.
        preprocessor: optional keras-hub preprocessor run by `fit`,
            `predict` and `evaluate` on raw inputs.
        pooling: `"token"` (the class token) or `"gap"` (the mean of the
            tokens); ignored by a task with `uses_pooled_output` (a text
            task: the backbone's output dict holds BERT's `pooled_output`).
        dropout: float, dropout before the head.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).
    """

    backbone_cls = None
    shared_head = False
    uses_pooled_output = False

    def __init__(
        self, backbone, num_classes, preprocessor=None, pooling="token", dropout=0.0, **kwargs
    ):
        if not isinstance(backbone, self.backbone_cls):
            raise TypeError(
                f"`backbone` must be a {self.backbone_cls.__name__}; got {type(backbone).__name__}."
            )
        # Text tasks (`TextInputsMixin`) read BERT's pooled output.
        pooling = None if self.uses_pooled_output else check_pooling(pooling)
        num_classes = check_positive_int(num_classes, "num_classes")
        dropout = check_rate(dropout, "dropout")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        if self.shared_head:
            head = (keras.layers.Dense, num_classes)
        else:
            head = (GroupedDense, num_classes, backbone.num_members)
        self.output_dropout, self.head = task_head(backbone, dropout, *head)

        # === Functional Model ===
        inputs = backbone.input
        outputs = backbone(inputs)
        if pooling is None:
            x = outputs["pooled_output"]
        else:
            x = pool_member_tokens(outputs, pooling)  # (batch, members, dim)
        x = self.output_dropout(self._pre_logits(x))
        keras_hub.models.Task.__init__(
            self, inputs=inputs, outputs=member_logits(self.head(x)), **kwargs
        )

        # === Config ===
        self.num_members = backbone.num_members
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout

    def _pre_logits(self, x):
        """The pooled features `(batch, members, dim)` before the dropout;
        unchanged unless a task adds a layer."""
        return x

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "dropout": self.dropout})
        if self.pooling is not None:
            config["pooling"] = self.pooling
        return config
