import math

import keras
from keras import ops

from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape


def _check_finite_number(value, name, strict):
    """A finite float > 0 (`strict`) or >= 0, or a `ValueError` naming the
    argument."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (value > 0 if strict else value >= 0)
        or math.isinf(value)
    ):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"`{name}` must be a finite number {bound}; got {value!r}.")
    return float(value)


def check_capacity_factor(value, name):
    """A finite float > 0, or a `ValueError` naming the argument."""
    return _check_finite_number(value, name, strict=True)


def check_non_negative(value, name):
    """A finite float >= 0, or a `ValueError` naming the argument."""
    return _check_finite_number(value, name, strict=False)


def compute_capacity(
    group_size, num_experts, top_k, capacity_factor, multiple_of=1, rounding="ceil"
):
    """Expert buffer size per routing group (a static Python int).

    `C = ceil(capacity_factor * top_k * group_size / num_experts)` (or
    `round(...)` with `rounding="round"`: Python's round half to even, as
    vmoe's `compute_capacity(ceil_or_round="round")`), then rounded up to a
    multiple of `multiple_of` (vmoe rounds to 4), and finally capped at
    `group_size`: an expert receives a token at most once, so a larger
    buffer could never be filled and the cap changes no output (vmoe's
    Experts Choice would fail there instead). With `"ceil"` a tolerance of
    1e-9 keeps float noise from adding a slot (e.g. `1.1 * 10` is
    `11.000000000000002` in floating point, and gives 11).

    Args:
        group_size: int, the tokens of one routing group (per member).
        num_experts: int, the experts these tokens may choose from (per
            member for E³).
        top_k: int, the experts chosen per token (1 for Experts Choice
            and Soft MoE).
        capacity_factor: float > 0.
        multiple_of: int, round `C` up to a multiple of this. Defaults to 1.
        rounding: `"ceil"` (default) or `"round"`.

    Returns:
        int, the capacity `C >= 1`.

    Raises:
        ValueError: a bad argument, or `"round"` giving 0 slots (vmoe
            raises there too).
    """
    group_size = check_positive_int(group_size, "group_size")
    num_experts = check_positive_int(num_experts, "num_experts")
    top_k = check_positive_int(top_k, "top_k")
    multiple_of = check_positive_int(multiple_of, "capacity_multiple_of")
    capacity_factor = check_capacity_factor(capacity_factor, "capacity_factor")
    rounding = check_capacity_rounding(rounding)
    raw = capacity_factor * top_k * group_size / num_experts
    if rounding == "round":
        capacity = int(round(raw))
        if capacity < 1:
            raise ValueError(
                f"`capacity_factor`={capacity_factor} gives round({raw:g}) = 0 "
                f"slots per expert ({group_size} tokens, {num_experts} "
                "experts); use a larger factor or `capacity_rounding`='ceil'."
            )
    else:
        capacity = max(1, math.ceil(raw - 1e-9 * max(1.0, raw)))
    capacity += (-capacity) % multiple_of
    return min(capacity, group_size)


def check_capacity_rounding(rounding):
    """Validates `capacity_rounding` (`"ceil"` or `"round"`)."""
    if rounding not in ("ceil", "round"):
        raise ValueError(f"`capacity_rounding` must be 'ceil' or 'round'; got {rounding!r}.")
    return rounding


#: What a router's `call` returns for each dispatcher.
DISPATCH_KEYS = {
    "einsum": ("dispatch", "combine"),
    "indices": ("slot_token", "slot_valid", "token_slot", "token_weight"),
}


def check_dispatcher(dispatcher):
    """Validates a `dispatcher` argument (`"einsum"` or `"indices"`)."""
    if dispatcher not in DISPATCH_KEYS:
        raise ValueError(f"`dispatcher` must be one of {tuple(DISPATCH_KEYS)}; got {dispatcher!r}.")
    return dispatcher


def build_on(layer, x):
    """`x` as a tensor, with `layer` built for its shape if it is not yet
    (the start of the layers' `route`)."""
    x = ops.convert_to_tensor(x)
    if not layer.built:
        layer.build(static_shape(x))
    return x


class MemberRouter(keras.layers.Layer):
    """Base of the zoo's MoE routers: routing groups and the E³ partition.

    Holds what every router shares (`TopKRouter`, `ExpertsChoiceRouter`,
    `SoftRouter`): the `num_experts` experts split into `num_members`
    contiguous partitions (member `m` routes only to experts
    `[m * E / M, (m + 1) * E / M)`), the member-major input layout of
    `ensemble_zoo.ops.tile_members`, routing groups of `group_size` tokens
    per member (`None`: one example's tokens), the router noise's seed, and
    the `(M, G, S, E / M, C)` layout of the `dispatch` / `combine` tensors
    that `SparseMoE` consumes. Subclasses build their weights and
    implement `_route`.

    Args:
        num_experts: int, the total number of experts `E`.
        num_members: int, the E³ ensemble size `M`; must divide
            `num_experts`. Defaults to 1.
        group_size: int or `None`, tokens per routing group per member.
            Defaults to `None`, one example's tokens.
        noise_std: float >= 0 or `None`, the standard deviation of the
            training noise on the router logits (`None`: the subclass'
            default).
        seed: int or `None`, seed of the routing noise.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(
        self, num_experts, num_members=1, group_size=None, noise_std=None, seed=None, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_experts = check_positive_int(num_experts, "num_experts")
        self.num_members = check_positive_int(num_members, "num_members")
        if self.num_experts % self.num_members:
            raise ValueError(
                f"`num_experts` ({num_experts}) must be divisible by "
                f"`num_members` ({num_members}): each member routes to its "
                "own contiguous group of num_experts / num_members experts."
            )
        self.experts_per_member = self.num_experts // self.num_members
        if group_size is not None:
            group_size = check_positive_int(group_size, "group_size")
        self.group_size = group_size
        if noise_std is not None:
            noise_std = check_non_negative(noise_std, "noise_std")
        self.noise_std = noise_std
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an int or None; got {seed!r}.")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def _check_input_shape(self, input_shape):
        """Validates `(num_members * batch, ..., dim)`; returns the shape,
        the tokens per example and the group size (static ints)."""
        shape = tuple(input_shape)
        owner = f"{type(self).__name__} '{self.name}'"
        if len(shape) < 2:
            raise ValueError(
                f"{owner} expects `inputs` (num_members * batch, ..., dim) with "
                f"at least 2 axes; got shape {shape}."
            )
        if any(d is None for d in shape[1:]):
            raise ValueError(
                f"{owner} needs static token and feature axes; got input shape {shape}."
            )
        built_dim = getattr(self, "input_dim", None)
        if built_dim is not None and shape[-1] != built_dim:
            raise ValueError(
                f"{owner} was built for inputs with {built_dim} features; got input shape {shape}."
            )
        tokens = math.prod(shape[1:-1])
        group_size = self.group_size if self.group_size is not None else tokens
        rows = shape[0]
        if rows is not None:
            if rows % self.num_members:
                raise ValueError(
                    f"{owner}: the input's first axis ({rows}) must be "
                    f"num_members * batch with `num_members`="
                    f"{self.num_members} (member-major tiling, see "
                    "`ensemble_zoo.ops.tile_members`); got input shape "
                    f"{shape}."
                )
            per_member = rows // self.num_members * tokens
            if per_member % group_size:
                raise ValueError(
                    f"{owner}: `group_size`={group_size} must divide the "
                    f"tokens of each member, batch * tokens = {per_member} "
                    f"(input shape {shape}, num_members={self.num_members})."
                )
        return shape, tokens, group_size

    def _check_build_shape(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) < 2 or shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' expects `inputs` "
                "(num_members * batch, ..., dim) with at least 2 axes and a "
                f"known last axis; got shape {shape}."
            )
        return shape

    def group_tokens(self, x):
        """Reshapes `(num_members * batch, ..., dim)` to routing groups
        `(num_members, num_groups, group_size, dim)`."""
        shape, _, group_size = self._check_input_shape(static_shape(x))
        return ops.reshape(x, (self.num_members, -1, group_size, shape[-1]))

    def ungroup_tokens(self, y, input_shape):
        """Inverse of `group_tokens`: back to `input_shape` (its first axis
        may be unknown)."""
        return ops.reshape(y, (-1,) + tuple(input_shape[1:]))

    def capacity(self, group_size, training=False):
        """The slots per expert and routing group (a static int)."""
        raise NotImplementedError

    def _set_capacity_rule(self, capacity_multiple_of, capacity_rounding):
        """Validates and sets how capacity factors become slot counts."""
        self.capacity_multiple_of = check_positive_int(capacity_multiple_of, "capacity_multiple_of")
        self.capacity_rounding = check_capacity_rounding(capacity_rounding)

    def _compute_capacity(self, group_size, capacity_factor, choices_per_token=1):
        """`compute_capacity` over the member's experts, with the router's
        `capacity_multiple_of` and `capacity_rounding`."""
        return compute_capacity(
            group_size,
            self.experts_per_member,
            choices_per_token,
            capacity_factor,
            self.capacity_multiple_of,
            rounding=self.capacity_rounding,
        )

    def _output_shape(self, input_shape, training=False):
        shape, tokens, group_size = self._check_input_shape(input_shape)
        groups = None
        if shape[0] is not None:
            groups = shape[0] // self.num_members * tokens // group_size
        return (
            self.num_members,
            groups,
            group_size,
            self.experts_per_member,
            self.capacity(group_size, training),
        )

    def compute_output_shape(self, input_shape):
        """Shapes of `dispatch` and `combine` at inference."""
        shape = self._output_shape(input_shape, training=False)
        return {"dispatch": shape, "combine": shape}

    def _noise(self, logits, sigma):
        return logits + keras.random.normal(
            ops.shape(logits), stddev=sigma, seed=self.seed_generator
        )

    def _inspect(self, x, training, **route_kwargs):
        """The dict of `route`: builds the layer on `x` if needed, routes
        it with `_inspect_route` and adds `token_dispatch` when the routing
        has a `dispatch` tensor."""
        x = build_on(self, x)
        result = self._inspect_route(x, bool(training), **route_kwargs)
        if "dispatch" in result:
            result["token_dispatch"] = self.token_dispatch(result["dispatch"], static_shape(x))
        return result

    def _inspect_route(self, x, training, **route_kwargs):
        """The routing of `x` with the metrics `route` reports."""
        raise NotImplementedError

    def token_dispatch(self, dispatch, input_shape):
        """`(M, G, S, E/M, C)` dispatch in the input's row order with
        global expert ids: `(num_members * batch, ..., num_experts, C)`."""
        m, e_m = self.num_members, self.experts_per_member
        capacity = static_shape(dispatch)[-1]
        # blocks[m, e, f] = 1 when member m's expert e is global expert f.
        blocks = ops.reshape(ops.eye(self.num_experts, dtype="float32"), (m, e_m, self.num_experts))
        dispatch = ops.reshape(ops.cast(dispatch, "float32"), (m, -1, e_m, capacity))
        token_dispatch = ops.einsum("mtec,mef->mtfc", dispatch, blocks)
        return ops.reshape(
            token_dispatch, (-1,) + tuple(input_shape[1:-1]) + (self.num_experts, capacity)
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_experts": self.num_experts,
                "num_members": self.num_members,
                "group_size": self.group_size,
                "noise_std": self.noise_std,
                "seed": self.seed,
            }
        )
        return config


class GatedRouter(MemberRouter):
    """Base of the routers with a linear gate (`TopKRouter`,
    `ExpertsChoiceRouter`): a bias-free `(dim, num_experts)` kernel,
    softmax gates over each member's experts (in float32, with training
    noise of standard deviation `noise_std`, default `1 / num_experts`),
    and buffers of `capacity(group_size)` slots from the capacity
    factors (`compute_capacity` with `choices_per_token` choices per
    token).

    Args:
        num_experts, num_members, group_size, seed: see `MemberRouter`.
        capacity_factor: float > 0, the capacity factor in training.
        eval_capacity_factor: float > 0 or `None`, the capacity factor when
            not training; `None` uses `capacity_factor`.
        capacity_multiple_of: int, round capacities up to a multiple of
            this.
        capacity_rounding: `"ceil"` or `"round"` (half to even).
        noise_std: float >= 0 or `None` (`1 / num_experts`), the training
            noise on the logits.
        kernel_initializer: initializer of the `(dim, num_experts)` kernel.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    #: Choices per token in the capacity formula (`top_k` for top-K).
    choices_per_token = 1

    def __init__(
        self,
        num_experts,
        num_members=1,
        group_size=None,
        capacity_factor=1.0,
        eval_capacity_factor=None,
        capacity_multiple_of=1,
        capacity_rounding="ceil",
        noise_std=None,
        kernel_initializer="glorot_uniform",
        seed=None,
        **kwargs,
    ):
        super().__init__(num_experts, num_members, group_size, noise_std, seed, **kwargs)
        self.capacity_factor = check_capacity_factor(capacity_factor, "capacity_factor")
        if eval_capacity_factor is not None:
            eval_capacity_factor = check_capacity_factor(
                eval_capacity_factor, "eval_capacity_factor"
            )
        self.eval_capacity_factor = eval_capacity_factor
        self._set_capacity_rule(capacity_multiple_of, capacity_rounding)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    @property
    def sigma(self):
        """The standard deviation of the training noise (a float)."""
        if self.noise_std is None:
            return 1.0 / self.num_experts
        return self.noise_std

    def capacity(self, group_size, training=False):
        """The buffer size per expert for routing groups of `group_size`."""
        factor = self.capacity_factor
        if not training and self.eval_capacity_factor is not None:
            factor = self.eval_capacity_factor
        return self._compute_capacity(group_size, factor, self.choices_per_token)

    def _index_choices(self):
        """Entries per token in the index form (`token_slot`'s axis 2)."""
        raise NotImplementedError

    def compute_output_spec(self, inputs, training=None, dispatcher="einsum", **kwargs):
        shape = self._output_shape(inputs.shape, training=bool(training))
        if check_dispatcher(dispatcher) == "einsum":
            return {
                "dispatch": keras.KerasTensor(shape, dtype="float32"),
                "combine": keras.KerasTensor(shape, dtype="float32"),
            }
        m, g, s, e_m, c = shape
        slots, choices = (m, g, e_m * c), (m, g, self._index_choices(), s)
        return {
            "slot_token": keras.KerasTensor(slots, dtype="int32"),
            "slot_valid": keras.KerasTensor(slots, dtype="bool"),
            "token_slot": keras.KerasTensor(choices, dtype="int32"),
            "token_weight": keras.KerasTensor(choices, dtype="float32"),
        }

    def build(self, input_shape):
        shape = self._check_build_shape(input_shape)
        self.input_dim = int(shape[-1])
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.input_dim, self.num_experts),
            initializer=self.kernel_initializer,
        )

    def _gates(self, x, training):
        """`(logits, noisy_logits, gates)` of `x`'s routing groups, each
        `(M, G, S, E/M)`; `noisy_logits` is `logits` unless training with
        noise."""
        m, e_m = self.num_members, self.experts_per_member
        x = ops.cast(self.group_tokens(x), "float32")  # (M, G, S, D)
        kernel = ops.reshape(ops.cast(self.kernel, "float32"), (self.input_dim, m, e_m))
        logits = ops.einsum("mgsd,dme->mgse", x, kernel)
        noisy_logits = logits
        if training and self.sigma > 0:
            noisy_logits = self._noise(logits, self.sigma)
        return logits, noisy_logits, ops.softmax(noisy_logits, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "capacity_factor": self.capacity_factor,
                "eval_capacity_factor": self.eval_capacity_factor,
                "capacity_multiple_of": self.capacity_multiple_of,
                "capacity_rounding": self.capacity_rounding,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
