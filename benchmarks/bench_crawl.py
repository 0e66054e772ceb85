"""Crawl throughput (notes/s, forums/s, PDFs/s) of the real openreview-py client against the loopback API server.

Builds a synthetic venue of N forums by cloning the sample venue's forums under new ids, serves it on
127.0.0.1, and crawls it with the project's crawler into a temporary snapshot; then re-runs to measure
the resumed (nothing to fetch) pass. Prints a Markdown table.

    .venv/bin/python benchmarks/bench_crawl.py --forums 200
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from peerify_dagster.resources.openreview import HttpPolicy, OpenReviewCrawler, make_client  # noqa: E402
from peerify_dagster.testing.openreview_server import FakeOpenReviewServer  # noqa: E402
from synthetic_venue import synthetic_venue  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--forums", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        served, landed = Path(tmp) / "served", Path(tmp) / "landed"
        n_notes = synthetic_venue(served, args.forums)
        venue_id = json.loads((served / "venue.json").read_text())["venue_id"]
        with FakeOpenReviewServer(served) as server:
            crawler = OpenReviewCrawler(make_client(server.url, HttpPolicy(timeout_s=10)), venue_id, landed,
                                        log=lambda _: None)
            started = time.perf_counter()
            ids = [n["id"] for n in crawler.land_submissions()]
            listed = time.perf_counter()
            outcomes = [crawler.land_forum(f) for f in ids]
            forums_done = time.perf_counter()
            pdfs = [crawler.land_pdf(f) for f in ids]
            pdfs_done = time.perf_counter()
            resumed = [crawler.land_forum(f) for f in ids]
            resumed_done = time.perf_counter()
    assert all(o.status == "fetched" for o in outcomes) and all(o.status == "stored" for o in resumed)
    n_pdfs = sum(p.status == "fetched" for p in pdfs)
    forum_s = forums_done - listed
    print("| forums | notes | list submissions (s) | forums/s | notes/s | PDFs/s | resumed pass (forums/s) | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {len(ids)} | {n_notes} | {listed - started:.2f} | {len(ids) / forum_s:.1f} | {n_notes / forum_s:.0f} "
        f"| {n_pdfs / (pdfs_done - forums_done):.1f} | {len(ids) / (resumed_done - pdfs_done):.0f} "
        f"| {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} |"
    )


if __name__ == "__main__":
    main()
