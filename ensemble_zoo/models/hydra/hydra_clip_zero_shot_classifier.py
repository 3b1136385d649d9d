import keras
import keras_hub

from ensemble_zoo.models.baselines.clip_zero_shot_classifier import CLIPZeroShotClassifier
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.hydra.hydra_model_backbone import METHOD_DEFAULTS
from ensemble_zoo.models.hydra.hydra_model_backbone import HydraModelBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone
from ensemble_zoo.utils.sublayers import set_trainable


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraCLIPZeroShotBackbone(HydraModelBackbone):
    """`HydraModelBackbone` holding a `CLIPZeroShotClassifier`: the same
    network, a class of its own because keras-hub's preset loader finds a
    task by its backbone's class (`HydraClassifier`'s is
    `HydraModelBackbone`)."""


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraCLIPZeroShotClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Zero-shot Hydra Ensembles: members of a CLIP zero-shot classifier
    that each keep their own heads in both encoders.

    The Hydra paper's zero-shot system ("Ensembling Pruned Attention Heads
    for Uncertainty-Aware Efficient Transformers", section 5.3 and Table 3):
    members prune attention heads of a CLIP's vision *and* text encoders,
    training-free (no weight changes: every non-attention weight is shared,
    so the fused members equal the pruned models run separately). Built
    from a `CLIPZeroShotClassifier` on the network `HydraClassifier` builds
    from any keras-hub classifier (`HydraModelBackbone`, one pass over the
    member-major batch): `head_masks` gives each member's heads in every
    attention layer of the CLIP, the vision encoder's layers first, then
    the text encoder's (`head_sites(clip)`). The image side prunes in the
    pass itself; the text side computes each member's class embeddings
    with its kept text heads (the prompts' member-major pass through the
    masked text encoder) and holds them as member `m`'s head, as the plain
    classifier holds its own. As in `HydraClassifier`, every `Dense` layer
    of the classifier's graph becomes one per member (`heads`: the vision
    projection, then the class embeddings), equal to the classifier's
    until `fit` trains them apart. `update_class_embeddings` recomputes them
    after the text head masks or weights change (circuit search does).

    Heads are chosen as the paper does by circuit search over both
    encoders (`ensemble_zoo.pruning.circuit_head_ranking` with
    `head_ablation_scorer` on `from_model(classifier)`, one member that
    keeps every head; one ranking per criterion, CircAcc / CircOOD /
    CircAvg, one member each, `masks_from_rankings`). Temperature scaling,
    the paper's calibration baseline and its complement ("Hydra combined
    with temperature scaling"), is `ensemble_zoo.calibration.TemperatureScaling`
    on the member logits. `fit` fine-tunes the vision encoder and each
    member's class embeddings (the text encoder is frozen: it does not run
    in the pass).

    Args:
        model: a built `CLIPZeroShotClassifier`. It is copied, not changed.
        head_masks: 0 / 1 masks `[members][layers][heads]` over the CLIP's
            attention layers, vision encoder first. `None` (default) is one
            member that keeps every head.
        reuse_head: must be `True` or `None` (the members' heads are the
            pruned text encoders' class embeddings); there for the config.
        backbone: a `HydraCLIPZeroShotBackbone`, instead of `model` (how
            the classifier is rebuilt from its config).
        preprocessor: optional keras-hub image preprocessor (`from_model`
            takes the classifier's).
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    clip = keras_hub.models.CLIPBackbone(
        vision_encoder=keras_hub.models.CLIPVisionEncoder(
            patch_size=4, hidden_dim=8, num_layers=1, num_heads=2,
            intermediate_dim=16, image_shape=(8, 8, 1),
        ),
        text_encoder=keras_hub.models.CLIPTextEncoder(
            vocabulary_size=10, embedding_dim=8, hidden_dim=8, num_layers=1,
            num_heads=2, intermediate_dim=16, max_sequence_length=4,
        ),
        projection_dim=8,
    )
    prompts = np.array([[8, 1, 2, 9], [8, 3, 4, 9], [8, 5, 6, 9]])
    single = ez.models.CLIPZeroShotClassifier(clip, prompts)
    # Two members; one vision and one text layer of two heads each.
    masks = [[[1, 0], [1, 1]], [[0, 1], [1, 0]]]
    hydra = ez.models.HydraCLIPZeroShotClassifier.from_model(single, masks)
    hydra.predict(np.ones((2, 8, 8, 1)), verbose=0).shape  # (2, 2, 3)
    ```
    """

    backbone_cls = HydraCLIPZeroShotBackbone

    def __init__(
        self,
        model=None,
        head_masks=None,
        reuse_head=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        wrapped = model if backbone is None else getattr(backbone, "model", None)
        if not isinstance(wrapped, CLIPZeroShotClassifier):
            raise TypeError(
                "HydraCLIPZeroShotClassifier prunes a CLIPZeroShotClassifier: `model` must be "
                f"one; got {type(wrapped).__name__}. HydraClassifier takes other classifiers."
            )
        if reuse_head is not None and reuse_head is not True:
            raise ValueError(
                "`reuse_head` must be True (or None): the members' heads are their class "
                f"embeddings; got {reuse_head!r}."
            )
        method_config = method_arguments(
            backbone,
            (HydraCLIPZeroShotBackbone,),
            METHOD_DEFAULTS,
            head_masks=head_masks,
            reuse_head=True,
        )
        backbone = wrapping_backbone(
            HydraCLIPZeroShotBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config=method_config,
            model=model,
        )
        # One pass over the member-major batch: member m's rows keep its
        # vision heads and go through its head, its class embeddings.
        build_member_rows_task(self, backbone, preprocessor, backbone.num_members, **kwargs)
        # The text side runs in `update_class_embeddings` only: `fit` trains
        # the vision side and the class embeddings, and the copy's text
        # encoder takes no gradient.
        clip = self.model.backbone
        for layer in (clip.text_encoder, clip.text_projection, clip.clip_head):
            set_trainable(layer, False)
        self.update_class_embeddings()

    model = backbone_attribute("model", "The zero-shot classifier's copy the members prune.")
    network = backbone_attribute("network", "`model`'s graph with a head per member.")
    head_mask_layers = backbone_attribute(
        "head_mask_layers", "Every `HeadMask`, one per attention layer of both encoders."
    )
    heads = backbone_attribute(
        "heads", "The member heads (`GroupedDense`), the last the class embeddings."
    )

    def get_config(self):
        config = super().get_config()
        config.update(self.backbone.method_config)
        return config

    @classmethod
    def from_model(cls, model, head_masks=None, **kwargs):
        """Zero-shot Hydra members pruned from a copy of the
        `CLIPZeroShotClassifier` `model` (which is not changed); the
        ensemble takes over its preprocessor. `kwargs` are the
        constructor's other arguments."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(model, head_masks, **kwargs)

    def update_class_embeddings(self):
        """Sets each member's head to the class embeddings of the text
        encoder with its kept heads (`CLIPZeroShotClassifier.
        class_embedding_kernels` on the copy whose heads the members
        prune)."""
        self.heads[-1].kernel.assign(self.model.class_embedding_kernels(self.num_members))
