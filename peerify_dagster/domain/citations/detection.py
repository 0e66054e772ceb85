"""Citances: the sentences of a manuscript's body that cite, their citation markers, and the markers resolved to
reference entries.

Marker styles: numeric (`[5]`, `[3, 7-9]`, `[12–14]`, `[5, Thm. 2]`, alphanumeric labels `[KW17]`), round-bracket
numeric (`(11, 15)`, `(12)`, `(3-5)`: counted only in a paper whose numbered reference list they resolve to, since
equation numbers and enumerations look the same), author-year
groups in brackets (`(Smith et al., 2020)`, `(Smith and Lee 2019a; Wu 2021)`, `(e.g., Smith, 2020)`,
`[Smith et al. 2020]`), narrative (`Smith et al. (2020) show`, `Smith and Lee [2019]`, `Smith's (2020a)`, `Smith
et al. 2020`) and Unicode superscripts (`effect¹²`, `effect.¹⁻³`). What looks like a marker but is not one is told
apart by its context: an interval (`[0, 1]`, `x ∈ [1, 10]`), an equation or figure number (`Eq. [3]`), a chemical
locant (`[1,3]-dipolar`), a year in running text or a statistic (`(n = 2019)`), a month, a power (`10²`, `cm²`).

Rules only, no model: the claim type and the hedge (`claim_type`, `is_hedged`) pick the evidence window length.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.sentences import is_prose, split_sentences

NUMERIC, AUTHOR_YEAR, NARRATIVE, SUPERSCRIPT = "numeric", "author_year", "narrative", "superscript"
ROUND_NUMERIC = "round_numeric"
LABEL_STYLES = (NUMERIC, ROUND_NUMERIC, SUPERSCRIPT)  # resolved by the entry's label


@dataclass(frozen=True)
class Marker:
    """One citation marker. `keys`: one per cited work; numeric labels as written with ranges expanded ("[3, 7-9]"
    -> "3", "7", "8", "9"), author-year works as "<first surname, lower ASCII>|<year><suffix>" ("smith|2019a")."""

    text: str
    style: str  # numeric | round_numeric | author_year | narrative | superscript
    start: int  # offsets in the text the marker was found in
    end: int
    keys: tuple[str, ...]


@dataclass(frozen=True)
class DetectedCitance:
    """A sentence (offsets in the text) carrying at least one marker; one claim per sentence, the markers keep
    their own positions so a later stage can tell which clause each supports."""

    start: int
    end: int
    markers: tuple[Marker, ...]


@dataclass(frozen=True)
class ResolvedMarker:
    """A marker and the reference entries (ParsedEntry.index) its keys name; `unresolved_keys` matched no entry or,
    listed also in `ambiguous_keys`, several (a suffix-less "smith|2019" beside "2019a" and "2019b")."""

    marker: Marker
    entry_indexes: tuple[int, ...]
    unresolved_keys: tuple[str, ...]
    ambiguous_keys: tuple[str, ...] = ()


# ---- author-year grammar -------------------------------------------------------------------------------------
_UPPER = "A-ZÀ-ÖØ-ÞĀ-ž"
_PARTICLE = r"(?i:van|von|der|den|de|del|della|dei|di|da|dos|das|du|le|la|ten|ter|al|el|bin|ibn|zu|vom|mac)"
# "O'Brien", "D’Souza", "d'Aspremont", "Al-Farabi", "Lévy-Leblond"; the possessive "Smith's" is no part of the name.
# Accents a PDF's text layer leaves as spacing characters beside their letter ("ˇReh˚uˇrek", "M¨uller"): part of the
# name, and fold_name drops them, so "ˇReh˚uˇrek" names the entry of "Řehůřek".
_SPACING_ACCENTS = "´¨˘ˇ˜¸˚˝˙¯"
_NAME_LETTER = rf"(?:[^\W\d_]|[{_SPACING_ACCENTS}])"
_NAME = (rf"(?:{_PARTICLE}\s+){{0,3}}(?:[dl]['’])?[{_SPACING_ACCENTS}]?[{_UPPER}]{_NAME_LETTER}*"
         rf"(?:['’][{_UPPER}]{_NAME_LETTER}*|-[{_UPPER}]?{_NAME_LETTER}+)*")
_ET_AL = r"\s*,?\s+et\s*\.?\s*al\b\.?"
# At most 12 names before "and": a longer capitalised list is no author list, and the bound keeps the scan linear.
_AUTHORS = rf"{_NAME}(?:\s*,\s*{_NAME}){{0,11}}(?:\s*,?\s*(?:and|&)\s+{_NAME})?(?:{_ET_AL})?"
_YEAR = r"(?:(?:1[6-9]|20)\d\d(?!\d)[a-z]?(?![\w])|in\s+press|forthcoming|n\.\s?d\.)"
_YEARS = rf"{_YEAR}(?:\s*,\s*(?:{_YEAR}|[a-z](?![\w.])))*"
_LOCATOR = r"(?:\s*[,:]\s*(?:(?:pp?|ch|chap|sec|fig|table|p)\.?\s*)?\d+(?:\s*[-–]\s*\d+)?)?"
# A year glued to a word names a corpus or a task, not a work: "(OpenSubtitles2012, en-it)", "CoNLL2003".
_ITEM = re.compile(rf"(?<![^\W\d_])(?P<authors>{_AUTHORS})(?:['’]s)?(?:\s*,\s*|\s+)(?P<years>{_YEARS})")
_GROUP = re.compile(r"\(([^()\[\]]{5,400})\)|\[([^()\[\]]{5,400})\]")
_NARRATIVE = re.compile(
    rf"(?<![^\W\d_])(?P<authors>{_AUTHORS})(?:['’]s)?\s*"
    rf"(?:\(\s*(?P<round>{_YEARS}){_LOCATOR}\s*\)|\[\s*(?P<square>{_YEARS})\s*\])"
)
# "Smith et al. 2020 showed": a bare year is a citation only after "et al.", outside brackets.
_NARRATIVE_BARE = re.compile(rf"(?<![^\W\d_])(?P<authors>{_NAME}{_ET_AL})\s*,?\s*(?P<bare>{_YEARS})")
_AUTHOR_SPLIT = re.compile(r"\s*,?\s*(?:\band\b|&)\s*|\s*,\s*")
_ET_AL_TAIL = re.compile(_ET_AL + r"$")
# Capitalised words that start a phrase before a name or a year and are no author: function words, discourse
# markers, calendar words, the names of a paper's own parts and conferences' acronyms ("However, Smith (2020)",
# "(In 2019)", "(March 2020)", "(Table 2019)", a footer's "(NIPS 2017)").
_NOT_NAMES = frozenset("""
a an the this that these those it its we our they their he she his her i you one two some many most several
other others both each all such any no not few more less
in on at by for from to of with without within into onto over under after before during since until till
between among around about across along through throughout toward towards via per upon as than like unlike
despite following according based using see cf also and or but yet so nor if when while whereas although though
because unless where which who whom whose what how why here there then thus hence therefore however moreover
furthermore additionally indeed finally first second third recently similarly likewise notably specifically
conversely nevertheless nonetheless instead meanwhile later earlier previously interestingly importantly
consequently accordingly alternatively overall again next still especially particularly originally typically
generally usually often historically traditionally today currently now e.g i.e
january february march april may june july august september october november december jan feb mar apr jun
jul aug sep sept oct nov dec spring summer autumn fall winter year years fy q1 q2 q3 q4
table tables tab figure figures fig figs eq eqs equation equations section sections sec chapter appendix
supplementary supplement algorithm theorem lemma step phase stage wave round version release edition vol
volume issue part note
nips neurips icml iclr acl naacl eacl emnlp coling conll lrec cvpr iccv eccv wacv bmvc aaai ijcai aistats kdd
sigir icassp interspeech miccai
""".split())

# ---- numeric and superscript -------------------------------------------------------------------------------
_NUMBER_ITEM = r"\d{1,3}(?:\s*[-–—]\s*\d{1,3})?"
_ALPHA_LABEL = r"[A-Z][A-Za-z+]{1,6}\d{2}[a-z]?"
_POINTER = (r"(?:\s*,\s*(?:p|pp|Thm|Theorem|Lem|Lemma|Prop|Proposition|Cor|Corollary|Sec|Sect|Section|Ch|Chap|"
            r"Chapter|Def|Definition|Eq|Eqs|Remark|Rem|Example|Ex|Fig|Table|Appendix|App|§)\.?\s*[\w.()–-]+)?")
_LABELS = rf"(?:{_NUMBER_ITEM}|{_ALPHA_LABEL})(?:\s*(?:[,;]|,?\s*and)\s*(?:{_NUMBER_ITEM}|{_ALPHA_LABEL}))*"
_NUMERIC = re.compile(
    rf"\[\s*(?P<items>{_LABELS})(?P<pointer>{_POINTER})\s*\](?:\s*[-–—]\s*\[\s*(?P<last>\d{{1,3}})\s*\])?"
)
# Physics writes "Ref. 12" and "Refs. 3-5" without brackets.
_REF_WORD = re.compile(rf"\bRefs?\.\s*(?P<items>{_NUMBER_ITEM}(?:\s*(?:,|,?\s*and)\s*{_NUMBER_ITEM})*)(?!\d|\.\d)")
# "(11, 15)", "(12)", "(3-5)": never glued to a word or a symbol before it ("f(1)", "x(2)") or after it ("(1)-th").
_ROUND_NUMERIC = re.compile(rf"(?<![\w)\]])\((?P<items>{_NUMBER_ITEM}(?:\s*[,;]\s*{_NUMBER_ITEM})*)\)(?![\w(-])")
_SUPERSCRIPT_DIGITS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUPERSCRIPT = re.compile(rf"[{_SUPERSCRIPT_DIGITS}]+(?:\s?[,⁻–-]\s?[{_SUPERSCRIPT_DIGITS}]+)*")
_TO_DIGITS = str.maketrans(_SUPERSCRIPT_DIGITS + "⁻", "0123456789-")
# Relations and set operators before a bracket make it a value ("x ∈ [1, 10]", "v = [1, 2]"); "+" and "-" do not
# (an ion before its citation: "CH3+ [54]").
_MATH_BEFORE = set("=≠≈∈∉⊂⊆⊃⊇×<>≤≥^_|∪∩→↦")
_MATH_AFTER = set("=≠≈∈⊂⊆⊃⊇×<>≤≥^_|∪∩→↦⁰¹²³⁴⁵⁶⁷⁸⁹")
# Words before a bracket that make it a range of values, not a citation ("the interval [1, 10]").
_RANGE_WORDS = frozenset({"interval", "intervals", "range", "ranges", "ranging", "domain", "segment", "window",
                          "bounded", "between", "within", "span", "spanning", "clipped", "scaled", "normalized",
                          "normalised", "uniformly", "uniform", "sampled", "drawn"})
# Words before a bracket that make it a value whatever its length ("the vector [1, 1, 2]").
_VALUE_WORDS = frozenset({"vector", "vectors", "matrix", "matrices", "array", "arrays", "tuple", "tuples", "list",
                          "coordinates", "coordinate", "point", "points", "shape", "size", "dimensions", "indices"})
# A pointer to the paper's own parts, abbreviated or capitalised before its number: "Eq. [3]", "Table [2]"
# ("the condition [1]" is a citation).
_OWN_PART = re.compile(r"(?:\b(?:Eqs?|Eqns?|Figs?|Tabs?|Secs?|Sect|Thm|Lem|Def|Prop|Alg|Ch|App)\.|"
                       r"\b(?:Equations?|Figures?|Tables?|Sections?|Chapter|Appendix|Steps?|Lines?|Theorem|Lemma|"
                       r"Definition|Proposition|Corollary|Algorithm)|\b(?:equations?|eqs?\.?))\s*$")
_MAX_RANGE = 100  # "[3-900]" is no range of references
_MAX_NAMES_CHARS = 400  # where an entry's own "et al." may stand: among its authors, before its title


def fold_name(name: str) -> str:
    """A surname compared without case, accents, spaces, apostrophes or hyphens ("D’Souza" ~ "dsouza")."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    return re.sub(r"[^a-z]", "", ascii_name)


