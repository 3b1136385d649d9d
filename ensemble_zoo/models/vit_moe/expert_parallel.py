"""Expert parallelism for V-MoE / E³ through `keras.distribution` (JAX).

The expert weights of a `SparseMoE` are stacked on a leading expert axis
(`dense_1.kernel`: `(E, dim, mlp_dim)`, `dense_1.bias`: `(E, mlp_dim)`,
`dense_2.kernel`: `(E, mlp_dim, dim)`, `dense_2.bias`: `(E, dim)`), so
expert parallelism is a `keras.distribution.LayoutMap` that shards that
axis over one mesh axis: each device holds `E / n` whole experts. Every
other weight (router, attention, norms, embedding, head) is replicated. The
layer code is unchanged: under JAX the model is one SPMD program and XLA
(GSPMD) inserts the communication of the dispatch / combine einsums, so the
sharded model computes what the single-device model computes.
"""

import math

import keras

from ensemble_zoo.utils.validation import check_positive_int

#: Regex of the `SparseMoE` layer names whose experts are sharded: the
#: `moe` sublayer of `ViTMoEEncoderBlock`, and standalone `SparseMoE`
#: layers with their default names (`sparse_mo_e`, `sparse_mo_e_1`, ...).
DEFAULT_MOE_LAYER_NAME = r"moe|sparse_mo_e(?:_\d+)?"

# Variable name -> its rank (the expert axis is axis 0 of each).
_EXPERT_VARIABLES = {"kernel": 3, "bias": 2}


def _check_axis_name(name, argument):
    if not isinstance(name, str) or not name:
        raise ValueError(f"`{argument}` must be a non-empty string; got {name!r}.")
    return name


def _check_divisible(size, axis_size, axis, what="The number of experts"):
    if size % axis_size:
        raise ValueError(
            f"{what} ({size}) must be divisible by the size of the mesh axis "
            f"{axis!r} ({axis_size}) it is sharded over: each device holds "
            "an equal share of whole experts. Use a mesh whose expert axis "
            "divides the number of experts (e.g. "
            "`expert_parallel_distribution(num_experts=...)`, which uses "
            "gcd(devices, experts) expert shards)."
        )


def _expert_patterns(moe_layer_name):
    prefix = rf"(?:.*/)?(?:{moe_layer_name})/dense_[12]/"
    return {prefix + name: rank for name, rank in _EXPERT_VARIABLES.items()}


def expert_parallel_layout_map(
    device_mesh, expert_axis="experts", num_experts=None, moe_layer_name=DEFAULT_MOE_LAYER_NAME
):
    """A `LayoutMap` that shards every `SparseMoE`'s experts over a mesh axis.

    The expert kernels and biases of each `SparseMoE` (the `GroupedDense`
    sublayers `dense_1` and `dense_2`, e.g. variable paths
    `transformer_block_2/moe/dense_1/kernel`) get the layout
    `(expert_axis, None, None)` (kernels) or `(expert_axis, None)`
    (biases): their leading expert axis is split over the mesh axis
    `expert_axis`, so each of its `n` devices holds `E / n` whole experts.
    Nothing else is in the map, so every other variable (the router kernel
    `(dim, E)`, attention, norms, embedding, head) is replicated by
    `keras.distribution.ModelParallel`. Optimizer slots take their
    variable's layout. Pass the result to `ModelParallel`, or use
    `expert_parallel_distribution`.

    Keys are regexes matched (`re.fullmatch`) against variable paths; add
    your own keys to the returned map to shard other weights too.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with an axis named
            `expert_axis`.
        expert_axis: str, the mesh axis the experts are split over.
            Defaults to `"experts"`.
        num_experts: int or `None`, E; when given, checked to be divisible
            by the size of `expert_axis` (otherwise the check happens when
            the variables are created, or with `check_expert_parallel`).
        moe_layer_name: str, regex of the `SparseMoE` layer names whose
            experts are sharded. Defaults to `"moe"` (the sublayer of
            `ViTMoEEncoderBlock`) or a default-named standalone
            `SparseMoE`.

    Returns:
        A `keras.distribution.LayoutMap` on `device_mesh`.

    Raises:
        ValueError: if `expert_axis` is not an axis of `device_mesh`, or
            `num_experts` is not divisible by its size.

    Example:

    ```python
    import keras
    from ensemble_zoo.models.vit_moe import expert_parallel_layout_map

    # A one-device mesh so that this runs anywhere; with 8 devices use
    # keras.distribution.DeviceMesh((8,), ["experts"]).
    mesh = keras.distribution.DeviceMesh((1,), ["experts"], devices=["cpu:0"])
    layout_map = expert_parallel_layout_map(mesh, num_experts=8)
    layout_map["transformer_block_2/moe/dense_1/kernel"].axes
    # ("experts", None, None): split over the expert axis
    layout_map["transformer_block_2/moe/dense_2/bias"].axes  # ("experts", None)
    layout_map["transformer_block_2/moe/router/kernel"]  # None: replicated
    # Under JAX: keras.distribution.ModelParallel(layout_map=layout_map)
    ```
    """
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise ValueError(
            "`device_mesh` must be a keras.distribution.DeviceMesh; got "
            f"{type(device_mesh).__name__}."
        )
    expert_axis = _check_axis_name(expert_axis, "expert_axis")
    if expert_axis not in device_mesh.axis_names:
        raise ValueError(
            f"`expert_axis` {expert_axis!r} is not an axis of the device mesh "
            f"(axis names {list(device_mesh.axis_names)})."
        )
    axis_names = list(device_mesh.axis_names)
    axis_size = device_mesh.shape[axis_names.index(expert_axis)]
    if num_experts is not None:
        num_experts = check_positive_int(num_experts, "num_experts")
        _check_divisible(num_experts, axis_size, expert_axis)
    if not isinstance(moe_layer_name, str) or not moe_layer_name:
        raise ValueError(f"`moe_layer_name` must be a non-empty regex; got {moe_layer_name!r}.")
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for pattern, rank in _expert_patterns(moe_layer_name).items():
        layout_map[pattern] = (expert_axis,) + (None,) * (rank - 1)
    return layout_map


