"""Shared by the citation half's asset tests: a snapshot venue of fpdf2 manuscripts with its `citations:` options, as
the crawler lands one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.partitions import add_venue_partitions
from peerify_dagster.resources.dagster_resources import VenueRegistryResource
from tests.notes_factory import VENUE, note
from tests.support import write_registry


def write_citation_venue(folder: Path, key: str, papers: Mapping[str, bytes], citations: Mapping[str, Any],
                         library: Mapping[str, bytes] | None = None) -> Path:
    """The venue `key` as the crawler lands a snapshot under `folder` (one submission note per forum of `papers`,
    forum id -> its PDF, which the note names by its SHA-1 as OpenReview does), its library folder `folder/library`
    of `library` (file name -> bytes) when given, and a venues.yaml naming the snapshot and the citation options;
    returns the registry file."""
    snapshot = folder / "snapshot"
    (snapshot / "forums").mkdir(parents=True)
    (snapshot / "pdfs").mkdir()
    submissions = []
    for number, (forum, pdf) in enumerate(papers.items(), start=1):
        submission = note(forum, forum, "Submission", "Authors", None, 100 * number, number, title=f"Paper {forum}",
                          abstract="An abstract.", pdf=f"/pdf/{hashlib.sha1(pdf).hexdigest()}.pdf", venueid=VENUE)
        submissions.append(submission)
        (snapshot / "forums" / f"{forum}.json").write_text(
            json.dumps({"forum_id": forum, "fetched_at": 0, "notes": [submission]}))
        (snapshot / "pdfs" / f"{forum}.pdf").write_bytes(pdf)
        (snapshot / "pdfs" / f"{forum}.json").write_text(json.dumps(
            {"forum_id": forum, "version": "latest", "edit_id": None, "source_url": f"/pdf?id={forum}",
             "fetched_at": 0}))
    (snapshot / "submissions.json").write_text(json.dumps({"fetched_at": 0, "notes": submissions}))
    (snapshot / "venue.json").write_text(json.dumps({"venue_id": VENUE, "api_version": 2,
                                                     "submission_invitation": f"{VENUE}/-/Submission"}))
    if library is not None:
        (folder / "library").mkdir()
        for name, data in library.items():
            (folder / "library" / name).write_bytes(data)
    return write_registry(folder, key, openreview_id=VENUE, source="snapshot", snapshot=str(snapshot), seed=7,
                          citations=dict(citations))


def run_citation_job(key: str, registry: Path, lake_root: Path) -> tuple[dg.ExecuteInProcessResult, dg.DagsterInstance]:
    """The `verify_citations` job of venue `key` (registered in `registry`) into `lake_root`, on a fresh instance."""
    instance = dg.DagsterInstance.ephemeral()
    add_venue_partitions(instance, key, [])
    resources = build_resources(str(lake_root), venue_registry=VenueRegistryResource(path=str(registry)))
    result = defs.resolve_job_def("verify_citations").execute_in_process(
        partition_key=key, instance=instance, resources=resources, raise_on_error=False)
    return result, instance
