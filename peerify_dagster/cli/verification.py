"""Verifying one review against its manuscript (`peerify verify`, and the web app's verify page): the upload (a PDF and
its review(s), or one forum of a built venue) is registered as an ad-hoc venue of source `upload` and built through
the code location's own graph, the `verify_upload` job (forums, manuscript, chunks, review claims, retrieval) in one
run per phase, then one `venue_predictions` run per configuration, every model call through the gateway and its
ledger; then the claims with their verdicts and evidence are read back from the lake and written as one HTML page.

With `--citations` the manuscript's own citing sentences are verified too (or alone, for a PDF given without a
review): one `verify_citations` run (citances, bibliography, reference checks, cited papers, evidence, verdicts),
read back and written as a second page, `citations.html`.

The labellers, arbitration, slices and metrics are not built: they need a benchmark, not one paper. The same input is
the same venue (a content-addressed key), so a second run finds every call in the ledger.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import signal
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from peerify_dagster import paths
from peerify_dagster.cli.build_session import BuildInterrupted, StopSignals
from peerify_dagster.cli.common import ConfigError, registered_venues, say
from peerify_dagster.domain import uploads
from peerify_dagster.domain.citation_view import CITATION_TABLES, CitationSummary, CitationTables, citation_summary
from peerify_dagster.domain.citations.options import CitationOptions
from peerify_dagster.domain.llm_calls import answer_justification
from peerify_dagster.domain.llm_stages import (
    CITANCE_TAGGING,
    CITATION_VERDICTS,
    EXTRACTION,
    PREDICTIONS,
    STAGES_BY_NAME,
    TAGGING,
)
from peerify_dagster.domain.predictions import prediction_key
from peerify_dagster.domain.uploads import (
    CITING,
    EXTRACTING,
    PARSING,
    PHASE_START,
    PREDICTING,
    REGISTERING,
    RETRIEVAL,
    WRITING,
    VerificationRequest,
)
from peerify_dagster.domain.venues import (
    SOURCE_RELEASE,
    SOURCE_UPLOAD,
    RegistryError,
    Venue,
    upload_registry_text,
)
from peerify_dagster.verification_jobs import DONE, FAILED, QUEUED, JobStore, now

# The LLM stages an upload's review half runs: its review's claims are extracted and typed, then verified.
VERIFY_STAGES = (EXTRACTION, TAGGING, PREDICTIONS)
RESULT_TEMPLATE = "verify/result_page.html"
CITATIONS_TEMPLATE = "verify/citations_page.html"
TEMPLATES_DIR = Path(__file__).parent.parent / "web" / "templates"

Progress = Callable[[str, str, float], None]  # (phase, message, percent)


@dataclass
class VerificationResult:
    venue: str
    usage: str  # the build's LLM calls: made live, answered from the ledger, spent
    seconds: float
    failure: str | None = None  # why the build stopped before the result (a failed step, a spent budget)
    summary: uploads.ResultSummary | None = None  # the review half (None: no review was given)
    html_path: Path | None = None  # the one-page result (result.json, its data, beside it)
    citations: CitationSummary | None = None  # the citation half (None: not asked for)
    citations_path: Path | None = None  # its page, citations.html (citations.json beside it)

    @property
    def succeeded(self) -> bool:
        return self.failure is None


class NoStopSignals:
    """For a caller that handles no signal itself (signal handlers belong to a main thread): nothing stops the build
    between its runs."""

    def received(self) -> int | None:
        return None


@dataclass(frozen=True)
class PreparedUpload:
    """An upload checked and laid out, not written yet: the venue entry, its snapshot files and where it came from."""

    venue: Venue
    files: dict[str, bytes]
    origin: str
    recording: Path | None = None  # the source venue's LLM recording (a forum upload), installed with it


def upload_folder(key: str) -> Path:
    """`<lake>/uploads/<key>/`: the upload's snapshot, its description and its result."""
    return Path(paths.uploads_root()) / key


VERIFIED_FILE = "verified.json"  # in the upload's folder: what its last complete verification was computed from
READ_BACK_USAGE = ("LLM calls of this build: 0 made live, 0 answered from the ledger; 0 tokens, $0.0000 spent (no "
                   "build: verified before from the same inputs, its result read back from the lake)")
