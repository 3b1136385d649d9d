import keras
import keras_hub

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.keras_hub_vit import check_image_backbone
from ensemble_zoo.models.keras_hub_vit import vit_parts
from ensemble_zoo.models.lora_ensemble import lora_ensemble_task
from ensemble_zoo.models.lora_ensemble.lora_ensemble_backbones import LoRAEnsembleViTBackbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_backbone
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_config
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_from_keras_hub
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_head
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import lora_ensemble_logits
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import set_lora_ensemble_config
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.member_passes import check_member_batching
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
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
            defaults named here. `seed` and the arguments after it are
            keyword-only.
        blob: `None` (default), or BLoB's settings (a dict with
            `kl_weight`, optionally `eps` and `prior_std`): each `A_m` is
            a learned Gaussian, trained by `fit` with its KL term and
            sampled into members by `ensemble_zoo.training.blob_samples`.
        preprocessor: optional keras-hub preprocessor run by `fit`,
            `predict` and `evaluate` on raw images.
        pooling: `"token"` (the class token, default) or `"gap"` (the mean
            of the tokens).
        dropout: float, dropout before the heads. Defaults to `0.0`
            (keras-hub's `ViTImageClassifier`).
        member_batching: `"auto"` (default), `"tiled"` or `"sequential"`
            (`ensemble_zoo.models.member_passes`).
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

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
        pooling="token",
        dropout=0.0,
        member_batching="auto",
        **kwargs,
    ):
        check_image_backbone(backbone)
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
        pooling = check_pooling(pooling)
        dropout = check_rate(dropout, "dropout")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout, self.head = lora_ensemble_head(backbone, dropout, num_classes)

        # === Functional Model ===
        # One backbone pass over the member-major batch: the rows of member
        # m take member m's adapters, then member m's head.
        inputs = backbone.input
        outputs = lora_ensemble_logits(backbone, inputs, pooling, self.output_dropout, self.head)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        set_lora_ensemble_config(self, backbone, num_classes, pooling, dropout)
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
        """A LoRA-Ensemble on a copy of a keras-hub ViT.

        Args:
            model: a `keras_hub.models.ViTImageClassifier` or `ViTBackbone`;
                it is not changed.
            num_members: int. Defaults to `8`.
            rank: int. Defaults to `4`.
            num_classes: int; defaults to the classifier's. Required for a
                backbone.
            reuse_head: bool. `True` starts every member's head as a copy of
                the classifier's, so that before training (B = 0) every
                member equals `model`; `False` gives fresh heads (the
                paper's fine-tuning setting). `None` (default) reuses the
                head when `model` is a classifier with `num_classes` classes.
            **kwargs: other constructor arguments (`targets`, `lora_alpha`,
                `a_gain`, `seed`, and for a backbone `pooling`, `dropout`).

        Returns:
            A `LoRAEnsembleImageClassifier`.

        Raises:
            TypeError: `model` is of another family; the message points
                to `LoRAEnsembleClassifier.from_model`, which takes every
                keras-hub classifier with attention.
        """
        return lora_ensemble_from_keras_hub(
            cls, vit_parts, model, num_members, rank, num_classes, reuse_head, kwargs
        )
