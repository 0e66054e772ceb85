"""Is a process still running? Used to tell stale locks, temporary files and Dagster runs from live ones."""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; the command name before ")" may hold spaces. None off Linux."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, which tells a reused pid apart."""
    fields = _stat_fields(pid)
    return fields[19] if fields else None  # field 22 of stat


def process_alive(pid: int, start_time: str | None = None) -> bool:
    """Whether `pid` runs (a zombie has ended) and, when `start_time` is given and /proc can tell, is the same
    process as recorded."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    fields = _stat_fields(pid)
    if fields is None:
        return True
    return fields[0] != "Z" and not (start_time and fields[19] != start_time)
