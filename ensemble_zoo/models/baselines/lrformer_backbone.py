"""A keras-hub ViT with Lipschitz-regularized self-attention: LRFormer, the
LoRA-Ensemble paper's LRFormer baseline."""

import functools
from types import MappingProxyType

import keras
import keras_hub

from ensemble_zoo.layers.lipschitz_regularized_attention import LipschitzRegularizedAttention
from ensemble_zoo.models.baselines.l2_attention_backbone import replace_attention
from ensemble_zoo.models.method_backbone import MethodBackbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LRFormerViTBackbone(MethodBackbone, keras_hub.models.ViTBackbone):
    """A keras-hub `ViTBackbone` whose every self-attention is LRFormer's
    Lipschitz-regularized self-attention
    (`ensemble_zoo.layers.LipschitzRegularizedAttention`; Ye et al. 2023,
    "Mitigating Transformer Overconfidence via Lipschitz Regularization"):
    the single-model uncertainty baseline "LRFormer" of the LoRA-Ensemble
    paper's HAM10000 table.

    The attention layers are found by
    type (`keras.layers.MultiHeadAttention`) and replaced, as in
    `L2AttentionViTBackbone`; built from a trained keras-hub ViT
    (`from_backbone`), each starts from that attention's query, value and
    output weights, and the model computes another function until it is
    fine-tuned. A keras-hub `ViTImageClassifier` takes it as its backbone.

    Args:
        alpha: positive float, the attention's distance scale
            (`LipschitzRegularizedAttention`). Defaults to `100.0`.
        **kwargs: `keras_hub.models.ViTBackbone`'s arguments.

    Example:

    ```python
    import keras_hub
    import ensemble_zoo as ez

    backbone = ez.models.LRFormerViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=2, num_heads=2,
        hidden_dim=8, mlp_dim=16, alpha=10.0,
    )
    classifier = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=3)
    ```
    """

    method_keys = ("alpha",)
    method_defaults = MappingProxyType({"alpha": 100.0})

    def apply_method(self, alpha):
        replace_attention(
            self,
            functools.partial(LipschitzRegularizedAttention.from_multi_head_attention, alpha=alpha),
        )
