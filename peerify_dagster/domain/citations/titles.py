"""Title comparison shared by the metadata check and the right-paper check: case, accents, punctuation and
spacing never make two titles differ."""

from __future__ import annotations

import re
import unicodedata
from difflib import SequenceMatcher

_NON_WORD = re.compile(r"[^0-9a-z]+")
# Two titles name the same work at this `title_similarity` or more. The same work cited with a variant title scores
# 0.93 or more: a typo (0.99), British spelling (0.97), a dropped leading acronym ("Pre-training of deep bidirectional
# ..." for "BERT: Pre-training of ...": 0.97), "nets" for "networks" (0.93). Different works of one field score 0.39
# to 0.73 ("Deep residual learning for image recognition" vs "Identity mappings in deep residual networks": 0.39;
# "Playing Atari with deep reinforcement learning" vs "Human-level control through deep reinforcement learning":
# 0.63), and a shared prefix of different papers ("... : a survey" vs "... : a benchmark") scores below it too.
SAME_TITLE = 0.9


def normalise_title(title: str) -> str:
    """Lower-cased ASCII words separated by one space."""
    folded = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii").lower()
    return _NON_WORD.sub(" ", folded).strip()


def title_similarity(a: str | None, b: str | None) -> float:
    """0..1: how alike two titles are once normalised (1.0 identical; 0.0 when either is missing)."""
    left, right = normalise_title(a or ""), normalise_title(b or "")
    if not left or not right:
        return 0.0
    return SequenceMatcher(None, left, right, autojunk=False).ratio()


def title_in_text(title: str | None, text: str) -> float:
    """0..1: the largest share of the title's words found in order inside one stretch of a page's text about as long
    as the title (the right-paper check reads a first page, where the title sits among authors and abstract)."""
    words = normalise_title(title or "").split()
    haystack = normalise_title(text).split()
    if not words or not haystack:
        return 0.0
    span = len(words) + 3  # room for a subtitle colon's word or a line-break hyphen split
    best = 0
    for start in range(max(len(haystack) - len(words) + 1, 1)):
        matcher = SequenceMatcher(None, words, haystack[start:start + span], autojunk=False)
        best = max(best, sum(block.size for block in matcher.get_matching_blocks()))
        if best == len(words):
            break
    return best / len(words)
