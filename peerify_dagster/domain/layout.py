"""Recover a manuscript's logical structure from positioned text lines.

The model-free PDF path (see `peerify_dagster.resources.document_parser`) yields text lines with
a box, a font size, bold/italic flags and no structure. This module rebuilds the structure with
the cues a reader uses, always several together, never one alone:

* page furniture: lines repeated at the same height on many pages (running headers and footers,
  digits ignored), bare page numbers alone on their row in the top/bottom band, small print
  outside the text block that the body text of all pages defines (conference footers), and
  vertical margin stamps; it is removed everywhere;
* reading order: a page is two-column when both halves hold several wide lines; full-width lines
  (title, abstract, wide floats) split the page into bands, read left column first;
* title and author block: the largest lines opening page 1, then the short lines up to the
  abstract or first section; an unlabelled abstract is the prose between them and that section;
* headings: a short line at a block start, set bold, larger or in capitals, whose text reads
  like a title (letters, no formula or number grid), and which is numbered in sequence, is a
  standard section name, or stands alone with space around it; a line that opens in bold or
  italic and continues in the regular face is a run-in heading and stays the first words of its
  paragraph; glued heading words ("RelatedWork") are split with a vocabulary of section words;
* floats: tables are runs of rows made of separated cells or of numbers; figure text is text
  inside an image or a run of non-prose rows next to a figure caption; captions ("Figure 2:",
  "Table 1.") are always their own blocks; a paragraph interrupted by a float or a footnote at a
  column end continues after it;
* paragraphs: lines join until vertical space, a short line ending a sentence, a first-line
  indent, a list marker or a run-in heading; the font size is the words' typical height, so a
  superscript footnote marker never breaks a paragraph; a word hyphenated at a line end is
  re-joined, keeping the hyphen of real compounds ("self-supervised", "state-of-the-art") and
  of "pre- and post-training";
* sections: the appendix starts at an appendix heading after the main text, or at a lettered
  section after the references or after a section that closes the main text (Conclusion,
  Acknowledgments, ...), never mid-paper; the references section is kept whole, one entry per
  block (hanging indents), and never counts as appendix; a paper checklist is marked so that
  chunking can leave it out.

`assemble_blocks` is shared with the parsers that already know the element kinds (Docling's
HTML/Markdown backends and its layout model): it assigns section paths and the
abstract/reference/appendix/checklist roles the same way for every input format.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# Bumped whenever a rule here changes the blocks produced, so dependent assets go stale.
LAYOUT_VERSION = "2"

BLOCK_KINDS = (
    "title", "authors", "abstract", "heading", "paragraph", "caption", "table", "figure", "reference", "checklist",
)

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 from the page's top-left corner


@dataclass(frozen=True)
class TextLine:
    """One line of text on a page; coordinates in points, origin at the page's top-left.

    `font_size` is the typical height of the line's words; `lead_emphasis` counts the words at the
    line's start set in bold or italic when the rest of the line is not (a run-in heading).
    """

    page: int
    x0: float
    y0: float
    x1: float
    y1: float
    font_size: float
    bold: bool
    text: str
    italic: bool = False
    lead_emphasis: int = 0

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def width(self) -> float:
        return self.x1 - self.x0


@dataclass
class Block:
    """A logical unit of the manuscript in reading order."""

    kind: str
    text: str
    page: int
    section_path: list[str]
    in_appendix: bool
    order: int


@dataclass(frozen=True)
class LayoutElement:
    """A typed element before section assignment; `level_hint` is a heading level a parser knew."""

    kind: str  # one of BLOCK_KINDS except "reference" / "checklist", which come from the section
    text: str
    page: int
    level_hint: int | None = None


# --- Heading text ----------------------------------------------------------------------------

_SECTION_NUMBER = re.compile(
    r"^(?:(?P<appendix>Appendix)\s+)?(?P<number>(?:\d{1,2}|[A-Z]|[IVX]{1,4})(?:\.\d{1,2}){0,3})\.?(?::\s*|\s+)"
    r"(?P<title>\S.*)$"
)
_ABSTRACT_NAMES = {"abstract"}
_REFERENCE_NAMES = {"references", "bibliography", "literature cited", "references and notes", "works cited"}
_APPENDIX_NAMES = {
    "appendix", "appendices", "supplementary material", "supplementary materials", "supplemental material",
    "supplemental materials", "technical appendices", "technical appendix", "supplementary information",
    "appendix and supplementary material",
}
_CHECKLIST_NAMES = {
    "checklist", "paper checklist", "neurips paper checklist", "neurips checklist", "reproducibility checklist",
    "responsible nlp research checklist", "responsible nlp checklist",
}
_OTHER_TOP_LEVEL_NAMES = {
    "introduction", "related work", "related works", "background", "preliminaries", "method", "methods",
    "methodology", "approach", "experiments", "experimental setup", "experimental results", "results",
    "evaluation", "analysis", "discussion", "conclusion", "conclusions", "conclusion and future work",
    "conclusions and future work", "summary", "future work", "limitations", "acknowledgments", "acknowledgements",
    "acknowledgment", "acknowledgement", "broader impact", "broader impacts", "impact statement",
    "ethics statement", "ethical considerations", "reproducibility statement", "author contributions",
    "funding", "data availability", "code availability", "background and related work", "results and discussion",
}
# Sections that close the main text: a lettered section after one of them is an appendix.
_END_OF_MAIN_TEXT_NAMES = {
    "conclusion", "conclusions", "conclusion and future work", "conclusions and future work", "limitations",
    "acknowledgments", "acknowledgements", "acknowledgment", "acknowledgement", "broader impact",
    "broader impacts", "impact statement", "ethics statement", "ethical considerations",
    "reproducibility statement", "author contributions",
}
_TOP_LEVEL_NAMES = _ABSTRACT_NAMES | _REFERENCE_NAMES | _APPENDIX_NAMES | _CHECKLIST_NAMES | _OTHER_TOP_LEVEL_NAMES
# Words that make up section names, for splitting headings whose spaces the PDF lost ("RelatedWork").
_HEADING_VOCABULARY = frozenset(
    word for name in _TOP_LEVEL_NAMES for word in name.split()
) | frozenset(
    "and of the for in on with to a an work works study studies data dataset datasets model models training "
    "implementation details setup settings overview problem formulation statement task tasks additional "
    "ablation ablations case error human annotation proof proofs theory theoretical system design user "
    "qualitative quantitative comparison main baseline baselines metrics evaluation performance other".split()
)


@dataclass(frozen=True)
class HeadingInfo:
    """What a heading's text says about its place: numbering depth and role."""

    number: str | None
    depth: int | None  # None when the text alone does not fix the depth
    role: str  # "abstract" | "references" | "appendix" | "checklist" | "section"
    starts_appendix: bool


def _plain_name(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().rstrip(".:").lower())


def is_known_section_name(text: str) -> bool:
    """True for the standard unnumbered section names (Abstract, References, Appendix, ...)."""
    return _plain_name(text) in _TOP_LEVEL_NAMES


