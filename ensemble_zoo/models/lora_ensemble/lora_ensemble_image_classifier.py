import keras
import keras_hub

from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleViTBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import LoRAEnsembleTask
from ensemble_zoo.models.member_tiled_classifier import MemberTiledClassifier


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleImageClassifier(
    LoRAEnsembleTask, MemberTiledClassifier, keras_hub.models.ImageClassifier
):
    """LoRA-Ensemble image classifier: M low-rank members on one frozen ViT.

    LoRA-Ensemble (the LoRA-Ensemble paper, "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks"): one frozen,
    pretrained keras-hub ViT backbone shared by every member; member `m` adds
    its own rank-r update `B_m A_m` to the query, key, value and output
    projections of every attention layer (`apply_lora_ensemble`) and has its
    own classifier head (`GroupedDense`). The image batch is tiled once to
    `(members * batch, ...)`, the backbone runs once on it, and `call` returns
    member logits `(batch, members, classes)`. Only the adapters and the heads
    are trainable; `fit` trains every member on the same batches with the mean
    of the member cross-entropies (the paper's loss).

    Decisions: per-member heads (the paper's main setting, App. L); the
    classifier reads the class token (`"token"`) or the mean of all tokens
    (`"gap"`) exactly as keras-hub's `ViTImageClassifier` does.

    Args:
        backbone: a `LoRAEnsembleViTBackbone` (its adapters' arguments
            are the defaults of the method arguments below), or a built
            `keras_hub.models.ViTBackbone` (or any
            keras-hub image backbone with `MultiHeadAttention` blocks that
            returns `(batch, tokens, dim)`): the classifier then runs a new
            backbone with its config and weights plus the adapters
            (`LoRAEnsembleViTBackbone.from_backbone`); `backbone` itself is
            not changed.
        num_classes: int.
        num_members: int, the number of members M. Defaults to `8`.
        rank: int, the adapters' rank. Defaults to `4`.
        targets: attention projections to adapt. Defaults to
            `("query", "key", "value", "attention_output")`.
        lora_alpha: optional float, update scale `lora_alpha / rank`;
            `None` (default) is a scale of 1, as in the paper.
        a_gain: float, Xavier-uniform gain of `A` (paper: 10, the default).
        seed: optional int, seeds the adapters' `A` initialization. The
            method arguments (`num_members` to `seed`) left `None` are the
            backbone's when it is a `LoRAEnsembleViTBackbone`, else the
            defaults named here. `seed` is keyword-only.
        **kwargs: `MemberTiledClassifier`'s `preprocessor`, `pooling`
            (`"token"`, the default, or `"gap"`), `dropout` and
            `member_batching`, and other `keras_hub.models.Task` arguments.

    Example:

    ```python
    import ensemble_zoo as ez

    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    vit = base.members[0]  # a keras_hub.models.ViTImageClassifier
    model = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        vit, num_members=4, rank=2, seed=0
    )
    train = ez.datasets.load("digits", "train", batch_size=64)
    model.fit(train, epochs=1, verbose=0)
    x, _ = ez.datasets.load_arrays("digits", "test")
    model.predict(x, verbose=0).shape  # (289, 4, 8)
    ```
    """

    backbone_cls = LoRAEnsembleViTBackbone
