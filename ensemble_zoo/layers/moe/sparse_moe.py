import keras
from keras import ops

from ensemble_zoo.layers.gelu import gelu_activation
from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.layers.moe.member_router import build_on
from ensemble_zoo.layers.moe.router_choice import ROUTER_ARGUMENTS
from ensemble_zoo.layers.moe.router_choice import check_router_arguments
from ensemble_zoo.layers.moe.router_choice import make_router
from ensemble_zoo.layers.moe.top_k_router import _check_non_negative
from ensemble_zoo.layers.moe.top_k_router import check_capacity_rounding
from ensemble_zoo.layers.moe.top_k_router import check_dispatcher
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape

#: The routing arguments in `SparseMoE.get_config` as they were given (the
#: router keeps only some of them).
_ROUTER_CONFIG = (
    "top_k capacity_factor eval_capacity_factor capacity_multiple_of batch_priority noise_std"
    " importance_loss_weight load_loss_weight"
).split()

#: The other arguments in `SparseMoE.get_config`, each kept as the attribute
#: of that name.
_CONFIG_ATTRIBUTES = (
    "mlp_dim activation bfloat16_dispatch dropout_rate use_bias seed dispatcher num_slots"
    " capacity_rounding"
).split()

#: The initializer arguments, serialized in `SparseMoE.get_config`.
_INITIALIZERS = ("kernel_initializer", "bias_initializer", "router_kernel_initializer")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SparseMoE(keras.layers.Layer):
    """Sparse mixture of expert MLPs (V-MoE), partitioned per member for E³.

    Replaces a transformer block's MLP. A `TopKRouter` (sublayer `router`)
    sends every token to `top_k` of the experts, each expert processes the
    tokens in its buffer, and a token's output is the gate-weighted sum of its
    experts' outputs, `Σ_e g_e(x) · MLP_e(x)`, with the un-renormalised
    softmax gates of V-MoE (the E³ paper, "Sparse MoEs meet Efficient
    Ensembles", eq. 1). A token dropped by every chosen expert (buffers full)
    gets output 0, so in a residual block only the skip connection carries it.
    See `TopKRouter` for routing groups, capacity, Batch-Prioritized Routing,
    noise and the auxiliary losses (added to `layer.losses` in training).

    Every expert is the MLP of a keras-hub ViT block
    (`keras_hub.src.models.vit.vit_layers.MLP`): `Dense(mlp_dim,
    activation="gelu")` (exact erf GELU; `activation="gelu_approximate"`
    is the tanh form of vit_jax / vmoe), dropout, `Dense(dim)`, dropout.
    The expert weights are stacked on a leading expert axis in two
    `GroupedDense` sublayers, `dense_1` (kernel `(num_experts, dim,
    mlp_dim)`, bias `(num_experts, mlp_dim)`) and `dense_2` (kernel
    `(num_experts, mlp_dim, dim)`, bias `(num_experts, dim)`), so expert `e`
    is a ViT MLP with kernels `dense_1.kernel[e]`, `dense_2.kernel[e]`: a
    dense ViT MLP copied into every expert "upcycles" it. Note that with
    un-renormalised gates the upcycled layer computes
    `(Σ_top-K gates) · MLP(x)`, which equals the dense `MLP(x)` only when a
    token's chosen gates sum to 1, i.e. `top_k = num_experts / num_members`
    with ample capacity (`capacity_factor >= 1`).

    **Routers.** `router="top_k"` (the default) is V-MoE's noisy top-K
    router above. `router="experts_choice"` is Experts Choice routing
    (`ExpertsChoiceRouter`, vmoe's `NoisyTopItemsPerExpertRouter`): each
    expert takes its top-`C` tokens of every group, so buffers are always
    full and a token may get 0 to `E / M` experts. `router="soft"` is Soft
    MoE (`SoftRouter`, vmoe's `SoftRouter`): each of an expert's `num_slots`
    slots is a softmax mix of all tokens of the group and each token a
    softmax mix of all slots' outputs; nothing is dropped. All three give
    the same `(M, G, S, E/M, C)` dispatch and combine tensors, so the
    experts, the E³ partition, bfloat16 dispatch, mixed precision and
    int8 quantization are shared. `top_k`, `batch_priority` and the
    auxiliary losses belong to the top-K router: the other two take
    `top_k=1` and `batch_priority=False` (anything else is an error) and
    add no auxiliary loss (vmoe reports theirs as 0), whatever the loss
    weights. Experts Choice also has the `"indices"` dispatcher (a token
    meets each expert at most once, so the combine gathers `E/M` entries
    per token); Soft MoE's dense weights have only the einsum form.

    **Input layout.** `(num_members * batch, ..., dim)`, member-major as
    produced by `ensemble_zoo.ops.tile_members` (rows `m * batch : (m + 1)
    * batch` are member `m`), typically `(M * batch, tokens, dim)`; the
    output has the input's shape. With `num_members=M > 1` (E³), member
    `m`'s tokens only reach experts `[m * E / M, (m + 1) * E / M)`; with
    `num_members=1` it is V-MoE. The experts run on `(E, groups * C,
    dim)`, static shapes, so the layer compiles with XLA
    (`jit_compile=True`) on JAX and TensorFlow.

    **bfloat16 dispatch.** `bfloat16_dispatch=True` reproduces vmoe's
    `Bfloat16Dispatcher` (`dispatcher.bfloat16=True` in every paper
    config, and always on in vmoe's Soft MoE): each token is rounded to
    bfloat16 (round to nearest even) before the dispatch, and each expert
    output is rounded to bfloat16 before the combine; dispatch and combine
    weights stay in the compute dtype (for Soft MoE a slot is then the
    float32 mix of rounded tokens, as in vmoe). The experts themselves run in the compute
    dtype. The rounding
    moves logits by about 1e-3, so it matters only for matching vmoe's
    checkpoints to 1e-4 (`ViTMoEImageClassifier.from_vmoe_checkpoint`).

    **Dispatchers.** `dispatcher="einsum"` (the default, vmoe's) dispatches
    and combines with einsums over one-hot masks `(M, groups, group_size,
    E / M, C)`: dense matmuls that accelerators like, but memory
    `O(tokens * experts * capacity)`, which grows with the square of the
    group size. `dispatcher="indices"` gathers each slot's token and each
    token's slots (`TopKRouter`'s index form), memory `O(tokens * top_k)`
    beyond the expert buffers. Both give the same outputs, gradients and
    auxiliary losses; `benchmarks/moe.py --memory` reports the peak memory
    of each.

    Args:
        num_experts: int, the total number of experts `E`.
        mlp_dim: int, the hidden size of each expert MLP.
        top_k: int, experts per token, at most `E / num_members`.
            Defaults to 1.
        num_members: int, the E³ ensemble size (number of expert
            partitions); must divide `num_experts`. Defaults to 1.
        group_size: int or `None`, tokens per routing group per member;
            `None` (default) routes each example's tokens as one group.
        capacity_factor: float > 0, training capacity factor. Defaults to
            1.0.
        eval_capacity_factor: float > 0 or `None`, the capacity factor when
            not training. Defaults to `capacity_factor`.
        capacity_multiple_of: int, round the capacity up to a multiple of
            this. Defaults to 1.
        batch_priority: bool, Batch-Prioritized Routing. Defaults to
            `False`.
        noise_std: float >= 0 or `None`, router noise in training. Defaults
            to `1 / num_experts`.
        importance_loss_weight: float. Defaults to 0.005.
        load_loss_weight: float. Defaults to 0.005.
        activation: `"gelu"` (exact, keras-hub's ViT) or
            `"gelu_approximate"` (tanh, vmoe), the experts' activation.
            Defaults to `"gelu"`.
        bfloat16_dispatch: bool, round expert inputs and outputs to
            bfloat16 (see above). Defaults to `False`.
        dropout_rate: float in [0, 1), dropout inside the experts (after the
            GELU and after the second dense layer). Defaults to 0.0.
        use_bias: bool, expert biases. Defaults to `True`.
        kernel_initializer: initializer of each expert's kernels (each
            expert initialized as a separate `Dense`). Defaults to
            `"glorot_uniform"`.
        bias_initializer: initializer of the expert biases. Defaults to
            `"zeros"`.
        router_kernel_initializer: initializer of the `(dim, num_experts)`
            router kernel, or of Soft MoE's `mu` `(dim, num_experts,
            num_slots)`. Defaults to `"glorot_uniform"`.
        seed: int or `None`, seed of the routing noise and expert dropout.
        dispatcher: `"einsum"` or `"indices"` (see above). Defaults to
            `"einsum"`.
        router: `"top_k"` (default), `"experts_choice"` or `"soft"` (see
            above).
        num_slots: int or `None`, Soft MoE's slots per expert; `None`
            derives them from `capacity_factor` as vmoe does (then
            `eval_capacity_factor` must be `None` or equal: the slots are
            weights). Only with `router="soft"`.
        capacity_rounding: `"ceil"`, `"round"` (half to even) or `None`,
            how `capacity_factor` becomes a slot count (`compute_capacity`).
            `None` (default) is vmoe's default for the router: `"ceil"` for
            top-K and Experts Choice, `"round"` for Soft MoE.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import SparseMoE
    from ensemble_zoo.ops import tile_members

    tokens = np.random.normal(size=(2, 17, 32)).astype("float32")
    # V-MoE: 8 experts, 2 per token.
    vmoe = SparseMoE(num_experts=8, mlp_dim=64, top_k=2)
    vmoe(tokens).shape  # (2, 17, 32)
    # E3: 2 members, each routing to its own 4 experts, on tiled tokens.
    e3 = SparseMoE(num_experts=8, mlp_dim=64, top_k=1, num_members=2)
    x = tile_members(tokens, 2)  # (4, 17, 32), member-major
    e3(x, training=True).shape  # (4, 17, 32); aux loss in e3.losses
    e3.dense_1.kernel.shape  # (8, 32, 64)
    ```
    """

    def __init__(
        self,
        num_experts,
        mlp_dim,
        top_k=1,
        num_members=1,
        group_size=None,
        capacity_factor=1.0,
        eval_capacity_factor=None,
        capacity_multiple_of=1,
        batch_priority=False,
        noise_std=None,
        importance_loss_weight=0.005,
        load_loss_weight=0.005,
        activation="gelu",
        bfloat16_dispatch=False,
        dropout_rate=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        router_kernel_initializer="glorot_uniform",
        seed=None,
        dispatcher="einsum",
        router="top_k",
        num_slots=None,
        capacity_rounding=None,
        **kwargs,
    ):
        arguments = locals()
        super().__init__(**kwargs)
        self.dispatcher = check_dispatcher(dispatcher)
        check_router_arguments(
            router,
            top_k,
            batch_priority,
            dispatcher,
            num_slots,
            capacity_factor,
            eval_capacity_factor,
        )
        if capacity_rounding is not None:
            check_capacity_rounding(capacity_rounding)
        self.router_type = router
        self.num_slots = num_slots
        self.capacity_rounding = capacity_rounding
        self.router_kernel_initializer = router_kernel_initializer
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.dropout_rate = _check_non_negative(dropout_rate, "dropout_rate")
        if not self.dropout_rate < 1.0:
            raise ValueError(f"`dropout_rate` must be in [0, 1); got {dropout_rate!r}.")
        self.use_bias = bool(use_bias)
        activation_fn = gelu_activation(activation)
        if not isinstance(bfloat16_dispatch, bool):
            raise ValueError(f"`bfloat16_dispatch` must be a bool; got {bfloat16_dispatch!r}.")
        self.activation = activation
        self.bfloat16_dispatch = bfloat16_dispatch
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.router = make_router(
            router,
            capacity_rounding=capacity_rounding,
            kernel_initializer=router_kernel_initializer,
            **{name: arguments[name] for name in ROUTER_ARGUMENTS},
        )
        self._router_arguments = {name: arguments[name] for name in _ROUTER_CONFIG}
        self.seed = seed
        self.dense_1 = GroupedDense(
            self.mlp_dim,
            num_members=self.router.num_experts,
            activation=activation_fn,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="dense_1",
        )
        self.dropout = keras.layers.Dropout(
            self.dropout_rate,
            seed=None if seed is None else seed + 1,
            dtype=self.dtype_policy,
            name="dropout",
        )

    @property
    def num_experts(self):
        return self.router.num_experts

    @property
    def num_members(self):
        return self.router.num_members

    @property
    def top_k(self):
        return getattr(self.router, "top_k", 1)

    def build(self, input_shape):
        shape = tuple(input_shape)
        self.router.build(shape)
        self.hidden_dim = int(shape[-1])
        self.dense_2 = GroupedDense(
            self.hidden_dim,
            num_members=self.num_experts,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="dense_2",
        )
        # Experts see `(1, experts, groups * capacity, features)`.
        self.dense_1.build((1, self.num_experts, None, self.hidden_dim))
        self.dense_2.build((1, self.num_experts, None, self.mlp_dim))

    def call(self, inputs, training=None):
        shape = static_shape(inputs)
        self.router._check_input_shape(shape)
        m = self.num_members
        e_m = self.router.experts_per_member
        if self.dispatcher == "indices":
            routing = self.router(inputs, training=training, dispatcher="indices")
        else:
            routing = self.router(inputs, training=training)
        # (M, G, S, D), rounded as vmoe's Bfloat16Dispatcher rounds the
        # data it dispatches (for one-hot dispatch the same as rounding
        # each expert input).
        tokens = self._round(self.router.group_tokens(inputs))
        if self.dispatcher == "indices":
            capacity = static_shape(routing["slot_token"])[-1] // e_m
            expert_inputs = (
                ops.take_along_axis(tokens, routing["slot_token"][..., None], axis=2)
                * ops.cast(routing["slot_valid"], self.compute_dtype)[..., None]
            )
            expert_inputs = ops.reshape(expert_inputs, (m, -1, e_m, capacity, self.hidden_dim))
            expert_inputs = ops.transpose(expert_inputs, (0, 2, 1, 3, 4))
        else:
            dispatch = ops.cast(routing["dispatch"], self.compute_dtype)
            capacity = static_shape(dispatch)[-1]
            expert_inputs = ops.einsum("mgsec,mgsd->megcd", dispatch, tokens)
        expert_inputs = ops.reshape(expert_inputs, (1, self.num_experts, -1, self.hidden_dim))
        hidden = self.dropout(self.dense_1(expert_inputs), training=training)
        outputs = self._round(self.dropout(self.dense_2(hidden), training=training))
        outputs = ops.reshape(outputs, (m, e_m, -1, capacity, self.hidden_dim))
        if self.dispatcher == "indices":
            outputs = ops.reshape(
                ops.transpose(outputs, (0, 2, 1, 3, 4)), (m, -1, e_m * capacity, self.hidden_dim)
            )
            token_slot = routing["token_slot"]  # (M, G, K, S)
            k, group_size = static_shape(token_slot)[2:]
            gathered = ops.take_along_axis(
                outputs, ops.reshape(token_slot, (m, -1, k * group_size, 1)), axis=2
            )
            gathered = ops.reshape(gathered, (m, -1, k, group_size, self.hidden_dim))
            weight = ops.cast(routing["token_weight"], self.compute_dtype)
            combined = ops.sum(gathered * weight[..., None], axis=2)
        else:
            combine = ops.cast(routing["combine"], self.compute_dtype)
            combined = ops.einsum("mgsec,megcd->mgsd", combine, outputs)
        return self.router.ungroup_tokens(combined, shape)

    def _round(self, x):
        """Rounds to bfloat16 and back when `bfloat16_dispatch` is set."""
        if not self.bfloat16_dispatch:
            return x
        return ops.cast(ops.cast(x, "bfloat16"), x.dtype)

    def route(self, x, training=False):
        """The routing of `x` (see the router's `route`); adds no losses."""
        return self.router.route(build_on(self, x), training=training)

    def compute_output_shape(self, input_shape):
        shape, _, _ = self.router._check_input_shape(input_shape)
        return shape

    def get_config(self):
        config = super().get_config()
        router = self.router
        config.update(
            num_experts=router.num_experts,
            num_members=router.num_members,
            group_size=router.group_size,
            router=self.router_type,
            **self._router_arguments,
        )
        config.update({name: getattr(self, name) for name in _CONFIG_ATTRIBUTES})
        for name in _INITIALIZERS:
            initializer = keras.initializers.get(getattr(self, name))
            config[name] = keras.initializers.serialize(initializer)
        return config
