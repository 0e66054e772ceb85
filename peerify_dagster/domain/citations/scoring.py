"""Citance detection scored against gold citing sentences, by RefVerifier's rule: a detected span counts for a gold
citing sentence when it covers at least half of that sentence's tokens; several spans inside one sentence count
once; precision is over detected spans, recall over gold citing sentences.

Two ways to say what a detection covers: offsets into the paragraph the gold sentences make (`score_spans`, the
CiteWorth gold), or the text of a sentence found in another parse of the same paper (`score_texts`, a PDF against
GROBID's S2ORC parse), where the tokens the two sentences share in order are the covered ones.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

_WHITESPACE_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class DetectionCounts:
    """Counts that add up across paragraphs and papers. `detections`: detected spans, those inside one gold
    sentence counted once; `correct`: detections that count for a gold citing sentence; `citing`: gold citing
    sentences; `found`: gold citing sentences a detection counts for; `sentences`: gold sentences seen."""

    detections: int = 0
    correct: int = 0
    citing: int = 0
    found: int = 0
    sentences: int = 0

    def __add__(self, other: DetectionCounts) -> DetectionCounts:
        return DetectionCounts(self.detections + other.detections, self.correct + other.correct,
                               self.citing + other.citing, self.found + other.found,
                               self.sentences + other.sentences)

    @property
    def precision(self) -> float:
        return self.correct / self.detections if self.detections else 0.0

    @property
    def recall(self) -> float:
        return self.found / self.citing if self.citing else 0.0

    @property
    def f1(self) -> float:
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def join_sentences(sentences: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """The paragraph the sentences make, joined by one space, and each sentence's (start, end) in it."""
    spans, position = [], 0
    for sentence in sentences:
        spans.append((position, position + len(sentence)))
        position += len(sentence) + 1
    return " ".join(sentences), spans


@dataclass(frozen=True)
class DetectionOutcome:
    """The counts of one scoring and what went wrong: `missed`, the gold citing sentences (indexes) no detection
    counts for; `spurious`, the detections (indexes; the first of each sentence's) that count for none."""

    counts: DetectionCounts
    missed: tuple[int, ...]
    spurious: tuple[int, ...]


def _tally(citing: Sequence[bool], token_counts: Sequence[int],
           covered: Sequence[dict[int, set[int]]]) -> DetectionOutcome:
    """`covered[d][g]`: the tokens (indexes) of gold sentence g that detection d covers."""
    groups: dict[object, tuple[int, dict[int, set[int]]]] = {}
    union: dict[int, set[int]] = {}
    for number, cover in enumerate(covered):
        overlapping = {g: tokens for g, tokens in cover.items() if tokens}
        # A detection belongs to the gold sentence it overlaps most; several in one sentence are one detection.
        home = max(overlapping, key=lambda g: (len(overlapping[g]), -g)) if overlapping else ("none", number)
        _, group = groups.setdefault(home, (number, {}))
        for g, tokens in overlapping.items():
            group.setdefault(g, set()).update(tokens)
            union.setdefault(g, set()).update(tokens)

    def counts_for(tokens: set[int], g: int) -> bool:
        return citing[g] and 2 * len(tokens) >= token_counts[g] > 0

    spurious = tuple(first for first, group in groups.values()
                     if not any(counts_for(tokens, g) for g, tokens in group.items()))
    missed = tuple(g for g, is_citing in enumerate(citing) if is_citing and not counts_for(union.get(g, set()), g))
    citing_total = sum(map(bool, citing))
    counts = DetectionCounts(len(groups), len(groups) - len(spurious), citing_total, citing_total - len(missed),
                             len(citing))
    return DetectionOutcome(counts, missed, spurious)


def score_spans(gold_sentences: Sequence[tuple[str, bool]],
                detected_spans: Sequence[tuple[int, int]]) -> DetectionOutcome:
    """Score detected (start, end) offsets in the paragraph `join_sentences` makes of the gold sentences
    ((text, is_citance) in order); tokens are whitespace-separated, covered when wholly inside a span."""
    text, spans = join_sentences([sentence for sentence, _ in gold_sentences])
    tokens = [[(m.start() + start, m.end() + start) for m in _WHITESPACE_TOKEN.finditer(text[start:end])]
              for start, end in spans]
    covered = [{g: {i for i, (a, b) in enumerate(sentence_tokens) if a >= span_start and b <= span_end}
                for g, sentence_tokens in enumerate(tokens)}
               for span_start, span_end in detected_spans]
    return _tally([is_citance for _, is_citance in gold_sentences], [len(t) for t in tokens], covered)


def text_tokens(text: str) -> list[str]:
    """Lower-case words and numbers, compatibility forms folded (ligatures, full-width digits)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def score_texts(gold_sentences: Sequence[tuple[str, bool]], detected_texts: Sequence[str]) -> DetectionOutcome:
    """Score sentences detected in another parse of the same text: a gold sentence's tokens are covered by a
    detected sentence where the two share them in order, in runs of two or more (difflib's matching blocks over
    `text_tokens`)."""
    gold_tokens = [text_tokens(sentence) for sentence, _ in gold_sentences]
    covered = []
    for detected in detected_texts:
        found = text_tokens(detected)
        cover: dict[int, set[int]] = {}
        for g, tokens in enumerate(gold_tokens):
            matcher = SequenceMatcher(None, tokens, found, autojunk=False)
            # Runs of two tokens or more: a lone shared "the" or "of" says nothing about being the same sentence.
            cover[g] = {block.a + i for block in matcher.get_matching_blocks() if block.size >= 2
                        for i in range(block.size)}
        covered.append(cover)
    return _tally([is_citance for _, is_citance in gold_sentences], [len(t) for t in gold_tokens], covered)
