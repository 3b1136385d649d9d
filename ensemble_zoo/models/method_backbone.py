"""The one way the zoo applies an ensemble method to a keras-hub backbone.

LoRA-Ensemble, BatchEnsemble, Masksembles, MIMO and loss prediction keep
a keras-hub backbone (`ViTBackbone`, `BertBackbone`) and change some of
its sublayers: adapters or masks replace projections, or MIMO's patch
embedding reads `M` stacked images. keras-hub finds the task class of a
preset from the backbone class in its `config.json` (`Task.from_preset`
looks for the task whose `backbone_cls` it is), so each method names its
own backbone class, a subclass of the keras-hub one
(`LoRAEnsembleViTBackbone` is a `ViTBackbone`) whose constructor takes
the base class's arguments plus the method's (`method_keys`): it builds
the keras-hub backbone, then applies the method to itself. Its config is
its constructor arguments, as for every keras-hub backbone.

A classifier given a plain keras-hub backbone builds a *new* backbone of
the method's class from the source's config and weights
(`MethodBackbone.from_backbone`, through `method_backbone`); the user's
object is never changed, and its class is never swapped.
"""

import os
from types import MappingProxyType

import keras

from ensemble_zoo.models.quantization_modes import QuantizationModesMixin
from ensemble_zoo.utils.model_copies import copy_model


class MethodBackbone(QuantizationModesMixin):
    """Mixin for a keras-hub backbone class changed by an ensemble method.

    A subclass lists `(MethodBackbone, <keras-hub backbone class>)` as
    bases, sets `method_keys` (the method's constructor arguments) and
    implements `apply_method(self, **method_config)`, which changes the
    freshly built backbone (this object, during its own construction).
    `method_defaults` gives the method arguments that may be left out (a
    method argument added after presets were saved, whose configs lack
    it) their values.

    The constructor takes the keras-hub class's arguments, the method's
    (`method_keys`) and, keyword-only, `start_from`: `None`, or a built
    backbone of the keras-hub class whose weights the new one takes before
    the method is applied (`from_backbone`; not part of the config).
    """

    method_keys = ()
    method_defaults = MappingProxyType({})

    def __init__(self, *args, start_from=None, **kwargs):
        for key, value in self.method_defaults.items():
            kwargs.setdefault(key, value)
        missing = [key for key in self.method_keys if key not in kwargs]
        if missing:
            raise TypeError(
                f"{type(self).__name__} needs the argument(s) {missing} "
                f"besides those of {self.base_cls().__name__}."
            )
        method_config = {key: kwargs.pop(key) for key in self.method_keys}
        super().__init__(*args, **kwargs)
        if start_from is not None:
            # Before the method: it may start its layers from the base
            # weights (BatchEnsemble's shared kernels, MIMO's embedding).
            copy_weights_by_path(start_from, self)
        self.apply_method(**method_config)
        object.__setattr__(self, "_method_config", method_config)

    def apply_method(self, **method_config):
        """Changes the built backbone in place (nothing by default)."""

    @classmethod
    def base_cls(cls):
        """The keras-hub backbone class this class extends."""
        return next(
            base
            for base in cls.__mro__[1:]
            if issubclass(base, keras.Model) and not issubclass(base, MethodBackbone)
        )

    @classmethod
    def from_backbone(cls, backbone, **method_config):
        """A new backbone of this class with `backbone`'s architecture and
        weights, and the method applied.

        Args:
            backbone: a built instance of `base_cls()` (exactly that class).
                It is not changed.
            **method_config: the method's arguments (`method_keys`).

        Returns:
            A `cls` instance whose base variables hold `backbone`'s values.
        """
        if type(backbone) is not cls.base_cls():
            raise TypeError(
                f"{cls.__name__}.from_backbone takes a "
                f"{cls.base_cls().__name__}; got {type(backbone).__name__}."
            )
        return cls(**backbone.get_config(), **method_config, start_from=backbone)

    @property
    def method_config(self):
        """The method's arguments, as passed to the constructor."""
        return dict(self._method_config)

    def get_config(self):
        return {**super().get_config(), **self.method_config}

    def plain_config(self):
        """The serialized keras-hub backbone without the method: its class
        and config (the method's changes are not in it)."""
        base = self.base_cls()
        config = super().get_config()
        return {
            "module": base.__module__,
            "class_name": base.__name__,
            "config": config,
            "registered_name": keras.saving.get_registered_name(base),
        }


