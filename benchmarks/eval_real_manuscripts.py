"""Measure manuscript structure recovery and chunking on real PDFs; prints a Markdown table.

    .venv/bin/python benchmarks/eval_real_manuscripts.py [--pdfs PATH] [--headings] [--show N]

PATH defaults to `../shared/real-data/pdfs` next to the repository; the script exits cleanly (code 0,
one line on stderr) when the folder is absent. Per PDF it parses with the project's parser, chunks
with the default `ChunkingConfig`, and reports:

* pages, seconds (parse + chunk, warm), pages/s, blocks by kind, headings, chunks, median/p90 words;
* furniture in chunks: strings the parser dropped as page furniture, plus lines this script finds
  repeated at the top or bottom of two or more pages, that still occur inside a chunk;
* hyphen artefacts: "in- troduce" inside chunks (legitimate "pre- and post-" excepted), plus
  line-end compounds that lost their hyphen ("selfsupervised" where the paper writes "self-supervised");
* captions inside paragraph chunks ("... allows Figure 4: Overview ...");
* main-text blocks (before the References heading) marked appendix or reference;
* text kept: share of the text layer's words (furniture excluded) found in the chunks (section
  headings ride in them; reference and checklist chunks counted although they are not retrieval
  units by default), in the title and author block, or in figure-text blocks, which are kept in
  `parsed_manuscripts` and chunked only with their own caption;
* with ground truth next to the PDF (`<stem>.json`, S2ORC; `<stem>.groundtruth.md`, Docling):
  heading precision and recall (section titles compared without numbering, spaces or case; the
  standard names Abstract / References / Acknowledgements, which GROBID keeps out of its body
  sections, are left out on both sides), and the share of ground-truth body paragraphs under the
  chunk limit that lie in a single chunk (>= 90% of their word bigrams in one chunk; equations and
  paragraphs into which GROBID merged a float's caption are left out).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from peerify_dagster.domain.chunking import (  # noqa: E402
    ChunkingConfig,
    chunk_document,
    chunk_stats,
    estimate_tokens,
)
from peerify_dagster.domain.layout.furniture import split_furniture  # noqa: E402
from peerify_dagster.domain.layout.headings import describe_heading  # noqa: E402
from peerify_dagster.domain.layout.lines import clean_line_text  # noqa: E402
from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError  # noqa: E402

DEFAULT_PDFS = REPO_ROOT.parent / "shared" / "real-data" / "pdfs"
TARGETS = (
    "heading P/R >= 0.9; GT paragraphs in one chunk >= 90%; 0 main-text blocks as appendix/reference; "
    "0 furniture, 0 hyphen artefacts, 0 captions in paragraphs; text kept >= 98%; >= 10 pages/s"
)
_STANDARD_NAMES = re.compile(r"^(?:abstract|references|bibliography|acknowledge?ments?)$")
_SPACED_HYPHEN = re.compile(r"\b[^\W\d_]{2,}- (?!(?:and|or|nor|to|vs|as|versus)\b)[a-z]{2,}")
_GROBID_MERGED_CAPTION = re.compile(r"\b(?:Table|Figure|Fig\.) \d+ :")
_CAPTION_INSIDE = re.compile(r"(?:Figure|Fig\.|Table)\s*\d+\s*:")
_LINE_END_COMPOUND = re.compile(r"(\S+) ([^\W\d_]+)-\n([a-z]+)")


def _normal_tokens(text: str) -> list[str]:
    """Lower-case words and numbers, hyphens closed up; tokens of one or two characters (math symbols and
    subscripts, which extractors split differently: "x k" / "xk", footnote markers) are dropped."""
    text = unicodedata.normalize("NFKC", text).lower().replace("-", "")
    return [token for token in re.findall(r"[a-z]+|[0-9]+", text) if len(token) > 2]


def _heading_key(text: str) -> str:
    text = re.sub(r"^(?:appendix\s+)?(?:\d{1,2}|[A-Z]|[IVX]{1,4})(?:\.\d{1,2})*\.?\s+", "", text.strip())
    return "".join(_normal_tokens(text))


def _ground_truth(pdf: Path) -> tuple[list[str], list[str]] | None:
    """(section titles, body paragraphs) from S2ORC JSON or Docling Markdown next to the PDF, if any."""
    s2orc = pdf.with_suffix(".json")
    if s2orc.exists() and "pdf_parse" in (data := json.loads(s2orc.read_text())):
        body = data["pdf_parse"]["body_text"]
        sections = list(dict.fromkeys(paragraph["section"] for paragraph in body if paragraph["section"]))
        return sections, [paragraph["text"] for paragraph in body]
    markdown = pdf.with_name(f"{pdf.stem}.groundtruth.md")
    if markdown.exists():
        lines = [line.strip() for line in markdown.read_text().splitlines() if line.strip()]
        sections = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
        paragraphs = [line for line in lines if not line.startswith(("#", "|"))]
        return sections, paragraphs
    return None


def _bigrams(tokens: list[str]) -> set[tuple[str, str]]:
    return set(zip(tokens, tokens[1:]))


def _paragraph_in_one_chunk(
    paragraphs: list[str], chunk_texts: list[str], max_tokens: int
) -> tuple[int, int, list[str]]:
    chunk_bigrams = [_bigrams(_normal_tokens(text)) for text in chunk_texts]
    held, total, split = 0, 0, []
    for paragraph in paragraphs:
        tokens = _normal_tokens(paragraph)
        words = paragraph.split()
        # Body prose only: equations and table dumps in the ground truth are mostly symbols and numbers.
        if len(words) < 10 or estimate_tokens(paragraph) > max_tokens:
            continue
        if sum(word.isalpha() for word in words) < 0.6 * len(words):
            continue
        if _GROBID_MERGED_CAPTION.search(paragraph):
            continue  # GROBID merged a float's caption into this paragraph; no correct parse can match it
        total += 1
        wanted = _bigrams(tokens)
        best = max((len(wanted & have) / len(wanted) for have in chunk_bigrams), default=0.0)
        if best >= 0.9:
            held += 1
        else:
            split.append(paragraph)
    return held, total, split


def _repeated_band_lines(lines, page_sizes) -> set[str]:
    seen: dict[str, set[int]] = {}
    for line in lines:
        height = page_sizes[line.page][1]
        if line.y1 <= 0.1 * height or line.y0 >= 0.9 * height:
            key = re.sub(r"\s+", " ", line.text.strip().lower())
            if len(key.split()) >= 3:
                seen.setdefault(key, set()).add(line.page)
    return {key for key, pages in seen.items() if len(pages) >= 2}


def evaluate(parser: DocumentParser, pdf: Path, config: ChunkingConfig) -> dict:
    started = time.perf_counter()
    document = parser.parse(pdf)
    chunks = chunk_document(document.paper_id, document.blocks, config)
    seconds = time.perf_counter() - started
    every_chunk = chunk_document(document.paper_id, document.blocks, ChunkingConfig(strategy=config.strategy,
                                                                                    max_tokens=config.max_tokens,
                                                                                    exclude_kinds=()))
    text_layer = parser.read_pdf_text(pdf)
    lines = [line for line in text_layer.lines if clean_line_text(line.text)]
    content, furniture = split_furniture(
        [line.__class__(**{**vars(line), "text": clean_line_text(line.text)}) for line in lines], text_layer.page_sizes
    )
    chunk_texts = [chunk.text for chunk in chunks]
    lowered = [re.sub(r"\s+", " ", text.lower()) for text in chunk_texts]
    # Strings of three words or more, so that a header word such as "Processing" is not found in every chunk.
    furniture_strings = {
        re.sub(r"\s+", " ", line.text.strip().lower()) for line in furniture if len(line.text.split()) >= 3
    }
    furniture_strings |= _repeated_band_lines(lines, text_layer.page_sizes)
    furniture_hits = sorted({string for string in furniture_strings for text in lowered if string in text})
    page_text = "\n".join(line.text for line in content)
    # "Vancouver-, and Chicago- style" mid-line is the paper's own text; only joins the parser made count.
    written = {match.group(0) for match in _SPACED_HYPHEN.finditer(page_text)}
    spaced = [match.group(0) for text in chunk_texts for match in _SPACED_HYPHEN.finditer(text)
              if match.group(0) not in written]
    # A line-end compound the paper writes with a hyphen mid-line must keep it where it was broken.
    midline = page_text.replace("-\n", "~")
    hyphenated_midline = {word.lower() for word in re.findall(r"\b[^\W\d_]+-[^\W\d_]+\b", midline)}
    lost = sorted({
        f"{head}-{tail}" for before, head, tail in _LINE_END_COMPOUND.findall(page_text)
        if f"{head}-{tail}".lower() in hyphenated_midline
        and any(f"{before} {head}{tail}".lower() in text for text in lowered)
    })
    captions_inside = [
        chunk.text[:80] for chunk in chunks
        if chunk.kind in ("paragraph", "abstract", "appendix") and _CAPTION_INSIDE.search(chunk.text.split("\n", 1)[-1])
    ]
    reference_heading = next(
        (block.order for block in document.blocks
         if block.kind == "heading" and describe_heading(block.text, True).role == "references"), None
    )
    early_marked = [
        block for block in document.blocks
        if reference_heading is not None and block.order < reference_heading
        and block.kind not in ("heading", "title", "authors") and (block.in_appendix or block.kind == "reference")
    ]
    kept_text = [chunk.text for chunk in every_chunk] + [
        block.text for block in document.blocks if block.kind in ("title", "authors", "figure")
    ]
    layer = Counter(_normal_tokens(re.sub(r"([^\W\d_])-\n([a-z])", r"\1\2", page_text)))
    kept = Counter(token for text in kept_text for token in _normal_tokens(text))
    coverage = sum(min(count, kept[token]) for token, count in layer.items()) / max(sum(layer.values()), 1)
    headings = [block.text for block in document.blocks if block.kind == "heading"]
    stats = chunk_stats(chunks, config.max_tokens)
    row = {
        "file": pdf.name, "pages": document.pages, "seconds": seconds,
        "kinds": Counter(block.kind for block in document.blocks),
        "headings": headings, "chunks": len(chunks), "median": stats["median_words"], "p90": stats["p90_words"],
        "furniture": furniture_hits, "hyphens": spaced + lost, "captions": captions_inside,
        "early_marked": [block.text[:60] for block in early_marked], "coverage": coverage,
        "n_furniture_lines": len(furniture), "titles": [b.text for b in document.blocks if b.kind == "title"],
    }
    truth = _ground_truth(pdf)
    if truth:
        sections, paragraphs = truth
        gold = {_heading_key(title) for title in sections if not _STANDARD_NAMES.match(_heading_key(title))}
        ours = [_heading_key(text) for text in headings if not _STANDARD_NAMES.match(_heading_key(text))]
        matched = [key for key in ours if key in gold]
        row["precision"] = len(matched) / len(ours) if ours else 0.0
        row["recall"] = len(gold & set(ours)) / len(gold) if gold else 0.0
        row["wrong_headings"] = [text for text in headings if _heading_key(text) not in gold
                                 and not _STANDARD_NAMES.match(_heading_key(text))]
        row["missed_headings"] = sorted(gold - set(ours))
        held, total, split = _paragraph_in_one_chunk(paragraphs, [c.text for c in every_chunk], config.max_tokens)
        row["paragraphs"] = (held, total)
        row["split_paragraphs"] = split
    return row


def _kinds(counter: Counter) -> str:
    short = {"heading": "h", "paragraph": "p", "caption": "cap", "table": "tab", "figure": "fig",
             "reference": "ref", "abstract": "abs", "title": "title", "authors": "auth", "checklist": "chk"}
    return " ".join(f"{short.get(kind, kind)}{count}" for kind, count in sorted(counter.items()))


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS, help="folder of PDFs (and ground truth)")
    arguments.add_argument("--headings", action="store_true", help="list every paper's headings")
    arguments.add_argument("--show", type=int, default=3, help="examples to print per failing measure")
    options = arguments.parse_args(argv)
    pdfs = sorted(options.pdfs.glob("*.pdf")) if options.pdfs.is_dir() else []
    if not pdfs:
        print(f"no PDFs in {options.pdfs}: nothing to evaluate", file=sys.stderr)
        return 0
    parser = DocumentParser()
    config = ChunkingConfig()
    started = time.perf_counter()
    parser.parse(pdfs[0])  # warm-up: Docling import and converter construction
    warm_up = time.perf_counter() - started
    rows, failures = [], []
    for pdf in pdfs:
        try:
            rows.append(evaluate(parser, pdf, config))
        except ManuscriptParseError as error:
            failures.append(f"{pdf.name}: {error.reason}: {error.detail}")
    print("| file | pages | s | pages/s | blocks | headings | chunks | median / p90 words | furniture in chunks "
          "| hyphen artefacts | captions in paragraphs | main text as appendix/ref | text kept | heading P / R "
          "| GT paragraphs in one chunk |")
    print("|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|")
    for row in rows:
        truth = (f"{row['precision']:.2f} / {row['recall']:.2f}", "{}/{} ({:.0%})".format(
            *row["paragraphs"], row["paragraphs"][0] / max(row["paragraphs"][1], 1))) if "precision" in row else ("-", "-")
        print(f"| {row['file']} | {row['pages']} | {row['seconds']:.2f} | {row['pages'] / row['seconds']:.1f} "
              f"| {_kinds(row['kinds'])} | {len(row['headings'])} | {row['chunks']} | {row['median']:.0f} / {row['p90']:.0f} "
              f"| {len(row['furniture'])} | {len(row['hyphens'])} | {len(row['captions'])} | {len(row['early_marked'])} "
              f"| {row['coverage']:.1%} | {truth[0]} | {truth[1]} |")
    pages = sum(row["pages"] for row in rows)
    seconds = sum(row["seconds"] for row in rows)
    sizes = [row["median"] for row in rows]
    print(f"| **all** | {pages} | {seconds:.2f} | {pages / seconds:.1f} | | {sum(len(r['headings']) for r in rows)} "
          f"| {sum(r['chunks'] for r in rows)} | {statistics.median(sizes):.0f} (median of medians) | "
          f"{sum(len(r['furniture']) for r in rows)} | {sum(len(r['hyphens']) for r in rows)} | "
          f"{sum(len(r['captions']) for r in rows)} | {sum(len(r['early_marked']) for r in rows)} | "
          f"{min(r['coverage'] for r in rows):.1%} (min) | | |")
    print()
    print(f"Targets: {TARGETS}. Chunking: {config}. Warm-up (Docling import + first parse): {warm_up:.1f} s.")
    for failure in failures:
        print(f"parse error: {failure}")
    for row in rows:
        details = []
        for key, label in (("furniture", "furniture in chunks"), ("hyphens", "hyphen artefacts"),
                           ("captions", "captions in paragraphs"), ("early_marked", "main text as appendix/ref"),
                           ("wrong_headings", "headings not in the ground truth"),
                           ("missed_headings", "ground-truth headings missed"),
                           ("split_paragraphs", "ground-truth paragraphs not in one chunk")):
            if row.get(key):
                shown = [item[:90] for item in row[key][:options.show]]
                details.append(f"  {label} ({len(row[key])}): {shown}")
        if options.headings:
            details.append(f"  title: {row['titles']}")
            details.append(f"  headings: {row['headings']}")
        if details:
            print(f"\n{row['file']}:")
            print("\n".join(details))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
