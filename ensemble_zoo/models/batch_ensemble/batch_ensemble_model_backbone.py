import keras

from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import replace_projections
from ensemble_zoo.models.batch_ensemble.batch_ensemble_task import METHOD_DEFAULTS as TASK_DEFAULTS
from ensemble_zoo.models.member_heads import member_rows_classifier
from ensemble_zoo.models.member_sites import ATTENTION_ROLES
from ensemble_zoo.models.member_sites import FEEDFORWARD_ROLES
from ensemble_zoo.models.member_sites import FUSED_ROLE
from ensemble_zoo.models.member_sites import projection_sites
from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real

#: The method's arguments (the backbone's `method_keys`) and their
#: defaults: the ViT and BERT tasks' and `reuse_head`.
METHOD_DEFAULTS = {**TASK_DEFAULTS, "reuse_head": True}


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleModelBackbone(WrappedModelsBackbone):
    """A copy of a keras-hub classifier of any transformer family whose
    projections are BatchEnsemble layers, with a head per member.

    The network of `BatchEnsembleClassifier`. The backbone copies `model`
    (config and weights; `model` itself is not changed). Every attention
    projection and every feed-forward projection of its keras-hub
    backbone, found by layer type and role
    (`ensemble_zoo.models.member_sites`, whatever the layer's class),
    becomes a `BatchEnsembleDense` that starts from the projection's
    kernel as the shared `W` (`batch_ensemble_from`: fast weights `r_m`,
    `s_m` per member, its bias every member's); every `Dense` layer of
    the classifier after its backbone becomes one layer per member
    (`ensemble_zoo.models.member_heads`). Every weight trains, as in the
    paper (Wen et al., "BatchEnsemble: an Alternative Approach to Efficient
    Ensemble and Lifelong Learning", 2020). With fast weights of ones and
    reused heads every member computes `model`'s logits.

    Args:
        model: a built keras-hub classifier returning logits
            `(batch, classes)`.
        num_members: int. Defaults to `4`.
        fast_weight_initializer: `"normal"` (`N(1, fast_weight_stddev)`,
            default) or `"random_sign"`.
        fast_weight_stddev: float. Defaults to `0.5`.
        reuse_head: bool: `True` (default) starts every member's head as
            a copy of `model`'s, `False` initializes each on its own.
        seed: optional int for the fast weights (projection `i` seeds
            `seed + 2 i` and `seed + 2 i + 1`).
        dtype: optional dtype policy for every layer.
        adopt_models: bool, keyword-only: hold `model` as it is (what
            `from_config` passes). Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): logits of the member-major batch, `(members * batch,
    classes)` for inputs `(members * batch, ...)`.
    """

    wrapped = ("model",)
    method_keys = tuple(METHOD_DEFAULTS)

    def __init__(
        self,
        model,
        num_members=4,
        fast_weight_initializer="normal",
        fast_weight_stddev=0.5,
        reuse_head=True,
        seed=None,
        dtype=None,
        *,
        adopt_models=False,
        **kwargs,
    ):
        num_members = check_positive_int(num_members, "num_members")
        fast_weight_stddev = check_real(fast_weight_stddev, "fast_weight_stddev", low=0.0)
        reuse_head = check_bool(reuse_head, "reuse_head")
        input_spec, num_classes, model, network, heads = member_rows_classifier(
            model, num_members, reuse_head, dtype, adopt_models
        )
        roles = ATTENTION_ROLES + (FUSED_ROLE,) + FEEDFORWARD_ROLES
        sites = projection_sites(model.backbone, roles)
        if not sites:
            raise ValueError(
                f"`model` '{model.name}' has no attention or feed-forward projection "
                "(ensemble_zoo.models.member_sites) for BatchEnsemble's layers."
            )
        layers = replace_projections(
            [(parent, attribute) for _, parent, attribute in sites],
            num_members,
            fast_weight_initializer,
            fast_weight_stddev,
            seed,
        )

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = network(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.model = model  # the plain architecture, for the config
        self.network = network
        self.batch_ensemble_layers = layers
        self.heads = heads

        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.fast_weight_initializer = fast_weight_initializer
        self.fast_weight_stddev = fast_weight_stddev
        self.reuse_head = reuse_head
        self.seed = seed
