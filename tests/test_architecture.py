"""The core stays free of the orchestrator: every module under peerify_dagster.domain imports without Dagster."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path


def test_domain_does_not_import_dagster():
    code = (
        "import sys, pkgutil, importlib, peerify_dagster.domain as d\n"
        "for m in pkgutil.iter_modules(d.__path__): importlib.import_module('peerify_dagster.domain.' + m.name)\n"
        "print(sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


REPO = Path(__file__).resolve().parents[1]
# Modules outside peerify_dagster/assets/ that need asset definitions themselves (not shared schemas or helpers): the
# code location,
# and `peerify build`, which reads the predictions asset's inputs.
ASSET_IMPORTERS = {"peerify_dagster/definitions.py", "peerify_dagster/cli/build.py"}


def imported_modules(path: Path) -> set[str]:
    """The absolute module names a file imports (`from assets import x` counts as `assets.x`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def asset_imports(path: Path) -> list[str]:
    """The stage modules a file imports (peerify_dagster/assets/steps/, what stages share, is not one)."""
    return sorted(name for name in imported_modules(path) if name.startswith("peerify_dagster.assets.")
                  and not name.startswith("peerify_dagster.assets.steps"))


def test_asset_modules_do_not_import_each_other():
    """Shared schemas and helpers live in peerify_dagster/domain or peerify_dagster/resources, never in an asset."""
    stages = REPO / "peerify_dagster" / "assets"
    offenders = {str(path.relative_to(REPO)): found for path in sorted(stages.glob("*.py"))
                 if (found := asset_imports(path))}
    assert offenders == {}


def test_only_the_code_location_and_build_import_asset_modules():
    offenders = {name: found for path in sorted((REPO / "peerify_dagster").rglob("*.py"))
                 if (name := str(path.relative_to(REPO))) not in ASSET_IMPORTERS and (found := asset_imports(path))}
    assert offenders == {}


# Which packages each lower layer may import (docs/reference/architecture.md draws them): a layer never reaches up.
LAYERS = {"domain": set(), "resources": {"domain"}, "annotation": {"domain", "resources"},
          "quality": {"domain", "resources"}}
PACKAGES = {path.name for path in (REPO / "peerify_dagster").iterdir() if (path / "__init__.py").exists()}


def test_each_layer_imports_only_the_layers_below_it():
    offenders = {}
    for layer, allowed in LAYERS.items():
        for path in sorted((REPO / "peerify_dagster" / layer).rglob("*.py")):
            reached = {name.split(".")[1] for name in imported_modules(path) if name.startswith("peerify_dagster.")}
            if above := (reached & PACKAGES) - allowed - {layer}:
                offenders[str(path.relative_to(REPO))] = sorted(above)
    assert offenders == {}


def test_every_package_is_in_the_wheel():
    """pyproject lists the packages setuptools installs: one left out is missing from a non-editable install."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(REPO).parts) for path in (REPO / "peerify_dagster").rglob("__init__.py")
             if "__pycache__" not in path.parts}
    assert found - listed == set()
