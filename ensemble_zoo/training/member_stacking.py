"""A model of a member-axis class rebuilt with another number of members:
what stacking snapshots (`SnapshotEnsemble.stacked_ensemble`), drawing
Laplace-LoRA and BLoB posterior samples (`laplace_lora`, `blob_samples`)
and taking one member of a LoRA-Ensemble share."""

import numpy as np


def num_members_of(model):
    """The `num_members` that `model`'s config names (the task's or its
    backbone's, as every member-axis model of the zoo does), or a
    `ValueError`."""
    config = model.get_config()
    backbone = config.get("backbone", {}).get("config", {})
    for place in (config, backbone):
        if isinstance(place.get("num_members"), int):
            return place["num_members"]
    raise ValueError(
        f"{type(model).__name__}'s config names no `num_members`: it is not a member-axis "
        "model (a LoRA-Ensemble)."
    )


def with_members(model, num_members, values, name=None, changes=None, sources=None):
    """A model of `model`'s class and config with `num_members` members.

    Args:
        model: a built member-axis model (its config, or its backbone's,
            names `num_members`).
        num_members: int, the new model's members.
        values: `callable(source, member_axis) -> array`: the value of each
            weight of the new model, given `model`'s weight `source` and
            whether it holds the members on its first axis (its first
            axis is `model`'s number of members where the new one's is
            `num_members`); the value must have the new weight's shape.
        name: optional name of the new model. Defaults to `model`'s.
        changes: optional dict of other method arguments to set where the
            config names `num_members` (e.g. `{"blob": None}`).
        sources: optional list of `model`'s weights, one per weight of the
            new model in order; defaults to `model.weights`.

    Returns:
        The new model, every weight set from `values`.
    """
    old = num_members_of(model)
    config = model.get_config()
    backbone = config.get("backbone", {}).get("config", {})
    for place in (config, backbone):
        if isinstance(place.get("num_members"), int):
            place["num_members"] = num_members
            for key, value in (changes or {}).items():
                if key in place:
                    place[key] = value
    if name is not None:
        config["name"] = name
    new = type(model).from_config(config)
    sources = model.weights if sources is None else sources
    for variable, source in zip(new.weights, sources, strict=True):
        shape, each = tuple(variable.shape), tuple(source.shape)
        member_axis = shape != each
        if member_axis and (each[0] != old or shape != (num_members,) + each[1:]):
            raise ValueError(
                f"`{source.path}` has shape {each} with {old} members and {shape} with "
                f"{num_members}: not the members on its first axis."
            )
        value = np.asarray(values(source, member_axis))
        if value.shape != shape:
            raise ValueError(f"`{source.path}` needs shape {shape}; got {value.shape}.")
        variable.assign(value)
    return new
