"""What every `peerify` subcommand module shares: one way to print a message, the exit code of a usage error, and the
wrapper that turns a command's expected errors into that message and exit code.

Kept out of cli.py on purpose: `python -m peerify_dagster.cli` runs cli.py as `__main__`, so a subcommand module that
imported `peerify_dagster.cli` would get a second copy of it, whose ConfigError is not the class main() catches.
"""

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
