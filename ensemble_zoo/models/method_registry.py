"""What each method registers beside itself, and the tables built from it.

Each method package (`ensemble_zoo/models/<method>/`) ends its
`__init__.py` with one `register_method(Method(...))`: its task classes,
its presets (the names in its own `<method>_presets.py`) and the cases that
the shared tests and benchmarks run on it. Those tables are read from
`registered_methods()`, so adding a method touches its own folder, its
tests, guide and docs page, and no list elsewhere:

| field of `Method` | read by |
|---|---|
| `tasks` | `tests/models/test_keras_hub_tasks.py` (each is a keras-hub task) |
| `presets` | `tests/models/test_method_registry.py` (every shipped preset has one owner) |
| `harness` | keras-hub's harness, `tests/models/test_keras_hub_harness.py` |
| `keras_hub_kwargs` | `tests/models/test_method_backbone.py` (applied to a keras-hub ViT) |
| `export` | `tests/test_export.py` (one preset per export format) |
| `benchmark` | `benchmarks/run_all.py`'s "baselines" section |
| the package | `tests/test_import_graph.py` (no private name crosses methods) |

Example:

```python
import ensemble_zoo as ez
from ensemble_zoo.models.method_registry import registered_methods

method = registered_methods()["masksembles"]
method.tasks  # (MasksemblesImageClassifier,)
method.presets  # ('masksembles_vit_tiny_digits', 'masksembles_vit_b16_4')
```
"""

import dataclasses
from typing import Callable

import keras_hub

from ensemble_zoo.presets.registry import method_presets

#: How a harness backbone takes and returns its members (see `HarnessCase`).
LAYOUTS = ("member_axis", "member_major", "stacked_channels")


@dataclasses.dataclass(frozen=True)
class HarnessCase:
    """keras-hub's conformance harness on a tiny model of a method.

    The task's backbone (`task_cls.backbone_cls`) is built, for an image
    task, as `backbone_cls(image_shape=(8, 8, 1), patch_size=4,
    num_layers=2, hidden_dim=8, mlp_dim=16, **backbone_kwargs)` (the
    harness's tiny ViT), for a text task on the harness's tiny BERT
    arguments (12 words, 1 layer, hidden size 8, 6 tokens); the task is
    `task_cls(backbone=..., num_classes=...)`.

    Args:
        task_cls: the task class.
        backbone_kwargs: dict, its backbone's arguments beyond the tiny
            ViT's or BERT's.
        num_members: int, the members the tiny model has. Defaults to
            `backbone_kwargs`' `num_members` (or `ensemble_size`).
        layout: how the backbone takes and returns its members:
            `"member_axis"` (inputs in, `(batch, members, tokens, dim)`
            out), `"member_major"` (a keras-hub backbone applied to
            `members * batch` rows) or `"stacked_channels"` (MIMO: the
            members' images stacked on channels).
        modality: `"image"` or `"text"`. Defaults to `"text"` for a
            `keras_hub.models.TextClassifier`, else `"image"`.
        preset: optional shipped preset of an image task, loaded by the
            preset test (its metadata gives its number of members).

    Example:

    ```python
    import ensemble_zoo as ez
    from ensemble_zoo.models.method_registry import HarnessCase

    case = HarnessCase(
        ez.models.LoRAEnsembleTextClassifier, dict(num_members=2), layout="member_major"
    )
    case.num_members, case.layout, case.modality  # (2, 'member_major', 'text')
    ```
    """

    task_cls: type
    backbone_kwargs: dict
    num_members: int = None
    layout: str = None
    modality: str = None
    preset: str = None

    def __post_init__(self):
        kwargs = self.backbone_kwargs
        if self.num_members is None:
            members = kwargs.get("num_members", kwargs.get("ensemble_size"))
            object.__setattr__(self, "num_members", members)
        if self.modality is None:
            text = issubclass(self.task_cls, keras_hub.models.TextClassifier)
            object.__setattr__(self, "modality", "text" if text else "image")
        if not isinstance(self.num_members, int):
            raise ValueError(
                "A harness case's `num_members` must be an int (or in its "
                f"`backbone_kwargs`); got {self.num_members!r}."
            )

    @property
    def backbone_cls(self):
        """The task's backbone class."""
        return self.task_cls.backbone_cls


