import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.vit_moe.vit_moe_backbone import ViTMoEBackbone
from ensemble_zoo.utils.validation import check_positive_int

POOLINGS = ("token", "gap")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ViTMoEImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """V-MoE and E³ image classifiers (paper 004).

    A `ViTMoEBackbone`, class-token (or average) pooling and one linear
    head shared by the members (E³ shares every non-expert weight).
    `call` returns member logits `(batch, members, classes)`; V-MoE
    (`ensemble_size == 1`) is a one-member ensemble. `fit` minimizes the
    mean of the members' cross-entropies (the paper's E³ loss) plus the
    routers' auxiliary losses (in `model.losses`); predictions average the
    members' probabilities (`predict_uncertainty`).

    Build one by upcycling a dense keras-hub ViT with `from_keras_hub`
    (every expert starts as a copy of its block's MLP), and turn a V-MoE
    into an E³ with the same weights with `from_vmoe` (no new parameters).

    Args:
        backbone: a `ViTMoEBackbone`.
        num_classes: int.
        pooling: `"token"` (class token, default) or `"gap"`.
        dropout: float, dropout before the head. Defaults to 0.
        **kwargs: other `keras.Model` arguments.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    # Upcycle: MoE in blocks 1 and 3, 4 experts, each a copy of the MLP.
    vmoe = ez.models.ViTMoEImageClassifier.from_keras_hub(
        vit, num_experts=4, num_selected_experts=2, moe_layers=[1, 3]
    )
    # E3 from the same weights: 2 members, each routing to its own 2 experts.
    e3 = ez.models.ViTMoEImageClassifier.from_vmoe(
        vmoe, ensemble_size=2, num_selected_experts=1
    )
    x, _ = ez.datasets.load_arrays("digits", "test")
    e3.predict(x[:5], verbose=0).shape  # (5, 2, 8)
    ```
    """

    backbone_cls = ViTMoEBackbone

    def __init__(self, backbone, num_classes, pooling="token", dropout=0.0, **kwargs):
        if not isinstance(backbone, ViTMoEBackbone):
            raise ValueError(
                f"`backbone` must be a ViTMoEBackbone; got {type(backbone).__name__}."
            )
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}; got {pooling!r}.")
        super().__init__(**kwargs)
        # === Layers ===
        self.backbone = backbone
        self.output_dropout = keras.layers.Dropout(dropout, name="output_dropout")
        self.head = keras.layers.Dense(
            check_positive_int(num_classes, "num_classes"), name="predictions"
        )
        # === Config ===
        self.num_members = backbone.ensemble_size
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.member_input_shape = tuple(backbone.image_shape)
        self.build((None,) + self.member_input_shape)
        self.compile()

    def build(self, input_shape):
        self.head.build((None, self.backbone.hidden_dim))
        self.built = True

    def call_members(self, inputs, training=None):
        x = self.backbone(inputs, training=training)  # (batch, M, tokens, dim)
        x = x[:, :, 0] if self.pooling == "token" else ops.mean(x, axis=2)
        x = self.output_dropout(x, training=training)
        return self.head(x)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_members, self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout,
        }

    # === Conversions ===

    @classmethod
    def from_keras_hub(
        cls, classifier, num_experts, num_selected_experts=1, moe_layers=None,
        ensemble_size=1, expert_noise=0.0, **backbone_kwargs,
    ):
        """Upcycles a dense keras-hub `ViTImageClassifier` into V-MoE / E³.

        Every weight is copied; in the MoE blocks every expert is a copy of
        the block's dense MLP and the router is freshly initialized (as in
        sparse upcycling). With `num_selected_experts = num_experts /
        ensemble_size` and enough capacity the gates of a token sum to 1, so
        the upcycled model computes exactly the dense ViT (tested); with
        fewer experts per token the MoE output is scaled by the chosen
        gates until fine-tuning.

        Args:
            classifier: a `keras_hub.models.ViTImageClassifier` without
                `intermediate_dim`.
            num_experts: int, E.
            num_selected_experts: int, K. Defaults to 1.
            moe_layers: MoE block indices; defaults to the last two odd
                blocks.
            ensemble_size: int, M. Defaults to 1 (V-MoE).
            expert_noise: float >= 0. Each expert's kernels get Gaussian
                noise of `expert_noise` times the dense kernel's standard
                deviation (seeded by `seed`), so identical copies start to
                differ; 0 (default) copies exactly. The paper (App. H.2)
                finds no clear gain from noisy expert initialization at
                scale; on a small upcycled model it lets E³ members diverge
                sooner.
            **backbone_kwargs: other `ViTMoEBackbone` arguments (capacity
                factors, `group_size`, `batch_priority`, `noise_std`,
                `seed`, dropout rates).
        """
        import keras_hub

        if not isinstance(classifier, keras_hub.models.ViTImageClassifier):
            raise ValueError(
                "`classifier` must be a keras_hub.models.ViTImageClassifier; "
                f"got {type(classifier).__name__}."
            )
        if classifier.intermediate_dim is not None:
            raise ValueError("ViT classifiers with `intermediate_dim` are not supported.")
        vit = classifier.backbone
        backbone_kwargs.setdefault("dropout_rate", vit.dropout_rate)
        backbone_kwargs.setdefault("attention_dropout", vit.attention_dropout)
        backbone = ViTMoEBackbone(
            image_shape=vit.image_shape,
            patch_size=vit.patch_size,
            num_layers=vit.num_layers,
            num_heads=vit.num_heads,
            hidden_dim=vit.hidden_dim,
            mlp_dim=vit.mlp_dim,
            num_experts=num_experts,
            num_selected_experts=num_selected_experts,
            moe_layers=moe_layers,
            ensemble_size=ensemble_size,
            layer_norm_epsilon=vit.layer_norm_epsilon,
            use_mha_bias=vit.use_mha_bias,
            use_mlp_bias=vit.use_mlp_bias,
            use_class_token=vit.use_class_token,
            use_patch_bias=vit.use_patch_bias,
            **backbone_kwargs,
        )
        if not expert_noise >= 0:
            raise ValueError(f"`expert_noise` must be >= 0; got {expert_noise!r}.")
        upcycle_backbone(vit, backbone, expert_noise, backbone_kwargs.get("seed"))
        model = cls(
            backbone, classifier.num_classes, pooling=classifier.pooling,
            dropout=classifier.dropout, preprocessor=classifier.preprocessor,
        )
        model.head.set_weights(classifier.output_dense.get_weights())
        return model

    @classmethod
    def from_vmoe(cls, model, ensemble_size, num_selected_experts=None, **backbone_overrides):
        """An E³ (or V-MoE) with the weights of `model`, no new parameters.

        The router kernel `(dim, E)` is read as M contiguous row slices
        (member m routes with columns `[m E/M, (m+1) E/M)`), so a V-MoE
        checkpoint fine-tunes directly into E³, as in the paper (App. B.1).

        Args:
            model: a `ViTMoEImageClassifier` (V-MoE or E³).
            ensemble_size: int, the new M; must divide E.
            num_selected_experts: int, the new K. Defaults to the model's
                (it must be at most `E / M`).
            **backbone_overrides: other `ViTMoEBackbone` arguments to
                change (e.g. capacity factors).
        """
        if not isinstance(model, ViTMoEImageClassifier):
            raise ValueError(
                f"`model` must be a ViTMoEImageClassifier; got {type(model).__name__}."
            )
        config = model.backbone.get_config()
        config.pop("name", None)
        config.update(backbone_overrides)
        config["ensemble_size"] = ensemble_size
        if num_selected_experts is not None:
            config["num_selected_experts"] = num_selected_experts
        backbone = ViTMoEBackbone.from_config(config)
        new = cls(backbone, model.num_classes, pooling=model.pooling, dropout=model.dropout)
        new.set_weights(model.get_weights())
        return new


