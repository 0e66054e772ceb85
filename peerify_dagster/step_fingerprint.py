"""What a build and the Celery worker running one of its steps must share, in one fingerprint: the lake, the venue
registry, the prediction configurations and the model settings (files by content, so machines may keep them at other
paths), and the code the process loaded. `peerify build` sends its fingerprint with every step; a worker whose own
differs refuses the step in one line naming each difference, before anything is read or written (a leftover worker
of another lake once overwrote that lake's tables).
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

from peerify_dagster import deployment, paths
from peerify_dagster.domain.code_versions import sources_fingerprint

MODEL_SETTINGS_PREFIXES = ("PEERIFY_LLM_PROFILE", "PEERIFY_ROLE_")
DIGEST_LENGTH = 16


def _file_digest(path: str | Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:DIGEST_LENGTH]
    except OSError:
        return "missing"


def _lake() -> str:
    root = paths.lake_root()
    return root.rstrip("/") if deployment.is_object_store(root) else str(Path(root).expanduser().resolve())


def _model_settings() -> str:
    from peerify_dagster.resources.llm_gateway.registry import DEFAULT_MODELS_FILE

    models = os.environ.get("PEERIFY_MODELS_FILE") or DEFAULT_MODELS_FILE
    overrides = sorted(f"{name}={value}" for name, value in os.environ.items()
                       if name.startswith(MODEL_SETTINGS_PREFIXES))
    return hashlib.sha256("\n".join([_file_digest(models), *overrides]).encode()).hexdigest()[:DIGEST_LENGTH]


@cache
def loaded_code() -> str:
    """The fingerprint of the code this process loaded: read once, as it loads the code (`peerify worker` before
    it forks its step processes, `peerify build` before its first run): a process keeps the code it imported even
    when the files change under it."""
    return sources_fingerprint()[:DIGEST_LENGTH]


def fingerprint() -> dict[str, str]:
    """This process's fingerprint, read now (the files may have changed since the last step)."""
    return {"lake": _lake(), "venue registry": _file_digest(paths.registry_path()),
            "configurations": _file_digest(paths.configurations_path()), "model settings": _model_settings(),
            "code": loaded_code()}


def differences(build: dict[str, str], worker: dict[str, str]) -> list[str]:
    """Each part in which the worker differs from the build, as `part: build X, this worker Y`."""
    return [f"{part}: build {build.get(part, 'unknown')}, this worker {worker.get(part, 'unknown')}"
            for part in sorted(set(build) | set(worker)) if build.get(part) != worker.get(part)]
