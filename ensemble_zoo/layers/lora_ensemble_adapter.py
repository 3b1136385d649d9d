import math

import keras
from keras import ops

from ensemble_zoo.layers.blob_posterior import blob_sigma
from ensemble_zoo.layers.blob_posterior import check_blob
from ensemble_zoo.layers.blob_posterior import flipout_noise
from ensemble_zoo.layers.blob_posterior import gaussian_kl
from ensemble_zoo.layers.blob_posterior import rho_bounds
from ensemble_zoo.layers.member_initializer import MemberInitializer
from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.layers.member_selection import selected_member
from ensemble_zoo.layers.member_selection import selected_members
from ensemble_zoo.utils.sublayers import set_trainable
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real

#: Added to `seed` for BLoB's `rho` initializer, a stream apart from the
#: members' `A` (`seed + m`).
RHO_SEED_OFFSET = 1_000_003

#: Row orders of the tiled batch an adapter accepts.
MEMBER_LAYOUTS = ("member_major", "batch_major")


def kernel_layout(layer):
    """How a `Dense` / `EinsumDense` kernel maps to one `d_in x d_out` matrix.

    The LoRA-Ensemble paper treats each projection as one `d_in x d_out`
    matrix, whatever its head split: an `EinsumDense` kernel such as
    multi-head attention's query `(dim, heads, head_dim)` is read as
    `(dim, heads * head_dim)`. This needs the contracted axes to be the
    input's trailing axes and the other kernel axes the output's trailing
    axes; the kernel may hold them in any order (Gemma's query kernel is
    `(heads, dim, head_dim)`, equation `"btd,ndh->btnh"`; Llama's is
    `(dim, heads, head_dim)`, `"bqm,muh->bquh"`).

    Returns:
        `(d_in, d_out, n_in, n_out, permutation)`: the matrix's sizes, the
        numbers of contracted and produced axes, and the kernel axes in
        matrix order (the contracted axes in the input's order, then the
        produced axes in the output's order): `ops.transpose(kernel,
        permutation)` reshaped to `(d_in, d_out)` is the matrix.
    """
    name = f"{type(layer).__name__} '{layer.name}'"
    if not getattr(layer, "built", False) or getattr(layer, "kernel", None) is None:
        raise ValueError(f"{name} must be built before it is adapted.")
    kernel_shape = tuple(layer.kernel.shape)
    if isinstance(layer, keras.layers.Dense):
        return kernel_shape[0], kernel_shape[1], 1, 1, (0, 1)
    if not isinstance(layer, keras.layers.EinsumDense):
        raise ValueError(f"Only Dense and EinsumDense layers can be adapted; got {name}.")
    equation = layer.equation.replace(" ", "")
    inputs_spec, rest = equation.split(",")
    kernel_spec, outputs_spec = rest.split("->")
    inputs_spec = inputs_spec.replace("...", "")
    outputs_spec = outputs_spec.replace("...", "")
    contracted = "".join(c for c in inputs_spec if c in kernel_spec)
    produced = "".join(c for c in outputs_spec if c in kernel_spec)
    if (
        sorted(kernel_spec) != sorted(contracted + produced)
        or not contracted
        or not produced
        or any(c in outputs_spec for c in contracted)
        or not inputs_spec.endswith(contracted)
        or not outputs_spec.endswith(produced)
        or inputs_spec[: -len(contracted)] != outputs_spec[: -len(produced)]
    ):
        raise ValueError(
            f"{name} has equation {layer.equation!r}; adapting it (LoRA-"
            "Ensemble, BatchEnsemble) needs the kernel's contracted axes to "
            "be the input's trailing axes and its other axes the output's "
            "trailing axes (e.g. 'abc,cde->abde', 'abcd,cde->abe' or "
            "'btd,ndh->btnh')."
        )
    permutation = tuple(kernel_spec.index(c) for c in contracted + produced)
    d_in = math.prod(kernel_shape[kernel_spec.index(c)] for c in contracted)
    d_out = math.prod(kernel_shape[kernel_spec.index(c)] for c in produced)
    return d_in, d_out, len(contracted), len(produced), permutation


