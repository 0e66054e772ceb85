"""Benchmark manuscript parsing and chunking on a folder of PDFs; prints a Markdown table.

    .venv/bin/python benchmarks/bench_parsing.py [FOLDER] [--artifacts-path PATH]

FOLDER defaults to the sample venue's PDFs; chunks use the default `ChunkingConfig` (structure and
chunk quality on real papers: `benchmarks/eval_real_manuscripts.py`). The first parse, which imports Docling and builds
its converter, is timed separately as warm-up; the per-file rows are warm timings.
Peak RSS is the process's maximum resident set size.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

from peerify_dagster.domain.chunking import chunk_document, chunk_stats  # noqa: E402
from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError  # noqa: E402

DEFAULT_FOLDER = REPO_ROOT / "peerify_dagster" / "sample_venue" / "snapshot" / "pdfs"


def _peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("folder", nargs="?", type=Path, default=DEFAULT_FOLDER)
    arguments.add_argument("--artifacts-path", default=None, help="Docling model folder: use the layout pipeline")
    options = arguments.parse_args(argv)

    pdfs = sorted(options.folder.glob("*.pdf"))
    if not pdfs:
        print(f"no PDFs in {options.folder}", file=sys.stderr)
        return 1
    parser = DocumentParser(artifacts_path=options.artifacts_path)

    started = time.perf_counter()
    for pdf in pdfs:
        # Warm up on the first file Docling actually converts; pre-flight rejections load nothing.
        try:
            parser.parse(pdf)
            break
        except ManuscriptParseError:
            continue
    warm_up = time.perf_counter() - started

    print("| file | pages | seconds | pages/s | blocks | chunks | median words | p90 words | status |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    total_pages = total_chunks = 0
    total_seconds = 0.0
    all_chunks = []
    for pdf in pdfs:
        started = time.perf_counter()
        try:
            document = parser.parse(pdf)
        except ManuscriptParseError as error:
            print(f"| {pdf.name} | | | | | | | | {error.reason} |")
            continue
        chunks = chunk_document(document.paper_id, document.blocks)
        seconds = time.perf_counter() - started
        stats = chunk_stats(chunks)
        total_pages += document.pages
        total_chunks += len(chunks)
        total_seconds += seconds
        all_chunks += chunks
        print(
            f"| {pdf.name} | {document.pages} | {seconds:.3f} | {document.pages / seconds:.1f} | "
            f"{len(document.blocks)} | {len(chunks)} | {stats['median_words']:.0f} | {stats['p90_words']:.0f} | ok |"
        )
    overall = chunk_stats(all_chunks)
    rate = total_pages / total_seconds if total_seconds else 0.0
    print(
        f"| **all** | {total_pages} | {total_seconds:.3f} | {rate:.1f} | | {total_chunks} | "
        f"{overall['median_words']:.0f} | {overall['p90_words']:.0f} | |"
    )
    print()
    parser_name = "docling-layout" if parser.artifacts_path else "docling-native"
    print(f"parser: {parser_name}; warm-up (import + first parse): "
          f"{warm_up:.2f} s; mean chunk {overall['mean_words']:.0f} words; runaway chunks {overall['n_runaway']}; "
          f"peak RSS {_peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
