"""Measure bibliography parsing against real gold; prints Markdown tables and one summary line per source.

    .venv/bin/python benchmarks/eval_bibliography.py [--s2orc JSON --pdf PDF] [--unarxive FOLDER] [--show N]

No network, no model. With neither option it runs both on the shared defaults
(`../shared/real-data/pdfs/N18-3011.{json,pdf}` and `../shared/citations/unarxive-sample`) and exits cleanly
(code 0, one line on stderr) for whatever is absent.

* `--s2orc JSON --pdf PDF`: the PDF parsed by the project's own parser, its reference blocks read by
  `read_bibliography`, each entry aligned one-to-one with the S2ORC JSON's `bib_entries` (GROBID's) by the
  similarity of their raw texts (`title_similarity` on the whole entry, >= 0.5, best pairs first; GROBID's
  title where it kept no raw text). Per gold entry: found (aligned), title (normalised exact, and similarity
  >= 0.9), first author's surname (accents and case folded), year; DOI / arXiv id where the gold has one.
  Unaligned gold entries count as wrong on every field. GROBID is not always right (a title with "In ISWC"
  left in, an author's name split wrongly): `--show` lists each disagreement so it can be judged.
* `--unarxive FOLDER`: every `bib_entries[*].bib_entry_raw` of the unarXive JSONL files through `parse_entry`.
  Gold identifiers per entry: unarXive's matched `ids` (DOI, arXiv id; an arXiv DOI "10.48550/arXiv.X" also as
  arXiv id X) and the links the LaTeX source marked (`contained_links` to doi.org, `contained_arXiv_ids`).
  Precision: extracted identifiers equal to a gold one, among entries with gold to judge by. Recall: in-text
  (entries whose gold identifier is written in the raw string, spaces ignored) and all (every entry with a gold
  identifier: most of unarXive's matched DOIs are not in the string at all). Also the share of entries with a
  year and with a title found, and entries per second.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

from peerify_dagster.domain.citations.bibliography import parse_entry, read_bibliography  # noqa: E402
from peerify_dagster.domain.citations.entries import ParsedEntry  # noqa: E402
from peerify_dagster.domain.citations.titles import SAME_TITLE, normalise_title, title_in_text, title_similarity  # noqa: E402

SHARED = REPO_ROOT.parent / "shared"
DEFAULT_S2ORC = SHARED / "real-data" / "pdfs" / "N18-3011.json"
DEFAULT_PDF = SHARED / "real-data" / "pdfs" / "N18-3011.pdf"
DEFAULT_UNARXIVE = SHARED / "citations" / "unarxive-sample"
MIN_ALIGNMENT = 0.5
_ARXIV_DOI_PREFIX = "10.48550/arxiv."


def fold(name: str | None) -> str:
    """A surname compared without accents, case, spaces or hyphens ("Demner-Fushman" = "demnerfushman")."""
    ascii_name = unicodedata.normalize("NFKD", name or "").encode("ascii", "ignore").decode("ascii")
    return "".join(character for character in ascii_name.lower() if character.isalnum())


# --- S2ORC (GROBID) bibliography of a rendered PDF ---------------------------------------------------------------


def gold_s2orc(path: Path) -> list[dict]:
    paper = json.loads(path.read_text())
    entries = (paper.get("pdf_parse") or paper).get("bib_entries") or {}
    return list(entries.values())


def align(gold: list[dict], entries: list[ParsedEntry]) -> dict[int, int]:
    """gold index -> entry position, one-to-one, best pairs first, similarity >= MIN_ALIGNMENT."""
    pairs = []
    for gold_index, item in enumerate(gold):
        for position, entry in enumerate(entries):
            if item.get("raw_text"):
                score = title_similarity(item["raw_text"], entry.raw_text)
            else:
                score = title_in_text(item.get("title"), entry.raw_text)
            if score >= MIN_ALIGNMENT:
                pairs.append((score, gold_index, position))
    aligned: dict[int, int] = {}
    used: set[int] = set()
    for _, gold_index, position in sorted(pairs, reverse=True):
        if gold_index not in aligned and position not in used:
            aligned[gold_index] = position
            used.add(position)
    return aligned


def score_s2orc(gold: list[dict], entries: list[ParsedEntry]) -> dict:
    """Field accuracy per gold entry (see the module docstring) and the disagreements."""
    aligned = align(gold, entries)
    counts: Counter = Counter()
    disagreements: list[str] = []
    for gold_index, item in enumerate(gold):
        position = aligned.get(gold_index)
        entry = entries[position] if position is not None else None
        if entry is None:
            disagreements.append(f"not found: {item.get('raw_text') or item.get('title')}")
            continue
        counts["found"] += 1
        gold_title = item.get("title") or ""
        if gold_title and normalise_title(entry.title or "") == normalise_title(gold_title):
            counts["title_exact"] += 1
        similarity = title_similarity(entry.title, gold_title)
        if similarity >= SAME_TITLE:
            counts["title_similar"] += 1
        else:
            disagreements.append(f"title {similarity:.2f}: ours {entry.title!r} / gold {gold_title!r}")
        gold_authors = item.get("authors") or []
        gold_surname = gold_authors[0].get("last", "") if gold_authors else ""
        ours = entry.surnames[0] if entry.surnames else ""
        if fold(ours) == fold(gold_surname):
            counts["first_author"] += 1
        else:
            disagreements.append(f"first author: ours {ours!r} / gold {gold_surname!r}")
        if entry.year == item.get("year"):
            counts["year"] += 1
        else:
            disagreements.append(f"year: ours {entry.year} / gold {item.get('year')}")
        other = {key.lower(): value for key, value in (item.get("other_ids") or {}).items()}
        for key, field in (("doi", "doi"), ("arxiv", "arxiv_id")):
            if other.get(key):
                counts[f"{field}_gold"] += 1
                counts[f"{field}_correct"] += getattr(entry, field) in {value.lower() for value in other[key]}
    return {"gold": len(gold), "entries": len(entries), "counts": counts, "disagreements": disagreements,
            "statuses": Counter(entry.status for entry in entries)}


def run_s2orc(s2orc: Path, pdf: Path, show: int) -> dict:
    from peerify_dagster.resources.document_parser import DocumentParser

    parser = DocumentParser()
    started = time.perf_counter()
    document = parser.parse(pdf)
    parsed_at = time.perf_counter()
    entries = [placed.entry for placed in read_bibliography(document.blocks)]
    finished = time.perf_counter()
    result = score_s2orc(gold_s2orc(s2orc), entries)
    counts, total = result["counts"], result["gold"]
    print(f"### {pdf.name} against {s2orc.name} (GROBID)\n")
    print("| gold entries | entries found | aligned | title exact | title >= 0.9 | first author | year "
          "| parsed / partial / unparsed | PDF parse s (cold) | bibliography s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    statuses = result["statuses"]
    print(f"| {total} | {result['entries']} | {counts['found']} | {share(counts['title_exact'], total)} "
          f"| {share(counts['title_similar'], total)} | {share(counts['first_author'], total)} "
          f"| {share(counts['year'], total)} | {statuses['parsed']} / {statuses['partial']} / {statuses['unparsed']} "
          f"| {parsed_at - started:.2f} | {finished - parsed_at:.3f} |")
    for field in ("doi", "arxiv_id"):
        if counts[f"{field}_gold"]:
            print(f"\n{field}: {counts[f'{field}_correct']} of {counts[f'{field}_gold']} gold identifiers found")
    if show and result["disagreements"]:
        print("\nDisagreements with GROBID:\n")
        for line in result["disagreements"][:show]:
            print(f"- {line}")
    print(f"\ns2orc: entries={result['entries']} gold={total} title_exact={ratio(counts['title_exact'], total)} "
          f"title_similar={ratio(counts['title_similar'], total)} "
          f"first_author={ratio(counts['first_author'], total)} year={ratio(counts['year'], total)}\n")
    return result


# --- unarXive raw strings with their matched identifiers ---------------------------------------------------------


def unarxive_entries(folder: Path) -> list[dict]:
    entries = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                entries.extend(json.loads(line).get("bib_entries", {}).values())
    return entries


def gold_identifiers(item: dict) -> tuple[set[str], set[str]]:
    """(DOIs, arXiv ids) the entry is known by: unarXive's matched ids and the links its LaTeX marked."""
    ids = item.get("ids") or {}
    dois = {ids["doi"].lower()} if ids.get("doi") else set()
    arxiv = {ids["arxiv_id"].lower()} if ids.get("arxiv_id") else set()
    for link in item.get("contained_links") or []:
        url = (link.get("url") or "").lower()
        if "doi.org/" in url:
            dois.add(url.rsplit("doi.org/", 1)[1].rstrip("."))
    arxiv |= {found["id"].lower() for found in item.get("contained_arXiv_ids") or [] if found.get("id")}
    arxiv |= {doi[len(_ARXIV_DOI_PREFIX):] for doi in dois if doi.startswith(_ARXIV_DOI_PREFIX)}
    return dois, {identifier.split("v")[0] if identifier[:1].isdigit() else identifier for identifier in arxiv}


