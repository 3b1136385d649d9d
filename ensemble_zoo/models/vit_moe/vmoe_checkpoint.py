"""Reads the V-MoE / E³ checkpoints released with the E³ paper ("Sparse MoEs
meet Efficient Ensembles") in vmoe's format.

The files are read by `vmoe_checkpoint_reader.read_vmoe_checkpoint`
(imported here too, its old path), which describes vmoe's format and
checks that the chunks cover every array exactly; `vmoe_architecture`
infers the `ViTMoEBackbone` arguments from the parameter shapes and the
pooling from the class token; `load_vmoe_params` copies the parameters into a
`ViTMoEImageClassifier`. The research notes are in
`docs/vmoe_checkpoint_format.md`.

Pooling. vmoe's `classifier` is a config setting, not stored in the
files; only `classifier='token'` creates a parameter (`cls`). A checkpoint
with `cls` loads as `pooling="token"` with a class token; one without
loads as `pooling="gap"` without a class token (vmoe's `'gap'`: the mean
over tokens of the encoder output). vmoe's `classifier='0'` (token 0, i.e.
the first patch, of a model without class token) has exactly the
parameters of `'gap'`, so it is only reached by asking
`vmoe_architecture(..., pooling="token")` for a checkpoint without `cls`.
`classifier='map'` (attention pooling, `MapHead/` parameters) is not
supported.

What matches vmoe, given the same routing settings (`group_size`,
`num_selected_experts`, capacity factor, `batch_priority`) as the vmoe
config, on checkpoints written by vmoe's own code (`tests/fixtures/vmoe/`,
every backend):

- float32 dispatch (`bfloat16_dispatch=False`, vmoe's
  `dispatcher.bfloat16=False`): the logits equal vmoe's to float32
  round-off, at most about 1e-5 (tested to 1e-5 with tokens dropped at
  capacity, for token and gap pooling, V-MoE and E³).
- bfloat16 dispatch (`bfloat16_dispatch=True`, vmoe's default and every
  paper config): every expert output is rounded to bfloat16 before the
  combine, so a float32 round-off difference (another summation order)
  that crosses a bfloat16 rounding boundary moves that output by one
  bfloat16 step (2**-8 to 2**-7 of its size); one such flip moves the
  E³ fixture's logits by up to 2e-3. What holds is per MoE layer: on the
  same input the layer routes the same tokens to the same experts and
  buffer slots (barring gates tied to within round-off), and its output
  differs from vmoe's by at most round-off plus, per element,
  `sum_e gate_e * 2**-7 * |expert_e output|` (each expert output the
  same bfloat16 value as vmoe's or a neighbour). End-to-end logits then
  usually agree to round-off as well (they do on the fixtures), without
  a guarantee.

Both assume IEEE float32 arithmetic; matmuls in TF32 (GPUs) round more
coarsely.
"""

import math
import re

import numpy as np

from ensemble_zoo.models.vit_moe.vmoe_checkpoint_reader import VMoECheckpointError
from ensemble_zoo.models.vit_moe.vmoe_checkpoint_reader import checkpoint_prefix  # noqa: F401
from ensemble_zoo.models.vit_moe.vmoe_checkpoint_reader import read_vmoe_checkpoint  # noqa: F401

_BLOCK = re.compile(r"^Encoder/encoderblock_(\d+)/")


def _require(params, name, ndim=None):
    if name not in params:
        raise VMoECheckpointError(
            f"The vmoe checkpoint has no parameter {name!r}; it does not look "
            "like a ViT-MoE (vmoe.nn.vit_moe) checkpoint."
        )
    value = params[name]
    if ndim is not None and value.ndim != ndim:
        raise VMoECheckpointError(
            f"vmoe parameter {name!r} has shape {value.shape}; expected {ndim} axes."
        )
    return value


def strip_params_prefix(params):
    """Drops a leading `params/` (a TrainState's tree) from every key."""
    if params and all(k.startswith("params/") for k in params):
        return {k[len("params/") :]: v for k, v in params.items()}
    return params


def _pooling(params, pooling):
    """The classifier pooling for a checkpoint; see the module docstring."""
    has_class_token = "cls" in params
    if any(k.startswith("MapHead/") for k in params):
        raise VMoECheckpointError(
            "The vmoe checkpoint has `MapHead/` parameters (vmoe's "
            "classifier='map', attention pooling); only classifier='token', "
            "'gap' and '0' are supported."
        )
    if pooling is None:
        return "token" if has_class_token else "gap"
    if pooling not in ("token", "gap"):
        raise ValueError(
            f"`pooling` must be 'token', 'gap' or None (inferred from the "
            f"checkpoint); got {pooling!r}."
        )
    if pooling == "gap" and has_class_token:
        raise ValueError(
            "`pooling`='gap', but the checkpoint has a `cls` token, which "
            "vmoe creates only for classifier='token' (its 'gap' models have "
            "none); load it with `pooling`='token' or None."
        )
    return pooling


