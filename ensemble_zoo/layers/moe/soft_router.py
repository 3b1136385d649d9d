import keras
from keras import ops

from ensemble_zoo.layers.moe.member_router import MemberRouter
from ensemble_zoo.layers.moe.member_router import check_capacity_factor
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape

#: vmoe's `normalize` epsilon, added to the squared norm inside the rsqrt.
NORMALIZE_EPSILON = 1e-6


def l2_normalize(x, axis):
    """`x / sqrt(sum(x**2, axis) + 1e-6)`, vmoe's `normalize`."""
    return x * ops.rsqrt(ops.sum(ops.square(x), axis=axis, keepdims=True) + NORMALIZE_EPSILON)


def _cosine_similarities(x, batch_axes, contract_axes):
    """vmoe's `cosine_psim`: the cosine similarity of every pair of the
    free positions of `x`, per batch position (eps 1e-9 in the rsqrt).

    Returns `(batch, free, free)` with the free axes flattened."""
    x = x * ops.rsqrt(ops.sum(ops.square(x), axis=contract_axes, keepdims=True) + 1e-9)
    ndim = len(static_shape(x))
    free = [a for a in range(ndim) if a not in batch_axes + contract_axes]
    x = ops.transpose(x, tuple(batch_axes) + tuple(free) + tuple(contract_axes))
    shape = static_shape(x)
    nb, nf = len(batch_axes), len(free)
    batch = 1
    for d in shape[:nb]:
        batch *= d
    n_free = 1
    for d in shape[nb : nb + nf]:
        n_free *= d
    x = ops.reshape(x, (batch, n_free, -1))
    return ops.einsum("bik,bjk->bij", x, x)


def _similarity_stats(sim):
    """min / max over pairs of distinct positions (vmoe: the diagonal is
    replaced by the maximum of the off-diagonal-zeroed matrix) and the mean
    over distinct pairs (vmoe: `(sum - count) / (count * (n - 1))`)."""
    batch, n, _ = static_shape(sim)
    eye = ops.eye(n, dtype=sim.dtype)
    masked = (1.0 - eye) * sim
    masked = masked + eye * ops.max(masked)
    mean = (ops.sum(sim) - batch * n) / (batch * n * (n - 1))
    return ops.min(masked), ops.max(masked), mean