def score_unarxive(items: list[dict]) -> dict:
    counts: Counter = Counter()
    misses: dict[str, list[str]] = {"doi": [], "arxiv_id": []}
    started = time.perf_counter()
    parsed = [parse_entry(item.get("bib_entry_raw") or "", index) for index, item in enumerate(items, start=1)]
    seconds = time.perf_counter() - started
    for item, entry in zip(items, parsed):
        raw = "".join((item.get("bib_entry_raw") or "").lower().split())
        counts["year"] += entry.year is not None
        counts["title"] += entry.title is not None
        counts[entry.status] += 1
        for field, gold in zip(("doi", "arxiv_id"), gold_identifiers(item)):
            found = getattr(entry, field)
            if found and gold:
                counts[f"{field}_judged"] += 1
                counts[f"{field}_right"] += found in gold
                if found not in gold:
                    misses[field].append(f"wrong: {found} not in {sorted(gold)}: {item.get('bib_entry_raw')}")
            elif found:
                counts[f"{field}_unjudged"] += 1
            if gold:
                counts[f"{field}_gold"] += 1
                counts[f"{field}_found"] += found in gold
                if any(identifier in raw for identifier in gold):
                    counts[f"{field}_in_text"] += 1
                    counts[f"{field}_in_text_found"] += found in gold
                    if found not in gold:
                        misses[field].append(f"missed: {sorted(gold)}: {item.get('bib_entry_raw')}")
    return {"entries": len(items), "counts": counts, "seconds": seconds, "misses": misses}


