"""Arbitration and the audit in the browser, one item at a time, with the terminal's keys.

- `/arbitration`: the venues, each with its modes and its agreement page;
- `/venues/{venue}/arbitration`: the modes (arbitration, audit, consensus) with what is open for the signed-in
  annotator;
- `/venues/{venue}/arbitration/{mode}`: the next item for them (leased to them: see annotation/sessions.py), as a
  redirect to `.../{mode}/items/{opaque id}`, the item's page; POSTs there decide, skip, renew the lease or leave,
  and `.../{mode}/undo` retracts the annotator's latest decision of the mode;
- `/venues/{venue}/agreement`: agreement so far between the two labellers and between the audit's annotators.

Blinding: the pages name items by opaque id only (never the claim id, which `claim_labels` would join to the
labellers), show candidates only as 1 and 2, and in the audit show no automated label at all. Nothing here reads
`arbitration_key`; the labeller table is shown folded (domain/arbitration.py folded_table). Decisions go to the
venue's decisions ledger through the same session the terminal uses, so the same lock, fsync and checks apply.

What a decision or an undo saved is said once, on the page its redirect lands on (the next item, or the notice that
nothing is left): the redirect carries a one-off token (`?saved=`) that the message in the session must match, so no
later page, of this mode or another, shows it.
"""

from __future__ import annotations

import secrets

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from peerify_dagster.annotation.sessions import (
    CANDIDATE_KEYS,
    LABEL_KEYS,
    MODES,
    SOURCE_NAMES,
    AnnotationError,
    Item,
    ItemUnavailable,
    Session,
    annotator_agreement,
    answer_of_key,
)
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.web.pages import lake_data, render, settings, venue_of, venue_url
from peerify_dagster.web.security import require_annotator

MODE_NAMES = {"arbitration": "Arbitration", "audit": "Audit (blind)", "consensus": "Consensus"}
MODE_HINTS = {
    "arbitration": "the items where the two LLM labellers disagree or an answer did not parse: choose a candidate "
                   "or give a label",
    "audit": "the audit sample, labelled blind by two annotators: no candidate and no automated label is shown",
    "consensus": "the audit items on which the two annotators disagree: settle them",
}
# Where a decision of each mode shows up once recorded.
READERS = {"arbitration": "canonical_labels", "audit": "human_audit", "consensus": "human_audit"}
LEDGER_FILES = {"arbitration": "arbitration.jsonl", "audit": "audit.jsonl", "consensus": "audit.jsonl"}
_FLASH, _FLASH_PARAMETER = "annotation_saved", "saved"  # session key and query parameter of what was saved
MAX_NOTE_LENGTH = 2000


def _mode(request: Request) -> str:
    mode = request.path_params["mode"]
    if mode not in MODES:
        raise HTTPException(404, f"there is no mode {mode!r}; the modes are {', '.join(MODES)}")
    return mode


def _session(request: Request, venue: str, mode: str) -> Session:
    annotator = require_annotator(request)
    try:
        return Session(settings(request).lake_root, venue, mode, annotator)
    except AnnotationError as exc:
        raise HTTPException(409, str(exc)) from None


def _item_url(venue: str, mode: str, item: Item) -> str:
    return venue_url(venue, "arbitration", mode, "items", item.opaque_id)


def _next_url(venue: str, mode: str) -> str:
    return venue_url(venue, "arbitration", mode)


def _item(session: Session, request: Request) -> Item:
    item = session.item(request.path_params["opaque_id"])
    if item is None:
        raise HTTPException(404, "this item is not in the queue as it is now (item ids change whenever the queue is "
                                 "rebuilt); go on with the next open item")
    return item


def _notice(request: Request, venue: str, mode: str, message: str, status_code: int = 200, saved: str | None = None):
    return render(request, "arbitration/notice.html", {"venue": venue, "mode": mode, "mode_name": MODE_NAMES[mode],
                                                       "message": message, "saved": saved}, status_code=status_code)


def _flash(request: Request, message: str, url: str) -> str:
    """`url` with a one-off token; the page it leads to shows `message` once (see _saved)."""
    token = secrets.token_urlsafe(8)
    request.session[_FLASH] = {"token": token, "message": message}
    return f"{url}?{_FLASH_PARAMETER}={token}"


