import keras
import keras_hub

from ensemble_zoo.models.batch_ensemble.batch_ensemble_model_backbone import METHOD_DEFAULTS
from ensemble_zoo.models.batch_ensemble.batch_ensemble_model_backbone import (
    BatchEnsembleModelBackbone,
)
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """BatchEnsemble on a keras-hub classifier of any transformer family.

    BatchEnsemble (Wen et al., "BatchEnsemble: an Alternative Approach to
    Efficient Ensemble and Lifelong Learning", 2020): every member's
    weight matrix is the shared `W` times a rank-one factor `r_m s_m^T`.
    This class takes a whole keras-hub classifier, image or text (DeiT,
    Swin, MiT, RoBERTa, DistilBERT, DeBERTa-v3, ALBERT, XLM-RoBERTa,
    RoFormer-V2, FNet, ViT, BERT, ...), turns every attention and
    feed-forward projection it finds by layer type and role into a
    `BatchEnsembleDense`, and keeps the family's pooling and head layers,
    one head per member (`BatchEnsembleModelBackbone`). The members run
    in one pass on the input tiled to `(members * batch, ...)`; `call`
    returns member logits `(batch, members, classes)`.

    `BatchEnsembleImageClassifier` (ViT) and `BatchEnsembleTextClassifier`
    (BERT) build the same method on a keras-hub backbone with a head of
    their own; their presets stay theirs.

    Args:
        model: a built keras-hub classifier returning logits
            `(batch, classes)`. It is copied, not changed.
        num_members: int. Defaults to `4`.
        fast_weight_initializer: `"normal"` (`N(1, fast_weight_stddev)`,
            default) or `"random_sign"`.
        fast_weight_stddev: float. Defaults to `0.5`.
        reuse_head: bool. `True` (default) starts every member's head as a
            copy of `model`'s; `False` initializes each member's head on
            its own.
        seed: optional int for the fast weights.
        backbone: a `BatchEnsembleModelBackbone`, instead of `model` (how
            the classifier is rebuilt from its config). The method's
            arguments left `None` are then the backbone's.
        preprocessor: optional keras-hub preprocessor (`from_model` takes
            the classifier's).
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    deit = keras_hub.models.DeiTImageClassifier(
        backbone=keras_hub.models.DeiTBackbone(
            image_shape=(16, 16, 3), patch_size=8, num_layers=1, num_heads=2,
            hidden_dim=8, intermediate_dim=16,
        ),
        num_classes=3,
        preprocessor=None,
    )
    model = ez.models.BatchEnsembleClassifier.from_model(deit, num_members=4, seed=0)
    model.predict(np.ones((2, 16, 16, 3), "float32"), verbose=0).shape  # (2, 4, 3)
    ```
    """

    backbone_cls = BatchEnsembleModelBackbone

    def __init__(
        self,
        model=None,
        num_members=None,
        fast_weight_initializer=None,
        fast_weight_stddev=None,
        reuse_head=None,
        seed=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        method_config = method_arguments(
            backbone,
            (BatchEnsembleModelBackbone,),
            METHOD_DEFAULTS,
            num_members=num_members,
            fast_weight_initializer=fast_weight_initializer,
            fast_weight_stddev=fast_weight_stddev,
            reuse_head=reuse_head,
            seed=seed,
        )
        backbone = wrapping_backbone(
            BatchEnsembleModelBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config=method_config,
            model=model,
        )
        # One pass over the member-major batch: member m's rows take its
        # fast weights and head. Sets the method's arguments as attributes.
        build_member_rows_task(self, backbone, preprocessor, backbone.num_members, **kwargs)

    model = backbone_attribute("model", "The classifier's copy the method changed.")
    network = backbone_attribute("network", "`model`'s graph with a head per member.")
    batch_ensemble_layers = backbone_attribute(
        "batch_ensemble_layers", "Every `BatchEnsembleDense`, in layer order."
    )
    heads = backbone_attribute(
        "heads", "The member heads (`GroupedDense` on member-major rows), in graph order."
    )

    def get_config(self):
        config = super().get_config()
        config.update(self.backbone.method_config)
        return config

    @classmethod
    def from_model(cls, model, num_members=None, **kwargs):
        """BatchEnsemble on a copy of the keras-hub classifier `model`
        (which is not changed); the ensemble takes over its preprocessor.
        `kwargs` are the constructor's other arguments."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(model, num_members, **kwargs)