def upcycle_backbone(vit, backbone, expert_noise=0.0, seed=None):
    """Copies a keras-hub `ViTBackbone` into a `ViTMoEBackbone`: dense
    blocks one to one, MoE blocks' attention and norms one to one and the
    dense MLP into every expert (kernels plus `expert_noise` times their
    standard deviation of Gaussian noise)."""
    rng = np.random.default_rng(seed)
    backbone.embedding.set_weights(vit.get_layer("vit_patching_and_embedding").get_weights())
    encoder = vit.get_layer("vit_encoder")
    backbone.layer_norm.set_weights(encoder.layer_norm.get_weights())
    experts = backbone.num_experts
    for i, (dense, block) in enumerate(zip(encoder.encoder_layers, backbone.encoder_blocks)):
        if i not in backbone.moe_layers:
            block.set_weights(dense.get_weights())
            continue
        for name in ("layer_norm_1", "mha", "layer_norm_2"):
            getattr(block, name).set_weights(getattr(dense, name).get_weights())
        for source, target in ((dense.mlp.dense_1, block.moe.dense_1), (dense.mlp.dense_2, block.moe.dense_2)):
            for variable in ("kernel", "bias"):
                if getattr(source, variable, None) is None:
                    continue
                value = np.asarray(ops.convert_to_numpy(getattr(source, variable)))
                value = np.broadcast_to(value, (experts,) + value.shape)
                if expert_noise and variable == "kernel":
                    noise = rng.normal(size=value.shape) * expert_noise * value.std()
                    value = value + noise.astype(value.dtype)
                getattr(target, variable).assign(value)