def _saved(request: Request) -> str | None:
    """The message a redirect to this request was made with (_flash), taken from the session; None for any other
    request, which leaves a message it was not made for where it is (another tab's redirect may be on its way)."""
    flash = request.session.get(_FLASH)
    token = request.query_params.get(_FLASH_PARAMETER)
    if not isinstance(flash, dict) or token is None or flash.get("token") != token:
        return None
    return request.session.pop(_FLASH)["message"]


def _sentence(reason: str) -> str:
    return f"{reason[:1].upper()}{reason[1:]}."


# -- pages ------------------------------------------------------------------------------------------------------
def venues_page(request: Request):
    return render(request, "arbitration/index.html", {"venues": lake_data(request).venues()})


def modes_page(request: Request):
    venue = venue_of(request)
    require_annotator(request)
    modes = []
    for mode in MODES:
        try:
            session = _session(request, venue, mode)
        except HTTPException as exc:
            modes.append({"mode": mode, "name": MODE_NAMES[mode], "hint": MODE_HINTS[mode], "problem": exc.detail})
            continue
        modes.append({"mode": mode, "name": MODE_NAMES[mode], "hint": MODE_HINTS[mode], "total": session.total(),
                      "open": len(session.open_items()), "held": session.held_by_others()})
    return render(request, "arbitration/modes.html", {"venue": venue, "modes": modes})


def next_item(request: Request):
    venue, mode = venue_of(request), _mode(request)
    session = _session(request, venue, mode)
    item = session.next_item()
    if item is not None:
        token = request.query_params.get(_FLASH_PARAMETER)  # a decision's message, for the item page to show
        return RedirectResponse(_item_url(venue, mode, item) + (f"?{_FLASH_PARAMETER}={token}" if token else ""),
                                status_code=303)
    held = session.held_by_others()
    message = f"Nothing open for you in {MODE_NAMES[mode].lower()}: {session.total()} item(s) in all"
    if held:
        message += (f"; {held} being decided by other annotators right now (one comes back to you if its lease runs "
                    "out without a decision)")
    return _notice(request, venue, mode, message + ".", saved=_saved(request))


