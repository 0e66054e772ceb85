"""A LaTeX project as the citation checker reads it: its prose with the citation commands marked, its bibliography
(.bib files, the compiled .bbl or an embedded thebibliography) and what is wrong with it.

`read_latex_source` takes the project's text files (relative posix paths to their text, e.g. from
`arxiv_source_files`) and:

* finds the main file: the .tex with both \\documentclass and \\begin{document} (of several, the one no other file
  inputs; of several still, the shallowest, then the first by name, reported);
* follows \\input{x}, \\input x, \\include{x} and \\subfile{x} (".tex" added when missing; relative to the main
  file's folder, else to the including file's), a subfile contributing its document body only; a missing file or
  a cycle is reported at the line that names it and read as empty;
* strips comments as TeX does ("%" not escaped as "\\%" ends the line and joins the next to it, so a comment line
  never makes a paragraph break) and keeps the body between \\begin{document} and \\end{document} (without an
  \\end{document}, the body ends after the bibliography: \\bibliography{..}, \\printbibliography or the end of
  thebibliography);
* turns the body into paragraphs of plain text (blank lines separate them): section titles (\\section,
  \\subsection, ...) become heading paragraphs, and every other paragraph names the last heading as its section;
  figures, tables, equations, alignments, verbatim and listings, TikZ pictures and tabulars are dropped with their
  captions; inline math shorter than `SHORT_MATH` characters is kept as its text ($k$ -> "k", $\\alpha$ -> "α"),
  longer math becomes MATH_PLACEHOLDER; \\ref and its kin become "#"; footnotes become paragraphs of their own
  after the paragraph that holds them; font macros (\\emph, \\textbf, ...) are unwrapped and TeX becomes Unicode
  (`bibtex.tex_to_text`);
* writes each citation command (\\cite, \\citep, \\citet, \\citealp, \\citealt, \\citeauthor, \\citeyear, \\citenum,
  \\parencite, \\textcite, \\autocite, \\footcite, \\smartcite, \\supercite, capitalised and starred forms, with zero
  to two optional arguments) into the text as a marker in pandoc's form, "[@key1; @key2]" (the optional pre- and
  post-notes dropped), and records each marker as a `LatexMarker` (start, end, keys, command) of its paragraph;
  \\nocite keys are recorded, with no marker.

`citances` gives the sentences (`sentences.split_sentences`) that hold markers, with their keys, section and
paragraph; a parenthetical marker left after a sentence's full stop ("effect.~\\cite{x} The ...") belongs to the
sentence before it.

The bibliography: the .bib files named by \\bibliography{a,b} or \\addbibresource{x.bib} (`bibtex.read_bibtex`),
and the compiled one, an embedded thebibliography, else the .bbl named after the main file (else the only .bbl):
`read_bbl` reads natbib / BibTeX-style and biblatex .bbl text, `bbl_entries` makes ParsedEntry of its items and
`reference_entries` gives the paper's reference list, each entry from its .bib fields where it has them.

Problems (a missing input or .bib file, an input cycle, a key cited but in no bibliography, a malformed .bib entry,
an environment never closed) are collected as "FILE:LINE: reason" on the result, never raised; only a source with
no main file raises `LatexSourceError`, naming the files it holds. `arxiv_source_files` unpacks an arXiv source
download in memory (members escaping the folder and links skipped with a problem; past a size limit, an error).
"""

from __future__ import annotations

import bisect
import gzip
import io
import posixpath
import re
import tarfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import NamedTuple

from peerify_dagster.domain.citations.bibliography import parse_entry
from peerify_dagster.domain.citations.bibtex import (
    BibtexEntry,
    BibtexFile,
    read_bibtex,
    tex_to_text,
    to_parsed_entry,
)
from peerify_dagster.domain.citations.entries import ParsedEntry
from peerify_dagster.domain.citations.sentences import split_sentences

SHORT_MATH = 8  # inline math whose text is at most this long (and one word) stays as its text
MATH_PLACEHOLDER = "[math]"
REFERENCE_PLACEHOLDER = "#"  # what \ref{...} and its kin print here
MAX_UNPACKED_BYTES = 50 * 1024 * 1024  # text files unpacked from one source archive, at most
SOURCE_EXTENSIONS = (".tex", ".bib", ".bbl", ".sty", ".cls")


class LatexSourceError(ValueError):
    """A LaTeX source that cannot be read at all: no main file, or an archive that is none or too large."""


# --- Results ------------------------------------------------------------------------------------------------------


class LatexMarker(NamedTuple):
    """A citation command as written into a paragraph's text: text[start:end] is "[@key1; @key2]"; `command` as
    written, without its backslash ("citep", "citet*")."""

    start: int
    end: int
    keys: tuple[str, ...]
    command: str


@dataclass(frozen=True)
class LatexParagraph:
    """One paragraph of plain text, or a heading (`heading` True, `text` the title). `section`: the title of the
    last heading before it (its own for a heading), None before the first."""

    text: str
    markers: tuple[LatexMarker, ...] = ()
    section: str | None = None
    heading: bool = False


@dataclass(frozen=True)
class LatexCitation:
    """A citation command of the body where the source has it (figure and table captions included)."""

    file: str
    line: int
    command: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class LatexCitance:
    """A sentence holding citation markers: its text, the keys it cites (in order, each once), the section and the
    index of its paragraph in `LatexSource.paragraphs`, its offsets in that paragraph's text and its markers (offsets
    in the paragraph's text too)."""

    text: str
    keys: tuple[str, ...]
    section: str | None
    paragraph: int
    start: int
    end: int
    markers: tuple[LatexMarker, ...]


@dataclass(frozen=True)
class BblItem:
    """One entry of a compiled bibliography. `key` the citation key; `label` what the style prints for it (natbib's
    "[Devlin et al.(2019)...]" label, biblatex's labelalpha), as plain text; `text` the entry as plain Unicode; for a
    biblatex .bbl, `entry` holds its fields as a BibTeX entry (names in BibTeX's "von Last, Jr, First" form)."""

    key: str
    label: str | None
    text: str
    entry: BibtexEntry | None = None


