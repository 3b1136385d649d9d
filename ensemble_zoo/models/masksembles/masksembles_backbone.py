"""A keras-hub ViT whose MLPs pass Masksembles masks."""

import keras
import keras_hub

from ensemble_zoo.layers.masksembles_mask import MasksemblesMask
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MaskedOutput(keras.layers.Layer):
    """`mask(layer(x))`: a built layer whose output passes a
    `MasksemblesMask`, as `apply_masksembles` places it (the backbone's
    config re-applies it when loading)."""

    def __init__(self, layer, mask, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer
        self.mask = mask

    def call(self, inputs):
        return self.mask(self.layer(inputs))

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MaskedInput(keras.layers.Layer):
    """`layer(mask(x))`: a built layer whose input passes a mask layer:
    a `MasksemblesMask`, as `MasksemblesModelBackbone` places it on a
    feed-forward block's second projection, or a `HeadMask`, as
    `HydraModelBackbone` places it on an attention layer's output
    projection (their configs re-apply it when loading)."""

    def __init__(self, layer, mask, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer
        self.mask = mask

    def call(self, inputs):
        return self.layer(self.mask(inputs))

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)


def mlp_sites(backbone):
    """The MLP of every keras-hub `ViTEncoderBlock`, in order."""
    encoder = backbone.get_layer("vit_encoder")
    return [block.mlp for block in encoder.encoder_layers]


def apply_masksembles(backbone, num_members, scale, seed=None):
    """Puts a `MasksemblesMask` after the first dense layer of every MLP
    of a keras-hub ViT, in place (block `i` seeded `seed + i`).

    The backbone then takes member-major batches `(M * batch, ...)`.

    Returns:
        The masks, block by block.
    """
    masks = []
    for i, mlp in enumerate(mlp_sites(backbone)):
        if isinstance(mlp.dense_1, MaskedOutput):
            raise ValueError(f"`backbone` '{backbone.name}' already has Masksembles masks.")
        with path_scope(mlp.path):
            mask = MasksemblesMask(
                num_members,
                scale,
                seed=None if seed is None else seed + i,
                dtype=mlp.dense_1.dtype_policy,
                name="masksembles",
            )
            mask.build(tuple(mlp.dense_1.kernel.shape[-1:]))
            wrapped = MaskedOutput(
                mlp.dense_1, mask, dtype=mlp.dense_1.dtype_policy, name="dense_1_masked"
            )
        replace_sublayer(mlp, "dense_1", wrapped)
        masks.append(mask)
    return masks


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MasksemblesViTBackbone(MethodBackbone, keras_hub.models.ViTBackbone):
    """A `keras_hub.models.ViTBackbone` with Masksembles masks in its MLPs.

    What `MasksemblesImageClassifier` makes of the ViT it is given
    (`apply_masksembles`); it takes member-major batches. Its class names
    the method in a preset's `config.json`, so
    `keras_hub.models.ImageClassifier.from_preset` finds the Masksembles
    classifier. Build it through the classifier.

    Args:
        num_members, scale, seed: as in `apply_masksembles`.
        **kwargs: `keras_hub.models.ViTBackbone` arguments.
    """

    method_keys = ("num_members", "scale", "seed")

    def apply_method(self, **method_config):
        apply_masksembles(self, **method_config)


def masksembles_backbone(backbone, num_members=None, scale=None, seed=None):
    """The Masksembles backbone a classifier runs.

    Arguments left `None` are the backbone's (a `MasksemblesViTBackbone`)
    or the defaults (4 members, scale 2, no seed). Returns `backbone`
    itself when it is a Masksembles backbone built with these arguments,
    else a new one built from `backbone`'s config and weights
    (`method_backbone`); `backbone` is never changed.
    """
    config = method_arguments(
        backbone,
        (MasksemblesViTBackbone,),
        {"num_members": 4, "scale": 2.0, "seed": None},
        num_members=num_members,
        scale=scale,
        seed=seed,
    )
    config["num_members"] = check_positive_int(config["num_members"], "num_members")
    config["scale"] = float(check_real(config["scale"], "scale", low=1.0))
    if not isinstance(backbone, MethodBackbone) and any(
        isinstance(mlp.dense_1, MaskedOutput) for mlp in mlp_sites(backbone)
    ):
        raise ValueError(
            f"`backbone` '{backbone.name}' already has Masksembles masks; "
            "pass a plain keras-hub ViT (the classifier applies them)."
        )
    return method_backbone(
        backbone, (MasksemblesViTBackbone,), config, lambda b: apply_masksembles(b, **config)
    )
