"""The package's import graph, read with `ast`.

`presets/` and `models/` once imported each other (34 modules in one import
cycle), `utils/backend` and `utils/workarounds` did too, and method
packages imported each other's private helpers (`resolve_head` from
LoRA-Ensemble's task module in three other methods, `_member_io_shapes`
from the deep ensemble in two). Every import counts here, at module level
or inside a function: a lazy import hides a cycle, it does not remove it.
Pure Python: runs under one backend only.
"""

import ast
import pathlib

import pytest
from conftest import BACKEND

from ensemble_zoo.models.method_registry import registered_methods

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="backend-independent")

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "ensemble_zoo"

# Packages of the methods (those registered in
# `ensemble_zoo.models.method_registry`): none imports another's private
# (`_`) names.
METHOD_PACKAGES = tuple(registered_methods())


def _modules():
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(name, path, modules):
    """`(imported module, imported names)` for every import in the file."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    yield submodule, ()
                else:
                    yield base, (alias.name,)


def _graph():
    modules = _modules()
    graph, private = {}, []
    for name, path in modules.items():
        graph[name] = set()
        for target, names in _imports(name, path, modules):
            if target in modules and target != name:
                graph[name].add(target)
            for imported in names:
                if imported.startswith("_") and not imported.startswith("__"):
                    private.append((name, target, imported))
    return graph, private


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _method_package(module):
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "models" and parts[2] in METHOD_PACKAGES:
        return parts[2]
    return None


def test_no_import_cycle():
    graph, _ = _graph()
    assert len(graph) == len(list(PACKAGE.rglob("*.py")))  # every module
    assert _cycles(graph) == []


def test_presets_do_not_import_models():
    graph, _ = _graph()
    presets = [m for m in graph if m.startswith("ensemble_zoo.presets")]
    assert presets
    for module in presets:
        assert not any(t.startswith("ensemble_zoo.models") for t in graph[module]), module


def test_no_private_name_crosses_method_packages():
    _, private = _graph()
    crossing = [
        (importer, target, name)
        for importer, target, name in private
        if _method_package(target) and _method_package(importer) != _method_package(target)
    ]
    assert crossing == []


def test_the_walk_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_causal_lm_packages_old_paths_are_aliases():
    """`ensemble_zoo.models.causal_lm` moved under `lora_ensemble/` (and
    its loss predictor to `loss_prediction/`); the old package and the
    modules earlier presets' configs name give the same objects."""
    import importlib

    import ensemble_zoo as ez

    old = importlib.import_module("ensemble_zoo.models.causal_lm")
    assert old.LoRAEnsembleCausalLM is ez.models.LoRAEnsembleCausalLM
    assert old.TokenLossPredictor is ez.models.TokenLossPredictor
    for module, new in [
        ("lora_ensemble_causal_lm", "lora_ensemble.causal_lm"),
        ("token_loss_predictor", "loss_prediction"),
    ]:
        assert importlib.import_module(f"ensemble_zoo.models.causal_lm.{module}") is (
            importlib.import_module(f"ensemble_zoo.models.{new}.{module}")
        )