@dataclass(frozen=True)
class LatexSource:
    """A LaTeX project read (see the module docstring). `tex_files`: the main file, then the files it inputs, in
    the order first read; `citations`: every citation command of the body; `bibtex`: the .bib files named by
    \\bibliography or \\addbibresource and found; `bbl_items` from the embedded thebibliography, else the .bbl;
    `bbl_source` the file they came from."""

    main_file: str
    tex_files: tuple[str, ...]
    paragraphs: tuple[LatexParagraph, ...]
    citations: tuple[LatexCitation, ...]
    nocite_keys: tuple[str, ...]
    bibtex: tuple[BibtexFile, ...]
    bbl_items: tuple[BblItem, ...]
    bbl_source: str | None
    problems: tuple[str, ...]

    @property
    def cited_keys(self) -> tuple[str, ...]:
        """The keys cited in the body, in order of first citation, each once."""
        return tuple(dict.fromkeys(key for citation in self.citations for key in citation.keys))


# --- Lines, comments and inputs -----------------------------------------------------------------------------------

_COMMENT = re.compile(r"(?<!\\)(?:\\\\)*%")
_INCLUSION = re.compile(r"\\(?P<command>input|include|subfile)(?![A-Za-z])\s*(?:\{(?P<braced>[^{}]*)\}|"
                        r"(?P<bare>[^\s{}\\%]+))")
_DOCUMENT_CLASS = re.compile(r"\\documentclass(?![A-Za-z])")
_BEGIN_DOCUMENT = re.compile(r"\\begin\s*\{document\}")
_END_DOCUMENT = re.compile(r"\\end\s*\{document\}")
_BIBLIOGRAPHY_END = re.compile(r"\\bibliography\s*\{[^{}]*\}|\\printbibliography(?:\[[^\]]*\])?|"
                               r"\\end\s*\{thebibliography\}")


@dataclass(frozen=True)
class _Line:
    """A source line without its comment; `joined` when a comment ended it (TeX then reads on into the next line
    with no space)."""

    file: str
    number: int
    text: str
    joined: bool


def _code_lines(text: str, file: str) -> list[_Line]:
    lines = []
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        comment = _COMMENT.search(raw)
        code = raw[:comment.end() - 1] if comment else raw
        lines.append(_Line(file, number, code, joined=comment is not None))
    return lines


def _code(text: str) -> str:
    return "\n".join(line.text for line in _code_lines(text, ""))


@dataclass(frozen=True)
class _Document:
    """Lines joined into one text, with where each line starts, to say where an offset of the text comes from."""

    text: str
    offsets: tuple[int, ...]
    lines: tuple[_Line, ...]

    @classmethod
    def of(cls, lines: Sequence[_Line]) -> _Document:
        parts, offsets, offset, previous_joined = [], [], 0, False
        for line in lines:
            # TeX skips the spaces opening a line; after a comment the line goes on without a space
            piece = (line.text.lstrip() if previous_joined else line.text) + ("" if line.joined else "\n")
            offsets.append(offset)
            parts.append(piece)
            offset += len(piece)
            previous_joined = line.joined
        return cls("".join(parts), tuple(offsets), tuple(lines))

    def origin(self, offset: int) -> tuple[str, int]:
        index = max(bisect.bisect_right(self.offsets, offset) - 1, 0)
        line = self.lines[index] if self.lines else _Line("", 0, "", False)
        return line.file, line.number


def _between(lines: Sequence[_Line], opening: re.Pattern[str],
             closing: re.Pattern[str]) -> tuple[list[_Line], bool] | None:
    """The lines after `opening` up to `closing` (cut inside the lines that hold them) and whether `closing` was
    found; None without `opening`."""
    for start, line in enumerate(lines):
        if found := opening.search(line.text):
            body = [replace(line, text=line.text[found.end():]), *lines[start + 1:]]
            for end, inner in enumerate(body):
                if closed := closing.search(inner.text):
                    body = [*body[:end], replace(inner, text=inner.text[:closed.start()], joined=False)]
                    return _without_blank_ends(body), True
            return _without_blank_ends(body), False
    return None


def _without_blank_ends(lines: list[_Line]) -> list[_Line]:
    """The lines without the blank rests of the lines that opened and closed them: kept, their line ends would read as
    a blank line, a paragraph break, where a subfile's body meets the text around it."""
    return lines[1 if lines and not lines[0].text.strip() else 0:
                 -1 if len(lines) > 1 and not lines[-1].text.strip() else len(lines)]


class _Expander:
    """Reads a file with everything it inputs, line by line, noting problems and the files read."""

    def __init__(self, files: Mapping[str, str], root: str) -> None:
        self.files = files
        self.root = root
        self.problems: list[str] = []
        self.read: list[str] = []

    def resolve(self, name: str, including: str, extension: str) -> str | None:
        """A name as LaTeX finds it: relative to the main file's folder (then to the including file's), with the
        extension added first when missing."""
        names = [name, name + extension] if name.endswith(extension) else [name + extension, name]
        for folder in dict.fromkeys((self.root, posixpath.dirname(including))):
            for candidate in names:
                path = posixpath.normpath(posixpath.join(folder, candidate))
                if path in self.files:
                    return path
        return None

    def expand(self, path: str, chain: tuple[str, ...]) -> list[_Line]:
        if path not in self.read:
            self.read.append(path)
        lines: list[_Line] = []
        for line in _code_lines(self.files[path], path):
            position = 0
            for match in _INCLUSION.finditer(line.text):
                if match.group("bare") and match.group("command") != "input":
                    continue
                lines.append(replace(line, text=line.text[position:match.start()], joined=True))
                lines.extend(self._included(line, match, chain))
                position = match.end()
            rest = line.text[position:]
            # after an input, a blank rest of the line is no blank line: the input's own last line ended it
            if position == 0 or rest.strip() or line.joined:
                lines.append(replace(line, text=rest))
        return lines

    def _included(self, line: _Line, match: re.Match[str], chain: tuple[str, ...]) -> list[_Line]:
        command, name = match.group("command"), (match.group("braced") or match.group("bare") or "").strip()
        written = f"\\{command}{{{name}}}"
        target = self.resolve(name, line.file, ".tex")
        if target is None:
            self.problems.append(f"{line.file}:{line.number}: {written}: no such file in the source; read as empty")
            return []
        if target in chain:
            cycle = " -> ".join((*chain, target))
            self.problems.append(f"{line.file}:{line.number}: {written} reads {target} again (cycle {cycle}); "
                                 f"not followed")
            return []
        lines = self.expand(target, (*chain, target))
        if command == "subfile" and (body := _between(lines, _BEGIN_DOCUMENT, _END_DOCUMENT)):
            lines = body[0]
        return lines


