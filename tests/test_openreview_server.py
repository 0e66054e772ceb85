"""The loopback OpenReview server, driven by the real openreview-py client over real HTTP.

Each test writes a tiny API v2 snapshot (three forums) into tmp_path and serves it. Retries go
through urllib3 exactly as in production, only configured to back off in milliseconds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openreview
import pytest
import requests

from peerify_dagster.resources.openreview import HttpPolicy
from peerify_dagster.resources.openreview import make_client as production_client
from tests.fakes.loopback import FaultRule
from tests.fakes.openreview_server import FakeOpenReviewServer, SnapshotError

VENUE_ID = "ICLR.cc/2024/Conference"
SUBMISSION_INVITATION = f"{VENUE_ID}/-/Submission"
Serve = Callable[..., FakeOpenReviewServer]  # the `serve` fixture: FakeOpenReviewServer options -> started server
SAMPLE_VENUE_SNAPSHOT = Path(__file__).resolve().parents[1] / "peerify_dagster" / "sample_venue" / "snapshot"


@dataclass(frozen=True)
class TinySnapshot:
    root: Path
    forum_ids: tuple[str, ...]
    notes_by_forum: dict[str, list[dict[str, Any]]]
    edit_ids_by_forum: dict[str, list[str]]
    pdf_bytes_by_forum: dict[str, bytes]  # the third forum has no PDF on purpose


def _note(
    note_id: str, forum_id: str, number: int, invitation_suffix: str, signature: str, cdate: int, **content: Any
) -> dict[str, Any]:
    is_submission = note_id == forum_id
    invitations = [SUBMISSION_INVITATION] if is_submission else [f"{VENUE_ID}/Submission{number}/-/{invitation_suffix}"]
    return {
        "id": note_id,
        "forum": forum_id,
        "replyto": None if is_submission else content.pop("replyto", forum_id),
        "number": number if is_submission else None,
        "invitations": invitations,
        "domain": VENUE_ID,
        "signatures": [f"{VENUE_ID}/Submission{number}/{signature}"],
        "readers": ["everyone"],
        "writers": [VENUE_ID],
        "cdate": cdate,
        "tcdate": cdate,
        "mdate": cdate,
        "tmdate": cdate,
        "content": {name: {"value": value} for name, value in content.items()},
    }


def _forum(forum_id: str, number: int, cdate: int) -> list[dict[str, Any]]:
    """A submission with two reviews, an author response to the first and a decision."""
    submission = _note(forum_id, forum_id, number, "Submission", "Authors", cdate,
                       title=f"Paper {number} (final title)", abstract="We study things.",
                       pdf=f"/pdf/{number:040x}.pdf", venueid=VENUE_ID)
    review_ids = (f"{forum_id}R1", f"{forum_id}R2")
    reviews = [
        _note(review_id, forum_id, number, "Official_Review", f"Reviewer_{review_id[-2:]}", cdate + 100 + index,
              summary="A summary.", weaknesses="The paper lacks ablations.",
              rating="6: marginally above the acceptance threshold")
        for index, review_id in enumerate(review_ids)
    ]
    response = _note(f"{forum_id}C1", forum_id, number, "Official_Comment", "Authors", cdate + 300,
                     replyto=review_ids[0], title="Response", comment="We added ablations in Section 5.")
    decision = _note(f"{forum_id}D1", forum_id, number, "Decision", "Program_Chairs", cdate + 400,
                     decision="Accept (poster)")
    return [submission, *reviews, response, decision]


def write_tiny_snapshot(root: Path) -> TinySnapshot:
    forum_ids = ("Cf4FJGmHRQ", "Ab3XyZ0001", "Zq9Mno0002")
    notes_by_forum = {forum_id: _forum(forum_id, number, 1_695_000_000_000 + number * 1_000)
                      for number, forum_id in enumerate(forum_ids, start=1)}
    (root / "forums").mkdir(parents=True)
    (root / "pdfs").mkdir()
    (root / "venue.json").write_text(json.dumps({
        "venue_id": VENUE_ID, "api_version": 2, "submission_invitation": SUBMISSION_INVITATION,
        "group": {"id": VENUE_ID, "content": {"submission_name": {"value": "Submission"}}, "members": [],
                  "readers": ["everyone"], "writers": [VENUE_ID], "signatures": ["~Super_User1"],
                  "signatories": [VENUE_ID]},
        "created_by": "authored sample", "created_at": 1_700_000_000_000,
    }))
    # submissions.json holds the submission as first crawled; the forum file's newer copy must win.
    stale_submissions = [{**notes[0], "content": {**notes[0]["content"], "title": {"value": "stale title"}}}
                         for notes in notes_by_forum.values()]
    (root / "submissions.json").write_text(json.dumps({"fetched_at": 1_700_000_000_000, "notes": stale_submissions}))

    edit_ids_by_forum: dict[str, list[str]] = {}
    pdf_bytes_by_forum: dict[str, bytes] = {}
    for forum_id, notes in notes_by_forum.items():
        edit_ids = [f"{forum_id}E{version}" for version in (1, 2)]
        edits = [{"id": edit_id, "invitation": SUBMISSION_INVITATION, "signatures": notes[0]["signatures"],
                  "cdate": notes[0]["cdate"] + version, "tcdate": notes[0]["cdate"] + version,
                  "note": {"id": forum_id, "content": {"pdf": {"value": f"/pdf/{version:040x}.pdf"}}}}
                 for version, edit_id in enumerate(edit_ids)]
        (root / "forums" / f"{forum_id}.json").write_text(
            json.dumps({"forum_id": forum_id, "fetched_at": 1_700_000_000_000, "notes": notes, "edits": edits}))
        edit_ids_by_forum[forum_id] = edit_ids
    for forum_id in forum_ids[:2]:
        pdf_bytes_by_forum[forum_id] = b"%PDF-1.4\n" + forum_id.encode() + bytes(range(256)) + b"\n%%EOF\n"
        (root / "pdfs" / f"{forum_id}.pdf").write_bytes(pdf_bytes_by_forum[forum_id])
    return TinySnapshot(root, forum_ids, notes_by_forum, edit_ids_by_forum, pdf_bytes_by_forum)


def make_client(url: str, *, retries: int = 3, timeout: float = 10.0) -> openreview.api.OpenReviewClient:
    """The production client and retry policy (resources/openreview.py), backing off in milliseconds; a server's
    Retry-After is honoured whatever the backoff."""
    return production_client(url, HttpPolicy(timeout_s=timeout, retries=retries, backoff_s=0.01))


def statuses(server: FakeOpenReviewServer, path: str) -> list[int | None]:
    return [request.status for request in server.requests if request.path == path]


@pytest.fixture(autouse=True)
def no_openreview_credentials_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENREVIEW_USERNAME", "OPENREVIEW_PASSWORD", "OPENREVIEW_API_BASEURL_V2"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tiny(tmp_path: Path) -> TinySnapshot:
    return write_tiny_snapshot(tmp_path / "snapshot")


@pytest.fixture
def serve(tiny: TinySnapshot) -> Iterator[Serve]:
    started: list[FakeOpenReviewServer] = []

    def start(**options: Any) -> FakeOpenReviewServer:
        server = FakeOpenReviewServer(tiny.root, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_get_group_returns_the_venue_group_and_404s_an_unknown_id(serve: Serve) -> None:
    client = make_client(serve().url)

    group = client.get_group(VENUE_ID)

    assert group.id == VENUE_ID
    assert group.content["submission_name"]["value"] == "Submission"
    with pytest.raises(openreview.OpenReviewException) as raised:
        client.get_group("NeurIPS.cc/2024/Conference")
    assert raised.value.args[0]["status"] == 404
    assert raised.value.args[0]["name"] == "NotFoundError"


def test_get_all_notes_pages_through_every_submission_without_duplicates(
    serve: Serve, tiny: TinySnapshot
) -> None:
    server = serve(page_size=2)

    submissions = make_client(server.url).get_all_notes(invitation=SUBMISSION_INVITATION)

    assert sorted(note.id for note in submissions) == sorted(tiny.forum_ids)
    paged_requests = [request for request in server.requests if request.path == "/notes"]
    assert len(paged_requests) == 3  # 2 + 1 + the empty page that ends the iteration
    assert paged_requests[0].params["count"] == "true"
    assert [request.params.get("after") for request in paged_requests[1:]] == [
        sorted(tiny.forum_ids)[1], sorted(tiny.forum_ids)[2]]


def test_forum_file_is_authoritative_over_submissions_json(serve: Serve, tiny: TinySnapshot) -> None:
    note = make_client(serve().url).get_note(tiny.forum_ids[0])

    assert note.content["title"]["value"] == "Paper 1 (final title)"


def test_get_all_notes_of_a_forum_returns_the_whole_thread(serve: Serve, tiny: TinySnapshot) -> None:
    client = make_client(serve(page_size=2).url)
    forum_id = tiny.forum_ids[1]

    thread = client.get_all_notes(forum=forum_id)

    assert sorted(note.id for note in thread) == sorted(note["id"] for note in tiny.notes_by_forum[forum_id])
    reviews = client.get_all_notes(invitation=f"{VENUE_ID}/Submission2/-/Official_Review")
    assert sorted(note.id for note in reviews) == [f"{forum_id}R1", f"{forum_id}R2"]
    assert [note.id for note in client.get_all_notes(replyto=f"{forum_id}R1")] == [f"{forum_id}C1"]


def test_details_attach_replies_and_direct_replies_to_submissions(
    serve: Serve, tiny: TinySnapshot
) -> None:
    client = make_client(serve().url)

    submissions = client.get_all_notes(invitation=SUBMISSION_INVITATION, details="replies,directReplies")

    for submission in submissions:
        forum_notes = tiny.notes_by_forum[submission.id]
        reply_ids = sorted(reply["id"] for reply in submission.details["replies"])
        assert reply_ids == sorted(note["id"] for note in forum_notes[1:])
        # The author response answers a review, so it is a reply but not a direct one.
        assert f"{submission.id}C1" not in {reply["id"] for reply in submission.details["directReplies"]}
        assert len(submission.details["directReplies"]) == len(forum_notes) - 2


def test_sort_by_cdate_descending(serve: Serve, tiny: TinySnapshot) -> None:
    notes = make_client(serve().url).get_notes(forum=tiny.forum_ids[0], sort="cdate:desc")

    expected = sorted((note["cdate"] for note in tiny.notes_by_forum[tiny.forum_ids[0]]), reverse=True)
    assert [note.cdate for note in notes] == expected


def test_note_edits_and_both_pdf_routes_serve_the_snapshot_bytes(
    serve: Serve, tiny: TinySnapshot
) -> None:
    client = make_client(serve().url)
    forum_id = tiny.forum_ids[0]

    edits = client.get_note_edits(note_id=forum_id)

    assert [edit.id for edit in edits] == tiny.edit_ids_by_forum[forum_id]
    assert edits[0].note.content["pdf"]["value"].startswith("/pdf/")
    assert client.get_pdf(forum_id) == tiny.pdf_bytes_by_forum[forum_id]
    assert client.get_pdf(tiny.edit_ids_by_forum[forum_id][0], is_reference=True) == tiny.pdf_bytes_by_forum[forum_id]


@pytest.mark.parametrize(
    ("pdf_id", "is_reference"), [("Zq9Mno0002", False), ("Zq9Mno0002E1", True), ("no-such-edit", True)]
)
def test_missing_pdf_raises_openreview_exception_with_404(
    serve: Serve, pdf_id: str, is_reference: bool
) -> None:
    with pytest.raises(openreview.OpenReviewException) as raised:
        make_client(serve().url).get_pdf(pdf_id, is_reference=is_reference)

    assert raised.value.args[0]["status"] == 404


def test_unknown_endpoint_answers_a_json_404(serve: Serve) -> None:
    with pytest.raises(openreview.OpenReviewException) as raised:
        make_client(serve().url).get_invitation(SUBMISSION_INVITATION)

    assert raised.value.args[0] == {"name": "NotFoundError", "message": "Cannot GET /invitations", "status": 404}


def test_login_and_require_auth(serve: Serve) -> None:
    server = serve(credentials=("reader@example.org", "s3cret-pw"), require_auth=True)
    client = make_client(server.url)

    with pytest.raises(openreview.OpenReviewException) as forbidden:
        client.get_group(VENUE_ID)
    with pytest.raises(openreview.OpenReviewException) as bad_login:
        client.login_user("reader@example.org", "wrong")
    login = client.login_user("reader@example.org", "s3cret-pw")

    assert forbidden.value.args[0]["status"] == 403
    assert bad_login.value.args[0]["status"] == 400
    assert login["user"]["profile"]["id"] == "~Test_User1"
    assert client.profile.id == "~Test_User1"
    assert client.get_group(VENUE_ID).id == VENUE_ID
    logged = repr(server.requests)
    assert "s3cret-pw" not in logged and login["token"] not in logged


def test_retry_after_burst_is_ridden_through(serve: Serve) -> None:
    server = serve(faults=[FaultRule("/groups", "retry_after", retry_after=0, times=2)])

    group = make_client(server.url).get_group(VENUE_ID)

    assert group.id == VENUE_ID
    assert statuses(server, "/groups") == [429, 429, 200]


def test_production_client_waits_the_seconds_retry_after_asks(serve: Serve) -> None:
    server = serve(faults=[FaultRule("/groups", "retry_after", retry_after=1, times=1)])

    assert make_client(server.url).get_group(VENUE_ID).id == VENUE_ID

    throttled, retried = [request for request in server.requests if request.path == "/groups"]
    assert (throttled.status, retried.status) == (429, 200)
    # The backoff alone is 10 ms: only the header explains a second between the answers.
    assert 1.0 <= retried.answered_at - throttled.answered_at < 3.0


def test_retry_after_header_carries_the_configured_seconds(serve: Serve) -> None:
    server = serve(faults=[FaultRule("/groups", "retry_after", retry_after=1)])

    answer = requests.get(f"{server.url}/groups", params={"id": VENUE_ID}, timeout=10)

    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["name"] == "TooManyRequestsError"


def test_server_error_burst_is_ridden_through_but_a_persistent_one_is_not(
    serve: Serve, tiny: TinySnapshot
) -> None:
    server = serve(page_size=2, faults=[FaultRule("/notes", "status", status=500, times=2)])
    client = make_client(server.url)

    submissions = client.get_all_notes(invitation=SUBMISSION_INVITATION)
    server.add_fault(FaultRule("/notes", "status", status=503, times=None))

    assert len(submissions) == len(tiny.forum_ids)
    assert statuses(server, "/notes")[:3] == [500, 500, 200]
    with pytest.raises(openreview.OpenReviewException) as raised:  # the last answer, once retries are spent
        client.get_all_notes(invitation=SUBMISSION_INVITATION)
    assert raised.value.args[0]["status"] == 503
    assert statuses(server, "/notes")[-4:] == [503] * 4  # the first try and the policy's three retries


def test_status_fault_that_is_not_retried_surfaces_its_json_error(serve: Serve, tiny: TinySnapshot) -> None:
    server = serve(faults=[FaultRule("/notes/edits", "status", status=403, params={"note.id": tiny.forum_ids[0]})])
    client = make_client(server.url)

    other_edits = client.get_note_edits(note_id=tiny.forum_ids[1])
    assert [edit.id for edit in other_edits] == tiny.edit_ids_by_forum[tiny.forum_ids[1]]
    with pytest.raises(openreview.OpenReviewException) as raised:
        client.get_note_edits(note_id=tiny.forum_ids[0])
    assert raised.value.args[0]["status"] == 403
    assert raised.value.args[0]["name"] == "ForbiddenError"


def test_malformed_json_surfaces_as_a_decode_error_once(serve: Serve, tiny: TinySnapshot) -> None:
    forum_id = tiny.forum_ids[0]
    client = make_client(serve(faults=[FaultRule("/notes", "malformed_json", params={"forum": forum_id})]).url)

    with pytest.raises(requests.exceptions.JSONDecodeError):
        client.get_all_notes(forum=forum_id)
    assert len(client.get_all_notes(forum=forum_id)) == len(tiny.notes_by_forum[forum_id])


def test_hang_times_out_the_client_while_the_server_keeps_answering(
    serve: Serve, tiny: TinySnapshot
) -> None:
    # The hang outlasts the test; stop() wakes the sleeping handler.
    server = serve(faults=[FaultRule("/pdf", "hang", hang_seconds=60)])
    client = make_client(server.url, retries=0, timeout=0.5)

    with pytest.raises(requests.exceptions.ConnectionError, match="timed out"):
        client.get_pdf(tiny.forum_ids[0])
    group = client.get_group(VENUE_ID)

    assert group.id == VENUE_ID
    assert statuses(server, "/pdf") == []  # the hung handler is still asleep, yet /groups was answered


def test_single_hang_is_ridden_through_by_a_retry(serve: Serve, tiny: TinySnapshot) -> None:
    forum_id = tiny.forum_ids[0]
    server = serve(faults=[FaultRule("/pdf", "hang", hang_seconds=60)])

    assert make_client(server.url, timeout=0.5).get_pdf(forum_id) == tiny.pdf_bytes_by_forum[forum_id]


def test_dropped_connection_is_retried_once_and_fails_when_persistent(
    serve: Serve, tiny: TinySnapshot
) -> None:
    forum_id = tiny.forum_ids[0]
    server = serve(faults=[FaultRule("/notes/edits", "drop")])
    client = make_client(server.url)

    assert len(client.get_note_edits(note_id=forum_id)) == 2
    assert statuses(server, "/notes/edits") == [None, 200]
    server.add_fault(FaultRule("/notes/edits", "drop", times=None))
    with pytest.raises(requests.exceptions.ConnectionError):
        client.get_note_edits(note_id=forum_id)


def test_body_fault_serves_the_given_bytes(serve: Serve, tiny: TinySnapshot) -> None:
    login_page = b"<html><body>Please log in</body></html>"
    server = serve(faults=[FaultRule("/pdf", "body", body=login_page, content_type="text/html")])

    answer = requests.get(f"{server.url}/pdf", params={"id": tiny.forum_ids[0]}, timeout=10)

    assert answer.status_code == 200
    assert answer.content == login_page
    assert answer.headers["Content-Type"] == "text/html"


def test_requests_made_while_a_fault_is_pending_elsewhere_are_untouched(
    serve: Serve, tiny: TinySnapshot
) -> None:
    rule = FaultRule("/notes", "status", status=500, params={"forum": tiny.forum_ids[2]}, times=None)
    server = serve(faults=[rule])
    client = make_client(server.url, retries=0)

    results: list[int] = []
    def fetch_thread(forum_id: str) -> None:
        results.append(len(client.get_all_notes(forum=forum_id)))

    workers = [threading.Thread(target=fetch_thread, args=(forum_id,)) for forum_id in tiny.forum_ids[:2]]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert results == [5, 5]
    assert all(request.fault is None for request in server.requests)
    with pytest.raises(openreview.OpenReviewException) as raised:
        client.get_all_notes(forum=tiny.forum_ids[2])
    assert raised.value.args[0]["status"] == 500


def test_bad_snapshot_names_every_broken_file(tiny: TinySnapshot) -> None:
    (tiny.root / "forums" / "Broken0001.json").write_text("{not json")
    note_without_id = {"forum_id": "Broken0002", "notes": [{"title": "no id"}]}
    (tiny.root / "forums" / "Broken0002.json").write_text(json.dumps(note_without_id))

    with pytest.raises(SnapshotError) as raised:
        FakeOpenReviewServer(tiny.root)

    assert "Broken0001.json: not valid JSON" in str(raised.value)
    assert "Broken0002.json: notes[0] has no string 'id'" in str(raised.value)


def test_missing_venue_file_and_bad_fault_rules_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="venue.json: file is missing"):
        FakeOpenReviewServer(tmp_path)
    with pytest.raises(ValueError, match="unknown action 'explode'"):
        FaultRule("/notes", "explode")
    with pytest.raises(ValueError, match="times must be at least 1"):
        FaultRule("/notes", "drop", times=0)


def test_serves_the_sample_venue_snapshot() -> None:
    if not (SAMPLE_VENUE_SNAPSHOT / "venue.json").is_file():
        pytest.skip(f"sample venue snapshot not present at {SAMPLE_VENUE_SNAPSHOT}")
    venue = json.loads((SAMPLE_VENUE_SNAPSHOT / "venue.json").read_text())
    submissions = json.loads((SAMPLE_VENUE_SNAPSHOT / "submissions.json").read_text())
    submission_ids = {note["id"] for note in submissions["notes"]}

    with FakeOpenReviewServer(SAMPLE_VENUE_SNAPSHOT, page_size=3) as server:
        client = make_client(server.url)
        assert client.get_group(venue["venue_id"]).id == venue["venue_id"]
        assert {note.id for note in client.get_all_notes(invitation=venue["submission_invitation"])} == submission_ids
        for forum_path in sorted((SAMPLE_VENUE_SNAPSHOT / "forums").glob("*.json")):
            forum = json.loads(forum_path.read_text())
            thread = client.get_all_notes(forum=forum["forum_id"])
            assert sorted(note.id for note in thread) == sorted({note["id"] for note in forum["notes"]})
            pdf_path = SAMPLE_VENUE_SNAPSHOT / "pdfs" / f"{forum['forum_id']}.pdf"
            if pdf_path.is_file():
                assert client.get_pdf(forum["forum_id"]) == pdf_path.read_bytes()
