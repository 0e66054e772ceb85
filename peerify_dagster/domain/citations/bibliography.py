"""Reference entries parsed into fields, without a model: the `bibliography` table's rows.

`parse_entry` reads one entry as written in any of the common styles (ACL / APA author-year, IEEE numbered with
quoted titles, NeurIPS / ICML numbered, Vancouver, Springer / Nature, physics and mathematics journal styles,
arXiv-only entries, entries with URLs). It works in three passes, each naming how it found what it found
(`ParsedEntry.field_sources`):

1. identifiers first, because their punctuation confuses everything else: the DOI (a resolver prefix dropped,
   lower-cased, trailing punctuation stripped, a DOI or URL broken by a line-break space rejoined), the arXiv id
   (new and old style, any prefix, no version; from an arXiv DOI as a last resort) and a URL; then they are cut
   out of the text;
2. the authors: either the names before a year that follows them ("Ammar, W., ... (2018).", "Waleed Ammar, ...
   2018.", "Peacock, S., et al. 2020,"), or a list of names read from the start (given name first "A. Smith and
   B. Lee", surname first "Smith, J. & Lee, B.", Vancouver "Smith J, Lee B"), ended by ". ", ": ", "," or a
   quote;
3. the title (quoted, else the first sentence after the year or the authors, else the sentence before an
   "In ..." venue), then the year (after the title when it did not follow the authors) and the venue.

An entry is `parsed` with a title and authors or a year, `partial` with some fields (the reason says what is
missing), `unparsed` otherwise; nothing here raises on an entry's text.

`read_bibliography` turns a manuscript's reference blocks into entries, repairing what the layout rules get
wrong in reference lists: a block that is only the tail of an entry (a URL or DOI broken across lines, a
lower-case continuation, or in a labelled list any block without a label) joins the entry it continues, and a
block holding two entries (a second label "[13]" in sequence, or a second "Surname, I., ... (2019)." start) is
split. Each entry keeps the spans of the blocks it came from, so it can be placed on its pages.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from peerify_dagster.domain.citations.entries import PARSED, PARTIAL, UNPARSED, ParsedEntry
from peerify_dagster.domain.citations.titles import Spellings, with_repaired_title
from peerify_dagster.domain.layout.blocks import Block
from peerify_dagster.domain.layout.lines import normalise_whitespace
from peerify_dagster.domain.layout.regions import Region, merge_regions, regions_of_span

# --- Identifiers -------------------------------------------------------------------------------------------------

# A DOI starts a token (or follows "doi:" / "doi.org/"), never inside a word or a longer number.
_DOI = re.compile(r"(?<![\w.])10\.\d{4,9}/[^\s\"<>]+", re.IGNORECASE)
_DOI_PREFIX = re.compile(r"(?:(?:https?://)?(?:dx\.)?doi\.org/|\bdoi\s*:?\s*)$", re.IGNORECASE)
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(.+)$")
_NEW_ARXIV = r"\d{4}\.\d{4,5}"
# Archives of the identifiers arXiv used before 2007 ("hep-th/9901001"); a subject class ("math.AG/...") is not
# part of the identifier.
_OLD_ARCHIVES = (
    r"(?:astro-ph|cond-mat|gr-qc|hep-(?:ex|lat|ph|th)|math-ph|nlin|nucl-(?:ex|th)|physics|quant-ph|math|cs|q-bio|"
    r"q-fin|stat|chao-dyn|solv-int|patt-sol|adap-org|comp-gas|alg-geom|dg-ga|funct-an|q-alg|chem-ph|mtrl-th|"
    r"supr-con|acc-phys|ao-sci|atom-ph|bayes-an|plasm-ph)"
)
_OLD_ARXIV = rf"{_OLD_ARCHIVES}(?:\.[A-Za-z-]{{2,}})?/\d{{7}}"
_ARXIV_PATTERNS = (
    ("arxiv_url", re.compile(rf"arxiv\.org/(?:abs|pdf)/({_NEW_ARXIV}|{_OLD_ARXIV})(?:v\d+)?(?:\.pdf)?",
                             re.IGNORECASE)),
    ("arxiv_pattern", re.compile(rf"\barxiv\s*[:.]?\s*({_NEW_ARXIV}|{_OLD_ARXIV})(?:v\d+)?", re.IGNORECASE)),
    ("arxiv_pattern", re.compile(rf"\b(?:arxiv|corr)\s*[,.]?\s*(?:vol\.\s*)?(?P<cut>abs/({_NEW_ARXIV}|{_OLD_ARXIV})"
                                 rf"(?:v\d+)?)", re.IGNORECASE)),
    ("arxiv_url", re.compile(rf"arxiv\.org/({_NEW_ARXIV})(?:v\d+)?", re.IGNORECASE)),
    ("arxiv_pattern", re.compile(rf"(?<![\w/.-])({_OLD_ARXIV})(?:v\d+)?(?![\w/])")),
    # A bare new-style id standing alone, as physics styles write it: "JHEP 06 (2011) 048 [1103.1888]", ", 2205.00933."
    ("arxiv_bare", re.compile(r"(?:(?<=\[)|(?<=,\s)|(?<=\s))((?:0[7-9]|[1-9]\d)(?:0[1-9]|1[0-2])\.\d{4,5})(?:v\d+)?"
                              r"(?=\s*[\],;)]|\s*\.?\s*$)")),
)
# What is left around an arXiv id once it is cut out: the category tag of "arXiv:1608.01289 [hep-ex]".
_ARXIV_CATEGORY = re.compile(r"\s*\[\s*[a-z-]+(?:\.[A-Za-z-]+)?\s*\]")
_URL = re.compile(r"(?:https?://|www\.)[^\s\"<>]+", re.IGNORECASE)
# A URL or DOI token the line broke after one of these characters continues in the next token.
_IDENTIFIER_START = re.compile(r"(?:https?://|www\.|doi:|10\.\d{4,9}/|\S*doi\.org/)", re.IGNORECASE)
_BREAKS_AFTER = "/-_~=&?#:"
# What goes on after a period that a line break cut off: a domain or path ("com/Belval/x"), a dotted number.
_URL_TAIL = re.compile(r"[a-z0-9][\w~#?=&%-]*(?:[./][\w~#?=&%-]+)+|\d+")
_TRAILING_PUNCTUATION = ".,;:"
# Fillers around an identifier or URL that carry no field.
_FILLER = re.compile(
    r"\[(?:online|internet|electronic resource)\]|\bavailable(?:\s+(?:online|at|from))?\s*:?(?=\s*(?:$|[.,;]))|"
    r"\b(?:accessed|retrieved|last accessed|visited)(?:\s+on)?\s*:?\s*[\w ,/.-]{0,30}?\d{4}\b\.?|"
    r"\b(?:url|pmid|pmcid|isbn|issn)\s*:?\s*[\dx-]*(?=\s|$|[.,;])|\bdoi\s*:?(?=\s*(?:$|[.,;]))",
    re.IGNORECASE,
)

# --- Labels ------------------------------------------------------------------------------------------------------

_LABELS = (
    ("bracket", re.compile(r"^\[\s*([^\W_][\w+.\-]{0,11})\s*\]\s*")),
    ("parenthesis", re.compile(r"^\(\s*(\d{1,4})\s*\)\s*")),
    ("number_dot", re.compile(r"^(\d{1,3})\.\s+(?=\S)")),
    ("number_space", re.compile(r"^(\d{1,3})\s+(?=[^\W\d_])")),
)

# --- Names -------------------------------------------------------------------------------------------------------

# Capital letters of the Latin (with accents), Greek and Cyrillic alphabets; the extended Latin range mixes cases,
# which only loosens what a name may start with.
_UP = r"[A-Z\u00C0-\u00D6\u00D8-\u00DE\u0100-\u024F\u0391-\u03A9\u0410-\u042F]"
_LETTER = r"[^\W\d_]"
# Accents a PDF's text layer leaves as spacing characters ("Mitrovi´c", "M¨uller", "Do˘gan").
_MARK = "'’´`¨˘ˇ˜^~"
# Spacing accents and the combining marks they stand for ("`", "^" and "~" are left alone: quotes, URLs, formulas).
_SPACING_ACCENTS = {"´": "\u0301", "¨": "\u0308", "˘": "\u0306", "ˇ": "\u030c", "˜": "\u0303", "¸": "\u0327",
                    "˚": "\u030a", "˝": "\u030b", "˙": "\u0307", "¯": "\u0304"}
_NAME_WORD = rf"{_UP}(?:{_LETTER}|[{_MARK}])*(?:-{_UP}?(?:{_LETTER}|[{_MARK}])+)*"
# "J.", "A.G.", "J.-F.", "Ch.": never "Ho." or "Li.", which end a list of names.
_INITIALS = rf"(?:{_UP}h?|Yu)\.(?:\s?-?(?:{_UP}h?|Yu)\.|-[a-z]\.){{0,3}}"  # bounded: no runaway backtracking
_PARTICLE = (r"(?:[vV]an't|[vV]an|[vV]on|[dD]er|[dD]en|[dD]e|[dD]el|[dD]ella|[dD]i|[dD]a|dos|das|du|[lL]a|[lL]e|ter|"
             r"ten|bin|al|el|zu)")
_SUFFIX = r"(?:,?\s+(?:Jr\.?|Sr\.?|II|III|IV)(?![\w]))"
# A collaboration or editors' tag after a name or "et al.": "[LHCb]", "(ATLAS)", "(eds.)", ", eds.".
_TAG = r"(?:\s*[\[(][^\])]{1,40}[\])]|,?\s*\(?(?:eds?|editors?)\.?\)?(?=[\s,.:]))"
# The family name ending a given-name-first name: two letters at least, never a suffix ("R. W. Heath Jr.").
_SURNAME_WORD = rf"(?!(?:Jr|Sr|II|III|IV)\b){_UP}(?:{_LETTER}|[{_MARK}])+(?:-{_UP}?(?:{_LETTER}|[{_MARK}])+)*"
# Where a name ends: a separator, "et al.", a tag, a sentence mark, a quote, the year, the end, or the space after
# an initial's period ("Smith, J. Title"). Part of each kind of name, so that a reading that runs into the title
# ("Tingting Yu. Recdroid+") gives way to the one that stops in time.
_NAME_END = (r"(?=\s*$|[,.:;“”\"(\[]|\s+(?:and\b|&|et\.?\s?al\b|and others\b|[(\[“\"]|``|(?:1[6-9]|20)\d\d)"
             r"|(?<=\.)\s)")


def _name_kind(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern + _NAME_END)


_GIVEN_FIRST = _name_kind(
    rf"(?:(?:{_INITIALS}|{_NAME_WORD})\s*(?<=[\s.])){{1,4}}(?:{_PARTICLE}\s+){{0,3}}{_SURNAME_WORD}{_SUFFIX}?")
# Words that are never part of a name: what a lenient reading must not take for a lower-case given name.
_NOT_A_NAME = (r"(?!(?:and|et|others|the|of|in|on|for|to|with|from|by|at|via|an?|is|are|using|towards?|In|"
               r"[pP]roceedings|[cC]onference|[jJ]ournal|[wW]orkshop|[sS]ymposium|[tT]ransactions|[aA]dvances)\b)")
# Given name first, also with lower-case names ("Cheng xiang Zhai", "Jie fu"), a nickname or one word
# ("ZhiguoWang"), read only where the year bounds the names.
_GIVEN_FIRST_LENIENT = _name_kind(
    rf"(?:{_NOT_A_NAME}(?:{_INITIALS}|{_NAME_WORD}|{_LETTER}+|\([^)]{{1,20}}\))\s*(?<=[\s.])){{0,4}}"
    rf"(?:{_PARTICLE}\s+){{0,3}}{_NOT_A_NAME}(?:{_SURNAME_WORD}|{_LETTER}{{2,}}){_SUFFIX}?")
# An organisation as author ("Astropy Collaboration", "OpenAI", "World Health Organization").
_ORGANISATION = _name_kind(rf"{_NOT_A_NAME}{_NAME_WORD}(?:(?:\s+(?:of|for|the|in|on))*\s+{_NAME_WORD}){{0,5}}")
# "GrahamGreenleaf et al.": one word before "et al." is a name.
_SINGLE_BEFORE_ET_AL = re.compile(rf"{_NAME_WORD}(?=,?\s*et\.?\s?al\b)")
_SURNAME_FIRST = _name_kind(rf"(?:{_PARTICLE}\s+){{0,3}}{_NAME_WORD},\s*{_INITIALS}{_SUFFIX}?")
# "Smith, John, and Jane Lee": the first author of a given-name-first list written surname first.
_SURNAME_FIRST_FULL = re.compile(rf"(?:{_PARTICLE}\s+){{0,3}}{_NAME_WORD},\s*{_NAME_WORD}(?:\s+{_INITIALS})?(?=,)")
_VANCOUVER = _name_kind(rf"(?:{_PARTICLE}\s+){{0,2}}{_NAME_WORD}\s+{_UP}{{1,3}}(?![\w'’-]|\.\s?{_UP}\.)")
# "Nandi R., Mishustin I. N.": surname, then initials with periods and no comma (MNRAS, A&A).
_SURNAME_INITIALS = _name_kind(rf"(?:{_PARTICLE}\s+){{0,2}}{_NAME_WORD}\s+{_INITIALS}")
_STRICT_KINDS = (_SURNAME_FIRST, _GIVEN_FIRST, _VANCOUVER, _SURNAME_INITIALS)
_LENIENT_KINDS = (_SURNAME_FIRST, _GIVEN_FIRST_LENIENT, _VANCOUVER, _SURNAME_INITIALS)
_TAG_PATTERN = re.compile(_TAG)
_SEPARATOR = re.compile(r"\s*[,;]\s*(?:and\s+|&\s*)?|\s+(?:and|&)\s+|\s*&\s*")
_ET_AL = re.compile(rf"[,.]?\s*(?:and\s+)?(?:et\.?\s?al\.?|and others|and colleagues){_TAG}?", re.IGNORECASE)

# --- Years, titles, venues ---------------------------------------------------------------------------------------

# A year standing alone, not inside a number, a page range or an identifier; of a range ("2008-2023") the last.
_YEAR = re.compile(
    r"(?<![\w./:-])(?:(?:1[6-9]|20)\d\d[-–/])?(1[6-9]\d\d|20\d\d)([a-z])?(?![\w/]|[-–]\d|\.\d|:\d)")
_QUOTES = {"“": "”", "\"": "\"", "``": "''", "„": "“", "«": "»", "‘‘": "’’", "'": "'"}
_OPENING_QUOTE = re.compile(r"^(?:``|‘‘|[“\"„«'])")
# Tokens that end in a period without ending a title.
_ABBREVIATIONS = {"vs.", "e.g.", "i.e.", "etc.", "cf.", "no.", "vol.", "st.", "dr.", "mr.", "al.", "inc.", "ltd.",
                  "co.", "jr.", "u.s.", "approx.", "fig.", "eq."}
_SENTENCE_END = re.compile(r"[.?!][\"'’”)\]]*(?=\s|$)")
_VENUE_START = re.compile(r"^(?:in\s*:?\s+|proc\.|proceedings\b|journal\b|trans\.|transactions\b|conference\b|"
                          r"workshop\b|symposium\b|advances in\b|(?:ph\.?\s?d\.?|master'?s?|doctoral|bachelor'?s?|"
                          r"diploma)\s+(?:thesis|dissertation))", re.IGNORECASE)
_IN_MARKER = re.compile(r"[.,]\s+In:?\s+(?=\S)")
# Where a venue's name stops: pages, a volume or issue number, a year that is not part of the name.
_VENUE_END = re.compile(
    r"\s*,?\s*(?:(?:pp?\.|pages?|vol\.|volume|no\.|issue|art\.|article|chapter|ch\.)\s*(?:\d|[ivxlc]+\b)|edited by\b|"
    r"eds?\.)"
    rf"|\s*[,;:]?\s*\(?(?:1[6-9]\d\d|20\d\d)[a-z]?\b(?!\s+{_UP})|\s*,?\s+\d+(?=\s*[(:,;.]|\s*$|\s+\d)|\s*,\s*\d",
    re.IGNORECASE,
)
_MAX_AUTHORS_CHARS = 1500
_NO_FIELDS = "no author, year or title could be told apart"


# --- Identifiers -------------------------------------------------------------------------------------------------


def _rejoin_broken_identifiers(text: str) -> str:
    """Close the space a line break left inside a URL or DOI: after a character such a token cannot end with
    ("/", "-", ...), or after a period when the next token goes on in lower case or digits
    ("https://github. com/x", "10.18653/v1/ 2021.acl-long.498")."""
    tokens = text.split(" ")
    joined: list[str] = []
    for token in tokens:
        if joined and _IDENTIFIER_START.search(joined[-1]) and token and token[0].isalnum():
            previous = joined[-1]
            if previous[-1] in _BREAKS_AFTER or (previous[-1] == "." and _URL_TAIL.fullmatch(token.rstrip(".,;"))):
                joined[-1] = previous + token
                continue
        joined.append(token)
    return " ".join(joined)


def _strip_trailing(identifier: str) -> str:
    """Sentence punctuation after an identifier, and a closing bracket it never opened, are not part of it."""
    while identifier:
        last = identifier[-1]
        if last in _TRAILING_PUNCTUATION:
            identifier = identifier[:-1]
        elif last in ")]}" and identifier.count({")": "(", "]": "[", "}": "{"}[last]) < identifier.count(last):
            identifier = identifier[:-1]
        else:
            break
    return identifier


@dataclass(frozen=True)
class _Identifiers:
    doi: str | None
    arxiv_id: str | None
    url: str | None
    sources: dict[str, str]
    remainder: str  # the text with the identifiers (and their prefixes and fillers) cut out


def _find_identifiers(text: str) -> _Identifiers:
    sources: dict[str, str] = {}
    cuts: list[tuple[int, int]] = []
    doi = None
    for match in _DOI.finditer(text):
        candidate = _strip_trailing(match.group(0))
        if "/" not in candidate or candidate.endswith("/"):
            continue
        doi = candidate.lower()
        prefix = _DOI_PREFIX.search(text, 0, match.start())
        sources["doi"] = "doi_url" if prefix and "doi.org" in prefix.group(0).lower() else "doi_pattern"
        cuts.append((prefix.start() if prefix else match.start(), match.start() + len(candidate)))
        break
    arxiv_id = None
    for method, pattern in _ARXIV_PATTERNS:
        match = pattern.search(text)
        if match and not any(start <= match.start() < end for start, end in cuts):
            identifier = match.group(2) if "cut" in pattern.groupindex else match.group(1)
            arxiv_id = re.sub(r"\.[A-Za-z-]{2,}(?=/)", "", identifier)
            sources["arxiv_id"] = method
            category = _ARXIV_CATEGORY.match(text, match.end())
            # "ArXiv, abs/1907.11692": the name stays as the venue, the id goes
            start = match.start("cut") if "cut" in pattern.groupindex else match.start()
            cuts.append((start, category.end() if category else match.end()))
            break
    if arxiv_id is None and doi and (arxiv_doi := _ARXIV_DOI.match(doi)):
        arxiv_id = re.sub(r"v\d+$", "", arxiv_doi.group(1))
        sources["arxiv_id"] = "arxiv_doi"
    url = None
    for match in _URL.finditer(text):
        if any(start <= match.start() < end for start, end in cuts):
            continue
        candidate = _strip_trailing(match.group(0))
        cuts.append((match.start(), match.start() + len(candidate)))
        if url is None and "doi.org/" not in candidate.lower():
            url = candidate
            sources["url"] = "url_pattern"
    remainder = text
    for start, end in sorted(cuts, reverse=True):
        left, right = remainder[:start].rstrip(), remainder[end:].lstrip()
        if left[-1:] in _TRAILING_PUNCTUATION and right[:1] in _TRAILING_PUNCTUATION:
            right = right[1:]  # "Mission. <URL>, 2022": one mark between what was around the identifier
        remainder = f"{left} {right}"
    remainder = _FILLER.sub(" ", remainder)
    # Punctuation left dangling once the identifiers are gone: "[ ]", "( )", ", ,", ". ."
    remainder = re.sub(r"[\[(]\s*[\])]", " ", remainder)
    remainder = re.sub(r"\s+([.,;:])", r"\1", remainder)
    remainder = re.sub(r"([.,;:])(?:\s+[.,;:])+|(?<!\.)\.\.(?!\.)", lambda match: match.group(1) or ".", remainder)
    remainder = re.sub(r"(?<=[\w.])~(?=\w)", " ", remainder)  # LaTeX's non-breaking space: "J.~Clark"
    return _Identifiers(doi, arxiv_id, url, sources, normalise_whitespace(remainder).strip(" ,;:"))


# --- Names -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Names:
    authors: tuple[str, ...]
    end: int  # where the names (and "et al.") end in the text read


def _read_names(text: str, lenient: bool) -> _Names | None:
    """Names read from the start of `text`, each ending at a separator, "et al." or the list's end. Strictly, one
    kind of name for the whole list (the reading that goes furthest), the first author possibly inverted ("Smith,
    John, and Jane Lee"); `lenient` (only where a year bounds the list) takes at each name the longest of any kind,
    lower-case names and nicknames included, and an organisation as first author."""
    if lenient:
        return _read_list(text, _LENIENT_KINDS, lenient=True)
    best: _Names | None = None
    for kind in _STRICT_KINDS:
        names = _read_list(text, (kind,), lenient=False)
        if names and (best is None or names.end > best.end):
            best = names
    return best


def _initials_given(name: str) -> bool:
    """"A. B. Smith": the given names are initials (the form a list keeps from name to name)."""
    return bool(re.match(rf"(?:{_INITIALS}\s*)+\S", name))


def _name_at(text: str, position: int, kinds: Sequence[re.Pattern[str]], first: bool,
             lenient: bool) -> re.Match[str] | None:
    """The longest name of these kinds starting at `position` (earlier kinds win ties)."""
    if first:
        kinds = [*kinds, _SURNAME_FIRST_FULL, _SINGLE_BEFORE_ET_AL, *([_ORGANISATION] if lenient else [])]
    matches = [match for kind in kinds if (match := kind.match(text, position))]
    return max(matches, key=lambda match: match.end(), default=None)


def _read_list(text: str, kinds: Sequence[re.Pattern[str]], lenient: bool) -> _Names | None:
    names: list[str] = []
    position, accepted_end, last_author = 0, 0, False
    while position < len(text):
        match = _name_at(text, position, kinds, not names, lenient)
        if not match:
            break
        name = match.group(0).strip()
        # A list keeps its form: after names with initials, "Deep Residual Learning," is a title, not a name.
        if kinds == (_GIVEN_FIRST,) and names and _initials_given(names[-1]) and not _initials_given(name):
            break
        names.append(name)
        accepted_end = match.end()
        et_al = _ET_AL.match(text, accepted_end)
        if et_al:
            accepted_end = et_al.end()
            break
        tag = _TAG_PATTERN.match(text, accepted_end)
        if tag:
            accepted_end = tag.end()
        separator = _SEPARATOR.match(text, accepted_end)
        if not separator:
            break
        joined_by_and = bool(re.search(r"\band\b|&", separator.group(0)))
        # After the name "and" brought in, only another "and" goes on ("A and B and C"): a comma there is the title's.
        if last_author and not joined_by_and:
            break
        last_author = joined_by_and
        position = separator.end()
    if not names:
        return None
    return _Names(tuple(names), accepted_end)


def surname(author: str) -> str:
    """The family name: before the comma of "Smith, J.", before the initials of "Smith JA" or "Nandi R. N.", else
    the last word with its particles ("van der Maaten"), a suffix ("Jr.") left out."""
    author = re.sub(_TAG + "$", "", author).strip()
    author = re.sub(rf"{_SUFFIX}$", "", author).strip()
    if "," in author:
        return author.split(",", 1)[0].strip()
    words = re.split(rf"\s+|(?<=\.)(?={_UP})", author)  # "A.Yahalom": an initial glued to the surname
    trailing_initials = 0
    while (trailing_initials < len(words) - 1
           and re.fullmatch(rf"{_UP}{{1,3}}|{_INITIALS}", words[-1 - trailing_initials])):
        trailing_initials += 1
    if trailing_initials:
        return " ".join(words[:-trailing_initials])
    surname = [words[-1]]
    for word in reversed(words[:-1]):
        if re.fullmatch(_PARTICLE, word):
            surname.insert(0, word)
        else:
            break
    return " ".join(surname)


# --- Title, year, venue ------------------------------------------------------------------------------------------


def _quoted(text: str) -> tuple[str, str] | None:
    """A title in quotes at the start of `text`: (title, what follows the closing quote)."""
    opening = _OPENING_QUOTE.match(text)
    if not opening:
        return None
    closing = _QUOTES[opening.group(0)]
    end = text.find(closing, opening.end() + 1)
    if end < 0:
        return None
    title = text[opening.end():end].strip().rstrip(",.;: ")
    if not re.search(_LETTER, title):
        return None
    return title, text[end + len(closing):]


def _first_sentence(text: str) -> tuple[str, str]:
    """Up to the first sentence end (a title's own "?" or "!" kept), not stopping at "vs." or "e.g."."""
    for match in _SENTENCE_END.finditer(text):
        token = text[:match.start() + 1].rsplit(None, 1)[-1].lower()
        if token in _ABBREVIATIONS:
            continue
        keep = match.group(0)[0] in "?!"
        following = text[match.end():].lstrip()
        if keep and following[:1].islower() and not _VENUE_START.match(following):
            continue  # "What's in a name? exploring ...": a lower-case subtitle goes on with the title
        title, rest = text[:match.start() + (1 if keep else 0)].strip(), text[match.end():]
        if keep and (subtitle := _subtitle(rest)):
            return f"{title} {subtitle[0]}", subtitle[1]
        return title, rest
    return text.strip(), ""


def _subtitle(rest: str) -> tuple[str, str] | None:
    """After a title ending in "?" or "!", its subtitle ("Is X Enough? A Study of Y. In Proc. ..."): the next sentence
    when it starts with a capital, is no venue itself, and a venue or a year follows it."""
    subtitle, after = _first_sentence(rest)
    if not subtitle[:1].isupper() or _VENUE_START.match(subtitle) or _looks_abbreviated(subtitle) \
            or _publication_year(subtitle):
        return None
    following = after.strip()
    return (subtitle, after) if _VENUE_START.match(following) or re.match(r"\(?(?:1[6-9]|20)\d\d\b", following) \
        else None


def _comma_title(text: str) -> tuple[str, str]:
    """A title set off by commas (Elsevier and physics styles: "A. B. Smith, Title, Journal 29 (2010) 1-9."): the
    comma-separated parts until one that looks like a venue (a number, "in", an abbreviation)."""
    kept: list[str] = []
    for part in text.split(", "):
        # "Title (2019)." ends the title at its year
        dated = re.match(r"(.*\S)\s*\((?:1[6-9]|20)\d\d[a-z]?\)", part)
        if dated and not re.search(r"\d", dated.group(1)) and not kept:
            kept.append(dated.group(1))
            break
        if (re.search(r"\d", part) or re.match(r"(?:in|In)\b|\(", part) or _looks_abbreviated(part)
                or _VENUE_START.match(part)):
            break
        kept.append(part)
        if re.search(r"[.?!]$", part):
            break
    title, _ = _first_sentence(", ".join(kept))
    return title, text[len(title):]


def _looks_abbreviated(text: str) -> bool:
    """"Eur. Phys. J. C 58" / "Theor. Math. Phys.": mostly words cut short with a period, as journal names are."""
    words = text.split()
    short = sum(bool(re.fullmatch(rf"{_LETTER}{{1,6}}\.", word)) for word in words)
    return len(words) > 1 and short * 2 >= len(words)


def _looks_like_title(text: str) -> bool:
    words = text.split()
    if not words or not re.search(rf"{_LETTER}{{2,}}", text) or re.match(r"(?:and|&)\s", text):
        return False  # "and K. Lee, ...": names the list did not take, not a title
    if _VENUE_START.match(text) or _looks_abbreviated(text):
        return False
    if len(words) == 1:
        return len(text.strip(".")) >= 3
    digits = sum(bool(re.fullmatch(r"[\d():;,.\-–]+", word)) for word in words)
    return digits * 2 < len(words)


def _venue(text: str) -> str | None:
    text = text.strip(" .,;:")
    text = re.sub(r"^(?:in\s*:?\s+|in:|In(?=[A-Z][a-z]))", "", text, flags=re.IGNORECASE).strip()  # "InProceedings"
    end = _VENUE_END.search(text)
    venue = _strip_trailing((text[:end.start()] if end else text).strip(" .,;:-–")).lstrip("(")
    venue = re.sub(r"[\s(–-]+$", "", venue)
    if venue.count("(") > venue.count(")"):
        venue += ")"  # "In Proc. IEEE ICC (ICC 2020)": the bracket the year was cut from is closed
    if not venue or not re.search(rf"{_LETTER}{{2,}}", venue):
        return None
    return venue


def _publication_year(text: str) -> re.Match[str] | None:
    """The year in parentheses ("Phys. Rev. D 72, 1896 (2012)", "(Elsevier, 2015)"), else the first year."""
    years = list(_YEAR.finditer(text))
    bracketed = [match for match in years if re.search(r"\([^()]*$", text[:match.start()])
                 and re.match(r"[a-z]?[^()]*\)", text[match.end():])]
    return (bracketed or years or [None])[0]


# --- One entry ---------------------------------------------------------------------------------------------------


def _take_label(text: str) -> tuple[str | None, str | None, str]:
    for method, pattern in _LABELS:
        match = pattern.match(text)
        if match:
            return match.group(1), method, text[match.end():]
    return None, None, text


@dataclass
class _Fields:
    authors: tuple[str, ...] = ()
    title: str | None = None
    year: int | None = None
    year_suffix: str | None = None
    venue: str | None = None


# What is left of an author list the name reader stopped in ("Romero. J. J. et al.", "J. B., Fornstedt-Wallin, B.,
# Hedman, A. et al."): capitalised words, initials, "and" and punctuation up to "et al.", which says the names go on
# to there; the names read before the slip are kept. Without "et al." a title in title case would pass for names.
# Possessive and atomic: a word in capitals ("ACL") is read one way only, so a tail without "et al." fails at once.
_NAMES_TAIL = re.compile(rf"(?:[\s.,;:&-]|\band\b|(?>{_NAME_WORD}))*+(?i:{_ET_AL.pattern})[\s.,;:(]*")


def _year_after_names(text: str) -> tuple[_Names | None, re.Match[str]] | None:
    """The year that follows the authors ("... and Russell Power. 2017.", "Ammar, W., ... (2018).") or opens the
    entry ("[1] 2021. Fermat's Library."): (names, year match), the names None in the second case."""
    for match in _YEAR.finditer(text[:_MAX_AUTHORS_CHARS]):
        following = text[match.end():match.end() + 2]
        if following and not re.match(r"[.,:;)\]]|\s*$", following):
            continue
        head = text[:match.start()]
        if head and not re.search(r"(?:^|[\s(,.\[])$", head):
            continue
        names_text = head.rstrip(" ([,")
        if not names_text:
            return None, match
        names = _read_names(names_text, lenient=True)
        if names and (not names_text[names.end:].strip(" .,;:") or _NAMES_TAIL.fullmatch(names_text[names.end:])):
            return names, match
    return None


def _read_fields(text: str, sources: dict[str, str]) -> _Fields:
    fields = _Fields()
    anchored = _year_after_names(text)
    if anchored:
        names, year = anchored
        fields.year, fields.year_suffix = int(year.group(1)), year.group(2)
        sources["year"] = "after_authors" if names else "after_label"
        if names:
            fields.authors = names.authors
            sources["authors"] = "before_year"
        rest = text[year.end():].lstrip(" )]")
        title_method = "after_year"
    else:
        names = _read_names(text, lenient=False)
        if names:
            fields.authors = names.authors
            sources["authors"] = "name_list"
            rest = text[names.end:]
        else:
            rest = text
        title_method = "after_authors"
    terminator = re.match(r"\s*([.,:;])?\s*", rest)
    separator = terminator.group(1) if terminator else None
    rest = rest[terminator.end():] if terminator else rest
    title, after = None, rest
    if quoted := _quoted(rest):
        title, after = quoted
        title_method = "quoted"
    elif anchored and separator == ",":
        # "Judge, P. G. 1998, ApJ, 500, 1009": after a year set off by a comma comes the journal, titles left out,
        # but for a book's title in sentence case ("Edmonds A. R., 2016, Angular momentum in quantum mechanics.")
        candidate = _first_sentence(rest)[0].split(", ")[0]
        if (not re.search(r"\d", candidate) and not _VENUE_START.match(candidate)
                and len(re.findall(r"(?:^|\s)[a-z]{2,}", candidate)) >= 3):
            title, after = candidate, rest[len(candidate):]
    elif fields.authors or anchored:
        candidate, candidate_after = _comma_title(rest) if separator == "," else _first_sentence(rest)
        # "Phys. Rev. Lett.": a journal's abbreviated name is no one-word title
        abbreviation_chain = " " not in candidate and re.match(rf"\s*{_UP}{_LETTER}{{0,5}}\.", candidate_after)
        if _looks_like_title(candidate) and not abbreviation_chain:
            title, after = candidate, candidate_after
    else:
        marker = _IN_MARKER.search(rest)
        if marker and _looks_like_title(rest[:marker.start()]):
            title, after = rest[:marker.start()].strip(), rest[marker.start() + 1:]
            title_method = "before_venue"
    if title:
        fields.title = re.sub(r"\s*\[[A-Z]{1,2}\]$", "", title).strip()  # "[J]", "[C]": GB/T 7714 type marks
        sources["title"] = title_method
    if fields.year is None:
        year = _publication_year(after if title else rest)
        if year:
            fields.year, fields.year_suffix = int(year.group(1)), year.group(2)
            sources["year"] = "after_title" if title else "after_authors" if fields.authors else "in_text"
    if title or fields.authors:
        venue = _venue(after)  # with no title, what follows the authors: "Eur. Phys. J. C 58, 639 (2008)"
        if venue and venue != fields.title:
            fields.venue = venue
            sources["venue"] = "after_title"
    return fields


def _compose_accents(text: str) -> str:
    """Accents a PDF's text layer left as spacing characters before their letter, sometimes after a space
    ("Kry´sci ´nski", "M¨uller", "P´erez"), put back on the letter ("Kryściński", "Müller", "Pérez")."""
    accents = "".join(_SPACING_ACCENTS)
    # a capital after the accent starts a word of its own: "Radim ˇReh˚uˇrek"
    text = re.sub(rf"(?<={_LETTER}) (?=[{accents}][a-zı])", "", text)
    composed = re.sub(rf"([{accents}])\s?([A-Za-zı])",
                      lambda match: match.group(2).replace("ı", "i") + _SPACING_ACCENTS[match.group(1)], text)
    return unicodedata.normalize("NFC", composed)


# "DonaldW. Smith": a text layer that lost the space before a middle initial.
_GLUED_INITIAL = re.compile(rf"\b({_UP}[a-z]{{2,}})({_UP}\.)(?=\s)")


def parse_entry(raw_text: str, index: int) -> ParsedEntry:
    """One reference entry's fields (see the module docstring); never raises on the entry's text."""
    text = _GLUED_INITIAL.sub(r"\1 \2", _compose_accents(normalise_whitespace(raw_text.replace("\n", " "))))
    if not text:
        return ParsedEntry(index=index, raw_text=raw_text, status=UNPARSED, reason="empty entry")
    label, label_method, body = _take_label(text)
    sources: dict[str, str] = {"label": label_method} if label_method else {}
    identifiers = _find_identifiers(_rejoin_broken_identifiers(body))
    sources.update(identifiers.sources)
    fields = _read_fields(identifiers.remainder, sources)
    surnames = tuple(surname for surname in (surname(author) for author in fields.authors) if surname)
    found_any = any((fields.authors, fields.title, fields.year, identifiers.doi, identifiers.arxiv_id,
                     identifiers.url, fields.venue))
    if fields.title and (fields.authors or fields.year):
        status, reason = PARSED, None
    elif found_any:
        missing = [name for name, value in (("title", fields.title), ("authors", fields.authors),
                                            ("year", fields.year)) if not value]
        status, reason = PARTIAL, "no " + " or ".join(missing) + " found"
        if fields.title:
            reason = "a title but no authors or year found"
    else:
        status, reason = UNPARSED, _NO_FIELDS
    return ParsedEntry(
        index=index, raw_text=raw_text, label=label, authors=fields.authors, surnames=surnames, title=fields.title,
        year=fields.year, year_suffix=fields.year_suffix, venue=fields.venue, doi=identifiers.doi,
        arxiv_id=identifiers.arxiv_id, url=identifiers.url, field_sources=sources, status=status, reason=reason,
    )


# --- A manuscript's reference list ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockSpan:
    """The characters [start, end) of the text of the block with this `order` that an entry came from."""

    block_order: int
    start: int
    end: int


@dataclass(frozen=True)
class PlacedEntry:
    """A parsed entry and where it lies: the block spans it was read from (several when the layout split it), its
    first page and the boxes of its lines, merged per column (the blocks' boxes where a block has no line boxes);
    `block_orders` the blocks it came from, in reading order."""

    entry: ParsedEntry
    spans: tuple[BlockSpan, ...]
    page: int
    regions: tuple[Region, ...]

    @property
    def block_orders(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(span.block_order for span in self.spans))


@dataclass
class _Piece:
    spans: list[BlockSpan]
    text: str


# An identifier's or URL's tail left alone on a line: one token holding a "/" or a dotted number, or a URL.
_IDENTIFIER_TAIL = re.compile(r"^(?:(?:https?://|www\.|doi\s*:|10\.\d{4,9}/)\S*|[\w.~-]*[/][\w./~#?=&%-]*|"
                              r"[\w-]*\d[\w-]*(?:\.[\w-]+)+)[.,;]?$", re.IGNORECASE)
# Where a second entry starts inside a block of an unlabelled list: after an entry's last sentence.
_ENTRY_BREAK = re.compile(r"(?<=[.)\]\d])\s+(?=\S)")  # an entry may end on its pages: "pages 519-526"
_MIN_ENTRY_CHARS = 30
# A page's furniture that the layout left among the entries: a page number, a publisher's line.
_PAGE_FURNITURE = re.compile(r"(?:page\s+)?\d{1,4}(?:\s+of\s+\d{1,4})?|(?:to access this journal|available online|"
                             r"downloaded from|published online|copyright\b|©|all rights reserved|for personal use)"
                             r".*", re.IGNORECASE)
_LABELLED_SHARE = 0.5


def _label_of(text: str) -> tuple[str | None, str | None]:
    label, method, _ = _take_label(text)
    return label, method


def _ends_entry(text: str) -> bool:
    """The text ends as an entry does: a sentence mark, a closing bracket or an identifier."""
    last = text.rstrip().rsplit(None, 1)[-1] if text.strip() else ""
    return bool(re.search(r"[.?!)\]”\"]$", last)) or bool(_URL.match(last) or _DOI.match(last))


def _starts_author_year_entry(text: str) -> bool:
    """Names followed by the year ("Smith, J., Lee, B. (2019).", "Waleed Ammar and Dirk Groeneveld. 2018."), one
    of them at least a person's (two words or "Surname, I."): a venue's "Database, 2016." starts nothing."""
    anchored = _year_after_names(text[:_MAX_AUTHORS_CHARS])
    return bool(anchored and anchored[0] and any(re.search(r"[\s,]", name) for name in anchored[0].authors))


def _split_labelled(text: str, method: str, label: str) -> list[int]:
    """Offsets where the next labels of the list ("[13]" after "[12]", "13." after "12.") start inside `text`."""
    if not label.isdigit():
        if method != "bracket":
            return []
        pattern = re.compile(r"(?<=\s)\[[A-Z][\w+.-]{0,10}\d[\w]*\](?=\s)")
        return [match.start() for match in pattern.finditer(text)]
    starts, expected = [], int(label) + 1
    shapes = {"bracket": r"\[{n}\]\s", "parenthesis": r"\({n}\)\s", "number_dot": r"{n}\.\s+(?=[^\W\d_])"}
    if method not in shapes:
        return []
    position = 1
    while match := re.compile(r"(?<=\s)" + shapes[method].format(n=expected)).search(text, position):
        starts.append(match.start())
        position, expected = match.end(), expected + 1
    return starts


def _split_author_year(text: str) -> list[int]:
    """Offsets where a second author-year entry starts inside `text`: after a sentence end, once the part before
    holds a year of its own, names followed by their year."""
    starts = []
    for match in _ENTRY_BREAK.finditer(text):
        offset = match.end()
        before = text[starts[-1] if starts else 0:offset]
        if len(before) < _MIN_ENTRY_CHARS or not _YEAR.search(before):
            continue
        if _starts_author_year_entry(text[offset:]):
            starts.append(offset)
    return starts


def _cut(piece: _Piece, starts: list[int]) -> list[_Piece]:
    span = piece.spans[0]
    bounds = [0, *starts, len(piece.text)]
    pieces = []
    for start, end in zip(bounds, bounds[1:]):
        part = piece.text[start:end]
        stripped_start = start + len(part) - len(part.lstrip())
        stripped_end = start + len(part.rstrip())
        if stripped_end > stripped_start:
            pieces.append(_Piece([BlockSpan(span.block_order, span.start + stripped_start, span.start + stripped_end)],
                                 piece.text[stripped_start:stripped_end]))
    return pieces


def _continues(piece: _Piece, previous: _Piece, labelled_list: bool, list_method: str | None) -> bool:
    """A piece that is not an entry of its own: an identifier's tail, or in a labelled list any piece without the
    list's label, or in an unlabelled list any piece after one that stopped mid-way before its year (an author list
    cut at a column break), else a piece that is not names followed by a year and that starts in lower case (or not
    with a letter) or follows an entry left unfinished ("... In Proceedings of the" + "Annual Meeting of ...")."""
    text = piece.text
    if _IDENTIFIER_TAIL.match(text):
        return True
    if labelled_list:
        return _label_of(text)[1] != list_method
    if not _ends_entry(previous.text) and not _YEAR.search(previous.text):
        return True  # names cut at a column or page break ("..., Sebastian Kohlmeier," + "Kyle Lo, ... 2018.")
    if _starts_author_year_entry(text):
        return False
    return text[:1].islower() or not re.match(rf"{_UP}|\[|\d", text) or not _ends_entry(previous.text)


def _pieces(blocks: Sequence[Block]) -> list[_Piece]:
    references = [block for block in sorted(blocks, key=lambda item: item.order) if block.kind == "reference"]
    pieces = [_Piece([BlockSpan(block.order, 0, len(block.text))], block.text) for block in references
              if block.text.strip() and not _PAGE_FURNITURE.fullmatch(block.text.strip())]
    methods = Counter(_label_of(piece.text)[1] for piece in pieces)
    list_method, count = max(methods.items(), key=lambda item: item[1]) if methods else (None, 0)
    labelled = list_method is not None and count >= _LABELLED_SHARE * len(pieces)
    split: list[_Piece] = []
    for piece in pieces:
        label, method = _label_of(piece.text)
        if labelled and method == list_method and label:
            starts = _split_labelled(piece.text, method, label)
        elif not labelled:
            starts = _split_author_year(piece.text)
        else:
            starts = []
        split.extend(_cut(piece, starts) if starts else [piece])
    entries: list[_Piece] = []
    for piece in split:
        if entries and _continues(piece, entries[-1], labelled, list_method if labelled else None):
            target = entries[-1]
            if len(entries) > 1 and entries[-2].spans[-1].block_order == target.spans[0].block_order:
                # Two entries read from one block (a line of two columns): the tails that follow finish the first
                # left unfinished, then the second.
                target = next((entry for entry in entries[-2:] if not _ends_entry(entry.text)), target)
            target.spans.extend(piece.spans)
            target.text = f"{target.text} {piece.text}"
        else:
            entries.append(_Piece(list(piece.spans), piece.text))
    return entries


def _span_regions(block: Block, span: BlockSpan) -> list[Region]:
    return regions_of_span(block.text, block.line_regions, span.start, span.end, block.regions)


def read_bibliography(blocks: Sequence[Block]) -> list[PlacedEntry]:
    """Every entry of the manuscript's reference blocks, repaired (see the module docstring) and parsed, in
    order, indexed from 1 after repair; [] when the manuscript has no reference block."""
    blocks_by_order = {block.order: block for block in blocks}
    spellings = Spellings.of(block.text for block in blocks)  # the paper's own spellings, for line-broken titles
    placed = []
    for index, piece in enumerate(_pieces(blocks), start=1):
        regions = merge_regions(region for span in piece.spans
                                for region in _span_regions(blocks_by_order[span.block_order], span))
        page = regions[0].page if regions else blocks_by_order[piece.spans[0].block_order].page
        entry = with_repaired_title(parse_entry(piece.text, index), spellings)
        placed.append(PlacedEntry(entry, tuple(piece.spans), page, tuple(regions)))
    return placed


def entries_from_blocks(blocks: Sequence[Block]) -> list[ParsedEntry]:
    """The parsed entries of `read_bibliography`, without their places."""
    return [placed.entry for placed in read_bibliography(blocks)]
