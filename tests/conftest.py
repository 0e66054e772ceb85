"""Every test starts from an environment without the project's, the providers' and the model hubs' variables, so
a developer's shell (a chosen LLM profile, API keys, a local model, an offline hub, a DAGSTER_HOME) cannot change
what a test sees. Tests that need one of them set it themselves with monkeypatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ISOLATED_PREFIXES = ("PEERIFY_", "OPENAI_", "ANTHROPIC_", "VLLM_", "OPENREVIEW_", "HF_", "TRANSFORMERS_",
                     "SENTENCE_TRANSFORMERS_", "AWS_")
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


@pytest.fixture
def models_file(request: pytest.FixtureRequest, tmp_path) -> Path:
    """The test module's model registry (its `MODELS_YAML`) as a models file."""
    path = tmp_path / "models.yaml"
    path.write_text(request.module.MODELS_YAML, encoding="utf-8")
    return path


# -- the web app's tests (helpers in tests/web_support.py) -------------------------------------------------------------
@pytest.fixture(scope="session")
def sample_lake(tmp_path_factory):
    """The sample venue built once per test session (`peerify build sample`, answered by its LLM recording): read
    it, never write to it; `web_lake` is the writable copy."""
    from tests.web_support import build_sample_lake

    return build_sample_lake(tmp_path_factory.mktemp("sample_build"))


@pytest.fixture(scope="module")
def web_lake(sample_lake, tmp_path_factory):
    """A writable copy of the built sample lake, one per test module."""
    from tests.web_support import copy_lake

    return copy_lake(sample_lake, tmp_path_factory.mktemp("web_lake") / "lake")


@pytest.fixture(scope="module")
def web_server(web_lake):
    """The web app over the module's `web_lake`, loopback, without an access token (others: `live_server`)."""
    from tests.web_support import live_server

    with live_server(web_lake) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium driven by Playwright (skipped, saying how to install it, when chromium is absent). One per
    module, not per session: while Playwright's sync API runs, its event loop counts as running in this thread, so
    `asyncio.run` in any later test module would fail."""
    from playwright.sync_api import sync_playwright

    from tests.web_support import chromium_path

    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def browser_page(browser):
    """A page in a fresh browser context (its own cookies: one annotator)."""
    context = browser.new_context()
    yield context.new_page()
    context.close()


# -- real servers on loopback for the cluster profile (resources/local_services.py) ------------------------------------
# Started once per session, only when a test asks; each test keeps to its own Redis database or key prefix and its
# own Postgres database (`postgres_service.create_database(name)`) or S3 bucket (`s3_service.make_bucket(name)`).
@pytest.fixture(scope="session")
def redis_service(tmp_path_factory):
    from peerify_dagster.resources.local_services import RedisService

    with RedisService(tmp_path_factory.mktemp("redis")) as service:
        yield service


@pytest.fixture(scope="session")
def postgres_service(tmp_path_factory):
    from peerify_dagster.resources.local_services import PostgresService

    with PostgresService(tmp_path_factory.mktemp("postgres")) as service:
        yield service


@pytest.fixture(scope="session")
def s3_service(tmp_path_factory):
    from peerify_dagster.resources.local_services import SeaweedS3Service

    with SeaweedS3Service(tmp_path_factory.mktemp("seaweedfs")) as service:
        yield service
