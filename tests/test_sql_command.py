"""`peerify sql` is safe on a maintainer's terminal: a time limit, a row cap with bounded memory, DuckDB's memory and
spill capped, Ctrl-C one line and exit 130, control characters shown escaped; and its help says it is not blind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import duckdb
import pexpect
import polars as pl
import pytest

from peerify_dagster.cli import catalog
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from tests.cli_support import cli_env, peerify, start_peerify

# About 10^10 rows to join: minutes of work, so only an interrupt ends it within the tests' waits.
SLOW_QUERY = "select count(*) from range(100000) a, range(100000) b where (a.range * b.range) % 7 = 3"
# ESC (with a colour), CR, NEL (a C1 control), the right-to-left override and a bidi isolate.
HOSTILE = "r1\x1b[31mRED\rcut\x85\u202eevil\u2066end"
ESCAPED = r"r1\x1b[31mRED\rcut\x85\u202eevil\u2066end"
RAW_CONTROLS = ["\x1b", "\r", "\x85", "\u202e", "\u2066"]


@pytest.fixture()
def lake(tmp_path) -> Lake:
    lake = Lake(tmp_path / "lake")
    lake.write_table("reviews", "sample", pl.DataFrame({"venue": ["sample", "sample"], "review_id": [HOSTILE, "r2"]}))
    return lake


@pytest.fixture()
def env(lake, tmp_path) -> dict[str, str]:
    return cli_env(lake.root, tmp_path / "venues.yaml", None)


def test_help_says_it_is_the_maintainers_tool_and_not_blind(env):
    result = peerify("sql", "--help", env=env)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "maintainer's tool, never an annotator's" in text and "not blind" in text


@pytest.mark.parametrize("query, returncode, stream, shown", [
    ("select review_id from reviews order by 1", 0, "stdout", ESCAPED),
    ('select 1 as "col\x1b[2Jumn\u202e"', 0, "stdout", r"col\x1b[2Jumn\u202e"),  # a column name
    # DuckDB's error quotes the statement (its line breaks, CR and NEL among them, become "; ").
    (f'select * from "{HOSTILE}"', 1, "stderr", r"r1\x1b[31mRED; cut; \u202eevil\u2066end"),
])
def test_control_characters_are_escaped(env, query, returncode, stream, shown):
    result = peerify("sql", query, env=env)
    assert result.returncode == returncode, result.stderr
    assert shown in getattr(result, stream)
    for raw in RAW_CONTROLS:
        assert raw not in result.stdout and raw not in result.stderr, raw


def test_control_characters_are_escaped_on_a_terminal(env):
    child = pexpect.spawn(sys.executable, ["-m", "peerify_dagster.cli", "sql", "select review_id from reviews"],
                          env=env, cwd=str(REPO_ROOT), encoding="utf-8", timeout=60, dimensions=(50, 200))
    shown = child.read().replace("\r\n", "\n")  # the terminal's own line ends
    child.close()
    assert child.exitstatus == 0, shown
    assert ESCAPED in shown and not any(raw in shown for raw in RAW_CONTROLS)


def test_rows_past_the_cap_are_left_out_and_said_so(env):
    capped = peerify("sql", "select range as n from range(50)", "--max-rows", "5", env=env)
    assert capped.returncode == 0, capped.stderr
    assert capped.stdout.split()[2:] == ["0", "1", "2", "3", "4"]
    assert "more than 5 rows: the first 5 rows shown (--max-rows N to see more)" in capped.stderr

    exact = peerify("sql", "select range as n from range(50)", "--max-rows", "50", env=env)
    assert exact.stdout.split()[2:] == [str(n) for n in range(50)] and "more than" not in exact.stderr

    default = peerify("sql", "select range as n from range(20000)", env=env)
    assert len(default.stdout.splitlines()) == 2 + 10_000 and "more than 10000 rows" in default.stderr


def test_a_value_python_cannot_hold_is_one_line(env):
    result = peerify("sql", "select interval 100000000 year as forever", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == ["query failed: OverflowError reading a value (cast it to varchar): Python "
                                          "int too large to convert to C int"]


def test_a_huge_result_is_never_held_in_memory(env, tmp_path):
    """Five million rows of 100 characters: fetched whole, several GB; capped and fetched in batches, the command
    stays near its size when it runs `select 1` (about 175 MB)."""
    measure = ("import json, resource, subprocess, sys\n"
               "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
               "print(json.dumps([done.returncode, done.stderr, peak_kb]))")
    query = "select range as n, repeat('x', 100) as text from range(5000000)"
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "peerify_dagster.cli", "sql", query],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    returncode, stderr, max_rss_kb = json.loads(done.stdout)
    assert returncode == 0, stderr
    assert "more than 10000 rows" in stderr
    assert max_rss_kb < 400 * 1024, f"{max_rss_kb // 1024} MB"


def test_a_slow_query_stops_at_its_time_limit(env):
    started = time.monotonic()
    result = peerify("sql", SLOW_QUERY, "--timeout", "1", env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == "query stopped at its time limit of 1 s (--timeout SECONDS to " \
                                                     "allow more)"
    assert "Traceback" not in result.stderr and time.monotonic() - started < 30


def test_a_query_longer_than_duckdbs_progress_wait_prints_only_its_result(env):
    # DuckDB draws a progress bar on standard output once a query has run 2 s; the result must stand there alone.
    query = "select count(*) as n from range(30000) a, range(30000) b where (a.range * b.range) % 7 = 3"
    started = time.monotonic()
    result = peerify("sql", query, "--timeout", "300", env=env, timeout=400)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started > 3  # long enough for the bar
    assert "%" not in result.stdout and "\r" not in result.stdout
    assert result.stdout.split()[0] == "n" and result.stdout.split()[-1].isdigit()


def test_an_interrupt_sent_before_duckdb_starts_the_query_still_stops_it():
    # Ctrl-C (or the time limit) can come while the query thread is still on its way to DuckDB: an interrupt sent
    # then is lost when the query starts, so the wait sends it again until the thread ends.
    con = duckdb.connect()
    result = catalog._Result()
    query = "select count(*) from range(30000) a, range(30000) b where (a.range * b.range) % 7 = 3"

    def late_fetch() -> None:
        time.sleep(0.5)
        catalog._fetch(con, query, 10, result)

    threading.Thread(target=late_fetch, daemon=True).start()
    started = time.monotonic()
    catalog._wait(result, con, 0.01)
    assert isinstance(result.error, duckdb.InterruptException)
    assert time.monotonic() - started < 3  # the query alone runs about 4 s


def test_memory_and_spill_are_capped_and_the_flags_raise_them(env):
    sort = "select range as n, md5(range::varchar) as h from range(3000000) order by h"
    capped = peerify("sql", sort, "--max-rows", "1", "--memory-limit", "60MB", "--spill-limit", "20MB", env=env)
    assert capped.returncode == 1
    line = capped.stderr.strip().splitlines()[-1]
    assert line.startswith("query failed: it needs more than --memory-limit 60MB and --spill-limit 20MB allow")
    assert "Traceback" not in capped.stderr

    raised = peerify("sql", sort, "--max-rows", "1", "--memory-limit", "60MB", "--spill-limit", "2GB", env=env)
    assert raised.returncode == 0, raised.stderr  # it spilled and finished


@pytest.mark.parametrize("flag, value", [("--timeout", "0"), ("--timeout", "soon"), ("--max-rows", "-3"),
                                         ("--memory-limit", "lots"), ("--spill-limit", "5")])
def test_bad_limits_are_named(env, flag, value):
    result = peerify("sql", "select 1", flag, value, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"peerify sql: error: argument {flag}: {value!r} is not")


def test_ctrl_c_prints_one_line_and_exits_130(env, lake):
    process = start_peerify("sql", SLOW_QUERY, "--timeout", "600", env=env)
    try:
        deadline = time.monotonic() + 60
        while not lake.catalog_path.exists():  # the command has refreshed the catalog: the query runs next
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert stderr == "interrupted\n" and stdout == ""
    assert time.monotonic() - interrupted < 10
