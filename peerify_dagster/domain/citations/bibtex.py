"""BibTeX files read exactly, turned into reference entries, corrected and written back.

`read_bibtex` is a tolerant reader written here (no dependency): entry types and field names in any case, braced
values with nested braces, quoted values, bare numbers, `@string` macros (and the standard month macros jan..dec),
`#` concatenation, `@comment` and `@preamble` skipped, text between entries ignored. A malformed entry is reported
as "SOURCE:LINE: reason" (the line its "@" is on) and reading goes on with the next entry that starts a line; a key
given twice is reported and, as BibTeX does, the first entry kept. Values stay TeX as written (macros expanded,
runs of whitespace made one space), so that `write_bibtex` gives them back as the source had them: a file read,
written and read again gives the same entries.

`tex_to_text` turns a TeX value into plain Unicode (accents, special letters, escaped characters, dashes, protecting
braces and font commands removed, math kept as text without its dollars); `to_parsed_entry` builds the `ParsedEntry`
every citation stage shares from the fields, and `corrected_entry` replaces fields, listing what it changed.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from peerify_dagster.domain.citations.entries import PARSED, PARTIAL, UNPARSED, ParsedEntry
from peerify_dagster.domain.citations.metadata import normalise_doi
from peerify_dagster.domain.citations.resolution import arxiv_ids_in_text, canonical_arxiv_id

FIELD_SOURCE = "bibtex"  # what ParsedEntry.field_sources names for every field read from a BibTeX entry
MONTH_MACROS = {month[:3].lower(): month for month in (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
    "December")}
# Fields whose values are written verbatim (LaTeX reads them with \url or not at all): no TeX escaping is added there.
VERBATIM_FIELDS = frozenset({"url", "doi", "eprint", "file", "pdf"})

# --- TeX to Unicode -----------------------------------------------------------------------------------------------

_SYMBOL_ACCENTS = {'"': "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", "=": "\u0304",
                   ".": "\u0307"}
_LETTER_ACCENTS = {"c": "\u0327", "v": "\u030c", "u": "\u0306", "H": "\u030b", "k": "\u0328", "r": "\u030a",
                   "d": "\u0323", "b": "\u0331"}
_ACCENTED = r"(\\[ij](?![A-Za-z])|[A-Za-z])"  # the letter an accent sits on; a dotless i or j written \i, \j
_SYMBOL_ACCENT = re.compile(rf"\\([\"'`^~=.])\s*(?:\{{\s*{_ACCENTED}\s*\}}|{_ACCENTED})")
_LETTER_ACCENT = re.compile(rf"\\([cvuHkrdb])(?:\s*\{{\s*{_ACCENTED}\s*\}}|\s+{_ACCENTED})")
_SPECIAL_LETTERS = {"ss": "ß", "o": "ø", "O": "Ø", "aa": "å", "AA": "Å", "ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ",
                    "l": "ł", "L": "Ł", "i": "ı", "j": "ȷ"}
# A control word swallows the spaces after it ("Sm\o rgrav"); "{}" ends it without a space ("\ss{}e").
_SPECIAL_LETTER = re.compile(r"\\(ss|aa|AA|ae|AE|oe|OE|o|O|l|L|i|j)(?![A-Za-z])(?:\{\}|[ \t]+)?")
_GREEK_NAMES = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau upsilon phi "
                "chi psi omega").split()
_SYMBOLS = {
    **dict(zip(_GREEK_NAMES, "αβγδεζηθικλμνξπρστυφχψω")),
    **dict(zip((name.capitalize() for name in _GREEK_NAMES), "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΠΡΣΤΥΦΧΨΩ")),
    "varepsilon": "ε", "vartheta": "ϑ", "varphi": "φ", "ell": "ℓ", "infty": "∞", "sim": "∼", "approx": "≈",
    "times": "×", "pm": "±", "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "neq": "≠", "cdot": "·", "to": "→",
    "rightarrow": "→", "leftarrow": "←", "ldots": "…", "dots": "…", "textendash": "–", "textemdash": "—",
    "textquoteleft": "‘", "textquoteright": "’", "textquotedblleft": "“", "textquotedblright": "”", "S": "§",
    "P": "¶", "copyright": "©", "textregistered": "®", "texttrademark": "™", "textdegree": "°", "degree": "°",
    "euro": "€", "pounds": "£", "textbackslash": "\\", "LaTeX": "LaTeX", "TeX": "TeX", "BibTeX": "BibTeX",
}
_SYMBOL_COMMAND = re.compile(r"\\([A-Za-z]+)(?![A-Za-z])(?:\{\})?")
_ESCAPED = re.compile(r"\\([&%_$#{}])")
_CONTROL_SYMBOL = re.compile(r"\\([^A-Za-z])")
_CONTROL_SYMBOL_TEXT = {" ": " ", ",": " ", ";": " ", ":": " ", "!": "", "-": "", "/": "", "@": "", "(": "", ")": "",
                        "[": "", "]": ""}
_VERBATIM_ARGUMENT = re.compile(r"\\(url|doi)\s*\{([^{}]*)\}")
_DROPPED_FIRST_ARGUMENT = re.compile(r"\\(?:href|textcolor|colorbox)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z@]+\*?")
_PROTECTED = re.compile("\uf8f0(\\d+)\uf8f1")


def _literal(value: str) -> str:
    """A verbatim value (a URL or DOI) with TeX's escapes and braces taken off: "10.1000/a\\_b" -> "10.1000/a_b"."""
    return re.sub(r"[{}]", "", re.sub(r"\\([&%_$#~])", r"\1", value.replace(r"\~{}", "~"))).strip()


