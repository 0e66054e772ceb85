"""OpenReview access: the real openreview-py clients (API v2, and v1 for venues before 2023), the crawler that
lands snapshots, and the snapshot reader.

A crawl writes exactly what the API returned into a snapshot folder (see the sample venue's
README for the layout); every later stage reads the snapshot, so any crawl can be replayed offline.
Writes are atomic per file (temp file + rename) and a forum's file exists only once it is complete,
which is what makes crawls resumable: stored forums are not fetched again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import openreview
import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from peerify_dagster.domain.forum_tables import ForumNotes
from peerify_dagster.domain.notes import api_version_from_year, note_api_version
from peerify_dagster.domain.pdfs import PdfProblem, inspect_pdf
from peerify_dagster.domain.venues import DEFAULT_API_URL
from peerify_dagster.resources.files import json_bytes
from peerify_dagster.resources.store import LakeStore, Location, location_of

RETRY_STATUSES = (429, 500, 502, 503, 504)
DEFAULT_API_V1_URL = "https://api.openreview.net"
TEXT_MANUSCRIPT_EXTENSIONS = ("html", "md", "txt")


def now_ms() -> int:
    return int(time.time() * 1000)


class _TimeoutAdapter(HTTPAdapter):
    """openreview-py sends requests without a timeout; a hung server would stall a crawl forever."""

    def __init__(self, timeout_s: float, **kwargs: Any):
        self._timeout_s = timeout_s
        super().__init__(**kwargs)

    def send(self, request, **kwargs):  # noqa: ANN001 - requests' signature
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout_s
        return super().send(request, **kwargs)


@dataclass(frozen=True)
class HttpPolicy:
    """Timeout and retry settings; one retry layer (urllib3's, inside the client's session)."""

    timeout_s: float = 60.0
    retries: int = 6
    backoff_s: float = 1.0
    backoff_max_s: float = 120.0


OpenReviewClient = openreview.api.OpenReviewClient | openreview.Client


def api_url_for(api_url: str, api_version: int) -> str:
    """The API v1 host for a v1 venue registered with the default (v2) URL; any other URL as given."""
    return DEFAULT_API_V1_URL if api_version == 1 and api_url.rstrip("/") == DEFAULT_API_URL else api_url


def retrying_adapter(policy: HttpPolicy) -> HTTPAdapter:
    """The transport every HTTP client here mounts: urllib3 retries (backoff, `Retry-After` honoured on 429/503)
    on connection errors, read timeouts and RETRY_STATUSES, and `policy.timeout_s` on every request."""
    retry = Retry(
        total=policy.retries,
        connect=policy.retries,
        read=policy.retries,
        status=policy.retries,
        backoff_factor=policy.backoff_s,
        backoff_max=policy.backoff_max_s,
        backoff_jitter=policy.backoff_s / 2,
        status_forcelist=RETRY_STATUSES,
        raise_on_status=False,
        respect_retry_after_header=True,
    )
    return _TimeoutAdapter(policy.timeout_s, max_retries=retry, pool_maxsize=16)


def make_client(api_url: str, policy: HttpPolicy = HttpPolicy(), api_version: int = 2) -> OpenReviewClient:
    """The real client: `openreview.api.OpenReviewClient` for API v2, `openreview.Client` for API v1. Anonymous
    unless OPENREVIEW_USERNAME/OPENREVIEW_PASSWORD or OPENREVIEW_TOKEN are set in the environment (read by us or
    by openreview-py; never logged)."""
    token = os.environ.get("OPENREVIEW_TOKEN") or None
    client_class = openreview.Client if api_version == 1 else openreview.api.OpenReviewClient
    client = client_class(baseurl=api_url, token=token)
    adapter = retrying_adapter(policy)
    # The client mounts its own adapters on several URL prefixes (edits endpoints among them) and
    # requests picks the longest matching prefix, so every one of them is replaced.
    for prefix in list(client.session.adapters) + ["http://", "https://"]:
        client.session.mount(prefix, adapter)
    return client


def unreachable_reason(api_url: str, timeout_s: float = 10.0) -> str | None:
    """Why the API host cannot be reached (no network, unknown host, refused, no answer), in a few words; None when
    it answers at all (any HTTP status). One plain request without retries, so an offline machine learns it at once
    rather than after a minute of backoff."""
    try:
        requests.get(api_url, timeout=timeout_s, allow_redirects=False)
    except requests.exceptions.Timeout:
        return f"no answer within {timeout_s:g} s"
    except requests.exceptions.RequestException as exc:
        text = str(exc)
        if any(marker in text for marker in ("NameResolution", "Name or service not known", "Failed to resolve",
                                             "nodename nor servname", "Temporary failure in name resolution")):
            return "its host name does not resolve (no network or DNS)"
        if "Connection refused" in text:
            return "the connection was refused"
        return f"{type(exc).__name__}: {text[:200]}"
    return None


class _RawResponses:
    """Keeps the JSON bodies the client received, so notes are landed exactly as the API sent them
    (the client's Note objects drop fields such as `number`, `tcdate` and `domain`)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    def __call__(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if response.ok and "application/json" in response.headers.get("Content-Type", ""):
            try:
                self.bodies.append(response.json())
            except ValueError:
                pass  # the client itself raises on this body; the crawler records that error

    def items(self, key: str) -> list[Any]:
        seen: set[str] = set()
        items = []
        for body in self.bodies:
            for item in body.get(key, []) if isinstance(body, dict) else []:
                item_id = item.get("id") if isinstance(item, dict) else None
                if item_id is not None and item_id in seen:
                    continue
                if item_id is not None:
                    seen.add(item_id)
                items.append(item)
        return items


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason code, message) for a failed request, for the crawl log and `ingest_errors`."""
    if isinstance(exc, openreview.OpenReviewException):
        detail = exc.args[0] if exc.args else {}
        status = detail.get("status") if isinstance(detail, dict) else None
        message = detail.get("message") if isinstance(detail, dict) else str(detail)
        if status is None and isinstance(message, str):
            for code in (404, *RETRY_STATUSES, 400, 401, 403):
                if str(code) in message[:40]:
                    status = code
                    break
        return (f"http_{status}" if status else "api_error"), str(message)[:300]
    if isinstance(exc, (requests.exceptions.Timeout,)) or "timed out" in str(exc).lower():
        return "timeout", str(exc)[:300]
    if isinstance(exc, (json.JSONDecodeError, requests.exceptions.JSONDecodeError)):
        return "malformed_json", f"response body is not valid JSON ({exc})"[:300]
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection_error", str(exc)[:300]
    return "unexpected_error", f"{type(exc).__name__}: {exc}"[:300]


@dataclass(frozen=True)
class FetchOutcome:
    forum_id: str | None  # None for the venue's submission list
    item: str  # "forum" | "pdf" | "submissions"
    status: str  # "fetched" | "stored" (already in the snapshot) | "failed" | "absent"
    reason: str | None = None
    message: str | None = None
    seconds: float = 0.0


class MalformedSnapshotFile(ValueError):
    """A snapshot file that is valid JSON but not of the expected shape; the message names the file and the problem."""


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _read_record(path: Path, list_key: str) -> dict:
    """A snapshot record (forum or submissions file): a JSON object whose `list_key` is a list."""
    record = json.loads(path.read_text())
    name = f"{path.parent.name}/{path.name}"
    if not isinstance(record, dict):
        raise MalformedSnapshotFile(f"{name} is {_json_kind(record)}, expected an object with a '{list_key}' list")
    if not isinstance(record.get(list_key), list):
        found = _json_kind(record[list_key]) if list_key in record else "missing"
        raise MalformedSnapshotFile(f"{name}: '{list_key}' is {found}, expected a list")
    return record


class SnapshotReader:
    """Reads a snapshot folder (sample venue, or a crawl's landing folder). Files of the wrong shape raise
    `MalformedSnapshotFile` naming the file, so a caller can record the item and go on."""

    def __init__(self, folder: str | Location):
        self.folder = location_of(folder)  # a local folder, or a crawl's landing folder in an S3 lake

    def venue(self) -> dict:
        path = self.folder / "venue.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def submissions(self) -> list[dict]:
        path = self.folder / "submissions.json"
        if not path.exists():
            raise FileNotFoundError(f"snapshot {self.folder}: no submissions.json (crawl the venue first)")
        return _read_record(path, "notes")["notes"]

    def forum_path(self, forum_id: str) -> Path:
        return self.folder / "forums" / f"{forum_id}.json"

    def has_forum(self, forum_id: str) -> bool:
        return self.forum_path(forum_id).exists()

    def forum(self, forum_id: str) -> ForumNotes:
        record = _read_record(self.forum_path(forum_id), "notes")
        fetched_at = record.get("fetched_at")
        return ForumNotes(forum_id=forum_id, notes=record["notes"],
                          fetched_at=fetched_at if isinstance(fetched_at, int) else None)

    def forum_edits(self, forum_id: str) -> list[dict]:
        edits = _read_record(self.forum_path(forum_id), "notes").get("edits", [])
        return edits if isinstance(edits, list) else []  # edits are optional: without them the latest PDF is taken

    def pdf_meta(self, forum_id: str) -> dict | None:
        path = self.folder / "pdfs" / f"{forum_id}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def pdf_bytes(self, forum_id: str) -> bytes | None:
        path = self.folder / "pdfs" / f"{forum_id}.pdf"
        return path.read_bytes() if path.exists() else None

    def text_manuscript(self, forum_id: str) -> Path | None:
        """A manuscript the venue provides as HTML, Markdown or plain text (`manuscripts/<forum>.<ext>`)."""
        for extension in TEXT_MANUSCRIPT_EXTENSIONS:
            path = self.folder / "manuscripts" / f"{forum_id}.{extension}"
            if path.exists():
                return path
        return None


def probe_api_version(client: openreview.api.OpenReviewClient, venue_id: str) -> int:
    """2 when the API v2 lists submissions of the venue (under its `submission_name`), else 1."""
    name = "Submission"
    try:
        group = client.get_group(venue_id)
        name = ((group.content or {}).get("submission_name") or {}).get("value") or name
    except openreview.OpenReviewException:
        pass  # no v2 group: the submission query below decides
    return 2 if client.get_notes(invitation=f"{venue_id}/-/{name}", limit=1) else 1


def resolve_api_version(configured: int | None, openreview_id: str, reader: SnapshotReader, live: bool,
                        probe: Callable[[], int]) -> tuple[int, str]:
    """The venue's API version and how it was decided: the registry's `api_version`; else, for a snapshot venue,
    its `venue.json`; else the year in the venue id (before 2023: v1); else what a crawl already landed or a probe
    of the live API; else the shape of a snapshot's first submission note."""
    if configured is not None:
        return configured, "registry"
    landed = reader.venue().get("api_version")
    if not live and landed in (1, 2):
        return landed, "snapshot venue.json"
    by_year = api_version_from_year(openreview_id)
    if by_year is not None:
        return by_year, "venue year"
    if live:
        return (landed, "landed venue.json") if landed in (1, 2) else (probe(), "probe")
    shapes = [note_api_version(note) for note in reader.submissions()[:1]]
    return (shapes[0], "note shape") if shapes and shapes[0] else (2, "default")


def _first_review_cdate(notes: list[Any]) -> int | None:
    dates = [
        note.get("cdate")
        for note in notes
        if isinstance(note, dict)
        and any(str(i).endswith("/Official_Review") for i in note.get("invitations") or [note.get("invitation")])
        and note.get("cdate")
    ]
    return min(dates) if dates else None


def choose_reviewed_edit(edits: list[dict], first_review_cdate: int | None) -> dict | None:
    """The last edit carrying a PDF made before the first review: the version reviewers read."""
    if first_review_cdate is None:
        return None
    with_pdf = [
        e for e in edits
        if isinstance(e, dict) and ((e.get("note") or {}).get("content") or {}).get("pdf")
        and (e.get("cdate") or e.get("tcdate") or 0) <= first_review_cdate
    ]
    return max(with_pdf, key=lambda e: (e.get("cdate") or e.get("tcdate") or 0, e["id"])) if with_pdf else None


class OpenReviewCrawler:
    """Lands one venue into a snapshot folder with the real client (API v2, or v1 for `api_version=1`);
    resumable and fault tolerant."""

    def __init__(self, client: OpenReviewClient, venue_id: str, snapshot_dir: Path,
                 log: Callable[[str], None] = print, api_version: int = 2):
        self.client = client
        self.venue_id = venue_id
        self.reader = SnapshotReader(snapshot_dir)
        self.store = LakeStore(snapshot_dir)  # every file written whole, once: a local rename or one S3 upload
        self.folder = self.reader.folder
        self.log = log
        self.api_version = api_version

    def _capture(self) -> _RawResponses:
        capture = _RawResponses()
        self.client.session.hooks["response"] = [capture]
        return capture

    def land_submissions(self) -> list[dict]:
        """Fetch the venue group and every submission note; (re)writes venue.json and submissions.json.
        API v1 venues list their submissions under `Blind_Submission` (double-blind) or `Submission`."""
        capture = self._capture()
        try:
            self.client.get_group(self.venue_id)
        except openreview.OpenReviewException as exc:
            self.log(f"venue {self.venue_id}: no readable venue group ({describe_failure(exc)[1]})")
        groups = [g for g in capture.items("groups") if isinstance(g, dict)]
        named = (((groups[0].get("content") or {}) if groups else {}).get("submission_name") or {})
        names = [named.get("value") or "Submission"] if self.api_version == 2 else ["Blind_Submission", "Submission"]
        for name in names:
            invitation = f"{self.venue_id}/-/{name}"
            capture = self._capture()
            self.client.get_all_notes(invitation=invitation)
            notes = capture.items("notes")
            if notes:
                break
        self.store.write_bytes(self.folder / "venue.json", json_bytes({
            "venue_id": self.venue_id, "api_version": self.api_version, "submission_invitation": invitation,
            "group": groups[0] if groups else None, "created_by": "peerify crawler", "created_at": now_ms(),
        }))
        self.store.write_bytes(self.folder / "submissions.json",
                               json_bytes({"fetched_at": now_ms(), "notes": notes}))
        self.log(f"venue {self.venue_id}: {len(notes)} submissions listed")
        return notes

    def land_forum(self, forum_id: str, refetch: bool = False) -> FetchOutcome:
        if self.reader.has_forum(forum_id) and not refetch:
            return FetchOutcome(forum_id, "forum", "stored")
        started = time.perf_counter()
        try:
            capture = self._capture()
            self.client.get_all_notes(forum=forum_id)
            notes = capture.items("notes")
            edits = self._land_edits(forum_id) if self.api_version == 2 else []  # API v1 has no note edits
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and the venue goes on
            reason, message = describe_failure(exc)
            self.log(f"forum {forum_id}: fetch failed ({reason}): {message}")
            return FetchOutcome(forum_id, "forum", "failed", reason, message, time.perf_counter() - started)
        if not notes:
            return FetchOutcome(forum_id, "forum", "failed", "empty_forum", f"forum {forum_id}: the API returned no "
                                f"notes",
                                time.perf_counter() - started)
        self.store.write_bytes(self.reader.forum_path(forum_id), json_bytes(
            {"forum_id": forum_id, "fetched_at": now_ms(), "notes": notes, "edits": edits}))
        return FetchOutcome(forum_id, "forum", "fetched", seconds=time.perf_counter() - started)

    def _land_edits(self, forum_id: str) -> list[dict]:
        capture = self._capture()
        try:
            self.client.get_note_edits(note_id=forum_id)
        except openreview.OpenReviewException:
            return []  # edits are optional: without them the latest PDF is taken and recorded as such
        return capture.items("edits")

    def land_pdf(self, forum_id: str, refetch: bool = False) -> FetchOutcome:
        if self.reader.pdf_meta(forum_id) is not None and not refetch:
            return FetchOutcome(forum_id, "pdf", "stored")
        if not self.reader.has_forum(forum_id):
            return FetchOutcome(forum_id, "pdf", "failed", "forum_missing", f"forum {forum_id}: notes not landed, PDF "
                                f"skipped")
        started = time.perf_counter()
        try:
            forum = self.reader.forum(forum_id)
        except ValueError as exc:  # unreadable JSON or a file of the wrong shape: the forum's row says so
            return FetchOutcome(forum_id, "pdf", "failed", "forum_unreadable", f"forum {forum_id}: {exc}, PDF skipped")
        edit = choose_reviewed_edit(self.reader.forum_edits(forum_id), _first_review_cdate(forum.notes))
        try:
            if edit is not None:
                try:
                    data = self.client.get_pdf(edit["id"], is_reference=True)
                    version, source_url = "under_review", f"/references/pdf?id={edit['id']}"
                except openreview.OpenReviewException:
                    edit = None
            if edit is None:
                data = self.client.get_pdf(forum_id)
                version, source_url = "latest", f"/pdf?id={forum_id}"
            inspect_pdf(data, f"paper {forum_id}")
        except PdfProblem as exc:
            self.log(f"forum {forum_id}: PDF rejected ({exc.reason}): {exc}")
            return FetchOutcome(forum_id, "pdf", "failed", exc.reason, str(exc), time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001
            reason, message = describe_failure(exc)
            if reason == "http_404":
                reason, message = "missing_pdf", f"paper {forum_id}: OpenReview has no PDF ({message})"
            self.log(f"forum {forum_id}: PDF fetch failed ({reason}): {message}")
            return FetchOutcome(forum_id, "pdf", "failed", reason, message, time.perf_counter() - started)
        self.store.write_bytes(self.folder / "pdfs" / f"{forum_id}.pdf", data)
        self.store.write_bytes(self.folder / "pdfs" / f"{forum_id}.json", json_bytes({
            "forum_id": forum_id, "version": version, "edit_id": edit["id"] if edit else None,
            "source_url": source_url, "fetched_at": now_ms(),
        }))
        return FetchOutcome(forum_id, "pdf", "fetched", seconds=time.perf_counter() - started)
