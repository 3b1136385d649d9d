"""MkDocs hooks: pages generated from the sources at build time.

- `guides/<name>.py` (keras-io format: a module docstring, then code with
  `\"\"\"` Markdown blocks between) becomes `guides/<name>.md`;
- every public subpackage of `ensemble_zoo` gets an API page,
  `api/<subpackage>.md`, with one mkdocstrings entry (`::: name`) per
  name its `__init__.py` imports: the public API is what the
  subpackages export.

Nothing here imports `ensemble_zoo` (or a backend): the API reference is
read from the sources by griffe, so the site builds in seconds.
"""

import ast
import os
import re

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The API pages, in navigation order, with one line each.
API = {
    "models": "Ensemble models, backbones and conversions from keras-hub.",
    "layers": "Fused member-axis layers, MoE routing and adapters.",
    "ops": "Combining members: predictive probabilities and the uncertainty decomposition.",
    "losses": "Ensemble and loss-prediction losses.",
    "metrics": "Calibration, OOD, selective-prediction and diversity metrics.",
    "calibration": "Temperature scaling.",
    "evaluation": "`evaluate`, `evaluate_preset` and the leaderboard.",
    "datasets": "The bundled data and the tfds loaders.",
    "presets": "Listing, loading and saving presets.",
    "pruning": "Hydra's head-importance scores and pruning.",
    "training": "Training procedures that yield ensembles: Snapshot Ensembles.",
    "export": "Export to every format, and the runtimes that check it.",
}


def public_names(subpackage):
    """The names `ensemble_zoo/<subpackage>/__init__.py` imports, in order."""
    path = os.path.join(ROOT, "ensemble_zoo", subpackage, "__init__.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = []
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("ensemble_zoo")
        ):
            for alias in node.names:
                name = alias.asname or alias.name
                if not name.startswith("_") and name not in names:
                    names.append(name)
    return names


def api_page(subpackage):
    lines = [f"# `ensemble_zoo.{subpackage}`", "", API[subpackage], ""]
    for name in public_names(subpackage):
        lines += [f"::: ensemble_zoo.{subpackage}.{name}", ""]
    return "\n".join(lines)


def guide_page(path):
    """A keras-io guide as Markdown: docstrings become text, code becomes
    fenced Python; the header's `Title:` and `Description:` open the page."""
    source = open(path, encoding="utf-8").read()
    header, source = source[3:].split('"""', 1)
    fields = dict(line.split(": ", 1) for line in header.strip().splitlines() if ": " in line)
    out = [f"# {fields.get('Title', os.path.basename(path))}", ""]
    if "Description" in fields:
        out += [f"*{fields['Description']}*", ""]
    code, in_text = [], False
    for line in source.splitlines():
        if line.strip() == '"""':
            if not in_text:
                if any(c.strip() for c in code):
                    out += ["```python", *strip_blank(code), "```", ""]
                code = []
            in_text = not in_text
            continue
        if (
            not in_text
            and line.startswith('"""')
            and line.rstrip().endswith('"""')
            and len(line.strip()) > 6
        ):
            if any(c.strip() for c in code):
                out += ["```python", *strip_blank(code), "```", ""]
            code = []
            out += [line.strip()[3:-3], ""]
            continue
        if not in_text and line.startswith('"""'):
            if any(c.strip() for c in code):
                out += ["```python", *strip_blank(code), "```", ""]
            code = []
            in_text = True
            out.append(line[3:])
            continue
        (out if in_text else code).append(line)
    if any(c.strip() for c in code):
        out += ["```python", *strip_blank(code), "```", ""]
    name = os.path.basename(path)
    out += ["", f"*Run it: `KERAS_BACKEND=jax python guides/{name}` (any backend).*", ""]
    return "\n".join(out)


def strip_blank(lines):
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def guide_paths():
    directory = os.path.join(ROOT, "guides")
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".py"))


def readme_section(title):
    """A `## title` section of the README, as a page (`# title`)."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    # The README links to `docs/<page>`; on the site the page is `<page>`.
    section = section.replace("](docs/", "](")
    return f"# {title}\n{section}"


# Pages that are README sections (written once, in the README).
README_PAGES = {
    "installation.md": "Set-up",
    "quickstart.md": "Quickstart",
    "leaderboard.md": "Evaluation and the leaderboard",
}


def on_files(files, config):
    for page, title in README_PAGES.items():
        files.append(File.generated(config, page, content=readme_section(title)))
    for subpackage in API:
        files.append(File.generated(config, f"api/{subpackage}.md", content=api_page(subpackage)))
    for path in guide_paths():
        name = os.path.basename(path)[:-3]
        files.append(File.generated(config, f"guides/{name}.md", content=guide_page(path)))
    return files


#: mkdocstrings writes "name (type) – description" for each entry of a
#: Returns / Raises section; an entry with neither name nor type (our
#: Google-style "Returns: An `EvaluationReport` ...") kept a lone dash.
_LONE_DASH = re.compile(r"(<li>\s*)–(\s*<div class=\"doc-md-description\">)")


def on_page_content(html, page, config, files):
    """Drops the dash of API entries that have no name or type."""
    return _LONE_DASH.sub(r"\1\2", html)
