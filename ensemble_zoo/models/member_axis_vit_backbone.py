"""The base of the hand-written ViT backbones whose members run along
axis 1 (Hydra, Packed-Ensembles)."""

import keras
import keras_hub

from ensemble_zoo.layers.grouped_layer_normalization import GroupedLayerNormalization
from ensemble_zoo.models.quantization_modes import QuantizationModesMixin
from ensemble_zoo.models.vit_geometry import set_vit_attributes
from ensemble_zoo.models.vit_geometry import vit_config


class MemberAxisViTBackbone(QuantizationModesMixin, keras_hub.models.Backbone):
    """The base of the ViT backbones that run `num_members` members along
    axis 1 (Hydra, Packed-Ensembles): `(batch, members, tokens, width)`
    outputs after a per-member final layer norm.

    A subclass sets `member_arguments`, its config entries beyond
    `VIT_ARGUMENTS` (`num_members` among them), and its constructor checks
    its arguments, creates its layers and calls `_build_member_vit`.
    """

    member_arguments = ()

    def _build_member_vit(self, vit, member, stem, encoder_blocks, dtype, kwargs):
        """Builds the functional model and sets the backbone's attributes.

        Args:
            vit: the backbone's `ViTArguments`.
            member: dict, the value (as checked) of every name of
                `member_arguments`, `num_members` among them.
            stem: the layers from the images to the encoder blocks' input,
                the patch embedding first (kept as `embedding`).
            encoder_blocks: the blocks, in order.
            dtype: the dtype policy of the model and its final layer norm
                (`"ln"`, a `GroupedLayerNormalization`).
            kwargs: other `keras_hub.models.Backbone` arguments.
        """
        layer_norm = GroupedLayerNormalization(
            member["num_members"], epsilon=vit.layer_norm_epsilon, dtype=dtype, name="ln"
        )
        inputs = keras.Input(shape=vit.image_shape, name="images")
        outputs = inputs
        for layer in (*stem, *encoder_blocks, layer_norm):
            outputs = layer(outputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        set_vit_attributes(self, vit, stem[0], encoder_blocks, layer_norm, member)

    def get_config(self):
        config = super().get_config()
        config.update(vit_config(self, self.member_arguments))
        return config
