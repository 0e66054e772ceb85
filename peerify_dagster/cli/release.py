"""`peerify release`: publish a versioned label release of built venues, verify one, and rebuild its labels.

- `peerify release --venue V [--venue W] --version X.Y.Z` materialises the `label_release` asset in this process
  (in the Dagster home whose runs hold the venues' gate results and lineage) and prints the release folder. It
  refuses first, one line per problem and exit 2, a venue whose slices are not the file their blocking gates passed
  or are older than its decisions or labels, naming the rebuild (`peerify build V`).
- `peerify release verify RELEASE` re-hashes every file against the manifest, re-checks row counts, schema, the slice
  rules (the blocking great-expectations gates of quality/slice_gates.py) and that every call id and decision id
  a row names is in the release. Exit 0: the release is intact; 1: a mismatch (the first one is named; a file that
  is not UTF-8 or not JSON lines is one, as `file:line: reason`); 2: usage error, or a folder that is no release
  (no manifest.json).
- `peerify rebuild-from-release RELEASE [--out DIR]` reproduces every label from the release alone: each labeller call
  is issued again, as recorded, through the LLM gateway in cache mode `replay-only` over the release's calls.parquet
  (no API key, no GPU, no model), its answer read as the labels stage reads it, and the canonical-label rule applied
  with the released decisions; the rebuilt slice files are compared with the released ones byte for byte. Exit 0
  only when every row reproduces.
- `peerify release diff OLD NEW [--format markdown|html] [--out FILE]`: what changed between two releases, per slice
  (claims added, removed, gold labels changed with the decisions and calls behind the change; domain/release_diff.py),
  each release read and checked as `release verify` reads it. Exit 0 the report is written, 1 a release that does not
  verify, 2 usage error or no release.

RELEASE (OLD, NEW) is a release folder, its `s3://` location, or a version X.Y.Z of this lake's releases
(`<lake>/releases/X.Y.Z`,
a folder or an S3 prefix) when no local folder of that name exists. A release in S3 is copied down to a temporary
folder through the store, every object of it, and checked there as a local one (the same exit codes and messages,
naming the S3 location).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import pyarrow as pa

from peerify_dagster import deployment, paths
from peerify_dagster.cli.common import EXIT_USAGE, ConfigError, guarded, refuse_upload, registered_venues, say
from peerify_dagster.cli.home import open_home, run_job
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain.release_diff import REPORTS, release_diff
from peerify_dagster.domain.release_lineage import lineage_lines
from peerify_dagster.domain.slices import SLICES, SliceConfig, label_distribution
from peerify_dagster.domain.venues import RegistryError
from peerify_dagster.resources.lake import RELEASES_DIR, Lake
from peerify_dagster.resources.store import Location, local_folder, location_of

EXIT_OK, EXIT_MISMATCH = 0, 1  # and common.EXIT_USAGE (2)
RELEASE_HELP = ("a release folder, its s3:// location, or a version X.Y.Z of this lake's releases "
                "(<lake>/releases/X.Y.Z) when no local folder of that name exists")


class ReleaseUsageError(Exception):
    """A mistake in how a release command was called; reported as its message with exit code 2."""


_guarded = guarded(ReleaseUsageError, ConfigError, RegistryError)


def register(subparsers: argparse._SubParsersAction) -> None:
    release = subparsers.add_parser(
        "release", help="write a versioned label release of built venues (data_lake/releases/X.Y.Z/); "
                        "`release verify RELEASE` checks one",
        description="Write <lake>/releases/X.Y.Z/ from the venues' benchmark slices (the Dagster home whose runs "
                    "hold their gate results), or `peerify release verify RELEASE`.")
    release.add_argument("--venue", action="append", metavar="V", help="a built venue (repeatable)")
    release.add_argument("--version", help="the release version, X.Y.Z; an existing version is never overwritten")
    release.set_defaults(func=_guarded(cmd_release))
    actions = release.add_subparsers(dest="release_command")
    verify = actions.add_parser(
        "verify", help="re-hash and re-check a release (a folder, an s3:// location or a version of this lake)",
        description="Exit codes: 0 the release is intact; 1 a mismatch (tampered, missing or extra file, manifest "
                    "edited, slice rule broken, dangling provenance link, a file that does not read), the first one "
                    "named; 2 usage error or not a release folder (no manifest.json). A release in S3 is copied "
                    "down to a temporary folder and checked there.")
    verify.add_argument("release", metavar="RELEASE", help=RELEASE_HELP)
    verify.add_argument("--manifest-sha256", metavar="HEX",
                        help="the sha256 of manifest.json as published beside the release (catches a manifest "
                             "rewritten with fresh hashes)")
    verify.set_defaults(func=cmd_verify)
    register_diff(actions)

    rebuild = subparsers.add_parser(
        "rebuild-from-release", help="reproduce every label of a release from its calls and decisions (replay-only)",
        description="Exit codes: 0 every row reproduced byte for byte; 1 a row or file did not (each listed); "
                    "2 usage error or not a release folder (no manifest.json).")
    rebuild.add_argument("release", metavar="RELEASE", help=RELEASE_HELP)
    rebuild.add_argument("--out", type=Path, help="where the rebuilt slice files go (new or empty folder; default: "
                                                  "a new temporary folder)")
    rebuild.set_defaults(func=cmd_rebuild)


# -- release -----------------------------------------------------------------------------------------------------------
def cmd_release(args: argparse.Namespace) -> int:
    if not args.venue or not args.version:
        raise ReleaseUsageError("peerify release needs --venue V (repeatable) and --version X.Y.Z, "
                                "or `peerify release verify RELEASE`")
    try:
        version = rel.check_version(args.version)
    except rel.ReleaseError as exc:
        raise ReleaseUsageError(str(exc)) from None
    registry = registered_venues()
    unknown = [venue for venue in args.venue if venue not in registry]
    if unknown:
        raise ReleaseUsageError(f"{paths.registry_path()}: venue(s) {unknown} are not registered")
    for venue in dict.fromkeys(args.venue):
        refuse_upload(registry[venue], "`peerify release`")
    target = Lake(paths.lake_root()).root / RELEASES_DIR / version  # a folder, or a prefix of an S3 lake
    if target.exists():
        raise ReleaseUsageError(f"release {version} already exists at {target}; a release is never overwritten: "
                                "choose a new version")
    from peerify_dagster.freshness import release_problems, shipped_slices
    from peerify_dagster.jobs import release_job

    instance = open_home(f"the release {version} (pid {os.getpid()})", capture_step_output=False)
    lake = Lake(paths.lake_root())
    problems = [line for venue in dict.fromkeys(args.venue)
                for line in release_problems(instance, lake, venue, shipped_slices(lake, venue))]
    if problems:
        for line in problems:
            say(f"release {version} refused: {line}")
        return EXIT_USAGE
    result = run_job(instance, release_job.name, None,
                      {"ops": {"label_release": {"config": {"version": version, "venues": list(args.venue)}}}})
    if not result.success:
        failures = [_failure_reason(e.event_specific_data) for e in result.all_events if e.is_step_failure]
        say(f"release {version} not written: {failures[0] if failures else 'the run failed; see the log above'}")
        return EXIT_MISMATCH
    print(f"release {version} written to {target}")
    for path in sorted(target.iterdir()):
        print(f"  {path.name}  {path.stat().st_size} bytes")
    print(f"manifest sha256 {rel.sha256_hex((target / rel.MANIFEST).read_bytes())}: publish it beside the release; "
          f"`peerify release verify {target} --manifest-sha256 <it>` checks it")
    return EXIT_OK


def _failure_reason(failure) -> str:  # noqa: ANN001 - a dagster StepFailureData
    """A step's failure in one line: a dg.Failure's own description, else the error message."""
    described = failure.user_failure_data.description if failure.user_failure_data else None
    error = failure.error
    while error.cause is not None:  # the user code's error, not Dagster's wrapper
        error = error.cause
    return " ".join((described or error.message).split())


# -- verify ------------------------------------------------------------------------------------------------------------
def gate_problems(contents: rel.ReleaseContents) -> list[str]:
    """The blocking slice gates (quality/slice_gates.py, great-expectations), per venue with the venue's slice
    options as the manifest records them."""
    from peerify_dagster.quality.expectations import run_expectation
    from peerify_dagster.quality.slice_gates import GATES, gate_expectations

    rows = contents.rows()
    problems = []
    for venue in contents.manifest["venues"]:
        frame = rows.filter(rows["venue"] == venue["venue"])
        config = SliceConfig.from_mapping(venue.get("slices"))
        expects = gate_expectations(frame, label_distribution(frame), config)
        for name, blocking, description in GATES:
            failing = sorted({i for e in expects[name] for i in run_expectation(e).failing_ids}) if blocking else []
            if failing:
                problems.append(f"{venue['venue']}: slice rule {name} broken ({description}); failing: "
                                f"{', '.join(failing[:5])}")
    return problems


def verify(folder: Path, manifest_sha256: str | None = None) -> list[str]:
    """Every mismatch of the release folder, the most basic first."""
    from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA

    problems = []
    if manifest_sha256 and (folder / rel.MANIFEST).is_file():
        actual = rel.sha256_hex((folder / rel.MANIFEST).read_bytes())
        if actual != manifest_sha256.lower():
            problems.append(f"{rel.MANIFEST}: sha256 {actual} is not the published {manifest_sha256}")
    contents, found = rel.read_release(folder, LEDGER_SCHEMA)
    problems += found
    if contents is None:
        return problems
    problems += rel.link_problems(contents)
    if not problems:  # the rules are checked on intact files only (and great-expectations takes seconds to load)
        problems += gate_problems(contents)
    return problems


def resolve_release(given: str) -> Location:
    """The release a command names (RELEASE_HELP): an `s3://` location or an existing local path as given, else a
    version X.Y.Z of this lake's releases; anything else as a local path (refused as no such folder)."""
    if deployment.is_object_store(given) or Path(given).exists():
        return location_of(given)
    try:
        version = rel.check_version(given)
    except rel.ReleaseError:
        return Path(given)
    return Lake(paths.lake_root()).root / RELEASES_DIR / version


