"""Lineage-audited label releases: the files of a release, its manifest, its datasheet, how a release is verified and
how its labels are rebuilt from the calls and decisions it carries. Pure logic: no Dagster (the asset is
peerify_dagster/assets/release.py, the commands peerify_dagster/cli/release.py).

A release folder `<version>/` holds, per slice, `<Slice>.parquet` and `<Slice>.jsonl` (the same rows: every venue's
rows of that slice in SLICE_SCHEMA, sorted by venue and claim id), `calls.parquet` (the LLM ledger rows behind the
labels), `decisions.jsonl` (the human decisions behind them), `DATASHEET.md`, `README.md` (the Hugging Face dataset
card: front matter with one config per slice over the datasheet, domain/dataset_card.py), `croissant.json` (Croissant
metadata, domain/croissant.py) and `manifest.json`. Every file is
written deterministically (same rows, same bytes), which is what lets a rebuild be compared byte for byte.

The manifest names every other file with its sha256, size and row count, and carries the sha256 of its own body
(`manifest_sha256`, over the canonical JSON of everything else), so a hand edit of the manifest is caught as well as
a changed, missing or extra file. The self-hash catches edits, not a forger who recomputes it: publish the sha256 of
manifest.json itself beside the release (`peerify release verify DIR --manifest-sha256 HEX` checks it).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain import audit
from peerify_dagster.domain.croissant import croissant
from peerify_dagster.domain.dataset_card import dataset_card
from peerify_dagster.domain.labelling import (
    LABELLER_ROLES,
    MANUSCRIPT_PROMPT,
    MODE_NO_AUTHOR_RESPONSE,
    SOURCE_MANUSCRIPT,
    SOURCE_THREAD,
    THREAD_PROMPT,
    answer_quotes,
)
from peerify_dagster.domain.labels import LABELS, NOT_DETERMINED, SUPPORTED
from peerify_dagster.domain.llm_calls import canonical_json, parse_answer
from peerify_dagster.domain.records import json_lines, jsonl_bytes
from peerify_dagster.domain.release_lineage import environment, installed_lock
from peerify_dagster.domain.slices import SLICE_COLUMNS, SLICE_SCHEMA, SLICES, SliceConfig, SliceConfigError

FORMAT = "peerify-label-release/1"
MANIFEST, DATASHEET, CALLS, DECISIONS = "manifest.json", "DATASHEET.md", "calls.parquet", "decisions.jsonl"
CARD, CROISSANT = "README.md", "croissant.json"
SELF_HASH = "manifest_sha256"
_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
_ROW_ORDER = ("venue", "claim_id")
# gold_source values of benchmark_slices and what rebuilds them
PAPER_SOURCE, HUMAN_SOURCE = "paper", "human_audit"
BOTH_SOURCES = f"{SOURCE_THREAD}+{SOURCE_MANUSCRIPT}"
_PROMPT_SOURCE = {THREAD_PROMPT: SOURCE_THREAD, MANUSCRIPT_PROMPT: SOURCE_MANUSCRIPT}
_ROLE_LABELLER = {role: labeller for labeller, role in LABELLER_ROLES.items()}
NO_CALL_MODE = "no_call"  # a labeller row rebuilt without a call that is not the no-author-response rule


class ReleaseError(ValueError):
    """A release that cannot be made or used as asked; the message names the item and the reason."""


def check_version(version: str) -> str:
    """The version if it is X.Y.Z (non-negative integers, no leading zeros), else ReleaseError."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ReleaseError(f"release version {version!r} is not X.Y.Z (three non-negative integers, e.g. 1.0.0)")
    return version


def slice_files(name: str) -> tuple[str, str]:
    return f"{name}.parquet", f"{name}.jsonl"


def data_files() -> list[str]:
    """Every file a release holds besides its manifest, in manifest order."""
    return [name for slice_name in SLICES for name in slice_files(slice_name)] + [CALLS, DECISIONS, *METADATA_FILES]


# Written from the manifest and the files before them, in this order (the Croissant distribution hashes the others).
METADATA_FILES = (DATASHEET, CARD, CROISSANT)


# -- deterministic files ----------------------------------------------------------------------------------------------
SLICE_ARROW_SCHEMA = pa.schema([(name, pa.list_(pa.string()) if isinstance(dtype, pl.List) else pa.string())
                                for name, dtype in SLICE_SCHEMA.items()])


def slice_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows a release file holds: SLICE_SCHEMA columns, sorted by venue and claim id."""
    return frame.select(SLICE_COLUMNS).cast(SLICE_SCHEMA).sort(_ROW_ORDER)


def parquet_bytes(table: pa.Table) -> bytes:
    """Parquet bytes that depend on the rows only (one row group, fixed compression, no timestamps)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", row_group_size=max(table.num_rows, 1))
    return sink.getvalue()


