"""The fingerprint a build sends with each step and a worker compares with its own (step_fingerprint.py): the lake,
and the registry, configurations and model settings by content (not by path), and the loaded code; each difference
named in one line."""

from __future__ import annotations

import shutil

from peerify_dagster import step_fingerprint
from peerify_dagster.paths import REPO_ROOT


def fingerprint_with(monkeypatch, **env: str) -> dict[str, str]:
    for name in ("PEERIFY_LAKE", "PEERIFY_VENUES", "PEERIFY_CONFIGURATIONS", "PEERIFY_MODELS_FILE",
                 "PEERIFY_LLM_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return step_fingerprint.fingerprint()


def test_the_same_files_at_other_paths_match_and_another_lake_does_not(tmp_path, monkeypatch):
    for machine in ("a", "b"):
        (tmp_path / machine).mkdir()
        shutil.copy(REPO_ROOT / "venues.yaml", tmp_path / machine / "venues.yaml")
    build = fingerprint_with(monkeypatch, PEERIFY_LAKE="s3://bucket/lake/", PEERIFY_VENUES=str(tmp_path / "a" /
                                                                                               "venues.yaml"))
    worker = fingerprint_with(monkeypatch, PEERIFY_LAKE="s3://bucket/lake", PEERIFY_VENUES=str(tmp_path / "b" /
                                                                                               "venues.yaml"))
    assert step_fingerprint.differences(build, worker) == []
    stray = fingerprint_with(monkeypatch, PEERIFY_LAKE=str(tmp_path / "old-lake"),
                             PEERIFY_VENUES=str(tmp_path / "b" / "venues.yaml"))
    assert step_fingerprint.differences(build, stray) == [
        f"lake: build s3://bucket/lake, this worker {tmp_path / 'old-lake'}"]


def test_a_changed_registry_or_model_profile_is_named(tmp_path, monkeypatch):
    registry = tmp_path / "venues.yaml"
    shutil.copy(REPO_ROOT / "venues.yaml", registry)
    build = fingerprint_with(monkeypatch, PEERIFY_VENUES=str(registry))
    registry.write_text(registry.read_text() + "\n# edited on one machine only\n")
    worker = fingerprint_with(monkeypatch, PEERIFY_VENUES=str(registry), PEERIFY_LLM_PROFILE="openai")
    named = step_fingerprint.differences(build, worker)
    assert [line.split(":")[0] for line in named] == ["model settings", "venue registry"]
    assert all(", this worker " in line for line in named)
