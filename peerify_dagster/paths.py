"""Where the project's files live: the repository, the lake and the venue registry.

Kept free of heavy imports so the `peerify` command can check its configuration before loading Dagster. The
environment is read when a path is asked for, never at import time, so a variable set after import (by a test,
or a caller embedding the package) is honoured.
"""

from __future__ import annotations

import os
from pathlib import Path

from peerify_dagster import deployment

REPO_ROOT = Path(__file__).resolve().parents[1]


def lake_root() -> str:
    """The lake: PEERIFY_LAKE (a folder, or an `s3://` URL: never a Path then), else `data_lake/` in the
    repository."""
    return os.environ.get("PEERIFY_LAKE") or str(REPO_ROOT / "data_lake")


def registry_path() -> str:
    """The venue registry: PEERIFY_VENUES, else `venues.yaml` in the repository."""
    return os.environ.get("PEERIFY_VENUES") or str(REPO_ROOT / "venues.yaml")


def uploads_root() -> str:
    """Where `peerify verify` keeps what it was given (a folder per upload venue, the web app's jobs) and the upload
    registry: `uploads/` in the lake. Irreplaceable: nothing in the lake can rebuild it."""
    return str(Path(lake_root()) / "uploads")


def upload_registry_path() -> str:
    """The lake's registry of upload venues (domain/venues.py), merged into the repository's by `load_registry`."""
    return str(Path(uploads_root()) / "venues.yaml")


def configurations_path() -> str:
    """The prediction configurations: PEERIFY_CONFIGURATIONS, else `configurations.yaml` in the repository."""
    return os.environ.get("PEERIFY_CONFIGURATIONS") or str(REPO_ROOT / "configurations.yaml")


def dagster_home() -> str:
    """The Dagster home: DAGSTER_HOME, else `.dagster_home/` beside the lake: the repository's own (as `make` uses)
    for the default lake, so terminal builds, the UI, releases and sensors share one run history; a lake elsewhere
    (PEERIFY_LAKE) keeps its run history in `.dagster_home/` inside it, since gate results describe its files."""
    if home := os.environ.get("DAGSTER_HOME"):
        return home
    if deployment.is_object_store(lake_root()):  # no folder to keep it in: this machine's cache folder of the lake
        return str(Path(deployment.lake_cache_dir(lake_root())) / ".dagster_home")
    lake = Path(lake_root())
    return str(REPO_ROOT / ".dagster_home" if lake == REPO_ROOT / "data_lake" else lake / ".dagster_home")
