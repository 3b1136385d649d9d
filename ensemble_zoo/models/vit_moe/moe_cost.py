"""Analytic multiply-add and FLOP counts of ViT, V-MoE and E³ classifiers.

Counts are per input image and come straight from the architecture, so the
cost of the configurations of the E³ paper ("Sparse MoEs meet Efficient
Ensembles", App. M.1, Table 20) can be checked without building them. Every
linear map and matmul is counted: patch embedding, query/key/value/output
projections, the two attention matmuls (`Q K^T` and `A V`), dense MLPs, expert
MLPs, router, dispatch and combine einsums, pre-logits and classifier.
Softmax, layer norm, GELU, additions and top-k are ignored.

Units (`unit=`):

* `"multiply_adds"` (default): forward multiply-accumulates, one per
  multiply-add (what `hydra_multiply_adds` and torchinfo report).
* `"flops"`: forward FLOPs, `2 * multiply_adds` (a multiply-add is two
  floating-point operations, as XLA's cost analysis counts a dot).
* `"training_flops"`: the paper's "downstream training FLOPs" of Table 20,
  measured there with XLA's cost analysis of the compiled train step
  (`vmoe/utils.py`). A train step runs the forward pass, the gradient with
  respect to the weights and the gradient with respect to the inputs, each
  costing the forward multiply-adds, so every component counts
  `2 * 3 = 6` FLOPs per multiply-add; the patch embedding's input is the
  image, which needs no gradient, so it counts `2 * 2 = 4`.

Reproducing Table 20 (per image at 384 px, 1000 classes; see
`vit_moe_config`): use `unit="training_flops"`, `capacity_factor=1.5` (the
fine-tuning capacity), 8 images per routing group (the vmoe default, used
when `group_size=None`) and `dispatcher="indices"`. The dense ViT rows then
come out 0.4-0.7% below the table, all six of them, as expected of a count
that leaves out element-wise work; the V-MoE and E³ rows 0.1-2.3% below
(the gap grows with K, as the uncounted GELU and expert-dropout work on the
capacity buffers does). The table is *not* consistent with dense one-hot
dispatch/combine einsums: at 8 images per group those add `2 * E * C * D`
multiply-adds per token, which would put V-MoE-B/16 K=1 21% and K=4 58%
above the table, and the table's growth per unit of K is the same at 145
and 577 tokens per image, which an einsum cost proportional to the group
size cannot produce. So the measured numbers carry no dispatch/combine
multiply-adds (the compiled program moves the tokens rather than multiplying
by one-hot matrices); `dispatcher="einsum"` (the default) counts what the
einsums of `(G, S, E, C)` shapes compute.
"""

from ensemble_zoo.layers.moe.top_k_router import compute_capacity
from ensemble_zoo.models.vit_cost import attention_projection_multiply_adds
from ensemble_zoo.models.vit_cost import attention_score_multiply_adds
from ensemble_zoo.models.vit_cost import mlp_multiply_adds
from ensemble_zoo.models.vit_cost import patch_embedding_multiply_adds
from ensemble_zoo.models.vit_cost import patch_grid
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import is_integer

_UNITS = {"multiply_adds": 1, "flops": 2, "training_flops": 6}
_TILE_AT = ("first_moe_block", "first_moe_mlp", "input")
_DISPATCHERS = ("einsum", "indices")
_ROUTINGS = ("per_member", "block_diagonal")

#: Images per routing group in the vmoe configs (`min_batch_size_per_device`
#: in `vmoe/configs/vmoe_paper/common.py`).
IMAGES_PER_GROUP = 8

#: Hidden size, MLP size, number of blocks and number of MoE blocks
#: ("last-n") of the paper's ViT families (Table 6; H's MLP size is 5120,
#: Table 6's "5144" is a typo).
VIT_FAMILIES = {
    "S": (512, 2048, 8, 2),
    "B": (768, 3072, 12, 2),
    "L": (1024, 4096, 24, 2),
    "H": (1280, 5120, 32, 5),
}


def last_n_moe_layers(num_layers, n):
    """0-based indices of the "last-n" MoE blocks: the last `n` odd blocks.

    This is vmoe's `range(1, num_layers, 2)[-n:]`: MoE blocks alternate
    with dense blocks at the end of the encoder.

    Args:
        num_layers: int. Number of transformer blocks.
        n: int. Number of MoE blocks, at most `num_layers // 2`.

    Returns:
        A tuple of `n` increasing block indices.

    Example:

    ```python
    from ensemble_zoo.models.vit_moe import last_n_moe_layers

    assert last_n_moe_layers(12, 2) == (9, 11)  # ViT-B
    assert last_n_moe_layers(32, 5) == (23, 25, 27, 29, 31)  # ViT-H
    ```
    """
    odd = tuple(range(1, num_layers, 2))
    if not 1 <= n <= len(odd):
        raise ValueError(f"`n` must be in [1, {len(odd)}] for {num_layers} blocks; got {n}.")
    return odd[-n:]


