"""Title comparison shared by the metadata check and the right-paper check: case, accents, punctuation and
spacing never make two titles differ."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher

from peerify_dagster.domain.citations.entries import ParsedEntry

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


# --- Titles repaired at line-break hyphens ---------------------------------------------------------------------------
# A reference entry's title wrapped at a line end comes out of the text layer either with the break's hyphen kept
# before a capital ("SciB-ERT", "STO-RIUM") or with a real hyphen lost ("Vmeasure", "stateof-the-art"). The paper's
# own spellings of the word elsewhere (and the candidate paper's, when comparing) say which it was.

_WORD_FORM = re.compile(r"[^\W_]+(?:-[^\W_]+)*")  # a word with its hyphens: "state-of-the-art", "SciB-ERT"
# A closed-up word the document never writes is split on its dictionary only into parts this long: shorter parts are
# affixes and little words that join many stems ("-able", "-ing", "al-", "any-", "head-") into ordinary words.
_MIN_SPLIT_PART = 5


def _forms(text: str) -> Counter[str]:
    """Each word form of a text, lower-cased, counted: hyphenated compounds whole and each of their parts."""
    counts: Counter[str] = Counter()
    for token in _WORD_FORM.findall(text):
        counts[token.lower()] += 1
        if "-" in token:
            counts.update(part.lower() for part in token.split("-"))
    return counts


@dataclass(frozen=True)
class Spellings:
    """How a text writes its words: every word form (lower-cased, hyphens kept, and the parts of hyphenated ones)
    with how often it occurs."""

    counts: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, texts: Iterable[str]) -> Spellings:
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(_forms(text))
        return cls(counts)


def _dropped_hyphens(word: str, before_capital_only: bool) -> list[str]:
    """The word with one hyphen dropped (with `before_capital_only`, only a hyphen before a capital or a digit)."""
    return [word[:at] + word[at + 1:] for at, char in enumerate(word)
            if char == "-" and not (before_capital_only and word[at + 1].islower())]


def _inserted_hyphens(word: str, before_lower_only: bool) -> list[str]:
    """The word with one hyphen inserted between two letters (with `before_lower_only`, only before a lower-case
    one)."""
    return [word[:at] + "-" + word[at:] for at in range(1, len(word)) if word[at - 1].isalpha() and word[at].isalpha()
            and not (before_lower_only and not word[at].islower())]


def repair_title(title: str | None, document: Spellings | None = None,
                 candidate: Spellings | None = None) -> str | None:
    """The title with each word broken at a line-end hyphen written as it should be. The candidate paper's spelling
    (its title or first page, when comparing with it) wins; else, for a word the document writes nowhere else, its
    spelling elsewhere with one hyphen dropped or inserted (`document` holds the whole document, the title's own entry
    included: that one occurrence is discounted); else a closed-up word is split where both parts are words of the
    document ("Contextenhanced" -> "Context-enhanced"). A word with no such evidence is left as it is."""
    if not title:
        return title
    own = _forms(title)
    found = document.counts if document else Counter()
    preferred = candidate.counts if candidate else Counter()

    def elsewhere(form: str) -> int:
        return max(found[form.lower()] - own[form.lower()], 0)

    def repaired(match: re.Match[str]) -> str:
        word = match.group(0)
        if word.lower() in preferred:
            return word
        if by_candidate := [variant for variant in _dropped_hyphens(word, False) + _inserted_hyphens(word, False)
                            if variant.lower() in preferred]:
            return by_candidate[0]
        if elsewhere(word):
            return word
        # The layout keeps a line-end hyphen only before a capital or a digit ("SciB-ERT") and closes one only
        # before a lower-case letter ("Vmeasure"): only such a hyphen may be dropped or put back on the document's word.
        if attested := [variant for variant in _dropped_hyphens(word, True) + _inserted_hyphens(word, True)
                        if elsewhere(variant)]:
            return max(attested, key=elsewhere)
        return "-".join(_split_on_dictionary(part, elsewhere) for part in word.split("-"))

    return _WORD_FORM.sub(repaired, title)


def _split_on_dictionary(part: str, elsewhere: Callable[[str], int]) -> str:
    """A hyphen-free part the document never writes, split where both sides are its words and the tail begins in
    lower case (the layout closes a line-end hyphen only before a lower-case letter); the most even split wins."""
    if elsewhere(part):
        return part
    splits = [at for at in range(_MIN_SPLIT_PART, len(part) - _MIN_SPLIT_PART + 1)
              if part[at].islower() and part[at - 1].isalpha() and elsewhere(part[:at]) and elsewhere(part[at:])]
    if not splits:
        return part
    at = max(splits, key=lambda position: min(position, len(part) - position))
    return f"{part[:at]}-{part[at:]}"


def with_repaired_title(entry: ParsedEntry, document: Spellings) -> ParsedEntry:
    """The entry with its title repaired on the document's spellings (`repair_title`); its raw text as printed."""
    repaired = repair_title(entry.title, document)
    return entry if repaired == entry.title else replace(entry, title=repaired)
