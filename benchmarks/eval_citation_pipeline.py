"""The citation half end to end on real PDFs that cite each other: resolution to the right file, a wrong-paper file
rejected, verdicts and the time per manuscript, each beside RefVerifier's figures (issue 20).

    .venv/bin/python benchmarks/eval_citation_pipeline.py [--pdfs FOLDER] [--manuscripts NAME ...] [--library FOLDER]
        [--no-verdicts] [--profile NAME] [--max-cost-usd USD] [--work FOLDER]

Each citing manuscript (default: `papermage.pdf` and `2020.acl-main.447.pdf` of `../shared/real-data/pdfs`) is
verified as `peerify verify --pdf NAME --citations --library FOLDER` verifies it (`--library`: default the `--pdfs`
folder itself): its upload venue is registered in a fresh lake and Dagster home of its own (so nothing is answered
from a cache or a ledger, and nothing touches the project's lake), and the real `verify_citations` job is run in this
process (cli/verification.py's `prepare`, `register` and `citation_selection`, one run through its BuildSession):
parsing, bibliography, citances, reference checks (no metadata service: offline), cited papers from the library,
evidence windows and verdicts through the LLM gateway and its ledger. The tables are then read back from the lake.

Per manuscript it prints the references and citances found; the entries resolved (all, with a DOI or arXiv id,
without) and how (source, and what found the file); the pairs the shared README names (papermage cites the S2ORC and
the literature-graph papers, S2ORC cites the latter), each resolved to the right file or not, with the citances that
reach the entry; the verdicts; the wall time split into parsing, resolution, evidence, verdicts and the rest (Dagster
step times). The wrong-paper check then gives the resolver (resources/cited_papers.py, what the `cited_papers` asset
calls) a library in which another real PDF of the folder is named by each of the manuscript's DOIs and arXiv ids: each
such entry must come out `rejected` by the right-paper check. Resolution and time are set beside RefVerifier's
published figures; the last line sums it up.

The default profile is `offline` (SmolLM2-135M on this machine): its verdicts test the plumbing only and say nothing
about the citations. `--profile paper` (with its API keys in the environment) runs the same script with real models;
`--max-cost-usd` bounds what that spends. `--no-verdicts` leaves the verdicts (and the figures that read them) out of
the run: resolution and the wrong-paper check alone, without loading a model. `--work FOLDER` keeps the lakes (the
tables, `uploads/<key>/citations.html`) there instead of in a temporary folder removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

import polars as pl  # noqa: E402

from peerify_dagster.domain.citations.metrics import REFVERIFIER, citation_metrics  # noqa: E402
from peerify_dagster.domain.citations.resolution import (  # noqa: E402
    OUTCOME_WRONG_PAPER,
    REJECTED,
    RESOLVED,
    canonical_arxiv_id,
)

DEFAULT_PDFS = REPO_ROOT.parent / "shared" / "real-data" / "pdfs"
DEFAULT_MANUSCRIPTS = ("papermage.pdf", "2020.acl-main.447.pdf")
# The shared citations README ("Real PDFs that cite each other"): citing file -> {cited file: times it is cited there,
# None where the README does not say}.
EXPECTED_PAIRS: dict[str, dict[str, int | None]] = {
    "papermage.pdf": {"2020.acl-main.447.pdf": None, "N18-3011.pdf": None},
    "2020.acl-main.447.pdf": {"N18-3011.pdf": 3},
}
# The citation verdicts and the figures that read them: what --no-verdicts leaves out of the run.
VERDICT_ASSETS = ("citation_verdicts", "citation_metrics")
# The job's steps grouped as the time split reports them; any other step (the figures) counts as "other", with the
# registration, the run's own overhead and reading the tables back.
PHASES = {
    "parsing": ("paper_sample", "raw_openreview_notes", "manuscript_pdfs", "parsed_manuscripts", "bibliography",
                "citances"),
    "resolution": ("reference_checks", "cited_papers"),
    "evidence": ("citation_evidence",),
    "verdicts": ("citance_enrichment", "citation_verdicts"),
}
TABLES = ("parsed_manuscripts", "bibliography", "citances", "reference_checks", "cited_papers", "citation_evidence",
          "citation_verdicts")
_FOUND_BY = re.compile(r"found by (\w+)")


@dataclass
class ManuscriptResult:
    name: str
    venue: str
    seconds: float
    phases: dict[str, float]
    usage: str
    tables: dict[str, pl.DataFrame]
    sha256: str  # the manuscript's own PDF: an entry resolved to it is wrong by construction
    wrong_paper: list[dict] = field(default_factory=list)
    decoy: str | None = None

    @property
    def entries(self) -> pl.DataFrame:
        return self.tables["bibliography"].filter(pl.col("parse_status") != "no_references")


@contextmanager
def isolated_lake(lake: Path, profile: str | None) -> Iterator[None]:
    """The process's environment pointed at `lake` (its Dagster home inside it, as `peerify` puts one beside a lake
    of its own) and the chosen LLM profile, restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("PEERIFY_LAKE", "DAGSTER_HOME", "PEERIFY_LLM_PROFILE")}
    os.environ["PEERIFY_LAKE"] = str(lake)
    os.environ.pop("DAGSTER_HOME", None)
    if profile:
        os.environ["PEERIFY_LLM_PROFILE"] = profile
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def verify_citations(pdf: Path, library: Path, verdicts: bool, max_cost_usd: float | None) -> ManuscriptResult:
    """One manuscript through the `verify_citations` job as `peerify verify --pdf --citations --library` runs it, in
    the lake the environment names; its tables, wall time and step times."""
    from peerify_dagster import paths
    from peerify_dagster.cli.build import check_models
    from peerify_dagster.cli.build_session import BuildSession
    from peerify_dagster.cli.home import open_home
    from peerify_dagster.cli.verification import NoStopSignals, citation_selection, prepare, register, verify_roles
    from peerify_dagster.cli.verify import library_folder, upload_from_files
    from peerify_dagster.domain import uploads
    from peerify_dagster.jobs import verify_citations_job
    from peerify_dagster.partitions import add_venue_partitions
    from peerify_dagster.resources.lake import Lake

    started = time.monotonic()
    request = uploads.VerificationRequest(upload=upload_from_files(str(pdf), [], [], uploads.max_pdf_bytes()),
                                          citations=True, library=library_folder(str(library)),
                                          max_cost_usd=max_cost_usd)
    prepared = prepare(request)
    key = prepared.venue.key
    check_models(key, [], verify_roles(request, prepared.venue) if verdicts else ())
    register(prepared)
    lake = Lake(paths.lake_root())
    instance = open_home(f"eval_citation_pipeline of {pdf.name} (pid {os.getpid()})", capture_step_output=False)
    try:
        session = BuildSession(instance, lake.root, NoStopSignals(), max_cost_usd, None)
        add_venue_partitions(instance, key, [])
        selection = [asset for asset in citation_selection(False)
                     if verdicts or asset.to_user_string() not in VERDICT_ASSETS]
        result = session.run(verify_citations_job.name, key, None, selection)
        if not result.success:
            failed = next((event for event in result.all_events if event.is_step_failure), None)
            error = failed.step_failure_data.error if failed else None
            raise RuntimeError(f"{pdf.name}: the verify_citations run failed"
                               + (f" at {failed.step_key}: {error.message.strip()}" if error else ""))
        steps = {stat.step_key: stat.end_time - stat.start_time
                 for stat in instance.get_run_step_stats(result.run_id) if stat.end_time and stat.start_time}
        usage = session.usage_line()
    finally:
        instance.dispose()
    tables = {name: lake.read_table(name, key) for name in TABLES if lake.table_path(name, key).exists()}
    seconds = time.monotonic() - started
    phases = {phase: sum(steps.get(step, 0.0) for step in names) for phase, names in PHASES.items()}
    phases["other"] = seconds - sum(phases.values())
    return ManuscriptResult(pdf.name, key, seconds, phases, usage, tables,
                            hashlib.sha256(request.upload.pdf).hexdigest())


