"""Leases on annotation items (Label Studio's task locking): an item shown to one annotator is theirs for a while and
offered to nobody else, so two annotators sharing a queue never decide the same item. Pure rules: who holds what,
when a lease runs out, which item an annotator is offered next. No file system, no clock: `now` is passed in.

Rules:
- only the modes where one decision settles an item are leased (arbitration, consensus); in the audit every item is
  each annotator's own to label, so nothing there is withheld from anyone;
- a lease lasts `DEFAULT_LEASE` from its last renewal (showing the item again, or a key pressed on it) and withholds
  nothing once it expires; it is gone when its holder decides the item, moves to another item or leaves, or when
  another annotator takes the item (their lease then names whose lease had run out, `taken_from`, so a refusal can
  tell that annotator the truth: their lease ran out, rather than that someone else held the item all along);
- an annotator holds at most one lease per mode: taking one gives up the previous;
- the item offered next is the one the annotator already holds (a reload shows the same item), else the first open
  item, in queue order after `after` (wrapping round), that no one else holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

LEASED_MODES = ("arbitration", "consensus")
DEFAULT_LEASE = timedelta(minutes=15)


class LeaseHeld(Exception):
    """The item is leased to another annotator; `holder` names them and `expires_at` says until when."""

    def __init__(self, item_id: str, holder: str, expires_at: datetime):
        self.item_id, self.holder, self.expires_at = item_id, holder, expires_at
        super().__init__(f"item {item_id} is leased to {holder} until {expires_at.isoformat(timespec='seconds')}")


@dataclass(frozen=True)
class Lease:
    mode: str  # one of LEASED_MODES
    item_id: str  # the queue's own item id (claim_id:source): leases live in the lake, never shown to annotators
    annotator: str
    expires_at: datetime  # timezone-aware
    taken_from: str | None = None  # the annotator whose lease on the item had run out when this one was taken

    def live(self, now: datetime) -> bool:
        return self.expires_at > now


def live_leases(leases: Iterable[Lease], now: datetime) -> list[Lease]:
    return [lease for lease in leases if lease.live(now)]


def holder(leases: Iterable[Lease], mode: str, item_id: str, now: datetime) -> Lease | None:
    """The live lease on the item in this mode, or None when it is free."""
    return next((lease for lease in live_leases(leases, now) if (lease.mode, lease.item_id) == (mode, item_id)),
                None)


def held_by_others(leases: Iterable[Lease], mode: str, annotator: str, now: datetime) -> set[str]:
    """The item ids of this mode other annotators hold now."""
    return {lease.item_id for lease in live_leases(leases, now) if lease.mode == mode and lease.annotator != annotator}


def own_lease(leases: Iterable[Lease], mode: str, annotator: str, now: datetime) -> Lease | None:
    return next((lease for lease in live_leases(leases, now)
                 if (lease.mode, lease.annotator) == (mode, annotator)), None)


def next_free(open_item_ids: Sequence[str], leases: Iterable[Lease], mode: str, annotator: str, now: datetime,
              after: str | None = None, exclude: Iterable[str] = ()) -> str | None:
    """The item to offer the annotator: the open item they hold, else the first open one after `after` (in the
    given order, wrapping round; `after` itself comes last) that nobody else holds and is not in `exclude`."""
    leases = list(leases)
    excluded = set(exclude)
    mine = own_lease(leases, mode, annotator, now)
    if mine is not None and mine.item_id in open_item_ids and mine.item_id != after and mine.item_id not in excluded:
        return mine.item_id
    taken = held_by_others(leases, mode, annotator, now)
    start = open_item_ids.index(after) + 1 if after in open_item_ids else 0
    rotated = [*open_item_ids[start:], *open_item_ids[:start]]
    return next((item_id for item_id in rotated if item_id not in taken and item_id not in excluded), None)


def take(leases: Iterable[Lease], mode: str, item_id: str, annotator: str, now: datetime,
         duration: timedelta = DEFAULT_LEASE) -> list[Lease]:
    """The leases after `annotator` takes (or renews) the item: the annotator's other lease in this mode and any
    expired lease on the item are dropped (the new lease names the other annotator whose lease ran out). Another
    annotator's expired lease on another item is kept until they move on. LeaseHeld when another annotator holds the
    item."""
    if mode not in LEASED_MODES:
        raise ValueError(f"mode {mode!r} is not leased (leased modes: {', '.join(LEASED_MODES)})")
    leases = list(leases)
    current = holder(leases, mode, item_id, now)
    if current is not None and current.annotator != annotator:
        raise LeaseHeld(item_id, current.annotator, current.expires_at)
    on_item = [lease for lease in leases if (lease.mode, lease.item_id) == (mode, item_id)]
    ran_out = next((lease.annotator for lease in on_item if lease.annotator != annotator), None)
    taken_from = current.taken_from if current is not None else ran_out
    kept = [lease for lease in leases if (lease.mode, lease.annotator) != (mode, annotator) and lease not in on_item]
    return [*kept, Lease(mode, item_id, annotator, now + duration, taken_from)]


def release(leases: Iterable[Lease], mode: str, annotator: str) -> list[Lease]:
    """The leases without the annotator's lease in this mode."""
    return [lease for lease in leases if (lease.mode, lease.annotator) != (mode, annotator)]


# -- stored form ------------------------------------------------------------------------------------------------
def to_records(leases: Iterable[Lease]) -> list[dict]:
    return [{"mode": lease.mode, "item_id": lease.item_id, "annotator": lease.annotator,
             "expires_at": lease.expires_at.isoformat(timespec="microseconds"), "taken_from": lease.taken_from}
            for lease in leases]


def from_records(records: object) -> list[Lease]:
    """Leases from their stored form. Leases are advisory and short-lived, so a record that cannot be read is no
    lease (the item is free) rather than an error that would stop every annotator."""
    if not isinstance(records, list):
        return []
    leases = []
    for record in records:
        if not isinstance(record, Mapping) or record.get("mode") not in LEASED_MODES:
            continue
        try:
            expires_at = datetime.fromisoformat(record["expires_at"])
        except (KeyError, TypeError, ValueError):
            continue
        if expires_at.utcoffset() is None or not all(isinstance(record.get(name), str) and record[name]
                                                     for name in ("item_id", "annotator")):
            continue
        taken_from = record.get("taken_from")
        leases.append(Lease(record["mode"], record["item_id"], record["annotator"], expires_at,
                            taken_from if isinstance(taken_from, str) else None))
    return leases
