"""One annotator's work on a venue's open items, as the terminal (`peerify arbitrate`) and the web app share it: the
items of a mode, which are open, deciding and undoing (straight to the decisions ledger), the audit's two-annotator
slot, the stale-sample check, leases on the items shown, and the items' opaque ids.

Modes:
- `arbitration`: the `arbitration_queue` items without a live decision, the two candidates anonymised (never the
  labeller that gave them; `arbitration_key` is never read here);
- `audit`: the audit sample's items this annotator has not labelled, blind (no candidate or automated label);
- `consensus`: audit items on which the audit's two annotators disagree and nobody has settled.

Leases (domain/leases.py) live in `<lake>/human_decisions/<venue slug>/leases.json`, read and replaced under an
exclusive lock (a flock on `leases.lock` beside it; a Postgres advisory lock in the cluster profile, and always for
an S3 lake, which has no file to lock and refuses leases without PEERIFY_POSTGRES_URL), so every
process sharing the lake (server workers, terminals) agrees on who holds what. A decision is checked (the item still
open, not held by someone else) and appended under that same lock, so two annotators never record the same item
twice even when a lease ran out in between; `peerify decisions import` reads and appends the ledger under it too
(cli/queue.py).

The item id secret (`item_id_secret` beside the venue's ledgers, made on first use, never replaced) keys the opaque
ids and the candidate order (domain/arbitration.py; the arbitration_queue asset reads it through the same function).
It stays in the lake because an answer file exported today must still resolve after a restart, and a rebuilt queue
must order its candidates as before; it blinds whoever sees only what annotators see (the pages, the terminal, an
export, a Label Studio project), not someone who can read the lake, where the key table itself is.

A refusal names its true reason: the item was decided meanwhile (by whom), another annotator holds it, or this
annotator's lease on it ran out and another took it (the lease says whose had run out: domain/leases.py).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from peerify_dagster import deployment
from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import (
    Decision,
    DecisionLedger,
    current_decisions,
    decisions_dir,
    new_decision,
)
from peerify_dagster.domain import arbitration, audit, leases
from peerify_dagster.domain.label_metrics import confusion_matrix
from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED, NOT_SUPPORTED, PARTIALLY_SUPPORTED, SUPPORTED
from peerify_dagster.resources.files import fsync_path, json_bytes, temporary_path
from peerify_dagster.resources.lake import Lake, UnreadablePartitionError, partition_slug
from peerify_dagster.resources.locks import exclusive
from peerify_dagster.resources.store import LakeStore, Location

MODES = ("arbitration", "audit", "consensus")
# The keys that decide, the same in the terminal and the browser.
LABEL_KEYS = {"s": SUPPORTED, "p": PARTIALLY_SUPPORTED, "n": NOT_SUPPORTED, "d": NOT_DETERMINED}
CANDIDATE_KEYS = {"1": "candidate_1", "2": "candidate_2"}
SOURCE_NAMES = {"thread": "the review thread (author responses)", "manuscript": "the manuscript"}
SECRET_FILE, LEASES_FILE, LEASES_LOCK = "item_id_secret", "leases.json", "leases.lock"


class AnnotationError(Exception):
    """A request a session cannot serve (no queue built, no audit sample, the audit's slot taken, the sample redrawn):
    the message says why and what to do."""


class ItemUnavailable(AnnotationError):
    """The item cannot be decided by this annotator now: another one holds its lease, or it was decided meanwhile."""


def lake_table(lake: Lake, table: str, venue: str, built_by: str) -> pl.DataFrame:
    try:
        return lake.read_table(table, venue)
    except FileNotFoundError:
        raise AnnotationError(f"no {table} for {venue} yet: {built_by}") from None
    except UnreadablePartitionError as exc:
        raise AnnotationError(f"{exc.path} is unreadable ({exc.reason}): {built_by}") from None


# -- opaque ids -------------------------------------------------------------------------------------------------
def item_id_secret(lake_root: str | Location, venue: str) -> bytes:
    """The venue's item id secret, made on first use. Linked into place (created only if absent on S3), never
    renamed over: two processes making it at once agree on the first one, and no reader sees half of it."""
    path = decisions_dir(lake_root, venue) / SECRET_FILE
    store = LakeStore(lake_root)
    if store.is_object_store:
        if not path.exists():
            store.create(path, secrets.token_hex(32).encode("ascii"))  # False: another process's came first
    elif not path.exists():
        temporary = temporary_path(path)
        try:
            temporary.write_text(secrets.token_hex(32))
            os.chmod(temporary, 0o600)
            fsync_path(temporary)
            os.link(temporary, path)
            fsync_path(path.parent)
        except FileExistsError:
            pass  # another process made it first: theirs is the secret
        finally:
            temporary.unlink(missing_ok=True)
    return path.read_text().strip().encode("ascii")


def queue_opaque_ids(lake_root: str | Path, venue: str, queue_rows: list[dict]) -> dict[str, str]:
    """item id -> opaque id of the queue's items (one version: the queue is built whole)."""
    if not queue_rows:
        return {}
    return arbitration.opaque_item_ids(item_id_secret(lake_root, venue), venue, queue_rows[0]["queue_version"],
                                       [row["item_id"] for row in queue_rows])


# -- leases -----------------------------------------------------------------------------------------------------
class LeaseStore:
    """The venue's leases in the lake; `locked()` is the only way to read or change them."""

    def __init__(self, lake_root: str | Location, venue: str):
        folder = decisions_dir(lake_root, venue)
        self.store = LakeStore(lake_root)
        self.path = folder / LEASES_FILE
        # An S3 lake has no file to lock: its leases' lock is Postgres's alone (resources/locks.py).
        self.lock_path = None if self.store.is_object_store else folder / LEASES_LOCK
        self.lock_name = f"leases {partition_slug(venue)}"  # resources/locks.py: across machines in the cluster profile

    def _read(self) -> list[leases.Lease]:
        try:
            return leases.from_records(json.loads(self.path.read_text()))
        except (FileNotFoundError, ValueError):  # no lease file yet, or one that cannot be read: no leases
            return []

    @contextmanager
    def locked(self) -> Iterator[list[leases.Lease]]:
        """The current leases, under the lock; the list as the block leaves it is stored (only when changed)."""
        if self.lock_path is None and not deployment.postgres_url():
            raise AnnotationError(f"the leases of an S3 lake ({self.store.url(self.path)}) are replaced whole, "
                                  "which only a lock across machines keeps safe: set PEERIFY_POSTGRES_URL")
        with exclusive(self.lock_name, self.lock_path):
            stored = self._read()
            current = list(stored)
            yield current
            if current != stored:
                self.store.write_bytes(self.path, json_bytes(leases.to_records(current)))

    def snapshot(self) -> list[leases.Lease]:
        with self.locked() as current:
            return list(current)


def now() -> datetime:
    return datetime.now(UTC)


# -- the items of a session ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    label: str | None
    justification: str | None
    evidence: list[str]
    raw_answer: str | None = None  # the model's answer as written, when it gave no usable label


@dataclass(frozen=True)
class Item:
    item_id: str  # claim_id:source, the ledger's key: never shown to an annotator in the web app
    opaque_id: str  # what the web app shows and links by (domain/arbitration.py)
    claim_id: str
    source: str
    claim_text: str
    claim_type: str | None
    source_material: str | None
    version: str | None  # the queue / audit-sample version a decision on it answers
    candidates: tuple[Candidate, ...] = ()  # arbitration only
    human_labels: tuple[str, ...] = ()  # consensus only: the two annotators' labels


class Session:
    """One annotator working through one mode's items of a venue; every decision goes straight to the ledger."""

    def __init__(self, lake_root: str | Path, venue: str, mode: str, annotator: str,
                 lease_duration: timedelta = leases.DEFAULT_LEASE, clock: Callable[[], datetime] = now):
        if mode not in MODES:
            raise AnnotationError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        self.lake_root, self.venue, self.mode, self.annotator = lake_root, venue, mode, annotator
        self.kind = "arbitration" if mode == "arbitration" else mode  # the decisions' kind
        self.ledger = DecisionLedger(lake_root, venue, "arbitration" if mode == "arbitration" else "audit")
        self.leases = LeaseStore(lake_root, venue)
        self.leased, self.lease_duration = mode in leases.LEASED_MODES, lease_duration
        self.clock = clock  # the leases' time: tests move it instead of waiting for a lease to run out
        self.queue_rows: list[dict] = []  # arbitration: the queue as built
        self.sample_version: str | None = None  # audit and consensus: the sample's version
        self.items = self._load_items()
        self.made: list[str] = []  # ids of the decisions of this session still live

    @property
    def saved(self) -> int:
        return len(self.made)

    def _load_items(self) -> list[Item]:
        secret = item_id_secret(self.lake_root, self.venue)
        if self.mode == "arbitration":
            queue = lake_table(Lake(self.lake_root), "arbitration_queue", self.venue,
                               f"`peerify build {self.venue}` builds the arbitration queue")
            self.queue_rows = queue.to_dicts()
            version = self.queue_rows[0]["queue_version"] if self.queue_rows else None
            ids = arbitration.opaque_item_ids(secret, self.venue, version, [r["item_id"] for r in self.queue_rows])
            return [_queue_item(row, ids[row["item_id"]]) for row in self.queue_rows]
        sample = audit_sample.read_sample(self.lake_root, self.venue)
        if sample is None:
            raise AnnotationError(f"no audit sample for {self.venue} yet: draw one with "
                                  f"`peerify audit sample --venue {self.venue} --n 300`")
        self.sample_version = audit_sample.sample_version_of(sample)
        ids = arbitration.opaque_item_ids(secret, self.venue, self.sample_version, sample["item_id"])
        items = [_sample_item(row, ids[row["item_id"]]) for row in sample.iter_rows(named=True)]
        if self.mode == "audit":
            self._check_annotator_slot()
        return items

    def _check_annotator_slot(self) -> None:
        state = audit_sample.read_audit_state(self.lake_root, self.venue, self.sample_version)
        if len(state.annotators) == 2 and self.annotator not in state.annotators:
            raise AnnotationError(f"the audit of {self.venue} already has its two annotators "
                                  f"({' and '.join(state.annotators)}); the consensus mode (`--mode consensus`) "
                                  "settles their disagreements")

    # the decisions of this session's kind, current ones, and which items are open
    def _decisions(self) -> list[Decision]:
        decisions = [d for d in self.ledger.read().decisions if d.kind == self.kind]
        if self.mode != "arbitration":
            decisions = [d for d in decisions if d.queue_version == self.sample_version]
        return decisions

    def open_items(self) -> list[Item]:
        decisions = self._decisions()
        if self.mode == "arbitration":  # a decision made on an older queue that no longer applies reopens its item
            current = current_decisions(decisions)
            still_open = {row["item_id"] for row in arbitration.open_items(self.queue_rows, current)}
            return [item for item in self.items if item.item_id in still_open]
        if self.mode == "audit":
            mine = {item_id for item_id, annotator in current_decisions(decisions, per_annotator=True)
                    if annotator == self.annotator}
            return [item for item in self.items if item.item_id not in mine]
        state = audit_sample.read_audit_state(self.lake_root, self.venue, self.sample_version)
        open_items = []
        for item in self.items:
            labels = (state.label(item.item_id, 0), state.label(item.item_id, 1))
            settled = state.consensus.get(item.item_id)
            if audit.needs_consensus(audit.AuditItem(item.item_id, item.claim_type, *labels,
                                                     settled.label if settled else None, None)):
                open_items.append(_with_human_labels(item, labels))
        return open_items

    def total(self) -> int:
        return len(self.items)

    def position(self, item: Item) -> int:
        return next(i for i, other in enumerate(self.items, start=1) if other.item_id == item.item_id)

    def item(self, opaque_id: str) -> Item | None:
        """The item with this opaque id (open or not), with fresh human labels when it is open; None when the mode has
        no such item (the queue was rebuilt: ids change with its version)."""
        found = next((item for item in self.items if item.opaque_id == opaque_id), None)
        if found is None:
            return None
        return next((item for item in self.open_items() if item.item_id == found.item_id), found)

    def is_open(self, item: Item) -> bool:
        return any(other.item_id == item.item_id for other in self.open_items())

    # leases
    def next_item(self, after: Item | None = None, exclude: Iterable[str] = ()) -> Item | None:
        """The open item to work on next, leased to this annotator: the one they already hold, else the first after
        `after` that nobody else holds and whose item id is not in `exclude`; None when there is none."""
        open_items = self.open_items()
        ids = [item.item_id for item in open_items]
        after_id = after.item_id if after else None
        if not self.leased:  # audit items are each annotator's own: nobody else's lease can withhold one
            chosen = leases.next_free(ids, [], self.mode, self.annotator, self.clock(), after_id, exclude)
        else:
            with self.leases.locked() as current:
                chosen = leases.next_free(ids, current, self.mode, self.annotator, self.clock(), after_id, exclude)
                if chosen is not None:
                    current[:] = leases.take(current, self.mode, chosen, self.annotator, self.clock(),
                                             self.lease_duration)
        return next((item for item in open_items if item.item_id == chosen), None)

    def hold(self, item: Item) -> None:
        """Take or renew this annotator's lease on the item; ItemUnavailable, saying why, when the item was decided
        meanwhile or another annotator holds it."""
        if not self.leased:
            if (reason := self._unavailable(item, [])) is not None:
                raise ItemUnavailable(reason)
            return
        with self.leases.locked() as current:
            if (reason := self._unavailable(item, current)) is not None:
                raise ItemUnavailable(reason)
            current[:] = leases.take(current, self.mode, item.item_id, self.annotator, self.clock(),
                                     self.lease_duration)

    def _unavailable(self, item: Item, current: list[leases.Lease]) -> str | None:
        """Why this annotator cannot work on the item now (`current`: the leases, read under their lock), or None."""
        if not self.is_open(item):
            return self._decided_by(item)
        held = leases.holder(current, self.mode, item.item_id, self.clock()) if self.leased else None
        if held is None or held.annotator == self.annotator:
            return None
        if held.taken_from == self.annotator:
            return f"another annotator ({held.annotator}) took this item after your lease ran out"
        return (f"another annotator ({held.annotator}) is deciding this item; it is theirs until "
                f"{held.expires_at.isoformat(timespec='seconds')} unless they decide it or move on")

    def _decided_by(self, item: Item) -> str:
        """What settled an item that is no longer open, naming who decided it."""
        if self.mode == "audit":  # open to each annotator until they label it themselves
            return "you labelled this item already (in another window)"
        decision = current_decisions(self._decisions()).get(item.item_id)
        if decision is None:  # consensus: the audit's two labels no longer disagree
            return "this item needs no consensus any more (its two audit labels no longer disagree)"
        if decision.annotator == self.annotator:
            return "you decided this item meanwhile (in another window)"
        return f"this item was decided meanwhile by {decision.annotator}"

    def release(self) -> None:
        """Give up this annotator's lease in this mode (leaving, or moving on without deciding)."""
        if self.leased:
            with self.leases.locked() as current:
                current[:] = leases.release(current, self.mode, self.annotator)

    def held_by_others(self) -> int:
        """How many open items other annotators hold now (not offered to this one)."""
        if not self.leased:
            return 0
        return len(leases.held_by_others(self.leases.snapshot(), self.mode, self.annotator, self.clock()))

    # decisions
    def decide(self, item: Item, label: str, choice: str, note: str | None) -> Decision:
        """Append the decision unless the item was decided meanwhile or another annotator holds it (ItemUnavailable);
        checked and appended under the leases' lock, so no item is decided twice. Releases this annotator's lease."""
        if self.mode != "arbitration":
            self._check_sample_unchanged()
        if self.mode == "audit":  # two others may have started labelling since this session began
            self._check_annotator_slot()
        with self.leases.locked() as current:
            if (reason := self._unavailable(item, current)) is not None:
                raise ItemUnavailable(f"{reason}; nothing was recorded")
            decision = new_decision(venue=self.venue, claim_id=item.claim_id, source=item.source, kind=self.kind,
                                    action="decide", choice=choice, label=label, annotator=self.annotator, note=note,
                                    queue_version=item.version, supersedes=None)
            self.ledger.append([decision])
            if self.leased:
                current[:] = leases.release(current, self.mode, self.annotator)
        self.made.append(decision.decision_id)
        return decision

    def undo(self) -> Decision | None:
        """Retract this annotator's latest live decision of this mode; None when there is none."""
        decisions = self._decisions()
        retracted = {d.supersedes for d in decisions if d.action == "retract"}
        mine = [d for d in decisions if d.action == "decide" and d.annotator == self.annotator
                and d.decision_id not in retracted]
        if not mine:
            return None
        last = mine[-1]
        self.ledger.append([new_decision(venue=self.venue, claim_id=last.claim_id, source=last.source,
                                         kind=self.kind, action="retract", choice=None, label=None,
                                         annotator=self.annotator, note=None, queue_version=last.queue_version,
                                         supersedes=last.decision_id)])
        if last.decision_id in self.made:
            self.made.remove(last.decision_id)
        return last

    def _check_sample_unchanged(self) -> None:
        sample = audit_sample.read_sample(self.lake_root, self.venue)
        if sample is None or audit_sample.sample_version_of(sample) != self.sample_version:
            raise AnnotationError(f"the audit sample of {self.venue} was redrawn during this session; "
                                  "start again (`peerify arbitrate`, or reload the page)")


@dataclass(frozen=True)
class AnnotatorAgreement:
    """The audit's two annotators against each other so far (blind: no automated label is read)."""

    annotators: list[str]
    sample_items: int
    scores: audit.AuditScores  # annotator agreement, kappa and the consensus counts
    confusion: dict[str, dict[str, int]]  # annotator 1's label -> annotator 2's label -> items


def annotator_agreement(lake_root: str | Path, venue: str) -> AnnotatorAgreement | None:
    """None when the venue has no audit sample."""
    sample = audit_sample.read_sample(lake_root, venue)
    if sample is None:
        return None
    state = audit_sample.read_audit_state(lake_root, venue, audit_sample.sample_version_of(sample))
    items = []
    for row in sample.iter_rows(named=True):
        settled = state.consensus.get(row["item_id"])
        items.append(audit.AuditItem(row["item_id"], row["claim_type"], state.label(row["item_id"], 0),
                                     state.label(row["item_id"], 1), settled.label if settled else None, None))
    both = [(item.label_1, item.label_2) for item in items if item.label_1 is not None and item.label_2 is not None]
    return AnnotatorAgreement(state.annotators, sample.height, audit.score(items),
                              confusion_matrix([first for first, _ in both], [second for _, second in both]))


def answer_of_key(item: Item, key: str, mode: str) -> tuple[str, str] | str:
    """(label, choice) for a deciding key, else the line that says why the key does not decide."""
    if mode == "arbitration" and key in CANDIDATE_KEYS:
        candidate = item.candidates[int(key) - 1]
        if candidate.label not in LABELS:
            return f"candidate {key} has no label to choose; press a label key instead"
        return candidate.label, CANDIDATE_KEYS[key]
    if key in LABEL_KEYS:
        label = LABEL_KEYS[key]
        if mode != "arbitration":
            return label, "label"
        # A label equal to a candidate's is that candidate upheld, not a third label.
        same = [n for n, candidate in enumerate(item.candidates, start=1) if candidate.label == label]
        return label, f"candidate_{same[0]}" if same else "third_label"
    return f"unknown key {key!r}"


def _queue_item(row: dict, opaque_id: str) -> Item:
    candidates = tuple(Candidate(row[f"candidate_{n}_label"], row[f"candidate_{n}_justification"],
                                 list(row[f"candidate_{n}_evidence"] or []), row.get(f"candidate_{n}_raw_answer"))
                       for n in (1, 2))
    return Item(row["item_id"], opaque_id, row["claim_id"], row["source"], row["claim_text"], row.get("claim_type"),
                row.get("source_material"), row["queue_version"], candidates=candidates)


def _sample_item(row: dict, opaque_id: str) -> Item:
    return Item(row["item_id"], opaque_id, row["claim_id"], row["source"], row["claim_text"], row.get("claim_type"),
                row.get("source_material"), row["audit_sample_version"])


def _with_human_labels(item: Item, labels: tuple[str | None, str | None]) -> Item:
    return replace(item, human_labels=tuple(label or "-" for label in labels))