def identifier_file_name(doi: str | None, arxiv_id: str | None) -> str:
    """The file name a library gives a paper by its identifier: `<arXiv id>.pdf` ("hep-th_9901001.pdf" for an old
    one), else the DOI with its slashes as "_"."""
    if arxiv_id:
        return canonical_arxiv_id(arxiv_id).replace("/", "_") + ".pdf"
    return doi.replace("/", "_") + ".pdf"


def wrong_paper_check(result: ManuscriptResult, decoy: Path, folder: Path) -> list[dict]:
    """Each of the manuscript's entries with a DOI or arXiv id (other than the decoy's own paper) resolved, as the
    `cited_papers` asset resolves it, against a library in which `decoy` is named by that identifier: one row per
    entry with its status and whether the decoy file was refused as the wrong paper."""
    from peerify_dagster.assets.steps.citations import entries_of, entry_id
    from peerify_dagster.domain import uploads
    from peerify_dagster.domain.citations.options import CitationOptions
    from peerify_dagster.resources.cited_papers import CitedPaperResolver, CitedPaperStore, index_library
    from peerify_dagster.resources.dagster_resources import DocumentParserResource

    paper_id = result.tables["parsed_manuscripts"]["paper_id"][0]
    own = {row["entry_id"] for row in result.tables["cited_papers"].iter_rows(named=True)
           if row["status"] == RESOLVED and row["locator"] == decoy.name}
    entries = [entry for entry in entries_of(result.tables["bibliography"]).get(paper_id, [])
               if (entry.doi or entry.arxiv_id) and entry_id(paper_id, entry.index) not in own]
    library = folder / "library"
    library.mkdir(parents=True, exist_ok=True)
    named = {}
    for entry in entries:
        named[entry.index] = identifier_file_name(entry.doi, entry.arxiv_id)
        shutil.copyfile(decoy, library / named[entry.index])
    options = CitationOptions.from_mapping(uploads.citation_options(None, str(library)))
    resolver = CitedPaperResolver(CitedPaperStore(folder / "lake", DocumentParserResource().parser()))
    index = index_library(library)
    rows = []
    for entry in entries:
        resolution = resolver.resolve_entry(entry, options, index, {}, ())
        refused = any(attempt.outcome == OUTCOME_WRONG_PAPER and attempt.locator == named[entry.index]
                      for attempt in resolution.attempts)
        rows.append({"entry": entry_id(paper_id, entry.index), "title": entry.title, "named": named[entry.index],
                     "status": resolution.status, "refused": refused, "score": resolution.right_paper_score})
    return rows


