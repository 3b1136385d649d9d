"""The documentation site builds in strict mode and documents every public
name; the README stays a first-visit page.

Building reads the sources with griffe (no backend is imported), so it
runs under one backend.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import BACKEND
from conftest import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "docs"))
import hooks  # noqa: E402  (docs/hooks.py: the generated pages)

only_once = pytest.mark.skipif(
    BACKEND != "jax", reason="backend-independent: the docs build runs once"
)


def build(source_root, site_dir):
    """`mkdocs build --strict` of the tree at `source_root`; returns the
    completed process."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site_dir)],
        cwd=source_root,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    result = build(REPO_ROOT, site_dir)
    assert result.returncode == 0, result.stderr[-5000:]
    return site_dir


@only_once
def test_every_public_name_has_a_reference_entry(site):
    for subpackage in hooks.API:
        names = hooks.public_names(subpackage)
        assert names, subpackage
        page = (site / "api" / subpackage / "index.html").read_text()
        for name in names:
            assert f'id="ensemble_zoo.{subpackage}.{name}"' in page, (subpackage, name)
        # No private base class on a "Bases:" line, no lone dash before an
        # entry without name or type (docs/griffe_public_bases.py, hooks).
        bases = " ".join(re.findall(r"Bases:(.*?)</p>", page, re.S))
        assert not re.search(r">_[A-Z]", bases), (subpackage, bases[:300])
        assert not re.search(r"<li>\s*–\s*<div", page), subpackage
    # The architecture page's contract names.
    architecture = os.path.join(REPO_ROOT, "docs", "architecture.md")
    names = set(re.findall(r"`(ensemble_zoo(?:\.\w+)+)", open(architecture).read()))
    assert len(names) > 10, names
    for name in names:
        parts = name.split(".")
        if len(parts) == 2:
            assert (site / "api" / parts[1] / "index.html").exists(), name
        else:
            page = (site / "api" / parts[1] / "index.html").read_text()
            assert f'id="{name}"' in page, name


@only_once
def test_every_guide_and_readme_page_is_rendered(site):
    for path in hooks.guide_paths():
        name = os.path.basename(path)[:-3]
        page = (site / "guides" / name / "index.html").read_text()
        assert '<code class="language-python">' in page, name
    quickstart = (site / "quickstart" / "index.html").read_text()
    assert "predict_uncertainty" in quickstart


@only_once
def test_a_broken_link_fails_the_strict_build(tmp_path):
    """Strict mode is on: one broken link in a copy of the docs fails it."""
    copy = tmp_path / "repo"
    for name in ("docs", "guides", "ensemble_zoo"):
        shutil.copytree(
            os.path.join(REPO_ROOT, name), copy / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(os.path.join(REPO_ROOT, name), copy / name)
    with open(copy / "docs" / "export.md", "a") as f:
        f.write("\nSee [the missing page](missing.md).\n")
    result = build(copy, tmp_path / "site")
    assert result.returncode != 0
    assert "missing.md" in result.stderr


def test_readme_is_a_first_visit_page():
    readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
    assert len(readme.splitlines()) <= 300
    headings = re.findall(r"(?m)^## (.+)$", readme)
    assert headings[:3] == ["Set-up", "Quickstart", "Evaluation and the leaderboard"]
    assert "mkdocs serve" in readme


@only_once
def test_causal_lm_family_table_refuses_what_the_registry_refuses():
    """The causal-LM page's family table marks refused exactly the
    families that `families.FAMILIES` refuses (names compared without
    spaces, dashes and the `CausalLM` suffix)."""
    from ensemble_zoo.models.lora_ensemble.causal_lm.families import FAMILIES

    def key(name):
        return re.sub(r"[^a-z0-9]", "", name.lower().replace("causallm", ""))

    text = open(os.path.join(REPO_ROOT, "docs", "methods", "causal_lm.md")).read()
    rows = re.findall(r"^\| ([^|]+) \| refused", text, re.M)
    in_table = {key(name) for row in rows for name in row.split(",")}
    registry = {key(name) for name, entry in FAMILIES.items() if entry.refused}
    assert in_table == registry
