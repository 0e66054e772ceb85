"""The decisions ledger: every human decision (arbitration, audit, consensus) appended to a JSONL file in the lake.

`<lake root>/human_decisions/<partition_slug(venue)>/<kind>.jsonl`, one JSON object per line, append-only: a later
decision for an item supersedes an earlier one but never deletes it, and an undo is itself a line (`retract`).
Only `DecisionLedger.append` writes it, never an asset.

Durability: an append takes the file's exclusive lock (a flock on it; across machines in the cluster profile, a
Postgres advisory lock: resources/locks.py), writes all its lines with one O_APPEND write and fsyncs before
returning, so two annotators appending at once never lose a decision and a decision reported saved is on disk.
In an S3 lake (no append there) the same bytes are one object, rewritten whole by each append: read, checked, and
put back with the new lines at its end, all under the cross-machine lock, so that an append never loses another's
(an S3 lake without PEERIFY_POSTGRES_URL refuses to append: nothing would keep two writers apart); a reader sees
the object before or after an append, never part of one.
Each line carries the id and size of the append it belongs to (`batch_id`, `batch_size`): an append torn by a crash
shows as a batch with lines missing and is ignored whole (all or nothing per call), and a garbled line is reported
with its line number while the rest of the file loads.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime

from peerify_dagster import deployment
from peerify_dagster.domain import records
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.resources.files import fsync_path
from peerify_dagster.resources.lake import partition_slug
from peerify_dagster.resources.locks import exclusive, shared
from peerify_dagster.resources.store import LakeStore, Location, location_of

DECISIONS_DIR = "human_decisions"  # beside the lake's tables; `decisions` is the program chairs' table
LEDGER_KINDS = ("arbitration", "audit")  # the ledger files of a venue
# Which decision kinds each ledger file holds: consensus decisions resolve two audit annotators, beside them.
KINDS_IN_LEDGER = {"arbitration": ("arbitration",), "audit": ("audit", "consensus")}
SOURCES = ("thread", "manuscript")
ACTIONS = ("decide", "retract")
CHOICES = {"arbitration": ("candidate_1", "candidate_2", "third_label"), "audit": ("label",), "consensus": ("label",)}
_BATCH_FIELDS = ("batch_id", "batch_size")


class LedgerError(ValueError):
    """An append that was refused as a whole; nothing of it was written."""


@dataclass(frozen=True)
class Decision:
    """One human decision, or the retraction of one. Construction validates every field (ValueError)."""

    decision_id: str  # uuid4 hex, made by new_decision()
    venue: str
    item_id: str  # f"{claim_id}:{source}"
    claim_id: str
    source: str  # 'thread' | 'manuscript'
    kind: str  # 'arbitration' | 'audit' | 'consensus'
    action: str  # 'decide' | 'retract' (retract = undo of the annotator's own earlier decision)
    choice: str | None  # arbitration: 'candidate_1' | 'candidate_2' | 'third_label'; audit/consensus: 'label'
    label: str | None  # the resulting label (one of LABELS), None for retract
    annotator: str
    decided_at: str  # UTC ISO 8601 with microseconds
    note: str | None = None
    queue_version: str | None = None  # arbitration: the queue_version answered; audit: the audit sample's version
    supersedes: str | None = None  # decision_id this one replaces (retract: the one it undoes)

    def __post_init__(self) -> None:
        problem = decision_problem(self)
        if problem:
            raise ValueError(problem)


def decision_problem(decision: Decision) -> str | None:
    """Why a decision is malformed, or None."""
    for name in ("decision_id", "venue", "claim_id", "annotator", "decided_at"):
        value = getattr(decision, name)
        if not isinstance(value, str) or not value.strip():
            return f"{name} must be a non-empty string, got {value!r}"
    for name in ("note", "queue_version", "supersedes", "choice", "label"):
        if getattr(decision, name) is not None and not isinstance(getattr(decision, name), str):
            return f"{name} must be a string or null, got {getattr(decision, name)!r}"
    if decision.source not in SOURCES:
        return f"source {decision.source!r} is not one of {SOURCES}"
    if decision.item_id != f"{decision.claim_id}:{decision.source}":
        return f"item_id {decision.item_id!r} is not claim_id:source ({decision.claim_id}:{decision.source})"
    if decision.kind not in CHOICES:
        return f"kind {decision.kind!r} is not one of {tuple(CHOICES)}"
    if decision.action not in ACTIONS:
        return f"action {decision.action!r} is not one of {ACTIONS}"
    try:
        stamp = datetime.fromisoformat(decision.decided_at)
    except ValueError:
        return f"decided_at {decision.decided_at!r} is not an ISO 8601 timestamp"
    if stamp.utcoffset() is None:
        return f"decided_at {decision.decided_at!r} has no time zone (UTC expected)"
    if decision.action == "retract":
        if decision.label is not None or decision.choice is not None:
            return "a retract carries no label or choice"
        if not decision.supersedes:
            return "a retract must name the decision it undoes (supersedes)"
        return None
    if decision.label not in LABELS:
        return f"label {decision.label!r} is not one of {LABELS}"
    if decision.choice not in CHOICES[decision.kind]:
        return f"choice {decision.choice!r} is not one of {CHOICES[decision.kind]} for a {decision.kind} decision"
    return None


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def new_decision(**fields_: object) -> Decision:
    """A Decision with a fresh decision_id and decided_at (now, UTC); item_id is derived when not given."""
    fields_.setdefault("item_id", f"{fields_.get('claim_id')}:{fields_.get('source')}")
    return Decision(decision_id=uuid.uuid4().hex, decided_at=utc_now_iso(), **fields_)


@dataclass(frozen=True)
class LedgerProblem:
    line_number: int  # 1-based line of the ledger file
    reason: str


@dataclass
class LedgerContents:
    decisions: list[Decision] = field(default_factory=list)  # the readable decisions, in file order
    problems: list[LedgerProblem] = field(default_factory=list)
    line_count: int = 0  # lines in the file, readable or not (a trailing partial line counts)


def decisions_dir(lake_root: str | Location, venue: str) -> Location:
    """The folder of a venue's ledgers (and of its audit sample): a Path, or an S3 prefix for an S3 lake."""
    return location_of(lake_root) / DECISIONS_DIR / partition_slug(venue)