def item_page(request: Request):
    venue, mode = venue_of(request), _mode(request)
    session = _session(request, venue, mode)
    item = _item(session, request)
    try:
        session.hold(item)  # refused, saying why, when it was decided meanwhile or is another annotator's
    except ItemUnavailable as exc:
        return _notice(request, venue, mode, _sentence(str(exc)), status_code=409, saved=_saved(request))
    open_items = session.open_items()
    return render(request, "arbitration/item.html", {
        "venue": venue, "mode": mode, "mode_name": MODE_NAMES[mode], "item": item,
        "position": session.position(item), "total": session.total(), "open_count": len(open_items),
        "held": session.held_by_others(), "source_name": SOURCE_NAMES.get(item.source, item.source),
        "label_keys": LABEL_KEYS, "candidate_keys": CANDIDATE_KEYS, "labels": LABELS,
        "no_label_text": arb.no_label_text, "item_url": _item_url(venue, mode, item),
        "lease_minutes": int(session.lease_duration.total_seconds() // 60),
        "ledger_file": LEDGER_FILES[mode], "reader": READERS[mode], "saved": _saved(request),
        "max_note": MAX_NOTE_LENGTH,
    })


async def decide(request: Request):
    venue, mode = venue_of(request), _mode(request)
    form = await request.form()
    key, note = str(form.get("key", "")).strip().lower(), str(form.get("note", "")) or None  # kept exactly
    if note is not None and len(note) > MAX_NOTE_LENGTH:
        raise HTTPException(400, f"A note of at most {MAX_NOTE_LENGTH} characters, please.")

    def record() -> str | Response:
        session = _session(request, venue, mode)
        item = _item(session, request)
        answer = answer_of_key(item, key, mode)
        if isinstance(answer, str):
            raise HTTPException(400, f"{answer}; nothing was recorded")
        label, choice = answer
        try:
            session.decide(item, label, choice, note)
        except ItemUnavailable as exc:
            return _notice(request, venue, mode, _sentence(str(exc)), status_code=409)
        except AnnotationError as exc:
            raise HTTPException(409, str(exc)) from None
        where = f" (candidate {choice[-1]})" if choice.startswith("candidate_") else ""
        return f"saved: {label}{where} on item {session.position(item)} of {session.total()}"

    outcome = await run_in_threadpool(record)
    if isinstance(outcome, Response):
        return outcome
    return RedirectResponse(_flash(request, outcome, _next_url(venue, mode)), status_code=303)


async def skip(request: Request):
    venue, mode = venue_of(request), _mode(request)

    def take_next() -> Item | None:
        session = _session(request, venue, mode)
        return session.next_item(after=_item(session, request))

    item = await run_in_threadpool(take_next)
    return RedirectResponse(_item_url(venue, mode, item) if item else _next_url(venue, mode), status_code=303)


async def renew_lease(request: Request):
    """htmx, while the annotator works on the item (keys, clicks): keep the lease. 409 with the reason if lost."""
    venue, mode = venue_of(request), _mode(request)

    def renew() -> None:
        session = _session(request, venue, mode)
        try:
            session.hold(_item(session, request))
        except ItemUnavailable as exc:
            raise HTTPException(409, f"{exc}; your answer on this item would not be recorded") from None

    await run_in_threadpool(renew)
    return Response(status_code=204)


async def leave(request: Request):
    venue, mode = venue_of(request), _mode(request)
    await run_in_threadpool(lambda: _session(request, venue, mode).release())
    return RedirectResponse(venue_url(venue, "arbitration"), status_code=303)


async def undo(request: Request):
    venue, mode = venue_of(request), _mode(request)

    def retract() -> str:
        session = _session(request, venue, mode)
        undone = session.undo()
        if undone is None:
            raise HTTPException(409, "nothing of yours to undo in this mode")
        item = next(item for item in session.items if item.item_id == undone.item_id)
        return _flash(request, f"undone: your decision {undone.label} on item {session.position(item)}",
                      _item_url(venue, mode, item))

    return RedirectResponse(await run_in_threadpool(retract), status_code=303)


def agreement_page(request: Request):
    venue = venue_of(request)
    data = lake_data(request)
    labellers = data.optional_table("labeller_agreement", venue)
    rows = [] if labellers is None else [
        {**row, "folded": arb.folded_table(row["confusion"])}
        for row in labellers.filter(labellers["claim_type"] == "all").iter_rows(named=True)]
    return render(request, "arbitration/agreement.html", {
        "venue": venue, "labellers": rows, "labels": LABELS,
        "annotators": annotator_agreement(data.root, venue)})


ROUTES = [
    Route("/arbitration", venues_page, methods=["GET"], name="arbitration_venues"),
    Route("/venues/{venue}/arbitration", modes_page, methods=["GET"], name="arbitration_modes"),
    Route("/venues/{venue}/arbitration/{mode}", next_item, methods=["GET"], name="arbitration_next"),
    Route("/venues/{venue}/arbitration/{mode}/undo", undo, methods=["POST"], name="arbitration_undo"),
    Route("/venues/{venue}/arbitration/{mode}/items/{opaque_id}", item_page, methods=["GET"],
          name="arbitration_item"),
    Route("/venues/{venue}/arbitration/{mode}/items/{opaque_id}/decide", decide, methods=["POST"],
          name="arbitration_decide"),
    Route("/venues/{venue}/arbitration/{mode}/items/{opaque_id}/skip", skip, methods=["POST"],
          name="arbitration_skip"),
    Route("/venues/{venue}/arbitration/{mode}/items/{opaque_id}/lease", renew_lease, methods=["POST"],
          name="arbitration_lease"),
    Route("/venues/{venue}/arbitration/{mode}/leave", leave, methods=["POST"], name="arbitration_leave"),
    Route("/venues/{venue}/agreement", agreement_page, methods=["GET"], name="agreement"),
]
NAV = (("Arbitrate", "/arbitration"),)
