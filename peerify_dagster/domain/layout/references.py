"""The reference list: where it runs, and where one entry ends and the next begins.

The references section is kept whole, one entry per block. Entries hang: an entry's further lines are
indented, a new entry starts at the margin, often with a label ("[12]", "12. Name").
"""

from __future__ import annotations

import re

from peerify_dagster.domain.layout.headings import describe_heading, is_main_text_section_name, split_number

REFERENCE_ENTRY_START = re.compile(r"^(?:\[\d{1,3}\]|\d{1,3}\.\s+[A-Z])")


# An author as a reference entry names one: by surname and initials ("Agogué, H. M."), initials and surname
# ("H. Agogué"), or surname and run-together initials, Vancouver style ("Weiss HA,").
_SURNAME_INITIALS = r"[^\W\d_]{2,}\W?,\s+(?:[A-Z]\.\s?){1,3}"
_INITIALS_SURNAME = r"\b[A-Z]\.\s?(?:[A-Z]\.\s?)?[^\W\d_]{2,}"
_VANCOUVER_NAME = r"\b[A-Z][^\W\d_]+(?:-[A-Z][^\W\d_]+)?\s[A-Z]{1,3}[,.]"
# In a line that may be a heading: the two forms with initials, the second followed by the next name's comma.
ENTRY_AUTHOR = re.compile(f"{_SURNAME_INITIALS}|{_INITIALS_SURNAME},")
# "1. Weiss, H. A., & Hawkes, S. (2001)", "[3] A. Author, B. Writer,", "12 Shah NC, Howie JGR." : a number, then
# an author named in any of the three forms.
_NUMBERED_ENTRY = re.compile(
    r"^(?:\[(?P<bracketed>\d{1,3})\]|(?P<number>\d{1,3})\.?)\s+"
    rf"(?=.{{0,60}}?(?:{_SURNAME_INITIALS}|{_INITIALS_SURNAME}|{_VANCOUVER_NAME}))"
)


def numbered_entry(text: str) -> int | None:
    """The number of a line that opens a numbered reference entry naming its authors by initials, else None."""
    match = _NUMBERED_ENTRY.match(text)
    return None if match is None else int(match["bracketed"] or match["number"])


def continues_reference_entry(text: str, indent: float, body_size: float, ends_sentence: bool,
                              hanging: bool = False) -> bool | None:
    """Inside a reference list: True when a line (`indent` from its column's left edge) runs on the entry
    above, False when it starts a new one, None when the hanging indent does not tell. `hanging`: the list's
    further lines are known to be indented, so a line at the margin starts an entry."""
    if indent >= 0.5 * body_size and not REFERENCE_ENTRY_START.match(text):
        return True
    if REFERENCE_ENTRY_START.match(text) or ends_sentence or (hanging and indent < 0.3 * body_size):
        return False
    return None


def in_references_after(heading: str, in_references: bool) -> bool:
    """Whether the reference list runs on after `heading`: it starts at a references heading and ends at an
    appendix or checklist heading, a lettered section or a body section set after the references (the Methods of
    Nature's and Cell Press's journals)."""
    number, _ = split_number(heading)
    role = describe_heading(heading, letters_are_numbers=True).role
    return role == "references" or (in_references and role not in ("appendix", "checklist")
                                    and not (number and number[0].isalpha())
                                    and not is_main_text_section_name(heading))