def run_unarxive(folder: Path, show: int) -> dict:
    result = score_unarxive(unarxive_entries(folder))
    counts, total = result["counts"], result["entries"]
    print(f"### unarXive sample ({folder.name}): {total} raw entries\n")
    print("| identifier | found, judged | precision | gold in text | recall in text | gold (all) | recall (all) "
          "| found, no gold to judge |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for field in ("doi", "arxiv_id"):
        print(f"| {field} | {counts[f'{field}_judged']} | {ratio(counts[f'{field}_right'], counts[f'{field}_judged'])} "
              f"| {counts[f'{field}_in_text']} | {ratio(counts[f'{field}_in_text_found'], counts[f'{field}_in_text'])} "
              f"| {counts[f'{field}_gold']} | {ratio(counts[f'{field}_found'], counts[f'{field}_gold'])} "
              f"| {counts[f'{field}_unjudged']} |")
    print(f"\nentries with a year: {share(counts['year'], total)}; with a title: {share(counts['title'], total)}; "
          f"parsed / partial / unparsed: {counts['parsed']} / {counts['partial']} / {counts['unparsed']}; "
          f"{total / max(result['seconds'], 1e-9):.0f} entries/s")
    if show:
        for field, lines in result["misses"].items():
            for line in lines[:show]:
                print(f"- {field} {line}")
    print(f"\nunarxive: entries={total} "
          f"doi_precision={ratio(counts['doi_right'], counts['doi_judged'])} "
          f"doi_recall_in_text={ratio(counts['doi_in_text_found'], counts['doi_in_text'])} "
          f"arxiv_precision={ratio(counts['arxiv_id_right'], counts['arxiv_id_judged'])} "
          f"arxiv_recall_in_text={ratio(counts['arxiv_id_in_text_found'], counts['arxiv_id_in_text'])} "
          f"year={ratio(counts['year'], total)} title={ratio(counts['title'], total)}\n")
    return result


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "n/a"


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.1%})" if whole else "n/a"


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--s2orc", type=Path, help="S2ORC JSON of the PDF (GROBID's bib_entries)")
    arguments.add_argument("--pdf", type=Path, help="the PDF the S2ORC JSON was made from")
    arguments.add_argument("--unarxive", type=Path, help="folder of unarXive JSONL files")
    arguments.add_argument("--show", type=int, default=0, help="disagreements to list per source")
    options = arguments.parse_args(argv)
    if bool(options.s2orc) != bool(options.pdf):
        arguments.error("--s2orc and --pdf go together")
    chosen = options.s2orc or options.unarxive
    s2orc_pair = (options.s2orc, options.pdf) if options.s2orc else (None if chosen else (DEFAULT_S2ORC, DEFAULT_PDF))
    unarxive = options.unarxive or (None if chosen else DEFAULT_UNARXIVE)
    if s2orc_pair:
        if all(path.is_file() for path in s2orc_pair):
            run_s2orc(*s2orc_pair, options.show)
        else:
            print(f"{' or '.join(str(path) for path in s2orc_pair)} not found: S2ORC part skipped", file=sys.stderr)
    if unarxive:
        if unarxive.is_dir():
            run_unarxive(unarxive, options.show)
        else:
            print(f"{unarxive} not found: unarXive part skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