def _previous_word(text: str, position: int) -> str:
    match = re.search(r"([^\W\d_]+)\.?\s*$", text[max(0, position - 40):position])
    return match.group(1).lower() if match else ""


def _previous_char(text: str, position: int) -> str:
    return text[max(0, position - 20):position].rstrip()[-1:]


def _expand_numbers(items: str) -> list[str]:
    """Labels as keys, ranges expanded: "3, 7-9" -> 3, 7, 8, 9 (leading zeros dropped)."""
    keys: list[str] = []
    for item in re.split(r"\s*(?:[,;]|,?\s*and)\s*", items.strip()):
        bounds = re.fullmatch(r"(\d+)\s*[-–—]\s*(\d+)", item)
        if bounds:
            low, high = int(bounds.group(1)), int(bounds.group(2))
            span = range(low, high + 1) if 0 < high - low <= _MAX_RANGE else (low, high)
            keys.extend(str(number) for number in span)
        elif item.isdigit():
            keys.append(str(int(item)))
        elif item:
            keys.append(item)
    return list(dict.fromkeys(keys))


def _numeric_markers(text: str) -> list[Marker]:
    markers = [Marker(match.group(0), NUMERIC, match.start(), match.end(), tuple(_expand_numbers(match.group("items"))))
               for match in _REF_WORD.finditer(text)]
    for match in _NUMERIC.finditer(text):
        items = match.group("items")
        if match.group("last"):  # "[1]–[3]": the references 1 to 3
            items = f"{items}-{match.group('last')}" if items.isdigit() else f"{items}, {match.group('last')}"
        keys = _expand_numbers(items)
        numbers = [int(key) for key in keys if key.isdigit()]
        if any(number == 0 for number in numbers):
            continue  # references count from 1: "[0, 1]" is an interval
        if re.match(r"-?[^\W\d_]", text[match.end():match.end() + 2]):
            continue  # a chemical locant or a name part: "[1,3]-dipolar", "[60]fullerene"
        if _is_value(text, match.start(), match.end(), keys):
            continue  # "x ∈ [1, 10]", "[1, 2]^2", "Eq. [3]", "the interval [1, 10]"
        if re.search(r"(?<![^\W\d_])[^\W\d_]$", text[max(0, match.start() - 2):match.start()]):
            continue  # indexing a one-letter symbol: "x[1]", "a[2, 3]"
        markers.append(Marker(match.group(0), NUMERIC, match.start(), match.end(), tuple(keys)))
    return markers


