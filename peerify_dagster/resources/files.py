"""Atomic file writes: readers see a file's old content or its whole new content, never a part."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary sibling of `path` to write to; renamed over `path` only when the block completes.

    The temporary name ends in `.tmp`, so globs such as `*.parquet` never pick up a half-written file,
    and it is removed if the write fails.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, ensure_ascii=False, indent=1).encode("utf-8"))
