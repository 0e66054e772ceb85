"""What every `peerify` subcommand module shares: one way to print a message and a table, the exit code of a usage
error, the wrapper that turns a command's expected errors into that message and exit code, and the registered venues
(the repository's and the lake's uploads) with the refusal of an upload where a benchmark is needed. Loads no
Dagster."""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path

from peerify_dagster import deployment, paths
from peerify_dagster.domain.venues import SOURCE_UPLOAD, Venue, load_registry

EXIT_USAGE = 2

Command = Callable[[argparse.Namespace], int]


class ConfigError(Exception):
    """A configuration mistake, reported as its one-line message with exit code 2."""


def registered_venues() -> dict[str, Venue]:
    """Every venue a command may name: the repository's registry (PEERIFY_VENUES) with the lake's upload venues
    (`peerify verify`, paths.upload_registry_path)."""
    return load_registry(Path(paths.registry_path()), Path(paths.upload_registry_path()))


def refuse_upload(venue: Venue, command: str) -> None:
    """ConfigError for an upload venue of `peerify verify` given to a command that builds or reads a benchmark
    (labels, arbitration, slices, metrics): an upload is one paper, built by `peerify verify` up to its predictions."""
    if venue.source == SOURCE_UPLOAD:
        raise ConfigError(f"venue {venue.key!r} is an upload of `peerify verify` (one paper and its reviews, built "
                          f"up to its predictions): {command} is for a benchmark venue (labels, slices, metrics), "
                          "which an upload never is; `peerify verify` builds it, and its result is "
                          f"{Path(paths.uploads_root()) / venue.key / 'result.html'}")


def refuse_object_store_lake(command: str, lake: str) -> None:
    """ConfigError for a command that needs the lake to be a folder on this machine (the web app's uploads, sign-in
    secrets and verification jobs are local files beside the lake) given an object-store lake."""
    if deployment.is_object_store(lake):
        raise ConfigError(f"{command} needs a folder lake on this machine, not {lake}: its uploads, annotator "
                          "secrets and verification jobs are local files; point PEERIFY_LAKE at a folder")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def guarded(*errors: type[Exception]) -> Callable[[Command], Command]:
    """Wrap a command so that any of `errors` is printed as its message and ends it with EXIT_USAGE."""
    def wrap(command: Command) -> Command:
        @functools.wraps(command)
        def run(args: argparse.Namespace) -> int:
            try:
                return command(args)
            except errors as exc:
                say(str(exc))
                return EXIT_USAGE
        return run
    return wrap


def one_line(exc: BaseException) -> str:
    return "; ".join(line.strip(" -") for line in str(exc).splitlines() if line.strip(" -"))


# C0 and C1 controls (ESC, CR, ...), DEL and the bidi embeddings, overrides and isolates: printed raw they move the
# cursor, recolour or reorder what a terminal shows.
_TERMINAL_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with each character that would steer a terminal written out as its escape (\\x1b, \\r, \\u202e)."""
    return _TERMINAL_CONTROLS.sub(lambda control: ascii(control.group())[1:-1], text)


def table_cell(value: object, max_width: int = 80) -> str:
    """A value as `format_table` shows it: on one line, control characters escaped, cut to `max_width`."""
    return visible("NULL" if value is None else str(value).replace("\n", " "))[:max_width]


def format_table(columns: list[str], rows: list[tuple], max_width: int = 80) -> str:
    columns = [visible(c) for c in columns]
    cells = [[table_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])
