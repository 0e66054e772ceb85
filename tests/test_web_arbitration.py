"""Arbitration and the audit in a real browser (Debian's chromium through Playwright) on the built sample venue: two
annotators at once, leases, reloads, the terminal's keys, raw answers, the blind audit, consensus and the agreement
page. The module's lake has no `arbitration_key` at all, so every page here is shown to work without reading it, and
no page may carry a claim id (or anything else `claim_labels` could be joined on)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import DecisionLedger
from peerify_dagster.annotation.sessions import LeaseStore, Session, answer_of_key, now, queue_opaque_ids
from peerify_dagster.cli.arbitrate import build_audit_sample
from peerify_dagster.domain import leases
from peerify_dagster.domain.labels import LABELS, NOT_SUPPORTED, PARTIALLY_SUPPORTED
from peerify_dagster.resources.lake import Lake
from tests.web_support import csrf_from, sign_in_client, sign_in_page

VENUE = "sample"
ARBITRATE = f"/venues/{VENUE}/arbitration/arbitration"


@pytest.fixture(scope="module")
def lake(web_lake: Path) -> Path:
    """The module's copy of the sample lake without its arbitration_key, and with an audit sample drawn."""
    Lake(web_lake).table_path("arbitration_key", VENUE).unlink()
    sample, _ = build_audit_sample(Lake(web_lake), VENUE, 8, 7)
    audit_sample.write_sample(web_lake, VENUE, sample, force=False)
    return web_lake


@pytest.fixture(scope="module")
def server(lake, web_server):
    return web_server


@pytest.fixture(scope="module")
def queue(lake) -> dict[str, dict]:
    """The queue's rows by the opaque id the pages show."""
    rows = Lake(lake).read_table("arbitration_queue", VENUE).to_dicts()
    ids = queue_opaque_ids(lake, VENUE, rows)
    return {ids[row["item_id"]]: row for row in rows}


def decisions(lake: Path, kind: str = "arbitration") -> list:
    return DecisionLedger(lake, VENUE, kind).read().decisions


def assert_blind(html: str, lake: Path) -> None:
    """No id of a claim, queue item or review (what claim_labels or canonical_labels are keyed by) on the page."""
    rows = Lake(lake).read_table("claim_labels", VENUE).to_dicts()
    ids = {value for row in rows for value in (row["claim_id"], f"{row['claim_id']}:{row['source']}", row["review_id"])}
    assert [value for value in ids if value in html] == []


def open_item(page, server, path: str = ARBITRATE) -> str:  # noqa: ANN001 - a Playwright Page
    """Go to the next item of a mode; its opaque id."""
    page.goto(server.url + path)
    return page.get_by_test_id("item-id").inner_text()


def new_annotator(browser, server, name: str):  # noqa: ANN001 - a Playwright Browser
    page = browser.new_context().new_page()
    page.set_default_timeout(10_000)  # a page here answers in well under a second
    sign_in_page(page, server, name)
    return page


def test_two_annotators_decide_different_items_at_once(browser, server, lake, queue):
    ann, ben = new_annotator(browser, server, "Ann"), new_annotator(browser, server, "Ben")
    ann_item, ben_item = open_item(ann, server), open_item(ben, server)
    assert ann_item != ben_item  # Ann's item is leased to her: Ben is offered another
    assert "being decided by other annotators" in ben.get_by_test_id("progress").inner_text()
    before = len(decisions(lake))
    with ann.expect_navigation(), ben.expect_navigation():  # both decisions in flight together
        ann.keyboard.press("s")
        ben.keyboard.press("d")
    made = decisions(lake)[before:]
    assert sorted((d.annotator, d.item_id, d.label) for d in made) == sorted([
        ("Ann", queue[ann_item]["item_id"], "Supported"), ("Ben", queue[ben_item]["item_id"], "Not Determined")])
    assert ann.get_by_test_id("saved").inner_text().startswith("saved: Supported")
    # each is on a fresh item now, neither the other's nor one decided
    next_ann, next_ben = ann.get_by_test_id("item-id").inner_text(), ben.get_by_test_id("item-id").inner_text()
    assert len({ann_item, ben_item, next_ann, next_ben}) == 4
    for page in (ann, ben):
        assert_blind(page.content(), lake)
        page.context.close()
    assert len(decisions(lake)) == before + 2  # nothing twice


