"""Reference checks at venue scale against loopback stand-ins of Crossref, OpenAlex and Semantic Scholar: lookups a
second, each service's requests a second against its rate limit (the ceiling), and the cached rerun a killed build
resumes with (issue 35, item 4).

    .venv/bin/python benchmarks/bench_reference_checks.py [--papers 1000] [--references 40] [--works 600]
        [--requests-per-second 200] [--latency-ms 50] [--seed 7]

A venue of `--papers` papers of `--references` entries each is drawn (seeded) from `--works` works the services
know (70% cited with their DOI, the rest by title alone) and 10% fabricated entries no service knows. The entries go
through `ScholarlyClient.check_all` paper by paper, as the `reference_checks` asset does, with every service limited
to `--requests-per-second` and a title search answered after `--latency-ms` (a DOI at once), the stand-in served
from a process of its own. The answers are cached under a temporary lake as the asset caches them; the second pass
is what a build killed after the first finds: every answer read back, no request sent.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from peerify_dagster.domain.citations.entries import PARSED, ParsedEntry  # noqa: E402
from peerify_dagster.domain.citations.options import NETWORK_METADATA_SERVICES  # noqa: E402
from peerify_dagster.resources.openreview import HttpPolicy  # noqa: E402
from peerify_dagster.resources.scholarly import ScholarlyClient  # noqa: E402
from tests.fakes.loopback import FaultRule  # noqa: E402
from tests.fakes.scholarly_server import SERVICE_PREFIXES, CorpusWork, FakeScholarlyServer  # noqa: E402

WORDS = ("graph neural sparse dense retrieval attention transformer corpus citation semantic verification claims "
         "evidence scientific review benchmark learning representation language model training robust efficient "
         "scalable document passage ranking entity linking summarisation dataset annotation agreement").split()
SEARCH_PATHS = ("/crossref/works", "/openalex/works", "/s2/graph/v1/paper/search")


def draw_venue(papers: int, references: int, works: int, seed: int) -> tuple[list[CorpusWork], list[list[ParsedEntry]]]:
    rng = random.Random(seed)
    corpus = [CorpusWork(" ".join(rng.sample(WORDS, 7)).capitalize() + f" {number}",
                         ((rng.choice("ABCDEFG"), f"Author{number}"),), 2000 + number % 24,
                         doi=f"10.5555/bench.{number}") for number in range(works)]
    venue = []
    for _ in range(papers):
        entries = []
        for index in range(1, references + 1):
            if rng.random() < 0.1:  # fabricated: no service knows it
                title = " ".join(rng.sample(WORDS, 8)) + f" imagined {rng.randrange(10**6)}"
                entries.append(ParsedEntry(index, title, title=title, surnames=("Nobody",), authors=("Nobody",),
                                           year=2021, status=PARSED))
                continue
            work = rng.choice(corpus)
            doi = work.doi if rng.random() < 0.7 else None
            entries.append(ParsedEntry(index, work.title, title=work.title, surnames=(work.authors[0][1],),
                                       authors=(work.authors[0][1],), year=work.year, doi=doi, status=PARSED))
        venue.append(entries)
    return corpus, venue


def serve(corpus: list[CorpusWork], faults: list[FaultRule], connection) -> None:  # noqa: ANN001 - a Pipe end
    """The stand-in services until the process is ended; "count" gets each service's requests so far."""
    with FakeScholarlyServer(corpus, faults) as server:
        connection.send(server.base_urls)
        while connection.recv() == "count":
            connection.send({service: len(server.requests_to(service)) for service in SERVICE_PREFIXES})


def run(client: ScholarlyClient, venue: list[list[ParsedEntry]]) -> tuple[float, Counter]:
    started = time.perf_counter()
    statuses: Counter = Counter()
    for entries in venue:
        statuses.update(check.status for check in client.check_all(entries))
    return time.perf_counter() - started, statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--papers", type=int, default=1000)
    parser.add_argument("--references", type=int, default=40)
    parser.add_argument("--works", type=int, default=600)
    parser.add_argument("--requests-per-second", type=float, default=200.0)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    corpus, venue = draw_venue(args.papers, args.references, args.works, args.seed)
    entries = sum(len(paper) for paper in venue)
    faults = [FaultRule(path, "hang", hang_seconds=args.latency_ms / 1000, times=None) for path in SEARCH_PATHS]
    rates = dict.fromkeys(NETWORK_METADATA_SERVICES, args.requests_per_second)
    # The stand-in serves from a process of its own, so that it and the client do not share one interpreter's lock.
    requests, replies = multiprocessing.Pipe()
    serving = multiprocessing.Process(target=serve, args=(corpus, faults, replies), daemon=True)
    serving.start()
    base_urls = requests.recv()
    try:
        with tempfile.TemporaryDirectory() as lake:
            def client() -> ScholarlyClient:
                return ScholarlyClient(NETWORK_METADATA_SERVICES, base_urls, "bench@example.org",
                                       Path(lake) / "scholarly_cache", HttpPolicy(timeout_s=10.0, retries=1),
                                       requests_per_second=rates)

            in_flight = client().services[NETWORK_METADATA_SERVICES[0]].in_flight
            first_s, statuses = run(client(), venue)
            requests.send("count")
            per_service = requests.recv()
            second_s, again = run(client(), venue)
            requests.send("count")
            resent = sum(requests.recv().values()) - sum(per_service.values())
    finally:
        serving.terminate()
    print(f"venue: {args.papers} papers x {args.references} references = {entries} entries; {args.works} works known, "
          f"DOIs on 70% of the rest, title searches answered after {args.latency_ms:g} ms; "
          f"{args.requests_per_second:g} requests/s per service, {in_flight} under way per service")
    print("| pass | s | entries/s | statuses |")
    print("|---|---:|---:|---|")
    for name, seconds, counted in (("first (asks the services)", first_s, statuses),
                                   ("rerun after a kill (from the cache)", second_s, again)):
        shown = ", ".join(f"{status} {count}" for status, count in sorted(counted.items()))
        print(f"| {name} | {seconds:.1f} | {entries / seconds:.0f} | {shown} |")
    print()
    print("| service | requests | requests/s | rate limit | share of the ceiling |")
    print("|---|---:|---:|---:|---:|")
    for service, count in per_service.items():
        achieved = count / first_s
        print(f"| {service} | {count} | {achieved:.1f} | {args.requests_per_second:g} | "
              f"{achieved / args.requests_per_second:.0%} |")
    print(f"summary: entries={entries} first_s={first_s:.1f} entries_per_s={entries / first_s:.0f} "
          f"rerun_s={second_s:.1f} rerun_requests={resent} "
          f"ceiling_share={min(count / first_s for count in per_service.values()) / args.requests_per_second:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