def tex_to_text(value: str) -> str:
    """A TeX value as plain Unicode text: accents composed (\\"{o}, {\\"o}, \\'e, \\c{c}, \\v{s}, ...), special
    letters (\\ss, \\o, \\aa, \\l, ...), escaped characters (\\& \\% \\_ \\$ \\#), "--" and "---" as dashes, "~" as a
    space, protecting braces and font commands removed ({BERT} -> BERT, \\emph{x} -> x), math kept as text without
    its dollars ($\\alpha$ -> α); \\url and \\doi arguments kept verbatim, \\href's link text kept."""
    protected: list[str] = []

    def protect(text: str) -> str:
        protected.append(text)
        return f"\uf8f0{len(protected) - 1}\uf8f1"

    text = _VERBATIM_ARGUMENT.sub(
        lambda match: protect(("doi:" if match.group(1) == "doi" else "") + _literal(match.group(2))), value)
    text = _DROPPED_FIRST_ARGUMENT.sub("", text)
    text = text.replace("\\\\", " ")
    text = _ESCAPED.sub(lambda match: protect(match.group(1)), text)
    text = text.replace(r"\~{}", protect("~"))
    text = _SYMBOL_ACCENT.sub(lambda match: _accented(match, _SYMBOL_ACCENTS), text)
    text = _LETTER_ACCENT.sub(lambda match: _accented(match, _LETTER_ACCENTS), text)
    text = _SPECIAL_LETTER.sub(lambda match: _SPECIAL_LETTERS[match.group(1)], text)
    text = _SYMBOL_COMMAND.sub(lambda match: protect(_SYMBOLS[match.group(1)]) if match.group(1) in _SYMBOLS
                               else match.group(0), text)
    text = _COMMAND.sub("", text)  # font and other commands: their braced arguments stay as text
    text = _CONTROL_SYMBOL.sub(lambda match: _CONTROL_SYMBOL_TEXT.get(match.group(1), ""), text)
    text = text.replace("---", "—").replace("--", "–").replace("~", " ").replace("``", "“").replace("''", "”")
    text = re.sub(r"[{}$]", "", text)
    text = _PROTECTED.sub(lambda match: protected[int(match.group(1))], text)
    return unicodedata.normalize("NFC", " ".join(text.split()))


def _accented(match: re.Match[str], accents: Mapping[str, str]) -> str:
    letter = match.group(2) or match.group(3)
    base = letter[1] if letter.startswith("\\") else letter  # an accent on \i or \j sits on a plain i or j
    return unicodedata.normalize("NFC", base + accents[match.group(1)])