def ledger_line_count(path: Location) -> int:
    """Lines in a ledger file without parsing it (what the canonical-label sensor compares)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


class DecisionLedger:
    """One venue's ledger of one kind (`arbitration` or `audit`)."""

    def __init__(self, lake_root: str | Location, venue: str, kind: str = "arbitration"):
        if kind not in LEDGER_KINDS:
            raise ValueError(f"ledger kind {kind!r} is not one of {LEDGER_KINDS}")
        self.venue, self.kind = venue, kind
        self.store = LakeStore(lake_root)
        self.path = decisions_dir(lake_root, venue) / f"{kind}.jsonl"
        # The lock guarding the file (resources/locks.py): a flock on the file itself on one machine.
        self.lock_name = f"decisions {partition_slug(venue)}/{kind}"

    def line_count(self) -> int:
        return ledger_line_count(self.path)

    def read(self) -> LedgerContents:
        """Every readable decision in file order; unreadable lines and interrupted appends as problems."""
        if not self.path.exists():
            return LedgerContents()
        if self.store.is_object_store:  # an append replaces the whole object: it is seen all or not at all
            return self._parse(self.path.read_bytes())
        with shared(self.lock_name, self.path):  # an append in progress finishes first: no half line is seen
            data = self.path.read_bytes()
        return self._parse(data)

    def append(self, decisions: Sequence[Decision]) -> None:
        """Append the decisions as one unit: all are on disk when this returns, or none is written (LedgerError)."""
        if not decisions:
            return
        if self.store.is_object_store:
            self._rewrite_with(decisions)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        with exclusive(self.lock_name, self.path):
            self._append_locked(decisions)
        if created:
            fsync_path(self.path.parent)

    def _rewrite_with(self, decisions: Sequence[Decision]) -> None:
        """An S3 lake's append: the whole object read, checked and put back with the new lines, under the lock that
        holds across machines (Postgres), so no concurrent append is lost."""
        if not deployment.postgres_url():
            raise LedgerError(f"refused to append to {self.store.url(self.path)}: an S3 lake's decisions are "
                              "rewritten whole on each append, which only a lock across machines keeps safe; set "
                              "PEERIFY_POSTGRES_URL (the cluster profile's Postgres)")
        with exclusive(self.lock_name, None):
            existing = self.path.read_bytes() if self.path.exists() else b""
            self.store.write_bytes(self.path, existing + self._new_lines(decisions, existing))

    def _new_lines(self, decisions: Sequence[Decision], existing: bytes) -> bytes:
        """The lines appending `decisions` to a ledger holding `existing` (LedgerError when any is refused)."""
        problems = self._append_problems(decisions, self._parse(existing).decisions)
        if problems:
            raise LedgerError(f"refused to append to {self.store.url(self.path)}: " + "; ".join(problems))
        batch = {"batch_id": uuid.uuid4().hex, "batch_size": len(decisions)}
        lines = records.jsonl_bytes({**asdict(decision), **batch} for decision in decisions)
        if existing and not existing.endswith(b"\n"):  # a torn line from a crash stays a line of its own
            lines = b"\n" + lines
        return lines

    def _append_locked(self, decisions: Sequence[Decision]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with open(self.path, "rb") as reader:
                existing = reader.read()
            lines = self._new_lines(decisions, existing)
            try:
                _write_all(fd, lines)
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, len(existing))  # a full disk leaves no part of this append behind
                raise
        finally:
            os.close(fd)

    def _append_problems(self, decisions: Sequence[Decision], stored: list[Decision]) -> list[str]:
        known = {decision.decision_id: decision for decision in stored}
        retracted = {decision.supersedes for decision in stored if decision.action == "retract"}
        problems = []
        for number, decision in enumerate(decisions, start=1):
            if not isinstance(decision, Decision):
                problems.append(f"decision {number} is a {type(decision).__name__}, not a Decision")
                continue
            where = f"decision {number} ({decision.item_id})"
            if decision.venue != self.venue:
                problems.append(f"{where}: venue {decision.venue!r} is not this ledger's {self.venue!r}")
            if decision.kind not in KINDS_IN_LEDGER[self.kind]:
                problems.append(f"{where}: a {decision.kind} decision does not belong in the {self.kind} ledger")
            if decision.decision_id in known:
                problems.append(f"{where}: decision_id {decision.decision_id} is already stored")
            if decision.action == "retract":
                problems += [f"{where}: {reason}" for reason in _retract_problems(decision, known, retracted)]
                retracted.add(decision.supersedes)
            known[decision.decision_id] = decision
        return problems

    def _parse(self, data: bytes) -> LedgerContents:
        contents = LedgerContents(line_count=data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0))
        parsed: list[tuple[int, Decision, str, int]] = []  # (line number, decision, batch id, batch size)
        for line in records.json_lines(data):
            try:
                parsed.append((line.number, *self._parse_line(line)))
            except ValueError as exc:
                contents.problems.append(LedgerProblem(line.number, str(exc)))
        readable = Counter(batch_id for _, _, batch_id, _ in parsed)
        for number, decision, batch_id, size in parsed:
            if readable[batch_id] == size:
                contents.decisions.append(decision)
            else:
                contents.problems.append(LedgerProblem(
                    number, f"part of an append of {size} decision(s) of which {readable[batch_id]} line(s) are "
                            "readable (an interrupted write); the whole append is ignored"))
        contents.problems.sort(key=lambda problem: problem.line_number)
        return contents

    def _parse_line(self, line: records.JsonLine) -> tuple[Decision, str, int]:
        if line.problem is not None:
            raise ValueError(f"not a JSON object ({line.problem})")
        record = line.record
        if not isinstance(record, dict):
            raise ValueError(f"not a JSON object but a {type(record).__name__}")
        names = [f.name for f in fields(Decision)]
        missing = [name for name in (*names, *_BATCH_FIELDS) if name not in record]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        if not isinstance(record["batch_id"], str) or not isinstance(record["batch_size"], int) \
                or record["batch_size"] < 1:
            raise ValueError(f"bad batch_id/batch_size {record['batch_id']!r}/{record['batch_size']!r}")
        decision = Decision(**{name: record[name] for name in names})  # ValueError names the bad field
        if decision.venue != self.venue:
            raise ValueError(f"venue {decision.venue!r} is not this ledger's {self.venue!r}")
        if decision.kind not in KINDS_IN_LEDGER[self.kind]:
            raise ValueError(f"a {decision.kind} decision does not belong in the {self.kind} ledger")
        return decision, record["batch_id"], record["batch_size"]


