"""What the web app's tests share: the sample venue built once into a lake, a live server (uvicorn in a thread on a
free loopback port) over a given lake, a real browser (Debian's chromium driven by Playwright, never a downloaded
one), and small helpers to sign in and to send raw requests. The pytest fixtures built on them are in conftest.py."""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import uvicorn

from peerify_dagster.web.app import create_app
from tests.fakes.cli import SAMPLE_RECORDING, cli_env, fresh_home, peerify, sample_registry

CHROMIUM = "chromium"
CHROMIUM_MISSING = "Debian's chromium is not installed (`make browser` installs it with apt)"
SAMPLE_CONFIGURATIONS = ("hybrid-top3", "full-context-paper-sourced", "oracle")
_CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def build_sample_lake(folder: Path) -> Path:
    """`peerify build sample` into `folder/lake` (its own Dagster home and registry in `folder`), answered entirely by
    the sample's LLM recording; the lake's root."""
    folder.mkdir(parents=True, exist_ok=True)
    registry = sample_registry(folder, llm_recording=str(SAMPLE_RECORDING))
    env = cli_env(folder / "lake", registry, fresh_home(folder / "home"))
    built = peerify("build", "sample", env=env, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "0 made live" in built.stderr, built.stderr[-2000:]
    return folder / "lake"


def copy_lake(source: Path, target: Path) -> Path:
    """A writable copy of a built lake (the session's built lake stays as it was built)."""
    shutil.copytree(source, target)
    return target


@dataclass
class LiveServer:
    """A running web app: its base URL, the lake it serves and its access token (None: loopback, no token)."""

    url: str
    lake_root: Path
    token: str | None

    def client(self) -> Client:
        """A plain HTTP client of the server (no browser), keeping cookies like one."""
        return Client(self.url)


class Client(requests.Session):
    """A requests session on one server: paths relative to its base URL, redirects followed only with
    `follow=True` (tests look at them)."""

    def __init__(self, base_url: str):
        super().__init__()
        self.base_url = base_url

    def request(self, method: str, url: str, *args, follow: bool = False, **kwargs) -> requests.Response:
        kwargs.update(allow_redirects=follow)  # requests' get() always passes allow_redirects=True
        kwargs.setdefault("timeout", 30)
        return super().request(method, self.base_url + url, *args, **kwargs)


@contextmanager
def serve_app(app) -> Iterator[str]:  # noqa: ANN001 - any ASGI app
    """Any ASGI app served by uvicorn in a thread on a free loopback port until the block ends; its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the web app did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


@contextmanager
def live_server(lake_root: Path, token: str | None = None, **app_options) -> Iterator[LiveServer]:
    """The web app over `lake_root` served on a free loopback port until the block ends; `app_options` go to
    `create_app` (dagster_url, max_body_bytes, ...)."""
    with serve_app(create_app(lake_root, token=token, **app_options)) as url:
        yield LiveServer(url, Path(lake_root), token)


def chromium_path() -> str:
    """Debian's chromium, or a skip naming how to install it."""
    path = shutil.which(CHROMIUM)
    if path is None:
        pytest.skip(CHROMIUM_MISSING)
    return path


def csrf_from(html: str) -> str:
    """The CSRF token of a page's forms."""
    match = _CSRF_INPUT.search(html)
    assert match, "the page has no form with a CSRF field"
    return match.group(1)


def sign_in_client(client: Client, name: str, token: str | None = None) -> None:
    """Sign a plain HTTP client in as `name` (with the server's access token when it has one)."""
    page = client.get("/signin")
    form = {"name": name, "csrf_token": csrf_from(page.text), "next": "/"}
    if token is not None:
        form["token"] = token
    answer = client.post("/signin", data=form)
    assert answer.status_code == 303, answer.text[-1500:]


def sign_in_page(page, server: LiveServer, name: str) -> None:  # noqa: ANN001 - a Playwright Page
    """Sign a browser page in as `name` through the sign-in form (the token field too when the server has one)."""
    page.goto(f"{server.url}/signin")
    page.fill("input[name=name]", name)
    if server.token is not None and page.locator("input[name=token]").count():
        page.fill("input[name=token]", server.token)
    page.click("form.stacked button[type=submit]")
    page.wait_for_selector("[data-testid=annotator]")
