import keras

from ensemble_zoo.layers.subnetwork_masked_dense import SubnetworkMaskedDense
from ensemble_zoo.models.member_sites import FEEDFORWARD_ROLES
from ensemble_zoo.models.member_sites import projection_sites
from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_positive_int

#: The mask arguments (the backbone's `method_keys`) and their defaults.
MASK_DEFAULTS = {"num_members": 10, "logit_mean": 2.0, "logit_std": 1.0, "seed": None}


def _output_operations(model):
    """The nodes producing `model`'s outputs (functional models)."""
    nodes = []
    for output in getattr(model, "outputs", None) or []:
        history = getattr(output, "_keras_history", None)
        if history is not None:
            nodes.append(history.operation._inbound_nodes[history.node_index])
    return nodes


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SubnetworkEnsembleBackbone(WrappedModelsBackbone):
    """A frozen copy of a classifier with member masks on its Dense layers.

    The network of a `SubnetworkEnsembleClassifier` (Kirsch, "(Implicit)
    Ensembles of Ensembles: Epistemic Uncertainty Collapse in Large Models",
    §4.1, extraction A). The backbone copies `model` (config and weights;
    `model` itself is not changed), freezes every copied weight and puts a
    `SubnetworkMaskedDense` (one column and one row mask per member) on its
    Dense layers:

    - a keras-hub model (a `ViTImageClassifier`, any keras-hub text
      classifier): the `Dense` layers of every transformer feed-forward
      block, found by role (`ensemble_zoo.models.member_sites`; the
      embeddings, attention and head stay as they are);
    - any other functional or `Sequential` Keras model (an MLP): every
      `Dense` layer, without a row mask on the layer whose output is the
      model's (class logits are never dropped).

    Its config holds the plain model and the mask arguments, so
    `keras_hub.models.Backbone.from_preset` rebuilds the masks before it
    loads their weights.

    Args:
        model: a built Keras classifier taking one tensor or a dict of
            them and returning logits `(batch, classes)`.
        num_members: int. Defaults to `10` (the paper's).
        logit_mean, logit_std: initial mask logits `N(mean, std)`.
            Defaults to `2.0` and `1.0`.
        seed: optional int for the mask initialization.
        dtype: optional dtype policy for every layer.
        adopt_models: bool, keyword-only. `True` holds the given models as
            they are, without a copy or a dtype change: what `from_config`
            passes (models it has just built under the config's dtype).
            Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): logits of the member-major batch: inputs
    `(members * batch, ...)` (`ensemble_zoo.ops.tile_members`), member
    `m`'s rows through its masks, `(members * batch, classes)`.
    """

    wrapped = ("model",)
    method_keys = tuple(MASK_DEFAULTS)

    def __init__(
        self,
        model,
        num_members=10,
        logit_mean=2.0,
        logit_std=1.0,
        seed=None,
        dtype=None,
        *,
        adopt_models=False,
        **kwargs,
    ):
        input_spec, num_classes = member_io_shapes(model)
        num_members = check_positive_int(num_members, "num_members")
        model = own_wrapped_model(model, dtype, copy=True, adopt=adopt_models)
        freeze_weights(model)
        mask_kwargs = dict(
            num_members=num_members,
            logit_mean=float(logit_mean),
            logit_std=float(logit_std),
            dtype=model.dtype_policy,
        )
        network, masked = self._mask(model, mask_kwargs, seed)
        if not masked:
            raise ValueError(f"`model` '{model.name}' has no Dense layer to mask.")

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = network(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.model = model  # the plain architecture, for the config
        self.network = network
        self.masked_layers = masked

        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.logit_mean = float(logit_mean)
        self.logit_std = float(logit_std)
        self.seed = seed

    @staticmethod
    def _mask(model, mask_kwargs, seed):
        def make(layer, index, mask_rows=True):
            with path_scope(f"{model.name}/masks_{index}"):
                return SubnetworkMaskedDense(
                    layer,
                    mask_rows=mask_rows,
                    seed=None if seed is None else seed + 2 * index,
                    **mask_kwargs,
                )

        sites = projection_sites(model, FEEDFORWARD_ROLES, types=(keras.layers.Dense,))
        if sites:  # a keras-hub model: swap its feed-forward Dense layers.
            masked = []
            for _, parent, attribute in sites:
                wrapper = make(getattr(parent, attribute), len(masked))
                replace_sublayer(parent, attribute, wrapper)
                masked.append(wrapper)
            return model, masked
        output_layers = {id(node.operation) for node in _output_operations(model)}
        dense = [
            layer for layer in getattr(model, "layers", []) if isinstance(layer, keras.layers.Dense)
        ]
        wrappers = {
            id(layer): make(layer, i, mask_rows=id(layer) not in output_layers)
            for i, layer in enumerate(dense)
        }
        network = keras.models.clone_model(
            model, clone_function=lambda layer: wrappers.get(id(layer), layer)
        )
        return network, [wrappers[id(layer)] for layer in dense]
