"""One reference list checked end to end, as `peerify refs check` and the web app's /references page both do it:
the input read (resources/reference_inputs.py), every entry asked of the offline metadata index (when one is given)
and then of the network services named, and the report built (domain/citations/reference_report.py). Kept here so
the command line and the page cannot drift apart; each caller only says where the index and the answer cache are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from peerify_dagster import deployment
from peerify_dagster.domain.citations.options import METADATA_INDEX
from peerify_dagster.domain.citations.reference_report import ReferenceReport, report_row
from peerify_dagster.resources.metadata_index import MetadataIndex, lake_index_path
from peerify_dagster.resources.reference_inputs import read_reference_input
from peerify_dagster.resources.scholarly import CACHE_DIR, ScholarlyClient


def sources_asked(network_services: Sequence[str], index: MetadataIndex | None) -> list[str]:
    """The sources in the order they are asked: the index first (when there is one), then each service once."""
    return [*([METADATA_INDEX] if index is not None else []), *dict.fromkeys(network_services)]


def answer_cache(lake_root: str | Path) -> Path | None:
    """Where the services' answers are cached: `<lake>/scholarly_cache`, none for an object-store lake (the
    client's cache wants a local folder here)."""
    return None if deployment.is_object_store(str(lake_root)) else Path(lake_root) / CACHE_DIR


def lake_index(lake_root: Path) -> MetadataIndex | None:
    """The metadata index a local lake holds (`peerify refs index`), or None when it has none."""
    path = lake_index_path(lake_root)
    return MetadataIndex(path) if path.is_file() else None


def check_reference_list(target: str | Path, network_services: Sequence[str], index: MetadataIndex | None, *,
                         cache_dir: Path | None = None, arxiv_sources: Path | None = None,
                         base_urls: Mapping[str, str] | None = None, mailto: str | None = None,
                         requests_per_second: float | None = None) -> ReferenceReport:
    """The report of the reference list at `target` (a file, folder, or an arXiv id found in `arxiv_sources`):
    each entry checked against `index` and then `network_services` (nothing leaves the machine when that is empty).
    Raises ReferenceInputError (or OSError) for an input that cannot be read; what was wrong inside a readable one
    is in the report's `problems`."""
    read = read_reference_input(str(target), arxiv_sources)
    rates = dict.fromkeys(network_services, requests_per_second) if requests_per_second else None
    client = ScholarlyClient(sources_asked(network_services, index), base_urls, mailto, cache_dir,
                             requests_per_second=rates, index=index)
    checks = client.check_all(read.entries)
    return ReferenceReport(read.name, [report_row(entry, check, read.bibtex.get(entry.label or ""))
                                       for entry, check in zip(read.entries, checks)], read.problems)
