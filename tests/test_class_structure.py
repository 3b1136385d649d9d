"""The task classes stay readable, as keras-hub's are: at most three zoo
classes in any task's MRO (the task, `EnsembleClassifier` or another task
base, `ZooTask`), each task's constructor written out; no class made by
`type()`, no context variable and no `locals()` forwarding in
`ensemble_zoo/models`.

Pure Python: runs under one backend only.
"""

import ast
import inspect
import pathlib

import keras_hub
import pytest
from conftest import BACKEND

import ensemble_zoo as ez

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="backend-independent")

MODELS = pathlib.Path(ez.__file__).parent / "models"


def zoo_tasks():
    return sorted(
        (
            obj
            for obj in vars(ez.models).values()
            if inspect.isclass(obj) and issubclass(obj, keras_hub.models.Task)
        ),
        key=lambda cls: cls.__name__,
    )


def test_every_task_has_at_most_three_zoo_classes_and_its_own_constructor():
    tasks = zoo_tasks()
    assert len(tasks) > 20
    deep = {}
    for cls in tasks:
        zoo = [k.__name__ for k in cls.__mro__ if k.__module__.startswith("ensemble_zoo")]
        if len(zoo) > 3:
            deep[cls.__name__] = zoo
    assert not deep, deep
    # Each concrete task writes its constructor (the base classes hold
    # behaviour only).
    missing = [
        cls.__name__
        for cls in tasks
        if cls not in (ez.models.EnsembleClassifier,) and "__init__" not in cls.__dict__
    ]
    assert not missing, missing


def test_no_type_made_classes_context_variables_or_locals_in_models():
    found = []
    for path in sorted(MODELS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "type" and len(node.args) == 3:
                    name = "type(name, bases, dict)"
                elif node.func.id == "locals":
                    name = "locals()"
            if isinstance(node, (ast.Name, ast.Attribute)):
                if getattr(node, "id", getattr(node, "attr", None)) == "ContextVar":
                    name = "ContextVar"
            if name:
                found.append(f"{path.relative_to(MODELS.parent)}:{node.lineno}: {name}")
    assert not found, found