def _main_file(files: Mapping[str, str]) -> tuple[str, list[str]]:
    """The main .tex file and, when several could be, a problem saying which was taken."""
    tex_files = sorted(path for path in files if path.lower().endswith(".tex"))
    if not tex_files:
        raise LatexSourceError(f"no .tex file in the source (it holds: {', '.join(sorted(files)) or 'nothing'})")
    codes = {path: _code(files[path]) for path in tex_files}
    candidates = [path for path in tex_files
                  if _DOCUMENT_CLASS.search(codes[path]) and _BEGIN_DOCUMENT.search(codes[path])]
    if not candidates:
        raise LatexSourceError(f"no main file: none of the .tex files ({', '.join(tex_files)}) has both "
                               f"\\documentclass and \\begin{{document}}")
    included: set[str] = set()
    for path in tex_files:
        expander = _Expander(files, posixpath.dirname(path))
        for match in _INCLUSION.finditer(codes[path]):
            target = expander.resolve((match.group("braced") or match.group("bare") or "").strip(), path, ".tex")
            if target and target != path:
                included.add(target)
    mains = [path for path in candidates if path not in included] or candidates
    mains.sort(key=lambda path: (path.count("/"), path))
    problems = []
    if len(mains) > 1:
        problems.append(f"{mains[0]}: taken as the main file; also possible: {', '.join(mains[1:])}")
    return mains[0], problems


# --- Citation commands --------------------------------------------------------------------------------------------

_CITE_NAMES = (r"(?:[Cc]ite(?:p|t|alp|alt|author|year|yearpar|num|title|date|url)?|[Pp]arencite|[Tt]extcite|"
               r"[Aa]utocite|[Ff]ootcite(?:text)?|[Ss]martcite|[Ss]upercite|fullcite|footfullcite)")
_CITE = re.compile(rf"\\(?P<command>{_CITE_NAMES}\*?)(?![A-Za-z])(?P<options>(?:\s*\[[^\[\]]*\]){{0,2}})"
                   rf"\s*\{{(?P<keys>[^{{}}]*)\}}")
_NOCITE = re.compile(r"\\nocite\s*\{(?P<keys>[^{}]*)\}")
# Narrative commands print the authors as the sentence's subject: at a sentence's start they belong to it.
_NARRATIVE_COMMANDS = re.compile(r"(?:[Cc]ite(?:t|alt|author)|[Tt]extcite)\*?")
_VERBATIM_ENVIRONMENTS = ("verbatim", "Verbatim", "lstlisting", "minted", "comment", "filecontents")


def _keys(written: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(key.strip() for key in written.split(",") if key.strip()))


def marker_text(keys: Sequence[str]) -> str:
    """The marker a citation command becomes in the prose: "[@key1; @key2]" (pandoc's citation form)."""
    return "[" + "; ".join(f"@{key}" for key in keys) + "]"


def _verbatim_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for name in _VERBATIM_ENVIRONMENTS:
        pattern = rf"\\begin\s*\{{{name}\*?\}}.*?(?:\\end\s*\{{{name}\*?\}}|$)"
        spans.extend(match.span() for match in re.finditer(pattern, text, re.DOTALL))
    return spans


def _citations(document: _Document) -> list[LatexCitation]:
    verbatim = _verbatim_spans(document.text)
    found = []
    for match in _CITE.finditer(document.text):
        if any(start <= match.start() < end for start, end in verbatim) or not _keys(match.group("keys")):
            continue
        file, line = document.origin(match.start())
        found.append(LatexCitation(file, line, match.group("command"), _keys(match.group("keys"))))
    return found


# --- Prose --------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\\(?:[A-Za-z@]+\*?|.)|\$\$?", re.DOTALL)
_SECTION = re.compile(r"\\(?:part|chapter|section|subsection|subsubsection|paragraph|subparagraph)\*?(?![A-Za-z])"
                      r"\s*(?:\[[^\]]*\])?\s*(?=\{)")
