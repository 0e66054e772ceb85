"""`peerify arbitrate`: an annotator works through the open items of a venue in the terminal, blind as in the browser
(items named by opaque id, never by claim id); `peerify audit sample` draws the human audit's sample.

Modes of `arbitrate`:
- `arbitration`: the `arbitration_queue` items without a live decision; the two candidate labels are shown as 1 and
  2, never with the labeller that gave them; a candidate whose answer did not parse shows the model's raw answer
  instead of a label, and only a candidate with a label is offered as a choice;
- `audit`: the audit sample's items this annotator has not labelled, blind (no candidate or automated label);
- `consensus`: audit items on which the audit's two annotators disagree and nobody has settled.

Every decision is appended to the venue's decision ledger the moment its key is pressed (the ledger fsyncs), so a
killed session loses at most the item on screen. Keys are read one at a time when stdin is a terminal, else one
line per answer (scripts can drive it). The session itself (items, decisions, leases) is annotation/sessions.py,
shared with the web app: an item on screen here is leased to this annotator, so the browser never offers it to
another one, and items another annotator holds are skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import termios
import textwrap
import tty
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import polars as pl

from peerify_dagster import paths
from peerify_dagster.annotation import audit_sample
from peerify_dagster.annotation.decisions import LedgerError
from peerify_dagster.annotation.sessions import (
    CANDIDATE_KEYS,
    LABEL_KEYS,
    MODES,
    SOURCE_NAMES,
    AnnotationError,
    Item,
    ItemUnavailable,
    Session,
    answer_of_key,
    lake_table,
)
from peerify_dagster.cli.common import guarded, refuse_upload, registered_venues, say
from peerify_dagster.domain import arbitration, audit
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.venues import RegistryError, Venue
from peerify_dagster.resources.lake import Lake

DEFAULT_SHOWN_LINES = 30
QUIT_KEYS = {"q", "\x04"}  # q, or Ctrl-D (in cbreak mode it arrives as a character)


class ArbitrateError(Exception):
    """A mistake in the request (venue, missing table, ...), reported as one line with exit code 2."""


def _venue(key: str, command: str) -> Venue:
    registry = registered_venues()
    if key not in registry:
        raise ArbitrateError(f"{paths.registry_path()}: venue {key!r} is not registered (known: "
                             f"{', '.join(sorted(registry))})")
    refuse_upload(registry[key], command)
    return registry[key]


# -- the terminal ---------------------------------------------------------------------------------------------------
class Keys:
    """Answers from stdin: single keys in cbreak mode on a terminal (signals such as Ctrl-C still work), else one
    line per answer (its first character is the key)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdin
        self.is_tty = self.stream.isatty()

    @contextmanager
    def active(self) -> Iterator[None]:
        if not self.is_tty:
            yield
            return
        fd = self.stream.fileno()
        saved = termios.tcgetattr(fd)
        try:
            tty.setcbreak(fd)
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    def key(self) -> str:
        if self.is_tty:
            # One read is one key press; a multi-byte one (an arrow key's escape sequence) is no key of ours.
            pressed = os.read(self.stream.fileno(), 32).decode("utf-8", errors="replace")
            return pressed.lower() if len(pressed) == 1 else (pressed and "?") or "q"
        line = self.stream.readline()
        if not line:
            return "q"  # end of input: quit, like q
        return line.strip()[:1].lower() or "\n"

    def line(self, prompt: Callable[[], None]) -> str:
        """One line of free text (a note), typed with the terminal's own echo and editing. The prompt is shown only
        once the terminal reads lines again, so what is typed after it is never caught in single-key mode."""
        if not self.is_tty:
            prompt()
            return self.stream.readline().rstrip("\n")
        fd = self.stream.fileno()
        cbreak = termios.tcgetattr(fd)
        cooked = list(cbreak)
        cooked[3] |= termios.ICANON | termios.ECHO
        termios.tcsetattr(fd, termios.TCSADRAIN, cooked)
        try:
            prompt()
            return self.stream.readline().rstrip("\n")
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, cbreak)


