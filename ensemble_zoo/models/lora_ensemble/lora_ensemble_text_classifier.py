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
    `(batch, members, classes)`. The method's arguments (`num_members`,
    `rank`, `targets`, `lora_alpha`, `a_gain` and the keyword-only `seed`)
    are `LoRAEnsembleImageClassifier`'s.

    Args:
        backbone: a `LoRAEnsembleBertBackbone` (its adapters' arguments
            are the defaults of the method's), or a built
            `keras_hub.models.BertBackbone`: the classifier then runs a new
            backbone with its config and weights plus the adapters;
            `backbone` is not changed.
        num_classes: int.
        **kwargs: `MemberTiledClassifier`'s `preprocessor` (a
            `keras_hub.models.TextClassifierPreprocessor` run on raw
            strings), `dropout` (default `0.1`) and `member_batching`, and
            other `keras_hub.models.Task` arguments.

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
