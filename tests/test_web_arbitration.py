"""Arbitration and the audit in a real browser (Debian's chromium through Playwright) on the built sample venue: two
annotators at once, leases, reloads, the terminal's keys, raw answers, the blind audit, consensus and the agreement
page. The module's lake has no `arbitration_key` at all, so every page here is shown to work without reading it, and
no page may carry a claim id (or anything else `claim_labels` could be joined on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import DecisionLedger
from peerify_dagster.annotation.sessions import LeaseStore, Session, queue_opaque_ids
from peerify_dagster.cli.arbitrate import build_audit_sample
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
    assert taken.status_code == 409 and "another annotator (Ivy) is deciding this item" in taken.text
    renew = other.post(f"{item_url}/lease", data={"csrf_token": csrf_from(taken.text)})
    assert renew.status_code == 409
    assert client.post(f"{item_url}/lease", data={"csrf_token": token}).status_code == 204
    left = client.post(f"/venues/{VENUE}/arbitration/arbitration/leave", data={"csrf_token": token})
    assert left.status_code == 303 and "Ivy" not in {lease.annotator for lease in LeaseStore(lake, VENUE).snapshot()}
    assert other.get(item_url).status_code == 200  # given up: Jo may take it now
    agreement = client.get(f"/venues/{VENUE}/agreement")
    assert agreement.status_code == 200 and opaque not in agreement.text
    assert_blind(agreement.text + modes.text, lake)
