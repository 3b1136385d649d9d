import warnings

import keras

from ensemble_zoo.layers.blob_posterior import check_blob
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import DEFAULT_TARGETS
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import adapt_projections
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import check_targets
from ensemble_zoo.models.lora_ensemble.lora_ensemble_task import METHOD_DEFAULTS as TASK_DEFAULTS
from ensemble_zoo.models.member_heads import member_rows_classifier
from ensemble_zoo.models.member_sites import attention_sites
from ensemble_zoo.models.shared_trunk import shared_trunk_call
from ensemble_zoo.models.shared_trunk import site_blocks
from ensemble_zoo.models.shared_trunk import trunk_block_count
from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.validation import check_block_indices
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real

#: The method's arguments (the backbone's `method_keys`) and their
#: defaults: the ViT and BERT tasks', `reuse_head` and `adapted_layers`.
METHOD_DEFAULTS = {**TASK_DEFAULTS, "reuse_head": True, "adapted_layers": None}


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LoRAEnsembleModelBackbone(WrappedModelsBackbone):
    """A frozen copy of a keras-hub classifier of any family with
    LoRA-Ensemble adapters on its attention and a head per member.

    The network of `LoRAEnsembleClassifier`. The backbone copies `model`
    (config and weights; `model` itself is not changed) and freezes it;
    every attention projection of its keras-hub backbone in `targets`,
    found by layer type and role (`ensemble_zoo.models.member_sites.
    attention_sites`, whatever the attention layer's class), gets a
    `LoRAEnsembleAdapter` of `num_members` members; and every `Dense`
    layer of the classifier after its backbone becomes one layer per
    member (`ensemble_zoo.models.member_heads`), trainable, started from
    the classifier's head (`reuse_head=True`) or initialized per member.
    The family's own pooling stays as keras-hub wrote it. With `B = 0`
    (the adapters' start) and reused heads, every member computes
    `model`'s logits.

    Its config holds the plain classifier and the method's arguments, so
    `keras_hub.models.Backbone.from_preset` rebuilds the adapters before
    it loads their weights.

    Args:
        model: a built keras-hub classifier (`keras_hub.models.
            ImageClassifier` or `TextClassifier` of any family with
            attention) returning logits `(batch, classes)`.
        num_members: int. Defaults to `8`.
        rank: int, the adapters' rank. Defaults to `4`.
        targets: the attention projections to adapt, among `"query"`,
            `"key"`, `"value"` and `"attention_output"` (a fused
            query-key-value projection takes one adapter for the first
            three). Defaults to all four (the paper's).
        lora_alpha: optional float; updates are scaled by `lora_alpha /
            rank` (`None`: 1).
        a_gain: float, the Xavier-uniform gain of each `A_m`. Defaults to
            `10.0` (the paper's).
        reuse_head: bool. Defaults to `True`.
        seed: optional int for the adapters' `A` (adapter `i` seeds member
            `m` with `seed + i * num_members + m`).
        blob: `None` (default), or BLoB's settings: each `A_m` a learned
            Gaussian (`LoRAEnsembleAdapter`'s `blob`).
        adapted_layers: `None` (default: every attention block) or the
            indices of the blocks to adapt (`adapted_blocks`; negative
            ones count from the top). The blocks below the lowest adapted
            one then run once per input row, as a shared trunk.
        dtype: optional dtype policy for every layer.
        adopt_models: bool, keyword-only: hold `model` as it is (what
            `from_config` passes). Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): logits of the member-major batch: inputs `(members *
    batch, ...)` (`ensemble_zoo.ops.tile_members`), member `m`'s rows
    through its adapters and head, `(members * batch, classes)`.
    """

    wrapped = ("model",)
    method_keys = tuple(METHOD_DEFAULTS)

    def __init__(
        self,
        model,
        num_members=8,
        rank=4,
        targets=DEFAULT_TARGETS,
        lora_alpha=None,
        a_gain=10.0,
        reuse_head=True,
        seed=None,
        blob=None,
        adapted_layers=None,
        dtype=None,
        *,
        adopt_models=False,
        **kwargs,
    ):
        num_members = check_positive_int(num_members, "num_members")
        rank = check_positive_int(rank, "rank")
        targets = check_targets(targets)
        a_gain = check_real(a_gain, "a_gain", low=0.0, low_open=True)
        reuse_head = check_bool(reuse_head, "reuse_head")
        blob = check_blob(blob)
        input_spec, num_classes, model, network, heads = member_rows_classifier(
            model, num_members, reuse_head, dtype, adopt_models
        )
        sites = attention_sites(model.backbone, targets)
        blocks = site_blocks(model.backbone, sites)
        adapted_layers = check_block_indices(adapted_layers, len(blocks), "adapted_layers")
        if adapted_layers is not None:
            chosen = {id(parent) for i in adapted_layers for parent in blocks[i][1]}
            sites = [site for site in sites if id(site[0]) in chosen]
        freeze_weights(model)
        adapters = adapt_projections(sites, num_members, rank, lora_alpha, a_gain, seed, blob=blob)
        trunk = 0 if adapted_layers is None else trunk_block_count(model.backbone, blocks)
        if adapted_layers is not None and trunk < adapted_layers[0]:
            warnings.warn(
                f"Of the {adapted_layers[0]} blocks below the lowest adapted one, {trunk} run "
                "once per input row as a shared trunk; the others run on every member's rows: "
                f"{type(model.backbone).__name__} calls them inside one layer with adapted "
                "blocks.",
                stacklevel=2,
            )

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = network(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.model = model  # the plain architecture, for the config
        self.network = network
        self.adapters = adapters
        self.heads = heads

        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.rank = rank
        self.targets = list(targets)
        self.lora_alpha = lora_alpha
        self.a_gain = a_gain
        self.reuse_head = reuse_head
        self.seed = seed
        self.blob = blob
        self.adapted_layers = None if adapted_layers is None else list(adapted_layers)
        object.__setattr__(self, "_trunk_blocks", trunk)

    @property
    def trunk_blocks(self):
        """How many blocks run once per input row: those below the lowest
        of `adapted_layers` that the backbone's graph calls apart from the
        adapted ones (0 without `adapted_layers`)."""
        return self._trunk_blocks

    def call(self, inputs, training=None):
        """Keras' call of the network; with `adapted_layers`, a walk of it
        over a shared trunk (`shared_trunk.shared_trunk_call`)."""
        if self.adapted_layers is None:
            return super().call(inputs, training=training)
        return shared_trunk_call(self.network, inputs, self.num_members, training)