def _is_value(text: str, start: int, end: int, keys: Sequence[str]) -> bool:
    """A bracketed group of numbers that is a value or a pointer to the paper's own parts, not a citation: after a
    relation ("x ∈ [1, 10]"), before an operator ("[1, 2]^2"), after "Eq." or "Table", after "vector" or (two numbers)
    "interval"."""
    if _previous_char(text, start) in _MATH_BEFORE or text[end:].lstrip()[:1] in _MATH_AFTER:
        return True
    if _OWN_PART.search(text[max(0, start - 20):start]):
        return True
    previous = _previous_word(text, start)
    return previous in _VALUE_WORDS or (len(keys) == 2 and previous in _RANGE_WORDS)


def _enumeration_labels(text: str, candidates: Sequence[re.Match]) -> set[int]:
    """Starts of round-bracket numbers that count items ("(1) we parse, (2) we check"): a run from (1) to at least
    (2), each label a single number followed by its item's first word. Citations stand after what they support,
    or beside each other ("(1) (2) (3)")."""
    labels: set[int] = set()
    run: list[int] = []
    expected = 1
    for match in candidates:
        single = match.group("items").isdigit()
        opens_item = bool(re.match(r"\s+[^\W\d_]", text[match.end():match.end() + 3]))
        if single and opens_item and int(match.group("items")) == expected:
            run.append(match.start())
            expected += 1
        elif single and opens_item and int(match.group("items")) == 1:
            run, expected = [match.start()], 2
        else:
            continue
        if len(run) >= 2:
            labels.update(run)
    return labels


