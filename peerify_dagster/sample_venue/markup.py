"""Parser for the tiny manuscript markup the sample venue's papers are written in.

The sources stay readable as plain text and carry exactly the structure the PDF renderer
needs; nothing more. A source looks like::

    title: A readable paper title
    layout: two-column            (optional; one-column is the default)

    abstract:
    One paragraph of abstract text.

    # 1 Introduction
    Paragraph lines are joined until a blank line.

    table: Table 1: Caption that precedes the grid.
    | Method | Recall@10 |
    | BM25   | 41.2      |
    end

    figure: Figure 1: Caption that follows the drawing.
    flow: Encoder -> Index -> Reranker
    end

    # References
    - [1] One reference per line.

Headings are `# ` lines; their level comes from the numbering ("3.2 Training setup" is level 2,
"A Additional ablations" is an appendix section, "Acknowledgments" is unnumbered). Figures are
either `flow:` (boxes joined by arrows) or `bars:` (`label=value; label=value`). A reference line
without a `[n]` label is an author-year entry (cited as "(Harrow and Okafor, 2019)"); the renderer
sets its further lines with a hanging indent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_FRONT_MATTER_KEY = re.compile(r"^(title|layout|abstract):")
_SECTION_NUMBER = re.compile(r"^(?P<number>(?:\d+|[A-Z])(?:\.\d+)*)\s+(?P<title>\S.*)$")


class ManuscriptSyntaxError(ValueError):
    """A manuscript source that the markup cannot express; the message names file and line."""


@dataclass(frozen=True)
class Heading:
    text: str

    @property
    def number(self) -> str | None:
        match = _SECTION_NUMBER.match(self.text)
        return match["number"] if match else None

    @property
    def level(self) -> int:
        number = self.number
        return 1 if number is None else number.count(".") + 1


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    caption: str
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    caption: str
    kind: str  # "flow" or "bars"
    items: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class ReferenceList:
    entries: tuple[str, ...]


Block = Heading | Paragraph | Table | Figure | ReferenceList


@dataclass(frozen=True)
class Manuscript:
    source_name: str
    title: str
    abstract: str
    two_column: bool
    blocks: tuple[Block, ...] = field(default_factory=tuple)

    @property
    def headings(self) -> list[str]:
        return [block.text for block in self.blocks if isinstance(block, Heading)]

    def paragraphs_by_section(self) -> dict[str, list[str]]:
        """Paragraph texts grouped under the heading they follow ("Abstract" for the abstract)."""
        sections: dict[str, list[str]] = {"Abstract": [self.abstract]}
        current = "Abstract"
        for block in self.blocks:
            if isinstance(block, Heading):
                current = block.text
                sections.setdefault(current, [])
            elif isinstance(block, Paragraph):
                sections[current].append(block.text)
        return sections


def _figure_items(kind: str, spec: str) -> tuple[tuple[str, float | None], ...]:
    if kind == "flow":
        return tuple((label.strip(), None) for label in spec.split("->"))
    items = []
    for pair in spec.split(";"):
        label, _, value = pair.partition("=")
        items.append((label.strip(), float(value)))
    return tuple(items)


def parse_manuscript(text: str, source_name: str) -> Manuscript:
    """Parse one manuscript source; `source_name` only labels error messages."""
    lines = text.splitlines()
    header: dict[str, str] = {}
    blocks: list[Block] = []
    abstract_lines: list[str] | None = None
    paragraph_lines: list[str] = []
    index = 0

    def fail(reason: str) -> ManuscriptSyntaxError:
        return ManuscriptSyntaxError(f"{source_name}, line {index + 1}: {reason}")

    def in_front_matter() -> bool:
        # `title:`, `layout:` and `abstract:` are only read before the abstract and the first block.
        return not blocks and abstract_lines is None and "abstract" not in header

    def flush_paragraph() -> None:
        if paragraph_lines:
            blocks.append(Paragraph(" ".join(paragraph_lines)))
            paragraph_lines.clear()

    def read_block_body() -> list[str]:
        # Tables and figures run until a line that says `end`.
        nonlocal index
        body = []
        index += 1
        while index < len(lines) and lines[index].strip() != "end":
            if lines[index].strip():
                body.append(lines[index].strip())
            index += 1
        if index == len(lines):
            raise fail("block is not closed with 'end'")
        return body

    while index < len(lines):
        line = lines[index].strip()
        if not line:
            flush_paragraph()
            if abstract_lines:
                header["abstract"] = " ".join(abstract_lines)
                abstract_lines = None
        elif in_front_matter() and _FRONT_MATTER_KEY.match(line):
            key, _, value = line.partition(":")
            if key == "abstract":
                abstract_lines = []
            else:
                header[key] = value.strip()
        elif abstract_lines is not None:
            abstract_lines.append(line)
        elif line.startswith("# "):
            flush_paragraph()
            blocks.append(Heading(line[2:].strip()))
        elif line.startswith("table:"):
            flush_paragraph()
            caption = line.removeprefix("table:").strip()
            rows = tuple(
                tuple(cell.strip() for cell in row.strip("|").split("|")) for row in read_block_body()
            )
            if not rows or len({len(row) for row in rows}) != 1:
                raise fail(f"table {caption!r} needs rows with the same number of cells")
            blocks.append(Table(caption, rows))
        elif line.startswith("figure:"):
            flush_paragraph()
            caption = line.removeprefix("figure:").strip()
            body = read_block_body()
            kind, _, spec = body[0].partition(":") if body else ("", "", "")
            if kind not in ("flow", "bars") or len(body) != 1:
                raise fail(f"figure {caption!r} needs exactly one 'flow:' or 'bars:' line")
            try:
                blocks.append(Figure(caption, kind, _figure_items(kind, spec)))
            except ValueError as error:
                raise fail(f"figure {caption!r} has a bar without a numeric value") from error
        elif line.startswith("- "):
            flush_paragraph()
            if blocks and isinstance(blocks[-1], ReferenceList):
                blocks[-1] = ReferenceList(blocks[-1].entries + (line[2:].strip(),))
            else:
                blocks.append(ReferenceList((line[2:].strip(),)))
        else:
            paragraph_lines.append(line)
        index += 1
    flush_paragraph()
    if abstract_lines:
        header["abstract"] = " ".join(abstract_lines)

    for required in ("title", "abstract"):
        if not header.get(required):
            raise ManuscriptSyntaxError(f"{source_name}: missing '{required}:'")
    layout = header.get("layout", "one-column")
    if layout not in ("one-column", "two-column"):
        raise ManuscriptSyntaxError(f"{source_name}: unknown layout {layout!r}")
    non_ascii = sorted({char for char in text if not char.isascii()})
    if non_ascii:
        # The PDF core fonts are latin-1 only; ASCII keeps extraction predictable too.
        raise ManuscriptSyntaxError(f"{source_name}: non-ASCII characters {non_ascii}")
    return Manuscript(source_name, header["title"], header["abstract"], layout == "two-column", tuple(blocks))


def load_manuscript(path: Path) -> Manuscript:
    return parse_manuscript(path.read_text(encoding="utf-8"), path.name)
