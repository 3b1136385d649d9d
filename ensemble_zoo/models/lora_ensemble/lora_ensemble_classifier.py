import keras
import keras_hub

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.lora_ensemble.lora_ensemble_model_backbone import METHOD_DEFAULTS
from ensemble_zoo.models.lora_ensemble.lora_ensemble_model_backbone import LoRAEnsembleModelBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """LoRA-Ensemble on a keras-hub classifier of any family.

    LoRA-Ensemble ("LoRA-Ensemble: Efficient Uncertainty Modelling for
    Self-Attention Networks"): M members share one frozen pre-trained
    network and differ by a low-rank update `B_m A_m` on every attention
    projection and by their own classification head. This class takes a
    whole keras-hub classifier, image or text (DeiT, Swin, MiT, RoBERTa,
    DistilBERT, DeBERTa-v3, ALBERT, XLM-RoBERTa, RoFormer-V2, ViT, BERT,
    ...), finds its attention projections by layer type and role, and
    keeps the family's own pooling and head layers, one head per member
    (`LoRAEnsembleModelBackbone`). The members run in one pass: the input
    is tiled to `(members * batch, ...)` and `call` returns member logits
    `(batch, members, classes)`. Before training (`B = 0`), with the
    classifier's head reused, every member computes the classifier's
    logits.

    `LoRAEnsembleImageClassifier` (ViT) and `LoRAEnsembleTextClassifier`
    (BERT) build the same method on a keras-hub backbone with a head of
    their own; their presets stay theirs.

    Args:
        model: a built keras-hub classifier returning logits
            `(batch, classes)` (build it with `activation=None`, or the
            default). It is copied, not changed.
        num_members: int. Defaults to `8`.
        rank: int, the adapters' rank. Defaults to `4`.
        targets: attention projections to adapt, among `"query"`, `"key"`,
            `"value"` and `"attention_output"`. Defaults to all four.
        lora_alpha: optional float; updates are scaled by
            `lora_alpha / rank`. Defaults to a scale of 1.
        a_gain: float, the Xavier-uniform gain of each `A_m`. Defaults to
            `10.0` (the paper's).
        reuse_head: bool. `True` (default) starts every member's head as a
            copy of `model`'s; `False` initializes each member's head on
            its own.
        seed: optional int for the adapters' initialization.
        blob: `None` (default), or BLoB's settings (a dict with
            `kl_weight`, optionally `eps` and `prior_std`): each `A_m` is
            a learned Gaussian, trained by `fit` with its KL term and
            sampled into members by `ensemble_zoo.training.blob_samples`.
        adapted_layers: `None` (default: every block with attention) or
            the indices of the blocks whose attention to adapt (negative
            ones count from the top; `from_model(..., layers=...)`). The
            blocks below the lowest adapted one compute the same for
            every member and run once per input row (a shared trunk,
            `ensemble_zoo.models.shared_trunk`), in `predict` and `fit`
            alike.
        backbone: a `LoRAEnsembleModelBackbone`, instead of `model` (how
            the classifier is rebuilt from its config). The method's
            arguments left `None` are then the backbone's.
        preprocessor: optional keras-hub preprocessor run by `fit`,
            `predict` and `evaluate` on raw inputs (`from_model` takes the
            classifier's).
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    roberta = keras_hub.models.RobertaTextClassifier(
        backbone=keras_hub.models.RobertaBackbone(
            vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=8,
        ),
        num_classes=3,
        preprocessor=None,
    )
    model = ez.models.LoRAEnsembleClassifier.from_model(
        roberta, num_members=4, rank=2, seed=0
    )
    inputs = {
        "token_ids": np.ones((2, 8), "int32"),
        "padding_mask": np.ones((2, 8), "int32"),
    }
    model.predict(inputs, verbose=0).shape  # (2, 4, 3)
    ```
    """

    backbone_cls = LoRAEnsembleModelBackbone

    def __init__(
        self,
        model=None,
        num_members=None,
        rank=None,
        targets=None,
        lora_alpha=None,
        a_gain=None,
        reuse_head=None,
        seed=None,
        blob=None,
        adapted_layers=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        method_config = method_arguments(
            backbone,
            (LoRAEnsembleModelBackbone,),
            METHOD_DEFAULTS,
            num_members=num_members,
            rank=rank,
            targets=None if targets is None else list(check_targets(targets)),
            lora_alpha=lora_alpha,
            a_gain=a_gain,
            reuse_head=reuse_head,
            seed=seed,
            blob=blob,
            # A list where it is one (configs hold lists); anything else
            # reaches the backbone's check, which names the argument.
            adapted_layers=(
                list(adapted_layers)
                if isinstance(adapted_layers, (tuple, range))
                else adapted_layers
            ),
        )
        backbone = wrapping_backbone(
            LoRAEnsembleModelBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config=method_config,
            model=model,
        )
        # One pass over the member-major batch: member m's rows go through
        # its adapters and head. Sets the method's arguments as attributes.
        build_member_rows_task(self, backbone, preprocessor, backbone.num_members, **kwargs)

    model = backbone_attribute(
        "model", "The frozen classifier the adapters sit on (a copy held by `backbone`)."
    )
    network = backbone_attribute("network", "`model`'s graph with a head per member.")
    adapters = backbone_attribute("adapters", "Every `LoRAEnsembleAdapter`, in layer order.")
    heads = backbone_attribute(
        "heads", "The member heads (`GroupedDense` on member-major rows), in graph order."
    )

    def get_config(self):
        config = super().get_config()
        config.update(self.backbone.method_config)
        return config

    @classmethod
    def from_model(cls, model, num_members=None, rank=None, layers=None, **kwargs):
        """LoRA-Ensemble on a copy of the keras-hub classifier `model`
        (which is not changed); the ensemble takes over its preprocessor.
        `layers` is the constructor's `adapted_layers` (as
        `LoRAEnsembleCausalLM.from_keras_hub` names it), `kwargs` its other
        arguments."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        if layers is not None and kwargs.get("adapted_layers") is not None:
            raise ValueError("Pass `layers` or `adapted_layers`, not both.")
        if layers is not None:
            kwargs["adapted_layers"] = layers
        return cls(model, num_members, rank, **kwargs)
