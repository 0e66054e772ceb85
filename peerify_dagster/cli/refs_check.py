"""`peerify refs check`: one reference list (a .bib, .bbl, PDF, LaTeX folder or archive, or an arXiv id's local
source archive) checked against the offline metadata index and the network services the user names: one row per
entry (key, status, reasons, sources asked) as JSON, CSV, HTML or corrected BibTeX, and an exit code CI can use
(`--fail-on`). Registered by cli/refs.py on the `refs` group."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from peerify_dagster.cli.common import ConfigError, say

EXIT_FAILED_REFERENCES = 1


def register_check(refs_sub: argparse._SubParsersAction) -> None:
    from peerify_dagster.domain.citations.options import NETWORK_METADATA_SERVICES
    from peerify_dagster.domain.citations.reference_report import DEFAULT_FAIL_ON, REPORT_FORMATS

    check = refs_sub.add_parser(
        "check", help="check one reference list: a .bib, .bbl, PDF, LaTeX folder or archive, or an arXiv id",
        description="Check every entry of a reference list against the offline metadata index (when there is one) "
                    "and the network services named with --source (none by default: nothing leaves the machine). "
                    "Statuses: validated, suspicious (a record contradicts the entry), not_found (every source "
                    "answered, none knows the work: possibly fabricated) and unvalidatable (nothing could be asked, "
                    "or a source failed). Exit code 1 when an entry has a --fail-on status, 2 for an input that "
                    "cannot be read.")
    check.add_argument("target", metavar="FILE|DIR|ARXIV_ID",
                       help="a .bib, .bbl, .tex or .pdf file, a LaTeX source folder or archive (.tar.gz, .tgz, "
                            ".tar, .gz), or an arXiv id whose source archive is in --arxiv-sources")
    check.add_argument("--index", type=Path, metavar="PATH",
                       help="the metadata index (default <lake>/metadata_index/index.duckdb when it exists)")
    check.add_argument("--no-index", action="store_true", help="do not consult the metadata index")
    check.add_argument("--source", action="append", default=[], choices=NETWORK_METADATA_SERVICES,
                       help="a network service to ask as well (repeatable; asked after the index, for the entries "
                            "it does not validate)")
    check.add_argument("--mailto", help="your address, for Crossref's and OpenAlex's polite pool")
    check.add_argument("--base-url", action="append", default=[], metavar="SERVICE=URL",
                       help="another API root for a service (a mirror)")
    check.add_argument("--requests-per-second", type=float, metavar="N",
                       help="the most requests a second to each service (default: each service's published limit)")
    check.add_argument("--format", choices=REPORT_FORMATS, default="json", help="what to write (default json)")
    check.add_argument("--output", type=Path, metavar="FILE", help="where to write it (default: standard output)")
    check.add_argument("--fail-on", default=",".join(DEFAULT_FAIL_ON), metavar="STATUSES",
                       help="exit 1 when an entry has one of these statuses (default not_found,suspicious; '' "
                            "never fails)")
    check.add_argument("--arxiv-sources", type=Path, metavar="FOLDER",
                       help="where arXiv source archives lie, named by id (for an arXiv id target)")
    check.set_defaults(func=cmd_refs_check)


def _base_urls(pairs: list[str]) -> dict[str, str]:
    urls = {}
    for pair in pairs:
        service, _, url = pair.partition("=")
        if not url:
            raise ConfigError(f"--base-url {pair!r}: expected SERVICE=URL")
        urls[service.strip()] = url.strip()
    return urls


def _index(args: argparse.Namespace):  # noqa: ANN202 - a MetadataIndex or None, imported late
    from peerify_dagster.resources.metadata_index import MetadataIndex, MetadataIndexError, default_index_path

    if args.no_index:
        return None
    if args.index is not None:
        if not args.index.is_file():
            raise ConfigError(f"--index {args.index}: no such index (build one with `peerify refs index`)")
        return MetadataIndex(args.index)
    try:
        path = default_index_path()
    except MetadataIndexError:
        return None
    return MetadataIndex(path) if path.is_file() else None


def cmd_refs_check(args: argparse.Namespace) -> int:
    from peerify_dagster import paths
    from peerify_dagster.domain.citations.reference_report import WRITERS, FailOnError, parse_fail_on
    from peerify_dagster.resources.reference_checking import answer_cache, check_reference_list, sources_asked
    from peerify_dagster.resources.reference_inputs import ReferenceInputError

    try:
        fail_on = parse_fail_on(args.fail_on)
    except FailOnError as error:
        raise ConfigError(str(error)) from None
    index = _index(args)
    sources = sources_asked(args.source, index)
    if not sources:
        say("no source to ask: no metadata index (`peerify refs index`) and no --source; every entry is "
            "unvalidatable")
    try:
        report = check_reference_list(args.target, args.source, index, cache_dir=answer_cache(paths.lake_root()),
                                      arxiv_sources=args.arxiv_sources, base_urls=_base_urls(args.base_url),
                                      mailto=args.mailto, requests_per_second=args.requests_per_second)
    except (ReferenceInputError, OSError) as error:
        raise ConfigError(str(error)) from None
    for problem in report.problems:
        say(f"warning: {problem}")
    text = WRITERS[args.format](report)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    counts = ", ".join(f"{count} {status}" for status, count in report.counts().items())
    say(f"{report.source}: {len(report.rows)} entries checked against {', '.join(sources) or 'no source'}: {counts}"
        + (f"; written to {args.output}" if args.output else ""))
    failing = report.failing(fail_on)
    for row in failing[:10]:
        say(f"  {row.key}: {row.check.status}: {row.check.reasons[0] if row.check.reasons else ''}")
    return EXIT_FAILED_REFERENCES if failing else 0