def choose_decoy(citing: str, library: Path) -> Path | None:
    """The wrong paper: the smallest of the files the manuscript is expected to cite (a real paper of the same field),
    else the smallest other PDF of the library."""
    pdfs = sorted((path for path in library.glob("*.pdf") if path.name != citing), key=lambda path: path.stat().st_size)
    expected = [path for path in pdfs if path.name in EXPECTED_PAIRS.get(citing, {})]
    return (expected or pdfs or [None])[0]


# -- figures -------------------------------------------------------------------------------------------------------

def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.1%})" if whole else "0/0"


# citation_metrics' resolution figures, by the names the tables below use.
RESOLUTION_METRICS = {"resolved share": "all", "resolved share with identifier": "with_id",
                      "resolved share without identifier": "without_id"}


def resolution_counts(tables: dict[str, pl.DataFrame]) -> dict[str, tuple[int, int]]:
    """(resolved, entries) of `all` entries, those `with_id` (a DOI or arXiv id) and those `without_id`, from the
    figures the `citation_metrics` asset computes (no evidence or verdicts needed for them)."""
    empty = pl.DataFrame()
    rows = citation_metrics(tables["citances"], tables["bibliography"], tables["reference_checks"],
                            tables["cited_papers"], empty, empty)
    return {RESOLUTION_METRICS[row["metric"]]: (round((row["value"] or 0.0) * row["n"]), row["n"])
            for row in rows if row["stage"] == "resolution" and row["metric"] in RESOLUTION_METRICS}