_FOOTNOTE = re.compile(r"\\(?:footnote|footnotetext)(?![A-Za-z])\s*(?:\[[^\]]*\])?\s*(?=\{)")
_BEGIN = re.compile(r"\\begin\s*\{(?P<name>[^{}]+)\}")
_END = re.compile(r"\\end\s*\{[^{}]+\}")
_ITEM = re.compile(r"\\item(?![A-Za-z])\s*(?:\[(?P<label>[^\]]*)\])?")
_REFERENCE = re.compile(r"\\(?:ref|eqref|autoref|cref|Cref|vref|pageref|nameref|labelcref)\*?\s*\{[^{}]*\}")
_VERB = re.compile(r"\\verb\*?([^A-Za-z\s*])(.*?)\1")
_PARAGRAPH_COMMAND = re.compile(r"\\par(?![A-Za-z])")
# Environments dropped whole, captions included (a starred form too).
_DROPPED_ENVIRONMENTS = frozenset({
    "figure", "table", "equation", "align", "alignat", "flalign", "gather", "multline", "eqnarray", "displaymath",
    "math", "subequations", "verbatim", "Verbatim", "lstlisting", "minted", "tikzpicture", "pgfpicture", "tikz",
    "picture", "tabular", "tabularx", "tabulary", "longtable", "algorithm", "algorithmic", "algorithm2e",
    "wrapfigure", "wraptable", "sidewaysfigure", "sidewaystable", "SCfigure", "subfigure", "thebibliography",
    "comment", "filecontents",
})
# Environments whose mandatory arguments are no text ("\begin{minipage}{0.5\textwidth}").
_ENVIRONMENT_ARGUMENTS = {"minipage": 1, "multicols": 1, "adjustbox": 1}
# Commands dropped with their arguments (how many braced ones follow the optional ones).
_DROPPED_COMMANDS = {
    "label": 1, "vspace": 1, "hspace": 1, "includegraphics": 1, "bibliographystyle": 1, "bibliography": 1,
    "addbibresource": 1, "printbibliography": 0, "caption": 1, "captionof": 2, "captionsetup": 1, "thanks": 1,
    "index": 1, "pagestyle": 1, "thispagestyle": 1, "setlength": 2, "addtolength": 2, "setcounter": 2, "color": 1,
    "hypersetup": 1, "graphicspath": 1, "newcommand": 2, "renewcommand": 2,
    # front matter some classes set after \begin{document}: no prose
    "title": 1, "author": 1, "affiliation": 1, "address": 1, "email": 1, "institute": 1, "date": 1, "keywords": 1,
}
_MARKER_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")
_NOTE_PLACEHOLDER = re.compile("\ue004(\\d+)\ue005")
_HEADING = re.compile("\ue002(\\d+)\ue003")
_BLANK_LINE = re.compile(r"\n\s*\n")
_OPTIONAL_ARGUMENT = re.compile(r"\s*\[[^\]]*\]")
_SPACES = re.compile(r"\s*")
_BETWEEN_MARKERS = re.compile(r"[\s,;]*")
_LINE_REST = re.compile(r"[ \t]*\n")
# A marker right after a sentence's full stop ("effect.\\cite{x}") is set off from it, so that the sentence ends there.
_SET_OFF_AFTER = ".,;:!?"


_Cited = tuple[tuple[str, ...], str]  # a citation command's keys and its name


def _group_end(text: str, position: int) -> int | None:
    """After the "}" closing the "{" at `position` (escaped braces "\\{" do not count); None if never closed."""
    depth = 0
    index = position
    while index < len(text):
        character = text[index]
        if character == "\\":
            index += 2
            continue
        if character == "{":
            depth += 1
        elif character == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def _skip_arguments(text: str, position: int, count: int) -> int:
    """After the optional [..] arguments and `count` braced ones starting at `position`."""
    while optional := _OPTIONAL_ARGUMENT.match(text, position):
        position = optional.end()
    for _ in range(count):
        spaces = _SPACES.match(text, position).end()
        if text[spaces:spaces + 1] != "{":
            break
        position = _group_end(text, spaces) or len(text)
    return position


def _closing(text: str, position: int, closer: str) -> int:
    """Where the unescaped `closer` after `position` starts (the text's end if none)."""
    for match in re.compile(re.escape(closer) + r"|\\.", re.DOTALL).finditer(text, position):
        if match.group(0) == closer:
            return match.start()
    return len(text)


def _environment_end(text: str, position: int, name: str) -> int | None:
    """After the \\end{name} closing an environment opened before `position` (same-name nesting counted)."""
    depth = 1
    for match in re.compile(rf"\\(begin|end)\s*\{{{re.escape(name)}\}}").finditer(text, position):
        depth += 1 if match.group(1) == "begin" else -1
        if depth == 0:
            return match.end()
    return None


def _past_own_lines(tex: str, start: int, end: int) -> int:
    """After the line end following what was dropped from `start` to `end` when it filled its lines alone (a figure,
    a \\label line): left, that line end would make a blank line, a paragraph break, of lines that were none."""
    line_start = tex.rfind("\n", 0, start) + 1
    rest = _LINE_REST.match(tex, end)
    return rest.end() if rest and not tex[line_start:start].strip() else end


def _inline_math(tex: str) -> str:
    text = tex_to_text(tex)
    return text if text and len(text) <= SHORT_MATH and " " not in text else MATH_PLACEHOLDER


