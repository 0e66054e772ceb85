"""The venue registry (with the lake's upload venues of `peerify verify`), the `peerify` command, credentials from the
environment, and the venue sensor."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.defs_state.base import set_defs_state_storage

from peerify_dagster import cli
from peerify_dagster.domain.venues import (
    SOURCE_UPLOAD,
    RegistryError,
    Venue,
    add_venue,
    load_registry,
    upload_registry_text,
)
from peerify_dagster.partitions import venue_partitions
from peerify_dagster.resources import runs
from peerify_dagster.resources.dagster_resources import LakeResource, VenueRegistryResource
from peerify_dagster.resources.openreview import HttpPolicy, OpenReviewCrawler, make_client
from peerify_dagster.sensors import snapshot_build_sensor, venue_refresh_schedule, venue_registry_sensor
from tests.cli_support import cli_env, fresh_home, peerify
from tests.fakes.openreview_server import FakeOpenReviewServer

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "peerify_dagster" / "sample_venue" / "snapshot"


def test_repository_registry_lists_the_required_venues():
    registry = load_registry(REPO / "venues.yaml")
    assert {"sample", "ICLR.cc/2024/Conference", "NeurIPS.cc/2024/Conference"} <= set(registry)
    assert registry["sample"].source == "snapshot"
    assert all(isinstance(v.seed, int) for v in registry.values())


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("source: ftp\n    seed: 1", "source must be one of"),
        ("source: api", "integer 'seed' is required"),
        ("source: snapshot\n    seed: 1", "needs a 'snapshot' folder"),
        ("seed: 1\n    sample_size: 0", "sample_size must be a positive integer"),
        ("seed: 1\n    colour: blue", "unknown field"),
    ],
)
def test_registry_errors_name_the_venue(tmp_path, entry, message):
    path = tmp_path / "venues.yaml"
    path.write_text(f"venues:\n  Bad.cc/2026:\n    {entry}\n")
    with pytest.raises(RegistryError, match=message) as info:
        load_registry(path)
    assert "Bad.cc/2026" in str(info.value)


def test_add_venue_appends_and_refuses_duplicates(tmp_path):
    path = tmp_path / "venues.yaml"
    path.write_text((REPO / "venues.yaml").read_text())
    add_venue(path, Venue(key="ICML.cc/2024/Conference", openreview_id="ICML.cc/2024/Conference", source="api",
                          seed=7, sample_size=50))
    registry = load_registry(path)
    assert registry["ICML.cc/2024/Conference"].sample_size == 50
    assert "# Venue registry" in path.read_text()  # comments are kept
    with pytest.raises(RegistryError, match="already registered"):
        add_venue(path, registry["ICML.cc/2024/Conference"])


def test_cli_venues_add_and_sql(tmp_path, monkeypatch, capsys):
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n")
    monkeypatch.setenv("PEERIFY_VENUES", str(registry))
    assert cli.main(["venues", "add", "TMLR", "--seed", "3", "--sample-size", "10"]) == 0
    assert cli.main(["venues", "add", "TMLR", "--seed", "3"]) == 2
    assert "already registered" in capsys.readouterr().err
    cli.main(["venues", "list"])
    assert "TMLR" in capsys.readouterr().out
    assert cli.main(["venues", "add", "ICLR.cc/2020/Conference", "--api-version", "1"]) == 0
    assert load_registry(registry)["ICLR.cc/2020/Conference"].api_version == 1
    assert load_registry(registry)["TMLR"].api_version is None  # not given: detected at the first build

    lake = tmp_path / "lake"
    monkeypatch.setenv("PEERIFY_LAKE", str(lake))
    assert cli.main(["sql", "select 41 + 1 as answer"]) == 0
    assert "42" in capsys.readouterr().out
    assert cli.main(["sql", "select * from no_such_table"]) == 1
    assert "no_such_table" in capsys.readouterr().err


def test_an_upload_venue_is_listed_as_one_and_refused_by_the_commands_of_a_benchmark(tmp_path, monkeypatch, capsys):
    """`peerify verify` registers its venues in the lake's upload registry: `venues list` shows them as uploads, and
    report, arbitrate, build and release (labels, slices, metrics: a benchmark's) refuse one in one line saying why."""
    upload = "upload-0123456789ab"
    registry, uploads = tmp_path / "venues.yaml", tmp_path / "lake" / "uploads" / "venues.yaml"
    registry.write_text(GOOD_ENTRY)
    uploads.parent.mkdir(parents=True)
    venue = Venue(key=upload, openreview_id=f"Peerify/Upload/{upload}", source=SOURCE_UPLOAD, seed=0,
                  snapshot=f"{upload}/snapshot")
    uploads.write_text(upload_registry_text(uploads, venue))
    monkeypatch.setenv("PEERIFY_VENUES", str(registry))
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    assert cli.main(["venues", "list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.rstrip() for line in out.splitlines()[2:] if line.strip()}
    assert rows[upload].split()[2] == "upload" and rows[upload].endswith("lake (peerify verify)")
    assert rows["v"].split()[2] == "snapshot" and rows["v"].endswith("repository")
    assert "1 upload venue of `peerify verify` (one paper and its reviews each" in out and f"in {uploads}" in out
    for command in (["report", "--venue", upload], ["arbitrate", "--venue", upload, "--annotator", "ann"],
                    ["audit", "sample", "--venue", upload], ["build", upload],
                    ["release", "--venue", upload, "--version", "1.0.0"]):
        assert cli.main(command) == 2, command
        said = capsys.readouterr().err.strip()
        assert said.startswith(f"venue '{upload}' is an upload of `peerify verify`") and said.count("\n") == 0, said
        named = " ".join(word for word in command if not word.startswith("-") and word not in (upload, "ann", "1.0.0"))
        assert f"`peerify {named}` is for a benchmark venue" in said, said
        assert said.endswith(f"its result is {uploads.parent / upload / 'result.html'}"), said
    assert not (tmp_path / "lake" / "submissions").exists()  # refused before any work


def test_credentials_come_from_the_environment_and_are_not_logged(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENREVIEW_USERNAME", "maintainer@example.org")
    monkeypatch.setenv("OPENREVIEW_PASSWORD", "s3cret-pass")
    logs: list[str] = []
    with FakeOpenReviewServer(SAMPLE, credentials=("maintainer@example.org", "s3cret-pass"),
                              require_auth=True) as server:
        client = make_client(server.url, HttpPolicy(timeout_s=5, retries=1, backoff_s=0.01))
        venue_id = json.loads((SAMPLE / "venue.json").read_text())["venue_id"]
        crawler = OpenReviewCrawler(client, venue_id, tmp_path / "snap", log=logs.append)
        notes = crawler.land_submissions()
        assert notes and crawler.land_forum(notes[0]["id"]).status == "fetched"
        assert any(r.path == "/login" for r in server.requests)
    written = "".join(p.read_text(errors="ignore") for p in (tmp_path / "snap").rglob("*.json"))
    captured = capsys.readouterr()
    for text in (written, captured.out, captured.err, "\n".join(logs)):
        assert "s3cret-pass" not in text


def test_sensors_register_venues_and_build_snapshots_only_when_switched_on_and_no_build_holds_them(tmp_path):
    """Starting `make dev` calls no model: the registry sensor (on) only adds the snapshot venues as partitions; the
    snapshot build sensor (off by default) builds a never-built one, unless a `peerify build` holds its lock."""
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n  A.cc/2026:\n    seed: 1\n  B.cc/2026:\n    seed: 2\n"
                        "  C.cc/2026:\n    seed: 3\n    source: snapshot\n    snapshot: c-snapshot\n")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(venue_partitions.name, ["A.cc/2026"])
    resources = {"venue_registry": VenueRegistryResource(path=str(registry)),
                 "lake": LakeResource(root=str(tmp_path / "lake"))}
    result = venue_registry_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert not result.run_requests
    assert result.dynamic_partitions_requests[0].partition_keys == ["C.cc/2026"]
    assert venue_registry_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    instance.add_dynamic_partitions(venue_partitions.name, ["C.cc/2026"])

    assert snapshot_build_sensor.default_status == dg.DefaultSensorStatus.STOPPED
    with runs.exclusive_lock(runs.build_lock_path(tmp_path / "lake", "C.cc/2026"), "the build of C.cc/2026 (pid 1)",
                             on_wait=print):
        held = snapshot_build_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(held, dg.SkipReason)
    requests = snapshot_build_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert [(r.partition_key, r.run_key) for r in requests] == [("C.cc/2026", "register:C.cc/2026")]


def test_refresh_schedule_refetches_known_venues(tmp_path):
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n  A.cc/2026:\n    seed: 1\n  New.cc/2026:\n    seed: 2\n")
    # Evaluating a schedule opens a second instance from the test instance's ref that never closes and leaves
    # its state storage as the process-wide current one; the inner context restores the previous value.
    with dg.instance_for_test() as instance, set_defs_state_storage(None):
        instance.add_dynamic_partitions(venue_partitions.name, ["A.cc/2026"])
        context = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime.datetime(2026, 11, 30, 3),
            resources={"venue_registry": VenueRegistryResource(path=str(registry)),
                       "lake": LakeResource(root=str(tmp_path / "lake"))},
        )
        requests = venue_refresh_schedule(context)
    assert [r.partition_key for r in requests] == ["A.cc/2026"]
    assert requests[0].run_config["ops"]["raw_openreview_notes"]["config"]["refetch"] is True
    assert venue_refresh_schedule.default_status == dg.DefaultScheduleStatus.STOPPED


def test_build_refuses_to_start_without_api_keys(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    monkeypatch.setenv("PEERIFY_LLM_PROFILE", "paper")
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert cli.main(["build", "sample"]) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and "ANTHROPIC_API_KEY" in err
    assert not (tmp_path / "lake" / "submissions").exists()  # nothing was built


# --- configuration errors: one line, exit code 2, before any work ----------------------------------------------

GOOD_ENTRY = "venues:\n  v:\n    source: snapshot\n    snapshot: snap\n    seed: 1\n"
CONFIG_ERRORS = {
    # case: (registry text, venue, extra environment, texts the one line must hold)
    "yaml syntax": ("venues:\n  v:\n    seed: 1\n   source: api\n", "v", {}, ["venues.yaml, line 4", "not valid YAML"]),
    "unknown venue": (GOOD_ENTRY, "Nope.cc/2026", {}, ["venues.yaml", "'Nope.cc/2026' is not registered"]),
    "bad sample size": ("venues:\n  v:\n    seed: 1\n    sample_size: 0\n", "v", {},
                        ["venues.yaml", "venue 'v'", "sample_size", "got 0"]),
    "bad source": ("venues:\n  v:\n    seed: 1\n    source: ftp\n", "v", {}, ["venues.yaml", "source", "'ftp'"]),
    "seed not an integer": ("venues:\n  v:\n    seed: soon\n", "v", {}, ["venues.yaml", "'seed'", "'soon'"]),
    "missing snapshot": (GOOD_ENTRY.replace("snap\n", "nowhere\n"), "v", {}, ["venue 'v'", "snapshot 'nowhere'"]),
    "unknown profile": (GOOD_ENTRY, "v", {"PEERIFY_LLM_PROFILE": "no-such-profile"}, ["no-such-profile"]),
    "unknown role model": (GOOD_ENTRY, "v", {"PEERIFY_ROLE_VERIFIERS": "gpt-9"}, ["gpt-9"]),
    "bad cache mode": (GOOD_ENTRY, "v", {"PEERIFY_LLM_CACHE_MODE": "sometimes"}, ["sometimes"]),
    "missing dagster home": (GOOD_ENTRY, "v", {"DAGSTER_HOME": "no-such-home"}, ["DAGSTER_HOME", "no-such-home"]),
    "dagster.yaml syntax": (GOOD_ENTRY, "v", {"dagster.yaml": "telemetry:\n  enabled: [false\n"},
                            ["dagster.yaml, line 3", "not valid YAML"]),
}


@pytest.mark.parametrize("case", CONFIG_ERRORS)
def test_build_configuration_errors_are_one_line_before_any_work(tmp_path, case):
    registry_text, venue, extra, expected = CONFIG_ERRORS[case]
    (tmp_path / "snap").mkdir()
    registry = tmp_path / "venues.yaml"
    registry.write_text(registry_text)
    home = fresh_home(tmp_path / "home")
    if "dagster.yaml" in extra:
        (home / "dagster.yaml").write_text(extra.pop("dagster.yaml"))
    env = cli_env(tmp_path / "lake", registry, home, **extra)
    result = peerify("build", venue, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(text in lines[0] for text in expected), lines[0]
    assert result.stdout == ""
    assert result.seconds < 5  # Python start included; the checks themselves run before Dagster loads (below)
    assert not (tmp_path / "lake").exists()  # the lake is untouched ...
    assert sorted(p.name for p in home.iterdir()) == ["dagster.yaml"]  # ... and no Dagster instance was created


def test_configuration_is_checked_before_dagster_loads(tmp_path):
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n  v:\n    seed: 1\n    sample_size: -3\n")
    code = ("import sys, time\nfrom peerify_dagster import cli\nstarted = time.monotonic()\n"
            "code = cli.main(['build', 'v'])\nprint(code, 'dagster' in sys.modules, time.monotonic() - started)")
    done = subprocess.run([sys.executable, "-c", code], env=cli_env(tmp_path / "lake", registry, None),
                          capture_output=True, text=True, check=True)
    exit_code, dagster_loaded, seconds = done.stdout.split()
    assert (exit_code, dagster_loaded) == ("2", "False")
    assert float(seconds) < 1.0
    assert "sample_size" in done.stderr and "-3" in done.stderr


def test_registry_yaml_error_names_file_and_line(tmp_path):
    path = tmp_path / "venues.yaml"
    path.write_text("venues:\n  A.cc/2026:\n    seed: 1\n    sample_size: [3\n")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert str(info.value).startswith(f"{path}, line 5")


@pytest.mark.parametrize(("before", "after"), [
    ("", "venues:\n  TMLR:\n    source: api\n    seed: 3\n"),
    ("# the team's venues\n", "# the team's venues\nvenues:\n  TMLR:\n    source: api\n    seed: 3\n"),
    ("venues:\n", "venues:\n  TMLR:\n    source: api\n    seed: 3\n"),
    # four-space entries, and a key after the venues: the entry goes under `venues:`, indented as its entries are
    ("venues:\n    A:\n        seed: 1\nnotes: kept\n",
     "venues:\n    A:\n        seed: 1\n    TMLR:\n      source: api\n      seed: 3\nnotes: kept\n"),
])
def test_venues_add_registers_in_an_empty_or_unusual_registry(tmp_path, monkeypatch, capsys, before, after):
    registry = tmp_path / "venues.yaml"
    registry.write_text(before)
    monkeypatch.setenv("PEERIFY_VENUES", str(registry))
    assert cli.main(["venues", "add", "TMLR", "--seed", "3"]) == 0
    assert registry.read_text() == after
    assert load_registry(registry)["TMLR"].seed == 3
    assert "registered TMLR" in capsys.readouterr().out


@pytest.mark.parametrize("before", ["venues: {}\n", "venues: {A: {seed: 1}}\n", "venues: null\n"])
def test_venues_add_refuses_a_registry_it_cannot_add_to_and_leaves_it_untouched(tmp_path, monkeypatch, capsys,
                                                                                 before):
    registry = tmp_path / "venues.yaml"
    registry.write_text(before)
    monkeypatch.setenv("PEERIFY_VENUES", str(registry))
    assert cli.main(["venues", "add", "TMLR", "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert err == (f"not added: {registry}: its `venues:` is not a block mapping that venue 'TMLR' can be added to "
                   "without rewriting the file; add the entry under `venues:` by hand\n")
    assert registry.read_text() == before and list(tmp_path.iterdir()) == [registry]


def test_venues_add_checks_the_snapshot_folder_when_it_is_added(tmp_path, monkeypatch, capsys):
    registry = tmp_path / "venues.yaml"
    registry.write_text("venues:\n")
    monkeypatch.setenv("PEERIFY_VENUES", str(registry))
    (tmp_path / "empty").mkdir()
    (tmp_path / "misshapen").mkdir()
    (tmp_path / "misshapen" / "submissions.json").write_text('{"notes": "none"}')
    refused = {"/etc": "--snapshot /etc: not a venue snapshot (snapshot /etc: no submissions.json",
               "empty": f"--snapshot {tmp_path / 'empty'}: not a venue snapshot",
               "misshapen": "submissions.json: 'notes' is a string, expected a list",
               "gone": f"--snapshot {tmp_path / 'gone'}: no such folder",
               str(SAMPLE / "submissions.json"): "submissions.json: not a folder"}
    for snapshot, reason in refused.items():
        assert cli.main(["venues", "add", "S", "--source", "snapshot", "--snapshot", snapshot]) == 2, snapshot
        err = capsys.readouterr().err
        assert err.startswith("not added: ") and reason in err and err.count("\n") == 1, err
    assert cli.main(["venues", "add", "S", "--snapshot", str(SAMPLE)]) == 2  # a live venue reads no snapshot
    assert "--snapshot is read by --source snapshot venues only" in capsys.readouterr().err
    assert registry.read_text() == "venues:\n"
    assert cli.main(["venues", "add", "S", "--source", "snapshot", "--snapshot", str(SAMPLE)]) == 0
    assert load_registry(registry)["S"].snapshot == str(SAMPLE)