# --- Reading ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BibtexEntry:
    """One entry. `entry_type` lower-cased ("article"); `fields` in the order written, names lower-cased, values as
    TeX with macros expanded, concatenations joined and whitespace runs made one space. Two entries are equal when
    their type, key and fields are: where they were read (`source`, `line`) does not count."""

    entry_type: str
    key: str
    fields: tuple[tuple[str, str], ...]
    line: int = field(default=0, compare=False)
    source: str = field(default="", compare=False)

    def get(self, name: str) -> str | None:
        """The value of a field (any case), or None."""
        name = name.lower()
        return next((value for field_name, value in self.fields if field_name == name), None)


@dataclass(frozen=True)
class BibtexFile:
    """A .bib file read: its entries in order (a repeated key's later entries left out), its @string macros and
    what was wrong with it ("SOURCE:LINE: reason")."""

    source: str
    entries: tuple[BibtexEntry, ...]
    macros: Mapping[str, str]
    problems: tuple[str, ...]

    def entry(self, key: str) -> BibtexEntry | None:
        return next((entry for entry in self.entries if entry.key == key), None)


class _Malformed(Exception):
    """Raised inside one entry; the reader reports it and goes on with the next entry."""


_IDENTIFIER = re.compile(r"[^\s\"#%'(),={}0-9][^\s\"#%'(),={}]*")
_ENTRY_START = re.compile(r"@[ \t]*([A-Za-z][\w-]*)\s*([{(])")
_LINE_START_ENTRY = re.compile(r"^[ \t]*@", re.MULTILINE)
_KEY = re.compile(r"[^\s,{}()\"=#%]+")
_NUMBER = re.compile(r"\d+")
_WHITESPACE = re.compile(r"\s*")


