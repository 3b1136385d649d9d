"""LoRA-Ensemble adapters on the projections of a keras-hub decoder.

`apply_decoder_adapters` puts one batch-major `LoRAEnsembleAdapter` (row
`b * M + m` is member `m`'s copy of sample `b`, so that keras-hub's
samplers, which index the batch on axis 0, and its KV cache work
unchanged) on every target projection of every decoder block, and a
`LoRAEnsembleExperts` on every mixture-of-experts block for the
`"experts"` target, found by `families.decoder_sites`, and freezes every
other weight. It changes the
backbone in place, as keras-hub's `enable_lora` does;
`LoRAEnsembleCausalLM.from_keras_hub` gives it a copy of the user's.
"""

import math

import keras
import keras_hub

from ensemble_zoo.layers.blob_posterior import check_blob
from ensemble_zoo.layers.lora_ensemble_adapter import LoRAEnsembleAdapter
from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExpertKernel
from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExperts
from ensemble_zoo.models.causal_lm_inputs import text_inputs
from ensemble_zoo.models.causal_lm_inputs import with_position_ids
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import adapt_projections
from ensemble_zoo.models.lora_ensemble.causal_lm.families import EXPERTS_TARGET
from ensemble_zoo.models.lora_ensemble.causal_lm.families import check_layers
from ensemble_zoo.models.lora_ensemble.causal_lm.families import check_targets
from ensemble_zoo.models.lora_ensemble.causal_lm.families import decoder_sites
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_positive_int


def check_ranks(rank, targets):
    """`rank` (an int, or a dict target -> int over exactly `targets`) as a
    dict target -> positive int."""
    if isinstance(rank, dict):
        if sorted(rank) != sorted(targets):
            raise ValueError(
                "A `rank` dict must have one entry per target "
                f"{list(targets)}; got keys {sorted(rank)}."
            )
        return {t: check_positive_int(rank[t], f"rank[{t!r}]") for t in targets}
    rank = check_positive_int(rank, "rank")
    return {t: rank for t in targets}


def factor_layers(site_layers):
    """The layers holding the members' factors (`lora_a`, `lora_b`) of
    the adapted sites' layers, in order: a `LoRAEnsembleAdapter` itself,
    a `LoRAEnsembleExperts`' kernel adapters one per stacked kernel."""
    layers = []
    for layer in site_layers:
        layers += layer.kernel_adapters if isinstance(layer, LoRAEnsembleExperts) else [layer]
    return layers


def apply_decoder_adapters(
    backbone, num_members, rank, targets, lora_alpha, a_gain, seed, blob=None, layers=None
):
    """The adapters of `backbone`'s decoder blocks (`LoRAEnsembleAdapter`,
    or `LoRAEnsembleExperts` for `"experts"`), block by block and within a
    block in `targets` order.

    A backbone without adapters is frozen and gets them (projection
    adapter `i` seeds its members with `seed + i * num_members + m`, an
    experts adapter takes one seed per member and expert of each kernel); one that holds
    adapters of the same members, ranks and scaling on the same sites (a
    second task on the same backbone, as keras-hub tasks share one) keeps
    them.

    Args:
        backbone: a built keras-hub decoder backbone.
        num_members: int, the number of members M.
        rank: int, or a dict target -> int (`check_ranks`).
        targets: names among `families.TARGETS`.
        lora_alpha: optional float; updates are scaled by `lora_alpha /
            rank` (`None`: 1).
        a_gain: float, the Xavier-uniform gain of each `A_m`.
        seed: optional int.
        blob: `None`, or BLoB's settings (`LoRAEnsembleAdapter`'s
            `blob`); not with `"experts"`.
        layers: `None` (every block) or the indices of the blocks to
            adapt (`families.check_layers`).

    Returns:
        The list of adapters.
    """
    num_members = check_positive_int(num_members, "num_members")
    targets = check_targets(targets)
    ranks = check_ranks(rank, targets)
    blob = check_blob(blob)
    if blob is not None and EXPERTS_TARGET in targets:
        raise ValueError(
            f"`blob` (BLoB's Gaussian `A`) takes projection targets, not {EXPERTS_TARGET!r}."
        )
    sites, roles = decoder_sites(backbone, targets, layers)
    # A fused query-key-value projection takes the rank of its first target.
    role_ranks = [ranks.get(role, ranks[_first_fused(targets)]) for role in roles]
    held = [getattr(parent, attribute) for parent, attribute in sites]
    adapted = [isinstance(layer, (LoRAEnsembleAdapter, LoRAEnsembleExperts)) for layer in held]
    if all(adapted):
        expected = [(num_members, r, lora_alpha, "batch_major", blob) for r in role_ranks]
        found = [
            (a.num_members, a.rank, a.lora_alpha, a.member_layout, getattr(a, "blob", None))
            for a in held
        ]
        if found != expected:
            raise ValueError(
                f"`backbone` already holds LoRA-Ensemble adapters of other members, ranks "
                f"or scaling ({found[0]} against {expected[0]}); pass a plain keras-hub "
                "backbone."
            )
        return held
    if any(adapted):
        raise ValueError("`backbone` holds LoRA-Ensemble adapters on some targets only.")
    freeze_weights(backbone)
    adapters, seeds_used = [], 0
    for site, role, site_rank in zip(sites, roles, role_ranks, strict=True):
        site_seed = None if seed is None else seed + seeds_used
        if role == EXPERTS_TARGET:
            adapters.append(
                adapt_experts(site, num_members, site_rank, lora_alpha, a_gain, site_seed)
            )
            seeds_used += sum(math.prod(k.lora_a.shape[:2]) for k in adapters[-1].kernel_adapters)
        else:
            adapters += adapt_projections(
                [site],
                num_members,
                site_rank,
                lora_alpha,
                a_gain,
                site_seed,
                "batch_major",
                blob=blob,
            )
            seeds_used += num_members
    return adapters