def slice_parquet(frame: pl.DataFrame) -> bytes:
    return parquet_bytes(pa.Table.from_pylist(slice_rows(frame).to_dicts(), schema=SLICE_ARROW_SCHEMA))


def slice_jsonl(frame: pl.DataFrame) -> bytes:
    return jsonl_bytes(slice_rows(frame).to_dicts())


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_entry(data: bytes, rows: int | None) -> dict[str, Any]:
    return {"sha256": sha256_hex(data), "bytes": len(data), "rows": rows}


# -- the manifest -----------------------------------------------------------------------------------------------------
def manifest_body_hash(manifest: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json({k: v for k, v in manifest.items() if k != SELF_HASH}).encode("utf-8"))


def seal_manifest(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's bytes, with the hash of its own body added."""
    sealed = {**manifest, SELF_HASH: manifest_body_hash(manifest)}
    return (json.dumps(sealed, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8")


class ManifestError(ReleaseError):
    """A sealed manifest that is not shaped as a release manifest: `key` (a path such as `venues[0].seed`) and why.
    Its hash checks out, so it is no tampering to report but no release either: its readers cannot use it."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(f"key `{key}`: {reason}")


# A shape checks the value at a key of the manifest and raises ManifestError naming the key; every key the readers of
# a release (verify, rebuild, diff, the metadata files) use is checked here, so they can index it without a guard.
Shape = Callable[[Any, str], None]


def _kind(expected: str, accepts: Callable[[Any], bool]) -> Shape:
    def check(value: Any, key: str) -> None:
        if not accepts(value):
            raise ManifestError(key, f"{expected} expected, got {reprlib.repr(value)}")
    return check


_TEXT = _kind("a string", lambda v: isinstance(v, str))
_INTEGER = _kind("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
_COUNT = _kind("a non-negative integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def _optional(shape: Shape) -> Shape:
    return lambda value, key: None if value is None else shape(value, key)


def _list_of(shape: Shape) -> Shape:
    def check(value: Any, key: str) -> None:
        if not isinstance(value, list):
            raise ManifestError(key, f"a list expected, got {reprlib.repr(value)}")
        for index, item in enumerate(value):
            shape(item, f"{key}[{index}]")
    return check


def _map_of(shape: Shape) -> Shape:
    def check(value: Any, key: str) -> None:
        if not isinstance(value, dict):
            raise ManifestError(key, f"an object expected, got {reprlib.repr(value)}")
        for name, item in value.items():
            shape(item, f"{key}[{name!r}]")
    return check


def _record(required: Mapping[str, Shape], optional: Mapping[str, Shape] | None = None) -> Shape:
    """An object with the `required` keys (and the `optional` ones when present); other keys are left to others."""
    def check(value: Any, key: str) -> None:
        if not isinstance(value, dict):
            raise ManifestError(key, f"an object expected, got {reprlib.repr(value)}")
        for name, shape in {**required, **(optional or {})}.items():
            at = f"{key}.{name}" if key else name
            if name in value:
                shape(value[name], at)
            elif name in required:
                raise ManifestError(at, "missing")
    return check


def _slice_options(value: Any, key: str) -> None:
    try:
        SliceConfig.from_mapping(value)
    except SliceConfigError as exc:
        raise ManifestError(key, str(exc)) from None


_PER_SLICE = _record({name: _COUNT for name in SLICES})
_MANIFEST_SHAPE = _record({
    "format": _TEXT, "version": _TEXT, "created_at": _TEXT,
    "venues": _list_of(_record(
        {"venue": _TEXT, "openreview_id": _TEXT, "source": _TEXT, "seed": _INTEGER, "sample_size": _optional(_COUNT),
         "licence": _TEXT, "licence_url": _optional(_TEXT), "source_description": _TEXT, "rows": _PER_SLICE},
        {"citation": _optional(_TEXT), "slices": _slice_options})),
    "seeds": _map_of(_INTEGER),
    "slices": _record({name: _record({"rows": _COUNT, "labels": _record({label: _COUNT for label in LABELS})})
                       for name in SLICES}),
    "files": _map_of(_record({"sha256": _TEXT, "bytes": _COUNT}, {"rows": _optional(_COUNT)})),
    "models": _map_of(_record({"backend": _TEXT, "model_id": _TEXT, "roles": _list_of(_TEXT), "calls": _COUNT})),
    "prompts": _map_of(_record({"hashes": _list_of(_TEXT)})),
    "arbitration": _map_of(_map_of(_COUNT)),  # venue -> source:provenance -> labels
    "left_out": _map_of(_map_of(_map_of(_COUNT))),  # venue -> slice -> reason -> claims
})


def check_manifest_shape(manifest: Mapping[str, Any]) -> None:
    """ManifestError naming the first key of `manifest` that is missing or of the wrong type (a venue without its
    seed included)."""
    _MANIFEST_SHAPE(manifest, "")
    for index, venue in enumerate(manifest["venues"]):
        if venue["venue"] not in manifest["seeds"]:
            raise ManifestError(f"seeds[{venue['venue']!r}]", f"missing: `venues[{index}]` names the venue")


def provenance_links(frame: pl.DataFrame) -> tuple[list[str], list[str]]:
    """The call ids and decision ids the rows name, sorted, each once."""
    def ids(column: str) -> list[str]:
        return sorted(frame[column].explode().drop_nulls().unique().to_list())

    return ids("gold_call_ids"), ids("gold_decision_ids")


def label_counts(frame: pl.DataFrame) -> dict[str, dict[str, int]]:
    """slice -> label -> rows (all six slices, every label, zeros included)."""
    return {name: {label: frame.filter((pl.col("slice") == name) & (pl.col("gold_label") == label)).height
                   for label in LABELS} for name in SLICES}


def slice_parquet_files() -> dict[str, str]:
    """slice -> its Parquet file (what the card's configs and the Croissant record sets read)."""
    return {name: slice_files(name)[0] for name in SLICES}


def metadata_files(manifest: Mapping[str, Any], entries: Mapping[str, Mapping[str, Any]]) -> dict[str, bytes]:
    """DATASHEET.md, README.md and croissant.json from the manifest (without its `files`) and the manifest entries
    (sha256, bytes, rows) of the slice, calls and decisions files."""
    sheet = datasheet(manifest)
    written = {DATASHEET: sheet.encode("utf-8"), CARD: dataset_card(manifest, slice_parquet_files(), sheet)}
    distribution = {**entries, **{name: file_entry(data, None) for name, data in written.items()}}
    written[CROISSANT] = croissant(manifest, distribution, slice_parquet_files(), SLICE_SCHEMA, MANIFEST)
    return written


def release_files(manifest: Mapping[str, Any], files: Mapping[str, bytes],
                  counts: Mapping[str, int]) -> dict[str, bytes]:
    """Every file of a release, the manifest last: `files` (the slice, calls and decisions files, with their row
    `counts`), the metadata files made from them and the manifest, and the sealed manifest listing them all."""
    entries = {name: file_entry(data, counts[name]) for name, data in files.items()}
    every = {**files, **metadata_files(manifest, entries)}
    listed = {**manifest, "files": {name: entries.get(name) or file_entry(every[name], None) for name in data_files()}}
    return {**every, MANIFEST: seal_manifest(listed)}


def venue_terms_lines(venues: Sequence[Mapping[str, Any]]) -> str:
    """One Markdown line per venue: its source, licence and citation as the registry gives them."""
    return "\n".join(f"- `{v['venue']}`: {v['source_description']} Licence: {v['licence']}"
                     + (f" ({v['licence_url']})" if v.get("licence_url") else "") + "."
                     + (f" Cite: {v['citation']}" if v.get("citation") else "") for v in venues)


def datasheet(manifest: Mapping[str, Any]) -> str:
    """The release's datasheet (Markdown), from what the manifest records."""
    venues = manifest["venues"]
    composition = ["| slice | rows | " + " | ".join(LABELS) + " |", "|---|---|" + "---|" * len(LABELS)]
    for name in SLICES:
        counts = manifest["slices"][name]["labels"]
        composition.append(f"| {name} | {manifest['slices'][name]['rows']} | "
                           + " | ".join(str(counts[label]) for label in LABELS) + " |")
    per_venue = "\n".join(
        f"- `{v['venue']}` (id `{v['openreview_id']}`, read from `{v['source']}`, seed {v['seed']}, sample size "
        f"{v['sample_size'] if v['sample_size'] is not None else 'all submissions'}): "
        + ", ".join(f"{name} {v['rows'][name]}" for name in SLICES) for v in venues)  # JSON sorts the keys
    models = "\n".join(f"- `{name}` ({m['backend']} `{m['model_id']}`), roles {', '.join(m['roles'])}: {m['calls']} "
                       "calls" for name, m in manifest["models"].items()) or "- (no model call behind these labels)"
    prompts = "\n".join(f"- `{prompt_id}`: sha256 {', '.join(h[:16] for h in p['hashes'])}"
                        for prompt_id, p in manifest["prompts"].items()) or "- (none)"
    arbitration = "\n".join(f"- `{venue}`: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
                            for venue, counts in manifest["arbitration"].items())
    left_out = "\n".join(f"- `{venue}`: " + "; ".join(f"{s}: " + ", ".join(f"{r} {n}" for r, n in sorted(c.items()))
                                                      for s, c in sorted(out.items()))
                         for venue, out in manifest["left_out"].items() if out) or "- nothing was left out"
    return f"""# Peerify label release {manifest['version']}

## Motivation
A benchmark of peer-review claim verification: each claim a reviewer made about a paper carries a gold label
(Supported, Partially Supported, Not Supported, Not Determined) with its provenance, so that verifiers can be
evaluated on it and every label traced back to the model calls and human decisions behind it.

## Composition
Six slices, one Parquet and one JSONL file each (the same rows), every venue's rows together:

{chr(10).join(composition)}

Venues:

{per_venue}

Columns (every slice): {', '.join(f'`{c}`' for c in SLICE_COLUMNS)}. `gold_call_ids` name the LLM calls behind a label
(rows of `calls.parquet`), `gold_decision_ids` the human decisions (lines of `decisions.jsonl`).

## Collection process
Each venue was read by the Peerify DAG from its source (the OpenReview API, or a snapshot folder), whose text comes
from where its registry entry says (under Licence below); papers were drawn with the seeds above. Review claims were
extracted from official reviews and reviewer follow-ups by an LLM; PaperSourced claims were
written from seeded manuscript paragraphs. The Dagster data and code versions of every upstream table are in
`manifest.json` (`upstream`); the code was derived into those versions from its source, and its dependencies were
installed from {installed_lock(environment(manifest))} (`manifest.json` `environment`: every lock file's sha256).

## Labelling and arbitration
Two LLM labellers (roles labeller_a and labeller_b) label every review claim against its review thread
(RebuttalSourced) and against the manuscript (LLMJudged). Where they disagree or an answer does not parse, a human
chooses one of the two anonymised answers or another label; items no human has decided yet are left out, never
guessed. HighAgreement holds claims whose two canonical labels agree; VerifiableOnly the factual claims of its base
slice; HumanVerified the human audit's consensus labels; PaperSourced claims are Supported by construction.

Models:

{models}

Prompts:

{prompts}

Canonical labels by provenance:

{arbitration}

Left out of the slices:

{left_out}

## Known limits
- Labels are only as good as the labeller models above; with small local models they are plumbing-grade.
- Pending items (no human decision yet) are not in the release, so the review-claim slices lean towards the items
  the two labellers agreed on.
- Claim extraction and the factual/subjective tag are LLM outputs and are not audited here.

## Licence
Each venue's text, as its registry entry states its source and licence:

{venue_terms_lines(venues)}

The labels and this datasheet of a venue's rows are released under that venue's licence.

## Verify and rebuild
`peerify release verify DIR` re-hashes every file and re-checks the rows; `peerify rebuild-from-release DIR`
reproduces every label from `calls.parquet` and `decisions.jsonl` without an API key or a GPU.
"""


# -- verification -----------------------------------------------------------------------------------------------------
def _file_problems(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    listed = manifest["files"]
    on_disk = {path.name for path in folder.iterdir()}
    problems = [f"{name}: extra file, not in the manifest" for name in sorted(on_disk - set(listed) - {MANIFEST})]
    problems += [f"{name}: missing (the manifest lists it)" for name in listed if name not in on_disk]
    problems += [f"{name}: the manifest does not list it" for name in data_files() if name not in listed]
    for name, entry in listed.items():
        path = folder / name
        if name not in on_disk or not path.is_file():
            continue
        data = path.read_bytes()
        if (sha256_hex(data), len(data)) != (entry.get("sha256"), entry.get("bytes")):
            problems.append(f"{name}: content changed (sha256 {sha256_hex(data)}, {len(data)} bytes; the manifest "
                            f"says {entry.get('sha256')}, {entry.get('bytes')} bytes)")
    return problems


def _first_difference(found: Any, expected: Any, at: str = "") -> str:
    """Where two JSON values first differ, as a path (`recordSet[2].field[0].description`)."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected)):
            if found.get(key) != expected.get(key):
                return _first_difference(found.get(key), expected.get(key), f"{at}.{key}" if at else key)
    if isinstance(found, list) and isinstance(expected, list) and len(found) == len(expected):
        for index, (a, b) in enumerate(zip(found, expected)):
            if a != b:
                return _first_difference(a, b, f"{at}[{index}]")
    return at or "(the whole file)"


def metadata_problems(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    """The datasheet, dataset card and Croissant metadata on disk that are not what the manifest and the files it
    lists give (an edit resealed into the manifest, or a file that does not read), named with where they differ."""
    listed = manifest["files"]
    entries = {name: listed[name] for name in data_files() if name not in METADATA_FILES and name in listed}
    if len(entries) + len(METADATA_FILES) < len(data_files()):
        return []  # a file the manifest does not list: reported already, nothing to rebuild the metadata from
    body = {k: v for k, v in manifest.items() if k not in ("files", SELF_HASH)}
    problems = []
    for name, wanted in metadata_files(body, entries).items():
        path = folder / name
        if not path.is_file() or (found := path.read_bytes()) == wanted:
            continue
        if name == CROISSANT:
            try:
                found_json = json.loads(found)
            except (ValueError, RecursionError) as exc:
                problems.append(f"{name}: not JSON ({exc})")
                continue
            where = _first_difference(found_json, json.loads(wanted))
        else:
            lines = found.decode("utf-8", errors="replace").splitlines()
            wanted_lines = wanted.decode("utf-8").splitlines()
            where = "line " + str(next((i for i, (a, b) in enumerate(zip(lines, wanted_lines), start=1) if a != b),
                                       min(len(lines), len(wanted_lines)) + 1))
        problems.append(f"{name}: not what the manifest and the release files give (first difference at {where})")
    return problems


def _read_parquet(path: Path, schema: pa.Schema) -> tuple[pa.Table | None, str | None]:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        return None, f"{path.name}: not readable as Parquet ({str(exc).splitlines()[0]})"
    if not table.schema.equals(schema):
        return None, f"{path.name}: schema {table.schema.names} / {table.schema.types} is not the release schema"
    return table, None


def _read_json_lines(path: Path, accepts: Callable[[Any], bool],
                     what: str) -> tuple[list[dict], str | None]:
    """The file's JSON objects up to the first line that is not UTF-8, not JSON or that `accepts` refuses (named with
    `what`), and that line as `file:line: reason`."""
    records = []
    for line in json_lines(path.read_bytes()):
        if line.problem is not None or not accepts(line.record):
            return records, f"{path.name}:{line.number}: {line.problem or what}"
        records.append(line.record)
    return records, None


def _read_jsonl(path: Path, columns: Sequence[str]) -> tuple[list[dict] | None, str | None]:
    records, problem = _read_json_lines(path, lambda r: isinstance(r, dict) and list(r) == list(columns),
                                        f"fields are not the release's columns {list(columns)}")
    return (None, problem) if problem else (records, None)


def _row_problems(name: str, frame: pl.DataFrame, manifest: Mapping[str, Any]) -> list[str]:
    parquet_name, _ = slice_files(name)
    problems = _count_problem(parquet_name, frame.height, manifest)
    wrong_slice = frame.filter(pl.col("slice") != name)
    if wrong_slice.height:
        problems.append(f"{parquet_name}: row of claim {wrong_slice['claim_id'][0]} belongs to slice "
                        f"{wrong_slice['slice'][0]!r}")
    venues = {v["venue"] for v in manifest["venues"]}
    stray = frame.filter(~pl.col("venue").is_in(sorted(venues)))
    if stray.height:
        problems.append(f"{parquet_name}: claim {stray['claim_id'][0]} of venue {stray['venue'][0]!r}, which the "
                        "manifest does not list")
    return problems


@dataclass
class ReleaseContents:
    """A release read back: its manifest, every slice's rows, its calls and decisions (what verify and rebuild use)."""

    folder: Path
    manifest: dict[str, Any]
    slices: dict[str, pl.DataFrame] = field(default_factory=dict)
    calls: pa.Table | None = None
    decisions: list[dict] = field(default_factory=list)

    def rows(self) -> pl.DataFrame:
        return pl.concat([self.slices[name] for name in SLICES])


def read_manifest(folder: Path) -> tuple[dict | None, list[str]]:
    path = folder / MANIFEST
    if not path.is_file():
        return None, [f"{MANIFEST}: missing"]
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, a number past int()'s digits, too deep
        return None, [f"{MANIFEST}: not JSON ({exc})"]
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None, [f"{MANIFEST}: not a {FORMAT} manifest"]
    problems = []
    if manifest.get(SELF_HASH) != manifest_body_hash(manifest):
        problems.append(f"{MANIFEST}: edited after release (its body hashes to {manifest_body_hash(manifest)}, "
                        f"it records {manifest.get(SELF_HASH)})")
    try:
        check_manifest_shape(manifest)
    except ManifestError:
        if problems:  # an edit that broke its shape: the edit is what to report, and nothing more can be read
            return None, problems
        raise
    return manifest, problems


def read_release(folder: Path, ledger_schema: pa.Schema) -> tuple[ReleaseContents | None, list[str]]:
    """The release's contents and every problem found reading it: the manifest's own hash, the set of files, each
    file's sha256 and size, row counts, schemas, Parquet and JSONL agreeing row for row. Problems come in that order,
    so the first one is the most basic."""
    manifest, problems = read_manifest(folder)
    if manifest is None:
        return None, problems
    problems += _file_problems(folder, manifest)
    problems += metadata_problems(folder, manifest)
    contents = ReleaseContents(folder, manifest)
    for name in SLICES:
        parquet_name, jsonl_name = slice_files(name)
        if not (folder / parquet_name).is_file() or not (folder / jsonl_name).is_file():
            continue
        table, problem = _read_parquet(folder / parquet_name, SLICE_ARROW_SCHEMA)
        records, jsonl_problem = _read_jsonl(folder / jsonl_name, SLICE_COLUMNS)
        problems += [p for p in (problem, jsonl_problem) if p]
        if table is None:
            continue
        frame = pl.from_arrow(table).cast(SLICE_SCHEMA)
        contents.slices[name] = frame
        problems += _row_problems(name, frame, manifest)
        if records is not None and records != frame.to_dicts():
            at = next((i for i, (a, b) in enumerate(zip(records, frame.to_dicts()), start=1) if a != b),
                      min(len(records), frame.height) + 1)
            problems.append(f"{jsonl_name} line {at}: differs from row {at} of {parquet_name}")
        problems += _count_problem(jsonl_name, len(records) if records is not None else None, manifest)
    if (folder / CALLS).is_file():
        contents.calls, problem = _read_parquet(folder / CALLS, ledger_schema)
        problems += [problem] if problem else []
        problems += _count_problem(CALLS, contents.calls.num_rows if contents.calls is not None else None, manifest)
    if (folder / DECISIONS).is_file():
        contents.decisions, problem = _read_decisions(folder / DECISIONS)
        problems += [problem] if problem else []
        problems += _count_problem(DECISIONS, len(contents.decisions), manifest)
    return contents, problems


def _count_problem(name: str, rows: int | None, manifest: Mapping[str, Any]) -> list[str]:
    expected = manifest["files"].get(name, {}).get("rows")
    return [f"{name}: {rows} rows, the manifest says {expected}"] if rows is not None and rows != expected else []


def _read_decisions(path: Path) -> tuple[list[dict], str | None]:
    return _read_json_lines(path, lambda r: isinstance(r, dict) and isinstance(r.get("decision_id"), str),
                            "not a decision (no decision_id)")


def link_problems(contents: ReleaseContents) -> list[str]:
    """Provenance links that do not resolve inside the release: a call id not in calls.parquet, a decision id not in
    decisions.jsonl (the first row naming each)."""
    known_calls = set(contents.calls["call_id"].to_pylist()) if contents.calls is not None else set()
    known_decisions = {record["decision_id"] for record in contents.decisions}
    problems = []
    for name, frame in contents.slices.items():
        for row in frame.select("claim_id", "gold_call_ids", "gold_decision_ids").iter_rows(named=True):
            problems += [f"{name}.parquet claim {row['claim_id']}: call {call_id} is not in {CALLS}"
                         for call_id in row["gold_call_ids"] or [] if call_id not in known_calls]
            problems += [f"{name}.parquet claim {row['claim_id']}: decision {decision_id} is not in {DECISIONS}"
                         for decision_id in row["gold_decision_ids"] or [] if decision_id not in known_decisions]
    return problems


# -- rebuilding the labels --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replayed:
    """One recorded call issued again through the gateway: its answer as recorded, or why it could not be replayed."""

    call_id: str
    role: str | None
    prompt_id: str
    raw_response: str | None = None
    schema: Mapping[str, Any] | None = None  # the output schema of the recorded request
    error: str | None = None  # the call's own recorded failure (the labels stage sees no label)
    problem: str | None = None  # why it could not be replayed (not in the ledger, request altered, ...)


def replayed_label(call: Replayed) -> tuple[str | None, dict]:
    """The label the labels stage takes from an answer (re-parsed from its raw text: an answer that failed, does not
    parse, or has a label outside the four gives None) and the parsed answer."""
    if call.error is not None or call.raw_response is None:
        return None, {}
    parsed = parse_answer(call.raw_response, call.schema)
    return (parsed.label if parsed.parse_ok else None), parsed.parsed or {}


@dataclass(frozen=True)
class Unreproduced:
    venue: str
    slice: str
    claim_id: str
    why: str

    def __str__(self) -> str:
        return f"{self.slice} claim {self.claim_id} ({self.venue}): {self.why}"


def _labeller_rows(item: Mapping[str, Any], calls: Mapping[str, Replayed]) -> list[dict]:
    """claim_labels-like rows (one per labeller) for one (claim, source) from its replayed calls."""
    rows = []
    base = {k: item[k] for k in ("claim_id", "paper_id", "review_id", "source")}
    for labeller in LABELLER_ROLES:
        call = calls.get(labeller)
        if call is not None:
            label, parsed = replayed_label(call)
            rows.append({**base, "labeller": labeller, "label": label, "parse_ok": label is not None,
                         "call_id": call.call_id, "evidence_mode": "replayed", "evidence_text": None,
                         "justification": parsed.get("justification"), "evidence_quotes": answer_quotes(parsed)})
        elif item["source"] == SOURCE_THREAD and not calls:  # no author response: Not Determined by rule, no call
            rows.append({**base, "labeller": labeller, "label": NOT_DETERMINED, "parse_ok": True, "call_id": None,
                         "evidence_mode": MODE_NO_AUTHOR_RESPONSE, "evidence_text": None, "justification": None,
                         "evidence_quotes": []})
        else:  # no usable evidence for this labeller (e.g. too long): no label
            rows.append({**base, "labeller": labeller, "label": None, "parse_ok": False, "call_id": None,
                         "evidence_mode": NO_CALL_MODE, "evidence_text": None, "justification": None,
                         "evidence_quotes": []})
    return rows


def _canonical_items(rows: pl.DataFrame, replayed: Mapping[str, Replayed]) -> dict[str, dict]:
    """item_id -> the item's ids, source and replayed calls by labeller, for every review-claim label in the rows."""
    items: dict[str, dict] = {}
    for row in rows.filter(pl.col("gold_source").is_in([SOURCE_THREAD, SOURCE_MANUSCRIPT, BOTH_SOURCES])).iter_rows(
            named=True):
        sources = row["gold_source"].split("+")
        for source in sources:
            item = items.setdefault(arb.item_id_of(row["claim_id"], source), {
                "claim_id": row["claim_id"], "paper_id": row["paper_id"], "review_id": row["review_id"],
                "source": source, "claim_text": row["claim_text"], "claim_type": row["claim_type"], "calls": {}})
            for call_id in row["gold_call_ids"] or []:
                call = replayed.get(call_id)
                if call is not None and _PROMPT_SOURCE.get(call.prompt_id) == source \
                        and call.role in _ROLE_LABELLER:
                    item["calls"][_ROLE_LABELLER[call.role]] = call
    return items


@dataclass
class Rebuilt:
    slices: dict[str, pl.DataFrame]  # slice -> the rebuilt rows (release order)
    unreproduced: list[Unreproduced]


def rebuild(rows: pl.DataFrame, replayed: Mapping[str, Replayed], arbitration: Mapping[str, Mapping[str, Any]],
            audit_decisions: Mapping[str, Mapping[str, Any]]) -> Rebuilt:
    """Every released row's gold label, provenance, call ids and decision ids rebuilt from the replayed calls and the
    released decisions, as the pipeline derives them: the labels stage's reading of each labeller answer, the
    arbitration queue and canonical-label rule (domain/arbitration.py) with the current arbitration decisions
    (`arbitration`: venue -> item_id -> decision; the candidates in the order those decisions imply, as the venue's
    secret order is not released: arbitration.decided_order), HighAgreement as both canonical labels
    agreeing, PaperSourced as Supported by construction (its calls must replay), HumanVerified as the audit consensus
    (domain/audit.py) of the decisions its row names (`audit_decisions`: venue -> decision_id -> decision).
    Every row that comes out different is listed with the reason."""
    unreproduced: list[Unreproduced] = []
    canonical: dict[tuple[str, str], dict] = {}
    for venue in rows["venue"].unique().sort():
        items = _canonical_items(rows.filter(pl.col("venue") == venue), replayed)
        label_rows = [r for item in items.values() for r in _labeller_rows(item, item["calls"])]
        texts = {item["claim_id"]: item["claim_text"] for item in items.values()}
        types = {item["claim_id"]: item["claim_type"] for item in items.values()}
        decided = arbitration.get(venue, {})
        queue = arb.build_queue(venue, arb.decided_order(label_rows, decided), label_rows, texts, types)
        result = arb.canonical_labels(venue, label_rows, queue.rows, queue.key, decided)
        canonical.update({(venue, row["item_id"]): row for row in result.rows})
    rebuilt_rows = []
    for row in rows.iter_rows(named=True):
        gold, why = _rebuilt_gold(row, canonical, replayed, audit_decisions.get(row["venue"], {}))
        rebuilt = {**row, **gold}
        if why is None and rebuilt != row:
            changed = [k for k in gold if gold[k] != row[k]]
            why = "; ".join(f"{k} rebuilt as {gold[k]!r}, released as {row[k]!r}" for k in changed)
        if why is not None:
            unreproduced.append(Unreproduced(row["venue"], row["slice"], row["claim_id"], why))
        rebuilt_rows.append(rebuilt)
    frame = pl.DataFrame(rebuilt_rows, schema=SLICE_SCHEMA) if rebuilt_rows else pl.DataFrame(schema=SLICE_SCHEMA)
    return Rebuilt({name: frame.filter(pl.col("slice") == name) for name in SLICES}, unreproduced)


def _call_problems(call_ids: Sequence[str], replayed: Mapping[str, Replayed]) -> str | None:
    for call_id in call_ids:
        call = replayed.get(call_id)
        if call is None:
            return f"call {call_id} is not in {CALLS}"
        if call.problem is not None:
            return f"call {call_id} could not be replayed: {call.problem}"
    return None


def _rebuilt_gold(row: Mapping[str, Any], canonical: Mapping[tuple[str, str], dict], replayed: Mapping[str, Replayed],
                  decisions: Mapping[str, Any]) -> tuple[dict, str | None]:
    """The gold columns of one row as rebuilt, and why they could not be (None when they could)."""
    source, calls = row["gold_source"], list(row["gold_call_ids"] or [])
    problem = _call_problems(calls, replayed)
    if source == PAPER_SOURCE:
        return {"gold_label": None if problem else SUPPORTED, "gold_provenance": "paper_construction"}, problem
    if source == HUMAN_SOURCE:
        return _audit_gold(row, decisions)
    if source not in (SOURCE_THREAD, SOURCE_MANUSCRIPT, BOTH_SOURCES):
        return {}, f"unknown gold_source {source!r}"
    parts = [canonical.get((row["venue"], arb.item_id_of(row["claim_id"], s))) for s in source.split("+")]
    if any(part is None for part in parts):
        return {"gold_label": None}, problem or "no labeller rows to rebuild from"
    labels = {part["label"] for part in parts}
    settled = [part for part in parts if part["provenance"] not in (arb.PENDING, arb.UNLABELLED)]
    if len(settled) < len(parts):
        unsettled = next(part for part in parts if part not in settled)
        return {"gold_label": None}, problem or (
            f"the canonical-label rule leaves {unsettled['item_id']} {unsettled['provenance']} (labels "
            f"{unsettled['label_a']!r} / {unsettled['label_b']!r}, no applicable decision)")
    if len(labels) > 1:
        return {"gold_label": None}, problem or f"the two sources no longer agree ({sorted(labels)})"
    provenance = parts[0]["provenance"] if len(parts) == 1 else ";".join(
        f"{part['source']}={part['provenance']}" for part in parts)
    return {
        "gold_label": labels.pop(), "gold_provenance": provenance,
        "gold_call_ids": [c for part in parts for c in (part["call_id_a"], part["call_id_b"]) if c is not None],
        "gold_decision_ids": [part["decision_id"] for part in parts if part["decision_id"] is not None],
    }, problem


def _audit_gold(row: Mapping[str, Any], decisions: Mapping[str, Any]) -> tuple[dict, str | None]:
    """HumanVerified: the audit consensus of the annotators' and the consensus decisions the row names."""
    named = [decisions.get(decision_id) for decision_id in row["gold_decision_ids"] or []]
    if any(decision is None for decision in named):
        return {"gold_label": None}, f"a decision it names is not in {DECISIONS}"
    labels = [d.label for d in named if d.kind == "audit"]
    settled = [d.label for d in named if d.kind == "consensus"]
    if len(labels) != 2:
        return {"gold_label": None}, f"it names {len(labels)} annotator decision(s), the audit needs two"
    agreed = audit.consensus(audit.AuditItem(arb.item_id_of(row["claim_id"], SOURCE_THREAD), row["claim_type"],
                                             labels[0], labels[1], settled[0] if settled else None, None))
    return {"gold_label": agreed.label, "gold_provenance": agreed.how}, None


def audit_decision_ids(label_1: Any, label_2: Any, consensus: Any, how: str) -> list[str]:
    """The decisions behind a HumanVerified label, in the order the rebuild reads them: the two annotators' current
    audit decisions, then the consensus decision when it settled the item."""
    named = [label_1, label_2] + ([consensus] if how == audit.CONSENSUS_DECIDED else [])
    return [decision.decision_id for decision in named if decision is not None]
