"""Atomic file writes: readers see a file's old content or its whole new content, never a part."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from peerify_dagster.resources.processes import process_alive

TEMPORARY_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")  # what atomic_path names its temporaries


def temporary_path(path: Path) -> Path:
    """The temporary sibling a writer of `path` writes to (its folder created), named per process (TEMPORARY_NAME)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary sibling of `path` to write to; renamed over `path` only when the block completes.

    The temporary name ends in `.tmp`, so globs such as `*.parquet` never pick up a half-written file,
    and it is removed if the write fails.
    """
    temporary = temporary_path(path)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


@contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A temporary sibling folder of `path` to fill; renamed to `path` only when the block completes, and never over
    an existing `path` (FileExistsError). Removed if the block fails, so `path` is either absent or complete."""
    temporary = temporary_path(path)
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    try:
        yield temporary
        for child in [*temporary.iterdir(), temporary]:  # the contents are on disk before the name is
            fsync_path(child)
        if path.exists():
            raise FileExistsError(f"{path} exists; it is never replaced")
        os.rename(temporary, path)  # fails on a non-empty folder created meanwhile: nothing is replaced
        fsync_path(path.parent)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's entry to disk (a folder: the names created or renamed in it survive power loss)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)


def json_bytes(obj: Any) -> bytes:
    """The bytes of a JSON file the project writes (UTF-8, indented one space)."""
    return json.dumps(obj, ensure_ascii=False, indent=1).encode("utf-8")


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json_bytes(obj))


def remove_stale_temporaries(root: Path) -> list[Path]:
    """Remove the temporaries that writers killed mid-write left under `root` (their pid no longer runs)."""
    removed = []
    for path in list(root.rglob(".*.tmp")):  # listed first: removing a folder must not disturb the walk
        match = TEMPORARY_NAME.match(path.name)
        if match and not process_alive(int(match["pid"])):
            if path.is_dir():  # an atomic_folder's
                shutil.rmtree(path, ignore_errors=True)
            elif path.is_file():
                path.unlink(missing_ok=True)
            else:
                continue
            removed.append(path)
    return removed