def adapt_experts(site, num_members, rank, lora_alpha, a_gain, seed):
    """Replaces the mixture-of-experts block `getattr(parent, attribute)`
    of `site` by a batch-major `LoRAEnsembleExperts` on it."""
    parent, attribute = site
    block = getattr(parent, attribute)
    with path_scope(parent.path):
        experts = LoRAEnsembleExperts(
            block,
            num_members=num_members,
            rank=rank,
            lora_alpha=lora_alpha,
            a_gain=a_gain,
            seed=seed,
            member_layout="batch_major",
            dtype=block.dtype_policy,
        )
    replace_sublayer(parent, attribute, experts)
    return experts


def plain_decoder_copy(decoder, dtype=None):
    """A new keras-hub backbone of `decoder`'s class and config (under
    `dtype` when given) holding its frozen weights, without adapters.
    The weights are copied in order, the adapters' factors left out:
    layer names, and so variable paths, may differ in a new model (Keras
    numbers unnamed layers process-wide)."""
    config = decoder.get_config()
    if dtype is not None:
        config["dtype"] = keras.dtype_policies.get(dtype)
    copy = type(decoder).from_config(config)
    factors = {
        id(variable)
        for layer in decoder._flatten_layers(include_self=False)
        if isinstance(layer, (LoRAEnsembleAdapter, LoRAEnsembleExpertKernel))
        for variable in (layer.lora_a, layer.lora_b)
    }
    frozen = [v for v in decoder.weights if id(v) not in factors]
    for target, source in zip(copy.weights, frozen, strict=True):
        target.assign(keras.ops.cast(source, target.dtype))
    return copy


def _first_fused(targets):
    return next(t for t in targets if t in ("query", "key", "value"))


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleDecoderBackbone(keras_hub.models.Backbone):
    """A keras-hub decoder backbone with LoRA-Ensemble adapters: one class
    for every family, holding the keras-hub backbone (as keras-hub's
    `Gemma3Backbone` holds its vision encoder), so that its config names
    the adapters and keras-hub's loaders find `LoRAEnsembleCausalLM` from
    it (`backbone_cls`).

    Args:
        backbone: a keras-hub decoder backbone; the adapters are put on it
            in place (`apply_decoder_adapters`), or on a copy under `dtype`
            when that differs from its policy (a copy that takes the
            adapters' values when `backbone` holds them already).
        num_members, rank, targets, lora_alpha, a_gain, seed, blob, layers:
            see `LoRAEnsembleCausalLM.from_keras_hub`.
        dtype: optional dtype policy for every layer. Defaults to the
            backbone's.
        **kwargs: other `keras_hub.models.Backbone` arguments.
    """

    def __init__(
        self,
        backbone,
        num_members,
        rank,
        targets,
        lora_alpha=None,
        a_gain=10.0,
        seed=None,
        blob=None,
        layers=None,
        dtype=None,
        **kwargs,
    ):
        layers = check_layers(layers, len(getattr(backbone, "transformer_layers", None) or ()))
        held = []
        if dtype is not None and keras.dtype_policies.get(dtype).name != (
            backbone.dtype_policy.name
        ):
            sites, _ = decoder_sites(backbone, check_targets(targets), layers)
            held = [getattr(parent, attribute) for parent, attribute in sites]
            held = [
                layer
                for layer in held
                if isinstance(layer, (LoRAEnsembleAdapter, LoRAEnsembleExperts))
            ]
            backbone = plain_decoder_copy(backbone, dtype)
        adapters = apply_decoder_adapters(
            backbone, num_members, rank, targets, lora_alpha, a_gain, seed, blob, layers
        )
        for source, adapter in zip(factor_layers(held), factor_layers(adapters)):
            for name in ("lora_a", "lora_b", "lora_a_rho"):
                if getattr(adapter, name, None) is not None:
                    target = getattr(adapter, name)
                    target.assign(keras.ops.cast(getattr(source, name), target.dtype))
        # === Layers ===
        self.decoder = backbone
        # === Functional Model ===
        inputs = text_inputs(backbone)
        outputs = backbone(with_position_ids(backbone, inputs))
        super().__init__(inputs=inputs, outputs=outputs, dtype=backbone.dtype_policy, **kwargs)
        # === Config ===
        self.num_members = adapters[0].num_members
        self.rank = rank
        self.targets = check_targets(targets)
        self.lora_alpha = lora_alpha
        self.a_gain = a_gain
        self.seed = seed
        self.blob = check_blob(blob)
        # `layers` is a Keras `Model` attribute of its own.
        self.adapted_blocks = layers
        object.__setattr__(self, "_adapters", tuple(adapters))

    @property
    def token_embedding(self):
        return self.decoder.token_embedding

    @property
    def transformer_layers(self):
        return self.decoder.transformer_layers

    @property
    def vocabulary_size(self):
        return self.decoder.vocabulary_size

    @property
    def hidden_dim(self):
        return self.decoder.hidden_dim

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.decoder),
                "num_members": self.num_members,
                "rank": self.rank,
                "targets": list(self.targets),
                "lora_alpha": self.lora_alpha,
                "a_gain": self.a_gain,
                "seed": self.seed,
                "blob": self.blob,
                "layers": None if self.adapted_blocks is None else list(self.adapted_blocks),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        inner = dict(config["backbone"])
        if config.get("dtype") is not None:
            # The decoder is built under the config's dtype (which
            # keras-hub's loader sets for `dtype=`), not copied to it.
            inner["config"] = {**inner["config"], "dtype": config["dtype"]}
        config["backbone"] = keras.saving.deserialize_keras_object(inner)
        return cls(**config)
