import keras
import keras_hub
from keras import ops

from ensemble_zoo.layers.subnetwork_masked_dense import mask_mutual_information
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.implicit.subnetwork_ensemble_backbone import MASK_DEFAULTS
from ensemble_zoo.models.implicit.subnetwork_ensemble_backbone import SubnetworkEnsembleBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SubnetworkEnsembleClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Diverse masked sub-networks of one frozen network, as an ensemble.

    Implicit ensemble extraction A of Kirsch ("(Implicit) Ensembles of
    Ensembles: Epistemic Uncertainty Collapse in Large Models", §4.1,
    App. A.4): the weights of one trained network stay frozen; each of M
    members learns a sigmoid column mask and row mask per `Dense` layer
    (`SubnetworkMaskedDense`; their outer product selects a dense sub-matrix).
    Training minimizes the mean member cross-entropy minus `diversity_weight`
    times the mutual information between mask and member index, `I[mask; M]`,
    averaged over mask units and over all mask vectors (the paper's weight is
    2.0; it gives no normalization, we average). The members run in one pass:
    the input is tiled to `(members * batch, ...)` and every masked layer
    applies its members' masks; `call` returns `(batch, members, classes)`.

    The network is a `SubnetworkEnsembleBackbone`: a frozen copy of
    `model` (which is not changed) with the masks on its Dense layers (see
    there which ones).

    Decisions where the paper is silent: the row mask also masks the bias;
    masks stay soft (sigmoids) at inference; logits start `N(2, 1)`.

    Args:
        model: a built Keras classifier returning logits `(batch, classes)`.
        num_members: int. Defaults to `10` (the paper's).
        diversity_weight: float lambda. Defaults to `2.0`.
        logit_mean, logit_std: initial mask logits `N(mean, std)`.
            Defaults to `2.0` and `1.0`.
        seed: optional int for the mask initialization.
        backbone: a `SubnetworkEnsembleBackbone`, instead of `model` (how
            the classifier is rebuilt from its config). The mask arguments
            left `None` are then the backbone's.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

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
        num_members=None,
        diversity_weight=2.0,
        logit_mean=None,
        logit_std=None,
        seed=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        if not diversity_weight >= 0:
            raise ValueError(f"`diversity_weight` must be >= 0; got {diversity_weight!r}.")
        method_config = method_arguments(
            backbone,
            (SubnetworkEnsembleBackbone,),
            MASK_DEFAULTS,
            num_members=num_members,
            logit_mean=logit_mean,
            logit_std=logit_std,
            seed=seed,
        )
        backbone = wrapping_backbone(
            SubnetworkEnsembleBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config=method_config,
            model=model,
        )
        # One pass over the member-major batch: member m's rows go through its masks in
        # every masked layer. Sets the mask arguments (`MASK_DEFAULTS`), the backbone's.
        build_member_rows_task(self, backbone, preprocessor, backbone.num_members, **kwargs)
        self.diversity_weight = float(diversity_weight)

    model = backbone_attribute(
        "model", "The frozen network the masks act on (a copy held by `backbone`)."
    )
    network = backbone_attribute("network", "`model` with its masked layers (the graph that runs).")
    masked_layers = backbone_attribute(
        "masked_layers", "Every `SubnetworkMaskedDense`, in the order they were made."
    )

    def mask_mutual_information(self):
        """Mean I[mask; member] over every mask vector (a scalar tensor)."""
        values = [
            mask_mutual_information(logits)
            for layer in self.masked_layers
            for logits in layer.mask_logits()
        ]
        return ops.mean(ops.stack(values))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The compiled loss minus `diversity_weight` times the masks'
        mutual information (it depends on the mask weights only)."""
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        if not self.diversity_weight:
            return loss
        return loss - self.diversity_weight * ops.cast(self.mask_mutual_information(), loss.dtype)

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

    def get_config(self):
        config = super().get_config()
        config.update({"diversity_weight": self.diversity_weight, **self.backbone.method_config})
        return config

    @classmethod
    def from_model(cls, model, num_members=10, **kwargs):
        """Masks on `model` (the backbone holds a frozen copy; `model`
        itself stays trainable and unchanged). The copy of a keras-hub
        task loses its preprocessor and the ensemble takes it over."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(model, num_members, **kwargs)