class _Prose:
    """The body's TeX with structure turned into placeholders: citation markers "\\ue000n\\ue001", footnotes
    "\\ue004n\\ue005" and headings "\\ue002n\\ue003" (each on a paragraph of its own)."""

    def __init__(self, document: _Document, problems: list[str]) -> None:
        self.document = document
        self.problems = problems
        self.markers: list[_Cited] = []
        self.headings: list[str] = []
        self.notes: list[str] = []

    def convert(self, tex: str, base: int) -> str:
        """`tex` (found at offset `base` of the document) with its structure replaced."""
        out, position = [], 0
        while match := _TOKEN.search(tex, position):
            out.append(tex[position:match.start()])
            replacement, position = self._token(tex, match, base)
            if not replacement.strip() and "\n" not in replacement:
                position = _past_own_lines(tex, match.start(), position)
            out.append(replacement)
        out.append(tex[position:])
        return "".join(out)

    def _token(self, tex: str, match: re.Match[str], base: int) -> tuple[str, int]:
        token, start, end = match.group(0), match.start(), match.end()
        if token in ("$$", "\\["):
            closer = "$$" if token == "$$" else "\\]"
            return " ", _closing(tex, end, closer) + len(closer)
        if token in ("$", "\\("):
            closer = "$" if token == "$" else "\\)"
            stop = _closing(tex, end, closer)
            return _inline_math(tex[end:stop]), stop + len(closer)
        if cite := _CITE.match(tex, start):
            if not (keys := _keys(cite.group("keys"))):
                return "", cite.end()
            self.markers.append((keys, cite.group("command")))
            return f"\ue000{len(self.markers) - 1}\ue001", cite.end()
        if nocite := _NOCITE.match(tex, start):
            return "", nocite.end()
        if section := _SECTION.match(tex, start):
            close = _group_end(tex, section.end()) or len(tex)
            title = tex_to_text(_CITE.sub("", tex[section.end() + 1:close - 1])).rstrip(".")
            self.headings.append(title)
            return f"\n\n\ue002{len(self.headings) - 1}\ue003\n\n", close
        if note := _FOOTNOTE.match(tex, start):
            close = _group_end(tex, note.end()) or len(tex)
            self.notes.append(self.convert(tex[note.end() + 1:close - 1], base + note.end() + 1))
            return f"\ue004{len(self.notes) - 1}\ue005", close
        if begin := _BEGIN.match(tex, start):
            return self._environment(tex, begin, base)
        if closing := _END.match(tex, start):
            return "\n\n", closing.end()
        if item := _ITEM.match(tex, start):
            return "\n\n" + (item.group("label") or "") + " ", item.end()
        if reference := _REFERENCE.match(tex, start):
            return REFERENCE_PLACEHOLDER, reference.end()
        if token == "\\\\":  # a line break, with its spacing "\\[2pt]"
            return " ", _skip_arguments(tex, end, 0)
        if verb := _VERB.match(tex, start):
            return verb.group(2), verb.end()
        if paragraph := _PARAGRAPH_COMMAND.match(tex, start):
            return "\n\n", paragraph.end()
        name = token[1:].rstrip("*")
        if name in _DROPPED_COMMANDS:
            return "", _skip_arguments(tex, end, _DROPPED_COMMANDS[name])
        return token, end  # accents, escapes, font commands: tex_to_text reads them with the text

    def _environment(self, tex: str, begin: re.Match[str], base: int) -> tuple[str, int]:
        name = begin.group("name").strip()
        kind = name.rstrip("*")
        if kind in _DROPPED_ENVIRONMENTS:
            close = _environment_end(tex, begin.end(), name)
            if close is not None:
                return " ", close
            file, line = self.document.origin(base + begin.start())
            self.problems.append(f"{file}:{line}: \\begin{{{name}}} is never closed; its content is read as text")
            return " ", begin.end()
        if kind == "abstract":
            self.headings.append("Abstract")
            return f"\n\n\ue002{len(self.headings) - 1}\ue003\n\n", begin.end()
        return "\n\n", _skip_arguments(tex, begin.end(), _ENVIRONMENT_ARGUMENTS.get(kind, 0))


def _place_markers(text: str, markers: Sequence[_Cited]) -> tuple[str, list[LatexMarker], list[int]]:
    """Plain text with its placeholders replaced: footnotes taken out (their indexes returned), markers written out
    (set off by a space from a word before or after) and recorded with their offsets."""
    notes = [int(match.group(1)) for match in _NOTE_PLACEHOLDER.finditer(text)]
    text = " ".join(_NOTE_PLACEHOLDER.sub("", text).split())
    text = re.sub(r" ([.,;:])(?= |$)", r"\1", text)  # what a footnote or a dropped equation left: "word ."
    written, placed, position = "", [], 0
    for match in _MARKER_PLACEHOLDER.finditer(text):
        written += text[position:match.start()]
        if written and (written[-1].isalnum() or written[-1] in _SET_OFF_AFTER):
            written += " "
        keys, command = markers[int(match.group(1))]
        placed.append(LatexMarker(len(written), len(written) + len(marker_text(keys)), keys, command))
        written += marker_text(keys)
        if text[match.end():match.end() + 1].isalnum():
            written += " "
        position = match.end()
    return written + text[position:], placed, notes


def _paragraphs(converted: str, prose: _Prose) -> list[LatexParagraph]:
    paragraphs: list[LatexParagraph] = []
    section: str | None = None

    def add(tex: str) -> None:
        text, markers, notes = _place_markers(tex_to_text(tex), prose.markers)
        if text:
            paragraphs.append(LatexParagraph(text, tuple(markers), section))
        for note in notes:
            add(prose.notes[note])

    for chunk in _BLANK_LINE.split(converted):
        if heading := _HEADING.fullmatch(chunk.strip()):
            section = prose.headings[int(heading.group(1))]
            paragraphs.append(LatexParagraph(section, (), section, heading=True))
        elif chunk.strip():
            add(chunk)
    return paragraphs


def _sentence_spans(paragraph: LatexParagraph) -> list[tuple[int, int]]:
    """The paragraph's sentences, a parenthetical marker that opens a sentence (and is followed by no lower-case
    word) given back to the sentence before it, whose full stop it came after."""
    starting = {marker.start: marker for marker in paragraph.markers}
    text = paragraph.text
    spans: list[tuple[int, int]] = []
    for start, end in split_sentences(text):
        lead, moved_end = start, None
        while (marker := starting.get(lead)) and not _NARRATIVE_COMMANDS.fullmatch(marker.command):
            moved_end = marker.end
            lead = _BETWEEN_MARKERS.match(text, marker.end).end()
        if spans and moved_end is not None and not text[lead:lead + 1].islower():
            spans[-1] = (spans[-1][0], moved_end)
            if lead >= end:
                continue
            start = lead
        spans.append((start, end))
    return spans


def citances(source: LatexSource) -> list[LatexCitance]:
    """The sentences of the source's paragraphs holding citation markers (see `_sentence_spans`)."""
    found = []
    for index, paragraph in enumerate(source.paragraphs):
        if paragraph.heading or not paragraph.markers:
            continue
        for start, end in _sentence_spans(paragraph):
            inside = tuple(marker for marker in paragraph.markers if start <= marker.start < end)
            if inside:
                keys = tuple(dict.fromkeys(key for marker in inside for key in marker.keys))
                found.append(LatexCitance(paragraph.text[start:end], keys, paragraph.section, index, start, end,
                                          inside))
    return found