def not_a_release(release: Location) -> str | None:
    """Why `release` is no release folder at all (a usage error, not a mismatch), or None."""
    if not release.is_dir():
        return f"{release}: not a release folder (no such folder)"
    if not (release / rel.MANIFEST).is_file():
        return f"{release}: not a release folder (no {rel.MANIFEST})"
    return None


def _unusable_manifest(release: Location, error: rel.ManifestError) -> int:
    """A manifest whose hash checks out but whose shape no reader can use: not a release (a usage error)."""
    say(f"{release / rel.MANIFEST}: not a release manifest: {error}")
    return EXIT_USAGE


def cmd_verify(args: argparse.Namespace) -> int:
    release = resolve_release(args.release)
    if refusal := not_a_release(release):
        say(refusal)
        return EXIT_USAGE
    try:
        with local_folder(release) as folder:
            problems = verify(folder, args.manifest_sha256)
            manifest = rel.read_manifest(folder)[0]
    except rel.ManifestError as error:
        return _unusable_manifest(release, error)
    if problems:
        say(f"MISMATCH in release {release}: {problems[0]}")
        for line in problems[1:20]:
            say(f"  also: {line}")
        if len(problems) > 20:
            say(f"  ... and {len(problems) - 20} more")
        return EXIT_MISMATCH
    rows = sum(manifest["slices"][name]["rows"] for name in SLICES)
    print(f"release {manifest['version']} verified: {len(manifest['files']) + 1} files, {rows} slice rows, "
          f"{manifest['files'][rel.CALLS]['rows']} calls, {manifest['files'][rel.DECISIONS]['rows']} decisions, "
          "every hash, row count, schema, slice rule and provenance link as released")
    for line in lineage_lines(manifest):
        print(line)
    return EXIT_OK


