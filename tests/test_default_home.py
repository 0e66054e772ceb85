"""The README's walkthrough in a plain shell, without `make` and without DAGSTER_HOME: every `peerify` command uses
the lake's Dagster home (the project's `.dagster_home/` for the default lake), runs show under their job in the UI,
a release finds the build's gate results, and the venue's metrics cover every configuration built for it whichever
Dagster home the last build used."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from peerify_dagster import paths
from peerify_dagster.cli.home import REPOSITORY_LABEL
from peerify_dagster.resources.lake import Lake
from tests.cli_support import cli_env, fresh_home, peerify
from tests.support import SAMPLE_RECORDING, sample_registry

CONFIGURATIONS = ("configurations:\n"
                  "  hybrid-top3: {verifier: verifiers, mode: rag, retriever: hybrid, k: 3}\n"
                  "  oracle: {verifier: verifiers, mode: oracle}\n"
                  "venues:\n  sample: [hybrid-top3]\n")


@pytest.fixture(scope="module")
def plain_shell(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("plain")
    configurations = tmp / "configurations.yaml"
    configurations.write_text(CONFIGURATIONS)
    lake = Lake(tmp / "lake")
    registry = sample_registry(tmp, llm_recording=str(SAMPLE_RECORDING))
    env = cli_env(lake.root, registry, None, PEERIFY_CONFIGURATIONS=str(configurations))
    assert "DAGSTER_HOME" not in env
    built = peerify("build", "sample", env=env, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    return {"tmp": tmp, "lake": lake, "env": env, "built": built}


def test_without_dagster_home_a_build_keeps_its_runs_in_the_lakes_home(plain_shell):
    home = plain_shell["lake"].root / ".dagster_home"
    assert (home / "dagster.yaml").read_text() == (paths.REPO_ROOT / "dagster.yaml").read_text()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        # The filter the UI's job page uses: the job's name and its code location's repository label.
        for job in ("build_venue", "venue_predictions", "venue_results"):
            runs = instance.get_runs(dg.RunsFilter(job_name=job, tags={".dagster/repository": REPOSITORY_LABEL}))
            assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS], job


def test_the_repository_label_is_the_workspaces_code_location():
    [location] = yaml.safe_load((paths.REPO_ROOT / "workspace.yaml").read_text())["load_from"]
    assert REPOSITORY_LABEL == f"__repository__@{location['python_module']['location_name']}"


def test_the_default_home_of_the_projects_lake_is_the_projects_dagster_home(monkeypatch, tmp_path):
    assert paths.dagster_home() == str(paths.REPO_ROOT / ".dagster_home")
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "lake"))
    assert paths.dagster_home() == str(tmp_path / "lake" / ".dagster_home")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert paths.dagster_home() == str(tmp_path / "home")


def test_a_release_from_a_plain_shell_reads_the_builds_gate_results(plain_shell):
    released = peerify("release", "--venue", "sample", "--version", "0.1.0", env=plain_shell["env"], timeout=600)
    assert released.returncode == 0, released.stderr[-3000:]
    assert (plain_shell["lake"].root / "releases" / "0.1.0" / "manifest.json").exists()


def test_metrics_cover_every_built_configuration_whichever_home_built_the_last_one(plain_shell):
    # Another Dagster home (a colleague's DAGSTER_HOME) builds one more configuration of the same lake: its instance
    # has never heard of hybrid-top3, yet the venue's metrics still score it.
    other = cli_env(plain_shell["lake"].root, Path(plain_shell["env"]["PEERIFY_VENUES"]),
                    fresh_home(plain_shell["tmp"] / "other-home"),
                    PEERIFY_CONFIGURATIONS=plain_shell["env"]["PEERIFY_CONFIGURATIONS"])
    added = peerify("build", "sample", "--configuration", "oracle", env=other, timeout=900)
    assert added.returncode == 0, added.stderr[-3000:]
    metrics = plain_shell["lake"].read_table("metrics", "sample")
    assert sorted(set(metrics["configuration"])) == ["hybrid-top3", "oracle"]