def found_by(attempts: Sequence[dict]) -> str:
    taken = next((attempt for attempt in attempts if attempt["outcome"] == RESOLVED), None)
    match = _FOUND_BY.search((taken or {}).get("detail") or "")
    return match.group(1) if match else "-"


def expected_rows(result: ManuscriptResult, library: Path) -> list[dict]:
    """The README's pairs for this manuscript whose cited file is in the library: the entries resolved to it, the
    citances reaching those entries and their verdicts."""
    papers, citances = result.tables["cited_papers"], result.tables["citances"]
    verdicts = result.tables.get("citation_verdicts")
    rows = []
    for cited, times in EXPECTED_PAIRS.get(result.name, {}).items():
        if not (library / cited).is_file():
            continue
        entries = papers.filter((pl.col("status") == RESOLVED) & (pl.col("locator") == cited))["entry_id"].to_list()
        reaching = citances.filter(pl.col("entry_ids").list.eval(pl.element().is_in(entries)).list.any())
        labels = Counter()
        if verdicts is not None and entries:
            shown = verdicts.filter(pl.col("entry_id").is_in(entries))
            labels = Counter(shown["label"].fill_null("no label").to_list())
        rows.append({"cited": cited, "entries": entries, "right": bool(entries), "citances": reaching.height,
                     "expected_citances": times, "labels": labels})
    return rows


def other_resolutions(result: ManuscriptResult) -> list[dict]:
    expected = set(EXPECTED_PAIRS.get(result.name, {}))
    titles = dict(result.entries.select("entry_id", "title").iter_rows())
    return [{"entry": row["entry_id"], "title": titles.get(row["entry_id"]), "file": row["locator"],
             "source": row["source"], "score": row["right_paper_score"], "itself": row["pdf_sha256"] == result.sha256}
            for row in result.tables["cited_papers"].iter_rows(named=True)
            if row["status"] == RESOLVED and row["locator"] not in expected]


def print_manuscript(result: ManuscriptResult, library: Path, profile: str) -> None:
    entries, citances, papers = result.entries, result.tables["citances"], result.tables["cited_papers"]
    pages = result.tables["parsed_manuscripts"]["pages"][0]
    statuses = Counter(entries["parse_status"].to_list())
    counts = resolution_counts(result.tables)
    resolved = papers.filter(pl.col("status") == RESOLVED)
    via = Counter(f"{row['source']} ({found_by(row['attempts'])})" for row in resolved.iter_rows(named=True))
    print(f"### {result.name} ({pages} pages; venue {result.venue})\n")
    print(f"- references: {entries.height} entries (parsed {statuses['parsed']}, partial {statuses['partial']}, "
          f"unparsed {statuses['unparsed']}); with a DOI {entries['doi'].is_not_null().sum()}, with an arXiv id "
          f"{entries['arxiv_id'].is_not_null().sum()}")
    print(f"- citances: {citances.height} (every marker resolved to an entry: "
          f"{(citances['resolution'] == 'all').sum()}, some: {(citances['resolution'] == 'some').sum()}, none: "
          f"{(citances['resolution'] == 'none').sum()})")
    print(f"- resolved: {share(*counts['all'])}; with a DOI or arXiv id {share(*counts['with_id'])}; without "
          f"{share(*counts['without_id'])}; rejected {(papers['status'] == REJECTED).sum()}; via: "
          + (", ".join(f"{how} {n}" for how, n in sorted(via.items())) or "none"))
    print(f"- {result.usage}\n")
    print("| cited file (README) | entry | resolved to the right file | citances reaching it | verdicts |")
    print("|---|---|---|---|---|")
    for row in expected_rows(result, library):
        reach = f"{row['citances']}" + (f" (README: {row['expected_citances']})" if row["expected_citances"] else "")
        labels = ", ".join(f"{label} {n}" for label, n in sorted(row["labels"].items())) or "-"
        print(f"| {row['cited']} | {', '.join(row['entries']) or '-'} | {'yes' if row['right'] else 'no'} | {reach} "
              f"| {labels} |")
    if others := other_resolutions(result):
        print("\nOther entries resolved (not in the README's list; the entry's title beside the file, to judge):\n")
        for row in others:
            print(f"- {row['entry']} {row['title']!r} -> {row['file']} ({row['source']}, right-paper score "
                  f"{row['score']:.2f})" + (": WRONG, the citing manuscript itself" if row["itself"] else ""))
    print_verdicts(result, profile)
    if result.decoy is not None:
        rejected = sum(row["status"] == REJECTED and row["refused"] for row in result.wrong_paper)
        print(f"\nWrong-paper check: {result.decoy} copied under the identifier of each entry with a DOI or arXiv id "
              f"(a library of those copies only): rejected {rejected} of {len(result.wrong_paper)}\n")
        if result.wrong_paper:
            print("| entry | title | decoy named | status | right-paper score |")
            print("|---|---|---|---|---|")
            for row in result.wrong_paper:
                score = "-" if row["score"] is None else f"{row['score']:.2f}"
                print(f"| {row['entry']} | {row['title']} | {row['named']} | {row['status']}"
                      f"{'' if row['refused'] else ' (decoy not refused)'} | {score} |")
    phases = result.phases
    print(f"\nWall time: {result.seconds:.1f} s = parsing {phases['parsing']:.1f} + resolution "
          f"{phases['resolution']:.1f} ({phases['resolution'] / result.seconds:.0%}) + evidence "
          f"{phases['evidence']:.1f} + verdicts {phases['verdicts']:.1f} + other {phases['other']:.1f}\n")


