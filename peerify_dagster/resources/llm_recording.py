"""Recorded LLM calls shipped with a venue: a ledger segment a build installs so its calls are answered from it.

A venue may name a recording (`llm_recording:` in the venue registry): a Parquet file with the `llm_calls`
ledger's columns, holding the successful calls a live build of that venue made. Installing it copies it into
the lake's ledger folder as a compacted segment (`part-recording-<sha256>.parquet`), once; from then on the
gateway answers every call whose call id it holds from the ledger, exactly as it answers a repeated call, and
makes the others live. A call id covers the model, the prompt file's hash, the rendered messages and the
decoding parameters, so a recording never answers a call that differs in any of these: an edited prompt or
changed input makes the affected calls live again (`scripts/record_sample_llm_calls.py` regenerates it).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Collection
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from peerify_dagster.resources.files import atomic_path
from peerify_dagster.resources.llm_gateway.ledger import LEDGER_SCHEMA, PART_SEGMENT_PREFIX, CallLedger
from peerify_dagster.resources.store import LakeStore, Location, readable

RECORDING_PREFIX = f"{PART_SEGMENT_PREFIX}recording-"


class RecordingError(ValueError):
    """A recording file that cannot be installed; the message names the file and the reason."""


def check_recording(recording: Path) -> pa.Schema:
    """The recording's schema when it can be installed: a Parquet file with the llm_calls ledger's columns, in its
    order and of its types; RecordingError naming the file and the first difference otherwise. A large_string column
    where the ledger has string holds the same text (polars writes its strings so): accepted, installed as string.
    Reads the file's footer only, so a build checks its venue's recording before any work."""
    try:
        schema = pq.read_schema(recording)
    except OSError as error:  # missing, a folder, unreadable, or not Parquet
        raise RecordingError(f"LLM recording {recording}: cannot be read as Parquet ({error})") from None
    except pa.ArrowException as error:
        raise RecordingError(f"LLM recording {recording}: not a Parquet file ({error})") from None
    if schema.names != LEDGER_SCHEMA.names:
        raise RecordingError(f"LLM recording {recording}: its columns {schema.names} are not the llm_calls ledger's "
                             f"{LEDGER_SCHEMA.names}")
    for field, expected in zip(schema, LEDGER_SCHEMA):
        if field.type != expected.type and not (pa.types.is_large_string(field.type) and expected.type == pa.string()):
            raise RecordingError(f"LLM recording {recording}: column {field.name} is {field.type}, the llm_calls "
                                 f"ledger's is {expected.type}")
    return schema


def install_recording(lake_root: Path | Location | str, recording: Path) -> Location | None:
    """Copy `recording` into the lake's ledger as a segment named by its content hash (its columns cast to the
    ledger's types where they are their large twins); None when it is there already. Raises RecordingError when the
    file is missing or is not a ledger segment (check_recording)."""
    try:
        data = recording.read_bytes()
    except OSError as error:
        raise RecordingError(f"LLM recording {recording}: cannot be read ({error})") from None
    store = LakeStore(lake_root)
    target = store.root / "llm_calls" / f"{RECORDING_PREFIX}{hashlib.sha256(data).hexdigest()[:16]}.parquet"
    if target.exists():
        return None
    if not check_recording(recording).equals(LEDGER_SCHEMA, check_metadata=False):
        sink = io.BytesIO()
        pq.write_table(pq.read_table(io.BytesIO(data)).cast(LEDGER_SCHEMA), sink, compression="zstd")
        data = sink.getvalue()
    store.write_bytes(target, data)
    return target


def write_recording(lake_root: Path, destination: Path, call_ids: Collection[str] | None = None) -> int:
    """Write every successful call of the lake's ledger (latest answer per call id, sorted by call id), or only those
    among `call_ids`, to `destination`; returns the number of calls."""
    ledger = CallLedger(lake_root)
    wanted = ledger.successful_call_ids() if call_ids is None else set(ledger.successful_call_ids()) & set(call_ids)
    rows = sorted((ledger.lookup(call_id) for call_id in wanted), key=lambda r: r["call_id"])
    requests = {}
    for segment in ledger.segments():  # the index leaves the rendered request out; it is part of the record
        table = pq.read_table(readable(segment), columns=["call_id", "request"])
        requests.update(zip(table["call_id"].to_pylist(), table["request"].to_pylist()))
    table = pa.Table.from_pylist([{**row, "request": requests[row["call_id"]]} for row in rows], schema=LEDGER_SCHEMA)
    with atomic_path(destination) as temporary:
        pq.write_table(table, temporary, compression="zstd")
    return table.num_rows
