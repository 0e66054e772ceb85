"""Evidence localisation per retriever against a venue's citation answer key: hit rate, MRR, how many pairs the
relevance floor left without a passage, and whether different citances of one cited paper get different windows
(issue 34, item 4).

    .venv/bin/python benchmarks/eval_citation_evidence.py [--venue sample] [--retrievers bm25,dense,hybrid]
        [--registry venues.yaml] [--lake FOLDER]

For each retriever the venue's citation assets up to `citation_evidence` (parsing, bibliography, citances, cited
papers, evidence; no verdicts, so no model call) are built into a fresh lake of their own (`--lake`, default a
temporary folder) with the venue's `citations.retriever` set to it, from a copy of the registry; the figures are
`citation_metrics`' own localisation rows (domain/citations/metrics.py: a passage is a hit when it holds a gold
evidence text or lies inside one; every gold pair counts, one without passages as a miss). "distinct windows" is
over the cited papers that two or more citances cite: the share of pairs of such citances whose shown windows differ
(1.0: every citance its own windows; 0.0: one set of windows for all). The venue needs `gold_citations`.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import polars as pl  # noqa: E402
import yaml  # noqa: E402

RETRIEVERS = ("bm25", "dense", "hybrid")


def registry_for(registry: Path, venue: str, retriever: str, folder: Path) -> Path:
    """A copy of `registry` holding `venue` alone, its relative paths made absolute, with `citations.retriever` set."""
    entries = (yaml.safe_load(registry.read_text(encoding="utf-8")) or {}).get("venues") or {}
    if venue not in entries:
        raise SystemExit(f"{registry}: no venue {venue!r}")
    entry = dict(entries[venue])
    for field in ("snapshot", "gold_claims", "gold_citations", "llm_recording"):
        if entry.get(field) and not Path(entry[field]).is_absolute():
            entry[field] = str((registry.parent / entry[field]).resolve())
    if not entry.get("gold_citations"):
        raise SystemExit(f"{registry}: venue {venue!r} has no gold_citations answer key to score against")
    citations = dict(entry.get("citations") or {})
    if citations.get("library") and not Path(citations["library"]).is_absolute():
        citations["library"] = str((registry.parent / citations["library"]).resolve())
    entry["citations"] = {**citations, "retriever": retriever}
    path = folder / f"venues-{retriever}.yaml"
    path.write_text(yaml.safe_dump({"venues": {venue: entry}}, sort_keys=False), encoding="utf-8")
    return path


def build_evidence(venue: str, registry: Path, lake: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`citances` and `citation_evidence` of `venue`, built into `lake` on a fresh ephemeral instance."""
    import dagster as dg

    from peerify_dagster.definitions import build_resources, defs
    from peerify_dagster.partitions import add_venue_partitions
    from peerify_dagster.resources.dagster_resources import VenueRegistryResource

    instance = dg.DagsterInstance.ephemeral()
    add_venue_partitions(instance, venue, [])
    selection = dg.AssetSelection.assets("citation_evidence").upstream().required_multi_asset_neighbors()
    resources = build_resources(str(lake), venue_registry=VenueRegistryResource(path=str(registry)))
    result = dg.materialize(list(defs.assets), selection=selection, instance=instance, partition_key=venue,
                            resources=resources, raise_on_error=False)
    if not result.success:
        failed = [event.step_key for event in result.all_events if event.is_step_failure]
        raise SystemExit(f"building the evidence of {venue} failed at {failed}")
    return (result.output_for_node("citances"), result.output_for_node("citation_evidence"))


def distinct_windows(evidence: pl.DataFrame) -> tuple[float | None, int]:
    """The share of pairs of citances citing one paper whose shown windows differ, and how many pairs there are."""
    shown = evidence.filter(pl.col("status") == "ok")
    differing = total = 0
    for _, group in shown.group_by("cited_key"):
        windows = {citance: frozenset(rows["text"].to_list()) for (citance,), rows in group.group_by("citance_id")}
        for first, second in itertools.combinations(sorted(windows), 2):
            total += 1
            differing += windows[first] != windows[second]
    return (differing / total if total else None), total


def evaluate(venue: str, retriever: str, registry: Path, lake: Path) -> dict:
    from peerify_dagster.domain.citations.gold import load_citation_gold
    from peerify_dagster.domain.citations.metrics import localisation_figures

    started = time.perf_counter()
    venue_registry = registry_for(registry, venue, retriever, lake)
    citances, evidence = build_evidence(venue, venue_registry, lake / retriever)
    key = yaml.safe_load(venue_registry.read_text())["venues"][venue]["gold_citations"]
    gold = load_citation_gold(Path(key), citances.iter_rows(named=True))
    rows = {row["metric"].split(" (")[0]: row for row in localisation_figures(evidence, gold.evidence)
            if row["metric"].endswith(f", {retriever})") or row["metric"].endswith("(windows)")}
    share, pairs = distinct_windows(evidence.filter(pl.col("mode") == "windows"))
    floor = evidence.filter(pl.col("status") == "no_relevant_passage").select("citance_id", "entry_id").unique()
    return {"retriever": retriever, "hit": rows.get("hit rate", {}).get("value"),
            "n": rows.get("hit rate", {}).get("n"), "mrr": rows.get("MRR", {}).get("value"),
            "no_passage": floor.height, "pairs": evidence.select("citance_id", "entry_id").unique().height,
            "distinct": share, "distinct_pairs": pairs, "seconds": time.perf_counter() - started}


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venue", default="sample")
    parser.add_argument("--retrievers", default=",".join(RETRIEVERS))
    parser.add_argument("--registry", type=Path, default=REPO_ROOT / "venues.yaml")
    parser.add_argument("--lake", type=Path, help="where the lakes go (default: a temporary folder)")
    args = parser.parse_args(argv)
    retrievers = [name.strip() for name in args.retrievers.split(",") if name.strip()]
    unknown = [name for name in retrievers if name not in RETRIEVERS]
    if unknown:
        parser.error(f"unknown retrievers {unknown}; expected some of {list(RETRIEVERS)}")
    with tempfile.TemporaryDirectory(prefix="peerify-evidence-") as scratch:
        lake = args.lake or Path(scratch)
        lake.mkdir(parents=True, exist_ok=True)
        results = [evaluate(args.venue, name, args.registry.resolve(), lake) for name in retrievers]
    print("| retriever | gold pairs | hit rate | MRR | pairs without a passage (floor) | distinct windows | s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in results:
        print(f"| {row['retriever']} | {row['n']} | {_figure(row['hit'])} | {_figure(row['mrr'])} | "
              f"{row['no_passage']}/{row['pairs']} | {_figure(row['distinct'])} ({row['distinct_pairs']} pairs) | "
              f"{row['seconds']:.1f} |")
    summary = " ".join(f"{row['retriever']}_hit={_figure(row['hit'])}" for row in results)
    print(f"summary: venue={args.venue} {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
