"""LoRA-Ensemble adapters on the experts of a mixture-of-experts block.

keras-hub's mixture-of-experts causal LMs (Mixtral, Qwen-MoE, Qwen 3 MoE,
Qwen 3.5 MoE, GPT-OSS) hold their experts as one layer of stacked kernels
`(experts, d_in, d_out)` that every expert applies by one `einsum` over
flattened tokens, with the activation between two of them: there is no
projection layer per expert to wrap, and a low-rank update cannot be added
to the layer's output. `LoRAEnsembleExperts` wraps the block that holds
the experts (the router, the expert bank and any shared expert) and runs
it once per member over that member's rows, with the member's merged
expert kernels `W + scale * A_m[e] B_m[e]` in place of the frozen ones
(`keras.StatelessScope`, scoped to the call and to the calling thread):
the block's own code computes every member, whatever its activation.
"""

import keras
import numpy as np
from keras import ops
from keras import tree

from ensemble_zoo.layers.lora_ensemble_adapter import MEMBER_LAYOUTS
from ensemble_zoo.layers.member_initializer import MemberInitializer
from ensemble_zoo.utils.sublayers import set_trainable
from ensemble_zoo.utils.sublayers import sublayers
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real


def expert_kernels(block):
    """The stacked expert kernels of a mixture-of-experts block.

    An expert bank is a sublayer with an int `num_experts` and weights of
    shape `(num_experts, d_in, d_out)`, its experts' kernels (their 2-D
    biases are left alone), as keras-hub 0.32 builds every family's.

    Args:
        block: a Keras layer.

    Returns:
        `(bank, [(attribute, variable)])` of the first expert bank among
        `block`'s direct sublayers, or `(None, [])`.
    """
    for _, bank in sublayers(block):
        num_experts = getattr(bank, "num_experts", None)
        if not isinstance(num_experts, int):
            continue
        kernels = [
            (name, value)
            for name, value in vars(bank).items()
            if isinstance(value, keras.Variable)
            and len(value.shape) == 3
            and value.shape[0] == num_experts
        ]
        if kernels:
            return bank, kernels
    return None, []


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleExpertKernel(keras.layers.Layer):
    """The members' low-rank updates of one stacked expert kernel.

    Member `m`'s update of expert `e` is `scale * A[m, e] @ B[m, e]`, with
    `A` `(members, experts, d_in, rank)` drawn per member and expert from
    Xavier-uniform with gain `a_gain` and `B` zero, as `LoRAEnsembleAdapter`
    draws one projection's (the LoRA-Ensemble paper's initialisation).

    Args:
        kernel_shape: `(experts, d_in, d_out)`, the stacked kernel's shape.
        num_members: int, the number of members M.
        rank: int, the rank r.
        lora_alpha: float or `None`; updates are scaled by `lora_alpha /
            rank` (`None`: 1).
        a_gain: float, the Xavier-uniform gain of `A`.
        seed: optional int; `A[m, e]` uses seed `seed + m * experts + e`.
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(
        self, kernel_shape, num_members, rank, lora_alpha=None, a_gain=10.0, seed=None, **kwargs
    ):
        super().__init__(**kwargs)
        kernel_shape = tuple(kernel_shape)
        if len(kernel_shape) != 3 or not all(isinstance(s, int) and s > 0 for s in kernel_shape):
            raise ValueError(
                "`kernel_shape` must be (experts, d_in, d_out) of positive ints; "
                f"got {kernel_shape}."
            )
        self.kernel_shape = kernel_shape
        self.num_members = check_positive_int(num_members, "num_members")
        self.rank = check_positive_int(rank, "rank")
        if lora_alpha is not None:
            lora_alpha = check_real(lora_alpha, "lora_alpha", low=0.0, low_open=True)
        self.lora_alpha = lora_alpha
        self.a_gain = check_real(a_gain, "a_gain", low=0.0, low_open=True)
        self.seed = seed
        self.build(None)

    @property
    def scale(self):
        alpha = self.rank if self.lora_alpha is None else self.lora_alpha
        return float(alpha) / self.rank

    def build(self, input_shape):
        if self.built:
            return
        experts, d_in, d_out = self.kernel_shape
        members = self.num_members
        a_init = MemberInitializer(
            keras.initializers.VarianceScaling(
                scale=self.a_gain**2, mode="fan_avg", distribution="uniform", seed=self.seed
            )
        )

        def init_a(shape, dtype=None):
            # One draw per member and expert: `MemberInitializer` over the
            # flattened `members * experts` slices gives slice i seed + i.
            flat = a_init((members * experts, d_in, self.rank), dtype=dtype)
            return ops.reshape(flat, shape)

        self.lora_a = self.add_weight(
            name="lora_a", shape=(members, experts, d_in, self.rank), initializer=init_a
        )
        self.lora_b = self.add_weight(
            name="lora_b", shape=(members, experts, self.rank, d_out), initializer="zeros"
        )
        self.built = True

    def delta(self, member):
        """Member `member`'s update `(experts, d_in, d_out)` (float32)."""
        a = ops.cast(ops.take(self.lora_a, member, axis=0), "float32")
        b = ops.cast(ops.take(self.lora_b, member, axis=0), "float32")
        return ops.einsum("eir,ero->eio", a, b) * self.scale

    def call(self, inputs):
        raise NotImplementedError(
            "A LoRAEnsembleExpertKernel holds factors; `LoRAEnsembleExperts` applies them."
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel_shape": list(self.kernel_shape),
                "num_members": self.num_members,
                "rank": self.rank,
                "lora_alpha": self.lora_alpha,
                "a_gain": self.a_gain,
                "seed": self.seed,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleExperts(keras.layers.Layer):
    """A frozen mixture-of-experts block whose experts carry one low-rank
    update per ensemble member.

    LoRA-Ensemble (the LoRA-Ensemble paper) adapts linear projections; a
    mixture-of-experts block's experts are projections too, stacked
    `(experts, d_in, d_out)` in one expert bank (`expert_kernels`). Each
    member `m` gets its own `A_m[e]`, `B_m[e]` for every expert `e` of
    every stacked kernel, and computes the block with `W + scale *
    A_m[e] B_m[e]`: the router (and a shared expert) stay the frozen
    base model's, so a member routes its tokens by its own hidden states
    through the shared router.

    The block runs once per member over that member's rows (`M` calls of
    `rows / M`), each with the member's merged kernels substituted for the
    duration of the call by `keras.StatelessScope` (every other weight of
    the block keeps the value it has in the enclosing computation). This is
    the block's own code, so the members are exact whatever the family's
    activation; merging costs `experts * d_in * d_out * rank` products per
    member and kernel at every call, which a decode step pays for each new
    token. A load-balancing loss the block adds in training is averaged
    over the members.

    Args:
        block: the built mixture-of-experts block (a keras-hub
            `MixtralSparseMoeBlock`, `QwenSparseMoeBlock`,
            `GptOssSparseMoeBlock`, ...). It is frozen.
        num_members: int, the number of members M.
        rank: int, the rank r of every update.
        lora_alpha: float or `None`; updates are scaled by `lora_alpha /
            rank` (`None`: 1).
        a_gain: float, the Xavier-uniform gain of `A`. Defaults to `10.0`.
        seed: optional int; kernel `k`'s factors use seeds from `seed + k *
            num_members * experts`.
        member_layout: `"member_major"` (rows `m * batch + b`) or
            `"batch_major"` (rows `b * members + m`, the causal LMs').
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import keras_hub
    import numpy as np
    from keras import ops
    from ensemble_zoo.layers import LoRAEnsembleExperts

    mixtral = keras_hub.models.MixtralBackbone(
        vocabulary_size=16, num_layers=1, num_query_heads=2,
        num_key_value_heads=1, hidden_dim=8, intermediate_dim=16,
        num_experts=4, top_k=2,
    )
    block = mixtral.transformer_layers[0]._sparse_moe_block
    experts = LoRAEnsembleExperts(block, num_members=2, rank=2, seed=0)
    x = np.random.normal(size=(2 * 3, 5, 8)).astype("float32")
    out, router_logits = experts(x)  # every B_m is zero: members equal the block
    to_numpy = ops.convert_to_numpy
    np.allclose(to_numpy(out), to_numpy(block(x)[0]), atol=1e-5)  # True
    ```
    """

    def __init__(
        self,
        block,
        num_members,
        rank,
        lora_alpha=None,
        a_gain=10.0,
        seed=None,
        member_layout="member_major",
        **kwargs,
    ):
        if isinstance(block, dict):
            block = keras.saving.deserialize_keras_object(block)
        if isinstance(block, LoRAEnsembleExperts):
            raise ValueError(f"Block '{block.name}' is already adapted.")
        if not isinstance(block, keras.layers.Layer) or not block.built:
            raise TypeError(f"`block` must be a built Keras layer; got {block!r}.")
        bank, kernels = expert_kernels(block)
        if bank is None:
            raise ValueError(
                f"`block` ({type(block).__name__} '{block.name}') holds no expert bank: "
                "a sublayer with an int `num_experts` and weights of shape "
                "(num_experts, d_in, d_out)."
            )
        kwargs.setdefault("name", f"{block.name}_lora_ensemble")
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")
        self.rank = check_positive_int(rank, "rank")
        self.lora_alpha = lora_alpha
        self.a_gain = a_gain
        self.seed = seed
        self.member_layout = check_choice(member_layout, "member_layout", MEMBER_LAYOUTS)
        self.block = block
        set_trainable(self.block, False)
        self.kernel_attributes = [name for name, _ in kernels]
        stride = self.num_members * bank.num_experts
        self.kernel_adapters = [
            LoRAEnsembleExpertKernel(
                tuple(variable.shape),
                num_members,
                rank,
                lora_alpha=lora_alpha,
                a_gain=a_gain,
                seed=None if seed is None else seed + k * stride,
                name=name.lstrip("_") + "_lora_ensemble",
                dtype=block.dtype_policy,
            )
            for k, (name, variable) in enumerate(kernels)
        ]
        self.built = True

    def merged_kernels(self, member):
        """`{attribute: kernel}`: the expert bank's kernels with member
        `member`'s updates merged, in the kernels' dtypes."""
        _, kernels = expert_kernels(self.block)
        return {
            name: ops.cast(
                ops.cast(variable.value, "float32") + adapter.delta(member), variable.dtype
            )
            for (name, variable), adapter in zip(kernels, self.kernel_adapters, strict=True)
        }

    def _member_rows(self, value, member):
        """Member `member`'s rows of a row-first tensor (others as they are)."""
        if not _is_tensor(value) or len(value.shape) == 0:
            return value
        shape = ops.shape(value)
        if self.member_layout == "batch_major":
            split = ops.reshape(value, (-1, self.num_members) + tuple(shape[1:]))
            return split[:, member]
        return ops.reshape(value, (self.num_members, -1) + tuple(shape[1:]))[member]

    def call(self, inputs, *args, **kwargs):
        rows = ops.shape(inputs)[0]
        if isinstance(rows, int) and rows % self.num_members:
            raise ValueError(
                f"LoRAEnsembleExperts '{self.name}' computes {self.num_members} members over "
                f"the rows of its `inputs`, so their first axis must be a multiple of "
                f"{self.num_members}; got shape {tuple(inputs.shape)}."
            )
        _, kernels = expert_kernels(self.block)
        adapted = {id(variable) for _, variable in kernels}
        others = [(v, v.value) for v in self.block.weights if id(v) not in adapted]
        outputs, losses = [], []
        for member in range(self.num_members):
            merged = self.merged_kernels(member)
            mapping = others + [(variable, merged[name]) for name, variable in kernels]
            member_args = tree.map_structure(
                lambda v, m=member: self._member_rows(v, m), (inputs, args, kwargs)
            )
            with keras.StatelessScope(mapping, collect_losses=True) as scope:
                x, a, k = member_args
                outputs.append(self.block(x, *a, **k))
            losses += scope.losses
        if losses:
            self.add_loss(ops.sum(ops.stack(losses)) / self.num_members)
        return tree.map_structure(lambda *parts: self._restack(parts, inputs), *outputs)

    def _restack(self, parts, inputs):
        """One tensor of every member's rows in the member layout, from the
        members' outputs (each row-first: `(batch, ...)` or flattened
        tokens `(batch * length, ...)`)."""
        if self.member_layout == "member_major":
            return ops.concatenate(parts, axis=0)
        batch = ops.shape(inputs)[0] // self.num_members
        rest = tuple(ops.shape(parts[0])[1:])
        split = [ops.reshape(p, (batch, -1) + rest) for p in parts]
        return ops.reshape(ops.stack(split, axis=1), (-1,) + rest)

    def compute_output_spec(self, inputs, *args, **kwargs):
        # Every member's output has the block's shape over all rows.
        return self.block.compute_output_spec(inputs, *args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "block": keras.saving.serialize_keras_object(self.block),
                "num_members": self.num_members,
                "rank": self.rank,
                "lora_alpha": self.lora_alpha,
                "a_gain": self.a_gain,
                "seed": self.seed,
                "member_layout": self.member_layout,
            }
        )
        return config


def _is_tensor(value):
    return ops.is_tensor(value) or isinstance(value, (keras.KerasTensor, np.ndarray))
