"""Sentence offsets for scientific prose, citation-aware: a citation marker is never cut in two and a marker set
after the full stop ("... effect. [5]", "... effect.¹²") stays with the sentence it supports.

`domain/chunking.split_sentences` stays as it is (the sample's chunk texts depend on it); this splitter gives
offsets into the text, which citances and the evidence windows of cited papers need.
"""

from __future__ import annotations

import re

from peerify_dagster.domain.layout.floats import is_caption
from peerify_dagster.domain.layout.lines import NUMERIC_TOKEN

# Tokens ending in "." that do not end a sentence (compared lower-cased, without the final dot). Words that can
# end a sentence as often as not ("etc.", "min." after a duration, "Inc.") are left out: the next word decides.
_ABBREVIATIONS = frozenset({
    "al", "e.g", "i.e", "cf", "vs", "viz", "approx", "ca", "resp", "esp", "incl", "excl", "w.r.t", "a.k.a", "n.b",
    "fig", "figs", "eq", "eqs", "eqn", "eqns", "sec", "secs", "sect", "tab", "tabs", "ref", "refs", "chap", "suppl",
    "appx", "alg", "thm", "lem", "def", "prop", "cor", "eds", "dr", "prof", "mr", "mrs", "ms", "jr", "univ", "dept",
    "equiv", "ibid", "spp", "subsp", "cv", "aff",
})
# Abbreviations that are one only before a number ("No. 5", "p. 4", "pp. 3-9", "Vol. 2", "Ch. 3", "App. B").
_BEFORE_NUMBER = frozenset({"no", "nos", "nr", "p", "pp", "vol", "vols", "ch", "app", "ex", "ed", "art"})
# Lower-case words after which a lone capital and a dot end the sentence ("vitamin D.", "matrix A.") rather than
# being an initial; an initial follows a name, a comma, "and" or the sentence start.
_INITIAL_CONTEXT = frozenset({"and", "by", "with", "&", "of", "to", "from"})
_SENTENCE_END = re.compile(r"[.!?]+")
_CLOSING = "\"'”’)]"
# A numeric or superscript marker, or a parenthetical group holding a year, placed after the full stop.
_TRAILING_MARKER = re.compile(
    r"[ \t]?(?:\[\s*\d{1,4}[a-z]?(?:\s*[,;–—-]\s*\d{1,4}[a-z]?)*\s*\]"
    r"|[⁰¹²³⁴⁵⁶⁷⁸⁹][⁰¹²³⁴⁵⁶⁷⁸⁹⁻,]*"
    r"|\([^()\n]{0,200}?\b(?:1[5-9]|20)\d\d[a-z]?(?:,\s*pp?\.\s*\d+(?:\s*[–-]\s*\d+)?)?\s*\))"
)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_PAIRS = {")": "(", "]": "["}
_BRACKET_REACH = 400  # a bracket left open longer than this protects nothing (a half-open interval "[0, 1)")


