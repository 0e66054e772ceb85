"""`peerify llm batches`: the LLM batches submitted to a provider for models with `batch: true` (the records under
`<lake>/llm_batches/`), which a re-run of their step collects into the ledger."""

from __future__ import annotations

import argparse

from peerify_dagster import paths
from peerify_dagster.cli.common import format_table, say


def register(subparsers: argparse._SubParsersAction) -> None:
    llm = subparsers.add_parser("llm", help="the LLM gateway's provider batches")
    llm_sub = llm.add_subparsers(dest="llm_command", required=True)
    llm_sub.add_parser("batches", help="list the lake's provider batches: model, status, calls, when submitted"
                       ).set_defaults(func=cmd_llm_batches)


def cmd_llm_batches(args: argparse.Namespace) -> int:
    from peerify_dagster.resources.llm_gateway.batches import BatchRecords

    records = BatchRecords(paths.lake_root())
    rows = [(record.model, record.batch_id or "(unknown)", record.status, record.provider_status or "",
             len(record.call_ids), record.counts.get("succeeded", ""), record.counts.get("failed", ""),
             record.submitted_at[:19], str(records.path(record.key).name)) for record in records.all()]
    if not rows:
        say(f"no provider batch recorded in {records.directory}")
        return 0
    print(format_table(["model", "batch", "status", "provider status", "calls", "succeeded", "failed", "submitted",
                        "record"], rows))
    return 0