class Screen:
    """What the annotator sees: text wrapped to the terminal, long source material trimmed with a marker."""

    def __init__(self, write: Callable[[str], None], width: int, shown_lines: int):
        self.write, self.width, self.shown_lines = write, width, shown_lines

    def wrap(self, text: str | None, indent: str = "  ") -> list[str]:
        lines = []
        for paragraph in (text or "").splitlines() or [""]:
            lines += textwrap.wrap(paragraph, self.width, initial_indent=indent, subsequent_indent=indent) or [""]
        return lines

    def item(self, item: Item, position: int, total: int, open_count: int, mode: str) -> list[str]:
        """Shows the item; returns the source-material lines hidden by the trim (shown by `m`)."""
        out = [f"\n=== {position}/{total}  ({open_count} open)  {item.opaque_id} ===",
               f"claim type: {item.claim_type or 'unknown'}", "claim:", *self.wrap(item.claim_text),
               f"source material, from {SOURCE_NAMES.get(item.source, item.source)}:"]
        material = self.wrap(item.source_material) if item.source_material else ["  (none recorded)"]
        shown, hidden = material[:self.shown_lines], material[self.shown_lines:]
        out += shown
        if hidden:
            characters = sum(len(line.strip()) for line in hidden)
            out.append(f"  [... {len(hidden)} more lines ({characters} characters) hidden; m shows them]")
        for number, candidate in enumerate(item.candidates, start=1):
            out.append(f"candidate {number}: {candidate.label or arbitration.no_label_text(candidate.raw_answer)}")
            if candidate.label is None and candidate.raw_answer:
                out += ["    its raw answer:", *self.wrap(candidate.raw_answer, "    | ")]
            out += self.wrap(candidate.justification or "(no justification)", "    ")
            out += [line for quote in candidate.evidence for line in self.wrap(f'"{quote}"', "    > ")]
        if item.human_labels:
            out.append(f"the annotators' labels: {'  vs  '.join(item.human_labels)}")
        out.append(self.help(mode, item))
        self.write("\n".join(out) + "\n")
        return hidden

    @staticmethod
    def help(mode: str, item: Item) -> str:
        """The keys the item offers: a candidate only when it has a label to choose."""
        labels = " ".join(f"{key}={label}" for key, label in LABEL_KEYS.items())
        choosable = [key for key, candidate in zip(CANDIDATE_KEYS, item.candidates) if candidate.label in LABELS]
        if mode != "arbitration" or not choosable:
            choose = ""
        elif len(choosable) == 1:
            choose = f"{choosable[0]} choose candidate {choosable[0]}, "
        else:
            choose = "1/2 choose a candidate, "
        return f"keys: {choose}{labels}, k skip, u undo, o note, m more, q quit"


def walk(session: Session, keys: Keys, screen: Screen) -> int:
    """The session's loop; returns the process exit code. However it ends (a kill -9 aside), the lease on the item
    on screen is given up, so another annotator can take that item at once."""
    write = screen.write
    if not session.open_items():
        what = {"arbitration": "nothing to arbitrate", "audit": "nothing to label",
                "consensus": "nothing to reconcile"}[session.mode]
        write(f"{what} for {session.venue}: {session.total()} item(s), none open for {session.annotator}\n")
        return 0
    try:
        with keys.active():
            return _walk_items(session, keys, screen)
    finally:
        session.release()


