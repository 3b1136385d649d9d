"""Every `Example:` code block in the library's docstrings runs."""

import ast
import os
import re

import pytest
from conftest import BACKEND
from conftest import REPO_ROOT
from conftest import copy_test_fixtures
from conftest import run_python
from zoo_testing import this_run

BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def docstring_examples():
    examples = []
    root = os.path.join(REPO_ROOT, "ensemble_zoo")
    for directory, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            nodes = [tree] + [
                n
                for n in ast.walk(tree)
                if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            for node in nodes:
                doc = ast.get_docstring(node) or ""
                for i, code in enumerate(BLOCK.findall(doc)):
                    label = os.path.relpath(path, REPO_ROOT)
                    label += f"::{getattr(node, 'name', 'module')}[{i}]"
                    examples.append(pytest.param(code, id=label))
    return examples


EXAMPLES = docstring_examples()


def test_examples_were_found():
    assert len(EXAMPLES) > 20


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND != "torch",
    reason="test budget: the examples are backend-agnostic and run under "
    "PyTorch (65 s; TensorFlow takes as long, eager JAX twice as long)",
)
def test_docstring_examples_run(tmp_path):
    """Half the examples a run, the halves in turn (test budget: about 70 s
    for all), in one fresh interpreter (one import of the backends), each
    in its own namespace; every failure is reported."""
    copy_test_fixtures(tmp_path)
    examples = {p.id: p.values[0] for p in EXAMPLES}
    today = this_run(examples, (len(examples) + 1) // 2)
    script = tmp_path / "examples.py"
    script.write_text(
        "import traceback\n"
        f"examples = {[(label, examples[label]) for label in today]!r}\n"
        "failures = []\n"
        "for label, code in examples:\n"
        "    try:\n"
        "        exec(compile(code, label, 'exec'), {'__name__': '__example__'})\n"
        "    except Exception:\n"
        "        failures.append(label + '\\n' + traceback.format_exc())\n"
        "print('FAILURES', len(failures))\n"
        "print('\\n'.join(failures))\n"
    )
    out = run_python(script=str(script), cwd=tmp_path, timeout=1200)
    assert "FAILURES 0" in out, out[-5000:]