def print_verdicts(result: ManuscriptResult, profile: str) -> None:
    verdicts = result.tables.get("citation_verdicts")
    if verdicts is None:
        print("\nVerdicts: not run (--no-verdicts)")
        return
    called = verdicts.filter(pl.col("call_id").is_not_null())
    what = ("plumbing only: the offline model (SmolLM2-135M) answers, its labels say nothing about the citations"
            if profile == "offline" else f"profile {profile}")
    print(f"\nVerdicts ({what}): {verdicts.height} (citance, entry) rows, {called.height} with a model call")
    for (verifier, mode), group in sorted(verdicts.group_by(["verifier", "mode"]), key=lambda item: item[0]):
        labels = Counter(zip(group["status"].to_list(), group["label"].fill_null("no label").to_list()))
        print(f"- {verifier} ({mode}): " + ", ".join(f"{status} / {label} {n}"
                                                     for (status, label), n in sorted(labels.items())))


def print_summary(results: list[ManuscriptResult], library: Path, profile: str) -> None:
    pooled = {name: pl.concat([result.tables[name] for result in results], how="diagonal_relaxed")
              for name in ("citances", "bibliography", "reference_checks", "cited_papers")}
    counts = resolution_counts(pooled)
    files = len(list(library.glob("*.pdf")))
    print(f"### All {len(results)} manuscripts beside RefVerifier\n")
    print("Resolution to a full text. RefVerifier's chain asks a local cache and library, then arXiv, Semantic "
          "Scholar, Crossref, OpenAlex, Unpaywall, Europe PMC, CORE and Google Scholar on the open web; here the only "
          f"source is a local library of {files} PDF{'s' * (files != 1)} (no network, no metadata service), "
          "so most entries cannot resolve: the share says how many of a manuscript's references happen to be in the "
          "folder, not how well a chain finds papers. What it tests is that those in the folder are found, and only "
          "they.\n")
    print("| | resolved | with a DOI or arXiv id | without |")
    print("|---|---|---|---|")
    print(f"| here (local library) | {share(*counts['all'])} | {share(*counts['with_id'])} | "
          f"{share(*counts['without_id'])} |")
    published = REFVERIFIER["resolved"]
    print(f"| RefVerifier (open-web chain) | {round(published.value * published.n)}/{published.n} "
          f"({published.value:.1%}) | {REFVERIFIER['resolved_with_identifier'].value:.1%} | "
          f"{REFVERIFIER['resolved_without_identifier'].value:.1%} |")
    minutes = [result.seconds / 60 for result in results]
    retrieval = [result.phases["resolution"] / result.seconds for result in results]
    print("\n| | minutes per manuscript (median) | reference retrieval share |")
    print("|---|---|---|")
    judged = all("citation_verdicts" in result.tables for result in results)
    each = ", ".join(f"{m:.2f}" for m in minutes)
    spread = f"{min(retrieval):.0%}" + (f"-{max(retrieval):.0%}" if len(results) > 1 else "")
    print(f"| here ({profile} profile{'' if judged else ', no verdicts'}) | {statistics.median(minutes):.2f} ({each}) "
          f"| {spread} |")
    print(f"| RefVerifier | {REFVERIFIER['minutes_per_manuscript'].value:.0f} | 35-91% |\n")
    expected = [row for result in results for row in expected_rows(result, library)]
    wrong = [row for result in results for row in result.wrong_paper]
    others = [row for result in results for row in other_resolutions(result)]
    calls = sum(result.tables["citation_verdicts"]["call_id"].is_not_null().sum()
                for result in results if "citation_verdicts" in result.tables)
    print(f"summary: manuscripts={len(results)} expected_pairs_resolved={sum(r['right'] for r in expected)}/"
          f"{len(expected)} wrong_paper_rejected={sum(r['status'] == REJECTED and r['refused'] for r in wrong)}/"
          f"{len(wrong)} other_resolved={len(others)} self_resolved={sum(row['itself'] for row in others)} "
          f"resolved={'/'.join(map(str, counts['all']))} with_identifier={'/'.join(map(str, counts['with_id']))} "
          f"verdict_calls={calls} median_minutes={statistics.median(minutes):.2f} refverifier_minutes="
          f"{REFVERIFIER['minutes_per_manuscript'].value:.0f}")