class _Reader:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source or "<bibtex>"
        self.position = 0
        self.macros: dict[str, str] = {}
        self.problems: list[str] = []
        self._line_starts = [0] + [match.end() for match in re.finditer("\n", text)]

    def line_of(self, position: int) -> int:
        return bisect.bisect_right(self._line_starts, position)

    def report(self, position: int, reason: str) -> None:
        self.problems.append(f"{self.source}:{self.line_of(position)}: {reason}")

    def skip_whitespace(self) -> None:
        self.position = _WHITESPACE.match(self.text, self.position).end()

    def peek(self) -> str:
        self.skip_whitespace()
        return self.text[self.position:self.position + 1]

    def expect(self, characters: str, what: str) -> str:
        found = self.peek()
        if not found or found not in characters:
            shown = repr(found) if found else "the end of the file"
            raise _Malformed(f"expected {what}, found {shown} on line {self.line_of(self.position)}")
        self.position += 1
        return found

    def identifier(self, what: str) -> str:
        self.skip_whitespace()
        match = _IDENTIFIER.match(self.text, self.position)
        if not match:
            raise _Malformed(f"expected {what} on line {self.line_of(self.position)}")
        self.position = match.end()
        return match.group(0)

    def braced(self) -> str:
        """The text inside the braces opening at the current position, nested braces kept."""
        depth, start = 0, self.position
        for position in range(self.position, len(self.text)):
            character = self.text[position]
            if character == "{":
                depth += 1
            elif character == "}":
                depth -= 1
                if depth == 0:
                    self.position = position + 1
                    return self.text[start + 1:position]
        raise _Malformed(f"a brace opened on line {self.line_of(start)} is never closed")

    def quoted(self) -> str:
        """The text inside the quotes opening at the current position (a quote inside braces does not close)."""
        depth, start = 0, self.position
        for position in range(self.position + 1, len(self.text)):
            character = self.text[position]
            if character == "{":
                depth += 1
            elif character == "}":
                depth -= 1
            elif character == '"' and depth == 0:
                self.position = position + 1
                return self.text[start + 1:position]
        raise _Malformed(f"a quote opened on line {self.line_of(start)} is never closed")

    def value(self) -> str:
        """A field's value: parts joined by "#", each braced, quoted, a number or a macro."""
        parts = [self.part()]
        while self.peek() == "#":
            self.position += 1
            parts.append(self.part())
        return " ".join("".join(parts).split())

    def part(self) -> str:
        found = self.peek()
        if found == "{":
            return self.braced()
        if found == '"':
            return self.quoted()
        if number := _NUMBER.match(self.text, self.position):
            self.position = number.end()
            return number.group(0)
        start = self.position
        name = self.identifier("a value").lower()
        if name in self.macros:
            return self.macros[name]
        if name in MONTH_MACROS:
            return MONTH_MACROS[name]
        self.report(start, f"undefined macro '{name}' (read as empty, as BibTeX does)")
        return ""

    def entries(self) -> list[BibtexEntry]:
        entries: list[BibtexEntry] = []
        first_line: dict[str, int] = {}
        while (at := self.text.find("@", self.position)) >= 0:
            start = _ENTRY_START.match(self.text, at)
            if not start:
                self.position = at + 1  # an "@" in the text between entries ("a@b.org") starts nothing
                continue
            self.position = start.end()
            entry_type, closing = start.group(1).lower(), ")" if start.group(2) == "(" else "}"
            try:
                entry = self.entry(entry_type, closing, at)
            except _Malformed as malformed:
                key = self._key_after(start.end())
                self.report(at, f"malformed @{entry_type} entry{f' {key!r}' if key else ''}: {malformed}")
                following = _LINE_START_ENTRY.search(self.text, at + 1)
                self.position = following.end() - 1 if following else len(self.text)
                continue
            if entry is None:
                continue
            folded = entry.key.lower()
            if folded in first_line:
                self.report(at, f"duplicate key '{entry.key}' (first at line {first_line[folded]}); this entry is "
                                f"left out, as BibTeX does")
                continue
            first_line[folded] = entry.line
            entries.append(entry)
        return entries

    def _key_after(self, position: int) -> str | None:
        match = _KEY.match(self.text, _WHITESPACE.match(self.text, position).end())
        return match.group(0) if match else None

    def entry(self, entry_type: str, closing: str, at: int) -> BibtexEntry | None:
        if entry_type == "comment":
            if self.text[self.position - 1] == "{":
                self.position -= 1
                self.braced()
            return None
        if entry_type == "preamble":
            self.value()
            self.expect(closing, f"'{closing}' closing the @preamble")
            return None
        if entry_type == "string":
            name = self.identifier("a macro name").lower()
            self.expect("=", "'=' after the macro name")
            self.macros[name] = self.value()
            self.expect(closing, f"'{closing}' closing the @string")
            return None
        self.skip_whitespace()
        key = _KEY.match(self.text, self.position)
        if not key:
            raise _Malformed("the entry has no key")
        self.position = key.end()
        fields: dict[str, str] = {}
        while True:
            if self.expect("," + closing, f"',' or '{closing}'") == closing:
                break
            if self.peek() == closing:  # a comma after the last field
                self.position += 1
                break
            name_at = self.position
            name = self.identifier("a field name").lower()
            self.expect("=", f"'=' after the field name '{name}'")
            value = self.value()
            if name in fields:
                self.report(name_at, f"entry '{key.group(0)}': field '{name}' given twice; the first is kept")
            else:
                fields[name] = value
        return BibtexEntry(entry_type, key.group(0), tuple(fields.items()), self.line_of(at), self.source)


def read_bibtex(text: str, source: str = "") -> BibtexFile:
    """Every entry of a .bib file's text (see the module docstring); `source` names the file in problems. Never
    raises on the file's content."""
    reader = _Reader(text.lstrip("\ufeff"), source)
    entries = reader.entries()
    return BibtexFile(source, tuple(entries), dict(reader.macros), tuple(reader.problems))


# --- Names --------------------------------------------------------------------------------------------------------


def _split_top_level(text: str, separator: re.Pattern[str]) -> list[str]:
    """`text` split where `separator` matches outside braces (BibTeX's rule for "and" between names, commas and
    spaces inside a name): "{Barnes and Noble} and Lee" -> ["{Barnes and Noble}", "Lee"]."""
    depths, depth = [], 0
    for character in text:
        depths.append(depth)
        depth += (character == "{") - (character == "}")
    parts, start = [], 0
    for match in separator.finditer(text):
        if depths[match.start()] == 0 and match.start() >= start:
            parts.append(text[start:match.start()])
            start = match.end()
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
_COMMA = re.compile(r",")
_SPACE = re.compile(r"[\s~]+")


