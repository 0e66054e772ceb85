"""A citing sentence judged against the cited paper: the `verify_citation` prompt's variables, its answer read into
one of RefVerifier's four verdicts, the verdicts given without a call, and the citance tagger's (`tag_citance`)
answer.

Statuses of a verdict: `ok` (a call whose answer gave a verdict), `no_cited_paper` (the cited paper's full text
could not be had: Not Enough Information, no call, never a guess), `no_relevant_passage` (the cited paper was had
but no window of it clears the retriever's relevance floor: Not Enough Information, no call), `too_long` (merged
mode: the paper does not fit the verifier's window; no call, no verdict), `parse_failed` (a call whose answer gave no
verdict), `error` (the call failed). Answers are read tolerantly, as a model writes them (fences and chatter around
the JSON, case, synonyms such as "Unsupported" or "NEI", the key `label` for `verdict`), but a verdict is never
invented from prose.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peerify_dagster.domain.citations.vocabulary import (
    CITATION_LABELS,
    CLAIM_TYPES,
    HEDGE_LEVELS,
    NOT_ENOUGH_INFORMATION,
)
from peerify_dagster.domain.labels import LABELS, normalise_label
from peerify_dagster.domain.llm_calls import JsonExtractionError, extract_json_object
from peerify_dagster.domain.prompts import format_passages

VERIFY_CITATION_PROMPT = "verify_citation"
TAG_CITANCE_PROMPT = "tag_citance"
# The gateway roles (models.yaml profiles): the judges of citing sentences, and the optional citance tagger.
CITATION_VERIFIERS_ROLE = "citation_verifiers"
CITANCE_TAGGER_ROLE = "citance_tagger"

STATUS_OK = "ok"
STATUS_NO_CITED_PAPER = "no_cited_paper"
STATUS_TOO_LONG = "too_long"
STATUS_PARSE_FAILED = "parse_failed"
STATUS_ERROR = "error"
STATUS_NO_PASSAGES = "no_passages"  # the cited paper was had, but it has no prose to show (no call, no verdict)
STATUS_NO_RELEVANT_PASSAGE = "no_relevant_passage"  # it has prose, none relevant (Not Enough Information, no call)
STATUS_OFF = "off"  # citance_enrichment: the venue did not ask for the tagger

# Peerify's labels map onto the citation verdicts in order; its fourth (Not Determined and its synonyms) reads as
# Not Enough Information, which is what a model means by it here.
_FROM_PEERIFY = dict(zip(LABELS, CITATION_LABELS))
_NOT_ENOUGH_INFORMATION_SPELLINGS = frozenset({
    "not enough information", "not enough info", "nei", "not enough evidence", "insufficient evidence",
    "no information", "no evidence",
})


@dataclass(frozen=True)
class Verdict:
    """One citation verdict. `label` is None when there is none (too_long, parse_failed, error); `explanation` is the
    model's, or for no_cited_paper the sentence saying why no model was asked; `reason` why there is no model verdict
    (or what was wrong with the answer)."""

    status: str
    label: str | None
    explanation: str | None
    reason: str | None = None


def normalise_citation_label(raw: object) -> str | None:
    """One of CITATION_LABELS for a label as a model may spell it, None when it is none of them."""
    if not isinstance(raw, str):
        return None
    spelled = re.sub(r"[^a-z]+", " ", raw.lower()).strip()
    if spelled in _NOT_ENOUGH_INFORMATION_SPELLINGS:
        return NOT_ENOUGH_INFORMATION
    peerify = normalise_label(raw)
    return _FROM_PEERIFY[peerify] if peerify else None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_verdict(answer: str | Mapping[str, Any] | None) -> Verdict:
    """The verdict in a `verify_citation` answer: the raw answer as the gateway returns it (`raw_response`) or its
    JSON object. Status ok with the label and the explanation (None when the answer gives none), else parse_failed
    with the reason."""
    if isinstance(answer, Mapping):
        obj: Mapping[str, Any] = answer
    else:
        try:
            obj = extract_json_object(answer or "")
        except JsonExtractionError as error:
            return Verdict(STATUS_PARSE_FAILED, None, None, str(error))
    raw = obj.get("verdict", obj.get("label"))
    label = normalise_citation_label(raw)
    if label is None:
        return Verdict(STATUS_PARSE_FAILED, None, _text(obj.get("explanation")),
                       f"verdict {raw!r} is not one of {list(CITATION_LABELS)}")
    return Verdict(STATUS_OK, label, _text(obj.get("explanation", obj.get("justification"))))


def call_verdict(error: str | None, raw_response: str | None) -> Verdict:
    """The verdict of one gateway call (its `error` and `raw_response`): error when the call failed, else the
    answer's (parse_verdict)."""
    if error is not None:
        return Verdict(STATUS_ERROR, None, None, error)
    return parse_verdict(raw_response)


