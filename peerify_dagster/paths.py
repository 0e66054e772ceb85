"""Where the project's files live: the repository, the lake and the venue registry.

Kept free of heavy imports so the `peerify` command can check its configuration before loading Dagster.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LAKE = os.environ.get("PEERIFY_LAKE", str(REPO_ROOT / "data_lake"))
DEFAULT_REGISTRY = os.environ.get("PEERIFY_VENUES", str(REPO_ROOT / "venues.yaml"))