def _split_number(text: str) -> tuple[str | None, str]:
    match = _SECTION_NUMBER.match(text.strip())
    if not match:
        return None, text.strip()
    return match["number"], match["title"]


def describe_heading(text: str, letters_are_numbers: bool) -> HeadingInfo:
    """Classify a heading; letter numbering ("A Proofs") only counts where appendices may start,
    since otherwise "A Simple Baseline" would read as appendix A."""
    name = _plain_name(text)
    if name in _ABSTRACT_NAMES:
        return HeadingInfo(None, 1, "abstract", False)
    if name in _REFERENCE_NAMES:
        return HeadingInfo(None, 1, "references", False)
    if name in _APPENDIX_NAMES:
        return HeadingInfo(None, 1, "appendix", True)
    if name in _CHECKLIST_NAMES:
        return HeadingInfo(None, 1, "checklist", False)
    match = _SECTION_NUMBER.match(text.strip())
    if match:
        number = match["number"]
        title_role = "checklist" if _plain_name(match["title"]) in _CHECKLIST_NAMES else "section"
        if match["appendix"]:
            return HeadingInfo(number, number.count(".") + 1, "appendix", True)
        if number[0].isdigit():
            return HeadingInfo(number, number.count(".") + 1, title_role, False)
        if letters_are_numbers and re.fullmatch(r"[A-Z](?:\.\d{1,2})*", number):
            return HeadingInfo(number, number.count(".") + 1, title_role, True)
    if name in _OTHER_TOP_LEVEL_NAMES:
        return HeadingInfo(None, 1, "section", False)
    return HeadingInfo(None, None, "section", False)


def _segment(token: str, vocabulary: frozenset[str]) -> list[str] | None:
    """Split a glued token into known words (fewest words, none shorter than two letters), or None."""
    lower = token.lower()
    best: list[list[str] | None] = [[]] + [None] * len(lower)
    for end in range(2, len(lower) + 1):
        for start in range(max(0, end - 20), end - 1):
            if best[start] is not None and lower[start:end] in vocabulary:
                candidate = best[start] + [token[start:end]]
                if best[end] is None or len(candidate) < len(best[end]):
                    best[end] = candidate
    return best[-1]


def unglue_heading(text: str, vocabulary: Vocabulary | None = None) -> str:
    """Restore spaces a PDF dropped between heading words: "2 RelatedWork" -> "2 Related Work".

    A token is split only when the document never writes it as one word and its parts are section
    words or words the document writes ("ExtractingMetadata" in a paper that says "extracting" and
    "metadata"; "PaperMage" stays whole in a paper that writes "PaperMage").
    """
    known = _HEADING_VOCABULARY | (vocabulary.words if vocabulary else frozenset())

    def split(part: str) -> str:
        if part.lower() in known:
            return part
        camel = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", part)
        if len(camel) > 1 and "".join(camel) == part:
            # "ExtractingMetadata": split at the capitals when every piece is a known word.
            return " ".join(camel) if all(piece.lower() in known for piece in camel) else part
        if len(part) < 10 or not (part.isupper() or part.islower()):
            return part
        # "BACKGROUNDANDRELATEDWORK": the fewest known words, none a fragment shorter than four letters.
        words = _segment(part, known)
        if words and len(words) > 1 and all(len(word) >= 4 or word.lower() in _GLUE_WORDS for word in words):
            return " ".join(words)
        return part

    return " ".join(
        re.sub(r"[^\W\d_]+", lambda match: split(match.group(0)), word) for word in text.split(" ")
    )


_GLUE_WORDS = {"and", "of", "the", "for", "with", "in", "on", "to", "via", "from", "by", "its", "our"}


# --- Text clean-up ---------------------------------------------------------------------------

_LIGATURES = str.maketrans({
    "\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb05": "st", "\ufb06": "st",
    "\u00ad": "",
})
_UNREADABLE = re.compile(r"[\ue000-\uf8ff\ufffd]|GLYPH<[^>]*>|\(cid:\d+\)")


def normalise_whitespace(text: str) -> str:
    return re.sub(r"[ \t\r\f\v]+", " ", text.translate(_LIGATURES)).strip()


def unreadable_share(text: str) -> float:
    """Share of a text's characters that are glyphs without a Unicode mapping (broken font encodings)."""
    stripped = re.sub(r"\s+", "", text)
    if not stripped:
        return 0.0
    return sum(len(match) for match in _UNREADABLE.findall(stripped)) / len(stripped)


def clean_line_text(text: str) -> str:
    """Ligatures expanded, unmapped glyphs dropped, whitespace collapsed."""
    return normalise_whitespace(_UNREADABLE.sub("", text))


_CAPTION = re.compile(
    r"^(?:Figure|Fig\.|Table|Tab\.|Algorithm|Listing)\s*(?:\d+|[A-Z]\.?\d+)(?:\s*\([a-z]\))?\s*(?P<mark>[:.|])"
)


def is_caption(text: str) -> bool:
    return bool(_CAPTION.match(text))


# --- De-hyphenation --------------------------------------------------------------------------

_LINE_END_HYPHEN = re.compile(r"(?P<head>[^\s\-]*(?:-[^\s\-]+)*?[^\W\d_])-$")
_KEEPS_SPACE_AFTER_HYPHEN = {"and", "or", "nor", "to", "vs", "as", "versus"}
_FUNCTION_WORDS = {"the", "of", "to", "and", "in", "a", "on", "by", "for", "or", "at"}
# Prefixes that English technical writing joins with a hyphen, whatever the line breaking did.
_HYPHEN_PREFIXES = {"self", "cross", "semi", "quasi", "well", "half", "ill", "all", "pseudo"}
_WORD = re.compile(r"[^\W_](?:[\w'’]*[^\W_])?(?:-[^\W_](?:[\w'’]*[^\W_])?)*")


@dataclass(frozen=True)
class Vocabulary:
    """How the document itself writes words in the middle of lines: hyphenated or closed up."""

    words: frozenset[str] = frozenset()

    @classmethod
    def of(cls, texts: Iterable[str]) -> Vocabulary:
        words: set[str] = set()
        previous = ""
        for text in texts:
            tokens = _WORD.findall(text)
            # A word broken across lines leaves fragments: the last token, and the first after a hyphen.
            for token in tokens[1 if previous.endswith("-") else 0:-1]:
                words.add(token.lower())
                words.update(part.lower() for part in token.split("-") if "-" in token)
            previous = text
        return cls(frozenset(words))


def join_lines(left: str, right: str, vocabulary: Vocabulary = Vocabulary()) -> str:
    """Join two wrapped lines, undoing a hyphen that only split a word at the line end."""
    if not left:
        return right
    if not right:
        return left
    match = _LINE_END_HYPHEN.search(left)
    if not match:
        return f"{left} {right}"
    head = match["head"]
    first = right.split(" ", 1)[0]
    tail_match = re.match(r"[^\W_][\w'’]*", first)
    if not tail_match:
        return f"{left} {right}"
    tail = tail_match.group(0)
    if tail.lower() in _KEEPS_SPACE_AFTER_HYPHEN:
        return f"{left} {right}"  # "pre- and post-training"
    hyphenated, closed = f"{head}-{tail}".lower(), f"{head}{tail}".lower()
    keep = (
        not tail[0].islower()  # "GPT-4", "Multi-LexSum"
        or hyphenated in vocabulary.words
        or (closed not in vocabulary.words and (
            ("-" in head and head.rsplit("-", 1)[-1].lower() in _FUNCTION_WORDS)  # "state-of-the-art", "end-to-end"
            or head.lower() in _HYPHEN_PREFIXES
        ))
    )
    return f"{left}{right}" if keep else f"{left[:-1]}{right}"


