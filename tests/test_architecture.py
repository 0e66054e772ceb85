"""The core stays free of the orchestrator: every module under peerify_dagster.domain imports without Dagster."""

from __future__ import annotations

import subprocess
import sys


def test_domain_does_not_import_dagster():
    code = (
        "import sys, pkgutil, importlib, peerify_dagster.domain as d\n"
        "for m in pkgutil.iter_modules(d.__path__): importlib.import_module('peerify_dagster.domain.' + m.name)\n"
        "print(sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