def _round_numeric_markers(text: str) -> list[Marker]:
    candidates = list(_ROUND_NUMERIC.finditer(text))
    enumeration = _enumeration_labels(text, candidates)
    markers = []
    for match in candidates:
        keys = _expand_numbers(match.group("items"))
        if match.start() in enumeration or any(key == "0" for key in keys):
            continue
        if _is_value(text, match.start(), match.end(), keys):
            continue
        markers.append(Marker(match.group(0), ROUND_NUMERIC, match.start(), match.end(), tuple(keys)))
    return markers


def _superscript_markers(text: str) -> list[Marker]:
    markers = []
    for match in _SUPERSCRIPT.finditer(text):
        before = text[max(0, match.start() - 3):match.start()]
        after = text[match.end():match.end() + 1]
        # After a word of three letters or more, or after the sentence's own punctuation; never a power ("10²",
        # "cm²", "(a+b)²"), a charge ("Ca²⁺") or a digit glued to a symbol ("x²y").
        after_word = len(before) == 3 and all(char.isalpha() for char in before)
        glued = bool(after) and (after in "⁺⁻" or after.isalnum())
        if not (after_word or before[-1:] in (".", ",", ";", ":")) or glued:
            continue
        keys = _expand_numbers(match.group(0).translate(_TO_DIGITS).replace(" ", ""))
        if keys and all(key.isdigit() and int(key) > 0 for key in keys):
            markers.append(Marker(match.group(0), SUPERSCRIPT, match.start(), match.end(), tuple(keys)))
    return markers


@dataclass(frozen=True)
class _Work:
    """One cited work named in an author-year marker: its authors as written, whether "et al." followed, the year,
    and how many leading names a comma (not "and") separates from the rest: "(Long Short-Term Memory, Hochreiter and
    Schmidhuber, 1997)" may be read as naming "Memory" first."""

    surnames: tuple[str, ...]
    et_al: bool
    year: str  # "2019", "in press", "n.d."
    suffix: str
    comma_led: int = 0

    @property
    def key(self) -> str:
        return f"{fold_name(self.surnames[0])}|{self.year}{self.suffix}"


