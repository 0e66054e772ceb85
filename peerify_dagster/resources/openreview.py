"""OpenReview access: the real openreview-py client, the crawler that lands snapshots, and the snapshot reader.

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
from peerify_dagster.domain.pdfs import PdfProblem, inspect_pdf
from peerify_dagster.resources.files import write_atomic, write_json_atomic

RETRY_STATUSES = (429, 500, 502, 503, 504)
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


def make_client(api_url: str, policy: HttpPolicy = HttpPolicy()) -> openreview.api.OpenReviewClient:
    """The real API v2 client. Anonymous unless OPENREVIEW_USERNAME/OPENREVIEW_PASSWORD or
    OPENREVIEW_TOKEN are set in the environment (read by us or by openreview-py; never logged)."""
    token = os.environ.get("OPENREVIEW_TOKEN") or None
    client = openreview.api.OpenReviewClient(baseurl=api_url, token=token)
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
    adapter = _TimeoutAdapter(policy.timeout_s, max_retries=retry, pool_maxsize=16)
    # The client mounts its own adapters on several URL prefixes (edits endpoints among them) and
    # requests picks the longest matching prefix, so every one of them is replaced.
    for prefix in list(client.session.adapters) + ["http://", "https://"]:
        client.session.mount(prefix, adapter)
    return client


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
    forum_id: str
    item: str  # "forum" | "pdf" | "submissions"
    status: str  # "fetched" | "stored" (already in the snapshot) | "failed" | "absent"
    reason: str | None = None
    message: str | None = None
    seconds: float = 0.0


class SnapshotReader:
    """Reads a snapshot folder (sample venue, or a crawl's landing folder)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def venue(self) -> dict:
        path = self.folder / "venue.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def submissions(self) -> list[dict]:
        path = self.folder / "submissions.json"
        if not path.exists():
            raise FileNotFoundError(f"snapshot {self.folder}: no submissions.json (crawl the venue first)")
        return json.loads(path.read_text())["notes"]

    def forum_path(self, forum_id: str) -> Path:
        return self.folder / "forums" / f"{forum_id}.json"

    def has_forum(self, forum_id: str) -> bool:
        return self.forum_path(forum_id).exists()

    def forum(self, forum_id: str) -> ForumNotes:
        record = json.loads(self.forum_path(forum_id).read_text())
        return ForumNotes(forum_id=forum_id, notes=record.get("notes", []), fetched_at=record.get("fetched_at"))

    def forum_edits(self, forum_id: str) -> list[dict]:
        return json.loads(self.forum_path(forum_id).read_text()).get("edits", [])

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


def _first_review_cdate(notes: list[Any]) -> int | None:
    dates = [
        note.get("cdate")
        for note in notes
        if isinstance(note, dict)
        and any(str(i).endswith("/-/Official_Review") for i in note.get("invitations") or [])
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
    """Lands one venue into a snapshot folder with the real client; resumable and fault tolerant."""

    def __init__(self, client: openreview.api.OpenReviewClient, venue_id: str, snapshot_dir: Path,
                 log: Callable[[str], None] = print):
        self.client = client
        self.venue_id = venue_id
        self.reader = SnapshotReader(snapshot_dir)
        self.folder = Path(snapshot_dir)
        self.log = log

    def _capture(self) -> _RawResponses:
        capture = _RawResponses()
        self.client.session.hooks["response"] = [capture]
        return capture

    def land_submissions(self) -> list[dict]:
        """Fetch the venue group and every submission note; (re)writes venue.json and submissions.json."""
        capture = self._capture()
        submission_name = "Submission"
        try:
            group = self.client.get_group(self.venue_id)
            submission_name = ((group.content or {}).get("submission_name") or {}).get("value") or submission_name
        except openreview.OpenReviewException as exc:
            self.log(f"venue {self.venue_id}: no readable venue group ({describe_failure(exc)[1]}); "
                     f"assuming submission invitation '{submission_name}'")
        groups = capture.items("groups")
        invitation = f"{self.venue_id}/-/{submission_name}"
        capture = self._capture()
        self.client.get_all_notes(invitation=invitation)
        notes = capture.items("notes")
        write_json_atomic(self.folder / "venue.json", {
            "venue_id": self.venue_id, "api_version": 2, "submission_invitation": invitation,
            "group": groups[0] if groups else None, "created_by": "peerify crawler", "created_at": now_ms(),
        })
        write_json_atomic(self.folder / "submissions.json", {"fetched_at": now_ms(), "notes": notes})
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
            capture = self._capture()
            try:
                self.client.get_note_edits(note_id=forum_id)
                edits = capture.items("edits")
            except openreview.OpenReviewException:
                edits = []  # edits are optional: without them the latest PDF is taken and recorded as such
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and the venue goes on
            reason, message = describe_failure(exc)
            self.log(f"forum {forum_id}: fetch failed ({reason}): {message}")
            return FetchOutcome(forum_id, "forum", "failed", reason, message, time.perf_counter() - started)
        if not notes:
            return FetchOutcome(forum_id, "forum", "failed", "empty_forum", f"forum {forum_id}: the API returned no notes",
                                time.perf_counter() - started)
        write_json_atomic(self.reader.forum_path(forum_id),
                          {"forum_id": forum_id, "fetched_at": now_ms(), "notes": notes, "edits": edits})
        return FetchOutcome(forum_id, "forum", "fetched", seconds=time.perf_counter() - started)

    def land_pdf(self, forum_id: str, refetch: bool = False) -> FetchOutcome:
        if self.reader.pdf_meta(forum_id) is not None and not refetch:
            return FetchOutcome(forum_id, "pdf", "stored")
        if not self.reader.has_forum(forum_id):
            return FetchOutcome(forum_id, "pdf", "failed", "forum_missing", f"forum {forum_id}: notes not landed, PDF skipped")
        started = time.perf_counter()
        forum = self.reader.forum(forum_id)
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
        write_atomic(self.folder / "pdfs" / f"{forum_id}.pdf", data)
        write_json_atomic(self.folder / "pdfs" / f"{forum_id}.json", {
            "forum_id": forum_id, "version": version, "edit_id": edit["id"] if edit else None,
            "source_url": source_url, "fetched_at": now_ms(),
        })
        return FetchOutcome(forum_id, "pdf", "fetched", seconds=time.perf_counter() - started)