# --- Assembly shared by every input format ---------------------------------------------------


@dataclass
class _SectionState:
    path: list[str] = field(default_factory=list)
    role: str = "front"
    in_appendix: bool = False
    seen_sections: bool = False
    seen_references: bool = False
    seen_end_of_main_text: bool = False
    numbered_depth: int = 0
    min_level_hint: int | None = None

    def enter(self, text: str, level_hint: int | None) -> None:
        # Letters number sections only where an appendix may start: after the references, an appendix heading
        # or a section that closes the main text (Conclusion, Acknowledgments, ...), never mid-paper.
        info = describe_heading(
            text, letters_are_numbers=self.seen_references or self.in_appendix or self.seen_end_of_main_text
        )
        depth = info.depth
        if depth is None:
            if level_hint is not None and self.min_level_hint is not None:
                depth = level_hint - self.min_level_hint + 1
            else:
                # An unnumbered heading inside a numbered section is that section's subsection.
                depth = self.numbered_depth + 1
        if info.number is not None:
            self.numbered_depth = depth
        elif depth == 1:
            self.numbered_depth = 0
        depth = max(1, min(depth, len(self.path) + 1))
        self.path = self.path[: depth - 1] + [text]
        # An appendix heading opening the paper (a supplement-only PDF) still marks what follows.
        if info.starts_appendix and (self.seen_sections or self.seen_references or info.role == "appendix"):
            self.in_appendix = True
        if info.role == "references" and depth == 1:
            # The reference list is not appendix, even after one; a lettered section after it starts one again.
            self.seen_references, self.in_appendix = True, False
        if _plain_name(_split_number(text)[1]) in _END_OF_MAIN_TEXT_NAMES:
            self.seen_end_of_main_text = True
        if depth == 1:
            self.role = info.role
        self.seen_sections = self.seen_sections or info.role == "section"


def assemble_blocks(elements: Iterable[LayoutElement]) -> list[Block]:
    """Assign section paths, appendix flags and abstract/reference/checklist kinds to typed elements."""
    elements = [element for element in elements if normalise_whitespace(element.text)]
    state = _SectionState()
    hints = [element.level_hint for element in elements if element.kind == "heading" and element.level_hint]
    state.min_level_hint = min(hints) if hints else None
    blocks: list[Block] = []
    for element in elements:
        text = normalise_whitespace(element.text) if element.kind != "table" else element.text.strip()
        kind = element.kind
        if kind == "heading":
            state.enter(text, element.level_hint)
        elif kind == "paragraph":
            if is_caption(text):
                kind = "caption"
            elif state.role == "references":
                kind = "reference"
            elif state.role == "abstract":
                kind = "abstract"
            elif state.role == "checklist":
                kind = "checklist"
        elif kind in ("table", "figure") and state.role == "checklist":
            kind = "checklist"
        blocks.append(Block(kind, text, element.page, list(state.path), state.in_appendix, len(blocks)))
    return blocks


# --- Fonts -----------------------------------------------------------------------------------

_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi|medi(?:um)?\b|-medi|cmbx|sfbx|\bbx|,b\b", re.IGNORECASE)
_ITALIC_FONT = re.compile(r"ital|oblique|cmti|sfti|cmsl", re.IGNORECASE)
# Style suffixes after the family name: LinBiolinumTB (bold), LinLibertineTI (italic), ...TBI, Foo-B, Foo-It.
_BOLD_SUFFIX = re.compile(r"(?<=[a-z])T?BI?$|-BI?$")
_ITALIC_SUFFIX = re.compile(r"(?<=[a-z])T?B?I$|-B?It?$")


@functools.lru_cache(maxsize=1024)
def is_bold_font(font_name: str) -> bool:
    """Infer weight from a PDF font name (Helvetica-Bold, NimbusRomNo9L-Medi, CMBX10, LinBiolinumTB, ...)."""
    name = font_name.split("+")[-1]
    return bool(_BOLD_FONT.search(name) or _BOLD_SUFFIX.search(name))


@functools.lru_cache(maxsize=1024)
def is_italic_font(font_name: str) -> bool:
    """Infer slant from a PDF font name (Times-Italic, NimbusRomNo9L-ReguItal, CMTI10, LinLibertineTI, ...)."""
    name = font_name.split("+")[-1]
    return bool(_ITALIC_FONT.search(name) or _ITALIC_SUFFIX.search(name))


# --- Page furniture --------------------------------------------------------------------------

_PAGE_NUMBER = re.compile(r"^(?:page\s*)?(?:\d{1,4}|[ivxlc]{1,6})(?:\s*(?:of|/)\s*\d{1,4})?$", re.IGNORECASE)
_FURNITURE_BAND = 0.15  # running heads and page numbers live in the top and bottom 15% of a page
_FOOTNOTE_MARKER = re.compile(r"^(?:\d{1,2}|[*†‡§¶]+|[a-z])\s?\S")


def _dominant_font_size(lines: Sequence[TextLine]) -> float:
    weights: Counter[float] = Counter()
    for line in lines:
        weights[round(line.font_size * 2) / 2] += len(line.text)
    return weights.most_common(1)[0][0] if weights else 10.0


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def _signature(text: str) -> str:
    return re.sub(r"\d+", "#", re.sub(r"\s+", "", text.lower()))


