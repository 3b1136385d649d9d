"""The keyword arguments a model class's constructor takes, and the check
that a preset's model config only gives its class those."""

import inspect

from ensemble_zoo.presets.preset_error import PresetError

#: Keyword arguments every `keras.Model` takes.
MODEL_KEYWORDS = ("name", "trainable", "dtype", "compile")


def constructor_arguments(cls):
    """The names of the keyword arguments `cls`'s constructor takes: those
    of its constructor and, while a constructor passes `**kwargs` on, of
    the ones above it in its MRO (a user's subclass over a zoo task) up
    to Keras' and keras-hub's classes (but the first keras-hub task's own
    constructor where no zoo class comes before it: a plain keras-hub
    preset, or a user's subclass of a keras-hub task), plus `MODEL_KEYWORDS`,
    which a task's `**kwargs` passes on to `keras_hub.models.Task`."""
    accepted = set(MODEL_KEYWORDS)
    zoo = False
    for klass in cls.__mro__:
        library = klass.__module__.split(".")[0]
        zoo = zoo or library == "ensemble_zoo"
        # A zoo task passes `**kwargs` on to `keras_hub.models.Task`, whose
        # arguments it spells itself; a plain keras-hub task, or a user's
        # subclass of one, takes the keras-hub task's own.
        if library in ("keras", "builtins") or (library == "keras_hub" and zoo):
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        accepted |= {
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        }
        if library == "keras_hub" or not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break  # a keras-hub task's own, or one that passes nothing further up
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