def vmoe_architecture(params, image_shape=None, ensemble_size=None, pooling=None):
    """The `ViTMoEBackbone` / classifier arguments a vmoe checkpoint implies.

    Shapes give every architecture argument: the hidden size and the
    patch size and channels (`embedding/kernel`), the class token (`cls`,
    present only for vmoe's `classifier='token'`), the number of blocks, of
    heads (`SelfAttention/query/kernel` is `(dim, heads, head_dim)`), the
    MLP size, the MoE blocks and experts, the E³ ensemble size (a router
    kernel `(dim, M, E/M)`), the representation size (`pre_logits`) and the
    number of classes. The image size follows from the position
    embedding (square images unless `image_shape` says otherwise).

    Args:
        params: the flat dict of `read_vmoe_checkpoint`.
        image_shape: `(height, width, channels)` or `None` (square).
        ensemble_size: int or `None`. A `(dim, E)` router kernel (V-MoE or
            a pre-trained E³ before its fine-tuning reshape) is read as
            `ensemble_size` contiguous expert groups; defaults to 1 for
            such kernels and to `M` for `(dim, M, E/M)` kernels.
        pooling: `"token"`, `"gap"` or `None`, the classifier's pooling
            (vmoe's `classifier`, which the files do not store). `None`
            (default) gives `"token"` for a checkpoint with a class token
            (vmoe's `'token'`) and `"gap"` for one without (vmoe's
            `'gap'`). `"token"` without a class token is vmoe's
            `classifier='0'`, the first patch token. `"gap"` with a class
            token raises: vmoe creates `cls` only for `'token'`.

    Returns:
        `(backbone_kwargs, classifier_kwargs)` dicts; the backbone's
        `use_class_token` and the classifier's `pooling` are explicit, and
        a Soft MoE checkpoint (`Moe/Router/mu`, `Moe/Router/scale`) adds
        `router="soft"` and `num_slots` (from `mu` `(dim, E, slots)`).
    """
    pooling = _pooling(params, pooling)
    use_class_token = "cls" in params
    kernel = _require(params, "embedding/kernel", 4)
    patch_h, patch_w, channels, hidden_dim = kernel.shape
    if use_class_token and _require(params, "cls", 3).shape != (1, 1, hidden_dim):
        raise VMoECheckpointError(
            f"vmoe parameter 'cls' has shape {params['cls'].shape}; the patch "
            f"embedding gives hidden size {hidden_dim}, so (1, 1, {hidden_dim})."
        )
    positions = _require(params, "Encoder/posembed_input/pos_embedding", 3).shape[1]
    patches = positions - int(use_class_token)
    blocks = sorted({int(m.group(1)) for k in params if (m := _BLOCK.match(k))})
    if not blocks or blocks != list(range(len(blocks))):
        raise VMoECheckpointError(
            f"The vmoe checkpoint's encoder blocks are {blocks}; expected "
            "encoderblock_0 ... encoderblock_{L-1}."
        )
    query = _require(params, "Encoder/encoderblock_0/SelfAttention/query/kernel", 3)
    num_heads = query.shape[1]
    moe_layers, experts, mlp_dims, members, slots = [], set(), set(), set(), set()
    for i in blocks:
        base = f"Encoder/encoderblock_{i}/"
        if base + "Moe/Mlp/Dense_0/kernel" in params:
            moe_layers.append(i)
            dense_0 = _require(params, base + "Moe/Mlp/Dense_0/kernel", 3)
            experts.add(dense_0.shape[0])
            mlp_dims.add(dense_0.shape[2])
            if base + "Moe/Router/mu" in params:
                mu = _require(params, base + "Moe/Router/mu", 3)
                members.add(None)
                slots.add(mu.shape[2])
                if mu.shape[:2] != (hidden_dim, dense_0.shape[0]):
                    raise VMoECheckpointError(
                        f"Soft MoE slots {base}Moe/Router/mu have shape "
                        f"{mu.shape}; expected ({hidden_dim}, "
                        f"{dense_0.shape[0]}, slots)."
                    )
                continue
            slots.add(None)
            router = _require(params, base + "Moe/Router/dense/kernel")
            if router.ndim == 3:
                members.add(router.shape[1])
            elif router.ndim == 2:
                members.add(None)
            else:
                raise VMoECheckpointError(
                    f"Router kernel {base}Moe/Router/dense/kernel has shape "
                    f"{router.shape}; expected (dim, E) or (dim, M, E/M)."
                )
        else:
            mlp_dims.add(_require(params, base + "Mlp/Dense_0/kernel", 2).shape[1])
    if not moe_layers:
        raise VMoECheckpointError("The vmoe checkpoint has no MoE block (no `Moe/` parameters).")
    if len(experts) != 1 or len(mlp_dims) != 1 or len(members) != 1 or len(slots) != 1:
        raise VMoECheckpointError(
            "ViTMoEBackbone needs one expert count, MLP size, ensemble size "
            "and router for all blocks; the checkpoint has experts "
            f"{sorted(experts)}, MLP sizes {sorted(mlp_dims)}, router layouts "
            f"{members}, Soft MoE slots {slots} (None: a dense router kernel)."
        )
    num_slots = slots.pop()
    stored_members = members.pop()
    if stored_members is None:
        members = 1 if ensemble_size is None else ensemble_size
    else:
        if ensemble_size not in (None, stored_members):
            raise ValueError(
                f"`ensemble_size`={ensemble_size!r}, but the checkpoint's router "
                f"kernels are E³ kernels for {stored_members} members."
            )
        members = stored_members
    if image_shape is None:
        side = math.isqrt(patches)
        if side * side != patches:
            hint = ""
            if not use_class_token and math.isqrt(patches - 1) ** 2 == patches - 1:
                hint = (
                    " (one more than a square grid: a classifier='token' "
                    "checkpoint that lost its `cls` parameter?)"
                )
            raise ValueError(
                f"The position embedding has {patches} patch positions, not a "
                f"square grid{hint}; pass `image_shape`."
            )
        image_shape = (side * patch_h, side * patch_w, channels)
    image_shape = tuple(image_shape)
    if (
        len(image_shape) != 3
        or image_shape[2] != channels
        or (image_shape[0] // patch_h) * (image_shape[1] // patch_w) != patches
    ):
        raise ValueError(
            f"`image_shape` {image_shape} does not fit the checkpoint: its "
            f"position embedding has {patches} patches of {patch_h}x{patch_w} "
            f"with {channels} channels (fine-tuning at another resolution, "
            "which resizes the position embedding, is not supported)."
        )
    representation = params.get("pre_logits/kernel")
    head = _require(params, "head/kernel", 2)
    backbone_kwargs = dict(
        image_shape=image_shape,
        patch_size=(patch_h, patch_w),
        num_layers=len(blocks),
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        mlp_dim=mlp_dims.pop(),
        num_experts=experts.pop(),
        moe_layers=moe_layers,
        ensemble_size=members,
        use_class_token=use_class_token,
    )
    if num_slots is not None:
        backbone_kwargs.update(router="soft", num_slots=num_slots)
    classifier_kwargs = dict(
        num_classes=head.shape[1],
        pooling=pooling,
        intermediate_dim=None if representation is None else representation.shape[1],
    )
    return backbone_kwargs, classifier_kwargs


def resolve_router(architecture, router, num_selected_experts):
    """The router of a checkpoint (`vmoe_architecture`'s kwargs) and the
    K to build it with; see `ViTMoEImageClassifier.from_vmoe_checkpoint`."""
    stored = architecture.get("router")
    if router not in (None, "top_k", "experts_choice", "soft"):
        raise ValueError(
            f"`router` must be None, 'top_k', 'experts_choice' or 'soft'; got {router!r}."
        )
    if stored == "soft":
        if router not in (None, "soft"):
            raise ValueError(
                f"`router`={router!r}, but the checkpoint is a Soft MoE one "
                "(its routers are `Moe/Router/mu` and `Moe/Router/scale`)."
            )
        router = "soft"
    elif router == "soft":
        raise ValueError(
            "`router`='soft', but the checkpoint's routers are dense kernels "
            "(`Moe/Router/dense/kernel`: the top-K or Experts Choice router); "
            "Soft MoE checkpoints hold `Moe/Router/mu`."
        )
    router = router or "top_k"
    architecture.pop("router", None)
    if router == "top_k":
        if num_selected_experts is None:
            raise ValueError(
                "`num_selected_experts` is required for the top-K router: "
                "vmoe's `num_selected_experts` lives in its config, not in "
                "the checkpoint (2 for the V-MoE paper's models, 1 for E³)."
            )
        return router, num_selected_experts
    if num_selected_experts not in (None, 1):
        raise ValueError(
            f"`num_selected_experts`={num_selected_experts!r}: the "
            f"{router!r} router does not choose experts per token; leave it "
            "None."
        )
    return router, 1


def _assign(variable, value, name):
    value = np.asarray(value)
    if tuple(variable.shape) != value.shape:
        raise VMoECheckpointError(
            f"vmoe parameter {name!r} has shape {value.shape}; the model's "
            f"{variable.path!r} needs {tuple(variable.shape)}."
        )
    variable.assign(value.astype(variable.dtype))


def load_vmoe_params(classifier, params):
    """Copies a vmoe parameter dict into a `ViTMoEImageClassifier`.

    Every checkpoint parameter is used exactly once and every model weight
    is set; anything left over raises. E³ router kernels `(dim, M, E/M)`
    are stored by the model as `(dim, E)` in the same (C) order, so member
    `m` routes with columns `[m E/M, (m + 1) E/M)`, i.e. experts
    `m E/M ... (m + 1) E/M - 1`, as in vmoe.
    """
    used = set()

    def take(name):
        used.add(name)
        return _require(params, name)

    backbone = classifier.backbone
    embedding = backbone.embedding
    if backbone.use_class_token:
        _assign(embedding.class_token, take("cls"), "cls")
    _assign(embedding.patch_embedding.kernel, take("embedding/kernel"), "embedding/kernel")
    _assign(embedding.patch_embedding.bias, take("embedding/bias"), "embedding/bias")
    name = "Encoder/posembed_input/pos_embedding"
    _assign(embedding.position_embedding.embeddings, take(name)[0], name)
    for i, block in enumerate(backbone.encoder_blocks):
        base = f"Encoder/encoderblock_{i}/"
        for layer, source in (
            (block.layer_norm_1, "LayerNorm_0"),
            (block.layer_norm_2, "LayerNorm_1"),
        ):
            _assign(layer.gamma, take(base + source + "/scale"), base + source + "/scale")
            _assign(layer.beta, take(base + source + "/bias"), base + source + "/bias")
        attention = []
        for part in ("query", "key", "value", "out"):
            attention += [
                take(f"{base}SelfAttention/{part}/kernel"),
                take(f"{base}SelfAttention/{part}/bias"),
            ]
        try:
            block.mha.set_weights(attention)
        except ValueError as error:
            raise VMoECheckpointError(f"vmoe parameters {base}SelfAttention/*: {error}") from error
        if i in backbone.moe_layers:
            moe = block.moe
            if moe.router_type == "soft":
                for variable in ("mu", "scale"):
                    name = base + "Moe/Router/" + variable
                    _assign(getattr(moe.router, variable), take(name), name)
            else:
                name = base + "Moe/Router/dense/kernel"
                router = take(name)
                _assign(moe.router.kernel, router.reshape(router.shape[0], -1), name)
            pairs = ((moe.dense_1, "Dense_0"), (moe.dense_2, "Dense_1"))
            prefix = base + "Moe/Mlp/"
        else:
            pairs = ((block.mlp.dense_1, "Dense_0"), (block.mlp.dense_2, "Dense_1"))
            prefix = base + "Mlp/"
        for layer, source in pairs:
            _assign(layer.kernel, take(prefix + source + "/kernel"), prefix + source + "/kernel")
            _assign(layer.bias, take(prefix + source + "/bias"), prefix + source + "/bias")
    _assign(
        backbone.layer_norm.gamma, take("Encoder/encoder_norm/scale"), "Encoder/encoder_norm/scale"
    )
    _assign(
        backbone.layer_norm.beta, take("Encoder/encoder_norm/bias"), "Encoder/encoder_norm/bias"
    )
    if classifier.intermediate_dim is not None:
        for variable in ("kernel", "bias"):
            name = "pre_logits/" + variable
            _assign(getattr(classifier.intermediate_layer, variable), take(name), name)
    for variable in ("kernel", "bias"):
        _assign(getattr(classifier.head, variable), take("head/" + variable), "head/" + variable)
    unused = sorted(set(params) - used)
    if unused:
        raise VMoECheckpointError(
            f"{len(unused)} vmoe parameters have no place in the model: {unused[:8]}"
            + (" ..." if len(unused) > 8 else "")
        )
