"""The reference list: where it runs, and where one entry ends and the next begins.

The references section is kept whole, one entry per block. Entries hang: an entry's further lines are
indented, a new entry starts at the margin, often with a label ("[12]", "12. Name").
"""

from __future__ import annotations

import re

from peerify_dagster.domain.layout.headings import describe_heading, split_number

REFERENCE_ENTRY_START = re.compile(r"^(?:\[\d{1,3}\]|\d{1,3}\.\s+[A-Z])")


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
    appendix or checklist heading or a lettered section."""
    number, _ = split_number(heading)
    role = describe_heading(heading, letters_are_numbers=True).role
    return role == "references" or (in_references and role not in ("appendix", "checklist")
                                    and not (number and number[0].isalpha()))