def _retract_problems(retract: Decision, known: dict[str, Decision], retracted: set[str | None]) -> list[str]:
    target = known.get(retract.supersedes)
    if target is None:
        return [f"retracts unknown decision {retract.supersedes}"]
    problems = []
    if target.action != "decide":
        problems.append(f"retracts {target.decision_id}, which is itself a retract")
    if target.annotator != retract.annotator:
        problems.append(f"retracts {target.decision_id} of annotator {target.annotator!r}; only one's own "
                        "decisions can be retracted")
    if target.item_id != retract.item_id:
        problems.append(f"retracts {target.decision_id}, a decision for another item ({target.item_id})")
    if target.decision_id in retracted:
        problems.append(f"{target.decision_id} is already retracted")
    return problems


def current_decisions(decisions: Iterable[Decision], per_annotator: bool = False) -> dict:
    """The latest live decision per item_id (per (item_id, annotator) with per_annotator), in ledger order.

    A retracted decision is removed, so undoing one's latest decision makes one's previous one current again.
    Decisions of every kind given count alike: pass one kind's decisions to get that kind's current state.
    """
    decisions = list(decisions)
    retracted = {decision.supersedes for decision in decisions if decision.action == "retract"}
    current: dict = {}
    for decision in decisions:
        if decision.action == "decide" and decision.decision_id not in retracted:
            key = (decision.item_id, decision.annotator) if per_annotator else decision.item_id
            current.pop(key, None)  # keep dict order = order of the decisions that are current
            current[key] = decision
    return current