def _is_von(token: str) -> bool:
    """BibTeX's von part: a word whose first letter outside braces is lower case; a braced group counts as upper
    case ("{van der Berg}" is a surname), an accented letter "{\\'e}" as its letter."""
    position = 0
    while position < len(token):
        character = token[position]
        if character == "{":
            if token[position + 1:position + 2] != "\\":
                return False
            letters = [letter for letter in tex_to_text(token[position:]) if letter.isalpha()]
            return bool(letters) and letters[0].islower()
        if character.isalpha():
            return character.islower()
        position += 1
    return False


@dataclass(frozen=True)
class PersonName:
    """A BibTeX name in its parts, as plain text: "Ludwig van Beethoven" -> given "Ludwig", family "van
    Beethoven" (the von part kept with the surname, as a reference list prints it)."""

    given: str
    family: str
    suffix: str = ""

    @property
    def display(self) -> str:
        return " ".join(part for part in (self.given, self.family, self.suffix) if part)


def parse_name(name: str) -> PersonName:
    """One name in any of BibTeX's three forms: "First von Last", "von Last, First", "von Last, Jr, First"."""
    parts = _split_top_level(name, _COMMA)
    if len(parts) >= 2:  # the von part leads the surname, which keeps it
        suffix = parts[1] if len(parts) >= 3 else ""
        return PersonName(tex_to_text(parts[-1]), tex_to_text(parts[0]), tex_to_text(suffix))
    words = _split_top_level(name, _SPACE)
    von = [index for index, word in enumerate(words[:-1]) if _is_von(word)]
    first_end = von[0] if von else len(words) - 1
    return PersonName(tex_to_text(" ".join(words[:first_end])), tex_to_text(" ".join(words[first_end:])))


def _authors(entry: BibtexEntry) -> list[PersonName]:
    """The names of the "and"-separated author field ("others", BibTeX's "et al.", left out)."""
    value = entry.get("author") or ""
    return [parse_name(name) for name in _split_top_level(value, _AND) if name.lower() != "others"]


# --- Entries ------------------------------------------------------------------------------------------------------

_YEAR = re.compile(r"(?<!\d)(1[5-9]\d\d|20\d\d)(?!\d)")
_DOI_IN_URL = re.compile(r"doi\.org/(10\.\d{4,9}/\S+)", re.IGNORECASE)
_ARXIV_IN_LINK = re.compile(r"(?:arxiv\.org/(?:abs|pdf)/|10\.48550/arxiv\.)([\w.\-/]+?\d)(?:v\d+)?(?:\.pdf)?$",
                            re.IGNORECASE)
_VENUE_FIELDS = ("journal", "journaltitle", "booktitle")


def _arxiv_id(entry: BibtexEntry, doi: str | None, url: str | None) -> str | None:
    """From the eprint of an arXiv entry, an arXiv URL or DOI, or an "arXiv:ID" in the eprint or journal."""
    eprint = _literal(entry.get("eprint") or "")
    archive = (entry.get("archiveprefix") or entry.get("eprinttype") or "").lower()
    if eprint and "arxiv" in archive:
        return canonical_arxiv_id(re.sub(r"^arxiv:\s*", "", eprint, flags=re.IGNORECASE))
    for link in (url, doi):
        if link and (match := _ARXIV_IN_LINK.search(link)):
            return canonical_arxiv_id(match.group(1))
    stamped = arxiv_ids_in_text(f"{eprint} {tex_to_text(entry.get('journal') or '')}")
    return stamped[0] if stamped else None


def _sentence(part: str) -> str:
    return part if part.endswith((".", "?", "!")) else f"{part}."


