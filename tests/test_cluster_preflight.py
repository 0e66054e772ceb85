"""The cluster profile's preflight (cli/cluster.py `check_cluster_services`), against the real Redis and Postgres on
loopback and a closed port: `peerify build` and `peerify worker` refuse in one line, naming the variable and its URL
without the password, when a server does not answer, or (a build on PEERIFY_EXECUTOR=celery) when no worker
listens; a real `peerify worker` answering lets the build's check pass."""

from __future__ import annotations

import time

import pytest

from peerify_dagster.cli.cluster import CONNECT_TIMEOUT_S, check_cluster_services, without_password
from peerify_dagster.cli.common import ConfigError
from peerify_dagster.resources.local_services import free_port
from tests.fakes.cli import SAMPLE_RECORDING, cli_env, fresh_home, peerify, sample_registry, start_peerify, stop_process

REDIS_DB = 7  # this module's own database
SECRET = "s3cret-pw"
BUILD = "`peerify build`"


@pytest.fixture
def closed_port() -> int:
    return free_port()  # nothing listens on it


@pytest.fixture(scope="module")
def redis_url(redis_service) -> str:
    return redis_service.url_for(REDIS_DB)


@pytest.fixture(scope="module")
def postgres_url(postgres_service) -> str:
    return postgres_service.create_database("preflight_test")


def refusal(monkeypatch, command: str = BUILD, workers: bool = True, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        check_cluster_services(command, workers=workers)
    assert time.monotonic() - started < CONNECT_TIMEOUT_S + 3  # a short connect, not a hang
    message = str(refused.value)
    assert "\n" not in message and SECRET not in message
    return message


def test_a_password_is_hidden_and_a_url_without_one_is_unchanged():
    assert without_password(f"redis://:{SECRET}@host:6379/0") == "redis://:***@host:6379/0"
    assert without_password(f"postgresql+psycopg2://peerify:{SECRET}@db:5432/dagster") == \
        "postgresql+psycopg2://peerify:***@db:5432/dagster"
    assert without_password("redis://user@host:6379/0") == "redis://user@host:6379/0"
    assert without_password("redis://host:6379/0") == "redis://host:6379/0"


def test_servers_that_answer_pass(monkeypatch, redis_url, postgres_url):
    monkeypatch.setenv("PEERIFY_REDIS_URL", redis_url)
    monkeypatch.setenv("PEERIFY_POSTGRES_URL", postgres_url)
    check_cluster_services(BUILD, workers=True)  # the in-process executor: no worker needed


def test_nothing_set_is_the_single_machine_default_and_checks_nothing():
    check_cluster_services(BUILD, workers=True)


def test_a_closed_redis_port_is_refused_naming_the_variable(monkeypatch, closed_port):
    message = refusal(monkeypatch, PEERIFY_REDIS_URL=f"redis://:{SECRET}@127.0.0.1:{closed_port}/0")
    assert message.startswith(f"{BUILD}: PEERIFY_REDIS_URL=redis://:***@127.0.0.1:{closed_port}/0: "
                              "Redis does not answer"), message


def test_a_closed_postgres_port_is_refused_naming_the_variable(monkeypatch, redis_url, closed_port):
    url = f"postgresql+psycopg2://peerify:{SECRET}@127.0.0.1:{closed_port}/dagster"
    message = refusal(monkeypatch, PEERIFY_REDIS_URL=redis_url, PEERIFY_POSTGRES_URL=url)
    assert message.startswith(f"{BUILD}: PEERIFY_POSTGRES_URL=postgresql+psycopg2://peerify:***@127.0.0.1:"
                              f"{closed_port}/dagster: Postgres does not answer"), message


def test_a_wrong_postgres_password_is_refused(monkeypatch, postgres_service):
    url = postgres_service.url_for("postgres").replace(postgres_service.password, SECRET)
    message = refusal(monkeypatch, PEERIFY_POSTGRES_URL=url)
    assert "PEERIFY_POSTGRES_URL=" in message and "password authentication failed" in message, message


def test_celery_without_a_listening_worker_is_refused(monkeypatch, redis_url):
    message = refusal(monkeypatch, PEERIFY_EXECUTOR="celery", PEERIFY_REDIS_URL=redis_url)
    assert message == (f"{BUILD}: PEERIFY_EXECUTOR=celery, but no Celery worker answered on PEERIFY_REDIS_URL="
                       f"{redis_url} within 2 s: start one with `peerify worker`")
    check_cluster_services("`peerify worker`", workers=False)  # a worker needs no other worker


def test_celery_needs_redis_and_the_variables_are_checked(monkeypatch):
    assert "PEERIFY_EXECUTOR=celery needs PEERIFY_REDIS_URL" in refusal(monkeypatch, PEERIFY_EXECUTOR="celery")
    assert "PEERIFY_EXECUTOR='dask'" in refusal(monkeypatch, PEERIFY_EXECUTOR="dask")
    monkeypatch.delenv("PEERIFY_EXECUTOR")
    assert "PEERIFY_LOST_WORKER_RETRIES='-1'" in refusal(monkeypatch, PEERIFY_LOST_WORKER_RETRIES="-1")


def test_build_and_worker_refuse_a_closed_port_in_one_line(tmp_path, closed_port):
    registry = sample_registry(tmp_path, llm_recording=str(SAMPLE_RECORDING))
    url = f"redis://:{SECRET}@127.0.0.1:{closed_port}/0"
    env = cli_env(tmp_path / "lake", registry, fresh_home(tmp_path / "home"), PEERIFY_REDIS_URL=url)
    for command in (("build", "sample"), ("worker",)):
        refused = peerify(*command, env=env, timeout=300)
        assert refused.returncode == 2, refused.stderr[-3000:]
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith(f"`peerify {command[0]}`: PEERIFY_REDIS_URL=redis://:***@127.0.0.1:{closed_port}/0: "
                               "Redis does not answer"), line
    assert not (tmp_path / "lake").exists()  # refused before the lake was touched


def test_a_listening_worker_lets_a_celery_build_start(monkeypatch, tmp_path, redis_url):
    env = cli_env(tmp_path / "lake", sample_registry(tmp_path), None, PEERIFY_REDIS_URL=redis_url)
    worker = start_peerify("worker", "--name", "preflight-w", logs=tmp_path / "worker", env=env)
    try:
        deadline = time.monotonic() + 180
        while " ready." not in (tmp_path / "worker.err").read_text() and worker.poll() is None:
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.5)
        assert worker.poll() is None, (tmp_path / "worker.err").read_text()[-3000:]
        monkeypatch.setenv("PEERIFY_EXECUTOR", "celery")
        monkeypatch.setenv("PEERIFY_REDIS_URL", redis_url)
        check_cluster_services(BUILD, workers=True)
    finally:
        stop_process(worker)
    assert "DuplicateTaskNameWarning" not in (tmp_path / "worker.err").read_text()
