"""Regenerate the bundled sample venue snapshot from its human-written sources.

    .venv/bin/python scripts/build_sample_venue.py [--output DIR]

Reads peerify_dagster/sample_venue/threads.yaml and manuscripts/*.md and rewrites the snapshot
(default: peerify_dagster/sample_venue/snapshot/). The output is byte-for-byte identical on
every run, so a diff after rebuilding means a source changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from peerify_dagster.sample_venue import SNAPSHOT_DIR  # noqa: E402
from peerify_dagster.sample_venue.snapshot import SampleVenueError, build_snapshot_files, write_snapshot  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=SNAPSHOT_DIR, help="snapshot folder to (re)write")
    arguments = parser.parse_args(argv)
    try:
        files = build_snapshot_files()
        write_snapshot(arguments.output, files)
    except SampleVenueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    total = sum(len(payload) for payload in files.values())
    print(f"wrote {len(files)} files ({total:,} bytes) to {arguments.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
