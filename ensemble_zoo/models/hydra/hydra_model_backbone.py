"""Hydra's members on a keras-hub classifier of any family: each keeps
its own attention heads."""

import keras
import numpy as np

from ensemble_zoo.layers.head_mask import HeadMask
from ensemble_zoo.layers.head_mask import check_head_masks
from ensemble_zoo.models.masksembles.masksembles_backbone import MaskedInput
from ensemble_zoo.models.member_heads import member_heads_network
from ensemble_zoo.models.member_sites import layers_in_order
from ensemble_zoo.models.member_sites import projection_sites
from ensemble_zoo.models.shared_trunk import shared_trunk_call
from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_bool

#: The method's arguments (the backbone's `method_keys`) and their defaults.
METHOD_DEFAULTS = {"head_masks": None, "reuse_head": True}

#: The attributes that hold an attention layer's number of heads in
#: keras-hub's families: keras' `MultiHeadAttention` and its keras-hub
#: subclasses keep `_num_heads`, RoFormer-V2's attention `heads`, the
#: others `num_heads`.
HEAD_COUNT_ATTRIBUTES = ("num_heads", "_num_heads", "heads")


def head_sites(model):
    """`[(parent, attribute, num_heads, layout)]` of every attention
    layer's output projection under `model` (`member_sites`, by layer type
    and role), in the model's layer order (`layers_in_order`: a CLIP's
    vision encoder's layers first to last, then its text encoder's), with
    its attention layer's number of heads and where the heads lie in the
    projection's input (`HeadMask`'s `layout`: a projection whose kernel
    starts with a heads axis takes them `"split"`, one whose input
    features are the heads side by side `"flat"`).

    Raises:
        ValueError: `model` has no attention output projection (FNet has
            no attention), or one whose heads cannot be told apart.
    """
    sites = []
    order = {id(layer): i for i, layer in enumerate(layers_in_order(model))}
    found = projection_sites(model, ("attention_output",))
    found.sort(key=lambda site: order[id(site[1])])
    for _, parent, attribute in found:
        heads = next(
            (getattr(parent, n) for n in HEAD_COUNT_ATTRIBUTES if hasattr(parent, n)), None
        )
        kernel = tuple(getattr(parent, attribute).kernel.shape)
        if isinstance(heads, int) and len(kernel) == 3 and kernel[0] == heads:
            sites.append((parent, attribute, heads, "split"))
        elif isinstance(heads, int) and len(kernel) == 2 and kernel[0] % heads == 0:
            sites.append((parent, attribute, heads, "flat"))
        else:
            raise ValueError(
                f"The attention layer '{parent.name}' ({type(parent).__name__}) of "
                f"`{model.name}` has no head count ({' or '.join(HEAD_COUNT_ATTRIBUTES)}) "
                f"that splits its output projection's input (kernel shape {kernel})."
            )
    if not sites:
        raise ValueError(
            f"`{model.name}` ({type(model).__name__}) has no attention output projection "
            "(ensemble_zoo.models.member_sites): Hydra prunes attention heads, and a model "
            "without multi-head attention (FNet) cannot take it."
        )
    return sites


def check_member_head_masks(head_masks, sites):
    """`head_masks` as `[members][layers][heads]` lists of 0 / 1 ints for
    the attention layers of `sites` (`head_sites`), which may have
    different head counts; `None` is one member that keeps every head."""
    if head_masks is None:
        return [[[1] * heads for _, _, heads, _ in sites]]
    if isinstance(head_masks, np.ndarray):
        head_masks = head_masks.tolist()
    if not isinstance(head_masks, (list, tuple)) or not head_masks:
        raise ValueError("`head_masks` must list each member's masks, (members, layers, heads).")
    masks = []
    for m, member in enumerate(head_masks):
        if not isinstance(member, (list, tuple, np.ndarray)) or len(member) != len(sites):
            raise ValueError(
                f"`head_masks[{m}]` must hold one mask per attention layer ({len(sites)}); "
                f"got {member!r}."
            )
        masks.append([[int(v) for v in np.asarray(layer).reshape(-1)] for layer in member])
    for i, (_, _, heads, _) in enumerate(sites):
        check_head_masks([member[i] for member in masks], heads, f"head_masks[:, {i}]")
    return masks