# -- rebuild -----------------------------------------------------------------------------------------------------------
def replay_calls(calls: pa.Table, call_ids: list[str]) -> dict[str, rel.Replayed]:
    """Each call issued again through the gateway in `replay-only` over the release's calls as its ledger."""
    import json

    import pyarrow.parquet as pq

    from peerify_dagster.resources.llm_gateway import LLMGateway, LLMGatewayError

    rows_by_id: dict[str, list[dict]] = {}
    for row in calls.to_pylist():
        rows_by_id.setdefault(row["call_id"], []).append(row)
    replayed = {}
    with tempfile.TemporaryDirectory(prefix="peerify-replay-") as ledger_root:
        (Path(ledger_root) / "llm_calls").mkdir()
        pq.write_table(calls, Path(ledger_root) / "llm_calls" / "part-release.parquet")
        with LLMGateway(ledger_root, cache_mode="replay-only") as gateway:
            for call_id in call_ids:
                rows = sorted(rows_by_id.get(call_id, []), key=lambda r: r["created_at"])
                if not rows:
                    continue
                succeeded = [row for row in rows if row["error"] is None]
                row = (succeeded or rows)[-1]
                base = {"call_id": call_id, "role": row["role"], "prompt_id": row["prompt_id"]}
                if not succeeded:  # a failed call: the labels stage saw its error and no label
                    replayed[call_id] = rel.Replayed(**base, error=row["error"])
                    continue
                try:
                    result = gateway.call_recorded(row)
                    schema = json.loads(row["request"])["schema"]
                except LLMGatewayError as exc:
                    replayed[call_id] = rel.Replayed(**base, problem=" ".join(str(exc).split()))
                    continue
                replayed[call_id] = rel.Replayed(**base, raw_response=result.raw_response, schema=schema)
    return replayed


def _decisions(records: list[dict]) -> tuple[dict, dict, list[str]]:
    """venue -> item -> current arbitration decision; venue -> id -> audit decision; unreadable lines."""
    from dataclasses import fields

    from peerify_dagster.annotation.decisions import Decision, current_decisions

    names = [f.name for f in fields(Decision)]
    decisions, problems = [], []
    for number, record in enumerate(records, start=1):
        try:
            decisions.append(Decision(**{name: record.get(name) for name in names}))
        except (TypeError, ValueError) as exc:
            problems.append(f"{rel.DECISIONS}:{number}: {exc}")
    venues = {d.venue for d in decisions}
    arbitration = {v: current_decisions(d for d in decisions if d.venue == v and d.kind == "arbitration")
                   for v in venues}
    audit = {v: {d.decision_id: d for d in decisions if d.venue == v and d.kind in ("audit", "consensus")}
             for v in venues}
    return arbitration, audit, problems


