import math

import keras
from keras import ops

from ensemble_zoo.layers.moe.member_router import DISPATCH_KEYS
from ensemble_zoo.layers.moe.member_router import GatedRouter
from ensemble_zoo.layers.moe.member_router import check_capacity_factor
from ensemble_zoo.layers.moe.member_router import check_capacity_rounding  # noqa: F401
from ensemble_zoo.layers.moe.member_router import check_dispatcher
from ensemble_zoo.layers.moe.member_router import check_non_negative
from ensemble_zoo.layers.moe.member_router import compute_capacity  # noqa: F401
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape

_SQRT_HALF = math.sqrt(0.5)


_check_capacity_factor = check_capacity_factor
_check_non_negative = check_non_negative


def _squared_cv(values):
    """Squared coefficient of variation over the last axis (population std)."""
    mean = ops.mean(values, axis=-1)
    return ops.var(values, axis=-1) / ops.square(mean)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TopKRouter(GatedRouter):
    """Noisy top-K token router of V-MoE, partitioned per member for E³.

    A linear router without bias, kernel `(dim, num_experts)` (the layout of
    `keras.layers.Dense(num_experts, use_bias=False)`), gives each token
    router logits; softmax gates choose `top_k` experts per token, and each
    expert takes at most `C` tokens per routing group (its buffer, or
    capacity). The combine weights are the softmax probabilities of the chosen
    experts, **not renormalised** (V-MoE; the E³ paper, "Sparse MoEs meet
    Efficient Ensembles", eq. 1): with `top_k=1` an expert's output is scaled
    by the token's largest gate.

    **Tokens and routing groups.** The input is `(num_members * batch, ...,
    dim)` in the member-major order of `ensemble_zoo.ops.tile_members`: rows
    `m * batch : (m + 1) * batch` are member `m`'s copy of the batch. Member
    `m`'s `batch * tokens` tokens (all axes between the first and the last
    are tokens) are cut, in order, into routing groups of `group_size`
    tokens, so a group never mixes members. Groups route independently, each
    with its own buffers. `group_size=None` (the default) makes one group
    per example (per row): routing and capacity then do not depend on the
    batch size or on the other examples of the batch, and the batch axis may
    be unknown while tracing. An int `group_size` must divide `batch *
    tokens`; vmoe uses the tokens of 8 images per group.

    **E³ partition.** With `num_members=M`, the `num_experts=E` experts are
    split into `M` contiguous groups of `E / M`: member `m` routes only to
    experts `[m * E / M, (m + 1) * E / M)`, with router logits taken from the
    matching columns of the one `(dim, E)` kernel, so an E³ router has exactly
    the parameters of a V-MoE router (the E³ paper's §2 and App. B.1). The
    softmax, the top-K and the capacity are per member, and `num_members=1` is
    V-MoE.

    **Capacity.** `C = ceil(capacity_factor * top_k * group_size /
    experts_per_member)`, rounded up to a multiple of
    `capacity_multiple_of` and capped at `group_size` (see
    `compute_capacity`); it is computed in Python, so every shape is static.
    `eval_capacity_factor` (defaults to `capacity_factor`) is used when
    `training` is false; the E³ paper fine-tunes with 1.5 and evaluates
    with 8.

    **Buffer order.** Choices are placed K-major: the top-1 choices of all
    tokens of a group fill the buffers first (in token order), then the
    top-2 choices, and so on. A choice that finds its expert's buffer full
    is dropped; a token dropped by all its experts gets MoE output 0. With
    `batch_priority=True` (Batch-Prioritized Routing), the tokens of a group
    are first sorted by their top-1 gate, highest first, so confident tokens
    win the slots.

    **Noise and auxiliary losses (training only).** Gaussian noise of standard
    deviation `noise_std` (default `1 / num_experts`, the paper's σ = 1/E;
    vmoe's E³ code effectively uses `M / num_experts`) is added to the router
    logits before the softmax. The layer then adds
    `importance_loss_weight * L_imp + load_loss_weight * L_load` with
    `self.add_loss`, both averaged over routing groups and members:
    `L_imp = CV²(Σ_tokens softmax(clean logits))`, and
    `L_load = CV²(mean_tokens P(e in top-K))` with
    `P = 1 - Φ((t - clean_logit_e) / σ)`, `t` the K-th largest *noisy* logit
    of the token and `Φ` the normal CDF (the E³ paper's App. A / vmoe
    `_load_loss`); `CV² = var / mean²` with the population variance. The load
    loss needs noise: with `noise_std=0` only the importance loss is added.

    **Top-K** is K successive argmax-and-mask steps (ties go to the lower
    expert index), not `keras.ops.top_k`, so the layer exports to a
    SavedModel from JAX. Dispatch and combine masks are built by comparing
    positions with `arange(C)`, with cumulative sums and einsums only.

    Calling the layer returns `{"dispatch": ..., "combine": ...}`, both
    float32 `(num_members, num_groups, group_size, experts_per_member, C)`:
    `dispatch[m, g, s, e, c]` is 1 when token `s` of member `m`'s group `g`
    takes slot `c` of the member's expert `e` (global expert
    `m * experts_per_member + e`), and `combine` holds the gate there.
    `route(x, training)` returns these with the capacity, the logits, the
    auxiliary losses and a per-token global view, for inspection.

    **Index form.** `call(x, dispatcher="indices")` returns the same
    routing without any `(tokens, experts, C)` tensor: `slot_token`
    `(M, G, E/M * C)`, the token (within its group) in each slot of each
    of the member's experts (slot `c` of expert `e` at `e * C + c`),
    `slot_valid` (whether that slot is filled), `token_slot`
    `(M, G, top_k, group_size)`, the slot of each token's k-th choice, and
    `token_weight`, its gate, or 0 where the choice was dropped. The
    dispatch is then a gather of tokens into slots and the combine a gather
    of slots back to tokens, `O(tokens * top_k)` memory
    (`SparseMoE(dispatcher="indices")`); both forms give the same outputs.

    Args:
        num_experts: int, the total number of experts `E`.
        top_k: int, experts chosen per token, at most `E / num_members`.
            Defaults to 1.
        num_members: int, the E³ ensemble size `M` (the number of expert
            partitions); must divide `num_experts`. Defaults to 1 (V-MoE).
        group_size: int or `None`, tokens per routing group per member.
            Defaults to `None`, one example's tokens.
        capacity_factor: float > 0, the capacity factor in training.
            Defaults to 1.0.
        eval_capacity_factor: float > 0 or `None`, the capacity factor when
            not training. Defaults to `capacity_factor`.
        capacity_multiple_of: int, round the capacity up to a multiple of
            this (vmoe: 4). Defaults to 1.
        batch_priority: bool, Batch-Prioritized Routing. Defaults to `False`.
        noise_std: float >= 0 or `None`, the standard deviation of the
            training noise on the router logits. Defaults to
            `1 / num_experts`.
        importance_loss_weight: float. Defaults to 0.005.
        load_loss_weight: float. Defaults to 0.005.
        kernel_initializer: initializer of the `(dim, num_experts)` kernel.
            Defaults to `"glorot_uniform"`.
        seed: int or `None`, seed of the routing noise.
        capacity_rounding: `"ceil"` (default) or `"round"` (half to even,
            vmoe's `capacity_ceil_or_round="round"`).
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import TopKRouter
    from ensemble_zoo.ops import tile_members

    # E3 with 2 members: each member routes its tokens to 4 of 8 experts.
    router = TopKRouter(num_experts=8, top_k=2, num_members=2, seed=0)
    tokens = np.random.normal(size=(3, 5, 16)).astype("float32")
    x = tile_members(tokens, 2)  # (2 * 3, 5, 16), member-major
    routing = router.route(x)
    routing["dispatch"].shape  # (2, 3, 5, 4, 3): members, groups, tokens,
    # experts per member, capacity = ceil(1.0 * 2 * 5 / 4) = 3
    routing["token_dispatch"].shape  # (6, 5, 8, 3), global expert ids
    ```
    """

    def __init__(
        self,
        num_experts,
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
        kernel_initializer="glorot_uniform",
        seed=None,
        capacity_rounding="ceil",
        **kwargs,
    ):
        super().__init__(
            num_experts=num_experts,
            num_members=num_members,
            group_size=group_size,
            noise_std=noise_std,
            seed=seed,
            capacity_factor=capacity_factor,
            eval_capacity_factor=eval_capacity_factor,
            capacity_multiple_of=capacity_multiple_of,
            capacity_rounding=capacity_rounding,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )
        self.top_k = check_positive_int(top_k, "top_k")
        if self.top_k > self.experts_per_member:
            raise ValueError(
                f"`top_k` ({top_k}) must be at most the experts per member, "
                f"num_experts / num_members = {self.experts_per_member}."
            )
        if not isinstance(batch_priority, bool):
            raise ValueError(f"`batch_priority` must be a bool; got {batch_priority!r}.")
        self.batch_priority = batch_priority
        self.importance_loss_weight = _check_non_negative(
            importance_loss_weight, "importance_loss_weight"
        )
        self.load_loss_weight = _check_non_negative(load_loss_weight, "load_loss_weight")

    @property
    def choices_per_token(self):
        return self.top_k

    def _index_choices(self):
        return self.top_k

    # ---------------------------------------------------------- routing

    def _route(self, x, training, with_metrics, dispatcher="einsum"):
        shape, _, group_size = self._check_input_shape(static_shape(x))
        m, e_m, k = self.num_members, self.experts_per_member, self.top_k
        capacity = self.capacity(group_size, training)
        sigma = self.sigma
        noisy = training and sigma > 0
        logits, noisy_logits, gates = self._gates(x, training)

        # Top-K by K argmax-and-mask steps; one boolean one-hot per rank.
        experts = ops.arange(e_m, dtype="int32")
        choices, bests = [], []
        remaining = gates
        for _ in range(k):
            # Gates are >= 0 (masked: -1), never -0.0: the backend's plain
            # argmax, which exports to ONNX (`argmax_int32`).
            best = backend_utils.argmax_int32(remaining, axis=-1)
            onehot = ops.equal(best[..., None], experts)
            choices.append(onehot)
            bests.append(best)
            remaining = ops.where(onehot, -1.0, remaining)
        chosen = ops.cast(ops.stack(choices, axis=2), "float32")  # (M,G,K,S,E)

        if self.batch_priority:
            top1 = ops.sum(gates * chosen[:, :, 0], axis=-1)  # (M, G, S)
            order = ops.cast(ops.argsort(-top1, axis=-1), "int32")
            # perm[..., t, s] = 1 when sorted position t holds token s.
            perm = ops.cast(
                ops.equal(order[..., None], ops.arange(group_size, dtype="int32")), "float32"
            )
            chosen = ops.einsum("mgts,mgkse->mgkte", perm, chosen)

        # K-major buffer positions: all top-1 choices, then all top-2 ...
        flat = ops.reshape(chosen, (m, -1, k * group_size, e_m))
        filled = ops.reshape(ops.cumsum(flat, axis=2), (m, -1, k, group_size, e_m))
        # Each (token, expert) is chosen at most once over the K ranks.
        position = ops.sum(filled * chosen, axis=2) - 1.0  # -1: not chosen
        if self.batch_priority:
            position = ops.einsum("mgts,mgte->mgse", perm, position)
        result = {"capacity": capacity, "group_size": group_size}
        if dispatcher == "indices":
            result.update(self._slot_indices(choices, bests, position, gates, capacity))
        else:
            slots = ops.arange(capacity, dtype="float32")
            dispatch = ops.cast(ops.equal(position[..., None], slots), "float32")
            result["dispatch"] = dispatch
            result["combine"] = gates[..., None] * dispatch
        if with_metrics:
            clean = ops.softmax(logits, axis=-1)
            importance = ops.sum(clean, axis=2)  # (M, G, E/M)
            result["importance_loss"] = ops.mean(_squared_cv(importance))
            if noisy:
                last = ops.cast(choices[-1], "float32")
                # The K-th largest noisy logit of each token.
                threshold = ops.sum(noisy_logits * last, axis=-1)
                z = (threshold[..., None] - logits) / sigma
                p_in_top_k = 0.5 - 0.5 * ops.erf(z * _SQRT_HALF)  # 1 - Phi(z)
                load = ops.mean(p_in_top_k, axis=2)  # (M, G, E/M)
                result["load_loss"] = ops.mean(_squared_cv(load))
            else:
                result["load_loss"] = None
            result.update(logits=logits, noisy_logits=noisy_logits, gates=gates)
        return result

    def _slot_indices(self, choices, bests, position, gates, capacity):
        """The routing as indices instead of one-hot masks.

        Memory `O(tokens * top_k + experts * capacity)` per group instead of
        `O(tokens * experts * capacity)`. Every `(token, rank)` choice is an
        entry `j = rank * group_size + token` with the key `expert * C +
        slot` (or `E/M * C` when its buffer was full); sorting the keys
        lists the filled slots expert by expert, slot by slot, so slot `c`
        of expert `e` holds the entry at sorted position `offset_e + c`,
        where `offset_e` counts the filled slots of the experts before `e`.
        """
        m, e_m, k = self.num_members, self.experts_per_member, self.top_k
        group_size = static_shape(gates)[2]
        expert = ops.stack(bests, axis=2)  # (M, G, K, S) int
        onehot = ops.cast(ops.stack(choices, axis=2), "float32")
        slot = ops.sum(position[:, :, None] * onehot, axis=-1)  # (M,G,K,S)
        gate = ops.sum(gates[:, :, None] * onehot, axis=-1)
        kept = slot < capacity
        token_slot = expert * capacity + ops.cast(ops.minimum(slot, capacity - 1), "int32")
        key = ops.where(kept, token_slot, e_m * capacity)
        order = ops.argsort(ops.reshape(key, (m, -1, k * group_size)), axis=-1)
        sorted_token = ops.cast(order, "int32") % group_size
        filled = ops.minimum(ops.sum(onehot, axis=(2, 3)), capacity)  # (M,G,E/M)
        offset = ops.cumsum(filled, axis=-1) - filled
        slots = ops.arange(capacity, dtype="float32")
        source = offset[..., None] + slots  # (M, G, E/M, C)
        slot_valid = slots < filled[..., None]
        source = ops.cast(ops.minimum(source, k * group_size - 1), "int32")
        slot_token = ops.take_along_axis(
            sorted_token, ops.reshape(source, (m, -1, e_m * capacity)), axis=-1
        )
        return {
            "slot_token": slot_token,
            "slot_valid": ops.reshape(slot_valid, (m, -1, e_m * capacity)),
            "token_slot": token_slot,
            "token_weight": gate * ops.cast(kept, "float32"),
        }

    def _aux_loss(self, result):
        loss = self.importance_loss_weight * result["importance_loss"]
        if result["load_loss"] is not None:
            loss = loss + self.load_loss_weight * result["load_loss"]
        return loss

    def call(self, inputs, training=None, dispatcher="einsum"):
        training = bool(training)
        dispatcher = check_dispatcher(dispatcher)
        wants_loss = training and (self.importance_loss_weight > 0 or self.load_loss_weight > 0)
        result = self._route(inputs, training, with_metrics=wants_loss, dispatcher=dispatcher)
        if wants_loss:
            self.add_loss(self._aux_loss(result))
        return {key: result[key] for key in DISPATCH_KEYS[dispatcher]}

    def route(self, x, training=False, dispatcher="einsum"):
        """Routes `x` without adding losses; returns a dict for inspection.

        With `dispatcher="indices"` the dict holds the index form of `call`
        (see there) instead of `dispatch`, `combine` and `token_dispatch`.

        Keys: `dispatch`, `combine` (as `call`), `capacity` and `group_size`
        (ints), `logits` and `noisy_logits` (`(M, G, S, E/M)`, equal when not
        training), `gates` (the softmax of `noisy_logits`),
        `importance_loss`, `load_loss` (`None` without noise), `aux_loss`
        (the weighted sum that `call` adds in training) and
        `token_dispatch`: `(num_members * batch, ..., num_experts, C)` in the
        input's row order with global expert indices.
        """
        return self._inspect(x, training, dispatcher=dispatcher)

    def _inspect_route(self, x, training, dispatcher="einsum"):
        dispatcher = check_dispatcher(dispatcher)
        result = self._route(x, training, with_metrics=True, dispatcher=dispatcher)
        result["aux_loss"] = self._aux_loss(result)
        return result

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "top_k": self.top_k,
                "batch_priority": self.batch_priority,
                "importance_loss_weight": self.importance_loss_weight,
                "load_loss_weight": self.load_loss_weight,
            }
        )
        return config