def expert_parallel_distribution(
    num_devices=None,
    num_experts=None,
    batch_axis="batch",
    expert_axis="experts",
    devices=None,
    moe_layer_name=DEFAULT_MOE_LAYER_NAME,
):
    """A `keras.distribution.ModelParallel` for expert-parallel V-MoE / E³.

    **Mesh.** With `n` devices the mesh is 2-D, `(n // x, x)` with axis
    names `(batch_axis, expert_axis)`, where `x = gcd(n, num_experts)` (all
    `n` devices when `num_experts` is `None`): the experts are split over
    the largest expert axis that divides E, and the input batch is split
    over the remaining data axis (the batch size must be divisible by
    `n // x`). Within an expert-axis group the non-expert layers run
    replicated and XLA inserts the collectives of the expert einsums.
    Passing `expert_axis == batch_axis` gives instead a 1-D mesh `(n,)`
    where both the batch and the experts are split over all devices, the
    GShard / V-MoE layout; it needs E and the batch size divisible by
    `n`. The collectives are XLA's choice (GSPMD): on the tiny test model
    it gathers the token activations around the expert layers rather than
    issuing an all-to-all, while the expert weights are never gathered.

    Set it with `keras.distribution.set_distribution(...)` or use it as
    `with distribution.scope():` around building the model (and around
    loading or setting its weights and training it): variables are
    created with their layout. Sharded execution needs the JAX backend.

    Args:
        num_devices: int or `None`, how many of `devices` to use. Defaults
            to all.
        num_experts: int or `None`, E of the model's MoE layers, used to
            size the expert axis (and checked). Defaults to `None` (all
            devices on the expert axis).
        batch_axis: str, the data-parallel mesh axis name. Defaults to
            `"batch"`.
        expert_axis: str, the expert-parallel mesh axis name. Defaults to
            `"experts"`.
        devices: list of device names (e.g. `["cpu:0", "cpu:1"]`) or
            `None` for `keras.distribution.list_devices()`.
        moe_layer_name: see `expert_parallel_layout_map`.

    Returns:
        A `keras.distribution.ModelParallel` with the layout map of
        `expert_parallel_layout_map` and `batch_dim_name=batch_axis`.

    Raises:
        ValueError: if the backend is not JAX, `num_devices` exceeds the
            available devices, or E is not divisible by the expert axis
            (1-D mesh).

    Example:

    ```python
    import keras
    from ensemble_zoo.models.vit_moe import expert_parallel_distribution

    if keras.backend.backend() == "jax":
        # E.g. 8 devices and 4 experts: mesh (2, 4), 2-way data parallel.
        distribution = expert_parallel_distribution(num_experts=4)
        distribution.device_mesh.axis_names  # ["batch", "experts"]
        # with distribution.scope():
        #     model = ...  # expert weights created sharded
        #     model.fit(...)
    ```
    """
    if keras.backend.backend() != "jax":
        raise ValueError(
            "Expert-parallel execution through keras.distribution needs the "
            f"JAX backend; the backend is {keras.backend.backend()!r}. "
            "`expert_parallel_layout_map` builds the layout on any backend."
        )
    batch_axis = _check_axis_name(batch_axis, "batch_axis")
    expert_axis = _check_axis_name(expert_axis, "expert_axis")
    if devices is None:
        devices = keras.distribution.list_devices()
    devices = list(devices)
    if num_devices is not None:
        num_devices = check_positive_int(num_devices, "num_devices")
        if num_devices > len(devices):
            raise ValueError(
                f"`num_devices` ({num_devices}) exceeds the {len(devices)} "
                f"available devices {devices}."
            )
        devices = devices[:num_devices]
    if not devices:
        raise ValueError("No devices to distribute over.")
    n = len(devices)
    if num_experts is not None:
        num_experts = check_positive_int(num_experts, "num_experts")
    if expert_axis == batch_axis:
        shape, axis_names = (n,), [expert_axis]
    else:
        experts = n if num_experts is None else math.gcd(n, num_experts)
        shape, axis_names = (n // experts, experts), [batch_axis, expert_axis]
    mesh = keras.distribution.DeviceMesh(shape, axis_names, devices=devices)
    layout_map = expert_parallel_layout_map(
        mesh, expert_axis, num_experts=num_experts, moe_layer_name=moe_layer_name
    )
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name=batch_axis)