def _walk_items(session: Session, keys: Keys, screen: Screen) -> int:
    write = screen.write
    skipped: set[str] = set()
    current: Item | None = None  # set on entry only after an undo: the undone item
    while True:
        if current is not None and not _held(session, current, write):
            skipped.add(current.item_id)
            current = None
        if current is None or not session.is_open(current):
            current = session.next_item(exclude=skipped)  # leased to this annotator
        if current is None:
            held = session.held_by_others()
            write(f"no open item left in this session ({len(skipped)} skipped"
                  + (f", {held} being decided by other annotators" if held else "")
                  + f"); {session.saved} decision(s) saved\n")
            return 0
        open_items = session.open_items()
        current = next(i for i in open_items if i.item_id == current.item_id)  # fresh human labels
        hidden = screen.item(current, session.position(current), session.total(), len(open_items), session.mode)
        note = None
        while True:
            write("> ")
            key = keys.key()
            write(("" if not keys.is_tty else key if key.isprintable() else "") + "\n")
            if key in QUIT_KEYS:
                write(f"quit; {session.saved} decision(s) saved this session\n")
                return 0
            if not _held(session, current, write):  # a key press renews the lease; lost, the item is skipped
                skipped.add(current.item_id)
                current = None
                break
            if key == "k":
                skipped.add(current.item_id)
                current = None
                break
            if key == "u":
                undone = session.undo()
                if undone is None:
                    write("nothing of yours to undo\n")
                    continue
                shown = next(i for i in session.items if i.item_id == undone.item_id).opaque_id
                write(f"undone: your decision {undone.label} on {shown}\n")
                skipped.discard(undone.item_id)
                current = next((i for i in session.open_items() if i.item_id == undone.item_id), None)
                break
            if key == "o":
                note = keys.line(lambda: write("note: ")) or None  # kept exactly, spaces and separators too
                write(f"note kept for this item's decision: {note!r}\n" if note else "no note\n")
                continue
            if key == "m":
                write("\n".join(hidden) + "\n" if hidden else "nothing hidden\n")
                continue
            answer = answer_of_key(current, key, session.mode)
            if isinstance(answer, str):
                known = key in CANDIDATE_KEYS or key in LABEL_KEYS
                write(answer + ("" if known else f"; {Screen.help(session.mode, current)}") + "\n")
                continue
            label, choice = answer
            try:
                session.decide(current, label, choice, note)
            except ItemUnavailable as exc:
                write(f"{exc}\n")
                current = None
                break
            where = f" (candidate {choice[-1]})" if choice.startswith("candidate_") else ""
            write(f"saved: {label}{where}\n")
            current = None
            break


def _held(session: Session, item: Item, write: Callable[[str], None]) -> bool:
    """Renew this annotator's lease on the item; False (said on screen) when another annotator holds it now."""
    try:
        session.hold(item)
    except ItemUnavailable as exc:
        write(f"{exc}; moving on\n")
        return False
    return True


# -- commands -----------------------------------------------------------------------------------------------------
def cmd_arbitrate(args: argparse.Namespace) -> int:
    venue = _venue(args.venue, "`peerify arbitrate`")
    if not args.annotator.strip():
        raise ArbitrateError("--annotator must name the person deciding")
    session = Session(paths.lake_root(), venue.key, args.mode, args.annotator.strip())
    width = min(shutil.get_terminal_size((100, 24)).columns, 110) - 2
    screen = Screen(lambda text: (sys.stdout.write(text), sys.stdout.flush()), max(width, 40), args.lines)
    try:
        return walk(session, Keys(), screen)
    except KeyboardInterrupt:
        say(f"\ninterrupted; {session.saved} decision(s) saved this session")
        return 130


def build_audit_sample(lake: Lake, venue: str, n: int, seed: int) -> tuple[pl.DataFrame, int]:
    """The drawn sample as stored, and how many RebuttalSourced items were left out for having no author reply."""
    built_by = f"`peerify build {venue}` builds it"
    canonical = lake_table(lake, "canonical_labels", venue, built_by)
    labels = lake_table(lake, "claim_labels", venue, built_by)
    claims = lake_table(lake, "review_claims", venue, built_by)
    types = (lake.read_table("claim_types", venue) if lake.table_path("claim_types", venue).exists()
             else pl.DataFrame(schema={"claim_id": pl.String, "claim_type": pl.String}))
    # What the thread labellers saw is the material the annotators judge (one row per claim: the labellers share it).
    thread = (labels.filter(pl.col("source") == "thread").sort("labeller")
              .unique("claim_id", keep="first", maintain_order=True)
              .select("claim_id", pl.col("evidence_text").alias("source_material"), "evidence_mode"))
    population = (canonical.filter((pl.col("source") == "thread") & pl.col("label").is_not_null())
                  .select("item_id", "claim_id", "paper_id", "review_id", "source", "label")
                  .join(thread, on="claim_id", how="left")
                  .join(claims.select("claim_id", "claim_text"), on="claim_id", how="left")
                  .join(types.select("claim_id", "claim_type").unique("claim_id"), on="claim_id", how="left"))
    no_reply = pl.col("evidence_mode").fill_null("") == "no_author_response"
    without_reply, population = population.filter(no_reply), population.filter(~no_reply)
    drawn = audit.draw_stratified(population.to_dicts(), n, seed)
    version = audit.sample_version(venue, seed, [row["item_id"] for row in drawn])
    rows = [{**row, "venue": venue, "audit_sample_version": version, "seed": seed} for row in drawn]
    frame = pl.DataFrame(rows, schema=audit_sample.AUDIT_SAMPLE_SCHEMA) if rows \
        else pl.DataFrame(schema=audit_sample.AUDIT_SAMPLE_SCHEMA)
    return frame, without_reply.height


