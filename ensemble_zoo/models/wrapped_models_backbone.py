"""keras-hub backbones made of whole Keras models: the one way to wrap models.

Deep ensembles, MC dropout, subnetwork and tile ensembles are built from
whole Keras models (typically keras-hub classifiers), not from a backbone
config. Their backbone is a functional keras-hub `Backbone` whose graph
calls those models; its config holds them serialized (their architecture,
so a preset's `config.json` and `model.weights.h5` describe them) plus the
method's own arguments, and keras-hub finds the ensemble's task class from
the backbone's class. `WrappedModelsBackbone` is their base: it owns the
wrapped models (copied under the `dtype` asked for), their serialization
and their input shape.
"""

import copy

import keras
import keras_hub

from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.quantization_modes import QuantizationModesMixin
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.naming import path_scope

_REPLACED_POLICIES = ("DTypePolicy", "FloatDTypePolicy", "DTypePolicyMap")


def policy_config(config, dtype):
    """A serialized Keras object with every layer's dtype policy replaced.

    Layer configs hold their policy as a serialized dtype policy; float
    policies and policy maps become `dtype`. Quantized layers keep theirs
    (their variables are the quantized ones), and input layers their
    tensor dtype (a plain string). With `dtype` a `DTypePolicyMap`, every
    layer looks its policy up by its path, as Keras does.

    Args:
        config: the output of `keras.saving.serialize_keras_object`.
        dtype: a dtype policy or its name (e.g. `"mixed_bfloat16"`).
    """
    serialized = keras.dtype_policies.serialize(keras.dtype_policies.get(dtype))

    def walk(value):
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        return {
            key: serialized
            if key == "dtype"
            and isinstance(item, dict)
            and item.get("class_name") in _REPLACED_POLICIES
            else walk(item)
            for key, item in value.items()
        }

    return walk(config)


def _is_policy_map(dtype):
    return isinstance(dtype, keras.dtype_policies.DTypePolicyMap)


def serialize_wrapped_model(model):
    """`model`'s serialized config without its compile and build state,
    which belong to the ensemble that trains it."""
    config = keras.saving.serialize_keras_object(model)
    config.pop("compile_config", None)
    config.pop("build_config", None)
    return config


def copy_wrapped_model(model, dtype=None, scope=""):
    """A copy of `model` (a Keras model or layer): same class, config and
    weights, built under the name scope `scope` (so that the layer paths
    of several copies differ). A keras-hub task's copy has no
    preprocessor (the ensemble holds it).

    With `dtype` a dtype policy, every layer of the copy uses it. With a
    `keras.dtype_policies.DTypePolicyMap` (keras-hub's way of asking for a
    quantized model, keyed by layer path), the float copy's layers whose
    path maps to a quantized policy are quantized in that mode.
    """
    config = serialize_wrapped_model(model)
    if "preprocessor" in config.get("config", {}):
        config["config"]["preprocessor"] = None
    if dtype is not None and not _is_policy_map(dtype):
        config = policy_config(config, dtype)
    with path_scope(scope):
        # Not safe mode: the config comes from a model in memory (a Lambda
        # layer's function is the user's own), not from a file.
        clone = keras.saving.deserialize_keras_object(config, safe_mode=False)
        if not clone.built and model.get_build_config() is not None:
            clone.build_from_config(model.get_build_config())
    sources, targets = model.weights, clone.weights
    if [tuple(v.shape) for v in sources] != [tuple(v.shape) for v in targets]:
        raise ValueError(
            f"Cannot copy '{model.name}': its copy from config has other "
            "variables (a model changed after it was built cannot be copied)."
        )
    for source, target in zip(sources, targets, strict=True):
        target.assign(keras.ops.convert_to_numpy(source))
    if _is_policy_map(dtype):
        for layer in clone._flatten_layers(include_self=True):
            mode = dtype[layer.path].quantization_mode if layer.path else None
            if mode is not None and layer.quantization_mode is None:
                layer.quantize(mode)
    return clone


def _uses_policy(model, dtype):
    name = keras.dtype_policies.get(dtype).name
    return all(
        layer.dtype_policy.name == name
        for layer in model._flatten_layers(include_self=True)
        if not isinstance(layer, keras.layers.InputLayer)
    )


