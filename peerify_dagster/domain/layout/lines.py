"""Text lines as the PDF path reads them, and the text rules every other layout module shares.

* `TextLine`: one positioned line with its font size and bold/italic flags;
* clean-up: ligatures expanded, unmapped glyphs dropped, whitespace collapsed;
* font weight and slant inferred from PDF font names;
* de-hyphenation: a word hyphenated at a line end is re-joined, keeping the hyphen of real compounds
  ("self-supervised", "state-of-the-art") and of "pre- and post-training", by how the document itself
  writes the word mid-line (`Vocabulary`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 from the page's top-left corner


@dataclass(frozen=True)
class TextLine:
    """One line of text on a page; coordinates in points, origin at the page's top-left.

    `font_size` is the typical height of the line's words; `lead_emphasis` counts the words at the
    line's start set in bold or italic when the rest of the line is not (a run-in heading); `font` is the face
    most of its characters use (subset prefix dropped), so that a heading face whose name tells no weight (an
    obfuscated "NptcdsAdvTT99c4c969") still differs from the body's.
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
    font: str = ""

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def width(self) -> float:
        return self.x1 - self.x0


# --- Text clean-up ---------------------------------------------------------------------------

_LIGATURES = str.maketrans({
    "\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb05": "st", "\ufb06": "st",
    "\u00ad": "",
})
_UNREADABLE = re.compile(r"[\ue000-\uf8ff\ufffd]|GLYPH<[^>]*>|\(cid:\d+\)")
# Some fonts set a ligature glyph as a word cell of its own, so the text layer reads "signifi cant", "fl ow",
# "Rafi , S.": a word ending in fi / fl runs on into the lower-case word or the punctuation after the space (not a
# bare "fi" after a hyphen: "sci-fi film").
_LIGATURE_GAP = re.compile(r"(?<!\w)([^\W\d_]*f[il]) (?=[a-z]|[,.;:)](?:\s|$))")


def _close_ligature_gap(match: re.Match) -> str:
    word, start = match.group(1), match.start()
    after_hyphen = start > 0 and match.string[start - 1] == "-"
    return match.group(0) if after_hyphen and word == "fi" else word


def normalise_whitespace(text: str) -> str:
    return re.sub(r"[ \t\r\f\v]+", " ", text.translate(_LIGATURES)).strip()


def unreadable_share(text: str) -> float:
    """Share of a text's characters that are glyphs without a Unicode mapping (broken font encodings)."""
    stripped = re.sub(r"\s+", "", text)
    if not stripped:
        return 0.0
    return sum(len(match) for match in _UNREADABLE.findall(stripped)) / len(stripped)


def clean_line_text(text: str) -> str:
    """Ligatures expanded (and the stray space some fonts leave after one closed up), unmapped glyphs dropped,
    whitespace collapsed."""
    return _LIGATURE_GAP.sub(_close_ligature_gap, normalise_whitespace(_UNREADABLE.sub("", text)))


# Cues in a line's text that several rules read: a finished sentence, a number cell, a formula.
# A word set in small raised digits is a superscript ("bacteria¹,³", a footnote's "¹"): its height at most this
# share of the line's and its bottom raised by at least RAISED_SHARE of the line's height above the line's baseline.
SUPERSCRIPT_HEIGHT_SHARE = 0.8
RAISED_SHARE = 0.2
_SUPERSCRIPT_WORD = re.compile(r"\d{1,3}(?:[,\-–]\d{1,3})*,?")
SUPERSCRIPT_FOOTNOTE = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹]{1,2}\s")  # a footnote's text opens with its raised marker
_TO_SUPERSCRIPT = str.maketrans("0123456789-–", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁻")


def is_superscript_word(text: str, height: float, bottom: float, line_height: float, baseline: float) -> bool:
    """Digits (with commas and ranges) set small and raised above the line's baseline: a citation or footnote
    marker the text layer gives as plain digits ("bacteria 1,3 ."). Coordinates grow downwards."""
    return (bool(_SUPERSCRIPT_WORD.fullmatch(text)) and height <= SUPERSCRIPT_HEIGHT_SHARE * line_height
            and bottom <= baseline - RAISED_SHARE * line_height)


def with_superscripts(text: str, words: list[tuple[str, bool]]) -> str:
    """`text` (the line's words, in order, joined by spaces) with each superscript word (`words`: the words in
    order, each with whether it is one) written in Unicode superscripts and glued to the word before it and to the
    punctuation after it: "bacteria 1,3 . Acid" -> "bacteria¹,³. Acid"."""
    out, cursor = [], 0
    for word, raised in words:
        found = text.find(word, cursor)
        if found < 0:
            continue
        if raised:
            out.append(text[cursor:found].rstrip(" ") if found > 0 else text[cursor:found])
            out.append(word.translate(_TO_SUPERSCRIPT))
            cursor = found + len(word)
            after = re.match(r" (?=[.,;:!?)\]])", text[cursor:])
            if after:
                cursor += 1
        else:
            out.append(text[cursor:found + len(word)])
            cursor = found + len(word)
    out.append(text[cursor:])
    return "".join(out)


# A sentence's end, before any raised citation numbers that follow it ("... the environment.⁴", "...thickness.¹⁵⁻²⁰").
SENTENCE_END = re.compile(r"[.!?:][\"'’”)\]]*(?:[⁰¹²³⁴⁵⁶⁷⁸⁹]+(?:[⁻,–-][⁰¹²³⁴⁵⁶⁷⁸⁹]+)*)?$")
NUMERIC_TOKEN = re.compile(r"^[(\[]?[-+\u2212\u00b1]?\d+(?:[.,]\d+)*%?[)\]]?[*†‡]?$")
MATH = re.compile(r"[=<>≤≥∈∉∩∪⊂⊆∑∏∫√∞≈≠±×÷∀∃→←↔⇒|^_{}\\]")


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
