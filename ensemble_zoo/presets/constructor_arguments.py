"""The keyword arguments a model class's constructor takes, and the check
that a preset's model config only gives its class those."""

import inspect

import keras

from ensemble_zoo.presets.preset_error import PresetError

#: Keyword arguments every `keras.Model` takes.
MODEL_KEYWORDS = ("name", "trainable", "dtype", "compile")


def constructor_arguments(cls):
    """The names of the keyword arguments `cls`'s constructor takes: those
    of the constructors up the class's MRO while they pass `**kwargs` on
    (a superset where a class calls a grandparent's constructor), e.g. a
    member-tiled classifier's `preprocessor`, which its method's
    constructor passes on to `MemberTiledClassifier`'s, plus
    `MODEL_KEYWORDS`."""
    skipped = {keras.Model, keras.layers.Layer, object}
    skipped |= {k for k in cls.__mro__ if k.__name__ in ("Functional", "Function")}
    accepted = set(MODEL_KEYWORDS)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass in skipped:
            continue
        parameters = inspect.signature(init).parameters.values()
        accepted |= {
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        }
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break  # this constructor passes nothing further up
    return accepted


def check_constructor_arguments(cls, arguments, path):
    """A `PresetError` for a key of `arguments` (`task.json`'s `"config"`)
    that `cls`'s constructor does not take (`constructor_arguments`):
    Keras' functional models drop unknown keyword arguments without a word,
    so a misspelt or stale argument would load as the default."""
    if not isinstance(arguments, dict):
        raise PresetError(
            f"Damaged preset: {path} holds a {type(arguments).__name__} as the "
            'model\'s "config"; expected a dict of constructor arguments.'
        )
    accepted = constructor_arguments(cls)
    unknown = sorted(set(arguments) - accepted)
    if unknown:
        raise PresetError(
            f"Damaged preset: {path} gives {cls.__name__} the argument(s) "
            f"{unknown}, which its constructor does not take (it takes "
            f"{sorted(accepted - set(MODEL_KEYWORDS))}); remove or correct them."
        )