# orphaned_decisions: a human decision whose claim is no longer among the venue's review claims.
ORPHANED_TABLE = "orphaned_decisions"
ORPHANED_COLUMNS = ("venue", "decision_id", "kind", "item_id", "claim_id", "source", "label", "annotator",
                    "decided_at", "note", "reason")


def applicable_decisions(decisions: Iterable[Decision]) -> list[Decision]:
    """The decisions that apply while their claims are there: per kind, the latest live decision per item (audit
    decisions: per item and annotator, as the audit scores both annotators)."""
    decisions = list(decisions)
    return [decision for kind in CHOICES for decision in current_decisions(
        (d for d in decisions if d.kind == kind), per_annotator=kind == "audit").values()]


def orphaned_decision_rows(venue: str, decisions: Iterable[Decision], claim_ids: Iterable[str]) -> list[dict]:
    """One ORPHANED_COLUMNS row per applicable decision whose claim id is none of `claim_ids` (the venue's review
    claims): a claim id hashes the review id and the claim's text, so the claim's text changed when the claims were
    extracted again. The decision itself stays in the ledger untouched."""
    current = set(claim_ids)
    return [{**{name: getattr(decision, name) for name in ORPHANED_COLUMNS if name not in ("venue", "reason")},
             "venue": venue,
             "reason": f"claim {decision.claim_id} is no longer among the review claims of {venue}: its text changed "
                       "when the claims were extracted again, so this decision applies to no claim"}
            for decision in applicable_decisions(decisions) if decision.claim_id not in current]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


