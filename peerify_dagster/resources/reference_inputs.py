"""The reference lists `peerify refs check` reads: a .bib or .bbl file, a PDF, a LaTeX source folder, a .tex file, a
source archive (.tar.gz, .tgz, .tar, .gz), or an arXiv id whose source archive is in a local folder.

Each gives its entries as ParsedEntry (the bibliography exactly as the source holds it: a .bib's fields, a .bbl's
items, a PDF's parsed reference list), the .bib entries by key where there are some (what the corrected BibTeX
rewrites), and the problems met reading it ("FILE:LINE: reason"). An input that cannot be read at all raises
ReferenceInputError naming it and the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from peerify_dagster.domain.citations.bibliography import entries_from_blocks
from peerify_dagster.domain.citations.bibtex import BibtexEntry, read_bibtex, to_parsed_entry
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.latex import (
    LatexSourceError,
    arxiv_source_files,
    bbl_entries,
    citances,
    read_bbl,
    read_latex_source,
    reference_entries,
)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".gz")
SOURCE_SUFFIXES = (".tex", ".bib", ".bbl")
# "2101.00001", "2101.00001v2", "arXiv:2101.00001", "hep-th/9901001"
ARXIV_ID = re.compile(r"(?i:arxiv:)?(\d{4}\.\d{4,5}(?:v\d+)?|[a-z-]+(?:\.[A-Z]{2})?/\d{7}(?:v\d+)?)")


class ReferenceInputError(ValueError):
    """An input `peerify refs check` cannot read; the message names it and why."""


@dataclass
class ReferenceInput:
    """A reference list read: its entries in order, the .bib entries by key (empty unless the list came from one),
    the citing sentences a LaTeX source holds (0 for the rest), and what was wrong while reading."""

    name: str
    entries: list[ParsedEntry]
    bibtex: dict[str, BibtexEntry] = field(default_factory=dict)
    citing_sentences: int = 0
    problems: list[str] = field(default_factory=list)


def _text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _from_bib(path: Path) -> ReferenceInput:
    read = read_bibtex(_text(path), path.name)
    entries = [to_parsed_entry(entry, index) for index, entry in enumerate(read.entries, start=1)]
    return ReferenceInput(path.name, entries, {entry.key: entry for entry in read.entries},
                          problems=list(read.problems))


def _from_latex(name: str, files: dict[str, str], problems: list[str]) -> ReferenceInput:
    try:
        source = read_latex_source(files)
    except LatexSourceError as error:
        raise ReferenceInputError(f"{name}: {error}") from None
    entries = reference_entries(source)
    bibtex: dict[str, BibtexEntry] = {}
    for bib in source.bibtex:
        for entry in bib.entries:
            bibtex.setdefault(entry.key, entry)
    listed = {entry.label for entry in entries}
    return ReferenceInput(name, entries, {key: entry for key, entry in bibtex.items() if key in listed},
                          len(citances(source)), [*problems, *source.problems])


def _from_folder(folder: Path) -> ReferenceInput:
    files = {path.relative_to(folder).as_posix(): _text(path) for path in sorted(folder.rglob("*"))
             if path.is_file() and path.suffix.lower() in SOURCE_SUFFIXES}
    if not files:
        raise ReferenceInputError(f"{folder}: no .tex, .bib or .bbl file in it")
    return _from_latex(folder.name, files, [])


def _from_archive(path: Path) -> ReferenceInput:
    try:
        files = arxiv_source_files(path.read_bytes(), path.name)
    except (ValueError, OSError) as error:
        raise ReferenceInputError(f"{path}: {error}") from None
    return _from_latex(path.name, dict(files), list(files.problems))


def _from_pdf(path: Path) -> ReferenceInput:
    from peerify_dagster.resources.document_parser import DocumentParser, ManuscriptParseError

    try:
        blocks = DocumentParser().parse(path).blocks
    except ManuscriptParseError as error:
        raise ReferenceInputError(f"{path}: {error}") from None
    entries = entries_from_blocks(blocks)
    problems = [] if entries else [f"{path.name}: no reference list found"]
    return ReferenceInput(path.name, entries, problems=problems)


def arxiv_archive(arxiv_id: str, folder: Path) -> Path:
    """The source archive of `arxiv_id` in `folder`: named by the id ("/" as "_" for old ids), with or without a
    version and an archive suffix."""
    match = ARXIV_ID.fullmatch(arxiv_id.strip())
    if not match:
        raise ReferenceInputError(f"{arxiv_id!r} is no arXiv id")
    stem = match.group(1).replace("/", "_")
    bare = re.sub(r"v\d+$", "", stem)
    candidates = [folder / f"{name}{suffix}" for name in dict.fromkeys((stem, bare))
                  for suffix in ("", *ARCHIVE_SUFFIXES)]
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        raise ReferenceInputError(f"arXiv {arxiv_id}: no source archive in {folder} (looked for "
                                  f"{', '.join(path.name for path in candidates[:3])}, ...); download it from arXiv's "
                                  "/src/ID page there first")
    return found


def read_reference_input(target: str, arxiv_sources: Path | None = None) -> ReferenceInput:
    """The reference list of `target` (a path, or an arXiv id looked up in `arxiv_sources`)."""
    path = Path(target).expanduser()
    if not path.exists() and ARXIV_ID.fullmatch(target.strip()):
        if arxiv_sources is None:
            raise ReferenceInputError(f"{target} is an arXiv id: give --arxiv-sources FOLDER holding its source "
                                      "archive (nothing is downloaded)")
        path = arxiv_archive(target, arxiv_sources)
    if not path.exists():
        raise ReferenceInputError(f"{target}: no such file or folder")
    name = path.name.lower()
    if path.is_dir():
        return _from_folder(path)
    if name.endswith(".bib"):
        return _from_bib(path)
    if name.endswith(".bbl"):
        items = read_bbl(_text(path))
        return ReferenceInput(path.name, bbl_entries(items))
    if name.endswith(".tex"):
        return _from_folder(path.parent)
    if name.endswith(".pdf"):
        return _from_pdf(path)
    if name.endswith(ARCHIVE_SUFFIXES):
        return _from_archive(path)
    raise ReferenceInputError(f"{target}: not a .bib, .bbl, .tex, .pdf, source archive or folder")