def test_a_reload_mid_item_keeps_the_item_the_note_typed_and_every_decision(browser, server, lake, queue):
    page = new_annotator(browser, server, "Cleo")
    first = open_item(page, server)
    with page.expect_navigation():
        page.keyboard.press("n")
    decided = len(decisions(lake))
    second = page.get_by_test_id("item-id").inner_text()
    page.keyboard.press("o")  # the note field, as in the terminal
    page.keyboard.type("checked the table twice")
    page.reload()
    assert page.get_by_test_id("item-id").inner_text() == second  # the same item: still leased to Cleo
    assert page.locator("#note").input_value() == "checked the table twice"
    assert len(decisions(lake)) == decided and queue[first]["item_id"] in {d.item_id for d in decisions(lake)}
    page.locator("#note").press("Escape")
    with page.expect_navigation():
        page.keyboard.press("p")
    last = decisions(lake)[-1]
    assert (last.annotator, last.item_id, last.note) == ("Cleo", queue[second]["item_id"], "checked the table twice")
    page.context.close()


def test_keys_choose_a_candidate_refuse_one_without_a_label_skip_and_undo(browser, server, lake, queue):
    page = new_annotator(browser, server, "Dan")
    # an item one of whose two answers did not parse, from the queue's end (the tests before took its first items)
    item = [opaque for opaque, row in queue.items() if (row["candidate_1_label"] is None) != (
        row["candidate_2_label"] is None)][-1]
    page.goto(f"{server.url}{ARBITRATE}/items/{item}")
    row = queue[item]
    labelled = 1 if row["candidate_1_label"] else 2
    before = len(decisions(lake))
    page.keyboard.press(str(3 - labelled))
    assert page.locator("#flash").inner_text() == (f"candidate {3 - labelled} has no label to choose; press a "
                                                   "label key instead")
    assert len(decisions(lake)) == before and page.get_by_test_id("item-id").inner_text() == item
    with page.expect_navigation():
        page.keyboard.press(str(labelled))
    last = decisions(lake)[-1]
    assert (last.item_id, last.choice, last.label) == (row["item_id"], f"candidate_{labelled}",
                                                       row[f"candidate_{labelled}_label"])
    skipped = page.get_by_test_id("item-id").inner_text()
    with page.expect_navigation():
        page.keyboard.press("k")
    assert page.get_by_test_id("item-id").inner_text() not in (skipped, item)
    held = {(lease.annotator, lease.item_id) for lease in LeaseStore(lake, VENUE).snapshot()}
    assert ("Dan", queue[skipped]["item_id"]) not in held  # moving on gave the skipped item up
    with page.expect_navigation():
        page.keyboard.press("u")  # undo: the decided item is open again, on screen
    assert page.get_by_test_id("item-id").inner_text() == item
    assert page.get_by_test_id("saved").inner_text().startswith("undone: your decision")
    undone = decisions(lake)[-1]
    assert (undone.action, undone.supersedes) == ("retract", last.decision_id)
    page.context.close()


def test_a_candidate_that_did_not_parse_shows_its_raw_answer(browser, server, lake, queue):
    page = new_annotator(browser, server, "Eve")
    item = open_item(page, server)
    row = queue[item]
    unparsed = [n for n in (1, 2) if row[f"candidate_{n}_label"] is None]
    assert unparsed, "the sample's queue items each have an answer that did not parse"
    for n in unparsed:
        candidate = page.get_by_test_id(f"candidate-{n}")
        assert "(no label: the answer did not parse)" in candidate.inner_text()
        assert page.get_by_test_id(f"raw-answer-{n}").inner_text() == row[f"candidate_{n}_raw_answer"].strip()
    assert page.get_by_test_id("claim").inner_text() == row["claim_text"]
    page.context.close()