def own_wrapped_model(model, dtype=None, copy=False, scope="", adopt=False):
    """The model a wrapping backbone holds for `model`.

    `model` itself when `copy` is False and `dtype` is None or already
    every layer's policy (as a keras-hub task holds the backbone it is
    given); else a copy built under the name scope `scope`
    (`copy_wrapped_model`). With `adopt` (the constructor's
    `adopt_models`, which `WrappedModelsBackbone.from_config` sets for the
    models it has just built) `model` itself, always.
    """
    if adopt:
        return model
    if copy or _is_policy_map(dtype) or (dtype is not None and not _uses_policy(model, dtype)):
        return copy_wrapped_model(model, dtype, scope)
    return model


def member_io_shapes(member, index=None):
    """`(input_spec, num_classes)` of a wrapped classifier (`index` names
    it in errors: `members[index]`, or `model` for `None`).

    `input_spec` describes one example's inputs: `(shape, dtype)` for a
    model with one input tensor (an image classifier), or a dict of them
    for a model taking a dict (keras-hub's text classifiers take
    `token_ids`, `padding_mask` and, by family, `segment_ids`). Two models
    that take the same inputs have equal specs; `wrapped_inputs` makes the
    `keras.Input`s of one.
    """
    owner = "`model`" if index is None else f"`members[{index}]`"
    structure = getattr(member, "input", None) if getattr(member, "inputs", None) else None
    if isinstance(structure, (list, tuple)) and len(structure) == 1:
        structure = structure[0]
    if isinstance(structure, dict) and structure:
        spec = {name: _tensor_spec(tensor) for name, tensor in structure.items()}
    elif isinstance(structure, keras.KerasTensor):
        spec = _tensor_spec(structure)
    else:
        raise ValueError(
            f"{owner} must be a built Keras model with a single "
            "input or a dict of inputs (e.g. a keras_hub ViTImageClassifier, "
            f"a BertTextClassifier or a functional model); got {type(member).__name__}."
        )
    output = member(wrapped_inputs(spec))
    if isinstance(output, (dict, list, tuple)) or len(output.shape) != 2:
        raise ValueError(
            f"{owner} must map (batch, ...) inputs to logits of "
            f"shape (batch, classes); its output is {output!r}."
        )
    return spec, int(output.shape[-1])


def _tensor_spec(tensor):
    return tuple(tensor.shape[1:]), keras.backend.standardize_dtype(tensor.dtype)


def wrapped_inputs(spec):
    """The `keras.Input`s of an input spec (`member_io_shapes`): one named
    `"inputs"`, or a dict of inputs named by their keys."""
    if isinstance(spec, dict):
        return {
            name: keras.Input(shape, dtype=dtype, name=name)
            for name, (shape, dtype) in spec.items()
        }
    shape, dtype = spec
    return keras.Input(shape, dtype=dtype, name="inputs")


def wrapped_scope(key, index=None):
    """The name scope a wrapping backbone builds item `index` of its list
    of models `key` in (`"members_0"`, ...), so that the layer paths of
    members built from one config differ (keras-hub's quantization maps
    and torch's parameter names are keyed by path); none for a single
    model."""
    return "" if index is None else f"{key}_{index}"


def wrapping_backbone(backbone_cls, backbone, dtype=None, method_config=None, **wrapped):
    """The backbone of a model-wrapping task.

    Either the wrapped models (`wrapped`, the task's constructor arguments
    of those names) or `backbone` (a `backbone_cls`, how the task is
    rebuilt from its config) must be given, not both. From the models, a
    new `backbone_cls` is built with `method_config` and `dtype`; a given
    `backbone` must have been built with `method_config`'s non-`None`
    arguments (`check_method_arguments`).
    """
    names = " and ".join(f"`{key}`" for key in wrapped)
    given = [key for key, value in wrapped.items() if value is not None]
    if backbone is None:
        if len(given) != len(wrapped):
            raise ValueError(
                f"Pass {names}, or `backbone` (a {backbone_cls.__name__}); "
                f"got {'only ' + given[0] if given else 'neither'}."
            )
        return backbone_cls(**wrapped, **(method_config or {}), dtype=dtype)
    if given:
        raise ValueError(f"Pass {names} or `backbone` (a {backbone_cls.__name__}), not both.")
    if not isinstance(backbone, backbone_cls):
        raise TypeError(
            f"`backbone` must be a {backbone_cls.__name__}; got {type(backbone).__name__}."
        )
    if method_config:
        check_method_arguments(backbone, method_config)
    return backbone