# PEERIFY_ settings that say where runs execute or what is accepted, or hold a secret: never what a verification finds.
PLACEMENT_SETTINGS = frozenset({"PEERIFY_LAKE", "PEERIFY_LAKE_CACHE", "PEERIFY_EXECUTOR", "PEERIFY_REDIS_URL",
                                "PEERIFY_POSTGRES_URL", "PEERIFY_LOST_WORKER_RETRIES", "PEERIFY_WEB_TOKEN",
                                "PEERIFY_MAX_PDF_MB"})


def verification_inputs(prepared: PreparedUpload, configurations: Sequence) -> str:
    """A hash of what a verification's result follows from besides its input (the upload, which its key names): the
    project's code and prompts, the installed packages, the upload venue as registered, each configuration's
    definition, the models file, the source venue's LLM recording and every PEERIFY_ setting but the
    PLACEMENT_SETTINGS (a model given as a local folder is known by its path)."""
    from peerify_dagster.domain.code_versions import sources_fingerprint
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    def file_sha256(path: Path | None) -> str | None:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else None

    # A package installed, removed or upgraded changes its metadata folder's name (`name-version.dist-info`).
    packages = sorted(entry for folder in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
                      if os.path.isdir(folder) for entry in os.listdir(folder) if entry.endswith(".dist-info"))
    inputs = {"code": sources_fingerprint(), "packages": packages, "venue": asdict(prepared.venue),
              "configurations": {c.name: c.content_hash() for c in configurations},
              "models": file_sha256(ModelRegistry.load().path), "recording": file_sha256(prepared.recording),
              "settings": {name: value for name, value in os.environ.items()
                           if name.startswith("PEERIFY_") and name not in PLACEMENT_SETTINGS}}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Verified:
    """What a complete verification of an upload was computed from, kept beside its result (`verified.json`) with the
    size and modification time of each of the upload venue's table files. The same request again from the same
    inputs (`verification_inputs`), while those files are as that verification left them, would rebuild the same
    tables and answer every call from the ledger: its result is read back instead. Never with
    PEERIFY_LLM_CACHE_MODE=refresh (every call made again), nor on an S3 lake."""

    inputs: str
    configurations: tuple[str, ...]
    reviewed: bool
    citations: bool

    @classmethod
    def of(cls, request: VerificationRequest, prepared: PreparedUpload, configurations: Sequence) -> Verified:
        return cls(verification_inputs(prepared, configurations), tuple(sorted(c.name for c in configurations)),
                   request.reviews_given, request.citations)

    @staticmethod
    def path(key: str) -> Path:
        return upload_folder(key) / VERIFIED_FILE

    @staticmethod
    def forget(key: str) -> None:
        Verified.path(key).unlink(missing_ok=True)

    def as_record(self) -> dict:
        return {**asdict(self), "configurations": list(self.configurations)}  # as JSON gives it back

    def _tables(self, lake, key: str) -> dict[str, list[int]]:  # noqa: ANN001 - a Lake
        """[size, mtime_ns] of the venue's table files (predictions: of its configurations), by path in the lake."""
        from peerify_dagster.resources.lake import partition_slug

        files = [*lake.root.glob(f"*/{partition_slug(key)}.parquet"),
                 *(lake.table_path("predictions", prediction_key(key, name)) for name in self.configurations)]
        return {path.relative_to(lake.root).as_posix(): [stat.st_size, stat.st_mtime_ns]
                for path in files if (stat := _stat(path)) is not None}

    def holds(self, lake, key: str) -> bool:  # noqa: ANN001 - a Lake
        """Whether the upload's record says it was verified from these inputs and its tables are as it left them."""
        if lake.store.is_object_store or os.environ.get("PEERIFY_LLM_CACHE_MODE", "").strip() == "refresh":
            return False
        try:
            record = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("verified") == self.as_record() and \
            bool(record.get("tables")) and record["tables"] == self._tables(lake, key)

    def record(self, lake, key: str) -> None:  # noqa: ANN001 - a Lake
        """Keep the record of a verification that completed (its tables written, its result read back)."""
        from peerify_dagster.resources.files import write_json_atomic

        if not lake.store.is_object_store:
            write_json_atomic(self.path(key), {"verified": self.as_record(), "tables": self._tables(lake, key),
                                               "verified_at": datetime.now(timezone.utc).isoformat()})


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def prepare(request: VerificationRequest) -> PreparedUpload:
    """The upload venue of a request, checked (UploadError naming the file or forum and the reason); nothing
    written. An upload's notes are dated now: its snapshot is written once, when first registered."""
    if request.upload is not None:
        if not request.upload.reviews and not request.citations:
            raise uploads.UploadError("no review given: verify needs at least one (or --citations)")
        key = request.upload.key(request.library)
        files = uploads.upload_snapshot(key, request.upload, int(time.time() * 1000),
                                        known_paper_id(request.upload.pdf))
        return PreparedUpload(_upload_venue(key, f"{uploads.UPLOAD_VENUE_ROOT}/{key}",
                                            citations=uploads.citation_options(None, request.library)),
                              files, request.describe())
    if not request.venue or not request.forum:
        raise uploads.UploadError("give a PDF and a review, or a venue and one of its forums")
    return _forum_upload(request.venue, uploads.check_forum_id(request.forum), request.describe(), request.library)