def _authors(written: str) -> tuple[tuple[str, ...], bool, int, int]:
    """(surnames, et al., leading names followed by a comma, how many leading characters were not names:
    "However, Smith" -> 9)."""
    et_al = bool(_ET_AL_TAIL.search(written))
    names_part = _ET_AL_TAIL.sub("", written) if et_al else written
    pieces = _AUTHOR_SPLIT.split(names_part)
    separators = [separator.strip() for separator in _AUTHOR_SPLIT.findall(names_part)]
    names = [piece for piece in pieces if piece]
    skipped = 0
    while names and names[0].lower() in _NOT_NAMES:
        skipped = written.index(names[1], skipped) if len(names) > 1 else len(written)
        names.pop(0)
        separators = separators[1:]
    if not names or any(name.lower() in _NOT_NAMES or len(fold_name(name)) < 2 for name in names):
        return (), et_al, 0, skipped
    comma_led = 0
    while comma_led < len(separators) and separators[comma_led] == ",":
        comma_led += 1
    return tuple(names), et_al, comma_led, skipped


def _works(authors: str, years: str) -> tuple[list[_Work], int]:
    surnames, et_al, comma_led, skipped = _authors(authors)
    if not surnames:
        return [], skipped
    works: list[_Work] = []
    for part in re.split(r"\s*,\s*", years):
        year_match = re.fullmatch(r"((?:1[6-9]|20)\d\d)([a-z]?)", part)
        if year_match:
            works.append(_Work(surnames, et_al, year_match.group(1), year_match.group(2), comma_led))
        elif re.fullmatch(r"[a-z]", part) and works:  # "2019a, b"
            works.append(_Work(surnames, et_al, works[-1].year, part, comma_led))
        elif part:
            works.append(_Work(surnames, et_al, re.sub(r"\s+", " ", part.replace(". ", ".")), "", comma_led))
    return works, skipped


def _group_markers(text: str) -> list[Marker]:
    """Author-year groups in round or square brackets; a group is one marker, one key per work it names."""
    markers = []
    for group in _GROUP.finditer(text):
        content = group.group(1) if group.group(1) is not None else group.group(2)
        works: list[_Work] = []
        for item in _ITEM.finditer(content):
            found, _ = _works(item.group("authors"), item.group("years"))
            works.extend(found)
        if works:
            keys = tuple(dict.fromkeys(work.key for work in works))
            markers.append(Marker(group.group(0), AUTHOR_YEAR, group.start(), group.end(), keys))
    return markers


def _narrative_markers(text: str) -> list[Marker]:
    markers = []
    for pattern in (_NARRATIVE, _NARRATIVE_BARE):
        for match in pattern.finditer(text):
            years = next(match.group(name) for name in ("round", "square", "bare") if name in pattern.groupindex
                         and match.group(name) is not None)
            works, skipped = _works(match.group("authors"), years)
            if works:
                start = match.start() + skipped
                keys = tuple(dict.fromkeys(work.key for work in works))
                markers.append(Marker(text[start:match.end()], NARRATIVE, start, match.end(), keys))
    return markers


def find_markers(text: str) -> list[Marker]:
    """Every citation marker of `text`, in order; where two candidates overlap the longer one is kept (the group
    "(Smith et al., 2020)" over a narrative reading of a part of it)."""
    candidates = [*_group_markers(text), *_narrative_markers(text), *_numeric_markers(text),
                  *_round_numeric_markers(text), *_superscript_markers(text)]
    kept: list[Marker] = []
    for marker in sorted(candidates, key=lambda m: (-(m.end - m.start), m.start)):
        if all(marker.end <= other.start or marker.start >= other.end for other in kept):
            kept.append(marker)
    return sorted(kept, key=lambda m: m.start)


# What follows a list's label: an item's first word or quote ("[1] Read the claim.", "[2] \"Is it true?\"").
_ITEM_OPENING = re.compile(r"\s+[\"“'A-Z]")


def _list_labels(text: str, markers: Sequence[Marker]) -> set[Marker]:
    """Numeric markers that number a list rather than cite: one opening the text, or "[1]" after a colon, and the
    labels counting on from it after each item's closing punctuation ("as follows: [1] Read it. [2] Check it.")."""
    labels: set[Marker] = set()
    expected = None
    for marker in markers:
        if marker.style != NUMERIC or len(marker.keys) != 1 or not marker.keys[0].isdigit():
            continue
        number, before = int(marker.keys[0]), text[:marker.start].rstrip()
        opens = not before or (number == 1 and before.endswith(":"))
        follows = number == expected and before[-1:] in (".", ":", ";", "!", "?")
        if (opens or follows) and _ITEM_OPENING.match(text, marker.end):
            labels.add(marker)
            expected = number + 1
    return labels


