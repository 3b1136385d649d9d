import keras
import keras_hub

from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleBertBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import LoRAEnsembleTask
from ensemble_zoo.models.member_tiled_classifier import MemberTiledClassifier
from ensemble_zoo.models.text_inputs import TextInputsMixin


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleTextClassifier(
    TextInputsMixin, LoRAEnsembleTask, MemberTiledClassifier, keras_hub.models.TextClassifier
):
    """LoRA-Ensemble text classifier: M low-rank members on one frozen BERT.

    The text counterpart of `LoRAEnsembleImageClassifier` (the SST-2
    experiments of the LoRA-Ensemble paper, "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks"): adapters on every
    attention projection of a frozen keras-hub `BertBackbone`, the backbone's
    (frozen) pooled output, and a classifier head per member. `call` takes
    keras-hub's BERT inputs, a dict of int `(batch, tokens)` tensors
    `token_ids`, `segment_ids` and `padding_mask`, tiles each once to
    `(members * batch, tokens)`, and returns member logits
    `(batch, members, classes)`.

    Args:
        backbone: a `LoRAEnsembleBertBackbone` (its adapters' arguments
            are the defaults of the method arguments below), or a built
            `keras_hub.models.BertBackbone`: the
            classifier then runs a new backbone with its config and
            weights plus the adapters; `backbone` is not changed.
        num_classes: int.
        num_members: int. Defaults to `8`.
        rank: int. Defaults to `4`.
        targets: attention projections to adapt (default: all four).
        lora_alpha: optional float; `None` is a scale of 1.
        a_gain: float, Xavier-uniform gain of `A` (paper: 10, the default).
            The method arguments (`num_members` to `a_gain`, and `seed`)
            left `None` are the backbone's when it is a
            `LoRAEnsembleBertBackbone`, else the defaults named here.
        dropout: float, dropout before the heads. Defaults to `0.1`
            (keras-hub's `BertTextClassifier`).
        seed: optional int, seeds the adapters' `A` initialization.
        preprocessor: optional `keras_hub.models.TextClassifierPreprocessor`
            run on raw strings by `fit`, `predict` and `evaluate`.
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
        dropout=0.1,
        seed=None,
        preprocessor=None,
        member_batching="auto",
        **kwargs,
    ):
        super().__init__(**self._constructor_arguments(locals()))