def known_paper_id(pdf: bytes) -> str | None:
    """The paper id the lake's manuscripts know these PDF bytes by (manuscript_pdfs of any venue, first by file name),
    or None: an uploaded copy of a built venue's paper keeps its id."""
    import pyarrow.parquet as pq

    sha256 = hashlib.sha256(pdf).hexdigest()
    for path in sorted((Path(paths.lake_root()) / "manuscript_pdfs").glob("*.parquet")):
        try:
            table = pq.read_table(path, columns=["paper_id", "sha256"], filters=[("sha256", "=", sha256)])
        except (OSError, ValueError):  # an unreadable partition is the catalog's to report; it knows no id here
            continue
        for paper_id in table["paper_id"].to_pylist():
            if paper_id and uploads.NOTE_ID.match(paper_id):
                return paper_id
    return None


def _upload_venue(key: str, openreview_id: str, source: Venue | None = None, citations: dict | None = None) -> Venue:
    # A forum upload keeps the options that decide what its verifier is shown (chunks, thread evidence), so its
    # chunk ids and prompts are the venue's own; `citations`: its citation options (uploads.citation_options).
    return Venue(key=key, openreview_id=openreview_id, source=SOURCE_UPLOAD, seed=0, snapshot=f"{key}/snapshot",
                 chunking=source.chunking if source else None, labelling=source.labelling if source else None,
                 api_version=source.api_version if source else None, citations=citations)


def _forum_upload(venue_key: str, forum_id: str, origin: str, library: str | None = None) -> PreparedUpload:
    from peerify_dagster.resources.dagster_resources import VenueRegistryResource
    from peerify_dagster.resources.lake import Lake
    from peerify_dagster.resources.openreview import MalformedSnapshotFile, SnapshotReader

    registry = registered_venues()
    if venue_key not in registry:
        raise uploads.UploadError(f"venue {venue_key!r}: not registered (known: {', '.join(sorted(registry))})")
    venue = registry[venue_key]
    if venue.source == SOURCE_RELEASE:
        raise uploads.UploadError(f"venue {venue_key!r}: imported from a release, it has no forums or PDFs to verify")
    registry_file = Path(paths.registry_path())
    reader = SnapshotReader(VenueRegistryResource(path=str(registry_file)).snapshot_dir(venue, Lake(paths.lake_root())))
    if not reader.has_forum(forum_id):
        raise uploads.UploadError(f"forum {forum_id!r}: unknown in venue {venue_key!r} (no forums/{forum_id}.json in "
                                  f"its snapshot {reader.folder}; build or crawl the venue first)")
    forum_file = reader.forum_path(forum_id).read_bytes()
    try:
        forum = json.loads(forum_file)
        submissions = reader.submissions()
    except (ValueError, OSError, MalformedSnapshotFile) as error:
        raise uploads.UploadError(f"forum {forum_id!r} of venue {venue_key!r}: unreadable snapshot ({error})") from None
    submission = next((note for note in submissions if isinstance(note, dict) and note.get("id") == forum_id), None)
    pdf, pdf_meta = reader.pdf_bytes(forum_id), reader.pdf_meta(forum_id)
    if submission is None or not isinstance(forum, dict) or not isinstance(forum.get("notes"), list):
        raise uploads.UploadError(f"forum {forum_id!r} of venue {venue_key!r}: not a submission of the venue")
    if pdf is None or pdf_meta is None:
        raise uploads.UploadError(f"forum {forum_id!r} of venue {venue_key!r}: no PDF in its snapshot to verify "
                                  "against")
    uploads.check_pdf(f"forum {forum_id!r}'s PDF", pdf, len(pdf))
    key = uploads.forum_key(venue_key, forum_id, forum_file, pdf, library)
    venue_json = {**reader.venue(), "venue_id": venue.openreview_id}
    files = uploads.forum_snapshot(venue_json, submission, forum, pdf, pdf_meta)
    recording = registry_file.parent / venue.llm_recording if venue.llm_recording else None
    citations = uploads.citation_options(venue.citations, library, registry_file.parent)
    return PreparedUpload(_upload_venue(key, venue.openreview_id, venue, citations), files, origin, recording)