def detect_citances(text: str, round_numeric: bool = False) -> list[DetectedCitance]:
    """The sentences of `text` (split_sentences) carrying at least one marker, with their markers. Sentences that
    are no prose (code, table rows, captions, running heads: `is_prose`) and a list's labels cite nothing.
    Round-bracket numbers ("(12)") count only with `round_numeric`: alone, a sentence cannot tell them from an
    equation number; `detect_paper_citances` keeps those that resolve in a paper of that style."""
    markers = [marker for marker in find_markers(text) if round_numeric or marker.style != ROUND_NUMERIC]
    labels = _list_labels(text, markers)
    citances = []
    for start, end in split_sentences(text):
        inside = tuple(marker for marker in markers if start <= marker.start < end and marker not in labels)
        if inside and is_prose(text[start:end]):
            citances.append(DetectedCitance(start, end, inside))
    return citances


def _family(style: str) -> str:
    return NUMERIC if style in LABEL_STYLES else AUTHOR_YEAR


def _majority(counted: Sequence[str]) -> str | None:
    """The style most of `counted` have; None on a tie or nothing counted."""
    ranked = Counter(counted).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def paper_style(entries: Sequence[ParsedEntry], markers: Sequence[Marker]) -> str | None:
    """The paper's own marker style: AUTHOR_YEAR (groups, narrative) or, for a numbered list, the form its labels
    are cited in (NUMERIC brackets, ROUND_NUMERIC, SUPERSCRIPT). The family more of whose markers resolve to the
    reference list's entries wins, or, where that ties (no list, a list nothing resolves to), the family most
    markers belong to; None when that ties too. Within the numbered family the form goes the same way. A numbered
    list whose labels the parser lost resolves nothing, and the paper's many numeric markers still decide.
    Round-bracket numbers count only where they resolve: unresolved, they are as likely equation numbers."""
    resolved = [found.marker for found in resolve_markers(markers, entries) if found.entry_indexes]
    counted_markers = [marker for marker in markers if marker.style != ROUND_NUMERIC]
    family = next((found for counted in (resolved, counted_markers)
                   if (found := _majority([_family(marker.style) for marker in counted])) is not None), None)
    if family != NUMERIC:
        return family
    forms = next((found for counted in (resolved, counted_markers)
                  if (found := _majority([m.style for m in counted if _family(m.style) == NUMERIC])) is not None),
                 None)
    return forms or NUMERIC


def _kept(resolved: ResolvedMarker, style: str | None) -> bool:
    """Whether a marker counts in a paper of `style`: its own style always (a round-bracket number only when it
    resolves); another family's marker where it resolves ("Smith et al. (2020)" in a numbered paper); another form
    of the paper's numbering never (footnote superscripts in a "[n]" paper, equation numbers "(3)" in a
    superscript one)."""
    style_of = resolved.marker.style
    if style_of == ROUND_NUMERIC and not resolved.entry_indexes:
        return False
    if style is None or style_of == style or (_family(style_of) == AUTHOR_YEAR and _family(style) == AUTHOR_YEAR):
        return True
    return bool(resolved.entry_indexes) and _family(style_of) != _family(style)


def detect_paper_citances(texts: Sequence[str], entries: Sequence[ParsedEntry]) -> list[list[DetectedCitance]]:
    """detect_citances for each prose text of one paper, with the paper's own style preferred (paper_style, `_kept`):
    "[2]" in an author-year paper is an index, "(NAACL-HLT 2019)" in a numbered one a venue, "(2)" in a "[n]"
    paper an equation."""
    found = [detect_citances(text, round_numeric=True) for text in texts]
    style = paper_style(entries, [marker for citances in found for citance in citances for marker in citance.markers])
    kept_per_text = []
    for citances in found:
        kept = []
        for citance in citances:
            markers = tuple(resolved.marker for resolved in resolve_markers(citance.markers, entries)
                            if _kept(resolved, style))
            if markers:
                kept.append(DetectedCitance(citance.start, citance.end, markers))
        kept_per_text.append(kept)
    return kept_per_text


# ---- resolution ---------------------------------------------------------------------------------------------
def _parse_works(marker: Marker) -> list[_Work]:
    """The works an author-year marker names, read again from its text (the keys hold the first surname only)."""
    if marker.style == AUTHOR_YEAR:
        works = []
        for item in _ITEM.finditer(marker.text):
            works.extend(_works(item.group("authors"), item.group("years"))[0])
        return works
    for pattern in (_NARRATIVE, _NARRATIVE_BARE):
        match = pattern.fullmatch(marker.text)
        if match:
            years = next(match.group(name) for name in ("round", "square", "bare") if name in pattern.groupindex
                         and match.group(name) is not None)
            return _works(match.group("authors"), years)[0]
    return []