def _reference_text(authors: Iterable[str], year: int | None, title: str | None, venue: str | None) -> str:
    """A readable one-line reference, "A, B, and C. 2019. Title. Venue.", from what is known."""
    names = list(authors)
    written = (names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2
               else ", ".join(names[:-1]) + f", and {names[-1]}" if names else "")
    parts = [written, str(year) if year else "", title or "", venue or ""]
    return " ".join(_sentence(part) for part in parts if part)


def to_parsed_entry(entry: BibtexEntry, index: int) -> ParsedEntry:
    """The entry's fields as a ParsedEntry (`label` its key, every field source "bibtex"): `parsed` with a title,
    authors and a year, `partial` with some of them (the reason says which are missing), `unparsed` with none and
    no identifier."""
    names = _authors(entry)
    title = tex_to_text(entry.get("title") or "") or None
    year_match = _YEAR.search(entry.get("year") or entry.get("date") or "")
    year = int(year_match.group(1)) if year_match else None
    venue = next((tex_to_text(value) for name in _VENUE_FIELDS if (value := entry.get(name))), None) or None
    url = _literal(entry.get("url") or "") or None
    doi = normalise_doi(_literal(entry.get("doi") or ""))
    if doi is None and url and (in_url := _DOI_IN_URL.search(url)):
        doi = normalise_doi(in_url.group(1))
    arxiv_id = _arxiv_id(entry, doi, url)
    found = {"label": entry.key, "authors": names, "title": title, "year": year, "venue": venue, "doi": doi,
             "arxiv_id": arxiv_id, "url": url}
    sources = {name: FIELD_SOURCE for name, value in found.items() if value}
    if title and names and year:
        status, reason = PARSED, None
    elif any(found[name] for name in ("authors", "title", "year", "venue", "doi", "arxiv_id", "url")):
        missing = [name for name in ("title", "authors", "year") if not found[name]]
        status, reason = PARTIAL, "no " + " or ".join(missing) + " found"
    else:
        status, reason = UNPARSED, f"entry '{entry.key}' has no author, title, year, venue or identifier field"
    authors = tuple(name.display for name in names)
    return ParsedEntry(
        index=index, raw_text=_reference_text(authors, year, title, venue), label=entry.key, authors=authors,
        surnames=tuple(name.family for name in names if name.family), title=title, year=year, venue=venue, doi=doi,
        arxiv_id=arxiv_id, url=url, field_sources=sources, status=status, reason=reason,
    )


# --- Writing and correcting ---------------------------------------------------------------------------------------


def _balanced(value: str) -> bool:
    depth = 0
    for character in value:
        depth += (character == "{") - (character == "}")
        if depth < 0:
            return False
    return depth == 0


def write_bibtex(entries: Iterable[BibtexEntry]) -> str:
    """The entries as BibTeX, each value braced as it is held (TeX kept as the source wrote it); reading the text
    gives the same entries back."""
    blocks = []
    for entry in entries:
        lines = [f"@{entry.entry_type}{{{entry.key},"]
        lines.extend(f"  {name} = {{{value}}}," for name, value in entry.fields)
        lines.append("}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def corrected_entry(entry: BibtexEntry, changes: Mapping[str, str]) -> tuple[BibtexEntry, list[str]]:
    """A copy of the entry with these fields replaced or added (names in any case; "&", "%" and "#" not yet escaped
    are escaped outside verbatim fields, since LaTeX would stop on them) and the changes made, in words: "title:
    'Old' -> 'New'", "doi: added '10.1/x'". A value equal to the one held changes nothing. Raises ValueError naming
    the entry and field for a value with unbalanced braces, which no .bib file can hold."""
    fields = dict(entry.fields)
    described = []
    for name, value in changes.items():
        name = name.lower()
        value = " ".join(value.split())
        if not _balanced(value):
            raise ValueError(f"entry '{entry.key}': the new {name} has unbalanced braces: {value!r}")
        if name not in VERBATIM_FIELDS:
            value = re.sub(r"(?<!\\)([&%#])", r"\\\1", value)
        old = fields.get(name)
        if old == value:
            continue
        described.append(f"{name}: '{old}' -> '{value}'" if old is not None else f"{name}: added '{value}'")
        fields[name] = value
    return replace(entry, fields=tuple(fields.items())), described
