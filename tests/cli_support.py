"""Running the real `peerify` command in a subprocess, isolated from the caller's environment (the helpers live in
tests/fakes/cli.py, shared with benchmarks/fault_table.py)."""

from tests.fakes.cli import (  # noqa: F401 - re-exported for the tests
    CliResult,
    cli_env,
    dead_pid,
    fresh_home,
    hold_catalog,
    peerify,
    start_peerify,
)
