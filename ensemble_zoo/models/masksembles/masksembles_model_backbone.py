import keras

from ensemble_zoo.layers.masksembles_mask import MasksemblesMask
from ensemble_zoo.models.masksembles.masksembles_backbone import MaskedInput
from ensemble_zoo.models.member_heads import member_rows_classifier
from ensemble_zoo.models.member_sites import projection_sites
from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real

#: The method's arguments (the backbone's `method_keys`) and their defaults.
METHOD_DEFAULTS = {"num_members": 4, "scale": 2.0, "reuse_head": True, "seed": None}


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MasksemblesModelBackbone(WrappedModelsBackbone):
    """A copy of a keras-hub classifier of any transformer family whose
    feed-forward blocks pass Masksembles masks, with a head per member.

    The network of `MasksemblesClassifier`. The backbone copies `model`
    (config and weights; `model` itself is not changed) and puts a
    `MasksemblesMask` (fixed binary masks, one per member, overlap set by
    `scale`) on the hidden units of every feed-forward block of its
    keras-hub backbone: the input of the block's second projection, found
    by layer type and role (`"mlp_down"`, `ensemble_zoo.models.member_sites`).
    In a ViT that is where the ViT Masksembles classifier masks (after the
    first projection's GELU); in MiT's `MixFFN`, whose first projection is
    followed by a depthwise convolution with a bias and a GELU, only there
    are masked units dropped. Every `Dense` layer of the classifier
    after its backbone becomes one layer per member
    (`ensemble_zoo.models.member_heads`). Every weight trains; the masks
    stay fixed (Durasov et al., "Masksembles for Uncertainty
    Estimation", 2021).

    Args:
        model: a built keras-hub classifier returning logits
            `(batch, classes)`.
        num_members: int. Defaults to `4`.
        scale: float >= 1, the masks' overlap. Defaults to `2.0`.
        reuse_head: bool: `True` (default) starts every member's head as
            a copy of `model`'s, `False` initializes each on its own.
        seed: optional int for the masks (block `i` seeds `seed + i`).
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
        scale=2.0,
        reuse_head=True,
        seed=None,
        dtype=None,
        *,
        adopt_models=False,
        **kwargs,
    ):
        num_members = check_positive_int(num_members, "num_members")
        scale = float(check_real(scale, "scale", low=1.0))
        reuse_head = check_bool(reuse_head, "reuse_head")
        input_spec, num_classes, model, network, heads = member_rows_classifier(
            model, num_members, reuse_head, dtype, adopt_models
        )
        sites = projection_sites(model.backbone, ("mlp_down",))
        if not sites:
            raise ValueError(
                f"`model` '{model.name}' has no feed-forward block "
                "(ensemble_zoo.models.member_sites) for Masksembles' masks."
            )
        masks = []
        for i, (_, parent, attribute) in enumerate(sites):
            layer = getattr(parent, attribute)
            with path_scope(parent.path):
                mask = MasksemblesMask(
                    num_members,
                    scale,
                    seed=None if seed is None else seed + i,
                    dtype=layer.dtype_policy,
                    name="masksembles",
                )
                mask.build(tuple(layer.kernel.shape[:1]))
                masked = MaskedInput(
                    layer, mask, dtype=layer.dtype_policy, name=f"{attribute.lstrip('_')}_masked"
                )
            replace_sublayer(parent, attribute, masked)
            masks.append(mask)

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = network(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.model = model  # the plain architecture, for the config
        self.network = network
        self.masks = masks
        self.heads = heads

        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.scale = scale
        self.reuse_head = reuse_head
        self.seed = seed
