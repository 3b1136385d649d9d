"""A keras-hub ViT with L2 self-attention: the LoRA-Ensemble paper's L2
baseline."""

import keras
import keras_hub

from ensemble_zoo.layers.l2_attention import L2MultiHeadAttention
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.sublayers import sublayers


def attention_layers(model):
    """`[(parent, attribute, layer)]` of every `keras.layers.MultiHeadAttention`
    in `model`, found by type, in layer order."""
    found = []
    for parent in model._flatten_layers(include_self=False):
        for attribute, layer in sublayers(parent):
            if isinstance(layer, keras.layers.MultiHeadAttention):
                found.append((parent, attribute, layer))
    return found


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class L2AttentionViTBackbone(MethodBackbone, keras_hub.models.ViTBackbone):
    """A keras-hub `ViTBackbone` whose every self-attention is L2
    self-attention (`ensemble_zoo.layers.L2MultiHeadAttention`; Kim et al.
    2021, "The Lipschitz Constant of Self-Attention"): the single-model
    uncertainty baseline "L2" of the LoRA-Ensemble paper's HAM10000 table.

    It takes `ViTBackbone`'s arguments; the attention layers are found by
    type (`keras.layers.MultiHeadAttention`) and replaced. Built from a
    trained keras-hub ViT (`from_backbone`), each L2 layer starts from that
    attention's query, value and output weights
    (`L2MultiHeadAttention.from_multi_head_attention`); the model computes
    another function until it is fine-tuned. A keras-hub
    `ViTImageClassifier` takes it as its backbone.

    Example:

    ```python
    import keras_hub
    import ensemble_zoo as ez

    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=2, num_heads=2,
        hidden_dim=8, mlp_dim=16,
    )
    l2 = ez.models.L2AttentionViTBackbone.from_backbone(vit)
    classifier = keras_hub.models.ViTImageClassifier(backbone=l2, num_classes=3)
    ```
    """

    def apply_method(self):
        replace_attention(self, L2MultiHeadAttention.from_multi_head_attention)


def replace_attention(backbone, convert):
    """Replaces every `keras.layers.MultiHeadAttention` of `backbone`
    (found by type) with `convert(layer)`; raises if there is none."""
    layers = attention_layers(backbone)
    if not layers:
        raise ValueError(f"{type(backbone).__name__} found no MultiHeadAttention to replace.")
    for parent, attribute, layer in layers:
        replace_sublayer(parent, attribute, convert(layer))
