"""keras-hub backbones changed in place by an ensemble method.

LoRA-Ensemble, BatchEnsemble, Masksembles and MIMO keep a keras-hub
backbone (`ViTBackbone`, `BertBackbone`) and change it in place: adapters
or masks replace some sublayers, or MIMO's patch embedding reads `M`
stacked images. keras-hub finds the task class of a preset from the
backbone class in its `config.json` (`Task.from_preset` looks for the
task whose `backbone_cls` it is), so a plain `ViTBackbone` there would
load as a `ViTImageClassifier`. Each method therefore names its own
backbone class, a subclass of the keras-hub one (`LoRAEnsembleViTBackbone`
is a `ViTBackbone`), whose constructor takes the base class's arguments
plus the method's (`method_keys`) and applies the method.

The classifier applies the method to the plain backbone it is given and
then `adopt`s it: the same object gets the method's class, so weights,
variable paths and attributes stay those of the keras-hub backbone. A
classifier built from its config gets the method's backbone class back
and checks that its arguments match.
"""

import keras


class MethodBackbone:
    """Mixin for a keras-hub backbone class changed by an ensemble method.

    A subclass lists `(MethodBackbone, <keras-hub backbone class>)` as
    bases, sets `method_keys` (the method's constructor arguments) and
    implements `apply_method(self, **method_config)`, which changes the
    freshly built backbone in place exactly as the classifier does.
    """

    method_keys = ()

    def __init__(self, *args, **kwargs):
        missing = [key for key in self.method_keys if key not in kwargs]
        if missing:
            raise TypeError(
                f"{type(self).__name__} needs the argument(s) {missing} "
                f"besides those of {self.base_cls().__name__}."
            )
        method_config = {key: kwargs.pop(key) for key in self.method_keys}
        super().__init__(*args, **kwargs)
        self.apply_method(**method_config)
        object.__setattr__(self, "_method_config", method_config)

    def apply_method(self, **method_config):
        """Changes the built backbone in place (nothing by default)."""

    @classmethod
    def base_cls(cls):
        """The keras-hub backbone class this class extends."""
        return next(
            base for base in cls.__mro__[1:]
            if issubclass(base, keras.Model) and not issubclass(base, MethodBackbone)
        )

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

    @classmethod
    def adopt(cls, backbone, method_config):
        """Gives `backbone` (a `base_cls()` instance the method has been
        applied to in place) this class; returns the same object."""
        if type(backbone) is not cls.base_cls():
            raise TypeError(
                f"{cls.__name__}.adopt takes a {cls.base_cls().__name__}; "
                f"got {type(backbone).__name__}."
            )
        backbone.__class__ = cls
        object.__setattr__(backbone, "_method_config", dict(method_config))
        return backbone


def method_backbone(backbone, classes, method_config, apply, already):
    """The method's backbone for a classifier's `backbone` argument.

    Args:
        backbone: a plain keras-hub backbone, or one of `classes`' (a
            classifier rebuilt from its config).
        classes: the method's `MethodBackbone` classes.
        method_config: dict, the method's arguments as the classifier
            received them; an adopted backbone must hold the same.
        apply: callable applying the method to a plain backbone in place.
        already: str, the error's words for a backbone another classifier
            holds (e.g. "already has LoRA-Ensemble adapters").

    Returns:
        `backbone`, with the method applied and, where one of `classes`
        extends its class, adopted as that class. Backbones of other
        classes keep theirs (their presets load through the zoo's
        `from_preset`, which reads the task class from `task.json`).
    """
    if getattr(backbone, "_method_claimed", False):
        raise ValueError(
            f"`backbone` '{backbone.name}' {already}; pass a plain keras-hub "
            "backbone (the classifier applies the method)."
        )
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
    else:
        apply(backbone)
        for cls in classes:
            if type(backbone) is cls.base_cls():
                cls.adopt(backbone, method_config)
    # One classifier per backbone: a second one would share its weights.
    object.__setattr__(backbone, "_method_claimed", True)
    return backbone


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
