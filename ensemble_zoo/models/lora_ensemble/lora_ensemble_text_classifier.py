import keras
import keras_hub

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.lora_ensemble import lora_ensemble_task
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleBertBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_backbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_config
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_from_keras_hub
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_head
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_logits
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import set_lora_ensemble_config
from ensemble_zoo.models.member_passes import check_member_batching
from ensemble_zoo.models.text_inputs import bert_parts
from ensemble_zoo.models.text_inputs import check_bert_backbone
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleTextClassifier(EnsembleClassifier, keras_hub.models.TextClassifier):
    """LoRA-Ensemble text classifier: M low-rank members on one frozen BERT.

    The text counterpart of `LoRAEnsembleImageClassifier` (the SST-2
    experiments of the LoRA-Ensemble paper, "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks"): adapters on every
    attention projection of a frozen keras-hub `BertBackbone`, the backbone's
    (frozen) pooled output, and a classifier head per member. `call` takes
    keras-hub's BERT inputs, a dict of int `(batch, tokens)` tensors
    `token_ids`, `segment_ids` and `padding_mask`, tiles each once to
    `(members * batch, tokens)`, and returns member logits
    `(batch, members, classes)`. The method's arguments (`num_members`,
    `rank`, `targets`, `lora_alpha`, `a_gain` and the keyword-only `seed`
    and `blob`) are `LoRAEnsembleImageClassifier`'s.

    Args:
        backbone: a `LoRAEnsembleBertBackbone` (its adapters' arguments
            are the defaults of the method's), or a built
            `keras_hub.models.BertBackbone`: the classifier then runs a new
            backbone with its config and weights plus the adapters;
            `backbone` is not changed.
        num_classes: int.
        num_members, rank, targets, lora_alpha, a_gain, seed, blob: the
            method's arguments, as `LoRAEnsembleImageClassifier` takes them.
        preprocessor: optional `keras_hub.models.TextClassifierPreprocessor`
            run on raw strings by `fit`, `predict` and `evaluate`.
        dropout: float, dropout before the heads. Defaults to `0.1`
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

    bert = keras_hub.models.BertBackbone(
        vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=12,
    )
    model = ez.models.LoRAEnsembleTextClassifier.from_keras_hub(
        bert, num_members=4, rank=2, num_classes=2
    )
    inputs = {
        "token_ids": np.ones((2, 12), "int32"),
        "segment_ids": np.zeros((2, 12), "int32"),
        "padding_mask": np.ones((2, 12), "int32"),
    }
    model.predict(inputs, verbose=0).shape  # (2, 4, 2)
    ```
    """

    backbone_cls = LoRAEnsembleBertBackbone

    def __init__(
        self,
        backbone,
        num_classes,
        num_members=None,
        rank=None,
        targets=None,
        lora_alpha=None,
        a_gain=None,
        *,
        seed=None,
        blob=None,
        preprocessor=None,
        dropout=0.1,
        member_batching="auto",
        **kwargs,
    ):
        check_bert_backbone(backbone)
        member_batching = check_member_batching(member_batching)
        backbone = lora_ensemble_backbone(
            backbone,
            num_members=num_members,
            rank=rank,
            targets=targets,
            lora_alpha=lora_alpha,
            a_gain=a_gain,
            seed=seed,
            blob=blob,
        )
        num_classes = check_positive_int(num_classes, "num_classes")
        dropout = check_rate(dropout, "dropout")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout, self.head = lora_ensemble_head(backbone, dropout, num_classes)

        # === Functional Model ===
        # BERT's (frozen) pooled output of every member's rows.
        inputs = backbone.input
        outputs = lora_ensemble_logits(backbone, inputs, None, self.output_dropout, self.head)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        set_lora_ensemble_config(self, backbone, num_classes, None, dropout)
        self._set_member_batching(member_batching)

    def get_config(self):
        return {**super().get_config(), **lora_ensemble_config(self)}

    adapters = property(lora_ensemble_task.task_adapters)
    method_config = property(lora_ensemble_task.task_method_config)
    base_backbone_class = property(lora_ensemble_task.task_base_backbone_class)
    save_adapter_weights = lora_ensemble_task.save_adapter_weights
    load_adapter_weights = lora_ensemble_task.load_adapter_weights

    @classmethod
    def from_keras_hub(
        cls, model, num_members=None, rank=None, num_classes=None, reuse_head=None, **kwargs
    ):
        """A LoRA-Ensemble on a copy of a keras-hub BERT.

        Args:
            model: a `keras_hub.models.BertTextClassifier` or
                `BertBackbone`; it is not changed.
            num_members, rank, num_classes, reuse_head, **kwargs: as
                `LoRAEnsembleImageClassifier.from_keras_hub` takes them.

        Returns:
            A `LoRAEnsembleTextClassifier`.

        Raises:
            TypeError: `model` is of another family; the message points
                to `LoRAEnsembleClassifier.from_model`, which takes every
                keras-hub classifier with attention.
        """
        return lora_ensemble_from_keras_hub(
            cls, bert_parts, model, num_members, rank, num_classes, reuse_head, kwargs
        )