def _bracketed(text: str) -> bytearray:
    """1 at each position strictly inside matched round or square brackets: nothing there ends a sentence."""
    inside = bytearray(len(text))
    stack: list[tuple[str, int]] = []
    for position, char in enumerate(text):
        if char in "([":
            stack.append((char, position))
        elif char in _PAIRS:
            for depth in range(len(stack) - 1, -1, -1):
                opener, opened_at = stack[depth]
                if position - opened_at > _BRACKET_REACH:
                    break
                if opener == _PAIRS[char]:
                    inside[opened_at + 1:position] = b"\x01" * (position - opened_at - 1)
                    del stack[depth:]
                    break
    return inside


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the "." at `dot` closes an abbreviation or an initial rather than a sentence."""
    word_start = dot
    while word_start > max(0, dot - 40) and not text[word_start - 1].isspace():  # a token, not a URL's length
        word_start -= 1
    token = text[word_start:dot].lstrip("([\"'“‘")
    if not token:
        return False
    if token.lower() in _ABBREVIATIONS:
        return True
    if token.lower() in _BEFORE_NUMBER and re.match(r"\s*(?:\d|[A-Z]\b|[IVX]+\b)", text[dot + 1:]):
        return True
    if re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", token):  # "U.S", "e.g" written without its last dot
        return True
    if re.fullmatch(r"[A-Z]", token):  # "J. Smith", unless after a lower-case word: "vitamin D. The"
        before = text[:word_start].rstrip()
        previous = before.rsplit(None, 1)[-1] if before else ""
        return not (previous.isalpha() and previous.islower() and previous not in _INITIAL_CONTEXT)
    return False


def _boundary_end(text: str, match: re.Match, bracketed: bytearray) -> int | None:
    """End offset of the sentence closed by the punctuation `match`, or None when it closes none."""
    if bracketed[match.start()]:
        return None
    punctuation = match.group(0)
    if punctuation == "." and _is_abbreviation(text, match.start()):
        return None
    end = match.end()
    while end < len(text) and text[end] in _CLOSING:
        end += 1
    while marker := _TRAILING_MARKER.match(text, end):
        end = marker.end()
    following = text[end:end + 1]
    if following and not following.isspace():
        return None  # "0.5", "v1.2", "effect.Then" (no space: not a boundary we can trust)
    rest = text[end:].lstrip()
    if rest[:1].islower() or (punctuation in "!" and rest[:1].isdigit()):
        return None  # "approx. the", "n! = ..."
    return end


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each sentence of `text` in order, whitespace between sentences excluded.

    Never ends a sentence inside brackets (citation markers, "(Smith et al., 2020; Wu 2021)"), after an
    abbreviation ("et al.", "e.g.", "Fig.", "Eq.", "vs.", "cf.", initials "J. Smith"), inside a decimal or version
    ("0.5", "v1.2"), or before a lower-case word; a marker after the full stop belongs to the sentence before it; a
    blank line always ends a sentence.
    """
    bracketed = _bracketed(text)
    cuts = sorted(
        {end for match in _SENTENCE_END.finditer(text) if (end := _boundary_end(text, match, bracketed)) is not None}
        | {match.start() for match in _BLANK_LINE.finditer(text)}
    )
    spans: list[tuple[int, int]] = []
    start = 0
    for cut in [*cuts, len(text)]:
        if cut <= start:
            continue
        piece = text[start:cut]
        stripped = piece.strip()
        if stripped:
            left = start + len(piece) - len(piece.lstrip())
            spans.append((left, left + len(stripped)))
        start = cut
    return spans


# ---- what is not prose --------------------------------------------------------------------------------------
# Code a parser left in a paragraph: an interpreter prompt, attribute access with a call or an index
# ("doc.sentences[2]", "np.mean("), a slice, an empty call, an operator prose never writes ("==", not "->": "En->De"),
# a definition or an import.
_CODE = re.compile(
    r"^\s*(?:>>>|\$ |In \[\d+\]:)|\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+[\[(]|\w\[-?\d*:-?\d*\]|\b\w+\(\)"
    r"|==|!=|\+=|\bdef \w+\(|^\s*(?:import \w|from [\w.]+ import\b)"
)
# A running head or footer the parser kept in the text: "31st Conference on Neural Information Processing Systems
# (NIPS 2017), Long Beach", "Published as a conference paper at ICLR 2020", "Manuscript submitted to ACM".
_RUNNING_HEAD = re.compile(
    r"\b\d+(?:st|nd|rd|th)\s+(?:Annual\s+)?(?:Conference|Meeting|Workshop|Symposium)\b"
    r"|\b(?:Published as a conference paper at|Under review as a conference paper at|Manuscript submitted to)\b",
    re.IGNORECASE,
)
_TABLE_CELLS = 3  # a row of at least three numeric cells, half the row or more, reads as a table row


def _is_table_row(sentence: str) -> bool:
    # A bracketed number is a marker, not a cell: "prior work [1] [2] [3]" is prose.
    tokens = sentence.split()
    cells = sum(1 for token in tokens if NUMERIC_TOKEN.match(token) and not token.startswith("["))
    return cells >= _TABLE_CELLS and 2 * cells >= len(tokens)


def is_prose(sentence: str) -> bool:
    """Whether a sentence is running prose rather than code, a table row, a float's caption or a running head that
    a parser left inside a paragraph: their brackets, numbers and parentheses are no citations."""
    return not (_CODE.search(sentence) or _RUNNING_HEAD.search(sentence) or is_caption(sentence)
                or _is_table_row(sentence))
