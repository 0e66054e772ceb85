"""`peerify queue export` and `peerify decisions import`: the arbitration queue out to JSONL, CSV or Label Studio, and
human decisions back from them into the decisions ledger.

An export names each item by its opaque id (never its claim id: see domain/arbitration.py), and an import maps the id
back through the queue; files exported before opaque ids (claim_id:source in `item_id`) still import.

An import validates the whole file first and is accepted whole (one ledger append) or rejected whole, with one line
per problem (`file:line: reason`, or the task for a Label Studio export) and exit code 2. An answer the annotator's
current decision on the item already records (same queue version, choice, label and note) is not recorded again, so
importing the same file twice changes nothing. The ledger is read and appended under the venue's lease lock, as the
browser's and the terminal's decisions are (annotation/sessions.py), so an item decided in the browser while the
file was being checked is seen: the import's decision supersedes it instead of standing beside it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl

from peerify_dagster import paths
from peerify_dagster.annotation.decisions import Decision, DecisionLedger, LedgerError, current_decisions, new_decision
from peerify_dagster.annotation.sessions import AnnotationError, LeaseStore, queue_opaque_ids
from peerify_dagster.cli.common import guarded, say
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.resources.files import write_atomic
from peerify_dagster.resources.lake import Lake, UnreadablePartitionError

TASKS_FILE, CONFIG_FILE = "tasks.json", "labelling_config.xml"


class QueueCommandError(Exception):
    """A mistake reported as its message with exit code 2."""


def _read(lake: Lake, table: str, venue: str) -> pl.DataFrame:
    try:
        return lake.read_table(table, venue)
    except (FileNotFoundError, UnreadablePartitionError) as exc:
        raise QueueCommandError(f"no readable {table} for venue {venue!r} in {lake.root} ({exc}); "
                                f"build the venue first (`peerify build {venue}`)") from None


def _arbitration_decisions(lake: Lake, venue: str) -> tuple[DecisionLedger, list[Decision]]:
    ledger = DecisionLedger(lake.root, venue)
    contents = ledger.read()
    for problem in contents.problems:
        say(f"warning: {ledger.path}:{problem.line_number}: {problem.reason}")
    return ledger, [d for d in contents.decisions if d.kind == "arbitration"]


def cmd_queue_export(args: argparse.Namespace) -> int:
    lake = Lake(paths.lake_root())
    queue = _read(lake, "arbitration_queue", args.venue).to_dicts()
    rows = queue if args.all else arb.open_items(queue, current_decisions(_arbitration_decisions(lake, args.venue)[1]))
    opaque_ids = queue_opaque_ids(lake.root, args.venue, queue)
    out = Path(args.out)
    if args.format == "labelstudio":
        tasks_path, config_path = _labelstudio_paths(out)
        tasks = arb.to_labelstudio_tasks(rows, opaque_ids)
        write_atomic(tasks_path, json.dumps(tasks, ensure_ascii=False, indent=1).encode())
        write_atomic(config_path, arb.labelstudio_config().encode())
        written = f"{tasks_path} (labelling config: {config_path})"
    else:
        text = arb.to_jsonl(rows, opaque_ids) if args.format == "jsonl" else arb.to_csv(rows, opaque_ids)
        write_atomic(out, text.encode("utf-8"))
        written = str(out)
    scope = "all items" if args.all else "open items"
    print(f"exported {len(rows)} of {len(queue)} queue items ({scope}) to {written}")
    return 0


def _labelstudio_paths(out: Path) -> tuple[Path, Path]:
    """A folder (existing, or a name without suffix) gets tasks.json and the config; a file gets a sibling config."""
    if out.is_dir() or not out.suffix:
        return out / TASKS_FILE, out / CONFIG_FILE
    return out, out.with_name(f"{out.stem}.{CONFIG_FILE}")


def cmd_decisions_import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not args.annotator.strip():
        raise QueueCommandError("--annotator must name who made the decisions; it is empty")
    file_format = args.format or arb.import_format(path.name)
    if file_format is None:
        raise QueueCommandError(f"{path}: cannot tell the format from the name; give --format "
                                f"({', '.join(arb.EXPORT_FORMATS)})")
    try:
        data = path.read_bytes()  # decoded by the reader: no newline translation, so a quoted \r stays one
    except OSError as exc:
        raise QueueCommandError(f"{path}: cannot be read ({exc})") from None
    lake = Lake(paths.lake_root())
    queue = _read(lake, "arbitration_queue", args.venue).to_dicts()
    known_claims = set(_read(lake, "claim_labels", args.venue)["claim_id"])
    answers, problems = arb.READERS[file_format](data)
    valid, invalid = arb.validate_answers(answers, args.venue, queue, known_claims,
                                          queue_opaque_ids(lake.root, args.venue, queue))
    problems += invalid
    if problems:
        say(f"rejected {path}: {len(problems)} problem(s); nothing was imported")
        for problem in problems:
            say(f"  {problem.located(str(path))}")
        return 2
    if not valid:
        raise QueueCommandError(f"{path}: no decisions in it (every item leaves choice and label empty)")
    with LeaseStore(lake.root, args.venue).locked():  # the lock every decision is checked and appended under
        ledger, stored = _arbitration_decisions(lake, args.venue)
        current, mine = current_decisions(stored), current_decisions(stored, per_annotator=True)
        new = [a for a in valid if not arb.answer_recorded(a, mine.get((a.queue_row["item_id"], args.annotator)))]
        decisions = [
            new_decision(venue=args.venue, claim_id=a.queue_row["claim_id"], source=a.queue_row["source"],
                         kind="arbitration", action="decide", choice=a.choice, label=a.label,
                         annotator=args.annotator, note=a.note, queue_version=a.queue_row["queue_version"],
                         supersedes=current[a.queue_row["item_id"]].decision_id
                         if a.queue_row["item_id"] in current else None)
            for a in new
        ]
        try:
            ledger.append(decisions)
        except LedgerError as exc:
            raise QueueCommandError(str(exc)) from None
    skipped = [f"{n} {what}" for n, what in ((len(valid) - len(new), "already recorded"),
                                            (len(answers) - len(valid), "undecided item(s)")) if n]
    print(f"imported {len(decisions)} decision(s) from {path} into {ledger.path}"
          + (f" ({', '.join(skipped)}: skipped)" if skipped else ""))
    return 0


_guarded = guarded(QueueCommandError, AnnotationError)  # an S3 lake without Postgres: no leases


def register(subparsers: argparse._SubParsersAction) -> None:
    queue = subparsers.add_parser("queue", help="the arbitration queue")
    queue_sub = queue.add_subparsers(dest="queue_command", required=True)
    export = queue_sub.add_parser("export", help="write the open queue items (or --all) for humans to label")
    export.add_argument("--venue", required=True)
    export.add_argument("--format", choices=arb.EXPORT_FORMATS, required=True)
    export.add_argument("--out", required=True, help="output file; for labelstudio a folder (tasks.json + "
                                                     "labelling_config.xml) or a file with the config beside it")
    export.add_argument("--all", action="store_true", help="every queue item, decided ones included")
    export.set_defaults(func=_guarded(cmd_queue_export))

    decisions = subparsers.add_parser("decisions", help="the human decisions ledger")
    decisions_sub = decisions.add_subparsers(dest="decisions_command", required=True)
    imports = decisions_sub.add_parser("import", help="append the decisions of a filled-in export (all or nothing)")
    imports.add_argument("file", help="a .jsonl or .csv export with choice/label filled in, or a Label Studio "
                                      "JSON export (.json)")
    imports.add_argument("--venue", required=True)
    imports.add_argument("--annotator", required=True, help="who made the decisions")
    imports.add_argument("--format", choices=arb.EXPORT_FORMATS, help="default: from the file name")
    imports.set_defaults(func=_guarded(cmd_decisions_import))