def _prunes_per_member(layer):
    """Whether `layer` holds a `HeadMask` of members that keep different
    heads."""
    if not isinstance(layer, keras.layers.Layer):
        return False  # an operation of the graph (`x[0]`): no weights
    return any(
        isinstance(sub, HeadMask) and sub.num_members > 1 and not sub.one_copy
        for sub in layer._flatten_layers(include_self=True)
    )


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraModelBackbone(WrappedModelsBackbone):
    """A copy of a keras-hub classifier of any family with multi-head
    attention whose members each keep their own heads, and a head per
    member.

    The network of `HydraClassifier`. The backbone copies `model` (config
    and weights; `model` itself is not changed) and puts a `HeadMask` on
    the input of every attention layer's output projection, found by layer
    type and role (`"attention_output"`, `ensemble_zoo.models.member_sites`):
    member `m`'s rows keep the heads of `head_masks[m]`, so member `m`
    computes the classifier with the other heads removed. Every `Dense`
    layer after the classifier's backbone becomes one layer per member
    (`ensemble_zoo.models.member_heads`). It takes the member-major batch
    `(members * batch, ...)`, copies of one batch (as the classifier tiles
    it). The operations of the classifier's graph, and of the nested
    models (a keras-hub backbone, an encoder) that hold them, before the
    first attention layer where the members keep different heads run
    once, on one copy of the batch (`ensemble_zoo.models.shared_trunk`,
    a walk of the graph at call time; an attention layer where every
    member keeps the same heads masks them alike, `HeadMask`'s
    `one_copy`; in training, the trunk also ends at the first layer that
    draws random numbers, dropout, which draws per member); from
    there every head is computed per member and the pruned ones are
    zeroed, so the rest costs `members` passes (the fused pruned pass is
    the ViT's and BERT's, `HydraImageClassifier` /
    `HydraTextClassifier`).

    Args:
        model: a built keras-hub classifier with multi-head attention,
            returning logits `(batch, classes)`.
        head_masks: 0 / 1 masks `[members][layers][heads]`, the heads
            each member keeps in each attention layer (in the model's
            layer order; layers may differ in heads, as Swin's and MiT's
            do), e.g. from `ensemble_zoo.pruning.sample_member_masks`.
            `None` (default) is one member that keeps every head.
        reuse_head: bool: `True` (default) starts every member's head as
            a copy of `model`'s, `False` initializes each on its own.
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
        self, model, head_masks=None, reuse_head=True, dtype=None, *, adopt_models=False, **kwargs
    ):
        reuse_head = check_bool(reuse_head, "reuse_head")
        sites = head_sites(getattr(model, "backbone", model))
        head_masks = check_member_head_masks(head_masks, sites)
        num_members = len(head_masks)
        input_spec, num_classes = member_io_shapes(model)
        model = own_wrapped_model(model, dtype, copy=True, adopt=adopt_models)
        masks = []
        for i, (parent, attribute, _, layout) in enumerate(head_sites(model.backbone)):
            layer = getattr(parent, attribute)
            rows = [member[i] for member in head_masks]
            with path_scope(parent.path):
                # Where every member keeps the same heads, the mask can
                # run in the shared trunk.
                mask = HeadMask(
                    rows,
                    layout,
                    one_copy=len(rows) > 1 and all(row == rows[0] for row in rows),
                    dtype=layer.dtype_policy,
                    name="head_mask",
                )
                # The projection's input: `(rows, ..., heads, head_dim)` or
                # `(rows, ..., heads * head_dim)`, read off its kernel.
                features = tuple(
                    layer.kernel.shape[:2] if layout == "split" else [layer.kernel.shape[0]]
                )
                mask.build((None, None) + features)
                masked = MaskedInput(
                    layer, mask, dtype=layer.dtype_policy, name=f"{attribute.lstrip('_')}_masked"
                )
            replace_sublayer(parent, attribute, masked)
            masks.append(mask)
        network, heads = member_heads_network(model, num_members, reuse_head)

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = network(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.model = model  # the plain architecture, for the config
        self.network = network
        self.head_mask_layers = masks
        self.heads = heads

        # === Config ===
        self.num_members = num_members
        self.num_classes = num_classes
        self.head_masks = head_masks
        self.reuse_head = reuse_head

    def call(self, inputs, training=None):
        """The network over a shared trunk (`shared_trunk.shared_trunk_call`):
        the operations before the first where the members keep different
        heads (or the member heads) run once per input row."""
        return shared_trunk_call(
            self.network, inputs, self.num_members, training, per_member=_prunes_per_member
        )