def check_expert_parallel(model, distribution):
    """Checks that `distribution` shards the experts of `model`; returns them.

    `model` is any built model or layer containing `SparseMoE` layers (it
    need not have been built under `distribution`, e.g. a single-device
    copy before the distributed one is built). For every variable the
    distribution's layout map places on a mesh axis, checks that the
    layout has the variable's rank and that each sharded dimension is
    divisible by its mesh axis size (else `jax.device_put` fails when the
    variable is created).

    Args:
        model: a built `keras.Model` or `keras.layers.Layer`.
        distribution: a `keras.distribution.ModelParallel`, e.g. from
            `expert_parallel_distribution`.

    Returns:
        A dict `{variable path: layout axes}` of the sharded variables.

    Raises:
        ValueError: if no variable of `model` is sharded (no expert matched,
            e.g. a wrong `moe_layer_name`), or a layout does not fit its
            variable.

    Example:

    ```python
    import keras
    import numpy as np
    from ensemble_zoo.layers import SparseMoE
    from ensemble_zoo.models.vit_moe import check_expert_parallel
    from ensemble_zoo.models.vit_moe import expert_parallel_layout_map

    moe = SparseMoE(num_experts=4, mlp_dim=8)
    moe(np.zeros((1, 5, 6), "float32"))
    mesh = keras.distribution.DeviceMesh((1,), ["experts"], devices=["cpu:0"])
    distribution = keras.distribution.ModelParallel(
        layout_map=expert_parallel_layout_map(mesh)
    )
    sorted(check_expert_parallel(moe, distribution))
    # the 4 paths "sparse_mo_e*/dense_1/kernel", ".../dense_1/bias", ...
    ```
    """
    if not isinstance(distribution, keras.distribution.ModelParallel):
        raise ValueError(
            "`distribution` must be a keras.distribution.ModelParallel; got "
            f"{type(distribution).__name__}."
        )
    layout_map = distribution._layout_map
    mesh = layout_map.device_mesh
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    sharded = {}
    for variable in model.weights:
        layout = layout_map[variable.path]
        if layout is None or all(axis is None for axis in layout.axes):
            continue
        shape = tuple(variable.shape)
        if len(layout.axes) != len(shape):
            raise ValueError(
                f"The layout {layout.axes} of {variable.path!r} has rank "
                f"{len(layout.axes)} but the variable has shape {shape}."
            )
        for i, (dim, axis) in enumerate(zip(shape, layout.axes)):
            if axis is not None:
                what = f"Dimension {i} of {variable.path!r} {shape}"
                _check_divisible(dim, sizes[axis], axis, what=what)
        sharded[variable.path] = layout.axes
    if not sharded:
        raise ValueError(
            f"The distribution shards no variable of {model.name!r}: no "
            "SparseMoE expert variable matched the layout map (check "
            "`moe_layer_name` against `[v.path for v in model.weights]`)."
        )
    return sharded
