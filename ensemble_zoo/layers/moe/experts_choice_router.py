import math

import keras
from keras import ops

from ensemble_zoo.layers.moe.member_router import GatedRouter
from ensemble_zoo.layers.moe.member_router import check_dispatcher
from ensemble_zoo.utils.validation import static_shape


def experts_choice_metrics(dispatch, top_gates, experts):
    """vmoe's Experts Choice metrics, averaged over members and groups.

    `dispatch` is `(M, G, S, E/M, C)` (0/1), `top_gates` the gates of the
    chosen tokens `(M, G, E/M, C)` and `experts` the experts per member.
    vmoe (`moe.get_top_items_per_expert_dispatcher`) reports each metric
    per routing group and its trainer averages them; these are those
    averages. `auxiliary_loss` is 0: Experts Choice balances the load by
    construction and has no auxiliary loss.
    """
    n_items = ops.sum(dispatch, axis=(3, 4))  # (M, G, S): experts per token
    metrics = {
        "auxiliary_loss": ops.zeros((), "float32"),
        "num_experts_per_item_min": ops.mean(ops.min(n_items, axis=-1)),
        "num_experts_per_item_max": ops.mean(ops.max(n_items, axis=-1)),
        "min_selected_gate": ops.mean(ops.min(top_gates, axis=(2, 3))),
        "max_selected_gate": ops.mean(ops.max(top_gates, axis=(2, 3))),
    }
    thresholds = [2**i for i in range(int(math.log2(experts)) + 1)] + [experts]
    for t in thresholds:
        processed = ops.cast(n_items >= t, "float32")
        metrics[f"ratio_processed_items_by_at_least_{t}_experts"] = ops.mean(processed)
    return metrics


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ExpertsChoiceRouter(GatedRouter):
    """Experts Choice routing (Zhou et al. 2022), as vmoe's
    `NoisyTopItemsPerExpertRouter`, partitioned per member for E³.

    Tokens do not choose experts; **each expert chooses its top-`C`
    tokens** of every routing group by its softmax gate. Every buffer is
    exactly full, so the load is balanced by construction and there is no
    auxiliary loss; a token may be taken by several experts or by none
    (its MoE output is then 0, and the residual connection carries it).

    Per routing group (see `MemberRouter` for groups and the E³ partition):

    1. logits `x @ W`, `W` the `(dim, num_experts)` kernel of a bias-free
       dense layer (vmoe's `Router/dense/kernel`); member `m` uses the
       columns of its experts;
    2. in training, Gaussian noise of standard deviation `noise_std`
       (default `1 / num_experts`: vmoe adds `noise_std / num_experts`
       with its default `noise_std=1.0`) is added to the logits;
    3. gates = softmax over the member's experts, in float32;
    4. expert `e` takes the `C` tokens with the largest gate `g[s, e]`,
       slot `c` holding the `c`-th largest (ties: the lower token index
       first, as `jax.lax.top_k`); `combine[s, e, c] = g[s, e]` there.

    **Capacity.** `C = capacity_factor * group_size / experts_per_member`,
    rounded up (`capacity_rounding="ceil"`, vmoe's dispatcher default) or
    half to even (`"round"`, vmoe's Experts Choice configs), then up to a
    multiple of `capacity_multiple_of` and capped at `group_size` (see
    `compute_capacity`; vmoe would fail above `group_size`).
    `eval_capacity_factor` (defaults to `capacity_factor`) is used when
    not training.

    **Implementation.** The chosen tokens do not depend on how a backend
    orders ties (`keras.ops.top_k`'s order differs): only the values of
    the `C` largest gates of each expert are taken (a sort), and a
    token's rank is the number of larger top-`C` gates plus the number of
    equal gates at lower token indices; the token takes slot `rank` if
    `rank < C`. Memory is
    `O(group_size * experts * C)` per group, that of the dispatch tensor;
    all shapes are static (`jit_compile=True` on JAX and TensorFlow).

    Calling the layer returns `{"dispatch": ..., "combine": ...}`, float32
    `(num_members, num_groups, group_size, experts_per_member, C)`, the
    layout of `TopKRouter`, so `SparseMoE` dispatches and combines both in
    the same way. `route(x, training)` also returns the logits, the gates,
    the capacity, `token_dispatch` (global expert ids) and `metrics`, the
    metrics vmoe reports (see `experts_choice_metrics`).

    Args:
        num_experts: int, the total number of experts `E`.
        num_members: int, the E³ ensemble size; must divide
            `num_experts`. Defaults to 1.
        group_size: int or `None`, tokens per routing group per member.
            Defaults to `None`, one example's tokens.
        capacity_factor: float > 0, the capacity factor in training.
            Defaults to 1.0.
        eval_capacity_factor: float > 0 or `None`, the capacity factor
            when not training. Defaults to `capacity_factor`.
        capacity_multiple_of: int, round `C` up to a multiple of this.
            Defaults to 1.
        capacity_rounding: `"ceil"` (default) or `"round"`.
        noise_std: float >= 0 or `None`, the training noise on the logits.
            Defaults to `1 / num_experts`.
        kernel_initializer: initializer of the `(dim, num_experts)` kernel.
            Defaults to `"glorot_uniform"` (vmoe: `lecun_normal`).
        seed: int or `None`, seed of the routing noise.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import keras
    import numpy as np
    from ensemble_zoo.layers import ExpertsChoiceRouter

    router = ExpertsChoiceRouter(num_experts=4, capacity_factor=1.0)
    tokens = np.random.normal(size=(2, 8, 16)).astype("float32")
    routing = router.route(tokens)
    dispatch = keras.ops.convert_to_numpy(routing["dispatch"])
    assert dispatch.shape == (1, 2, 8, 4, 2)  # C = 1.0 * 8 / 4 = 2
    # Every expert fills its 2 slots in every group (image):
    assert (dispatch.sum(axis=(2, 4)) == 2).all()
    ```
    """

    def _index_choices(self):
        return self.experts_per_member

    def _route(self, x, training):
        _, _, group_size = self._check_input_shape(static_shape(x))
        capacity = self.capacity(group_size, training)
        logits, noisy_logits, gates = self._gates(x, training)  # (M,G,S,E/M)

        # The C largest gates of each expert, in decreasing order.
        per_expert = ops.transpose(gates, (0, 1, 3, 2))  # (M, G, E/M, S)
        top = -ops.sort(-per_expert, axis=-1)[..., :capacity]  # (M,G,E/M,C)
        top_b = top[:, :, None]  # (M, G, 1, E/M, C)
        gates_b = gates[..., None]  # (M, G, S, E/M, 1)
        larger = ops.sum(ops.cast(top_b > gates_b, "float32"), axis=-1)
        equal = ops.cast(ops.equal(top_b, gates_b), "float32")
        # Equal gates at lower token indices (exclusive cumsum over tokens).
        # The columns of equal top values are identical, so averaging over
        # the columns equal to the token's gate gives that count (0 when
        # none is). Not `ops.max(axis=...)`: under PyTorch it breaks
        # torch.compile's graph (an isinstance on `.values`, torch 2.13).
        earlier = ops.cumsum(equal, axis=2) - equal
        ties = ops.sum(earlier * equal, axis=-1) / ops.maximum(ops.sum(equal, axis=-1), 1.0)
        rank = larger + ties  # (M, G, S, E/M)
        slots = ops.arange(capacity, dtype="float32")
        dispatch = ops.cast(ops.equal(rank[..., None], slots), "float32")
        return {
            "rank": rank,
            "dispatch": dispatch,
            "combine": gates[..., None] * dispatch,
            "capacity": capacity,
            "group_size": group_size,
            "logits": logits,
            "noisy_logits": noisy_logits,
            "gates": gates,
            "top_gates": top,
        }

    def _slot_indices(self, result):
        """The routing as indices (`TopKRouter`'s index form, with every
        token choosing each of the member's experts at most once, so
        `top_k = experts_per_member`): `slot_token` `(M, G, E/M * C)`,
        the token in slot `c` of expert `e` (at `e * C + c`; every slot is
        filled), `token_slot` / `token_weight` `(M, G, E/M, S)`, the slot
        of token `s` at expert `e` and its gate, or 0 where the expert did
        not take it. Dispatch and combine are then gathers; the routing
        itself still compares gates with each expert's top `C`."""
        dispatch, rank, gates = result["dispatch"], result["rank"], result["gates"]
        m, _, group_size, e_m, capacity = static_shape(dispatch)
        tokens = ops.arange(group_size, dtype="float32")
        slot_token = ops.einsum("mgsec,s->mgec", dispatch, tokens)
        slot_token = ops.cast(ops.reshape(slot_token, (m, -1, e_m * capacity)), "int32")
        kept = rank < capacity  # (M, G, S, E/M)
        experts = ops.arange(e_m, dtype="int32") * capacity
        position = experts + ops.cast(ops.minimum(rank, capacity - 1), "int32")
        return {
            "slot_token": slot_token,
            "slot_valid": ops.ones(static_shape(slot_token), dtype="bool"),
            "token_slot": ops.transpose(position, (0, 1, 3, 2)),
            "token_weight": ops.transpose(gates * ops.cast(kept, "float32"), (0, 1, 3, 2)),
        }

    def call(self, inputs, training=None, dispatcher="einsum"):
        result = self._route(inputs, bool(training))
        if check_dispatcher(dispatcher) == "indices":
            return self._slot_indices(result)
        return {"dispatch": result["dispatch"], "combine": result["combine"]}

    def route(self, x, training=False):
        """Routes `x` and returns a dict for inspection.

        Keys: `dispatch`, `combine` (as `call`), `capacity`, `group_size`
        (ints), `logits`, `noisy_logits`, `gates` (`(M, G, S, E/M)`),
        `top_gates` (`(M, G, E/M, C)`, each expert's chosen gates in
        decreasing order), `token_dispatch` (`(num_members * batch, ...,
        num_experts, C)`, global expert ids) and `metrics` (vmoe's, see
        `experts_choice_metrics`).
        """
        return self._inspect(x, training)

    def _inspect_route(self, x, training):
        result = self._route(x, training)
        result["metrics"] = experts_choice_metrics(
            result["dispatch"], result["top_gates"], self.experts_per_member
        )
        return result