# --- Compiled bibliographies --------------------------------------------------------------------------------------

# A .bbl's comments: whole comment lines, and the "%" ending a line to join it to the next (a "%" inside a line can
# be part of a \\verb URL).
_BBL_COMMENT = re.compile(r"^[ \t]*%.*\n|(?<!\\)%[ \t]*\n[ \t]*", re.MULTILINE)
_BIBITEM = re.compile(r"\\bibitem\s*(?:\[(?P<label>(?:[^\[\]{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\])?\s*"
                      r"\{(?P<key>[^{}]*)\}")
_BBL_END = re.compile(r"\\end\s*\{thebibliography\}")
_HREF = re.compile(r"\\href\s*\{(?P<url>[^{}]*)\}\s*\{(?P<text>(?:[^{}]|\{[^{}]*\})*)\}")
_BBL_COMMANDS = (
    (re.compile(r"\\(?:bibinfo|bibfield|Eprint)\s*\{[^{}]*\}"), ""),  # the field's name or the link: its text stays
    (re.compile(r"\\(?:BibitemShut|bibAnnoteFile)\s*\{[^{}]*\}"), ""),
    (re.compile(r"\\penalty\s*-?\d+"), ""),
    (re.compile(r"\\newblock(?![A-Za-z])"), " "),
    (re.compile(r"\\doibase(?![A-Za-z])\s*"), "https://doi.org/"),
    (re.compile(r"\\enquote\s*\{((?:[^{}]|\{[^{}]*\})*)\}"), r"“\1”"),
)
_BIBLATEX_ENTRY = re.compile(r"\\entry\s*\{(?P<key>[^{}]*)\}\s*\{(?P<type>[^{}]*)\}(?P<body>.*?)\\endentry",
                             re.DOTALL)
_BIBLATEX_NAME_DELIMITERS = (
    (re.compile(r"\\bibnamedelim[abcdi](?![A-Za-z])\s*|\\bibinitdelim(?![A-Za-z])\s*"), " "),
    (re.compile(r"\\bibinitperiod(?![A-Za-z])\s*"), "."),
    (re.compile(r"\\bibinithyphendelim(?![A-Za-z])\s*"), ".-"),
    (re.compile(r"\\bibrangedash(?![A-Za-z])\s*"), "--"),
)
# \field{name}{value}, \range{name}{value}, \list{name}{count}{{a}{b}}, \name{role}{count}{options}{{..}{..}}
_BIBLATEX_FIELD = re.compile(r"\\(?P<kind>field|range|list|name)\s*\{(?P<name>[^{}]*)\}")
_BIBLATEX_COUNT = re.compile(r"\s*\{\d+\}")
_BIBLATEX_VERB = re.compile(r"\\verb\s*\{(?P<name>[^{}]*)\}(?P<body>.*?)\\endverb", re.DOTALL)
_NAME_PART = re.compile(r"(?P<part>family|given|prefix|suffix)=(?=\{)")
_POSITIONAL_PARTS = ("family", "familyi", "given", "giveni", "prefix", "prefixi", "suffix", "suffixi")


def _groups(text: str) -> list[str]:
    """The contents of the top-level {...} groups of `text`, in order."""
    groups, position = [], 0
    while (start := text.find("{", position)) >= 0:
        end = _group_end(text, start) or len(text)
        groups.append(text[start + 1:end - 1])
        position = end
    return groups


def _bbl_text(tex: str) -> str:
    for pattern, replacement in _BBL_COMMANDS:
        tex = pattern.sub(replacement, tex)
    # the link of \href is kept beside its text, for parse_entry to find a URL or DOI there
    tex = _HREF.sub(lambda match: match.group("text") + ("" if match.group("url") in match.group("text")
                                                         else f" \\url{{{match.group('url')}}}"), tex)
    return tex_to_text(tex)


def _natbib_items(text: str) -> list[BblItem]:
    matches = list(_BIBITEM.finditer(text))
    items = []
    for index, match in enumerate(matches):
        stop = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        if end := _BBL_END.search(text, match.end(), stop):
            stop = end.start()
        label = _bbl_text(match.group("label")) if match.group("label") else None
        items.append(BblItem(match.group("key").strip(), label, _bbl_text(text[match.end():stop])))
    return items


def _biblatex_name(group: str) -> str:
    """A biblatex name ("{{hash=..}{family={Devlin},given={Jacob}}}", or the older positional "{{hash=..}{Devlin}
    {D.}{Jacob}{J.}{}{}{}{}}") in BibTeX's "von {Last}, Jr, First" form."""
    inner = _groups(group)
    parts: dict[str, str] = {}
    if parts_text := next((part for part in inner if _NAME_PART.search(part)), None):
        for match in _NAME_PART.finditer(parts_text):
            end = _group_end(parts_text, match.end()) or len(parts_text)
            parts[match.group("part")] = parts_text[match.end() + 1:end - 1]
    else:
        positional = inner[1:] if len(inner) > 1 and "hash=" in inner[0] else inner
        parts = dict(zip(_POSITIONAL_PARTS, positional))
    surname = " ".join(part for part in (parts.get("prefix", ""), f"{{{parts.get('family', '')}}}") if part)
    return ", ".join(part for part in (surname, parts.get("suffix", ""), parts.get("given", "")) if part)