def _surname_forms(name: str) -> set[str]:
    """A surname folded whole and by its last word: "van der Maaten" and "Maaten" name the same author."""
    words = name.split()
    return {form for form in (fold_name(name), fold_name(words[-1]) if words else "") if len(form) >= 2}


def _names_match(surnames: Sequence[str], et_al: bool, entry: ParsedEntry) -> bool:
    listed = [forms for forms in (_surname_forms(name) for name in entry.surnames) if forms]
    if not listed:  # an entry whose authors were not parsed: its raw text must begin with the first surname
        return fold_name(entry.raw_text[:60]).startswith(fold_name(surnames[0]))
    # "et al." names the first author only; "Smith and Lee" also the second, when the entry lists one.
    named = surnames[:1] if et_al else surnames
    return all(_surname_forms(name) & listed[position] for position, name in enumerate(named)
               if position < len(listed))


def _year_matches(work: _Work, entry: ParsedEntry) -> bool:
    if work.year.isdigit():
        return entry.year == int(work.year) or (entry.year is None and work.year in entry.raw_text)
    return entry.year is None  # "in press", "n.d.": an entry without a year


def _candidates(work: _Work, entries: Sequence[ParsedEntry]) -> list[ParsedEntry]:
    """Entries naming the work: first surname (the co-authors when written without "et al."), year, and the
    suffix when given. When the full author list finds none, the list without its comma-led first names is tried
    ("Memory, Hochreiter and Schmidhuber"); names joined by "and" are never dropped."""
    for drop in range(min(work.comma_led, len(work.surnames) - 1) + 1):
        surnames = work.surnames[drop:]
        found = [entry for entry in entries
                 if _year_matches(work, entry) and _names_match(surnames, work.et_al, entry)]
        if work.suffix:
            suffixed = [entry for entry in found if entry.year_suffix == work.suffix]
            # An entry list that wrote no suffix at all still names the one work of that author and year.
            found = suffixed or (found if len(found) == 1 and not found[0].year_suffix else [])
        if len(found) > 1:
            # Same first author, same year: "Wallace et al. (2000)" is the work of three or more authors, "Wallace
            # and Miller (2000)" the one of two, "Wallace (2000)" the one of one.
            counted = [entry for entry in found if _author_count_fits(work, surnames, entry)]
            found = counted if len(counted) == 1 else found
        if found:
            return found
    return []


def _author_count_fits(work: _Work, surnames: Sequence[str], entry: ParsedEntry) -> bool:
    listed = len(entry.surnames) if entry.surnames else 0
    entry_et_al = bool(re.search(r"\bet\.?\s?al\b|\bothers\b", entry.raw_text[:_MAX_NAMES_CHARS], re.IGNORECASE))
    if work.et_al:
        return listed >= 3 or entry_et_al
    return listed == len(surnames) and not entry_et_al


def resolve_markers(markers: Sequence[Marker], entries: Sequence[ParsedEntry]) -> list[ResolvedMarker]:
    """Each marker with the entries (ParsedEntry.index) its keys name: numeric keys by the entry's label,
    author-year keys by first surname (accents and case aside), year and suffix, two authors by both surnames.
    A key matching no entry, or several (a suffix-less key beside "2019a" and "2019b"), stays unresolved: nothing
    is guessed."""
    by_label: dict[str, list[int]] = {}
    for entry in entries:
        if entry.label:
            by_label.setdefault(entry.label.strip().strip("[]().").lstrip("0") or "0", []).append(entry.index)
    resolved = []
    for marker in markers:
        indexes: list[int] = []
        unresolved: list[str] = []
        ambiguous: list[str] = []
        if marker.style in LABEL_STYLES:
            for key in marker.keys:
                found = by_label.get(key, [])
                if len(found) == 1:
                    indexes.extend(found)
                else:
                    unresolved.append(key)
                    if found:
                        ambiguous.append(key)
        else:
            works = {work.key: work for work in _parse_works(marker)}
            for key in marker.keys:
                found = _candidates(works[key], entries) if key in works else []
                if len(found) == 1:
                    indexes.append(found[0].index)
                else:
                    unresolved.append(key)
                    if found:
                        ambiguous.append(key)
        resolved.append(ResolvedMarker(marker, tuple(dict.fromkeys(indexes)), tuple(unresolved), tuple(ambiguous)))
    return resolved


