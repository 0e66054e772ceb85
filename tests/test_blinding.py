"""Annotators are blind even to someone who reads the public reviews and this repository. The attacker here has
what an annotator has (the arbitration pages of the real web app, `peerify arbitrate` in a terminal, the queue's
exports for annotators and Label Studio) and what anyone has (the venue's public snapshot, venues.yaml with the
venue's seed, this repository's code), but not the lake. They recover each item's claim id from the public reviews
and recompute the candidate order as a plain hash of venue, claim id, source and seed (how it was made before it
was keyed with the venue's secret), match passage tags to forums, and look for any id that joins to the labellers'
rows. Scored against the key over the sample venue's queue, they must do no better than chance (a two-sided binomial
bound); the same attack on a queue ordered the old way names the labeller of nearly every item.

Also: the order is keyed with the secret the sessions keep (made once, never replaced, on S3 too), and decisions made
on a queue ordered the old way keep their meaning once the queue is ordered by the secret: each still upholds the
labeller it upheld, or it is reported and its item pending again."""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from math import comb
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from peerify_dagster.annotation.decisions import DecisionLedger, decisions_dir, new_decision
from peerify_dagster.annotation.sessions import SECRET_FILE, item_id_secret, queue_opaque_ids
from peerify_dagster.assets.arbitration import KEY_SCHEMA, QUEUE_SCHEMA
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain import claims as rules
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.venues import load_registry
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.store import LakeStore
from tests.arbitration_support import ARBITRATION, build, canonical, pair, write_inputs
from tests.cli_support import cli_env, peerify
from tests.support import SAMPLE, materialization_metadata, sample_registry
from tests.test_arbitrate_terminal import arbitrate
from tests.web_support import csrf_from, sign_in_client

VENUE = "sample"
ALPHA = 1e-4  # the chance that an attacker with no information lands outside the bound, both tails together
_WORD = re.compile(r"[a-z0-9]+")
_SHOWN = {"claim": re.compile(r'<p data-testid="claim">(.*?)</p>', re.S),
          "material": re.compile(r'<pre class="evidence" data-testid="material">(.*?)</pre>', re.S)}


def chance_bounds(n: int, alpha: float = ALPHA) -> tuple[int, int]:
    """(low, high): a guesser with no information, right on each of n items with probability 1/2, gets more than
    `low` and fewer than `high` right but for a chance of `alpha`."""
    def at_least(k: int) -> float:
        return sum(comb(n, i) for i in range(k, n + 1)) / 2 ** n
    high = next(k for k in range(n + 1) if at_least(k) <= alpha / 2)
    return n - high, high


def old_order(venue: str, item_id: str, seed: int) -> tuple[str, str]:
    """How the queue once ordered an item's candidates, from inputs anyone can work out (the attacker's copy of
    the old code)."""
    digest = hashlib.sha256(f"{venue}:{item_id}:{seed}".encode()).digest()
    return ("a", "b") if digest[-1] % 2 == 0 else ("b", "a")


def words(text: str | None) -> set[str]:
    return set(_WORD.findall((text or "").lower()))


# -- what the attacker has ------------------------------------------------------------------------------------------
@dataclass
class Public:
    """The venue's public snapshot and registry entry."""

    seed: int
    reviews: dict[str, tuple[str, str]]  # review id -> (forum id, text)
    replies: list[tuple[str, str]]  # (the review replied to, the authors' text)
    forum_words: dict[str, set[str]]  # forum id -> the words of all its notes
    rarity: dict[str, float]  # word -> its inverse document frequency over the forums

    @classmethod
    def read(cls) -> Public:
        reviews, replies, forum_words = {}, [], {}
        for path in sorted((SAMPLE / "forums").glob("*.json")):
            forum = json.loads(path.read_text())
            texts = []
            for note in forum["notes"]:
                text = " ".join(str(field.get("value")) for field in note["content"].values()
                                if isinstance(field, dict))
                texts.append(text)
                if any(invitation.endswith("Official_Review") for invitation in note["invitations"]):
                    reviews[note["id"]] = (note["forum"], text)
                elif any("Authors" in signature for signature in note["signatures"]) \
                        and note["replyto"] != note["forum"]:
                    replies.append((note["replyto"], text))
            forum_words[forum["forum_id"]] = words(" ".join(texts))
        seed = load_registry(REPO_ROOT / "venues.yaml")[VENUE].seed
        counts = Counter(word for forum in forum_words.values() for word in forum)
        rarity = {word: math.log(len(forum_words) / count) for word, count in counts.items()}
        return cls(seed, reviews, [r for r in replies if r[0] in reviews], forum_words, rarity)

    def claim_id(self, claim_text: str, source: str, material: str, shown: str) -> str:
        """The attacker's best guess of an item's claim id: the review the material answers (the thread) or a review
        of the forum the material comes from (named by a forum id shown, else its words), the one sharing the most
        of the claim's words."""
        material_words = words(material)
        if source == "thread":  # the authors' reply is public: it names the review it answers
            reply = max(self.replies, key=lambda r: len(words(r[1]) & material_words) / (1 + len(words(r[1]))))
            candidates = [reply[0]]
        else:
            named = [forum for forum in self.forum_words if forum in shown]
            forum = named[0] if named else max(self.forum_words,
                                               key=lambda f: self._weight(material_words & self.forum_words[f]))
            candidates = [review for review, (of, _) in self.reviews.items() if of == forum]
        claim_words = words(claim_text)
        review = max(candidates, key=lambda r: self._weight(claim_words & words(self.reviews[r][1])))
        return rules.claim_id(review, claim_text)

    def _weight(self, shared: set[str]) -> float:
        return sum(self.rarity.get(word, 0.0) for word in shared)