def _biblatex_entry(key: str, entry_type: str, body: str) -> BibtexEntry:
    for pattern, replacement in _BIBLATEX_NAME_DELIMITERS:
        body = pattern.sub(replacement, body)
    fields: dict[str, str] = {}
    for match in _BIBLATEX_FIELD.finditer(body):
        kind, name, position = match.group("kind"), match.group("name").lower(), match.end()
        if kind in ("list", "name") and (count := _BIBLATEX_COUNT.match(body, position)):
            position = count.end()
        if kind == "name":  # the options group
            position = _group_end(body, _SPACES.match(body, position).end()) or len(body)
        start = _SPACES.match(body, position).end()
        end = _group_end(body, start) if body[start:start + 1] == "{" else None
        if end is None:
            continue
        content = body[start + 1:end - 1]
        if kind == "name":
            fields[name] = " and ".join(_biblatex_name(group) for group in _groups(content))
        elif kind == "list":
            fields[name] = " and ".join(_groups(content))
        else:
            fields[name] = content
    for match in _BIBLATEX_VERB.finditer(body):
        fields[match.group("name").lower()] = "".join(re.findall(r"\\verb (.*)", match.group("body"))).strip()
    return BibtexEntry(entry_type.strip().lower(), key.strip(), tuple(fields.items()))


def read_bbl(text: str) -> list[BblItem]:
    """The entries of a compiled bibliography: a natbib / BibTeX-style thebibliography (\\bibitem[label]{key} and the
    entry's text, its \\newblock, \\bibinfo, \\url, \\doi and \\href read) or a biblatex .bbl (\\entry{key}{type}
    ... \\endentry, its \\field, \\name, \\list, \\range and \\verb read); `text` of each as plain Unicode."""
    text = _BBL_COMMENT.sub("", text)
    found = []
    for match in _BIBLATEX_ENTRY.finditer(text):
        entry = _biblatex_entry(match.group("key"), match.group("type"), match.group("body"))
        label = entry.get("labelalpha")
        found.append(BblItem(entry.key, tex_to_text(label) if label else None, to_parsed_entry(entry, 0).raw_text,
                             entry))
    return found or _natbib_items(text)


def bbl_entries(items: Iterable[BblItem]) -> list[ParsedEntry]:
    """The items as ParsedEntry, indexed from 1 in order, each labelled with its key: a biblatex item from its
    fields (`bibtex.to_parsed_entry`), a natbib one from its text (`bibliography.parse_entry`)."""
    entries = []
    for index, item in enumerate(items, start=1):
        if item.entry is not None:
            entries.append(to_parsed_entry(item.entry, index))
        else:
            entries.append(replace(parse_entry(item.text, index), label=item.key))
    return entries


def reference_entries(source: LatexSource) -> list[ParsedEntry]:
    """The paper's reference list as ParsedEntry (labels: the keys): with a compiled bibliography, its items in its
    order, each read from its .bib entry when there is one (the fields are exact there); else the .bib entries
    cited or \\nocite'd, in order of first citation (\\nocite{*}: every entry, the uncited ones last)."""
    bib_entries: dict[str, BibtexEntry] = {}
    for bib in source.bibtex:
        for entry in bib.entries:
            bib_entries.setdefault(entry.key, entry)
    if source.bbl_items:
        listed = bbl_entries(source.bbl_items)
        return [to_parsed_entry(bib_entries[entry.label], entry.index) if entry.label in bib_entries else entry
                for entry in listed]
    keys = [*source.cited_keys, *source.nocite_keys]
    if "*" in keys:
        keys.extend(bib_entries)
    wanted = [key for key in dict.fromkeys(keys) if key in bib_entries]
    return [to_parsed_entry(bib_entries[key], index) for index, key in enumerate(wanted, start=1)]


# --- The source read ----------------------------------------------------------------------------------------------

_BIBLIOGRAPHY = re.compile(r"\\bibliography\s*\{(?P<names>[^{}]*)\}")
_BIB_RESOURCE = re.compile(r"\\add(?:bibresource|globalbib|sectionbib)\s*(?:\[[^\]]*\])?\s*\{(?P<names>[^{}]*)\}")
_THEBIBLIOGRAPHY = re.compile(r"\\begin\s*\{thebibliography\}.*?(?:\\end\s*\{thebibliography\}|$)", re.DOTALL)


def _bib_names(document: _Document) -> list[tuple[str, int, str]]:
    """(file, line, name) of each .bib file the document names."""
    named = []
    for pattern in (_BIBLIOGRAPHY, _BIB_RESOURCE):
        for match in pattern.finditer(document.text):
            file, line = document.origin(match.start())
            separator = "," if pattern is _BIBLIOGRAPHY else None  # \addbibresource names one file
            names = match.group("names").split(separator) if separator else [match.group("names")]
            named.extend((file, line, name.strip()) for name in names if name.strip())
    return named


def _compiled_bibliography(files: Mapping[str, str], main: str,
                           whole: _Document) -> tuple[tuple[BblItem, ...], str | None, list[str]]:
    """The embedded thebibliography, else the .bbl named after the main file, else the only .bbl."""
    if embedded := _THEBIBLIOGRAPHY.search(whole.text):
        return tuple(read_bbl(embedded.group(0))), whole.origin(embedded.start())[0], []
    own = posixpath.splitext(main)[0] + ".bbl"
    bbl_files = sorted(path for path in files if path.lower().endswith(".bbl"))
    if own in files:
        return tuple(read_bbl(files[own])), own, []
    if len(bbl_files) == 1:
        return tuple(read_bbl(files[bbl_files[0]])), bbl_files[0], []
    if bbl_files:
        return (), None, [f"{main}: several .bbl files ({', '.join(bbl_files)}) and none named after the main file; "
                          f"none read"]
    return (), None, []


