"""Crawl throughput (notes/s, forums/s, PDFs/s) and memory of the real openreview-py client against the loopback
API server.

Builds a synthetic venue of N forums by cloning the sample venue's forums under new ids and serves it on 127.0.0.1
from this process. Two child processes per size then do the work, so each peak RSS is theirs alone (not the
server's copy of the venue, nor a larger size's peak): one lists the venue's submissions (`land_submissions`, which
holds the submission list, as `paper_sample` needs it), the other crawls every forum and every PDF into a temporary
snapshot and re-runs the crawl to measure the resumed (nothing to fetch) pass; the crawl must not grow with the
venue. Prints a Markdown table.

    .venv/bin/python benchmarks/bench_crawl.py --forums 200
    .venv/bin/python benchmarks/bench_crawl.py --forums 500 --forums 20000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from peerify_dagster.resources.openreview import HttpPolicy, OpenReviewCrawler, make_client  # noqa: E402
from tests.fakes.openreview_server import FakeOpenReviewServer  # noqa: E402
from tests.fakes.synthetic_venue import synthetic_venue  # noqa: E402


def peak_rss_mib() -> float:
    """This process's peak RSS. Not getrusage's ru_maxrss: Linux carries that across exec, so a child would report
    its parent's peak at the fork; /proc's VmHWM belongs to the process's own memory since its exec."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def crawler(url: str, venue_id: str, landed: Path) -> OpenReviewCrawler:
    return OpenReviewCrawler(make_client(url, HttpPolicy(timeout_s=10)), venue_id, landed, log=lambda _: None)


def list_submissions(url: str, venue_id: str, landed: Path) -> dict:
    """A child: list the venue's submissions; seconds and peak RSS."""
    started = time.perf_counter()
    listed = len(crawler(url, venue_id, landed).land_submissions())
    return {"listed": listed, "list_s": time.perf_counter() - started, "list_peak_rss_mib": peak_rss_mib()}


def crawl(url: str, venue_id: str, landed: Path, ids: list[str]) -> dict:
    """A child: crawl every forum, every PDF, then the resumed pass; seconds, counts and peak RSS."""
    venue = crawler(url, venue_id, landed)
    started = time.perf_counter()
    fetched = sum(venue.land_forum(f).status == "fetched" for f in ids)
    forums_done = time.perf_counter()
    pdfs = sum(venue.land_pdf(f).status == "fetched" for f in ids)
    pdfs_done = time.perf_counter()
    resumed = sum(venue.land_forum(f).status == "stored" for f in ids)
    resumed_done = time.perf_counter()
    assert fetched == resumed == len(ids), (fetched, resumed, len(ids))
    return {"forums": len(ids), "forums_s": forums_done - started, "pdfs": pdfs, "pdfs_s": pdfs_done - forums_done,
            "resumed_s": resumed_done - pdfs_done, "crawl_peak_rss_mib": peak_rss_mib()}


def child(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{args[0]} {args[1:]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(n_forums: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        served, landed, ids = Path(tmp) / "served", Path(tmp) / "landed", Path(tmp) / "forum_ids.txt"
        n_notes = synthetic_venue(served, n_forums)
        venue_id = json.loads((served / "venue.json").read_text())["venue_id"]
        ids.write_text("\n".join(n["id"] for n in json.loads((served / "submissions.json").read_text())["notes"]))
        with FakeOpenReviewServer(served) as server:
            listing = child("--list", server.url, venue_id, str(landed))
            crawling = child("--crawl", server.url, venue_id, str(landed), str(ids))
    return {"notes": n_notes, **listing, **crawling}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--forums", type=int, action="append", help="venue size; repeat for several (default 200)")
    # the children: list the submissions / crawl the forums whose ids are in IDS_FILE
    parser.add_argument("--list", nargs=3, metavar=("URL", "VENUE_ID", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--crawl", nargs=4, metavar=("URL", "VENUE_ID", "FOLDER", "IDS_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list:
        url, venue_id, folder = args.list
        print(json.dumps(list_submissions(url, venue_id, Path(folder))))
        return
    if args.crawl:
        url, venue_id, folder, ids = args.crawl
        print(json.dumps(crawl(url, venue_id, Path(folder), Path(ids).read_text().split())))
        return
    runs = [measure(n) for n in args.forums or [200]]
    print("| forums | notes | list submissions (s) | listing peak RSS (MiB) | forums/s | notes/s | PDFs/s "
          "| resumed pass (forums/s) | crawl peak RSS (MiB) | crawl peak RSS vs first size |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run['forums']} | {run['notes']} | {run['list_s']:.2f} | {run['list_peak_rss_mib']:.0f} "
            f"| {run['forums'] / run['forums_s']:.1f} | {run['notes'] / run['forums_s']:.0f} "
            f"| {run['pdfs'] / run['pdfs_s']:.1f} | {run['forums'] / run['resumed_s']:.0f} "
            f"| {run['crawl_peak_rss_mib']:.0f} | {run['crawl_peak_rss_mib'] / runs[0]['crawl_peak_rss_mib']:.2f}x |"
        )


if __name__ == "__main__":
    main()
