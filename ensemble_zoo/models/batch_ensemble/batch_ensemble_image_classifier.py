import keras
import keras_hub

from ensemble_zoo.models.batch_ensemble.batch_ensemble_backbones import BatchEnsembleViTBackbone
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import BatchEnsembleTask
from ensemble_zoo.models.keras_hub_vit import plain_vit_classifier
from ensemble_zoo.models.member_tiled_classifier import MemberTiledClassifier


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleImageClassifier(
    BatchEnsembleTask, MemberTiledClassifier, keras_hub.models.ImageClassifier
):
    """BatchEnsemble on a keras-hub ViT: one shared network, rank-1 members.

    BatchEnsemble (Wen et al., 2020), the efficient-ensemble baseline of
    the Hydra, LoRA-Ensemble and E³ papers: every dense projection of the
    ViT (attention query, key, value and output, both MLP layers) becomes a
    `BatchEnsembleDense`, so member `m` computes with kernels
    `W * outer(r_m, s_m)` and its own biases, and so does the classifier
    head (a `BatchEnsembleDense` too: the paper applies the rank-1 scheme to
    every layer). The patch embedding, position embedding, class token and
    layer norms are shared. The image batch is tiled once to
    `(members * batch, ...)`, the network runs once, and `call` returns
    member logits `(batch, members, classes)`. Every weight trains; `fit`
    minimizes the mean of the member cross-entropies on the same batches.

    Args:
        backbone: a `BatchEnsembleViTBackbone` built with the arguments
            below, or a built `keras_hub.models.ViTBackbone`: the
            classifier then runs a new backbone with its config and
            weights, converted (`BatchEnsembleViTBackbone.from_backbone`);
            `backbone` is not changed.
        num_classes: int.
        num_members: int. Defaults to `4` (Wen et al.'s ensemble size).
        fast_weight_initializer: `"normal"` (default, `N(1, 0.5)`) or
            `"random_sign"`; see `ez.layers.BatchEnsembleDense`.
            Keyword-only, as are the arguments after it.
        fast_weight_stddev: float. Defaults to `0.5`.
        seed: optional int for the fast weights. The method arguments
            (`num_members` to `seed`) left `None` are the backbone's when
            it is a BatchEnsemble backbone, else the defaults named here.
        **kwargs: `MemberTiledClassifier`'s `preprocessor`, `pooling`
            (`"token"`, the default, or `"gap"`), `dropout` and
            `member_batching`, and other `keras_hub.models.Task` arguments.

    Example:

    ```python
    import ensemble_zoo as ez

    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    model = ez.models.BatchEnsembleImageClassifier.from_keras_hub(
        base.members[0], num_members=4, seed=0
    )
    x, _ = ez.datasets.load_arrays("digits", "test")
    model.predict(x, verbose=0).shape  # (289, 4, 8)
    ```
    """

    backbone_cls = BatchEnsembleViTBackbone

    _plain_task = plain_vit_classifier