def read_latex_source(files: Mapping[str, str]) -> LatexSource:
    """A LaTeX project read from its text files (see the module docstring). Raises LatexSourceError only when no
    main file can be found."""
    files = {posixpath.normpath(path): text for path, text in files.items()}  # "./main.tex" is "main.tex"
    main, problems = _main_file(files)
    expander = _Expander(files, posixpath.dirname(main))
    lines = expander.expand(main, (main,))
    problems.extend(expander.problems)
    whole = _Document.of(lines)
    between = _between(lines, _BEGIN_DOCUMENT, _END_DOCUMENT)
    body_lines, closed = between if between else (lines, False)
    body = _Document.of(body_lines)
    if not closed:
        ends = list(_BIBLIOGRAPHY_END.finditer(body.text))
        if ends:
            body = replace(body, text=body.text[:ends[-1].end()])
        problems.append(f"{main}: no \\end{{document}}; the body is read "
                        f"{'to the end of the bibliography' if ends else 'to the end of the file'}")

    prose = _Prose(body, problems)
    paragraphs = _paragraphs(prose.convert(body.text, 0), prose)
    found_citations = _citations(body)
    nocites = [(key, *whole.origin(match.start())) for match in _NOCITE.finditer(whole.text)
               for key in _keys(match.group("keys"))]
    nocite_keys = tuple(dict.fromkeys(key for key, _, _ in nocites))

    bbl_items, bbl_source, bbl_problems = _compiled_bibliography(files, main, whole)
    problems.extend(bbl_problems)
    bib_files: dict[str, BibtexFile] = {}
    for file, line, name in _bib_names(whole):
        path = expander.resolve(name, file, ".bib")
        if path is None:
            if not bbl_items:  # an arXiv source ships the .bbl instead of the .bib: nothing is missing then
                problems.append(f"{file}:{line}: the bibliography file '{name}' is not in the source")
        elif path not in bib_files:
            bib_files[path] = read_bibtex(files[path], path)
            problems.extend(bib_files[path].problems)

    known = {entry.key for bib in bib_files.values() for entry in bib.entries} | {item.key for item in bbl_items}
    if not known and (found_citations or nocite_keys):
        problems.append(f"{main}: no bibliography found (no .bib file named and present, no .bbl, no "
                        f"thebibliography); the cited keys cannot be checked")
    elif known:
        reported: set[str] = set()
        for citation in found_citations:
            for key in citation.keys:
                if key not in known and key not in reported:
                    reported.add(key)
                    problems.append(f"{citation.file}:{citation.line}: \\{citation.command}: the key '{key}' is in "
                                    f"no bibliography")
        for key, file, line in nocites:
            if key != "*" and key not in known and key not in reported:
                reported.add(key)
                problems.append(f"{file}:{line}: \\nocite: the key '{key}' is in no bibliography")

    return LatexSource(
        main_file=main, tex_files=tuple(expander.read), paragraphs=tuple(paragraphs),
        citations=tuple(found_citations), nocite_keys=nocite_keys, bibtex=tuple(bib_files.values()),
        bbl_items=bbl_items, bbl_source=bbl_source, problems=tuple(problems),
    )


# --- arXiv source downloads ---------------------------------------------------------------------------------------


class SourceFiles(dict[str, str]):
    """The text files of a source archive (relative posix path -> text), with `problems`: the members skipped and
    why ("NAME: MEMBER: reason")."""

    def __init__(self, files: Mapping[str, str] | None = None, problems: Iterable[str] = ()) -> None:
        super().__init__(files or {})
        self.problems = list(problems)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _safe_path(name: str) -> str | None:
    """A member's path inside the archive's folder, or None for one that would leave it (absolute, "..", a drive)."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or (path.parts and path.parts[0].endswith(":")):
        return None
    return str(path) if path.parts else None


def _is_source_file(path: str) -> bool:
    return path.lower().endswith(SOURCE_EXTENSIONS)


def _too_large(name: str, max_bytes: int) -> LatexSourceError:
    return LatexSourceError(f"{name}: more than {max_bytes / (1024 * 1024):g} MB of text files unpacked; the source "
                            f"is not read")


def _tar_files(archive: tarfile.TarFile, name: str, max_bytes: int) -> SourceFiles:
    files = SourceFiles()
    total = 0
    for member in archive:
        if member.issym() or member.islnk():
            files.problems.append(f"{name}: {member.name}: a link; skipped")
            continue
        if not member.isfile():
            continue
        path = _safe_path(member.name)
        if path is None:
            files.problems.append(f"{name}: {member.name}: the path leaves the archive's folder; skipped")
            continue
        if not _is_source_file(path):
            continue
        total += member.size
        if total > max_bytes:
            raise _too_large(name, max_bytes)
        handle = archive.extractfile(member)
        if handle is not None:
            files[path] = _decode(handle.read())
    return files


def _single_file_name(name: str) -> str:
    """The name of the one file of a gzipped source: the download's name without ".gz", ".tex" added when it has
    no source extension ("2203.00130" -> "2203.00130.tex")."""
    base = PurePosixPath(name).name or "main"
    base = base[:-3] if base.lower().endswith(".gz") else base
    return base if _is_source_file(base) else f"{base}.tex"


def arxiv_source_files(data: bytes, name: str, max_bytes: int = MAX_UNPACKED_BYTES) -> SourceFiles:
    """The text files (.tex, .bib, .bbl, .sty, .cls) of an arXiv source download, held in memory: a gzipped or plain
    tar of a folder, or one gzipped .tex file. UTF-8, else latin-1. Members with a path leaving the folder and links
    are skipped with a problem. Raises LatexSourceError (naming `name`) past `max_bytes` of text files unpacked, for
    a PDF, for a damaged archive, or for data that is neither a tar nor gzip."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except (tarfile.TarError, EOFError, OSError, zlib.error):
        archive = None  # not a tar (or a damaged one): one gzipped file, or no source at all
    if archive is not None:
        try:
            with archive:
                return _tar_files(archive, name, max_bytes)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
            raise LatexSourceError(f"{name}: a damaged archive ({error})") from error
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as compressed:
                unpacked = compressed.read(max_bytes + 1)
        except (OSError, EOFError) as error:
            raise LatexSourceError(f"{name}: a damaged gzip file ({error})") from error
        if len(unpacked) > max_bytes:
            raise _too_large(name, max_bytes)
        return SourceFiles({_single_file_name(name): _decode(unpacked)})
    if data.startswith(b"%PDF"):
        raise LatexSourceError(f"{name}: a PDF, not a LaTeX source")
    raise LatexSourceError(f"{name}: neither a tar archive nor a gzipped file")
