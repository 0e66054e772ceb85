"""What a heading's text says: its number, its role, whether it reads like a title at all.

Headings are numbered in sequence ("3 Method", "3.2 Setup", "A Proofs" where an appendix may start), or
carry a standard section name (Abstract, References, Appendix, ...). Words a PDF glued together
("RelatedWork") are split with a vocabulary of section words and of words the document writes.
These rules read text only; where a heading stands on the page is for `elements` to judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from peerify_dagster.domain.layout.lines import MATH, NUMERIC_TOKEN, SENTENCE_END, Vocabulary

SECTION_NUMBER = re.compile(
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
# The body's own sections, set in the paper's heading face (back matter is often set smaller, in a face of its own).
_MAIN_TEXT_NAMES = {
    "introduction", "background", "related work", "method", "methods", "methodology", "materials and methods",
    "material and methods", "methods and materials", "materials & methods", "patients and methods",
    "subjects and methods", "experiments", "results", "discussion", "results and discussion", "conclusion",
    "conclusions", "star methods", "star★methods", "star+methods", "online methods",
}
_TOP_LEVEL_NAMES = (_ABSTRACT_NAMES | _REFERENCE_NAMES | _APPENDIX_NAMES | _CHECKLIST_NAMES | _OTHER_TOP_LEVEL_NAMES
                    | _MAIN_TEXT_NAMES)
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


def is_main_text_section_name(text: str) -> bool:
    """True for the names of the body's standard sections (Introduction, Methods, Results, Discussion, ...)."""
    return _plain_name(text) in _MAIN_TEXT_NAMES


def split_number(text: str) -> tuple[str | None, str]:
    match = SECTION_NUMBER.match(text.strip())
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
    match = SECTION_NUMBER.match(text.strip())
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


def closes_main_text(text: str) -> bool:
    """A heading of a section that closes the main text (Conclusion, Acknowledgments, ...), numbered or not."""
    return _plain_name(split_number(text)[1]) in _END_OF_MAIN_TEXT_NAMES


def number_in_sequence(number: str, previous: tuple[int, ...] | None, in_references: bool) -> bool:
    """Whether a section number can follow the last one seen (`previous`, None before the first)."""
    if not number[0].isdigit():
        lettered = re.fullmatch(r"[A-Z](?:\.\d{1,2})*", number)
        return bool(lettered) and (in_references or previous is not None)
    parts = tuple(int(part) for part in number.split("."))
    if parts[0] == 0 or parts[0] > 30:
        return False
    if previous is None:
        return True
    # The next number may repeat the section (a subsection), follow it, or skip one missed heading.
    return previous[0] <= parts[0] <= previous[0] + 2


def reads_like_title(text: str) -> bool:
    """Text that could be a heading: mostly letters, at least one real word, no formula and no open sentence."""
    if MATH.search(text) or re.search(r"https?://|www\.|@|et al\.|\s[+−×/]\s.*\s[+−×/]\s", text):
        return False
    letters = sum(character.isalpha() for character in text)
    if letters < 3 or letters < 0.6 * len(text.replace(" ", "")):
        return False
    if not re.search(r"[^\W\d_]{3,}", text) or re.search(r"[,;]$", text):
        return False
    tokens = text.split()
    return sum(bool(NUMERIC_TOKEN.match(token)) for token in tokens) <= max(1, len(tokens) // 4)


def is_capitalised(title: str) -> bool:
    first = re.search(r"[^\W\d_]", title)
    return bool(first) and first.group(0).isupper()


def is_all_caps(title: str) -> bool:
    letters = [character for character in title if character.isalpha()]
    return len(letters) >= 4 and all(character.isupper() for character in letters)


def looks_like_plain_heading(paragraph_lines: list[str]) -> bool:
    """A plain-text paragraph that is a heading: one line, marked with "#", a known name or a short numbered title."""
    if len(paragraph_lines) != 1:
        return False
    text = paragraph_lines[0]
    if text.startswith("#") or is_known_section_name(text):
        return True
    return bool(SECTION_NUMBER.match(text)) and len(text.split()) <= 12 and not SENTENCE_END.search(text)