def build_member_rows_task(task, backbone, preprocessor, num_members, **kwargs):
    """Builds `task`'s functional graph (keras-hub's `Task.__init__`): its
    wrapping `backbone` runs once on the member-major tiled batch (member
    `m`'s rows take its own dropout samples or masks) and returns member
    logits `(batch, members, classes)`. Sets `backbone`, `preprocessor`,
    `num_members`, `num_classes` and the backbone's `method_config`
    attributes (its method's arguments)."""
    # === Layers ===
    task.backbone = backbone
    task.preprocessor = preprocessor

    # === Functional Model ===
    inputs = backbone.input
    tiled = keras.tree.map_structure(lambda x: tile_members(x, num_members), inputs)
    logits = backbone(tiled)
    outputs = member_logits(untile_members(logits, num_members))
    keras_hub.models.Task.__init__(task, inputs=inputs, outputs=outputs, **kwargs)

    # === Config ===
    task.num_members = num_members
    task.num_classes = backbone.num_classes
    for name, value in backbone.method_config.items():
        setattr(task, name, value)


def backbone_attribute(name, doc):
    """A task property returning its backbone's attribute `name` (a
    wrapped model, or what the backbone built from it), documented `doc`."""
    return property(lambda task: getattr(task.backbone, name), doc=doc)


def check_method_arguments(backbone, method_config):
    """Refuses method arguments that differ from those `backbone` (a
    wrapping backbone with a `method_config`) was built with; an argument
    left `None` takes the backbone's."""
    held = backbone.method_config
    differing = {k: v for k, v in method_config.items() if v is not None and held.get(k) != v}
    if differing:
        raise ValueError(
            f"`backbone` ({type(backbone).__name__}) was built with {held}, "
            f"but the classifier got {differing}; leave them `None` to use "
            "the backbone's."
        )


class WrappedModelsBackbone(QuantizationModesMixin, keras_hub.models.Backbone):
    """Base of the functional backbones that wrap whole Keras models.

    A subclass lists its model arguments in `wrapped` (each a Keras model
    or layer, or a list of them), builds its graph in `__init__` and calls
    `keras_hub.models.Backbone.__init__(self, inputs=..., outputs=...,
    dtype=dtype, **kwargs)`; it lists its method's arguments, attributes of
    the same names, in `method_keys` (`method_config`, added to the
    config). `from_config` deserializes the wrapped models under the
    config's `dtype` (so keras-hub's loader `dtype=` reaches every layer)
    and hands them to the constructor without another copy.
    """

    wrapped = ()
    method_keys = ()

    @property
    def method_config(self):
        """The method's arguments this backbone was built with."""
        return {key: getattr(self, key) for key in self.method_keys}

    def get_config(self):
        config = super().get_config()
        config.update(self.method_config)
        for key in self.wrapped:
            value = getattr(self, key)
            config[key] = (
                [serialize_wrapped_model(m) for m in value]
                if isinstance(value, list)
                else serialize_wrapped_model(value)
            )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        dtype = config.get("dtype")
        if isinstance(dtype, dict):
            dtype = keras.dtype_policies.deserialize(dtype)
        for key in cls.wrapped:
            value = config[key]
            items = value if isinstance(value, list) else [value]
            if dtype is not None:
                items = [policy_config(item, dtype) for item in items]
            models = []
            for index, item in enumerate(items):
                with path_scope(wrapped_scope(key, index if isinstance(value, list) else None)):
                    # A copy: keras-hub's `from_config`s replace nested
                    # configs by objects in place.
                    models.append(keras.saving.deserialize_keras_object(copy.deepcopy(item)))
            config[key] = models if isinstance(value, list) else models[0]
        return cls(**config, adopt_models=True)