def projection_layout(layer):
    """`(d_in, d_out, n_in, n_out)` of a `Dense` / `EinsumDense` kernel
    whose axes are in matrix order (contracted first): a kernel that
    reshapes to `(d_in, d_out)` as it is, which BatchEnsemble's shared
    kernel needs. See `kernel_layout` for the general case."""
    d_in, d_out, n_in, n_out, permutation = kernel_layout(layer)
    if permutation != tuple(range(len(permutation))):
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' has equation "
            f"{layer.equation!r}; this method needs the kernel's contracted "
            "axes first, as the input's trailing axes, followed by the "
            "output's trailing axes (e.g. 'abc,cde->abde' or "
            "'abcd,cde->abe')."
        )
    return d_in, d_out, n_in, n_out


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleAdapter(keras.layers.Layer):
    """A frozen projection plus one low-rank update per ensemble member.

    LoRA-Ensemble (the LoRA-Ensemble paper, "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks"): member `m` computes
    `W0 x + scale * B_m A_m x` with the frozen base weights `W0` (and bias)
    shared by all members and its own `A_m` `(d_in, rank)` and `B_m`
    `(rank, d_out)`. The input is a member-major batch
    `(members * batch, ...)` (see `ensemble_zoo.ops.tile_members`), or
    with `member_layout="batch_major"` a batch-major one (row `b * members
    + m` is sample `b` for member `m`, what a causal LM's samplers and KV
    cache need), so the unmodified network around the layer runs every
    member at once; the adapters are two einsums over the member axis,
    never merged into the kernel (which would materialize M full kernels)
    and never a loop.

    The base layer is a built `Dense` or `EinsumDense` with a linear
    activation; an `EinsumDense` kernel is read as one
    `(prod(contracted axes), prod(output axes))` matrix, as the paper does
    ("projections treated as single units, disregarding their partitioning
    into heads"), which differs from Keras' built-in per-head LoRA. The
    kernel's axes may come in any order (`kernel_layout`): Gemma's
    `"btd,ndh->btnh"` is adapted like Llama's `"bqm,muh->bquh"`.

    Initialization follows the authors' code: `B = 0`, so every member
    starts equal to the base layer, and each `A_m` is drawn independently
    from Xavier-uniform with gain `a_gain` (bound
    `a_gain * sqrt(6 / (d_in + rank))`; the paper uses 10, the main
    diversity knob, about 10x Keras' default LoRA initialization).

    Args:
        base_layer: a built `keras.layers.Dense` or `keras.layers.EinsumDense`.
            It is frozen (`trainable=False`) by the adapter.
        num_members: int, the number of members M.
        rank: int, the rank r of every member's update.
        lora_alpha: float or `None`. The update is scaled by
            `lora_alpha / rank`; `None` means `rank`, a scale of 1 (the
            paper's code has no scaling).
        a_gain: float, the Xavier-uniform gain of `A`. Defaults to `10.0`.
        seed: optional int; member `m`'s `A` uses seed `seed + m`.
        member_layout: `"member_major"` (default; rows `m * batch + b`) or
            `"batch_major"` (rows `b * members + m`).
        blob: `None` (default), or a dict making each `A_m` BLoB's
            variational Gaussian (`ensemble_zoo.layers.blob_posterior`):
            `kl_weight` (required), `eps` (0.05) and `prior_std` (0.2).
            The layer then holds `lora_a_rho` beside `lora_a` (the mean);
            in training it adds flipout noise to the update and the KL
            term (the members' mean), times `kl_weight`, to the model's
            losses; outside training it computes the posterior mean. The
            `A` means start at `a_gain`: pass about 1 (PEFT's LoRA scale)
            rather than the ensemble's 10, which starts the KL against the
            prior's 0.2 large.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import keras
    import numpy as np
    from ensemble_zoo.layers import LoRAEnsembleAdapter
    from ensemble_zoo.ops import tile_members, untile_members

    dense = keras.layers.Dense(16)
    dense.build((None, 8))
    adapter = LoRAEnsembleAdapter(dense, num_members=4, rank=2, seed=0)
    x = np.random.normal(size=(3, 8)).astype("float32")
    y = untile_members(adapter(tile_members(x, 4)), 4)  # (3, 4, 16)
    # B starts at zero, so every member equals the frozen layer.
    to_numpy = keras.ops.convert_to_numpy
    np.allclose(to_numpy(y[:, 2]), to_numpy(dense(x)), atol=1e-6)  # True
    ```
    """

    def __init__(
        self,
        base_layer,
        num_members,
        rank,
        lora_alpha=None,
        a_gain=10.0,
        seed=None,
        member_layout="member_major",
        blob=None,
        **kwargs,
    ):
        if isinstance(base_layer, dict):
            base_layer = keras.saving.deserialize_keras_object(base_layer)
        if isinstance(base_layer, LoRAEnsembleAdapter):
            raise ValueError(f"Layer '{base_layer.name}' is already adapted.")
        if not isinstance(base_layer, (keras.layers.Dense, keras.layers.EinsumDense)):
            raise TypeError(
                "`base_layer` must be a keras.layers.Dense or "
                f"keras.layers.EinsumDense; got {base_layer!r}."
            )
        kwargs.setdefault("name", f"{base_layer.name}_lora_ensemble")
        super().__init__(**kwargs)
        activation = getattr(base_layer, "activation", None)
        if activation not in (None, keras.activations.linear):
            raise ValueError(
                f"The base layer '{base_layer.name}' has activation "
                f"{keras.activations.serialize(activation)!r}; only linear "
                "projections can be adapted (the update goes before the "
                "activation)."
            )
        self.num_members = check_positive_int(num_members, "num_members")
        self.rank = check_positive_int(rank, "rank")
        if lora_alpha is not None:
            lora_alpha = check_real(lora_alpha, "lora_alpha", low=0.0, low_open=True)
        self.lora_alpha = lora_alpha
        self.a_gain = check_real(a_gain, "a_gain", low=0.0, low_open=True)
        self.seed = seed
        self.member_layout = check_choice(member_layout, "member_layout", MEMBER_LAYOUTS)
        self.blob = check_blob(blob)
        if self.blob is not None:
            self.seed_generator = keras.random.SeedGenerator(seed)
        self.base_layer = base_layer
        set_trainable(self.base_layer, False)
        if base_layer.built:
            self.build(None)

    @property
    def scale(self):
        alpha = self.rank if self.lora_alpha is None else self.lora_alpha
        return float(alpha) / self.rank

    def build(self, input_shape):
        if getattr(self, "lora_a", None) is not None:
            return  # built in __init__ from an already built base layer
        if not self.base_layer.built:
            self.base_layer.build(input_shape)
        (self.d_in, self.d_out, self.n_in, self.n_out, self.permutation) = kernel_layout(
            self.base_layer
        )
        a_init = keras.initializers.VarianceScaling(
            scale=self.a_gain**2, mode="fan_avg", distribution="uniform", seed=self.seed
        )
        # Member by member: a (M, d_in, r) variance scaling would count M in
        # its fans.
        self.lora_a = self.add_weight(
            name="lora_a",
            shape=(self.num_members, self.d_in, self.rank),
            initializer=MemberInitializer(a_init),
        )
        self.lora_b = self.add_weight(
            name="lora_b", shape=(self.num_members, self.rank, self.d_out), initializer="zeros"
        )
        if self.blob is not None:
            low, high = rho_bounds(self.blob["eps"])
            self.lora_a_rho = self.add_weight(
                name="lora_a_rho",
                shape=(self.num_members, self.d_in, self.rank),
                # Its own stream: `A`'s initializer draws from `seed`.
                initializer=keras.initializers.RandomUniform(
                    low, high, seed=None if self.seed is None else self.seed + RHO_SEED_OFFSET
                ),
            )
        self.built = True

    def _check_input_shape(self, shape, members):
        """Static checks of the input's shape (skipped for unknown sizes):
        the features the base layer was built for, and rows that split
        into `members` (they failed inside a reshape or an einsum)."""
        if len(shape) <= self.n_in:
            raise ValueError(
                f"LoRAEnsembleAdapter '{self.name}' needs `inputs` of rank > "
                f"{self.n_in} (rows, then the features); got shape {shape}."
            )
        features = shape[len(shape) - self.n_in :]
        known = all(isinstance(size, int) for size in features)
        if known and math.prod(features) != self.d_in:
            raise ValueError(
                f"LoRAEnsembleAdapter '{self.name}' was built for {self.d_in} "
                f"input features (its base layer '{self.base_layer.name}'); got "
                f"`inputs` of shape {shape}, whose last {self.n_in} axes hold "
                f"{math.prod(features)}."
            )
        rows = shape[0]
        if isinstance(rows, int) and rows % members:
            layout = (
                "member-major: M copies of the batch, one after another"
                if self.member_layout == "member_major"
                else "batch-major: each example's M rows together"
            )
            raise ValueError(
                f"LoRAEnsembleAdapter '{self.name}' computes {members} members "
                f"over the rows of its `inputs` ({layout}), so their first axis "
                f"must be a multiple of {members}; got shape {shape}."
            )

    def call(self, inputs, training=None):
        member = selected_member()
        sample = bool(training) and self.blob is not None
        shape = tuple(inputs.shape)
        self._check_input_shape(
            shape,
            selected_count(self.num_members)
            if self.member_layout == "member_major"
            else self.num_members,
        )
        known = all(isinstance(size, int) for size in shape)  # not None or symbolic
        rows = math.prod(shape[: len(shape) - self.n_in]) if known else 0
        if (
            member is not None
            and not sample
            and self.member_layout == "member_major"
            and getattr(self.base_layer, "quantization_mode", None) is None
            and rows * (self.d_in + self.d_out) > self.d_in * self.d_out
        ):
            # One member's rows: merging its kernel (d_in * rank * d_out
            # products) is cheaper than two low-rank products per row.
            return self._merged_call(inputs, member)
        outputs = self.base_layer(inputs)
        x = ops.cast(inputs, self.compute_dtype)
        a, members = selected_members(self.lora_a, self.num_members)
        b, _ = selected_members(self.lora_b, self.num_members)
        a = ops.cast(a, self.compute_dtype)
        b = ops.cast(b, self.compute_dtype)
        if self.member_layout == "member_major":
            # (M * batch, ..., d_in) -> (M, rows, d_in): member-major rows.
            x = ops.reshape(x, (members, -1, self.d_in))
            equation = "mni,mir->mnr"
            z = ops.einsum(equation, x, a)
            if sample:
                z = z + self._blob_noise(x, equation, members)
            delta = ops.einsum("mnr,mro->mno", z, b)
        else:
            # (batch * M, tokens, d_in) -> (batch, M, rest, d_in).
            shape = ops.shape(x)
            rest = 1
            for size in shape[1 : len(shape) - self.n_in]:
                rest = rest * size
            x = ops.reshape(x, (-1, self.num_members, rest, self.d_in))
            equation = "bmni,mir->bmnr"
            z = ops.einsum(equation, x, a)
            if sample:
                z = z + self._blob_noise(x, equation, self.num_members)
            delta = ops.einsum("bmnr,mro->bmno", z, b)
        if self.scale != 1.0:
            delta = delta * self.scale
        delta = ops.reshape(delta, ops.shape(outputs))
        return outputs + ops.cast(delta, outputs.dtype)

    def _blob_noise(self, x, equation, members):
        """BLoB's flipout noise for the rows `x` of `members` members (in
        the rank space, before `B`), and its KL term added to the losses."""
        rho, _ = selected_members(self.lora_a_rho, self.num_members)
        mean, _ = selected_members(self.lora_a, self.num_members)
        sigma = blob_sigma(ops.cast(rho, "float32"))
        # The members' mean, as the members' cross-entropies are averaged.
        kl = gaussian_kl(ops.cast(mean, "float32"), sigma, self.blob["prior_std"])
        self.add_loss(self.blob["kl_weight"] * kl / members)
        rank_shape = tuple(ops.shape(x)[:-1]) + (self.rank,)
        signs = [
            ops.cast(
                2 * keras.random.randint(shape, 0, 2, seed=self.seed_generator) - 1,
                self.compute_dtype,
            )
            for shape in (ops.shape(x), rank_shape)
        ]
        normal = keras.random.normal(
            ops.shape(mean), dtype=self.compute_dtype, seed=self.seed_generator
        )
        sigma = ops.cast(sigma, self.compute_dtype)
        return flipout_noise(x, sigma, signs[0], signs[1], normal, equation)

    def compute_output_shape(self, input_shape):
        return self.base_layer.compute_output_shape(input_shape)

    def merged_kernel(self, member):
        """The kernel of member `member` merged: `W0 + scale * A_m B_m`.

        Returned in the base kernel's shape (and axis order), for
        reference comparisons and for exporting one member as a plain
        model. `member` may be an int or an integer scalar tensor.
        """
        a = ops.take(self.lora_a, member, axis=0)
        b = ops.take(self.lora_b, member, axis=0)
        delta = ops.matmul(a, b) * self.scale
        kernel = self.base_layer.kernel
        shape = tuple(kernel.shape)
        delta = ops.reshape(delta, tuple(shape[i] for i in self.permutation))
        inverse = [self.permutation.index(i) for i in range(len(shape))]
        return kernel + ops.cast(ops.transpose(delta, inverse), kernel.dtype)

    def _merged_call(self, inputs, member):
        """One member's rows (`single_member`) through its merged kernel:
        `d_in * rank * d_out` products for the merge instead of two
        low-rank products per row."""
        base = self.base_layer
        kernel = ops.cast(self.merged_kernel(member), self.compute_dtype)
        x = ops.cast(inputs, self.compute_dtype)
        if isinstance(base, keras.layers.Dense):
            y = ops.matmul(x, kernel)
        else:
            y = ops.einsum(base.equation, x, kernel)
        if getattr(base, "bias", None) is not None:
            y = y + ops.cast(base.bias, y.dtype)
        return y

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "base_layer": keras.saving.serialize_keras_object(self.base_layer),
                "num_members": self.num_members,
                "rank": self.rank,
                "lora_alpha": self.lora_alpha,
                "a_gain": self.a_gain,
                "seed": self.seed,
                "member_layout": self.member_layout,
                "blob": self.blob,
            }
        )
        return config