def split_furniture(
    lines: Sequence[TextLine], page_sizes: Mapping[int, tuple[float, float]]
) -> tuple[list[TextLine], list[TextLine]]:
    """Split lines into (content, page furniture): running headers/footers, page numbers, margin stamps and
    small print outside the text block. Every page's lines take part, so the rules need no page count."""
    body_size = _dominant_font_size(lines)
    n_pages = len({line.page for line in lines})

    def in_band(line: TextLine) -> bool:
        height = page_sizes[line.page][1]
        return line.y1 <= height * _FURNITURE_BAND or line.y0 >= height * (1 - _FURNITURE_BAND)

    furniture: set[int] = set()
    for index, line in enumerate(lines):
        if line.height > 2 * line.width and len(line.text) > 3:
            furniture.add(index)  # vertical margin stamps (arXiv identifiers, line numbers)
    # Running headers and footers: the same text (digits aside) at the same height on many pages.
    positions: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    for index, line in enumerate(lines):
        if in_band(line) and index not in furniture:
            positions[_signature(line.text)].append((line.page, (line.y0 + line.y1) / 2, index))
    for occurrences in positions.values():
        if len({page for page, _, _ in occurrences}) < 2:
            continue
        centre = statistics.median(y for _, y, _ in occurrences)
        tolerance = 0.015 * max(size[1] for size in page_sizes.values())
        aligned = [(page, index) for page, y, index in occurrences if abs(y - centre) <= tolerance]
        if len({page for page, _ in aligned}) >= max(2, 0.25 * n_pages):
            furniture.update(index for _, index in aligned)
    # Page numbers: a bare number alone on its row, in the top or bottom band or, where the numbers found there
    # keep a constant offset from the page index, anywhere in the outer quarter of the page (a first page
    # numbered lower than the rest).
    by_page: dict[int, list[int]] = defaultdict(list)
    for index, line in enumerate(lines):
        by_page[line.page].append(index)

    def alone(index: int) -> bool:
        line = lines[index]
        return not any(
            other != index and lines[other].y0 < line.y1 and lines[other].y1 > line.y0 for other in by_page[line.page]
        )

    offsets = Counter(
        int(line.text) - line.page for line in lines if re.fullmatch(r"\d{1,4}", line.text.strip()) and in_band(line)
    )
    for index, line in enumerate(lines):
        if index in furniture or not _PAGE_NUMBER.match(line.text.strip()) or not alone(index):
            continue
        height = page_sizes[line.page][1]
        outer = line.y1 <= 0.25 * height or line.y0 >= 0.75 * height
        numbered_in_sequence = line.text.strip().isdigit() and offsets[int(line.text) - line.page] >= 2 and outer
        if in_band(line) or numbered_in_sequence:
            furniture.add(index)
    # Small print beyond the text block that body lines span on most pages (first-page venue footers).
    tops, bottoms = [], []
    for page, indexes in by_page.items():
        width = page_sizes[page][0]
        body = [
            lines[index] for index in indexes
            if index not in furniture and abs(lines[index].font_size - body_size) <= 0.12 * body_size
            and lines[index].width >= 0.2 * width
        ]
        if len(body) >= 3:
            tops.append(min(line.y0 for line in body))
            bottoms.append(max(line.y1 for line in body))
    if bottoms:
        block_top, block_bottom = _percentile(tops, 0.1), _percentile(bottoms, 0.9)

        def isolated(index: int) -> bool:
            """Nothing but furniture within a line and a half above (a footnote's second line is not isolated)."""
            line = lines[index]
            above = [lines[other] for other in by_page[line.page] if other != index and other not in furniture
                     and lines[other].y1 <= line.y0 + 1 and lines[other].x0 < line.x1 and lines[other].x1 > line.x0]
            return not above or line.y0 - max(other.y1 for other in above) > 1.5 * line.height

        for index in sorted(range(len(lines)), key=lambda item: (lines[item].page, lines[item].y0)):
            line = lines[index]
            if index in furniture or not in_band(line) or line.font_size > body_size * 1.05:
                continue
            below = line.y0 > block_bottom + 0.8 * body_size and line.font_size < body_size * 0.95 \
                and not _FOOTNOTE_MARKER.match(line.text) and isolated(index)
            above = line.y1 < block_top - 0.8 * body_size
            if below or above:
                furniture.add(index)
    content = [line for index, line in enumerate(lines) if index not in furniture]
    return content, [lines[index] for index in sorted(furniture)]


# --- Lines to rows ---------------------------------------------------------------------------


@dataclass
class _Row:
    """Lines sharing a baseline within one column; `cells` are the widely separated runs."""

    page: int
    column: int  # 0: full width or single column, 1: left, 2: right
    lines: list[TextLine]
    cells: list[str]

    @property
    def text(self) -> str:
        return " ".join(self.cells)

    @property
    def x0(self) -> float:
        return min(line.x0 for line in self.lines)

    @property
    def x1(self) -> float:
        return max(line.x1 for line in self.lines)

    @property
    def y0(self) -> float:
        return min(line.y0 for line in self.lines)

    @property
    def y1(self) -> float:
        return max(line.y1 for line in self.lines)

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def font_size(self) -> float:
        weights = [max(len(line.text), 1) for line in self.lines]
        return sum(line.font_size * weight for line, weight in zip(self.lines, weights)) / sum(weights)

    def _share(self, attribute: str) -> float:
        total = sum(len(line.text) for line in self.lines) or 1
        return sum(len(line.text) for line in self.lines if getattr(line, attribute)) / total

    @property
    def bold(self) -> bool:
        return self._share("bold") >= 0.8

    @property
    def italic(self) -> bool:
        return self._share("italic") >= 0.8

    @property
    def lead_emphasis(self) -> int:
        first = min(self.lines, key=lambda line: line.x0)
        return first.lead_emphasis if len(self.lines) == 1 else (
            len(first.text.split()) if (first.bold or first.italic) and not self.bold else first.lead_emphasis
        )


def _column_of(line: TextLine, page_width: float) -> int:
    middle, tolerance = page_width / 2, page_width * 0.02
    if line.x1 <= middle + tolerance:
        return 1
    if line.x0 >= middle - tolerance:
        return 2
    return 0


def _is_two_column(lines: Sequence[TextLine], page_width: float) -> bool:
    wide = page_width * 0.25
    counts = Counter(_column_of(line, page_width) for line in lines if line.width >= wide)
    return counts[1] >= 3 and counts[2] >= 3


def _rows_of(lines: list[TextLine], column: int, page: int) -> list[_Row]:
    rows: list[list[TextLine]] = []
    for line in sorted(lines, key=lambda item: (item.y0, item.x0)):
        if rows:
            current = rows[-1]
            centre = (line.y0 + line.y1) / 2
            row_centre = sum((member.y0 + member.y1) / 2 for member in current) / len(current)
            same_baseline = abs(centre - row_centre) <= 0.5 * min(line.height, min(m.height for m in current))
            # A raised or lowered marker set apart by the PDF ("word", "2") belongs to the row it touches.
            marker = len(line.text) <= 3 and line.font_size < 0.85 * max(m.font_size for m in current) and any(
                line.y0 < member.y1 and line.y1 > member.y0 for member in current
            )
            if same_baseline or marker:
                current.append(line)
                continue
        rows.append([line])
    return [_Row(page, column, members, _cells_of(members)) for members in rows]


def _cells_of(members: list[TextLine]) -> list[str]:
    # Runs closer than a font size are one line split by a font change; wider gaps separate cells.
    ordered = sorted(members, key=lambda line: line.x0)
    cells = [[ordered[0]]]
    for line in ordered[1:]:
        previous = cells[-1][-1]
        if line.x0 - previous.x1 <= max(line.font_size, previous.font_size):
            cells[-1].append(line)
        else:
            cells.append([line])
    return [normalise_whitespace(" ".join(line.text for line in cell)) for cell in cells]