def soft_moe_metrics(combine, dispatch, mu_unit, similarity=True):
    """vmoe's `SoftRouter` metrics (`get_metrics`), over all groups.

    `combine` and `dispatch` are `(M, G, S, E/M, P)` and `mu_unit` the
    normalized slot vectors `(D, E, P)`. Members are counted as more
    routing groups (each member is a separate Soft MoE). With
    `similarity=True` the cosine similarities between tokens' combine
    weights, slots' dispatch weights and slot vectors are added (vmoe's
    `compute_similarity_metrics`, on by default and off in its released
    configs); `auxiliary_loss` is 0 (Soft MoE has none).
    """
    m, g, s, e_m, p = static_shape(combine)
    combine = ops.reshape(combine, (-1, s, e_m, p))
    dispatch = ops.reshape(dispatch, (-1, s, e_m, p))
    metrics = {
        "auxiliary_loss": ops.zeros((), "float32"),
        "combine_weights_min_mean": ops.mean(ops.min(combine, axis=(2, 3))),
        "combine_weights_max_mean": ops.mean(ops.max(combine, axis=(2, 3))),
        "dispatch_weights_min_mean": ops.mean(ops.min(dispatch, axis=1)),
        "dispatch_weights_max_mean": ops.mean(ops.max(dispatch, axis=1)),
    }
    if similarity:
        pairs = {
            "combine_weights": _cosine_similarities(combine, (0,), (2, 3)),
            "dispatch_weights": _cosine_similarities(dispatch, (0,), (1,)),
            "mu": _cosine_similarities(mu_unit[None], (0,), (1,)),
        }
        for name, sim in pairs.items():
            low, high, mean = _similarity_stats(sim)
            metrics[f"{name}_similarity_min"] = low
            metrics[f"{name}_similarity_max"] = high
            metrics[f"{name}_similarity_mean"] = mean
    return metrics


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SoftRouter(MemberRouter):
    """Soft MoE routing (Puigcerver et al. 2023), as vmoe's `SoftRouter`,
    partitioned per member for E³.

    Nothing is dropped and nothing is discrete: every expert has `P`
    slots, each slot is a softmax-weighted mix of **all** tokens of its
    routing group, and each token's output is a softmax-weighted mix of
    **all** slots' expert outputs. Per routing group of `S` tokens:

    1. tokens and slot vectors are l2-normalized (vmoe's `normalize`:
       `x / sqrt(|x|**2 + 1e-6)`; the tokens over features, the slot
       parameters `mu` `(dim, num_experts, P)` over `dim`);
    2. logits `[s, e, p] = scale * <x̂_s, μ̂_ep>`, with one learned scalar
       `scale` (initialized to 1);
    3. in training, Gaussian noise of standard deviation `noise_std`
       (default 0, vmoe's; not divided by the expert count, unlike the
       other routers) is added to the logits;
    4. `dispatch = softmax over tokens` (each slot a convex combination of
       the tokens) and `combine = softmax over all (expert, slot) pairs`
       (each token a convex combination of the slots), both in float32.

    Everything is differentiable, `scale` included. Only the tokens are
    normalized for the logits: the dispatched tokens are the original
    ones, as in vmoe.

    **Slots.** `P = num_slots`, or, when `num_slots` is `None`,
    `round(capacity_factor * group_size / experts_per_member)` (Python's
    round half to even, or `ceil` with `capacity_rounding="ceil"`, then up
    to a multiple of `capacity_multiple_of`), vmoe's rule. `mu` is a weight, so `P` is fixed
    when the layer is built
    and one count serves training and inference (no evaluation capacity
    factor). vmoe's Soft MoE S/16 and B/16 use 128 experts with 1 slot.

    **E³ partition.** With `num_members=M`, member `m`'s tokens mix only
    into the `P * E / M` slots of its own experts and read back only from
    them: each member is an independent Soft MoE over its share of the
    experts, with its own copy of every token. This keeps what makes E³ an
    ensemble: members share every other weight but their MoE outputs
    come from disjoint experts, so their predictions can disagree. One
    softmax over all `E` experts would mix the members' slots and make
    every member's output depend on every expert, i.e. one model computed
    `M` times. The slot parameters `mu` are V-MoE's shape `(dim, E, P)`,
    member `m` using experts `[m E / M, (m + 1) E / M)`.

    Calling the layer returns `{"dispatch": ..., "combine": ...}`, float32
    `(num_members, num_groups, group_size, experts_per_member, P)`, the
    layout of `TopKRouter`, so `SparseMoE` dispatches with
    `einsum("mgsep,mgsd->megpd")` and combines with
    `einsum("mgsep,megpd->mgsd")`, as vmoe's `EinsumDispatcher` does.
    `route(x)` also returns the logits and `metrics`, those vmoe reports
    (see `soft_moe_metrics`).

    Args:
        num_experts: int, the total number of experts `E`.
        num_members: int, the E³ ensemble size; must divide
            `num_experts`. Defaults to 1.
        group_size: int or `None`, tokens per routing group per member.
            Defaults to `None`, one example's tokens (vmoe's configs).
        num_slots: int or `None`, slots per expert `P`. Defaults to `None`
            (from `capacity_factor`).
        capacity_factor: float > 0, gives `P` when `num_slots` is `None`.
            Defaults to 1.0.
        capacity_multiple_of: int. Defaults to 1 (vmoe's).
        capacity_rounding: `"round"` (default, vmoe's: half to even) or
            `"ceil"`.
        noise_std: float >= 0 or `None`, training noise on the logits.
            Defaults to 0.
        mu_initializer: initializer of `mu` `(dim, num_experts, P)`.
            Defaults to `"lecun_normal"` (vmoe's; the same fan-in,
            `dim * num_experts`).
        scale_initializer: initializer of the scalar `scale`. Defaults to
            `"ones"`.
        compute_similarity_metrics: bool, add the cosine-similarity
            metrics to `route(...)["metrics"]`. Defaults to `True`.
        seed: int or `None`, seed of the routing noise.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import keras
    import numpy as np
    from ensemble_zoo.layers import SoftRouter

    router = SoftRouter(num_experts=4, num_slots=2)
    tokens = np.random.normal(size=(3, 8, 16)).astype("float32")
    routing = router.route(tokens)
    dispatch = keras.ops.convert_to_numpy(routing["dispatch"])
    combine = keras.ops.convert_to_numpy(routing["combine"])
    assert dispatch.shape == (1, 3, 8, 4, 2)
    # Each slot's dispatch weights sum to 1 over the 8 tokens, and each
    # token's combine weights sum to 1 over the 4 * 2 slots.
    assert np.allclose(dispatch.sum(axis=2), 1, atol=1e-5)
    assert np.allclose(combine.sum(axis=(3, 4)), 1, atol=1e-5)
    assert tuple(router.mu.shape) == (16, 4, 2)
    ```
    """

    def __init__(
        self,
        num_experts,
        num_members=1,
        group_size=None,
        num_slots=None,
        capacity_factor=1.0,
        capacity_multiple_of=1,
        capacity_rounding="round",
        noise_std=None,
        mu_initializer="lecun_normal",
        scale_initializer="ones",
        compute_similarity_metrics=True,
        seed=None,
        **kwargs,
    ):
        super().__init__(num_experts, num_members, group_size, noise_std, seed, **kwargs)
        if num_slots is not None:
            num_slots = check_positive_int(num_slots, "num_slots")
        self.num_slots = num_slots
        self.capacity_factor = check_capacity_factor(capacity_factor, "capacity_factor")
        self._set_capacity_rule(capacity_multiple_of, capacity_rounding)
        if not isinstance(compute_similarity_metrics, bool):
            raise ValueError(
                f"`compute_similarity_metrics` must be a bool; got {compute_similarity_metrics!r}."
            )
        self.compute_similarity_metrics = compute_similarity_metrics
        self.mu_initializer = keras.initializers.get(mu_initializer)
        self.scale_initializer = keras.initializers.get(scale_initializer)

    @property
    def sigma(self):
        """The standard deviation of the training noise (a float)."""
        return 0.0 if self.noise_std is None else self.noise_std

    def capacity(self, group_size, training=False):
        """The slots per expert `P` (fixed once the layer is built)."""
        if getattr(self, "mu", None) is not None:
            return int(self.mu.shape[-1])
        if self.num_slots is not None:
            return self.num_slots
        return self._compute_capacity(group_size, self.capacity_factor)

    def compute_output_spec(self, inputs, training=None, **kwargs):
        shape = self._output_shape(inputs.shape, training=bool(training))
        return {
            "dispatch": keras.KerasTensor(shape, dtype="float32"),
            "combine": keras.KerasTensor(shape, dtype="float32"),
        }

    def build(self, input_shape):
        shape = self._check_build_shape(input_shape)
        if any(d is None for d in shape[1:]):
            raise ValueError(
                f"SoftRouter '{self.name}' needs static token and feature "
                f"axes to size its slots; got input shape {shape}."
            )
        _, _, group_size = self._check_input_shape(shape)
        slots = self.capacity(group_size)
        self.input_dim = int(shape[-1])
        self.mu = self.add_weight(
            name="mu",
            shape=(self.input_dim, self.num_experts, slots),
            initializer=self.mu_initializer,
        )
        self.scale = self.add_weight(name="scale", shape=(), initializer=self.scale_initializer)

    def _route(self, x, training):
        _, _, group_size = self._check_input_shape(static_shape(x))
        m, e_m = self.num_members, self.experts_per_member
        slots = int(self.mu.shape[-1])
        x = l2_normalize(ops.cast(self.group_tokens(x), "float32"), -1)
        mu_unit = l2_normalize(ops.cast(self.mu, "float32"), 0)  # (D, E, P)
        scaled = ops.reshape(
            mu_unit * ops.cast(self.scale, "float32"), (self.input_dim, m, e_m, slots)
        )
        logits = ops.einsum("mgsd,dmep->mgsep", x, scaled)
        if training and self.sigma > 0:
            logits = self._noise(logits, self.sigma)
        dispatch = ops.softmax(logits, axis=2)  # over the group's tokens
        combine = ops.reshape(
            ops.softmax(ops.reshape(logits, (m, -1, group_size, e_m * slots)), axis=-1),
            (m, -1, group_size, e_m, slots),
        )
        return {
            "dispatch": dispatch,
            "combine": combine,
            "capacity": slots,
            "group_size": group_size,
            "logits": logits,
            "mu_unit": mu_unit,
        }

    def call(self, inputs, training=None):
        result = self._route(inputs, bool(training))
        return {"dispatch": result["dispatch"], "combine": result["combine"]}

    def route(self, x, training=False):
        """Routes `x` and returns a dict for inspection.

        Keys: `dispatch`, `combine` (as `call`), `capacity` (`P`),
        `group_size`, `logits` (`(M, G, S, E/M, P)`, noisy in training),
        `mu_unit` (the normalized `mu`), `token_dispatch` (the dispatch
        weights `(num_members * batch, ..., num_experts, P)`, global expert
        ids) and `metrics` (vmoe's, see `soft_moe_metrics`).
        """
        return self._inspect(x, training)

    def _inspect_route(self, x, training):
        result = self._route(x, training)
        result["metrics"] = soft_moe_metrics(
            result["combine"],
            result["dispatch"],
            result["mu_unit"],
            similarity=self.compute_similarity_metrics,
        )
        return result

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_slots": self.num_slots,
                "capacity_factor": self.capacity_factor,
                "capacity_multiple_of": self.capacity_multiple_of,
                "capacity_rounding": self.capacity_rounding,
                "mu_initializer": keras.initializers.serialize(self.mu_initializer),
                "scale_initializer": keras.initializers.serialize(self.scale_initializer),
                "compute_similarity_metrics": self.compute_similarity_metrics,
            }
        )
        return config
