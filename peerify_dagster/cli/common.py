"""What every `peerify` subcommand module shares: one way to print a message and a table, the exit code of a usage
error, and the wrapper that turns a command's expected errors into that message and exit code. Loads no Dagster."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

EXIT_USAGE = 2

Command = Callable[[argparse.Namespace], int]


class ConfigError(Exception):
    """A configuration mistake, reported as its one-line message with exit code 2."""


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


def format_table(columns: list[str], rows: list[tuple], max_width: int = 80) -> str:
    cells = [[("NULL" if v is None else str(v)).replace("\n", " ")[:max_width] for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])