def _order_page(lines: list[TextLine], page: int, page_width: float) -> list[_Row]:
    if not _is_two_column(lines, page_width):
        return _rows_of(lines, 0, page)
    groups: list[tuple[int, list[TextLine]]] = []
    full_width: list[TextLine] = []
    band: dict[int, list[TextLine]] = {1: [], 2: []}
    for line in sorted(lines, key=lambda item: (item.y0, item.x0)):
        column = _column_of(line, page_width)
        if column == 0:
            if band[1] or band[2]:
                groups += [(1, band[1]), (2, band[2])]
                band = {1: [], 2: []}
            full_width.append(line)
        else:
            if full_width:
                groups.append((0, full_width))
                full_width = []
            band[column].append(line)
    groups += [(0, full_width), (1, band[1]), (2, band[2])]
    return [row for column, members in groups if members for row in _rows_of(members, column, page)]


# --- Rows to elements ------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"[.!?:][\"'’”)\]]*$")
_REFERENCE_ENTRY_START = re.compile(r"^(?:\[\d{1,3}\]|\d{1,3}\.\s+[A-Z])")
_NUMERIC_TOKEN = re.compile(r"^[(\[]?[-+\u2212\u00b1]?\d+(?:[.,]\d+)*%?[)\]]?[*†‡]?$")
_RUN_IN_ABSTRACT = re.compile(r"^Abstract\s*[.:\u2014\u2013-]\s*(?=\S)")
_LIST_MARKER = re.compile(
    r"^(?:[•●◦▪‣∙·\-–]\s|\(?(?:[a-z]|[ivx]{1,4}|\d{1,2})\)\s|(?:\d{1,2}|[IVX]{1,4}|[A-Za-z])[.)]\s)"
)
_MATH = re.compile(r"[=<>≤≥∈∉∩∪⊂⊆∑∏∫√∞≈≠±×÷∀∃→←↔⇒|^_{}\\]")
_FRONT_MATTER_LABEL = re.compile(
    r"^(?:CCS Concepts|Keywords|Key ?words|Index Terms|Additional Key Words|ACM Reference Format)\b", re.IGNORECASE
)