@pytest.fixture(scope="module")
def lake(web_lake: Path) -> Path:
    return web_lake


@pytest.fixture(scope="module")
def shown(lake, web_server, tmp_path_factory) -> dict:
    """Everything an annotator sees of the queue: the exports (JSONL, CSV, Label Studio), every item's page in the
    real web app, and `peerify arbitrate` in a terminal skipping through every item."""
    folder = tmp_path_factory.mktemp("annotator")
    env = cli_env(lake, sample_registry(folder), None)
    for fmt, out in (("jsonl", "queue.jsonl"), ("csv", "queue.csv"), ("labelstudio", "ls")):
        done = peerify("queue", "export", "--venue", VENUE, "--format", fmt, "--out", str(folder / out), "--all",
                       env=env, timeout=120)
        assert done.returncode == 0, done.stderr
    exports = {name: (folder / name).read_text() for name in ("queue.jsonl", "queue.csv", "ls/tasks.json",
                                                              "ls/labelling_config.xml")}
    records = [json.loads(line) for line in exports["queue.jsonl"].splitlines()]
    client = web_server.client()
    sign_in_client(client, "Mallory")
    pages = {}
    for record in records:
        page = client.get(f"/venues/{VENUE}/arbitration/arbitration/items/{record['item_id']}")
        assert page.status_code == 200, page.text[-500:]
        pages[record["item_id"]] = page.text
    client.post(f"/venues/{VENUE}/arbitration/arbitration/leave", data={"csrf_token": csrf_from(page.text)})
    terminal = arbitrate(env, "--venue", VENUE, "--annotator", "Mallory", input_text="k\n" * len(records) + "q\n")
    assert terminal.returncode == 0 and "no open item left" in terminal.stdout, terminal.stderr
    return {"records": records, "pages": pages, "exports": exports, "terminal": terminal.stdout}


def page_field(html_text: str, field: str) -> str:
    return html.unescape(_SHOWN[field].search(html_text).group(1))


def the_key(lake: Path) -> dict[str, str]:
    """The truth, which only the lake holds: opaque id -> the labeller shown as candidate 1."""
    queue = Lake(lake).read_table("arbitration_queue", VENUE).to_dicts()
    ids = queue_opaque_ids(lake, VENUE, queue)
    key = Lake(lake).read_table("arbitration_key", VENUE)
    return {ids[item_id]: labeller for item_id, labeller in key.select("item_id", "candidate_1_labeller").iter_rows()}


# -- the attack -----------------------------------------------------------------------------------------------------
def test_an_attacker_with_the_public_reviews_and_what_annotators_see_does_no_better_than_chance(lake, shown):
    public, truth = Public.read(), the_key(lake)
    guesses = {}  # opaque id -> (the claim id guessed, the labeller guessed as candidate 1)
    for record in shown["records"]:
        page = shown["pages"][record["item_id"]]
        claim_text, material = page_field(page, "claim"), page_field(page, "material")
        claim_id = public.claim_id(claim_text, record["source"], material, page)
        item_id = arb.item_id_of(claim_id, record["source"])
        guesses[record["item_id"]] = (item_id, old_order(VENUE, item_id, public.seed)[0])
    n = len(guesses)
    low, high = chance_bounds(n)
    hits = sum(labeller == truth[opaque] for opaque, (_, labeller) in guesses.items())
    assert low < hits < high, f"{hits} of {n} candidate orders recovered (chance: between {low} and {high})"
    # The attack is a real one: the claim ids it recovers would have named the labeller of nearly every item of a
    # queue ordered the old way (the same items, ordered by the plain hash of their true ids).
    queue = Lake(lake).read_table("arbitration_queue", VENUE).to_dicts()
    true_ids = {queue_opaque_ids(lake, VENUE, queue)[row["item_id"]]: row["item_id"] for row in queue}
    old_hits = sum(labeller == old_order(VENUE, true_ids[opaque], public.seed)[0]
                   for opaque, (_, labeller) in guesses.items())
    assert old_hits >= high, f"the attack recovers only {old_hits} of {n} items' old order"