def test_the_audit_is_blind_and_consensus_settles_a_disagreement(browser, server, lake):
    page = new_annotator(browser, server, "Fay")
    open_item(page, server, f"/venues/{VENUE}/arbitration/audit")
    main = page.locator("main")
    assert page.get_by_test_id("blind").is_visible() and page.locator("[data-testid^=candidate]").count() == 0
    shown = main.inner_text().replace(page.locator("#decide-form").inner_text(), "")
    assert [label for label in LABELS if label in shown] == []  # no automated label outside the label keys
    for word in ("candidate", "raw answer", "prediction", "canonical_labels"):
        assert word not in shown.lower()
    assert_blind(page.content(), lake)
    with page.expect_navigation():
        page.keyboard.press("p")
    [fay] = [d for d in decisions(lake, "audit") if d.annotator == "Fay"]
    assert (fay.kind, fay.choice, fay.label) == ("audit", "label", PARTIALLY_SUPPORTED)

    # a second annotator (here in the terminal's session) disagrees: the item needs a consensus
    gus = Session(lake, VENUE, "audit", "Gus")
    gus.decide(next(item for item in gus.items if item.item_id == fay.item_id), NOT_SUPPORTED, "label", None)
    settler = new_annotator(browser, server, "Hal")
    open_item(settler, server, f"/venues/{VENUE}/arbitration/consensus")
    assert settler.get_by_test_id("human-labels").inner_text() == f"{PARTIALLY_SUPPORTED} vs {NOT_SUPPORTED}"
    assert_blind(settler.content(), lake)
    with settler.expect_navigation():
        settler.keyboard.press("n")
    [settled] = [d for d in decisions(lake, "audit") if d.kind == "consensus"]
    assert (settled.item_id, settled.annotator, settled.label) == (fay.item_id, "Hal", NOT_SUPPORTED)

    settler.goto(f"{server.url}/venues/{VENUE}/agreement")
    assert settler.get_by_test_id("annotators").inner_text().startswith("Annotators: Fay and Gus")
    confusion = settler.get_by_test_id("annotator-confusion")
    cells = confusion.locator("tr").nth(1 + LABELS.index(PARTIALLY_SUPPORTED)).locator("td")
    assert [cells.nth(i).inner_text() for i in range(len(LABELS))] == [
        "1" if label == NOT_SUPPORTED else "0" for label in LABELS]
    assert settler.get_by_test_id("labeller-agreement").is_visible()
    for page_ in (page, settler):
        page_.context.close()


def test_pages_refuse_what_they_must_and_never_need_the_key(server, lake, queue):
    assert not Lake(lake).table_path("arbitration_key", VENUE).exists()
    client = server.client()
    assert client.get(ARBITRATE).headers["location"].startswith("/signin")  # annotator pages need a name
    sign_in_client(client, "Ivy")
    modes = client.get(f"/venues/{VENUE}/arbitration")
    assert modes.status_code == 200 and 'data-mode="audit"' in modes.text
    item_url = client.get(ARBITRATE).headers["location"]
    page = client.get(item_url)
    assert page.status_code == 200
    assert_blind(page.text, lake)
    opaque = item_url.rsplit("/", 1)[1]
    token = csrf_from(page.text)
    bad_key = client.post(f"{item_url}/decide", data={"csrf_token": token, "key": "x"})
    assert bad_key.status_code == 400 and "unknown key &#39;x&#39;; nothing was recorded" in bad_key.text
    no_token = client.post(f"{item_url}/decide", data={"key": "s"})
    assert no_token.status_code == 403
    gone = client.get(f"{ARBITRATE}/items/q-000000000000")
    assert gone.status_code == 404 and "item ids change whenever the queue is rebuilt" in gone.text
    # another annotator asking for Ivy's item by its address is told it is taken, and cannot renew it
    other = server.client()
    sign_in_client(other, "Jo")
    taken = other.get(item_url)
    assert taken.status_code == 409 and "Another annotator (Ivy) is deciding this item" in taken.text
    renew = other.post(f"{item_url}/lease", data={"csrf_token": csrf_from(taken.text)})
    assert renew.status_code == 409
    assert client.post(f"{item_url}/lease", data={"csrf_token": token}).status_code == 204
    left = client.post(f"/venues/{VENUE}/arbitration/arbitration/leave", data={"csrf_token": token})
    assert left.status_code == 303 and "Ivy" not in {lease.annotator for lease in LeaseStore(lake, VENUE).snapshot()}
    assert other.get(item_url).status_code == 200  # given up: Jo may take it now
    agreement = client.get(f"/venues/{VENUE}/agreement")
    assert agreement.status_code == 200 and opaque not in agreement.text
    assert_blind(agreement.text + modes.text, lake)