def register(prepared: PreparedUpload) -> Venue:
    """Install the source venue's LLM recording, if any; write the upload's snapshot folder (once: the key is its
    content) and register its venue in the lake's upload registry, under the registry's lock."""
    from peerify_dagster.resources import runs
    from peerify_dagster.resources.files import atomic_folder, atomic_path, write_json_atomic
    from peerify_dagster.resources.llm_recording import RecordingError, install_recording

    if prepared.recording is not None:  # first: a recording that cannot be installed leaves nothing registered
        try:
            install_recording(Path(paths.lake_root()), prepared.recording)
        except RecordingError as error:
            raise ConfigError(str(error)) from None
    folder = upload_folder(prepared.venue.key)
    registry = Path(paths.upload_registry_path())
    with runs.exclusive_lock(registry.with_name(".venues.lock"), f"peerify verify (pid {os.getpid()})",
                             on_wait=lambda _: None):
        snapshot = folder / "snapshot"
        if not snapshot.exists():
            with atomic_folder(snapshot) as temporary:
                _write_files(temporary, prepared.files)
        if not (folder / "upload.json").exists():
            write_json_atomic(folder / "upload.json", {"venue": prepared.venue.key, "origin": prepared.origin,
                                                       "registered_at": datetime.now(timezone.utc).isoformat()})
        try:
            text = upload_registry_text(registry, prepared.venue)
        except RegistryError as error:
            raise ConfigError(str(error)) from None
        with atomic_path(registry) as temporary:
            temporary.write_text(text)
    return prepared.venue


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)


def print_estimate(request: VerificationRequest) -> int:
    """`peerify verify --estimate`: the LLM calls verifying the request would make (claim extraction, fact tagging,
    each configuration's verifiers; the citation half's stages with --citations), counted as `peerify build
    --estimate` counts a venue's, from the upload's snapshot laid out in a temporary folder (or from the lake, when
    the same upload was built before); nothing is registered and no model is called."""
    from peerify_dagster.cli import build

    prepared = prepare(request)
    reviewed = request.reviews_given
    configurations = build.check_configurations(prepared.venue.key, list(request.configurations) or None) \
        if reviewed else []
    stages = verify_stages(request, prepared.venue)
    with tempfile.TemporaryDirectory(prefix="peerify-verify-estimate-") as folder:
        _write_files(Path(folder), prepared.files)
        return build.print_estimate(prepared.venue, Path(folder), configurations, stages, prepared.recording)


def phase_selections() -> list[tuple[str, list]]:
    """The `verify_upload` job's assets split into its phases (each with the siblings its multi-assets need), in
    order: forums and manuscript, then claims, then retrieval."""
    import dagster as dg

    from peerify_dagster.definitions import defs
    from peerify_dagster.jobs import VERIFY_INPUTS

    graph = defs.resolve_asset_graph()
    remaining = VERIFY_INPUTS.resolve(graph)
    phases = []
    for phase, last in ((PARSING, ("chunk_embeddings", "reviews", "review_threads")),
                        (EXTRACTING, ("claim_types", "claim_threads", "paper_claims")), (RETRIEVAL, None)):
        chosen = remaining if last is None else \
            dg.AssetSelection.assets(*last).upstream().required_multi_asset_neighbors().resolve(graph) & remaining
        phases.append((phase, sorted(chosen)))
        remaining = remaining - chosen
    return phases


