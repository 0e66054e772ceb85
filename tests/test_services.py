"""The loopback servers the cluster tests and `peerify cluster up` run (resources/local_services.py): each answers,
keeps its data under its root, refuses wrong credentials where it has them, and is gone, port and process, once
stopped."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import psycopg2
import pytest
import redis

from peerify_dagster.resources.local_services import PostgresService, RedisService, SeaweedS3Service, ServiceFailed
from peerify_dagster.resources.processes import process_alive
from tests.fakes.cli import port_open


def uid_of(pid: int) -> int:
    """The real user id a process runs as."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


# -- Redis ------------------------------------------------------------------------------------------------------------
def test_redis_answers_on_loopback_with_separate_databases(redis_service):
    assert redis_service.url == f"redis://127.0.0.1:{redis_service.port}/0"
    first, second = (redis.Redis.from_url(redis_service.url_for(db)) for db in (14, 15))
    first.set("peerify-test", "fourteen")
    assert first.get("peerify-test") == b"fourteen"
    assert second.get("peerify-test") is None
    first.delete("peerify-test")


# -- Postgres ---------------------------------------------------------------------------------------------------------
def test_postgres_creates_databases_in_both_url_forms(postgres_service):
    url = postgres_service.create_database("services_test")
    assert url.startswith("postgresql+psycopg2://") and url.endswith(f":{postgres_service.port}/services_test")
    with psycopg2.connect(postgres_service.dsn_for("services_test")) as connection, connection.cursor() as cursor:
        cursor.execute("select current_database(), current_user")
        assert cursor.fetchone() == ("services_test", "peerify")
    if os.geteuid() == 0:  # postgres refuses root: it runs as the postgres system user
        assert uid_of(postgres_service.pid) != 0


def test_postgres_refuses_a_wrong_password(postgres_service):
    wrong = postgres_service.dsn.replace(postgres_service.password, "not-the-password")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(wrong, connect_timeout=5)


# -- SeaweedFS S3 -----------------------------------------------------------------------------------------------------
def test_s3_stores_objects_for_signed_requests(s3_service):
    assert s3_service.make_bucket("services-test") == "s3://services-test"
    assert s3_service.make_bucket("services-test") == "s3://services-test"  # again: no error
    fs = s3_service.filesystem()
    fs.pipe("services-test/table/part-0.parquet", b"object bytes")
    assert s3_service.filesystem().cat("services-test/table/part-0.parquet") == b"object bytes"
    assert s3_service.env() == {"AWS_ENDPOINT_URL": s3_service.endpoint, "AWS_ACCESS_KEY_ID": s3_service.access_key,
                                "AWS_SECRET_ACCESS_KEY": s3_service.secret_key, "AWS_REGION": "us-east-1"}


def test_s3_refuses_unsigned_and_wrongly_signed_requests(s3_service):
    s3_service.make_bucket("services-private")
    s3_service.filesystem().pipe("services-private/secret.txt", b"not for strangers")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{s3_service.endpoint}/services-private/secret.txt", timeout=10)
    assert refused.value.code == 403
    import s3fs

    for key, secret in ((s3_service.access_key, "wrong-secret"), ("unknown-key", s3_service.secret_key)):
        stranger = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=s3_service.endpoint,
                                     client_kwargs={"region_name": "us-east-1"}, skip_instance_cache=True)
        with pytest.raises(PermissionError):
            stranger.cat("services-private/secret.txt")
        with pytest.raises(PermissionError):
            stranger.pipe("services-private/planted.txt", b"x")
    assert not s3_service.filesystem().exists("services-private/planted.txt")


# -- lifecycle --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("service_class", [RedisService, PostgresService, SeaweedS3Service])
def test_a_stopped_server_leaves_no_process_port_or_private_data(service_class, tmp_path):
    service = service_class(tmp_path / "server").start()
    pid, port = service.pid, service.port
    assert port_open(port) and process_alive(pid)
    assert service.log_path.parent == tmp_path / "server" and service.log_path.exists()
    private_data = getattr(service, "data_dir", None)
    service.stop()
    assert not process_alive(pid)
    assert not port_open(port)
    if private_data is not None and not private_data.is_relative_to(tmp_path):
        assert not private_data.exists()
    service.stop()  # twice: nothing to do


def test_a_server_that_cannot_start_names_itself_and_its_log(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        service = RedisService(tmp_path / "redis")
        service.port = taken.getsockname()[1]  # another process holds the port it was to use
        with pytest.raises(ServiceFailed, match=r"redis exited with status \d+ before it answered") as failed:
            service.start()
    assert str(service.log_path) in str(failed.value)
    assert "Address already in use" in str(failed.value)
    assert service.pid is None