def cmd_audit_sample(args: argparse.Namespace) -> int:
    venue = _venue(args.venue, "`peerify audit sample`")
    seed = venue.seed if args.seed is None else args.seed
    lake = Lake(paths.lake_root())
    try:
        sample, without_reply = build_audit_sample(lake, venue.key, args.n, seed)
    except audit.AuditSampleError as exc:
        raise ArbitrateError(f"cannot draw the audit sample of {venue.key}: {exc}") from None
    if sample.is_empty():
        raise ArbitrateError(f"{venue.key} has no RebuttalSourced item with a canonical label to audit "
                             "(pending items are not sampled; arbitrate them first)")
    try:
        path = audit_sample.write_sample(lake.root, venue.key, sample, force=args.force)
    except audit_sample.AuditSampleRefused as exc:
        raise ArbitrateError(f"not drawn: {exc}") from None
    strata = ", ".join(f"{label} {count}" for label, count in sample.group_by("stratum", maintain_order=True).len()
                       .iter_rows())
    print(f"drew {sample.height} items for the audit of {venue.key} (seed {seed}, version "
          f"{audit_sample.sample_version_of(sample)}): {strata}")
    if without_reply:
        print(f"left out {without_reply} item(s) whose review has no author response (Not Determined without a call)")
    print(f"stored in {path}; annotators label it with "
          f"`peerify arbitrate --venue {venue.key} --annotator NAME --mode audit`")
    return 0


_guarded = guarded(ArbitrateError, AnnotationError, RegistryError, LedgerError)


def register(subparsers: argparse._SubParsersAction) -> None:
    arbitrate = subparsers.add_parser(
        "arbitrate", help="work through a venue's open arbitration queue, audit sample or audit disagreements",
        description="Keys: 1/2 choose a candidate (arbitration), s/p/n/d give Supported / Partially Supported / "
                    "Not Supported / Not Determined, k skip, u undo your last decision, o add a note to the decision, "
                    "m show hidden source material, q quit. Each decision is saved the moment it is made.")
    arbitrate.add_argument("--venue", required=True, help="a venue key from venues.yaml")
    arbitrate.add_argument("--annotator", required=True, help="your name, recorded with every decision")
    arbitrate.add_argument("--mode", choices=MODES, default="arbitration")
    arbitrate.add_argument("--lines", type=int, default=DEFAULT_SHOWN_LINES,
                           help="source-material lines shown before the rest is hidden "
                                f"(default {DEFAULT_SHOWN_LINES}; "
                                "m shows the rest)")
    arbitrate.set_defaults(func=_guarded(cmd_arbitrate))

    audit_parser = subparsers.add_parser("audit", help="the human audit of the automated labels")
    audit_sub = audit_parser.add_subparsers(dest="audit_command", required=True)
    sample = audit_sub.add_parser("sample", help="draw the venue's audit sample (once), stratified by label")
    sample.add_argument("--venue", required=True)
    sample.add_argument("--n", type=int, default=300, help="items to draw (default 300)")
    sample.add_argument("--seed", type=int, default=None, help="default: the venue's seed in venues.yaml")
    sample.add_argument("--force", action="store_true",
                        help="draw again over an existing sample (refused once anyone has labelled it)")
    sample.set_defaults(func=_guarded(cmd_audit_sample))