def _failure(result) -> str:  # noqa: ANN001 - an ExecuteInProcessResult
    """The first failed step of a run and its error, in one line."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            return f"step {event.step_key} failed: {error.message.strip() if error else 'no error recorded'}"
    return f"run {result.run_id} did not succeed"


def run_verification(request: VerificationRequest, progress: Progress | None = None, stop=None,  # noqa: ANN001
                     holder: str | None = None) -> VerificationResult:
    """Register the request's upload venue, build it up to the predictions of its configurations (when it has a
    review) and through the citation half (when asked), and write the results (`<lake>/uploads/<key>/result.html`,
    `result.json`; `citations.html`, `citations.json`). An input verified before from the same inputs (`Verified`)
    is not built again: its result is read back from the lake. `progress(phase, message, percent)` hears each phase;
    `stop` (cli.build_session.StopSignals, in a main thread) lets a signal end the build after the run in progress.
    Raises UploadError or ConfigError, with nothing registered, for a request it refuses."""
    from peerify_dagster.cli.build import check_configurations, check_models

    report = progress or (lambda phase, message, percent: None)
    started = time.monotonic()
    prepared = prepare(request)
    key = prepared.venue.key
    reviewed = request.reviews_given
    configurations = check_configurations(key, list(request.configurations) or None) if reviewed else []
    check_models(key, configurations, verify_roles(request, prepared.venue))
    report(REGISTERING, f"registering {request.describe()} as venue {key}", PHASE_START[REGISTERING])
    register(prepared)

    from peerify_dagster.resources import runs
    from peerify_dagster.resources.lake import Lake

    lake = Lake(paths.lake_root())
    me = holder or f"peerify verify of {key} (pid {os.getpid()})"
    verified = Verified.of(request, prepared, configurations)
    # One upload verified twice at once writes the same partitions: the second waits, then finds all in the ledger.
    # The result is read back and the record written under the lock too, so a record never outlives its tables.
    with runs.exclusive_lock(runs.build_lock_path(lake.root, key), me,
                             on_wait=lambda other: report(REGISTERING, f"waiting for {other} to finish", 2.0)):
        if verified.holds(lake, key):
            report(WRITING, f"{key} was verified before from the same input, code, models and settings: reading its "
                            "result back", PHASE_START[WRITING])
            outcome = VerificationResult(key, READ_BACK_USAGE, 0.0)
        else:
            Verified.forget(key)  # the runs below rewrite the tables an earlier record vouched for
            outcome = _build(request, key, configurations, lake, me, stop, report)
            if not outcome.succeeded:
                outcome.seconds = time.monotonic() - started
                return outcome
            report(WRITING, "reading the verdicts back and writing the result page", PHASE_START[WRITING])
        done = []
        if reviewed:
            outcome.summary = read_summary(lake, key, prepared.origin, [c.name for c in configurations])
            outcome.html_path = write_result(outcome.summary, upload_folder(key))
            done.append(f"{len(outcome.summary.claims)} claims verified")
        if request.citations:
            outcome.citations = read_citations(lake, key, prepared.origin)
            outcome.citations_path = write_citations(outcome.citations, upload_folder(key))
            done.append(f"{len(outcome.citations.citances)} citances checked")
        verified.record(lake, key)
    outcome.seconds = time.monotonic() - started
    report(WRITING, f"done: {', '.join(done)}", 100.0)
    return outcome


def _build(request: VerificationRequest, key: str, configurations: list, lake, me: str,  # noqa: ANN001 - a Lake
           stop, report: Progress) -> VerificationResult:  # noqa: ANN001 - a StopSignals or None
    """The upload venue's runs: the `verify_upload` job's phases, one predictions run per configuration, the
    citation half; the result says what they spent and, when one failed or the budget ran out, why they stopped."""
    from dagster import AssetKey

    from peerify_dagster.cli.build_session import BudgetSpent, BuildSession
    from peerify_dagster.cli.home import open_home
    from peerify_dagster.jobs import VERIFY_RUN_CONFIG, predictions_job, verify_citations_job, verify_upload_job
    from peerify_dagster.partitions import add_venue_partitions

    reviewed = request.reviews_given
    instance = open_home(me, capture_step_output=False)
    session = BuildSession(instance, lake.root, stop or NoStopSignals(), request.max_cost_usd, request.max_tokens)
    add_venue_partitions(instance, key, [c.name for c in configurations])
    failure = None
    try:
        for phase, selection in phase_selections() if reviewed else []:
            report(phase, f"{phase}: {len(selection)} assets of {key}", PHASE_START[phase])
            # A run's config replaces the job's default, and names only the ops the run selects.
            config = VERIFY_RUN_CONFIG if AssetKey("paper_claims") in selection else None
            if not (result := session.run(verify_upload_job.name, key, config, selection)).success:
                failure = _failure(result)
                break
        after = PHASE_START[CITING if request.citations else WRITING]
        span = (after - PHASE_START[PREDICTING]) / max(1, len(configurations))
        for index, configuration in enumerate(configurations if failure is None else []):
            report(f"{PREDICTING} {configuration.name}", f"verifying the claims under {configuration.name}",
                   PHASE_START[PREDICTING] + index * span)
            if not (result := session.run(predictions_job.name, prediction_key(key, configuration.name))).success:
                failure = _failure(result)
                break
        if request.citations and failure is None:
            selection = citation_selection(reviewed)
            report(CITING, f"{CITING}: {len(selection)} assets of {key}",
                   PHASE_START[CITING] if reviewed else PHASE_START[PARSING])
            if not (result := session.run(verify_citations_job.name, key, None, selection)).success:
                failure = _failure(result)
    except BudgetSpent as spent:
        failure = str(spent)
    for line in lake.refresh_catalog().problems():
        say(line)
    return VerificationResult(key, session.usage_line(), 0.0, failure)


def verify_stages(request: VerificationRequest, venue: Venue) -> tuple[str, ...]:
    """The LLM stages the request's build runs: the review half's, the citation half's (its citance tagger only
    where the venue's `citations:` options turn it on), or both."""
    citing = (CITANCE_TAGGING,) * CitationOptions.from_mapping(venue.citations).enrichment + (CITATION_VERDICTS,)
    return (VERIFY_STAGES if request.reviews_given else ()) + (citing if request.citations else ())