# ---- claim type and hedge -----------------------------------------------------------------------------------
_CAUSAL = re.compile(
    r"\b(?:caus(?:e|es|ed|ing|al(?:ly)?)|lead(?:s|ing)? to|led to|result(?:s|ed|ing)? in|due to|because|owing to|"
    r"induc(?:e|es|ed|ing)|increas(?:e|es|ed|ing)|decreas(?:e|es|ed|ing)|reduc(?:e|es|ed|ing)|improv(?:e|es|ed|ing)|"
    r"enhanc(?:e|es|ed|ing)|inhibit(?:s|ed|ing)?|promot(?:e|es|ed|ing)|trigger(?:s|ed|ing)?|driv(?:e|es|en|ing)|"
    r"affect(?:s|ed|ing)?|effects? of|impacts? (?:of|on)|contribut(?:e|es|ed|ing) to|responsible for|"
    r"mediat(?:e|es|ed|ing)|prevent(?:s|ed|ing)?|suppress(?:es|ed|ing)?|activat(?:e|es|ed|ing)|block(?:s|ed)|"
    r"as a result|therefore|thereby|gives? rise to|gave rise to)\b", re.IGNORECASE)
_PREDICTIVE = re.compile(
    r"\b(?:predict(?:s|ed|ing|ion|ions|ive)?|forecast(?:s|ed|ing)?|will|is expected to|are expected to|"
    r"projected|projections?|anticipat(?:e|es|ed)|future)\b", re.IGNORECASE)
_COMPARATIVE = re.compile(
    r"\b(?:outperform(?:s|ed|ing)?|than|superior to|inferior to|compared (?:with|to)|in comparison|relative to|"
    r"versus|vs\.|exceed(?:s|ed|ing)?|surpass(?:es|ed|ing)?)", re.IGNORECASE)
_QUANTITATIVE = re.compile(
    # A number with a unit or a percentage (units are case-sensitive: "mM" is no "MM"; "the 1990s" is no duration)
    r"(?<![\w.])(?!(?:1[6-9]|20)\d\ds\b)\d(?:[\d.,]*\d)?\s*(?:%|[Pp]ercent\b|[Pp]er cent\b|-?fold\b|×|"
    r"(?:mg|kg|g|µg|μg|ng|ml|mL|µl|μl|l|L|mm|cm|m|km|nm|"
    r"µm|μm|s|ms|min|h|hr|hrs|hours?|days?|weeks?|months?|years?|K|°C|°F|eV|keV|MeV|GeV|TeV|Hz|kHz|MHz|GHz|"
    r"W|kW|MW|GW|"
    r"kWh|MWh|V|mV|kV|A|mA|Pa|kPa|MPa|GPa|bar|mol|mmol|mM|µM|μM|nM|dB|bits?|bytes?|[KMGT]B|ppm|ppb|USD|EUR|\$)\b)"
    r"|[$€£]\s?\d|\b[pP]\s*[<=>≤]\s*0?\.\d")
_HEDGES = re.compile(
    r"\b(?:may|might|could|possibl[ey]|perhaps|probabl[ey]|likely|unlikely|suggest(?:s|ed|ing|ion|ions)?|"
    r"appears? to|appeared to|seems? to|seemed to|potential(?:ly)?|presumabl[ey]|putative(?:ly)?|"
    r"hypothes[ie][sz](?:e|es|ed|is)?|speculat(?:e|es|ed|ive)|tends? to|plausibl[ey]|it is possible|"
    r"to some extent|indicat(?:e|es|ed|ing)|unclear|uncertain)\b")


def _without_markers(sentence: str) -> str:
    """The sentence with its markers cut out, so "[5]" or "(Smith 2020)" is never read as a quantity or word."""
    for marker in reversed(find_markers(sentence)):
        sentence = sentence[:marker.start] + " " + sentence[marker.end:]
    return sentence


def claim_type(sentence: str) -> str:
    """causal | predictive | comparative | quantitative | descriptive, the first whose cue words occur."""
    prose = _without_markers(sentence)
    for kind, pattern in (("causal", _CAUSAL), ("predictive", _PREDICTIVE), ("comparative", _COMPARATIVE),
                          ("quantitative", _QUANTITATIVE)):
        if pattern.search(prose):
            return kind
    return "descriptive"


def is_hedged(sentence: str) -> bool:
    """Whether the claim is hedged ("may", "might", "suggests", "likely", "appears to", ...); "May" the month
    starts no hedge."""
    prose = _without_markers(sentence)
    return bool(_HEDGES.search(prose) or re.match(r"\s*(?:May|Might|Could|Perhaps|Possibly)\b(?!\s+\d)", prose))