def no_cited_paper(reason: str) -> Verdict:
    """Not Enough Information without a call: the cited paper's full text could not be had (`reason`: why)."""
    return Verdict(STATUS_NO_CITED_PAPER, NOT_ENOUGH_INFORMATION,
                   f"No model was asked: the cited paper's full text could not be had ({reason}).", reason)


def no_relevant_passage(reason: str) -> Verdict:
    """Not Enough Information without a call: the cited paper was had, but no window of it clears the retriever's
    relevance floor (`reason`: which floor), so nothing in it addresses the claim as far as retrieval can tell."""
    return Verdict(STATUS_NO_RELEVANT_PASSAGE, NOT_ENOUGH_INFORMATION,
                   f"No model was asked: no passage of the cited paper is relevant to the claim ({reason}).", reason)


def too_long(reason: str) -> Verdict:
    """No verdict and no call: in merged mode the cited paper does not fit the verifier's window (`reason`, e.g.
    evidence.fits_window's)."""
    return Verdict(STATUS_TOO_LONG, None, None, reason)


def _hedge_text(hedged: bool | None) -> str:
    if hedged is None:
        return "unknown"
    return "yes: judge the hedged statement" if hedged else "no"


def verdict_variables(citance_text: str, claim_type: str | None, hedged: bool | None, cited_title: str | None,
                      passages: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The `verify_citation` prompt's variables: the citing sentence, its claim type (one of CLAIM_TYPES, None when
    unknown) and hedge, the cited paper's title, and the (passage id, text) pairs shown, in the order shown."""
    if claim_type is not None and claim_type not in CLAIM_TYPES:
        raise ValueError(f"claim type {claim_type!r} is not one of {list(CLAIM_TYPES)}")
    if not passages:
        raise ValueError("a citation verdict needs at least one passage of the cited paper")
    return {
        "citance": citance_text.strip(),
        "claim_type": claim_type or "unknown",
        "hedge": _hedge_text(hedged),
        "cited_title": _text(cited_title) or "unknown",
        "passages": format_passages(passages),
    }


# -- the citance tagger ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CitanceTag:
    """The tagger's reading of one citance (citance_enrichment): claim type, hedge level and the part of the sentence
    the citation supports (None when the answer's text is not in the sentence: a paraphrase is no part of it)."""

    status: str
    claim_type: str | None
    hedge_level: str | None
    supported_text: str | None
    reason: str | None = None


def tag_variables(citance_text: str) -> dict[str, str]:
    """The `tag_citance` prompt's variables."""
    return {"citance": citance_text.strip()}


def _in_sentence(part: str, sentence: str) -> bool:
    """Whether the words of `part` occur in `sentence` in order (markers the model left out may lie between)."""
    remaining = iter(re.findall(r"\w+", sentence.lower()))
    return all(word in remaining for word in re.findall(r"\w+", part.lower()))


def parse_citance_tag(error: str | None, raw_response: str | None, citance_text: str) -> CitanceTag:
    """The tag in one `tag_citance` call (its `error` and `raw_response`): ok with the three fields, parse_failed
    when the claim type or hedge level is none of the fixed values, error when the call failed."""
    if error is not None:
        return CitanceTag(STATUS_ERROR, None, None, None, error)
    try:
        obj = extract_json_object(raw_response or "")
    except JsonExtractionError as problem:
        return CitanceTag(STATUS_PARSE_FAILED, None, None, None, str(problem))
    claim_type = _text(obj.get("claim_type"))
    hedge_level = _text(obj.get("hedge_level"))
    claim_type, hedge_level = claim_type and claim_type.lower(), hedge_level and hedge_level.lower()
    if claim_type not in CLAIM_TYPES or hedge_level not in HEDGE_LEVELS:
        return CitanceTag(STATUS_PARSE_FAILED, None, None, None,
                          f"claim_type {obj.get('claim_type')!r} (of {list(CLAIM_TYPES)}) or hedge_level "
                          f"{obj.get('hedge_level')!r} (of {list(HEDGE_LEVELS)}) is not a known value")
    supported = _text(obj.get("supported_text"))
    if supported is not None and not _in_sentence(supported, citance_text):
        return CitanceTag(STATUS_OK, claim_type, hedge_level, None,
                          f"supported_text {supported[:80]!r} is not part of the sentence")
    return CitanceTag(STATUS_OK, claim_type, hedge_level, supported)
