"""A loopback fake of the OpenReview API (v2, or v1 for a v1 snapshot) that replays a crawl snapshot, with
fault injection.

The crawler talks to OpenReview through the real openreview-py clients. Tests and benchmarks
point a client's ``baseurl`` at this server, which answers the requests the clients send
(``/groups``, ``/notes``, ``/notes/edits``, ``/pdf``, ``/references/pdf``, ``POST /login``)
with the API's JSON shapes, built from a snapshot folder::

    venue.json, submissions.json, forums/<forum_id>.json, pdfs/<forum_id>.pdf

A snapshot whose ``venue.json`` says ``"api_version": 1`` is served as API v1, as ``openreview.Client``
expects it: notes carry one ``invitation`` (the ``invitation`` filter matches it), and every /notes answer
has a ``count``, which the v1 client reads on its first page without asking for it. ``details=replies``
or ``directReplies`` attach a forum's replies to its submission note, as in
``/notes?invitation=<venue>/-/Blind_Submission&details=replies``.

It can also be told to misbehave the way the live API and networks do (rate limits, 5xx
bursts, truncated bodies, hangs, dropped connections) through ``FaultRule``s (testing/loopback.py), so retry and
timeout handling can be tested against real HTTP on 127.0.0.1. Standard library only.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from tests.fakes.loopback import JSON_CONTENT_TYPE, FaultRule, IncomingRequest, LoopbackServer, Reply

# The real API's (and the client's) page size when a request gives no limit.
DEFAULT_PAGE_LIMIT = 1000

SORTABLE_NOTE_FIELDS = frozenset({"id", "number", "cdate", "tcdate", "mdate", "tmdate", "odate", "pdate"})

LOGIN_PROFILE_ID = "~Test_User1"

Note = dict[str, Any]

# /notes query parameters that filter notes; each compares the parameter's text with a note.
_NOTE_FILTERS: dict[str, Callable[[Note, str], bool]] = {
    "id": lambda note, value: note.get("id") == value,
    "forum": lambda note, value: note.get("forum") == value,
    "replyto": lambda note, value: note.get("replyto") == value,
    "invitation": lambda note, value: value in (note.get("invitations") or []) or note.get("invitation") == value,
    "number": lambda note, value: str(note.get("number")) == value,
}


class SnapshotError(ValueError):
    """The snapshot folder cannot be served; the message names each bad file and why."""


class BadRequest(Exception):
    """A request the real API would refuse with 400; the message says which parameter and why."""


def _json_reply(payload: Any, status: int = HTTPStatus.OK) -> Reply:
    return Reply(status, json.dumps(payload).encode("utf-8"), JSON_CONTENT_TYPE)


def _error_reply(status: int, message: str) -> Reply:
    """The API's error shape: {"name": "NotFoundError", "message": ..., "status": 404}."""
    name = HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
    if not name.endswith("Error"):
        name += "Error"
    return _json_reply({"name": name, "message": message, "status": status}, status)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SnapshotError(f"{path}: file is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SnapshotError(f"{path}: not valid JSON ({error})") from None


def _read_note_list(path: Path, document: Any) -> list[Note]:
    notes = document.get("notes") if isinstance(document, dict) else None
    if not isinstance(notes, list):
        raise SnapshotError(f"{path}: expected an object with a 'notes' list")
    for position, note in enumerate(notes):
        if not isinstance(note, dict) or not isinstance(note.get("id"), str):
            raise SnapshotError(f"{path}: notes[{position}] has no string 'id'")
    return notes


@dataclass
class _Snapshot:
    """The snapshot folder, indexed the ways the endpoints look things up."""

    group: dict[str, Any]
    notes_by_id: dict[str, Note]
    forum_notes: dict[str, list[Note]]
    forum_edits: dict[str, list[dict[str, Any]]]
    forum_by_edit_id: dict[str, str]
    pdf_dir: Path
    api_version: int = 2
    notes_by_forum: dict[Any, list[Note]] = field(default_factory=dict)  # by each note's own `forum` field

    def __post_init__(self) -> None:
        for note in self.notes_by_id.values():
            self.notes_by_forum.setdefault(note.get("forum"), []).append(note)

    @classmethod
    def load(cls, snapshot_dir: Path) -> _Snapshot:
        venue = _read_json(snapshot_dir / "venue.json")
        group = venue.get("group") if isinstance(venue, dict) else None
        if not isinstance(group, dict) or not isinstance(group.get("id"), str):
            raise SnapshotError(f"{snapshot_dir / 'venue.json'}: expected a 'group' object with a string 'id'")
        api_version = venue.get("api_version", 2)
        if api_version not in (1, 2):
            raise SnapshotError(f"{snapshot_dir / 'venue.json'}: 'api_version' must be 1 or 2, got {api_version!r}")

        submissions_path = snapshot_dir / "submissions.json"
        notes_by_id = {note["id"]: note for note in _read_note_list(submissions_path, _read_json(submissions_path))}

        forum_notes: dict[str, list[Note]] = {}
        forum_edits: dict[str, list[dict[str, Any]]] = {}
        problems: list[str] = []
        # Report every bad forum file at once rather than one per attempt.
        for forum_path in sorted((snapshot_dir / "forums").glob("*.json")):
            try:
                document = _read_json(forum_path)
                notes = _read_note_list(forum_path, document)
                edits = document.get("edits", [])
                if not isinstance(edits, list):
                    raise SnapshotError(f"{forum_path}: 'edits' is not a list")
            except SnapshotError as error:
                problems.append(str(error))
                continue
            forum_id = document.get("forum_id") or forum_path.stem
            forum_notes[forum_id] = notes
            forum_edits[forum_id] = edits
            # The forum file is authoritative over submissions.json.
            notes_by_id.update((note["id"], note) for note in notes)
        if problems:
            raise SnapshotError("snapshot cannot be served:\n" + "\n".join(problems))

        forum_by_edit_id = {
            edit["id"]: forum_id
            for forum_id, edits in forum_edits.items()
            for edit in edits
            if isinstance(edit, dict) and isinstance(edit.get("id"), str)
        }
        return cls(group, notes_by_id, forum_notes, forum_edits, forum_by_edit_id, snapshot_dir / "pdfs", api_version)

    def pdf_path(self, forum_id: str) -> Path | None:
        # Ids are file names here; anything with a separator would reach outside pdfs/.
        if not forum_id or "/" in forum_id or "\\" in forum_id or forum_id.startswith("."):
            return None
        path = self.pdf_dir / f"{forum_id}.pdf"
        return path if path.is_file() else None

    def edit_pdf_path(self, edit_id: str) -> Path | None:
        """`pdfs/edits/<edit id>.pdf`: the PDF as of one edit, so tests can tell which version a client took."""
        if not edit_id or "/" in edit_id or "\\" in edit_id or edit_id.startswith("."):
            return None
        path = self.pdf_dir / "edits" / f"{edit_id}.pdf"
        return path if path.is_file() else None


class FakeOpenReviewServer(LoopbackServer):
    """Serves one snapshot folder as the OpenReview API (v2, or v1 per its venue.json) on 127.0.0.1, in a
    background thread.

    Use as a context manager (or call start()/stop()); point
    ``openreview.api.OpenReviewClient(baseurl=server.url)`` (v1: ``openreview.Client``) at it. ``page_size`` caps every
    /notes page so tests can force the client to page. With ``require_auth`` every endpoint
    but /login answers 403 unless the request carries a token that /login issued for
    ``credentials``.
    """

    def __init__(
        self,
        snapshot_dir: Path,
        faults: list[FaultRule] | tuple[FaultRule, ...] = (),
        page_size: int | None = None,
        credentials: tuple[str, str] | None = None,
        require_auth: bool = False,
    ) -> None:
        if require_auth and credentials is None:
            raise ValueError("require_auth=True needs credentials, or no request could ever be answered")
        if page_size is not None and page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        super().__init__(faults)
        self._snapshot = _Snapshot.load(Path(snapshot_dir))
        self._page_size = page_size
        self._credentials = credentials
        self._require_auth = require_auth
        self._issued_tokens: set[str] = set()
        self._routes: dict[tuple[str, str], Callable[[dict[str, str], bytes], Reply]] = {
            ("GET", "/groups"): self._get_groups,
            ("GET", "/notes"): self._get_notes,
            ("GET", "/notes/edits"): self._get_note_edits,
            ("GET", "/pdf"): self._get_pdf,
            ("GET", "/references/pdf"): self._get_reference_pdf,
            ("POST", "/login"): self._post_login,
        }

    # Request handling -------------------------------------------------------------------------

    def request_path(self, url_path: str) -> str:
        return url_path.rstrip("/") or "/"

    def reply_to(self, request: IncomingRequest, fault: FaultRule | None) -> Reply:
        action = fault.action if fault is not None else None
        if action == "status":
            assert fault is not None
            return _error_reply(
                fault.status, f"Injected fault: {request.method} {request.path} answered {fault.status}"
            )
        if action == "retry_after":
            assert fault is not None
            reply = _error_reply(HTTPStatus.TOO_MANY_REQUESTS, "Injected fault: too many requests")
            reply.headers["Retry-After"] = str(fault.retry_after)
            return reply
        if action == "body":
            assert fault is not None
            return Reply(HTTPStatus.OK, fault.body, fault.content_type)
        reply = self._answer(request)
        if action == "malformed_json":
            # Cutting a JSON document in half always leaves it unterminated.
            return Reply(HTTPStatus.OK, reply.body[: len(reply.body) // 2], JSON_CONTENT_TYPE)
        return reply

    def _answer(self, request: IncomingRequest) -> Reply:
        route = self._routes.get((request.method, request.path))
        if route is None:
            return _error_reply(HTTPStatus.NOT_FOUND, f"Cannot {request.method} {request.path}")
        if (self._require_auth and request.path != "/login"
                and not self._is_authorized(request.headers.get("Authorization"))):
            return _error_reply(HTTPStatus.FORBIDDEN, "Forbidden: this server requires a token from POST /login")
        try:
            return route(request.params, request.body)
        except BadRequest as error:
            return _error_reply(HTTPStatus.BAD_REQUEST, str(error))

    def _is_authorized(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        with self._lock:
            return scheme == "Bearer" and token in self._issued_tokens

    # Endpoints ------------------------------------------------------------------------------

    def _post_login(self, params: dict[str, str], body: bytes) -> Reply:
        try:
            login = json.loads(body or b"{}")
        except json.JSONDecodeError:
            raise BadRequest("POST /login: body is not JSON") from None
        if not isinstance(login, dict):
            raise BadRequest("POST /login: body must be a JSON object")
        user = login.get("id")
        if self._credentials is None or (user, login.get("password")) != self._credentials:
            raise BadRequest(f"Invalid username or password for {user!r}")
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._issued_tokens.add(token)
        return _json_reply({"token": token, "user": {"id": user, "profile": {"id": LOGIN_PROFILE_ID}}})

    def _get_groups(self, params: dict[str, str], body: bytes) -> Reply:
        group = self._snapshot.group
        if "id" in params:
            if params["id"] != group["id"]:
                return _error_reply(HTTPStatus.NOT_FOUND, f"Group Not Found: {params['id']}")
            return _json_reply({"groups": [group]})
        # get_group() asks for a prefix listing when a group has anonymous ids.
        groups = [group] if group["id"].startswith(params.get("prefix", "")) else []
        return _json_reply({"groups": groups})

    def _get_notes(self, params: dict[str, str], body: bytes) -> Reply:
        filters = [(_NOTE_FILTERS[name], value) for name, value in params.items() if name in _NOTE_FILTERS]
        # A forum's notes via the index, so a large venue does not cost a scan of every note per request.
        candidates = (self._snapshot.notes_by_forum.get(params["forum"], []) if "forum" in params
                      else self._snapshot.notes_by_id.values())
        matches = [note for note in candidates if all(keep(note, value) for keep, value in filters)]
        if "id" in params and not matches:
            return _error_reply(HTTPStatus.NOT_FOUND, f"The Note {params['id']} was not found")

        sort_field, descending = _parse_sort(params.get("sort", "id"))
        matches.sort(key=lambda note: _sort_key(note, sort_field), reverse=descending)
        total = len(matches)
        page = _after_cursor(matches, params["after"], sort_field, descending) if "after" in params else matches

        offset = _parse_count("offset", params.get("offset", "0"))
        limit = _parse_count("limit", params.get("limit", str(DEFAULT_PAGE_LIMIT)))
        if self._page_size is not None:
            limit = min(limit, self._page_size)
        page = page[offset : offset + limit]

        wanted_details = set(params.get("details", "").split(",")) & {"replies", "directReplies"}
        payload: dict[str, Any] = {"notes": [self._with_details(note, wanted_details) for note in page]}
        if params.get("count") == "true" or self._snapshot.api_version == 1:
            payload["count"] = total
        return _json_reply(payload)

    def _with_details(self, note: Note, wanted_details: set[str]) -> Note:
        forum_id = note["id"]
        if not wanted_details or note.get("forum") != forum_id:
            return note
        replies = [reply for reply in self._snapshot.forum_notes.get(forum_id, []) if reply["id"] != forum_id]
        details = dict(note.get("details") or {})
        if "replies" in wanted_details:
            details["replies"] = replies
        if "directReplies" in wanted_details:
            details["directReplies"] = [reply for reply in replies if reply.get("replyto") == forum_id]
        return {**note, "details": details}

    def _get_note_edits(self, params: dict[str, str], body: bytes) -> Reply:
        note_id = params.get("note.id")
        if not note_id:
            raise BadRequest("GET /notes/edits: this server needs the 'note.id' parameter")
        edits = self._snapshot.forum_edits.get(note_id, [])
        return _json_reply({"edits": edits, "count": len(edits)})

    def _get_pdf(self, params: dict[str, str], body: bytes) -> Reply:
        forum_id = _required(params, "id", "/pdf")
        return self._pdf_reply(forum_id, f"PDF of note {forum_id} not found")

    def _get_reference_pdf(self, params: dict[str, str], body: bytes) -> Reply:
        edit_id = _required(params, "id", "/references/pdf")
        forum_id = self._snapshot.forum_by_edit_id.get(edit_id)
        if forum_id is None:
            return _error_reply(HTTPStatus.NOT_FOUND, f"Reference {edit_id} not found")
        if (path := self._snapshot.edit_pdf_path(edit_id)) is not None:
            return Reply(HTTPStatus.OK, path.read_bytes(), "application/pdf")
        return self._pdf_reply(forum_id, f"PDF of reference {edit_id} (note {forum_id}) not found")

    def _pdf_reply(self, forum_id: str, missing_message: str) -> Reply:
        path = self._snapshot.pdf_path(forum_id)
        if path is None:
            return _error_reply(HTTPStatus.NOT_FOUND, missing_message)
        return Reply(HTTPStatus.OK, path.read_bytes(), "application/pdf")


def _required(params: dict[str, str], name: str, endpoint: str) -> str:
    value = params.get(name)
    if not value:
        raise BadRequest(f"GET {endpoint}: missing the '{name}' parameter")
    return value


def _parse_count(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"'{name}' must be a whole number, got {text!r}") from None
    if value < 0:
        raise BadRequest(f"'{name}' must not be negative, got {value}")
    return value


def _parse_sort(sort: str) -> tuple[str, bool]:
    """'id', 'cdate:asc', 'cdate:desc' -> (field, descending)."""
    sort_field, _, direction = sort.partition(":")
    if sort_field not in SORTABLE_NOTE_FIELDS or direction not in ("", "asc", "desc"):
        raise BadRequest(
            f"unsupported sort {sort!r}; use one of {sorted(SORTABLE_NOTE_FIELDS)} with optional ':asc' or ':desc'"
        )
    return sort_field, direction == "desc"


def _sort_key(note: Note, sort_field: str) -> tuple[Any, ...]:
    if sort_field == "id":
        return (note["id"],)
    value = note.get(sort_field)
    # Notes without the field sort last; the id breaks ties so pages are stable.
    return (value is None, value if value is not None else 0, note["id"])


def _after_cursor(ordered: list[Note], after: str, sort_field: str, descending: bool) -> list[Note]:
    """The notes that come after the note with id ``after`` in ``ordered``."""
    if sort_field == "id":
        # An id cursor works even when that note is not (or no longer) in the result.
        return [note for note in ordered if (note["id"] < after if descending else note["id"] > after)]
    for position, note in enumerate(ordered):
        if note["id"] == after:
            return ordered[position + 1 :]
    raise BadRequest(f"'after' must be the id of a note in the result when sorting by {sort_field}; {after!r} is not")