def copy_weights_by_path(source, target):
    """Assigns every variable of `source` to the variable of `target` with
    the same path (and shape); raises if one has no counterpart."""
    targets = dict(zip(_relative_paths(target.weights), target.weights, strict=True))
    for path, variable in zip(_relative_paths(source.weights), source.weights, strict=True):
        match = targets.get(path)
        if match is None or tuple(match.shape) != tuple(variable.shape):
            raise ValueError(
                f"Cannot start '{target.name}' from '{source.name}': variable "
                f"{variable.path} {tuple(variable.shape)} has no counterpart "
                "of that shape."
            )
        match.assign(keras.ops.convert_to_numpy(variable))


def _relative_paths(variables):
    """Variable paths without the name scope the model was built in (a
    deep ensemble's member is built in `members_0/`, ...): the longest
    whole-segment prefix all paths share."""
    paths = [variable.path for variable in variables]
    prefix = os.path.commonprefix(paths) if len(paths) > 1 else ""
    prefix = prefix[: prefix.rfind("/") + 1]
    return [path[len(prefix) :] for path in paths]


def method_arguments(backbone, classes, defaults, **given):
    """A classifier's method arguments, completed.

    An argument left `None` is the backbone's when `backbone` is one of
    `classes`' (a method backbone carries its method's arguments), else
    its default from `defaults`; a given one is kept (`method_backbone`
    then checks it against a method backbone's).

    Returns:
        dict with every key of `defaults`.
    """
    held = backbone.method_config if isinstance(backbone, tuple(classes)) else {}
    return {
        key: given[key] if given.get(key) is not None else held.get(key, default)
        for key, default in defaults.items()
    }


def method_backbone(backbone, classes, method_config, apply):
    """The method's backbone for a classifier's `backbone` argument.

    Args:
        backbone: a plain keras-hub backbone, or one of `classes`' (a
            classifier rebuilt from its config, or a second task on the
            same method backbone, which then shares its weights as
            keras-hub tasks do).
        classes: the method's `MethodBackbone` classes.
        method_config: dict, the method's arguments as the classifier
            received them; a method backbone must hold the same.
        apply: callable applying the method in place to a backbone that
            no class of `classes` extends (a copy, never the user's).

    Returns:
        A backbone with the method applied: `backbone` itself when it is
        one of `classes`'; a new `cls.from_backbone(backbone, ...)` when a
        class of `classes` extends its class; otherwise a copy of
        `backbone` (same config and weights) the method was applied to in
        place (its config does not describe the method: the classifier's
        config applies it again).
    """
    if isinstance(backbone, MethodBackbone):
        if not isinstance(backbone, tuple(classes)):
            raise ValueError(
                f"`backbone` is a {type(backbone).__name__}, which another "
                "ensemble method has already changed; pass a plain keras-hub "
                "backbone."
            )
        held = backbone.method_config
        if _normalized(held) != _normalized(method_config):
            raise ValueError(
                f"`backbone` ({type(backbone).__name__}) was built with "
                f"{held}, but the classifier got {method_config}; pass the "
                "same arguments or a plain keras-hub backbone."
            )
        return backbone
    for cls in classes:
        if type(backbone) is cls.base_cls():
            return cls.from_backbone(backbone, **method_config)
    copy = copy_model(backbone)
    apply(copy)
    return copy


def plain_backbone_copy(backbone, **config_overrides):
    """A fresh keras-hub backbone with `backbone`'s architecture minus the
    method (random weights), with `config_overrides` applied to its
    config: what a member's plain model is built on."""
    if isinstance(backbone, MethodBackbone):
        serialized = backbone.plain_config()
    else:
        serialized = keras.saving.serialize_keras_object(backbone)
    serialized["config"] = {**serialized["config"], **config_overrides}
    return keras.saving.deserialize_keras_object(serialized)


def _normalized(config):
    """JSON-like form: tuples and lists compare equal."""
    if isinstance(config, dict):
        return {k: _normalized(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [_normalized(v) for v in config]
    return config