@dataclasses.dataclass(frozen=True)
class BenchmarkCase:
    """A variant of `benchmarks/run_all.py`'s "baselines" section: the
    method applied to the section's single keras-hub ViT classifier.

    Args:
        label: the row's name; `str.format` fields name entries of the
            benchmark size (e.g. `"{packed_alpha}"`).
        build: `(single, size) -> classifier`, with `size` the benchmark
            size's dict (`size["classes"]` classes).
        activation_copies: how many copies of the single model's
            activations a training step keeps, a number or
            `size -> number`.
    """

    label: str
    build: Callable
    activation_copies: object = 1.0


@dataclasses.dataclass(frozen=True)
class Method:
    """One method's registration (see the module docstring).

    Args:
        name: str, the method package's name (`ensemble_zoo.models.<name>`).
        tasks: tuple of the method's task classes.
        presets: its shipped preset names. Defaults to those of its
            `<method>_presets.py`.
        harness: tuple of `HarnessCase`s (image and text models).
        keras_hub_kwargs: optional dict of tiny arguments with which
            `tasks[0](keras_hub_vit_backbone, num_classes=3, **kwargs)`
            applies the method to a keras-hub ViT.
        export: optional `(format, preset)`: the export format whose test
            exports this preset.
        benchmark: optional `BenchmarkCase`.
    """

    name: str
    tasks: tuple
    presets: tuple = None
    harness: tuple = ()
    keras_hub_kwargs: dict = None
    export: tuple = None
    benchmark: BenchmarkCase = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"`name` must be a method package's name; got {self.name!r}.")
        if not self.tasks or not all(isinstance(t, type) for t in self.tasks):
            raise TypeError(f"`tasks` must be a non-empty tuple of classes; got {self.tasks!r}.")
        if self.benchmark is not None and not isinstance(self.benchmark, BenchmarkCase):
            raise TypeError(f"`benchmark` must be a BenchmarkCase; got {self.benchmark!r}.")
        for case in self.harness:
            if not isinstance(case, HarnessCase):
                raise TypeError(f"`harness` must hold HarnessCases; got {case!r}.")
            if case.layout not in LAYOUTS or case.modality not in ("image", "text"):
                raise ValueError(
                    f"A harness case's `layout` must be one of {LAYOUTS} and its `modality` "
                    f"'image' or 'text'; got {case.layout!r}, {case.modality!r}."
                )
        if self.export is not None and (
            not isinstance(self.export, tuple) or len(self.export) != 2
        ):
            raise ValueError(f"`export` must be a (format, preset) pair; got {self.export!r}.")
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if self.presets is None:
            object.__setattr__(self, "presets", method_presets(self.name))
        object.__setattr__(self, "presets", tuple(self.presets))  # a dict's keys
        object.__setattr__(self, "harness", tuple(self.harness))


_METHODS = {}


def register_method(method):
    """Registers `method` (a `Method`); a second method of the same name
    with other tasks is a `ValueError` (a reloaded package registers again).
    Called once by each method package's `__init__`."""
    if not isinstance(method, Method):
        raise TypeError(f"`method` must be a Method; got {type(method).__name__}.")

    def names(m):
        return [(t.__module__, t.__qualname__) for t in m.tasks]

    if method.name in _METHODS and names(_METHODS[method.name]) != names(method):
        raise ValueError(f"A method named {method.name!r} is already registered.")
    _METHODS[method.name] = method
    return method


def registered_methods():
    """`{name: Method}` of every registered method, sorted by name."""
    return dict(sorted(_METHODS.items()))
