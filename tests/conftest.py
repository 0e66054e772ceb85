"""Every test starts from an environment without the project's, the providers' and the model hubs' variables, so
a developer's shell (a chosen LLM profile, API keys, a local model, an offline hub, a DAGSTER_HOME) cannot change
what a test sees. Tests that need one of them set it themselves with monkeypatch."""

from __future__ import annotations

import os

import pytest

ISOLATED_PREFIXES = ("PEERIFY_", "OPENAI_", "ANTHROPIC_", "VLLM_", "OPENREVIEW_", "HF_", "TRANSFORMERS_",
                     "SENTENCE_TRANSFORMERS_")
ISOLATED_NAMES = ("DAGSTER_HOME",)


def isolated(name: str) -> bool:
    return name.startswith(ISOLATED_PREFIXES) or name in ISOLATED_NAMES


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if isolated(name)]:
        monkeypatch.delenv(name)


@pytest.fixture(autouse=True, scope="session")
def _isolated_session_environment():
    # Module- and session-scoped fixtures are set up before any function-scoped one: clear for them too.
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if isolated(name)]:
            patch.delenv(name)
        yield