def evaluate(pdfs: Path, manuscripts: Sequence[str], library: Path, work: Path, verdicts: bool, profile: str | None,
             max_cost_usd: float | None) -> list[ManuscriptResult]:
    results = []
    for name in manuscripts:
        folder = work / Path(name).stem
        with isolated_lake(folder / "lake", profile):
            result = verify_citations(pdfs / name, library, verdicts, max_cost_usd)
            decoy = choose_decoy(name, library)
            if decoy is not None:
                result.decoy = decoy.name
                result.wrong_paper = wrong_paper_check(result, decoy, folder / "wrong-paper")
        results.append(result)
        print(f"{name}: {result.seconds:.1f} s", file=sys.stderr, flush=True)
    return results


def active_profile(profile: str | None) -> str:
    from peerify_dagster.resources.llm_gateway.registry import ModelRegistry

    return ModelRegistry.load(profile=profile).profile


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS, help="folder of the citing manuscripts")
    arguments.add_argument("--manuscripts", nargs="+", metavar="NAME", default=list(DEFAULT_MANUSCRIPTS),
                           help="the citing manuscripts, file names in --pdfs")
    arguments.add_argument("--library", type=Path,
                           help="folder of PDFs the cited papers are found in (default: --pdfs)")
    arguments.add_argument("--no-verdicts", action="store_true", help="leave the verdicts out: no model is loaded")
    arguments.add_argument("--profile", help="the LLM gateway's profile (models.yaml; default: its default_profile)")
    arguments.add_argument("--max-cost-usd", type=float, metavar="USD", help="the LLM budget of each manuscript's run")
    arguments.add_argument("--work", type=Path, help="keep the lakes here (default: a temporary folder, removed)")
    options = arguments.parse_args(argv)
    library = options.library or options.pdfs
    missing = [name for name in options.manuscripts if not (options.pdfs / name).is_file()]
    if missing or not library.is_dir():
        print(f"not found: {', '.join(missing) or library} (in {options.pdfs}): nothing evaluated", file=sys.stderr)
        return 2
    profile = active_profile(options.profile)
    print(f"## Citation pipeline on {', '.join(options.manuscripts)} (library {library}, profile {profile})\n")
    with tempfile.TemporaryDirectory(prefix="peerify-eval-citations-") as scratch:
        work = options.work or Path(scratch)
        results = evaluate(options.pdfs, options.manuscripts, library, work, not options.no_verdicts,
                           options.profile, options.max_cost_usd)
        for result in results:
            print_manuscript(result, library, profile)
        print_summary(results, library, profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