def verify_roles(request: VerificationRequest, venue: Venue) -> tuple[str, ...]:
    """The LLM roles of `verify_stages`."""
    return tuple(role for stage in verify_stages(request, venue) for role in STAGES_BY_NAME[stage].roles)


def citation_selection(after_review_half: bool) -> list:
    """The `verify_citations` job's assets for one run: all of them, or, after the review half built the forums
    and the manuscript in this verification, only those it did not build."""
    from peerify_dagster.definitions import defs
    from peerify_dagster.jobs import VERIFY_CITATIONS, VERIFY_INPUTS

    graph = defs.resolve_asset_graph()
    chosen = VERIFY_CITATIONS.resolve(graph)
    return sorted(chosen - VERIFY_INPUTS.resolve(graph) if after_review_half else chosen)


def read_summary(lake, venue: str, origin: str, configurations: Sequence[str]) -> uploads.ResultSummary:  # noqa: ANN001
    """The upload venue's claims with their verdicts and evidence, read from its tables and, for each verifier's
    reason, from the ledger."""
    from peerify_dagster.resources.llm_gateway import CallLedger

    def table(name: str, partition: str = venue) -> list[dict]:
        return lake.read_table(name, partition).to_dicts() if lake.table_path(name, partition).exists() else []

    predictions = [row for name in configurations for row in table("predictions", prediction_key(venue, name))]
    ledger = CallLedger(lake.root)
    reasons = {row["call_id"]: answer_justification((ledger.lookup(row["call_id"]) or {}).get("parsed"))
               for row in predictions if row["call_id"]}
    claims = uploads.claim_results(table("review_claims"), table("claim_types"), predictions, table("chunks"),
                                   table("retrieval_runs"), reasons, configurations)
    submission = next(iter(table("submissions")), {})
    manuscript = next(iter(table("manuscript_pdfs")), {})
    unused = [uploads.UnusedSource(row["review_id"], row["source"], row["rule"], row["detail"])
              for row in table("claims_dropped") if row["level"] == "source"]
    problems = [row["message"] for row in table("parse_errors")] + \
               [row["message"] for row in table("manuscript_pdfs") if row["status"] != "ok"]
    return uploads.ResultSummary(venue=venue, title=submission.get("title") or venue, origin=origin,
                                 pages=manuscript.get("pages"), configurations=tuple(configurations),
                                 claims=tuple(claims), unused=tuple(unused), problems=tuple(problems))


