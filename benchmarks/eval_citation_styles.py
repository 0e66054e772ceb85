"""Citations on real papers of every style: per PDF, the reference entries read against the ground truth's count,
how many parsed whole, the citances and markers found by style, and the markers that reach no entry (issue 34).

    .venv/bin/python benchmarks/eval_citation_styles.py [--folder FOLDER]... [--show N]

Default folders: `../shared/real-data/pdfs` and `../shared/real-data/pdfs-journals` (skipped cleanly, exit 0, when
absent). Each PDF is parsed by the project's parser (the parse cache answers a PDF parsed before), its reference
blocks read by `read_bibliography` and its prose by `detect_paper_citances`, as the `bibliography` and `citances`
assets do. The ground-truth count of entries comes from the file beside the PDF when there is one: S2ORC JSON
(`bib_entries`), GROBID TEI (`<biblStruct>` under `<back>`), JATS (`<ref>`), or Markdown (the non-empty lines after a
"References" heading); "-" where there is none. No network, no model.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from peerify_dagster.domain.citations.bibliography import read_bibliography  # noqa: E402
from peerify_dagster.domain.citations.detection import detect_paper_citances, paper_style, resolve_markers  # noqa: E402
from peerify_dagster.domain.citations.entries import PARSED  # noqa: E402

SHARED = REPO_ROOT.parent / "shared" / "real-data"
DEFAULT_FOLDERS = (SHARED / "pdfs", SHARED / "pdfs-journals")


def gold_entry_count(pdf: Path) -> int | None:
    """The number of reference entries the ground truth beside `pdf` lists, or None without one."""
    stem = pdf.with_suffix("")
    if (path := stem.with_suffix(".json")).is_file():
        paper = json.loads(path.read_text(encoding="utf-8"))
        return len((paper.get("pdf_parse") or paper).get("bib_entries") or {})
    if (path := stem.with_suffix(".tei.xml")).is_file():
        text = path.read_text(encoding="utf-8")
        return text[text.find("<back"):].count("<biblStruct") if "<back" in text else None
    if (path := stem.with_suffix(".jats.xml")).is_file():
        return len(re.findall(r"<ref[\s>]", path.read_text(encoding="utf-8")))
    if (path := stem.with_suffix(".md")).is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        starts = [index for index, line in enumerate(lines) if re.match(r"#+\s*references\s*$", line, re.IGNORECASE)]
        return sum(1 for line in lines[starts[0] + 1:] if line.strip()) if starts else None
    return None


def evaluate(pdf: Path, parser) -> dict:  # noqa: ANN001 - a DocumentParser
    blocks = parser.parse(pdf).blocks
    entries = [placed.entry for placed in read_bibliography(blocks)]
    prose = [block for block in blocks if block.kind in ("paragraph", "abstract")]
    found = detect_paper_citances([block.text for block in prose], entries)
    markers = [marker for citances in found for citance in citances for marker in citance.markers]
    unresolved = [resolved.marker.text for resolved in resolve_markers(markers, entries) if not resolved.entry_indexes]
    return {"pdf": pdf.name, "gold": gold_entry_count(pdf), "entries": len(entries),
            "parsed": sum(entry.status == PARSED for entry in entries),
            "citances": sum(len(citances) for citances in found), "markers": len(markers),
            "styles": Counter(marker.style for marker in markers), "style": paper_style(entries, markers),
            "unresolved": unresolved}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, action="append", help="a folder of PDFs (repeatable)")
    parser.add_argument("--show", type=int, default=5, help="unresolved markers listed per PDF")
    args = parser.parse_args(argv)
    folders = [folder for folder in (args.folder or DEFAULT_FOLDERS) if folder.is_dir()]
    if not folders:
        print("no PDF folder found (../shared/real-data absent?): nothing measured", file=sys.stderr)
        return 0
    from peerify_dagster.resources.document_parser import DocumentParser

    document_parser = DocumentParser()
    rows = [evaluate(pdf, document_parser) for folder in folders for pdf in sorted(folder.glob("*.pdf"))]
    print("| PDF | style | entries (gold) | parsed | citances | markers by style | markers reaching no entry |")
    print("|---|---|---:|---:|---:|---|---|")
    for row in rows:
        gold = "-" if row["gold"] is None else row["gold"]
        styles = ", ".join(f"{style} {count}" for style, count in sorted(row["styles"].items())) or "-"
        shown = "; ".join(row["unresolved"][:args.show])
        print(f"| {row['pdf'][:40]} | {row['style'] or '-'} | {row['entries']} ({gold}) | {row['parsed']} | "
              f"{row['citances']} | {styles} | {len(row['unresolved'])}{': ' + shown if shown else ''} |")
    with_gold = [row for row in rows if row["gold"] is not None]
    exact = sum(row["entries"] == row["gold"] for row in with_gold)
    print(f"summary: pdfs={len(rows)} entry_count_exact={exact}/{len(with_gold)} "
          f"entries={sum(row['entries'] for row in rows)} parsed={sum(row['parsed'] for row in rows)} "
          f"unresolved_markers={sum(len(row['unresolved']) for row in rows)}/{sum(row['markers'] for row in rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
