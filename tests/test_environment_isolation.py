"""The suite does not depend on the caller's shell: conftest.py clears the project's, providers' and hubs' variables
for every test, and nothing reads them at import time (which no fixture could undo). The proof runs part of the
suite in a child pytest whose environment sets every variable that used to change results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from peerify_dagster.definitions import build_resources
from peerify_dagster.resources.dagster_resources import EmbeddingResource, LakeResource, RetrievalResource
from peerify_dagster.resources.llm_gateway import LLMGateway

REPO = Path(__file__).resolve().parents[1]
HOSTILE_SHELL = {
    "PEERIFY_LLM_PROFILE": "paper",
    "PEERIFY_ROLE_VERIFIERS": "no-such-model",
    "PEERIFY_EMBEDDING_MODEL": "/no/such/embedding-model",
    "PEERIFY_RERANKER_PATH": "/no/such/reranker",
    "PEERIFY_LAKE": "/no/such/lake",
    "PEERIFY_LLM_CACHE_MODE": "replay-only",
    "OPENAI_API_KEY": "sk-from-the-shell",
    "HF_HUB_OFFLINE": "0",
}


def test_defaults_when_the_environment_is_clean(tmp_path):
    assert EmbeddingResource().model_name() is None  # the packaged model
    assert RetrievalResource().reranker() is None
    assert LLMGateway(tmp_path).registry.profile == "offline"
    assert LakeResource().lake().root.name == "data_lake"
    assert build_resources()["io_manager"].root is None


def test_resources_read_the_environment_when_used_not_when_imported(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERIFY_EMBEDDING_MODEL", "/models/minilm")
    monkeypatch.setenv("PEERIFY_RERANKER_PATH", "/models/cross-encoder")
    monkeypatch.setenv("PEERIFY_LAKE", str(tmp_path / "moved-lake"))
    assert EmbeddingResource().model_name() == "/models/minilm"
    assert RetrievalResource().reranker_folder() == "/models/cross-encoder"
    assert LakeResource().lake().root == tmp_path / "moved-lake"
    assert EmbeddingResource(model="/explicit").model_name() == "/explicit"  # configuration outranks the variable


def test_embedder_leaves_the_hub_setting_of_the_process_alone():
    from peerify_dagster.resources.embedder import Embedder

    Embedder().embed(["the model is loaded when it embeds"])
    assert "HF_HUB_OFFLINE" not in os.environ


def test_suite_passes_in_a_shell_that_sets_every_setting(tmp_path):
    env = {**os.environ, **HOSTILE_SHELL}
    chosen = ["tests/test_environment_isolation.py::test_defaults_when_the_environment_is_clean",
              "tests/test_environment_isolation.py::test_embedder_leaves_the_hub_setting_of_the_process_alone",
              "tests/test_registry_and_cli.py::test_cli_venues_add_and_sql"]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 passed" in result.stdout