def test_nothing_an_annotator_sees_names_a_forum_review_or_claim(lake, shown):
    labels = Lake(lake).read_table("claim_labels", VENUE)
    joinable = {*labels["claim_id"], *labels["review_id"], *labels["paper_id"], *Public.read().forum_words,
                *(arb.item_id_of(c, s) for c, s in labels.select("claim_id", "source").iter_rows())}
    everything = {"terminal": shown["terminal"], **shown["exports"], **shown["pages"]}
    named = {where: sorted(value for value in joinable if value in text) for where, text in everything.items()}
    assert {where: values for where, values in named.items() if values} == {}
    # passages are tagged per item; the queue (the maintainer's) says which chunk each tag stands for
    queue = Lake(lake).read_table("arbitration_queue", VENUE)
    chunks = set(Lake(lake).read_table("chunks", VENUE)["chunk_id"])
    tagged = queue.filter(pl.col("source") == "manuscript").to_dicts()
    assert tagged and all(row["source_material"].startswith("[P1] ") for row in tagged)
    for row in tagged:
        shown_tags = sorted({int(n) for n in re.findall(r"\[P(\d+)\]", row["source_material"])})
        assert shown_tags == list(range(1, len(shown_tags) + 1))
        assert all(row["passage_chunks"][n - 1] in chunks for n in shown_tags)


# -- the secret keys the order ------------------------------------------------------------------------------------
LABELLED = [row for i in range(40) for row in pair(VENUE, f"c{i:02d}", "thread", LABELS[i % 4],
                                                       None if i % 5 == 0 else LABELS[(i + 1) % 4])]


def key_of(lake_root: str | Path) -> dict[str, str]:
    return dict(Lake(lake_root).read_table("arbitration_key", VENUE).select("item_id", "candidate_1_labeller")
                .iter_rows())


def test_the_queue_is_ordered_by_the_secret_kept_with_the_decisions_never_replaced(tmp_path):
    lake_root, known = tmp_path / "lake", b"a secret made before the queue"
    secret_path = decisions_dir(lake_root, VENUE) / SECRET_FILE
    secret_path.parent.mkdir(parents=True)
    secret_path.write_bytes(known)
    write_inputs(lake_root, VENUE, LABELLED)
    instance = dg.DagsterInstance.ephemeral()
    build(VENUE, sample_registry(tmp_path), lake_root, instance)
    order = arb.keyed_order(known, VENUE)
    assert key_of(lake_root) == {item_id: order(item_id)[0] for item_id in key_of(lake_root)}
    assert key_of(lake_root) != {item_id: old_order(VENUE, item_id, 20260110)[0] for item_id in key_of(lake_root)}
    build(VENUE, sample_registry(tmp_path), lake_root, instance)
    assert secret_path.read_bytes() == known and item_id_secret(lake_root, VENUE) == known


def test_on_an_s3_lake_the_secret_is_made_in_the_bucket_and_orders_the_queue(s3_service, tmp_path, monkeypatch):
    for name, value in s3_service.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PEERIFY_LAKE_CACHE", str(tmp_path / "cache"))
    lake_root = f"{s3_service.make_bucket('blinding')}/{tmp_path.name}"
    write_inputs(lake_root, VENUE, LABELLED)
    build(VENUE, sample_registry(tmp_path), lake_root, dg.DagsterInstance.ephemeral())
    secret = decisions_dir(lake_root, VENUE) / SECRET_FILE
    assert LakeStore(lake_root).is_object_store and secret.exists()
    order = arb.keyed_order(item_id_secret(lake_root, VENUE), VENUE)
    assert key_of(lake_root) == {item_id: order(item_id)[0] for item_id in key_of(lake_root)}