# -- refusals, the saved message, the layout ------------------------------------------------------------------------
def free_items(lake: Path, count: int | None = None) -> list:
    """Open arbitration items nobody holds now (the tests before leave some held)."""
    held = {lease.item_id for lease in LeaseStore(lake, VENUE).snapshot() if lease.live(now())}
    return [item for item in Session(lake, VENUE, "arbitration", "setup").open_items()
            if item.item_id not in held][:count]


def after_a_lease() -> datetime:
    """A clock a second past any lease taken now: the sessions on it see those leases run out."""
    return now() + leases.DEFAULT_LEASE + timedelta(seconds=1)


def signed_in(server, name: str):  # noqa: ANN001 - the module's LiveServer
    client = server.client()
    sign_in_client(client, name)
    return client


def test_each_refusal_names_its_true_reason(server, lake):
    ran_out, held, decided = free_items(lake, 3)
    url = {item.item_id: f"{ARBITRATE}/items/{item.opaque_id}" for item in (ran_out, held, decided)}
    before = len(decisions(lake))

    ned = signed_in(server, "Ned")  # Ned's lease runs out and Oz takes the item
    token = csrf_from(ned.get(url[ran_out.item_id]).text)
    Session(lake, VENUE, "arbitration", "Oz", clock=after_a_lease).hold(ran_out)
    late = ned.post(f"{url[ran_out.item_id]}/decide", data={"csrf_token": token, "key": "d"})
    assert late.status_code == 409
    assert "Another annotator (Oz) took this item after your lease ran out; nothing was recorded." in late.text

    Session(lake, VENUE, "arbitration", "Quinn").hold(held)  # Quinn holds an item Pat never had
    pat = signed_in(server, "Pat")
    shown = pat.get(url[held.item_id])
    assert shown.status_code == 409 and "Another annotator (Quinn) is deciding this item" in shown.text
    refused = pat.post(f"{url[held.item_id]}/decide", data={"csrf_token": csrf_from(shown.text), "key": "d"})
    assert refused.status_code == 409 and "Another annotator (Quinn) is deciding this item; it is theirs until" \
        in refused.text and "lease ran out" not in refused.text  # Pat never had a lease to run out

    sam = signed_in(server, "Sam")  # Sam opens an item Ruth decides meanwhile (in the terminal, say)
    token = csrf_from(sam.get(url[decided.item_id]).text)
    label, choice = answer_of_key(decided, "d", "arbitration")
    Session(lake, VENUE, "arbitration", "Ruth", clock=after_a_lease).decide(decided, label, choice, None)
    renew = sam.post(f"{url[decided.item_id]}/lease", data={"csrf_token": token})
    assert renew.status_code == 409 and "this item was decided meanwhile by Ruth" in renew.text
    refused = sam.post(f"{url[decided.item_id]}/decide", data={"csrf_token": token, "key": "s"})
    assert refused.status_code == 409 and "This item was decided meanwhile by Ruth; nothing was recorded." \
        in refused.text
    assert [(d.annotator, d.item_id) for d in decisions(lake)[before:]] == [("Ruth", decided.item_id)]


