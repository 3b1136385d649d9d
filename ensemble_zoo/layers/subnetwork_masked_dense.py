import keras
from keras import ops

from ensemble_zoo.utils.sublayers import set_trainable
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_built_features
from ensemble_zoo.utils.validation import check_member_rows
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import static_shape


def binary_entropy(p):
    """`H_b(p)` in nats, safe at 0 and 1."""
    p = ops.clip(p, 1e-7, 1.0 - 1e-7)
    return -(p * ops.log(p) + (1.0 - p) * ops.log(1.0 - p))


def mask_mutual_information(logits):
    """Mean over units of I[mask unit; member] for `(members, units)` logits.

    Each unit of member `m` is a Bernoulli variable with probability
    `sigmoid(logits[m, u])`; with the member index uniform,
    `I = H_b(mean_m p) - mean_m H_b(p)`, at most `log 2`.
    """
    p = ops.sigmoid(logits)
    return ops.mean(binary_entropy(ops.mean(p, axis=0)) - ops.mean(binary_entropy(p), axis=0))


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SubnetworkMaskedDense(keras.layers.Layer):
    """A frozen `Dense` layer seen through one learned mask per member.

    Implicit ensemble extraction A of Kirsch ("(Implicit) Ensembles of
    Ensembles: Epistemic Uncertainty Collapse in Large Models", §4.1): member
    `m` keeps input columns `c_m = sigmoid(column_logits[m])` and output rows
    `r_m = sigmoid(row_logits[m])` of the frozen kernel; their outer product
    selects a dense sub-matrix, and the row mask also drops the unit's bias:
    `y_m = act(((x * c_m) W + b) * r_m)`, which equals a `Dense` layer with
    kernel `W * outer(c_m, r_m)` and bias `b * r_m` without building M
    kernels. Inputs are member-major `(members * batch, ..., d_in)`
    (`ensemble_zoo.ops.tile_members`). Only the mask logits are trainable;
    masks stay soft (sigmoids), which the diversity term drives towards 0 / 1.

    Args:
        base_layer: a built `keras.layers.Dense`; frozen by the wrapper.
        num_members: int.
        mask_columns: bool, learn input (column) masks. Defaults to `True`.
        mask_rows: bool, learn output (row) masks. Defaults to `True`; the
            extractor turns it off for the layer producing class logits.
        logit_mean, logit_std: the mask logits start `N(mean, std)`
            (defaults 2 and 1: about 88% kept, members differ, as the
            symmetric start is a stationary point of the diversity term).
        seed: optional int.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(
        self,
        base_layer,
        num_members,
        mask_columns=True,
        mask_rows=True,
        logit_mean=2.0,
        logit_std=1.0,
        seed=None,
        **kwargs,
    ):
        if isinstance(base_layer, dict):
            base_layer = keras.saving.deserialize_keras_object(base_layer)
        if not isinstance(base_layer, keras.layers.Dense):
            raise TypeError(f"`base_layer` must be a keras.layers.Dense; got {base_layer!r}.")
        kwargs.setdefault("name", f"{base_layer.name}_masked")
        super().__init__(**kwargs)
        self.base_layer = base_layer
        set_trainable(self.base_layer, False)
        self.num_members = check_positive_int(num_members, "num_members")
        self.mask_columns = check_bool(mask_columns, "mask_columns")
        self.mask_rows = check_bool(mask_rows, "mask_rows")
        if not (self.mask_columns or self.mask_rows):
            raise ValueError("At least one of `mask_columns` and `mask_rows` must be True.")
        self.logit_mean = check_real(logit_mean, "logit_mean")
        self.logit_std = check_real(logit_std, "logit_std", low=0.0, low_open=True)
        self.seed = seed
        if base_layer.built:
            self.build(None)

    def build(self, input_shape):
        if getattr(self, "_built_masks", False):
            return
        if not self.base_layer.built:
            self.base_layer.build(input_shape)
        d_in, d_out = self.base_layer.kernel.shape
        self.d_in, self.d_out = int(d_in), int(d_out)
        self.column_logits = self.row_logits = None
        if self.mask_columns:
            self.column_logits = self.add_weight(
                name="column_logits",
                shape=(self.num_members, self.d_in),
                initializer=keras.initializers.RandomNormal(
                    self.logit_mean, self.logit_std, seed=self.seed
                ),
            )
        if self.mask_rows:
            self.row_logits = self.add_weight(
                name="row_logits",
                shape=(self.num_members, self.d_out),
                initializer=keras.initializers.RandomNormal(
                    self.logit_mean,
                    self.logit_std,
                    seed=None if self.seed is None else self.seed + 1,
                ),
            )
        self._built_masks = True
        self.built = True

    def mask_logits(self):
        """The mask logit variables (column and/or row)."""
        return [v for v in (self.column_logits, self.row_logits) if v is not None]

    def call(self, inputs):
        base = self.base_layer
        if getattr(base, "quantization_mode", None):
            raise ValueError(
                f"SubnetworkMaskedDense '{self.name}' reads the float kernel of "
                f"'{base.name}', which is quantized ({base.quantization_mode}): "
                "the members' masks multiply that kernel, so a subnetwork "
                "ensemble cannot be quantized."
            )
        static = static_shape(inputs)
        check_built_features(self, static, (self.d_in,))
        check_member_rows(self, static, self.num_members)
        x = ops.reshape(inputs, (self.num_members, -1, self.d_in))
        if self.column_logits is not None:
            x = x * ops.cast(ops.sigmoid(self.column_logits), x.dtype)[:, None, :]
        y = ops.einsum("mni,io->mno", x, ops.cast(base.kernel, x.dtype))
        if base.use_bias:
            y = y + ops.cast(base.bias, y.dtype)
        if self.row_logits is not None:
            y = y * ops.cast(ops.sigmoid(self.row_logits), y.dtype)[:, None, :]
        if base.activation is not None:
            y = base.activation(y)
        shape = tuple(ops.shape(inputs)[:-1]) + (self.d_out,)
        return ops.reshape(y, shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.d_out,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "base_layer": keras.saving.serialize_keras_object(self.base_layer),
                "num_members": self.num_members,
                "mask_columns": self.mask_columns,
                "mask_rows": self.mask_rows,
                "logit_mean": self.logit_mean,
                "logit_std": self.logit_std,
                "seed": self.seed,
            }
        )
        return config