# -- decisions made on a queue ordered the old way ----------------------------------------------------------------
def test_decisions_made_on_a_queue_ordered_the_old_way_keep_their_meaning(tmp_path):
    lake_root = tmp_path / "lake"
    write_inputs(lake_root, VENUE, LABELLED)
    # the lake as the old code left it: the queue and its key in the seeded order, decisions on every item
    old = arb.build_queue(VENUE, lambda item_id: old_order(VENUE, item_id, 20260110), LABELLED, {}, {})
    lake = Lake(lake_root)
    lake.write_table("arbitration_queue", VENUE, pl.DataFrame(old.rows, schema=QUEUE_SCHEMA))
    lake.write_table("arbitration_key", VENUE, pl.DataFrame(old.key, schema=KEY_SCHEMA))
    key = {row["item_id"]: row for row in old.key}
    meant, decisions = {}, []
    for n, row in enumerate(old.rows):
        labelled = [c for c in arb.CANDIDATES if row[f"{c}_label"] is not None]
        if n % 3 == 0:  # a label neither candidate carries
            label = next(label for label in LABELS if label not in (row["candidate_1_label"], row["candidate_2_label"]))
            choice, upheld = arb.THIRD_LABEL, arb.THIRD_LABEL
        else:
            choice = labelled[n % len(labelled)]
            label, upheld = row[f"{choice}_label"], arb.UPHELD[key[row["item_id"]][f"{choice}_labeller"]]
        meant[row["item_id"]] = (label, upheld)
        decisions.append(new_decision(venue=VENUE, claim_id=row["claim_id"], source=row["source"], kind="arbitration",
                                      action="decide", choice=choice, label=label, annotator="alice",
                                      queue_version=row["queue_version"], supersedes=None))
    ledger = DecisionLedger(lake_root, VENUE)
    ledger.append(decisions)
    before = ledger.path.read_bytes()

    result = build(VENUE, sample_registry(tmp_path), lake_root, dg.DagsterInstance.ephemeral(), ARBITRATION)
    rows = canonical(lake_root, VENUE)
    [reported] = materialization_metadata(result, "canonical_labels", "decisions_not_applied")
    not_applied = {entry["item_id"]: entry["reason"] for entry in reported}
    # A candidate choice whose candidate now shows the other labeller is stale, said and pending again; every other
    # decision applies as made: the same label, upholding the same labeller.
    now = key_of(lake_root)
    swapped = {item_id for item_id, (_, upheld) in meant.items()
               if upheld != arb.THIRD_LABEL and now[item_id] != key[item_id]["candidate_1_labeller"]}
    assert swapped and set(meant) - swapped  # both met
    assert set(not_applied) == swapped and all("is now" in reason for reason in not_applied.values())
    assert all(rows[item_id]["provenance"] == arb.PENDING for item_id in swapped)
    assert {item_id: (rows[item_id]["label"], rows[item_id]["provenance"]) for item_id in set(meant) - swapped} == {
        item_id: meant[item_id] for item_id in set(meant) - swapped}
    assert ledger.path.read_bytes() == before  # the ledger is never rewritten


# -- the parts ------------------------------------------------------------------------------------------------------
def test_passage_tags_hide_every_mention_of_the_forum_and_map_back_to_the_chunks():
    chunks = ["Hp4sLx9TcV:0011:97096222c8e2", "Hp4sLx9TcV:0010:5b05966e0f0d"]
    tags = arb.PassageTags("Hp4sLx9TcV", list(chunks))
    material = tags.hide(f"[{chunks[0]}] Figure 2\n\n[{chunks[1]}] We inspected the gates")
    quoted = tags.hide("[Hp4sLx9TcV:0010:5b0596] as shown; [Hp4sLx9TcV:0099:abc] too; see openreview.net/forum?id="
                       "Hp4sLx9TcV, not XHp4sLx9TcV")
    assert material == "[P1] Figure 2\n\n[P2] We inspected the gates"
    assert quoted == ("[P2] as shown; [P3] too; see openreview.net/forum?id=the paper, not XHp4sLx9TcV")
    assert tags.chunks == [*chunks, "Hp4sLx9TcV:0099:abc"]  # what each tag stands for, the garbled one as written


def test_a_queue_rebuilt_without_the_secret_resolves_each_decision_to_the_labeller_it_upheld():
    """A release's rebuild has the decisions but not the venue's secret (label_release.rebuild)."""
    keyed = arb.build_queue(VENUE, arb.keyed_order(b"the venue's secret", VENUE), LABELLED, {}, {})
    current = {}
    for n, row in enumerate(keyed.rows):
        choice = next(c for c in (arb.CANDIDATES[n % 2], *arb.CANDIDATES) if row[f"{c}_label"] is not None)
        current[row["item_id"]] = new_decision(
            venue=VENUE, claim_id=row["claim_id"], source=row["source"], kind="arbitration", action="decide",
            choice=choice, label=row[f"{choice}_label"], annotator="alice", queue_version=row["queue_version"],
            supersedes=None)
    made = arb.canonical_labels(VENUE, LABELLED, keyed.rows, keyed.key, current)
    rebuilt_queue = arb.build_queue(VENUE, arb.decided_order(LABELLED, current), LABELLED, {}, {})
    rebuilt = arb.canonical_labels(VENUE, LABELLED, rebuilt_queue.rows, rebuilt_queue.key, current)
    assert {(r["label"], r["provenance"]) for r in made.rows} >= {("Supported", "a_upheld"), ("Supported", "b_upheld")}
    assert rebuilt.rows == made.rows and rebuilt.not_applied == made.not_applied == []