def test_a_lease_is_not_renewed_on_an_item_decided_meanwhile(browser, server, lake):
    [item] = free_items(lake, 1)
    page = new_annotator(browser, server, "Lee")
    page.goto(f"{server.url}{ARBITRATE}/items/{item.opaque_id}")  # leased to Lee ...
    label, choice = answer_of_key(item, "n", "arbitration")  # ... until it runs out and Mo decides the item
    Session(lake, VENUE, "arbitration", "Mo", clock=after_a_lease).decide(item, label, choice, None)
    with page.expect_response(lambda answer: answer.url.endswith("/lease")) as renewal:
        page.keyboard.press("x")  # any key on the page renews the lease
    assert renewal.value.status == 409
    page.wait_for_function("document.getElementById('flash').textContent.trim().length > 0")
    assert "this item was decided meanwhile by Mo" in page.locator("#flash").inner_text()
    page.context.close()


def overlaps(one: dict, other: dict) -> bool:
    return (one["x"] < other["x"] + other["width"] and other["x"] < one["x"] + one["width"]
            and one["y"] < other["y"] + other["height"] and other["y"] < one["y"] + one["height"])


def test_at_1280_by_720_the_decision_panel_stays_in_view_and_never_covers_the_candidates(browser, server, lake,
                                                                                         tmp_path):
    # the item with the longest raw answer: the tallest candidates
    item = max(free_items(lake), key=lambda i: sum(len(c.raw_answer or "") for c in i.candidates))
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    sign_in_page(page, server, "Vi")
    page.goto(f"{server.url}{ARBITRATE}/items/{item.opaque_id}")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # nothing runs off the side
    bottom = page.evaluate("document.documentElement.scrollHeight - innerHeight")
    for scrolled in [*range(0, bottom, 60), bottom]:  # every place the page can be read from
        page.evaluate(f"scrollTo(0, {scrolled})")
        panel = page.locator("#decide-form").bounding_box()
        assert 0 <= panel["y"] and panel["y"] + panel["height"] <= 720, f"the keys are out of view at {scrolled}"
        for n in (1, 2):
            candidate = page.get_by_test_id(f"candidate-{n}").bounding_box()
            assert not overlaps(panel, candidate), f"the decision panel covers candidate {n} at {scrolled}"
    page.get_by_test_id("candidate-1").scroll_into_view_if_needed()
    boxes = [page.get_by_test_id(f"candidate-{n}").bounding_box() for n in (1, 2)]
    assert not overlaps(*boxes)
    for box in boxes:  # what lies at a candidate's visible middle is the candidate itself
        top, end = max(box["y"], 0), min(box["y"] + box["height"], 720)
        hit = page.evaluate(f"document.elementFromPoint({box['x'] + box['width'] / 2}, {(top + end) / 2})"
                            ".closest('[data-testid^=candidate]') !== null")
        assert hit
    page.screenshot(path=str(tmp_path / "arbitration_1280x720.png"))
    page.context.close()


def test_the_saved_message_shows_where_it_was_made_and_never_on_a_later_item(browser, server, lake):
    """The decision that empties the queue says so on the page it lands on; no later page repeats it."""
    bulk = Session(lake, VENUE, "arbitration", "Bulk")
    *others, last = free_items(lake)
    for item in others:
        label, choice = answer_of_key(item, "d", "arbitration")
        bulk.decide(item, label, choice, None)
    page = new_annotator(browser, server, "Kim")
    assert open_item(page, server) == last.opaque_id
    with page.expect_navigation():
        page.keyboard.press("d")
    assert page.get_by_test_id("notice").inner_text().startswith("Nothing open for you in arbitration")
    assert page.get_by_test_id("saved").inner_text().startswith("saved: Not Determined")
    bulk.undo()  # an item is open again: Kim is offered it, without the message of her last decision
    assert open_item(page, server) == others[-1].opaque_id
    assert page.get_by_test_id("saved").count() == 0
    page.reload()
    assert page.get_by_test_id("saved").count() == 0
    page.context.close()