def cmd_rebuild(args: argparse.Namespace) -> int:
    release = resolve_release(args.release)
    if refusal := not_a_release(release):
        say(refusal)
        return EXIT_USAGE
    if args.out is not None and args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        say(f"--out {args.out}: exists and is not an empty folder; nothing is overwritten")
        return EXIT_USAGE
    try:
        with local_folder(release) as folder:
            return rebuild_release(folder, release, args.out)
    except rel.ManifestError as error:
        return _unusable_manifest(release, error)


def rebuild_release(folder: Path, release: Location, out: Path | None) -> int:
    """Rebuild the release in the local `folder` (`release` as the command named it) into `out`."""
    from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA

    contents, problems = rel.read_release(folder, LEDGER_SCHEMA)
    problems += rel.link_problems(contents) if contents is not None else []
    if contents is not None:
        arbitration, audit, decision_problems = _decisions(contents.decisions)
        problems += decision_problems
    if problems:
        say(f"cannot rebuild {release}: the release does not verify: {problems[0]}")
        return EXIT_MISMATCH
    rows = contents.rows()
    call_ids, _ = rel.provenance_links(rows)
    replayed = replay_calls(contents.calls, call_ids)
    rebuilt = rel.rebuild(rows, replayed, arbitration, audit)
    out = out or Path(tempfile.mkdtemp(prefix=f"peerify-rebuild-{contents.manifest['version']}-"))
    out.mkdir(parents=True, exist_ok=True)
    differing = []
    for name in SLICES:
        parquet_name, jsonl_name = rel.slice_files(name)
        for file_name, data in ((parquet_name, rel.slice_parquet(rebuilt.slices[name])),
                                (jsonl_name, rel.slice_jsonl(rebuilt.slices[name]))):
            (out / file_name).write_bytes(data)
            if data != (folder / file_name).read_bytes():
                differing.append(file_name)
    for row in rebuilt.unreproduced:
        say(f"not reproduced: {row}")
    if differing:
        say(f"rebuilt files differing from the release: {', '.join(differing)}")
    print(f"rebuilt {rows.height - len(rebuilt.unreproduced)} of {rows.height} labels from {len(replayed)} replayed "
          f"calls (replay-only) and {len(contents.decisions)} decisions into {out}; "
          f"{2 * len(SLICES) - len(differing)} of {2 * len(SLICES)} slice files byte-identical to the release")
    return EXIT_OK if not rebuilt.unreproduced and not differing else EXIT_MISMATCH


# -- diff ------------------------------------------------------------------------------------------------------------
def register_diff(actions: argparse._SubParsersAction) -> None:
    """`diff` under `peerify release` (`actions`: the release command's subparsers)."""
    diff = actions.add_parser(
        "diff", help="what changed between two releases, per slice (Markdown or HTML)",
        description="Exit codes: 0 the report is written; 1 a release does not verify (named); 2 usage error or a "
                    "folder that is no release (no manifest.json).")
    diff.add_argument("old", metavar="OLD", help="the earlier release (a folder, s3:// location or version X.Y.Z)")
    diff.add_argument("new", metavar="NEW", help="the later release (the same forms)")
    diff.add_argument("--format", choices=sorted(REPORTS), default="markdown", help="report format (markdown)")
    diff.add_argument("--out", type=Path, help="write the report to this file (default: standard output)")
    diff.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA

    releases = [resolve_release(given) for given in (args.old, args.new)]
    refusals = [refusal for release in releases if (refusal := not_a_release(release))]
    if refusals:
        for refusal in refusals:
            say(refusal)
        return EXIT_USAGE
    read = []
    for release in releases:
        try:
            with local_folder(release) as folder:
                contents, problems = rel.read_release(folder, LEDGER_SCHEMA)
        except rel.ManifestError as error:
            return _unusable_manifest(release, error)
        if problems:
            say(f"cannot diff: release {release} does not verify: {problems[0]}")
            return EXIT_MISMATCH
        read.append(contents)
    old, new = read
    report = REPORTS[args.format](release_diff(old.manifest["version"], old.slices, new.manifest["version"],
                                               new.slices, old.manifest, new.manifest))
    if args.out is None:
        print(report, end="")
    else:
        args.out.write_text(report, encoding="utf-8")
        say(f"release diff written to {args.out}")
    return EXIT_OK