def _render(template: str, **context) -> str:
    """A result page (self-contained: styles inline, no script, nothing fetched)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    environment = Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape(["html"]))
    return environment.get_template(template).render(**context)


def render_result(summary: uploads.ResultSummary) -> str:
    """The one-page HTML result of the review half."""
    return _render(RESULT_TEMPLATE, summary=summary, counts=summary.verdict_counts())


def _write_page(folder: Path, name: str, data: dict, page: str) -> Path:
    """`<name>.html` and its data, `<name>.json`, in the upload's folder, each written whole or not at all; the
    page's path."""
    from peerify_dagster.resources.files import write_atomic, write_json_atomic

    write_json_atomic(folder / f"{name}.json", data)
    write_atomic(folder / f"{name}.html", page.encode())
    return folder / f"{name}.html"


def write_result(summary: uploads.ResultSummary, folder: Path) -> Path:
    """`result.html` and `result.json`; the page's path."""
    return _write_page(folder, "result", summary.as_dict(), render_result(summary))


def read_citations(lake, venue: str, origin: str) -> CitationSummary:  # noqa: ANN001 - a Lake
    """The upload venue's citances with their entries, checks, cited papers, evidence and verdicts, read from its
    tables."""
    def table(name: str):  # noqa: ANN202 - a polars frame or None
        return lake.read_table(name, venue) if lake.table_path(name, venue).exists() else None

    return citation_summary(CitationTables(**{name: table(name) for name in CITATION_TABLES}), venue, origin)


def write_citations(summary: CitationSummary, folder: Path) -> Path:
    """`citations.html` and `citations.json`; the page's path."""
    return _write_page(folder, "citations", summary.as_dict(), _render(CITATIONS_TEMPLATE, summary=summary))


# -- the web app's verification jobs: the child process its worker starts ------------------------------
def _die_with(parent_pid: int) -> None:
    """Have the kernel send this process SIGTERM when its parent (the server) dies (Linux PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def run_job(job_id: str, parent_pid: int | None = None) -> int:
    """The child process: run one job of the lake (PEERIFY_LAKE, set by the worker), reporting into its file."""
    store = JobStore(paths.lake_root())
    job = store.get(job_id)
    if job is None:
        return 2
    with StopSignals() as stop:
        if parent_pid is not None:
            _die_with(parent_pid)
        try:
            outcome = run_verification(store.request(job), lambda phase, message, percent: store.progress(
                job_id, phase, message, percent), stop, holder=f"web verification job {job_id} (pid {os.getpid()})")
        except BuildInterrupted as interrupted:
            store.update(job_id, status=QUEUED, worker=None,
                         message=f"re-queued: {interrupted.describe()}; it runs again when the server is back")
            return interrupted.exit_code
        except (uploads.UploadError, ConfigError) as refused:
            store.update(job_id, status=FAILED, finished_at=now(), worker=None, error=str(refused))
            return 2
    if not outcome.succeeded:
        store.update(job_id, status=FAILED, finished_at=now(), worker=None, venue=outcome.venue, usage=outcome.usage,
                     error=outcome.failure)
        return 1
    store.update(job_id, status=DONE, finished_at=now(), worker=None, venue=outcome.venue, usage=outcome.usage,
                 claims=len(outcome.summary.claims), seconds=round(outcome.seconds, 1), percent=100.0)
    return 0


if __name__ == "__main__":
    exit_code = run_job(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
    # The process ends: the OS frees its objects. Frozen, they are not walked again by the collections of the
    # interpreter's shutdown (seconds after a build, with Dagster, Docling and torch loaded).
    gc.freeze()
    sys.exit(exit_code)