def _reads_like_title(text: str) -> bool:
    """Text that could be a heading: mostly letters, at least one real word, no formula and no open sentence."""
    if _MATH.search(text) or re.search(r"https?://|www\.|@|et al\.", text):
        return False
    letters = sum(character.isalpha() for character in text)
    if letters < 3 or letters < 0.6 * len(text.replace(" ", "")):
        return False
    if not re.search(r"[^\W\d_]{3,}", text) or re.search(r"[,;]$", text):
        return False
    tokens = text.split()
    return sum(bool(_NUMERIC_TOKEN.match(token)) for token in tokens) <= max(1, len(tokens) // 4)


def _is_capitalised(title: str) -> bool:
    first = re.search(r"[^\W\d_]", title)
    return bool(first) and first.group(0).isupper()


def _is_all_caps(title: str) -> bool:
    letters = [character for character in title if character.isalpha()]
    return len(letters) >= 4 and all(character.isupper() for character in letters)


@dataclass
class _OpenBlock:
    """A paragraph or caption still collecting lines."""

    kind: str
    text: str
    rows: list[_Row]
    slot: int | None = None  # the element index it fills when a float interrupted it
    footnote: bool = False

    @property
    def last_row(self) -> _Row:
        return self.rows[-1]

    @property
    def right_edge(self) -> float:
        return max(row.x1 for row in self.rows)


@dataclass
class _Column:
    """The text edges of one column band of a page, from its body-size rows."""

    left: float
    right: float


class _ElementBuilder:
    """Walks rows in reading order and emits typed elements."""

    def __init__(
        self, rows: list[_Row], body_size: float, vocabulary: Vocabulary, image_boxes: Mapping[int, Sequence[Box]]
    ) -> None:
        self.rows = rows
        self.body_size = body_size
        self.vocabulary = vocabulary
        self.image_boxes = image_boxes
        self.line_gap = self._typical_line_gap()
        self.columns = self._column_edges()
        self.elements: list[LayoutElement] = []
        self.open: _OpenBlock | None = None
        # A paragraph that a float or footnote interrupted before its sentence ended, waiting for its next line.
        self.pending: _OpenBlock | None = None
        self.seen_heading = False
        self.in_references = False
        self._heading_answers: dict[tuple[int, bool, tuple[int, ...] | None], bool] = {}
        self.last_number: tuple[int, ...] | None = None
        self.numbered_paper = self._count_numbered_candidates() >= 2

    # Measurements -------------------------------------------------------------------------

    def _typical_line_gap(self) -> float:
        gaps = [
            below.y0 - above.y1
            for above, below in zip(self.rows, self.rows[1:])
            if (above.page, above.column) == (below.page, below.column)
            and 0 <= below.y0 - above.y1 <= 2 * above.height
            and abs(above.font_size - self.body_size) < 0.1 * self.body_size
        ]
        return statistics.median(gaps) if gaps else 0.4 * self.body_size

    def _column_edges(self) -> dict[tuple[int, int], _Column]:
        groups: dict[tuple[int, int], list[_Row]] = defaultdict(list)
        for row in self.rows:
            groups[(row.page, row.column)].append(row)
        edges = {}
        for key, rows in groups.items():
            body = [row for row in rows if abs(row.font_size - self.body_size) < 0.15 * self.body_size] or rows
            widest = max(row.x1 - row.x0 for row in body)
            wide = [row for row in body if row.x1 - row.x0 >= 0.6 * widest] or body
            edges[key] = _Column(
                _percentile([row.x0 for row in wide], 0.05), _percentile([row.x1 for row in wide], 0.8)
            )
        return edges

    def _column(self, row: _Row) -> _Column:
        return self.columns[(row.page, row.column)]

    def _count_numbered_candidates(self) -> int:
        return sum(
            1 for row in self.rows
            if (row.bold or row.font_size >= 1.1 * self.body_size)
            and re.match(r"^\d{1,2}(?:\.\d{1,2})*\.?\s+[A-Z]", row.text) and len(row.text.split()) <= 12
        )

    def _gap_above(self, index: int) -> float | None:
        """Vertical space above the row; None when it opens its column (nothing above it in reading order)."""
        row = self.rows[index]
        if index == 0:
            return None
        above = self.rows[index - 1]
        if (above.page, above.column) != (row.page, row.column) or above.y1 > row.y0 + 1:
            return None
        return row.y0 - above.y1

    def _spaced_above(self, index: int) -> bool:
        gap = self._gap_above(index)
        return gap is None or gap > self.line_gap + 0.35 * self.body_size

    def _spaced_below(self, index: int) -> bool:
        if index + 1 >= len(self.rows):
            return True
        gap = self._gap_above(index + 1)
        return gap is None or gap > self.line_gap + 0.2 * self.body_size

    # Row classification -----------------------------------------------------------------

    def _is_styled(self, row: _Row) -> bool:
        return row.bold or row.font_size >= self.body_size * 1.1

    def _heading_at(self, index: int) -> bool:
        # Asked several times per row (floats look ahead for headings); the answer depends only on the row,
        # on whether the references have started and on the last section number.
        key = (index, self.in_references, self.last_number)
        if key not in self._heading_answers:
            self._heading_answers[key] = self._is_heading(index)
        return self._heading_answers[key]

    def _is_heading(self, index: int) -> bool:
        row = self.rows[index]
        if row.lead_emphasis or len(row.text) > 150 or len(row.text.split()) > 16 or is_caption(row.text):
            return False
        if row.font_size < 0.93 * self.body_size:
            return False  # headings are never set smaller than the body text
        text = unglue_heading(row.text, self.vocabulary)
        words = text.split()
        number, title = _split_number(text)
        numbered_split = len(row.cells) == 2 and re.fullmatch(r"(?:\d{1,2}|[A-Z])(?:\.\d{1,2})*\.?", row.cells[0])
        if len(row.cells) > 1 and not numbered_split:
            return False
        if not _reads_like_title(title):
            return False
        known = is_known_section_name(title) or is_known_section_name(text)
        spaced = self._spaced_above(index)
        styled = self._is_styled(row) or _is_all_caps(title) or (row.italic and number is not None)
        if self.in_references and not known:
            # Entries of a reference list are never headings; an appendix after them is styled and numbered.
            return styled and spaced and number is not None and _is_capitalised(title)
        if known:
            return styled or spaced or number is not None
        if not _is_capitalised(title) or (text.endswith(".") and number is None) or not spaced:
            return False
        if number is not None:
            return (styled or (_is_all_caps(title) and len(words) <= 10)) and self._number_in_sequence(number)
        # An unnumbered heading must stand out on every count: style, space around it, a short title.
        display = (row.bold and row.font_size >= 1.02 * self.body_size) or row.font_size >= 1.15 * self.body_size
        return (
            len(words) <= 10 and not _SENTENCE_END.search(text) and self._spaced_below(index)
            and (display if self.numbered_paper else self._is_styled(row))
            and not self._is_table_row(self.rows[index + 1] if index + 1 < len(self.rows) else row)
        )

    def _number_in_sequence(self, number: str) -> bool:
        if not number[0].isdigit():
            lettered = re.fullmatch(r"[A-Z](?:\.\d{1,2})*", number)
            return bool(lettered) and (self.in_references or self.last_number is not None)
        parts = tuple(int(part) for part in number.split("."))
        if parts[0] == 0 or parts[0] > 30:
            return False
        previous = self.last_number
        if previous is None:
            return True
        # The next number may repeat the section (a subsection), follow it, or skip one missed heading.
        return previous[0] <= parts[0] <= previous[0] + 2

    def _register_heading(self, text: str) -> None:
        number, _ = _split_number(text)
        if number and number[0].isdigit():
            self.last_number = tuple(int(part) for part in number.split("."))
        role = describe_heading(text, letters_are_numbers=True).role
        self.in_references = role == "references" or (self.in_references and role not in ("appendix", "checklist")
                                                      and not (number and number[0].isalpha()))
        self.seen_heading = True

    @staticmethod
    def _is_table_row(row: _Row) -> bool:
        # Narrow cells are merged into one line by the PDF parser; rows of numbers still read as a grid.
        if len(row.cells) >= 2:
            return True
        tokens = row.text.split()
        numeric = sum(1 for token in tokens if _NUMERIC_TOKEN.match(token))
        return numeric >= 2 and numeric >= 0.4 * len(tokens)

    def _in_image(self, row: _Row) -> bool:
        return any(
            x0 - 2 <= row.x0 and row.x1 <= x1 + 2 and y0 - 2 <= row.y0 and row.y1 <= y1 + 2
            for x0, y0, x1, y1 in self.image_boxes.get(row.page, ())
        )

    def _opens_prose(self, index: int) -> bool:
        """Two full lines of running text in one column: the start of the body, not an author or address line."""
        pair = self.rows[index:index + 2]
        if len(pair) < 2 or (pair[0].page, pair[0].column) != (pair[1].page, pair[1].column):
            return False
        column = self._column(pair[0])
        for row in pair:
            words = re.findall(r"[^\W\d_]+", row.text)
            if row.x1 - row.x0 < 0.8 * (column.right - column.left) or len(words) < 6:
                return False
            if sum(word.islower() for word in words) < 0.5 * len(words):
                return False
        return True

    # Floats -------------------------------------------------------------------------------

    def _float_at(self, start: int) -> tuple[str, int]:
        """A float starting at `start`: ("figure", end) for text inside an image, or a run of non-prose rows
        that a "Figure" caption directly follows or precedes; ("table", end) likewise next to a "Table"
        caption, or for a grid of cells or numbers; ("", start) otherwise."""
        end = start
        while end < len(self.rows) and self._in_image(self.rows[end]):
            end += 1
        if end > start:
            return "figure", end
        table_end = self._table_end(start)
        row = self.rows[start]
        # A float starts a block: a paragraph's own next line (same column, ordinary spacing) is not one.
        if self.open is not None and self.open.kind != "caption" and not self._spaced_above(start) \
                and (self.open.last_row.page, self.open.last_row.column) == (row.page, row.column):
            return ("table", table_end) if table_end > start else ("", start)
        while end < len(self.rows) and self._is_float_row(self.rows[end], row) and not self._heading_at(end):
            end += 1
        end = max(end, table_end)
        if end == start:
            return "", start
        # A caption set above claims the float below it (tables usually); otherwise the caption below does.
        if self.open is not None and self.open.kind == "caption" \
                and (self.open.last_row.page, self.open.last_row.column) == (row.page, row.column):
            return self._caption_kind(self.open.text), end
        if end < len(self.rows) and self._starts_caption(end) and self.rows[end].page == row.page:
            return self._caption_kind(self.rows[end].text), end
        return ("table", table_end) if table_end > start else ("", start)

    @staticmethod
    def _caption_kind(caption: str) -> str:
        return "table" if re.match(r"^(?:Table|Tab\.)", caption) else "figure"

    def _is_float_row(self, row: _Row, first: _Row) -> bool:
        """Rows of a figure or table: not a caption, not a heading, not prose, on the float's page and column."""
        if (row.page, row.column) != (first.page, first.column) or is_caption(row.text):
            return False
        column = self._column(row)
        prose = (
            abs(row.font_size - self.body_size) <= 0.15 * self.body_size
            and row.x1 - row.x0 >= 0.75 * (column.right - column.left)
            and len(row.text.split()) >= 6 and not self._is_table_row(row)
        )
        return not prose

    def _table_end(self, start: int) -> int:
        """End of the grid-like run of rows starting at `start`, or `start` when there is none."""
        end = start
        while end < len(self.rows) and self._is_table_row(self.rows[end]):
            row = self.rows[end]
            if end > start:
                above = self.rows[end - 1]
                if (above.page, above.column) != (row.page, row.column) or row.y0 - above.y1 > 2.5 * above.height:
                    break
            end += 1
        run = self.rows[start:end]
        # Two rows make a table only when one has separate cells; rows of numbers alone need three.
        if len(run) >= 3 or (len(run) == 2 and any(len(row.cells) >= 2 for row in run)):
            return end
        return start

    def _is_footnote_start(self, index: int) -> bool:
        row = self.rows[index]
        if row.font_size >= 0.93 * self.body_size or not _FOOTNOTE_MARKER.match(row.text):
            return False
        # Footnotes sit at the foot of a column: only footnote-size rows follow in this column.
        for below in self.rows[index + 1:]:
            if (below.page, below.column) != (row.page, row.column):
                return True
            if below.font_size >= 0.93 * self.body_size:
                return False
        return True

    # Paragraphs ---------------------------------------------------------------------------

    @staticmethod
    def _line_ended_early(block: _OpenBlock, row: _Row, column_right: float) -> bool:
        """True when the line broke early: the next line's first word had room on it."""
        previous = block.last_row
        right = max(block.right_edge, column_right, row.x1)
        char_width = (previous.x1 - previous.x0) / max(len(previous.text), 1)
        first_word = row.text.split(" ", 1)[0]
        # Generous margin: character widths vary and ragged-right lines stop short of the edge.
        return right - previous.x1 > 1.5 * (len(first_word) + 1) * char_width

    def _starts_paragraph(self, row: _Row, ends_sentence: bool) -> bool:
        """First-line cues: an indent, a list marker or a run-in heading after a finished sentence."""
        if not ends_sentence:
            return False
        column = self._column(row)
        indent = row.x0 - column.left
        if 0.6 * self.body_size <= indent <= 4 * self.body_size:
            return True
        if row.lead_emphasis or _LIST_MARKER.match(row.text):
            return True
        return False

    def _continues_paragraph(self, block: _OpenBlock, row: _Row) -> bool:
        previous = block.last_row
        if abs(row.font_size - previous.font_size) > 0.1 * max(previous.font_size, row.font_size):
            return False
        same_column = (row.page, row.column) == (previous.page, previous.column)
        if block.footnote and not same_column:
            return False
        gap = row.y0 - previous.y1
        if same_column and (gap < -0.5 * previous.height
                            or gap > self.line_gap + 0.5 * max(previous.height, self.body_size)):
            return False
        ends_sentence = bool(_SENTENCE_END.search(block.text))
        indent = row.x0 - self._column(row).left
        if self.in_references:
            # Reference lists hang: an entry's further lines are indented, a new entry starts at the margin.
            if indent >= 0.5 * self.body_size and not _REFERENCE_ENTRY_START.match(row.text):
                return True
            if _REFERENCE_ENTRY_START.match(row.text) or ends_sentence:
                return False
        is_short = self._line_ended_early(block, row, self._column(previous).right)
        if not same_column:
            # A paragraph ends on a short line; a full last line runs on in the next column or page.
            return (not ends_sentence or not is_short) and not self._starts_paragraph(row, ends_sentence) \
                and not _LIST_MARKER.match(row.text)
        if ends_sentence and is_short or self._is_display(row) or self._is_display(previous):
            return False
        return not self._starts_paragraph(row, ends_sentence)

    def _is_display(self, row: _Row) -> bool:
        """A line set centred on its own, such as a display equation: a block of its own."""
        column = self._column(row)
        left, right = row.x0 - column.left, column.right - row.x1
        centred = min(left, right) > 1.5 * self.body_size and abs(left - right) < 0.35 * max(left, right)
        narrow = row.x1 - row.x0 < 0.7 * (column.right - column.left)
        return centred and narrow and (bool(_MATH.search(row.text)) or len(row.text.split()) <= 6)

    def _resumes_pending(self, row: _Row) -> bool:
        pending = self.pending
        if pending is None or (self.open is not None and self.open.kind != "caption" and not self.open.footnote):
            return False
        if abs(row.font_size - pending.last_row.font_size) > 0.15 * pending.last_row.font_size:
            return False
        if _LIST_MARKER.match(row.text) or row.lead_emphasis:
            return False
        # The continuation starts at the column's left edge (no indent) and in lower case or mid-sentence.
        return row.x0 - self._column(row).left < 0.6 * self.body_size

    # Emission -----------------------------------------------------------------------------

    def _emit(self, kind: str, text: str, page: int) -> None:
        self.elements.append(LayoutElement(kind, text, page))

    def _close(self) -> None:
        if self.open is None:
            return
        block, self.open = self.open, None
        element = LayoutElement(block.kind, block.text, block.rows[0].page)
        if block.slot is None:
            self.elements.append(element)
        else:
            self.elements[block.slot] = element

    def _interrupt(self) -> None:
        """A float or footnote starts: a paragraph whose sentence runs on past it waits, holding its place."""
        block = self.open
        if block is None or block.kind not in ("paragraph", "abstract") or block.footnote \
                or _SENTENCE_END.search(block.text):
            self._close()
            return
        self._flush_pending()
        self.open = None
        if block.slot is None:
            block.slot = len(self.elements)
            self.elements.append(LayoutElement(block.kind, "", block.rows[0].page))
        self.pending = block

    def _flush_pending(self) -> None:
        if self.pending is not None:
            self.open, self.pending = self.pending, None
            self._close()

    def _append(self, block: _OpenBlock, row: _Row) -> None:
        block.text = join_lines(block.text, row.text, self.vocabulary)
        block.rows.append(row)

    def _continues_heading(self, heading: _Row, row: _Row) -> bool:
        return (
            (heading.page, heading.column) == (row.page, row.column)
            and row.bold == heading.bold
            and abs(row.font_size - heading.font_size) < 0.06 * heading.font_size
            and len(row.cells) == 1
            and not row.lead_emphasis
            and 0 <= row.y0 - heading.y1 <= 0.8 * heading.height
            and not _SECTION_NUMBER.match(row.text)
            and not is_known_section_name(row.text)
            and not is_caption(row.text)
            and _reads_like_title(row.text)
        )

    def _emit_heading(self, index: int) -> int:
        first = self.rows[index]
        text, last = unglue_heading(first.text, self.vocabulary), first
        index += 1
        while index < len(self.rows) and self._continues_heading(last, self.rows[index]):
            text, last = f"{text} {unglue_heading(self.rows[index].text, self.vocabulary)}", self.rows[index]
            index += 1
        self._emit("heading", text, first.page)
        self._register_heading(text)
        return index

    def _continues_caption(self, caption: _OpenBlock, row: _Row) -> bool:
        previous = caption.last_row
        if (row.page, row.column) != (previous.page, previous.column) or is_caption(row.text):
            return False
        if abs(row.font_size - previous.font_size) > 0.15 * previous.font_size:
            return False
        gap = row.y0 - previous.y1
        if gap < -0.5 * previous.height or gap > self.line_gap + 0.5 * previous.height:
            return False
        ends_sentence = bool(_SENTENCE_END.search(caption.text))
        return not (ends_sentence and self._line_ended_early(caption, row, self._column(previous).right))

    def _starts_caption(self, index: int) -> bool:
        row = self.rows[index]
        match = _CAPTION.match(row.text)
        if not match:
            return False
        if match["mark"] != ".":
            return True
        # "Table 2. Results ..." opens a caption when its label is set apart (bold, italic, smaller type) or it
        # starts after space with no sentence waiting; "... as shown in / Table 2. The ..." mid-paragraph does not.
        if row.lead_emphasis or row.bold or row.italic or row.font_size < 0.95 * self.body_size:
            return True
        waiting = [block for block in (self.open, self.pending) if block is not None and block.kind != "caption"]
        return self._spaced_above(index) and not any(not _SENTENCE_END.search(block.text) for block in waiting)

    # The walk -----------------------------------------------------------------------------

    def _front_matter(self) -> int:
        """Emit the title and author block opening page 1; returns the index of the first other row.

        The title is the largest type among the first rows of page 1; a few smaller lines above it (a
        venue notice that is not repeated on other pages) join the author block as front matter.
        """
        if not self.rows:
            return 0
        first_page = self.rows[0].page
        largest = max(row.font_size for row in self.rows if row.page == first_page)
        if largest < 1.25 * self.body_size:
            return 0
        start = next((index for index, row in enumerate(self.rows[:4])
                      if row.page == first_page and row.font_size >= 0.97 * largest), None)
        if start is None:
            return 0
        first = self.rows[start]
        if is_known_section_name(first.text) or _SECTION_NUMBER.match(first.text) or not _reads_like_title(first.text):
            return 0
        index, title, last = start + 1, first.text, first
        while index < len(self.rows) and self.rows[index].page == first_page \
                and self.rows[index].font_size >= 0.97 * largest \
                and 0 <= self.rows[index].y0 - last.y1 <= 1.5 * last.height:
            title, last = f"{title} {self.rows[index].text}", self.rows[index]
            index += 1
        self._emit("title", title, first.page)
        front = [row.text for row in self.rows[:start]]
        while index < len(self.rows) and self.rows[index].page == first_page and len(front) < 30:
            row = self.rows[index]
            if _RUN_IN_ABSTRACT.match(row.text) or is_caption(row.text) or self._opens_prose(index) \
                    or _FRONT_MATTER_LABEL.match(row.text) or self._heading_at(index):
                break
            front.append(row.text)
            index += 1
        if front:
            self._emit("authors", "\n".join(front), first.page)
        return index

    def build(self) -> list[LayoutElement]:
        index = self._front_matter()
        # Prose between the author block and the first heading is an abstract that carries no heading.
        in_front = bool(self.elements)
        while index < len(self.rows):
            row = self.rows[index]
            if self.open is not None and self.open.kind == "caption" and self._continues_caption(self.open, row):
                self._append(self.open, row)
                index += 1
                continue
            float_kind, float_end = self._float_at(index)
            if float_kind:
                self._interrupt()
                float_rows = self.rows[index:float_end]
                if float_kind == "table":
                    self._emit("table", "\n".join(" | ".join(r.cells) for r in float_rows), row.page)
                else:
                    self._emit("figure", "\n".join(r.text for r in float_rows), row.page)
                index = float_end
                continue
            run_in = _RUN_IN_ABSTRACT.match(row.text)
            if run_in and not self.seen_heading:
                self._close()
                self._flush_pending()
                self._emit("heading", "Abstract", row.page)
                self.seen_heading, in_front = True, False
                self.open = _OpenBlock("paragraph", row.text[run_in.end():], [row])
                index += 1
                continue
            if self._heading_at(index):
                self._close()
                self._flush_pending()
                index = self._emit_heading(index)
                in_front = False
                continue
            if self._starts_caption(index):
                self._interrupt()
                self.open = _OpenBlock("caption", row.text, [row])
            elif self.open is not None and self.open.kind != "caption" and self._continues_paragraph(self.open, row):
                self._append(self.open, row)
            elif self.pending is not None and self._resumes_pending(row):
                self._close()
                self.open, self.pending = self.pending, None
                self._append(self.open, row)
            else:
                footnote = self._is_footnote_start(index)
                if footnote:
                    self._interrupt()
                else:
                    self._close()
                    self._flush_pending()
                unlabelled_abstract = in_front and not footnote and not _FRONT_MATTER_LABEL.match(row.text)
                kind = "abstract" if unlabelled_abstract else "paragraph"
                self.open = _OpenBlock(kind, row.text, [row], footnote=footnote)
            index += 1
        self._close()
        self._flush_pending()
        return [element for element in self.elements if element.text]


def recover_blocks(
    lines: Sequence[TextLine],
    page_sizes: Mapping[int, tuple[float, float]] | None = None,
    image_boxes: Mapping[int, Sequence[Box]] | None = None,
) -> list[Block]:
    """Turn positioned text lines into blocks in reading order with section paths.

    `page_sizes` maps page number to (width, height) in points; when missing, each page's extent
    is taken from its lines. `image_boxes` are the raster images per page, whose text is figure text.
    """
    lines = [line for line in lines if normalise_whitespace(line.text)]
    if not lines:
        return []
    sizes = dict(page_sizes or {})
    extents: dict[int, list[TextLine]] = defaultdict(list)
    for line in lines:
        extents[line.page].append(line)
    for page, page_lines in extents.items():
        sizes.setdefault(page, (max(line.x1 for line in page_lines), max(line.y1 for line in page_lines)))
    kept, _ = split_furniture(lines, sizes)
    body_size = _dominant_font_size(kept)
    by_page: dict[int, list[TextLine]] = defaultdict(list)
    for line in kept:
        by_page[line.page].append(line)
    rows = [row for page in sorted(by_page) for row in _order_page(by_page[page], page, sizes[page][0])]
    # Running text only: a heading's glued words must not vouch for themselves.
    vocabulary = Vocabulary.of(
        line.text for line in kept
        if (line.lead_emphasis or not line.bold) and line.font_size <= body_size * 1.25
    )
    return assemble_blocks(_ElementBuilder(rows, body_size, vocabulary, image_boxes or {}).build())


# --- Plain text ------------------------------------------------------------------------------


def _looks_like_plain_heading(paragraph_lines: list[str]) -> bool:
    if len(paragraph_lines) != 1:
        return False
    text = paragraph_lines[0]
    if text.startswith("#") or is_known_section_name(text):
        return True
    return bool(_SECTION_NUMBER.match(text)) and len(text.split()) <= 12 and not _SENTENCE_END.search(text)


def elements_from_plain_text(text: str) -> list[LayoutElement]:
    """Blank-line separated paragraphs; one-line numbered or standard-name paragraphs are headings,
    and a first one-line paragraph that is not a heading is the title."""
    elements: list[LayoutElement] = []
    paragraphs = [
        [line.strip() for line in chunk.split("\n") if line.strip()]
        for chunk in re.split(r"\n\s*\n", text.replace("\r\n", "\n"))
    ]
    vocabulary = Vocabulary.of(line for paragraph in paragraphs for line in paragraph)
    for paragraph_lines in paragraphs:
        if not paragraph_lines:
            continue
        if _looks_like_plain_heading(paragraph_lines):
            elements.append(LayoutElement("heading", paragraph_lines[0].lstrip("#").strip(), 1))
        elif not elements and len(paragraph_lines) == 1 and not _SENTENCE_END.search(paragraph_lines[0]):
            elements.append(LayoutElement("title", paragraph_lines[0], 1))
        else:
            joined = ""
            for line in paragraph_lines:
                joined = join_lines(joined, line, vocabulary)
            elements.append(LayoutElement("paragraph", joined, 1))
    return elements