def _capacity(group_size, num_experts, k, capacity_factor, multiple_of):
    # The buffer size the model allocates (`TopKRouter` calls the same
    # function), so costs and models agree to the slot; `multiple_of=0`
    # here means no rounding, as 1 does there.
    return compute_capacity(
        group_size, num_experts, k, capacity_factor, multiple_of=max(1, multiple_of)
    )


def _non_negative_int(name, value):
    if not is_integer(value) or value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0; got {value!r}.")


def vit_moe_flops(
    image_size,
    patch_size,
    hidden_dim,
    num_layers,
    mlp_dim,
    num_classes,
    moe_layers=(),
    num_experts=0,
    num_selected_experts=1,
    ensemble_size=1,
    capacity_factor=1.0,
    group_size=None,
    capacity_multiple_of=4,
    dispatcher="einsum",
    routing="per_member",
    tile_at="first_moe_block",
    representation_size=None,
    num_channels=3,
    use_class_token=True,
    unit="multiply_adds",
    router="top_k",
    num_slots=None,
    capacity_rounding=None,
):
    """Cost of one image through a ViT, V-MoE or E³ classifier, by component.

    A dense ViT has `moe_layers=()`. A V-MoE replaces the MLP of the blocks
    in `moe_layers` by `num_experts` expert MLPs, each token going to its
    `num_selected_experts` (K) best experts. E³ (`ensemble_size` M > 1)
    splits the experts into M contiguous partitions of `E / M`; the token
    sequence is tiled M times (by default at the start of the first MoE
    block, as vmoe's `EncoderMoeEnsemble` does), so every later block, and
    the head, runs M times; copy m is routed by its own router, a `(D, E/M)`
    slice of the V-MoE router, within partition m only. The router therefore
    costs `tokens * D * E/M` per member, `tokens * D * E` per image in all:
    the same as V-MoE's, E³ has the same parameters.

    Routing is per group of `group_size` tokens of one member. Each expert
    has a buffer of `C = ceil(capacity_factor * K * group_size / (E/M))`
    slots, rounded up to a multiple of `capacity_multiple_of` and capped at
    `group_size` (the router's own `compute_capacity`, so the count uses
    the buffers the model allocates), and an expert
    MLP runs on all of its slots, full or not: the expert MLPs cost
    `(E/M) * C * 2 * D * F` per group, i.e. `capacity_factor * K` times a
    dense MLP (a bit more after rounding). With `dispatcher="einsum"` the
    dispatch `einsum("GSEC,GSD->EGCD")` and combine `einsum("GSEC,GECD->GSD")`
    each cost `S * (E/M) * C * D` per group; `routing="block_diagonal"`
    counts vmoe's E³ implementation instead, which routes the M copies of a
    group together through a `(M * S, E, C)` block-diagonal gate matrix, so
    its einsums cost M times more (experts and router cost the same). With
    `dispatcher="indices"` (gather/scatter) they cost no multiply-adds.

    Other routers (`router=`, as `ViTMoEBackbone`'s):

    - `"experts_choice"`: every expert takes `C = capacity_factor *
      group_size / (E/M)` tokens per group (`K` is 1 in the formula); the
      costs are those above with that `C`.
    - `"soft"`: every expert processes `P` slots per group (`num_slots`, or
      `round(capacity_factor * group_size / (E/M))`); the router's logits
      `einsum("gsd,dep->gsep")` cost `S * D * (E/M) * P` per group, and the
      dense dispatch and combine einsums `S * (E/M) * P * D` each, whatever
      `dispatcher` says (Soft MoE has no index form).

    Args:
        image_size: int or `(height, width)`. Input resolution in pixels.
        patch_size: int. Side of the square patches; the patch embedding is
            a "valid" convolution, so a remainder is dropped (ViT-H/14 at 384
            px has 27 x 27 patches).
        hidden_dim: int. Token dimension D.
        num_layers: int. Number of transformer blocks.
        mlp_dim: int. Hidden size F of the MLPs and of each expert.
        num_classes: int. Classifier outputs.
        moe_layers: sequence of int. 0-based indices of the MoE blocks
            (see `last_n_moe_layers`). Empty for a dense ViT.
        num_experts: int. Total experts E per MoE block (all members).
        num_selected_experts: int. K, experts per token, at most `E / M`.
        ensemble_size: int. M, the number of E³ members (1: V-MoE or ViT).
        capacity_factor: float. Buffer size relative to a perfectly balanced
            load; vmoe pre-trains at 1.05, the paper fine-tunes at 1.5 (the
            Table 20 setting) and evaluates at 8.
        group_size: int or None. Tokens per routing group *per member*.
            `None` is vmoe's choice, the tokens of `IMAGES_PER_GROUP = 8`
            images.
        capacity_multiple_of: int. Round capacities up to a multiple of this
            (vmoe: 4); 0 or 1 for no rounding.
        dispatcher: `"einsum"` (one-hot einsums, the vmoe default, counted)
            or `"indices"` (gather/scatter, no multiply-adds; reproduces the
            paper's Table 20).
        routing: `"per_member"` (M routings of `(S, E/M, C)`, as
            `ensemble_zoo` implements E³) or `"block_diagonal"` (vmoe's
            `(M * S, E, C)`). Only changes dispatch/combine einsum costs.
        tile_at: where E³ tiles the tokens: `"first_moe_block"` (before the
            attention of the first MoE block, as vmoe and the paper),
            `"first_moe_mlp"` (after that attention, which is then run once:
            identical outputs without attention dropout) or `"input"` (after
            the patch embedding, a naive BatchEnsemble-style tiling; the
            only choice that allows M > 1 without MoE blocks).
        representation_size: int or None. Width of the `Dense + tanh`
            pre-logits layer on the class token (vmoe: `hidden_dim`); `None`
            for none (keras-hub's `ViTImageClassifier` default).
        num_channels: int. Image channels.
        use_class_token: bool. Whether a class token is prepended (vmoe and
            keras-hub do); the head reads one token per member either way.
        unit: `"multiply_adds"`, `"flops"` (2x) or `"training_flops"` (the
            paper's Table 20 unit, see the module docstring).
        router: `"top_k"` (default), `"experts_choice"` or `"soft"`.
        num_slots: int or `None`, Soft MoE's slots per expert.
        capacity_rounding: `"ceil"`, `"round"` or `None` (the router's
            default: `"round"` for Soft MoE, else `"ceil"`).

    Returns:
        A dict of floats, per image and summed over members, in `unit`:
        `patch_embedding`, `attention_projections` (q, k, v and output),
        `attention_scores` (`Q K^T` and `A V`), `mlp` (dense blocks),
        `expert_mlp` (capacity buffers included), `router`, `dispatch`,
        `combine`, `pre_logits`, `head` and `total`, their sum.

    Example:

    ```python
    from ensemble_zoo.models.vit_moe import vit_moe_config
    from ensemble_zoo.models.vit_moe import vit_moe_flops

    # ViT-B/32 at 384 px: 13 G forward multiply-adds per image, and about
    # the 77.97 downstream training GFLOPs of the paper's Table 20.
    vit = vit_moe_flops(
        image_size=384, patch_size=32, hidden_dim=768, num_layers=12,
        mlp_dim=3072, num_classes=1000,
    )
    assert 13.0e9 < vit["total"] < 13.1e9
    paper = vit_moe_flops(**vit_moe_config("B/32"), unit="training_flops")
    assert abs(paper["total"] / 77.97e9 - 1) < 0.01

    # E3 (K=1, M=2) against a deep ensemble of two V-MoE (K=1): ~36% fewer.
    e3 = vit_moe_flops(**vit_moe_config("B/32", 1, ensemble_size=2))
    vmoe = vit_moe_flops(**vit_moe_config("B/32", 1))
    saving = 1 - e3["total"] / (2 * vmoe["total"])
    assert 0.34 < saving < 0.38
    ```
    """
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    height, width = image_size
    for name, value in (
        ("image height", height),
        ("image width", width),
        ("patch_size", patch_size),
        ("hidden_dim", hidden_dim),
        ("num_layers", num_layers),
        ("mlp_dim", mlp_dim),
        ("num_classes", num_classes),
        ("ensemble_size", ensemble_size),
        ("num_channels", num_channels),
        ("num_selected_experts", num_selected_experts),
    ):
        check_positive_int(value, name)
    _non_negative_int("num_experts", num_experts)
    _non_negative_int("capacity_multiple_of", capacity_multiple_of)
    check_choice(unit, "unit", tuple(_UNITS))
    check_choice(dispatcher, "dispatcher", _DISPATCHERS)
    check_choice(routing, "routing", _ROUTINGS)
    check_choice(router, "router", ("top_k", "experts_choice", "soft"))
    if router != "top_k" and num_selected_experts != 1:
        raise ValueError(
            f"`num_selected_experts` must be 1 for router={router!r}; got {num_selected_experts}."
        )
    if num_slots is not None:
        if router != "soft":
            raise ValueError("`num_slots` is only for router='soft'.")
        check_positive_int(num_slots, "num_slots")
    rounding = capacity_rounding or ("round" if router == "soft" else "ceil")
    check_choice(tile_at, "tile_at", _TILE_AT)
    if representation_size is not None:
        check_positive_int(representation_size, "representation_size")
    image_shape = (height, width, num_channels)
    _, patches = patch_grid(image_shape, patch_size)
    if patches == 0:
        raise ValueError(f"`patch_size` {patch_size} is larger than the image {image_size}.")
    tokens = patches + (1 if use_class_token else 0)

    moe_layers = tuple(moe_layers)
    for index in moe_layers:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ValueError(f"`moe_layers` must hold ints; got {index!r}.")
        if not 0 <= index < num_layers:
            raise ValueError(
                f"MoE block index {index} is out of range for {num_layers} "
                f"blocks (0-based, [0, {num_layers - 1}])."
            )
    if len(set(moe_layers)) != len(moe_layers):
        raise ValueError(f"`moe_layers` has repeated blocks: {moe_layers}.")
    members = ensemble_size
    if moe_layers:
        if num_experts < 1:
            raise ValueError("MoE blocks need `num_experts >= 1`.")
        if num_experts % members:
            raise ValueError(
                f"`num_experts` ({num_experts}) must be divisible by "
                f"`ensemble_size` ({members}): each member gets E/M experts."
            )
        experts = num_experts // members
        if num_selected_experts > experts:
            raise ValueError(
                f"`num_selected_experts` ({num_selected_experts}) exceeds the "
                f"{experts} experts of each member's partition (E/M = "
                f"{num_experts}/{members})."
            )
        if not capacity_factor > 0:
            raise ValueError(f"`capacity_factor` must be > 0; got {capacity_factor}.")
        if group_size is None:
            group_size = IMAGES_PER_GROUP * tokens
        check_positive_int(group_size, "group_size")
        if router == "soft" and num_slots is not None:
            capacity = num_slots
        else:
            capacity = compute_capacity(
                group_size,
                experts,
                num_selected_experts,
                capacity_factor,
                multiple_of=max(1, capacity_multiple_of),
                rounding=rounding,
            )
    elif members > 1 and tile_at != "input":
        raise ValueError(
            f"E³ with `ensemble_size={members}` tiles at the first MoE block, "
            "but `moe_layers` is empty (use `tile_at='input'` for M dense "
            "copies)."
        )

    first_tiled = min(moe_layers, default=num_layers)
    if tile_at == "input":
        first_tiled = 0
    d, f = hidden_dim, mlp_dim
    cost = dict.fromkeys(
        (
            "patch_embedding",
            "attention_projections",
            "attention_scores",
            "mlp",
            "expert_mlp",
            "router",
            "dispatch",
            "combine",
            "pre_logits",
            "head",
        ),
        0.0,
    )
    cost["patch_embedding"] = float(patch_embedding_multiply_adds(image_shape, patch_size, d))
    for layer in range(num_layers):
        tiled = layer > first_tiled or (layer == first_tiled and tile_at != "first_moe_mlp")
        copies = members if tiled else 1
        cost["attention_projections"] += copies * attention_projection_multiply_adds(tokens, d)
        cost["attention_scores"] += copies * attention_score_multiply_adds(tokens, d)
        copies = members if layer >= first_tiled else 1
        if layer not in moe_layers:
            cost["mlp"] += copies * mlp_multiply_adds(tokens, d, f)
            continue
        groups = copies * tokens / group_size  # per image, over members
        # Every expert's MLP runs on all `capacity` slots of its buffer.
        cost["expert_mlp"] += groups * experts * mlp_multiply_adds(capacity, d, f)
        if router == "soft":
            # Logits against every slot; dense dispatch and combine.
            cost["router"] += groups * group_size * d * experts * capacity
            cost["dispatch"] += groups * group_size * experts * capacity * d
            cost["combine"] += groups * group_size * experts * capacity * d
            continue
        cost["router"] += copies * tokens * d * experts
        if dispatcher == "einsum":
            if routing == "block_diagonal":
                # vmoe: one group of M * S tokens over all E experts.
                slots = num_experts * _capacity(
                    members * group_size,
                    num_experts,
                    num_selected_experts,
                    capacity_factor,
                    capacity_multiple_of,
                )
            else:
                slots = experts * capacity
            cost["dispatch"] += groups * group_size * slots * d
            cost["combine"] += groups * group_size * slots * d
    width = d
    if representation_size is not None:
        cost["pre_logits"] = float(members * d * representation_size)
        width = representation_size
    cost["head"] = float(members * width * num_classes)

    scale = _UNITS[unit]
    cost = {name: float(value) * scale for name, value in cost.items()}
    if unit == "training_flops":
        cost["patch_embedding"] *= 2 / 3  # no gradient w.r.t. the image
    cost["total"] = sum(cost.values())
    return cost
