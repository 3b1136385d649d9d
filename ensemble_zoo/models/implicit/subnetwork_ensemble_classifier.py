import keras
import keras_hub
from keras import ops

from ensemble_zoo.layers.subnetwork_masked_dense import SubnetworkMaskedDense
from ensemble_zoo.layers.subnetwork_masked_dense import mask_mutual_information
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import wrapped_models
from ensemble_zoo.models.wrapped_models_backbone import SubnetworkEnsembleBackbone
from ensemble_zoo.models.ensemble_classifier import SubclassedEnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.model_copies import copy_model
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_positive_int


def _vit_mlp_layers(model):
    from keras_hub.src.models.vit.vit_layers import MLP

    return [
        layer for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, MLP)
    ]


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SubnetworkEnsembleClassifier(SubclassedEnsembleClassifier, keras_hub.models.ImageClassifier):
    """Diverse masked sub-networks of one frozen network, as an ensemble.

    Implicit ensemble extraction A of Kirsch (paper 000, §4.1, App. A.4):
    the weights of one trained network stay frozen; each of M members
    learns a sigmoid column mask and row mask per `Dense` layer
    (`SubnetworkMaskedDense`; their outer product selects a dense
    sub-matrix). Training minimizes the mean member cross-entropy minus
    `diversity_weight` times the mutual information between mask and
    member index, `I[mask; M]`, averaged over mask units and over all mask
    vectors (the paper's weight is 2.0; it gives no normalization, we
    average). The members run in one pass: the input is tiled to
    `(members * batch, ...)` and every masked layer applies its members'
    masks; `call` returns `(batch, members, classes)`.

    Which layers are masked:
    - a keras-hub `ViTImageClassifier`: both `Dense` layers of every
      transformer MLP block (the patch embedding, attention and head stay
      as they are);
    - any other functional or `Sequential` Keras model (an MLP): every
      `Dense` layer, without a row mask on the layer whose output is the
      model's (class logits are never dropped).

    Decisions where the paper is silent: the row mask also masks the bias;
    masks stay soft (sigmoids) at inference; logits start `N(2, 1)`.

    Args:
        model: a built Keras classifier returning logits `(batch, classes)`.
            Its weights are frozen in place (use `from_model` to copy).
        num_members: int. Defaults to `10` (the paper's).
        diversity_weight: float lambda. Defaults to `2.0`.
        logit_mean, logit_std: initial mask logits `N(mean, std)`.
        seed: optional int for the mask initialization.
        backbone: a `SubnetworkEnsembleBackbone`, instead of `model` (how
            the classifier is rebuilt from its config).
        **kwargs: other `keras.Model` arguments.

    Example:

    ```python
    import keras
    import ensemble_zoo as ez

    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(256, activation="relu")(x)
    mlp = keras.Model(inputs, keras.layers.Dense(8)(x))
    masks = ez.models.SubnetworkEnsembleClassifier.from_model(mlp, num_members=4, seed=0)
    x, y = ez.datasets.load_arrays("digits", "train")
    masks.fit(x, y, epochs=1, verbose=0)  # trains the masks only
    masks.predict(x, verbose=0).shape  # (866, 4, 8)
    ```
    """

    backbone_cls = SubnetworkEnsembleBackbone

    def __init__(
        self,
        model=None,
        num_members=10,
        diversity_weight=2.0,
        logit_mean=2.0,
        logit_std=1.0,
        seed=None,
        backbone=None,
        **kwargs,
    ):
        model = wrapped_models(model, backbone, "model", SubnetworkEnsembleBackbone)
        input_shape, num_classes = member_io_shapes(model, 0)
        num_members = check_positive_int(num_members, "num_members")
        if not diversity_weight >= 0:
            raise ValueError(
                f"`diversity_weight` must be >= 0; got {diversity_weight!r}."
            )
        super().__init__(**kwargs)
        mask_kwargs = dict(
            num_members=num_members, logit_mean=logit_mean, logit_std=logit_std
        )
        freeze_weights(model)
        network, masked = self._wrap(model, mask_kwargs, seed)
        if not masked:
            raise ValueError(f"`model` '{model.name}' has no Dense layer to mask.")
        # === Layers ===
        self.backbone = backbone or SubnetworkEnsembleBackbone(model=model)
        self.network = network
        self.masked_layers = masked
        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.member_input_shape = input_shape
        self.diversity_weight = float(diversity_weight)
        self.logit_mean = float(logit_mean)
        self.logit_std = float(logit_std)
        self.seed = seed
        self.build((None,) + input_shape)
        self.compile()

    @staticmethod
    def _wrap(model, mask_kwargs, seed):
        def make(layer, index, mask_rows=True):
            with path_scope(f"{model.name}/masks_{index}"):
                return SubnetworkMaskedDense(
                    layer,
                    mask_rows=mask_rows,
                    seed=None if seed is None else seed + 2 * index,
                    **mask_kwargs,
                )

        blocks = _vit_mlp_layers(model)
        if blocks:  # keras-hub ViT: swap the MLP blocks' Dense layers.
            masked = []
            for block in blocks:
                for attribute in ("dense_1", "dense_2"):
                    wrapper = make(getattr(block, attribute), len(masked))
                    replace_sublayer(block, attribute, wrapper)
                    masked.append(wrapper)
            return model, masked
        output_layers = {id(node.operation) for node in _output_operations(model)}
        dense = [
            layer for layer in getattr(model, "layers", [])
            if isinstance(layer, keras.layers.Dense)
        ]
        wrappers = {
            id(layer): make(layer, i, mask_rows=id(layer) not in output_layers)
            for i, layer in enumerate(dense)
        }
        network = keras.models.clone_model(
            model, clone_function=lambda layer: wrappers.get(id(layer), layer)
        )
        return network, [wrappers[id(layer)] for layer in dense]

    def build(self, input_shape):
        self.built = True

    @property
    def model(self):
        """The wrapped network (held by `backbone`)."""
        return self.backbone.model

    def mask_mutual_information(self):
        """Mean I[mask; member] over every mask vector (a scalar tensor)."""
        values = [
            mask_mutual_information(logits)
            for layer in self.masked_layers
            for logits in layer.mask_logits()
        ]
        return ops.mean(ops.stack(values))

    def quantize(self, mode=None, **kwargs):
        """Refused: every member's masks multiply the shared float kernels
        (`SubnetworkMaskedDense` reads them), which Keras' int8 / int4 /
        float8 layers replace; quantized, the model computed other
        predictions (23% argmax agreement on the digits test set) where it
        must raise."""
        raise ValueError(
            f"SubnetworkEnsembleClassifier cannot be quantized (mode={mode!r}): "
            "its members share the wrapped model's float kernels under "
            "per-member masks, which quantized layers do not keep."
        )

    def call_members(self, inputs, training=None):
        tiled = tile_members(inputs, self.num_members)
        logits = self.network(tiled, training=training)
        if self.diversity_weight:
            self.add_loss(-self.diversity_weight * self.mask_mutual_information())
        return untile_members(logits, self.num_members)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_members, self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "num_members": self.num_members,
            "diversity_weight": self.diversity_weight,
            "logit_mean": self.logit_mean,
            "logit_std": self.logit_std,
            "seed": self.seed,
        }

    @classmethod
    def from_model(cls, model, num_members=10, **kwargs):
        """Masks on a copy of `model` (same config and weights); `model`
        itself is left trainable and unchanged. The copy of a keras-hub
        task loses its preprocessor and the ensemble takes it over."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(copy_model(model), num_members, **kwargs)


def _output_operations(model):
    """The nodes producing `model`'s outputs (functional models)."""
    nodes = []
    for output in getattr(model, "outputs", None) or []:
        history = getattr(output, "_keras_history", None)
        if history is not None:
            nodes.append(history.operation._inbound_nodes[history.node_index])
    return nodes
