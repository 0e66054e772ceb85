"""Dual-LLM claim labelling: what each labeller sees as evidence, and how far the two labellers agree.

Every review claim is labelled by two roles (`labeller_a`, `labeller_b`) against two disjoint sources:
- `thread` (RebuttalSourced): the authors' side of the review's discussion, never the manuscript. Which author
  text is shown is a venue setting (`labelling: {thread_evidence: ...}`): `longest_author_reply`, the single
  longest direct author reply to the review (the paper's pairing and the release's B6 `author_response`), or
  `thread_with_followups`, every author response and reviewer follow-up of the thread in time order, each marked
  with who wrote it. A review without any author response gets `Not Determined` by rule, without a call.
- `manuscript` (LLMJudged): the manuscript's chunks, never the thread. `manuscript_evidence: auto` shows the
  whole manuscript when prompt, manuscript and the answer's token budget fit the model's context window and
  else the configured retriever's top-k chunks; `whole` never falls back (a manuscript that does not fit is an
  error row), `retrieved` always retrieves. Nothing is ever truncated: evidence that does not fit is an error.

Token counts are estimates (`llm_calls.estimate_tokens`, about four characters a token: no served model exposes
its tokenizer through the gateway), so the fit check keeps ESTIMATE_MARGIN of headroom.

Agreement between the labellers is raw agreement, Cohen's kappa and the 4x4 table (rows: A's label, columns:
B's label, both in LABELS order). Items where either labeller made no call (a rule label, a missing manuscript,
evidence too long) or gave no usable label are counted apart, never in the table. An undefined kappa is explained
in words (`kappa_explanation`), and a labeller that gave one label to 90% or more of the pairs is named
(`agreement_warnings`): its agreement then mostly reflects that one label.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from peerify_dagster.domain import label_metrics
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.llm_calls import JsonExtractionError, estimate_tokens, extract_json_object
from peerify_dagster.domain.options import checked_options
from peerify_dagster.domain.prompts import format_passages, load_prompt
from peerify_dagster.domain.retrieval import RETRIEVER_CONFIGS

SOURCE_THREAD = "thread"
SOURCE_MANUSCRIPT = "manuscript"
SOURCES = (SOURCE_THREAD, SOURCE_MANUSCRIPT)
LABELLER_ROLES = {"a": "labeller_a", "b": "labeller_b"}
THREAD_PROMPT = "label_rebuttal"
MANUSCRIPT_PROMPT = "label_manuscript"

THREAD_LONGEST_REPLY = "longest_author_reply"
THREAD_WITH_FOLLOWUPS = "thread_with_followups"
THREAD_CHOICES = (THREAD_LONGEST_REPLY, THREAD_WITH_FOLLOWUPS)
MANUSCRIPT_CHOICES = ("auto", "whole", "retrieved")
# The labelling step loads no cross-encoder, so only the retrievers that need none.
RETRIEVER_CHOICES = tuple(name for name, config in RETRIEVER_CONFIGS.items() if not config.rerank)

# claim_threads: the author text of each claim's review thread, as the thread labeller saw it.
CLAIM_THREAD_SCHEMA = {
    "venue": pl.String, "claim_id": pl.String, "paper_id": pl.String, "review_id": pl.String,
    "thread_mode": pl.String, "thread_text": pl.String, "thread_tokens": pl.Int64,
}

# evidence_mode values (claim_labels.evidence_mode)
MODE_LONGEST_REPLY = THREAD_LONGEST_REPLY
MODE_THREAD_WITH_FOLLOWUPS = THREAD_WITH_FOLLOWUPS
MODE_NO_AUTHOR_RESPONSE = "no_author_response"
MODE_WHOLE = "whole_manuscript"
MODE_RETRIEVED = "retrieved"
MODE_NO_MANUSCRIPT = "no_manuscript"

ERROR_NO_MANUSCRIPT = "no_manuscript"
ESTIMATE_MARGIN = 0.15  # the token estimate may be this much short of a real tokenizer's count


class LabellingConfigError(ValueError):
    """A `labelling:` option that cannot be used; the message names the option."""


@dataclass(frozen=True)
class LabellingConfig:
    thread_evidence: str = THREAD_LONGEST_REPLY  # one of THREAD_CHOICES
    manuscript_evidence: str = "auto"  # one of MANUSCRIPT_CHOICES
    retriever: str = "hybrid"  # one of RETRIEVER_CHOICES: supplies the chunks when the whole manuscript is not shown
    top_k: int = 10

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> LabellingConfig:
        options = checked_options(cls, raw, LabellingConfigError)
        for name, choices in (("thread_evidence", THREAD_CHOICES), ("manuscript_evidence", MANUSCRIPT_CHOICES),
                              ("retriever", RETRIEVER_CHOICES)):
            if name in options and options[name] not in choices:
                raise LabellingConfigError(f"{name} must be one of {list(choices)}, got {options[name]!r}")
        top_k = options.get("top_k", cls.top_k)
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise LabellingConfigError(f"top_k must be a positive integer, got {top_k!r}")
        return cls(**options)

    @property
    def needs_retrieval(self) -> bool:
        return self.manuscript_evidence != "whole"


# -- thread evidence ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ThreadEvidence:
    mode: str  # longest_author_reply | thread_with_followups | no_author_response
    text: str | None  # None: no author response, no call
    note_ids: list[str]  # the author responses (and follow-ups) shown, in the order shown


def _time_order(note: Mapping[str, Any]) -> tuple:
    return (note.get("cdate") is None, note.get("cdate") or 0, note["id"])


def thread_evidence(review_id: str, responses: Sequence[Mapping[str, Any]], followups: Sequence[Mapping[str, Any]],
                    mode: str) -> ThreadEvidence:
    """The author text the thread labeller sees for a claim of `review_id`.

    `responses`: the review's author responses (id, replyto, text, cdate); `followups`: its reviewer follow-ups
    (id, text, cdate, own_review). `longest_author_reply` takes the longest (in words) author response that
    replies directly to the review, or the longest of the thread when none does (ties: the earlier one)."""
    usable = [r for r in responses if (r.get("text") or "").strip()]
    if not usable:
        return ThreadEvidence(MODE_NO_AUTHOR_RESPONSE, None, [])
    if mode == THREAD_LONGEST_REPLY:
        direct = [r for r in usable if r.get("replyto") == review_id] or usable
        longest = min(direct, key=lambda r: (-len(r["text"].split()), *_time_order(r)))
        return ThreadEvidence(MODE_LONGEST_REPLY, longest["text"].strip(), [longest["id"]])
    if mode != THREAD_WITH_FOLLOWUPS:
        raise LabellingConfigError(f"thread_evidence must be one of {list(THREAD_CHOICES)}, got {mode!r}")
    marked = [(r, "Authors") for r in usable] + [
        (f, "Reviewer" if f.get("own_review", True) else "Another reviewer")
        for f in followups if (f.get("text") or "").strip()]
    marked.sort(key=lambda pair: _time_order(pair[0]))
    text = "\n\n".join(f"[{who}]\n{note['text'].strip()}" for note, who in marked)
    return ThreadEvidence(MODE_THREAD_WITH_FOLLOWUPS, text, [note["id"] for note, _ in marked])


# -- manuscript evidence -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContextBudget:
    """What one labeller model can take: its context window and the tokens its answer may use."""

    model: str
    context_window: int
    output_tokens: int

    def fits(self, prompt_tokens: int) -> bool:
        return prompt_tokens * (1 + ESTIMATE_MARGIN) + self.output_tokens <= self.context_window

    def overflow(self, what: str, prompt_tokens: int) -> str:
        return (f"{what} does not fit: ~{prompt_tokens} prompt tokens (+{ESTIMATE_MARGIN:.0%} estimate margin) and "
                f"{self.output_tokens} answer tokens exceed model {self.model!r}'s context window of "
                f"{self.context_window} tokens")


def prompt_tokens(prompt_id: str, variables: Mapping[str, Any]) -> int:
    """Estimated tokens of the rendered prompt (system and user messages)."""
    return sum(estimate_tokens(message["content"]) for message in load_prompt(prompt_id).render(variables))


@dataclass(frozen=True)
class ManuscriptEvidence:
    mode: str  # whole_manuscript | retrieved | no_manuscript
    chunk_ids: list[str]  # the chunks shown, in the order shown
    text: str | None  # None: no call (see error)
    error: str | None = None


def manuscript_evidence(config: LabellingConfig, claim: str, chunks: Sequence[tuple[str, str]],
                        ranked_chunk_ids: Sequence[str], budget: ContextBudget) -> ManuscriptEvidence:
    """The manuscript passages one labeller model sees for `claim`.

    `chunks`: the paper's (chunk id, text) in manuscript order (empty: no usable manuscript);
    `ranked_chunk_ids`: the configured retriever's ranking of them for this claim (best first)."""
    if not chunks:
        return ManuscriptEvidence(MODE_NO_MANUSCRIPT, [], None, ERROR_NO_MANUSCRIPT)
    if config.manuscript_evidence in ("auto", "whole"):
        whole = format_passages(chunks)
        tokens = prompt_tokens(MANUSCRIPT_PROMPT, {"claim": claim, "evidence": whole})
        if budget.fits(tokens):
            return ManuscriptEvidence(MODE_WHOLE, [chunk_id for chunk_id, _ in chunks], whole)
        if config.manuscript_evidence == "whole":
            return ManuscriptEvidence(MODE_WHOLE, [chunk_id for chunk_id, _ in chunks], None,
                                      budget.overflow("the whole manuscript", tokens))
    text_of = dict(chunks)
    top = [chunk_id for chunk_id in ranked_chunk_ids if chunk_id in text_of][:config.top_k]
    if not top:
        return ManuscriptEvidence(MODE_RETRIEVED, [], None,
                                  f"no_evidence: retriever {config.retriever} ranked no chunk for this claim")
    retrieved = format_passages([(chunk_id, text_of[chunk_id]) for chunk_id in top])
    tokens = prompt_tokens(MANUSCRIPT_PROMPT, {"claim": claim, "evidence": retrieved})
    if not budget.fits(tokens):
        return ManuscriptEvidence(MODE_RETRIEVED, top, None, budget.overflow(f"the top {len(top)} chunks", tokens))
    return ManuscriptEvidence(MODE_RETRIEVED, top, retrieved)


def incomplete_claims(claim_ids: Iterable[str], rows: Iterable[tuple[str, str, str, str | None]]) -> list[str]:
    """Claims without exactly one row per (source, labeller), or with a label outside the four (claim_labels' check);
    `rows`: (claim_id, source, labeller, label)."""
    seen: dict[str, list[tuple[str, str]]] = {claim_id: [] for claim_id in claim_ids}
    failing = set()
    for claim_id, source, labeller, label in rows:
        seen.setdefault(claim_id, []).append((source, labeller))
        if label is not None and label not in LABELS:
            failing.add(claim_id)
    expected = sorted((source, labeller) for source in SOURCES for labeller in LABELLER_ROLES)
    failing |= {claim_id for claim_id, keys in seen.items() if sorted(keys) != expected}
    return sorted(failing)


# -- answers -----------------------------------------------------------------------------------------------------

def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def raw_label(raw_response: str | None) -> str | None:
    """The label exactly as the model wrote it (None when the answer holds no JSON object or no string label)."""
    try:
        value = extract_json_object(raw_response or "").get("label")
    except JsonExtractionError:
        return None
    return value if isinstance(value, str) else None


def answer_quotes(parsed: Mapping[str, Any] | None) -> list[str]:
    """The answer's evidence quotes (strings only, blank ones left out)."""
    quotes = (parsed or {}).get("evidence_quotes")
    if not isinstance(quotes, list):
        return []
    return [quote for quote in quotes if isinstance(quote, str) and quote.strip()]


def verbatim_quotes(quotes: Iterable[str], evidence_text: str | None) -> int:
    """How many quotes occur in the evidence word for word (case and whitespace aside)."""
    haystack = _squash(evidence_text or "")
    return sum(bool(haystack) and _squash(quote) in haystack for quote in quotes)


# -- agreement ---------------------------------------------------------------------------------------------------

KAPPA_OK = "ok"
KAPPA_NO_PAIRS = "no_pairs"
KAPPA_UNDEFINED = "undefined_single_class"  # both labellers used one and the same label: chance agreement is 1


@dataclass(frozen=True)
class Agreement:
    n_pairs: int
    agreed: int
    raw_agreement: float | None  # None without pairs
    kappa: float | None  # None when undefined (see kappa_status)
    kappa_status: str
    table: list[list[int]]  # table[i][j]: items A labelled LABELS[i] and B labelled LABELS[j]


def agreement(pairs: Iterable[tuple[str, str]], labels: Sequence[str] = LABELS) -> Agreement:
    """Raw agreement, Cohen's kappa (label_metrics.cohen_kappa) and the table of (label A, label B) pairs.

    When both labellers gave every item one and the same label, chance agreement is 1 and kappa is 0/0: it is
    reported as None with status `undefined_single_class`, not as 1 or 0, since agreement beyond chance cannot be
    measured there."""
    pairs = list(pairs)
    index = {label: position for position, label in enumerate(labels)}
    table = [[0] * len(labels) for _ in labels]
    for label_a, label_b in pairs:
        if label_a not in index or label_b not in index:
            raise ValueError(f"labels {label_a!r}, {label_b!r}: both must be in {list(labels)}")
        table[index[label_a]][index[label_b]] += 1
    if not pairs:
        return Agreement(0, 0, None, None, KAPPA_NO_PAIRS, table)
    agreed = sum(a == b for a, b in pairs)
    kappa = label_metrics.cohen_kappa([a for a, _ in pairs], [b for _, b in pairs])
    return Agreement(len(pairs), agreed, agreed / len(pairs), kappa, KAPPA_OK if kappa is not None else KAPPA_UNDEFINED,
                     table)


@dataclass(frozen=True)
class LabelledItem:
    """One (claim, source) with both labellers' outcome; a label of None means no usable label."""

    claim_id: str
    source: str
    claim_type: str | None
    label_a: str | None
    label_b: str | None
    called_a: bool
    called_b: bool


def paired_items(rows: Iterable[Mapping[str, Any]], claim_types: Mapping[str, str | None]) -> list[LabelledItem]:
    """claim_labels rows (claim_id, source, labeller, label, call_id) paired per (claim, source)."""
    by_item: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        by_item.setdefault((row["claim_id"], row["source"]), {})[row["labeller"]] = row
    items = []
    for (claim_id, source), by_labeller in sorted(by_item.items()):
        a, b = by_labeller.get("a", {}), by_labeller.get("b", {})
        items.append(LabelledItem(claim_id, source, claim_types.get(claim_id), a.get("label"), b.get("label"),
                                  a.get("call_id") is not None, b.get("call_id") is not None))
    return items


@dataclass(frozen=True)
class AgreementSummary:
    n_items: int
    n_without_call: int  # either labeller made no call (rule label, no manuscript, evidence too long)
    n_parse_failed: int  # both called, and either gave no usable label
    agreement: Agreement


def summarise(items: Sequence[LabelledItem]) -> AgreementSummary:
    without_call = [item for item in items if not (item.called_a and item.called_b)]
    called = [item for item in items if item.called_a and item.called_b]
    pairs = [(item.label_a, item.label_b) for item in called if item.label_a and item.label_b]
    return AgreementSummary(len(items), len(without_call), len(called) - len(pairs), agreement(pairs))


def groups(items: Sequence[LabelledItem]) -> dict[tuple[str, str], list[LabelledItem]]:
    """(source, claim type) -> items, with `all` for the pooled source and for every claim type; the three overall
    groups are always there, empty or not."""
    grouped: dict[tuple[str, str], list[LabelledItem]] = {(source, "all"): [] for source in ("all", *SOURCES)}
    for item in items:
        claim_type = item.claim_type or "untyped"
        for source in ("all", item.source):
            for kind in ("all", claim_type):
                grouped.setdefault((source, kind), []).append(item)
    return grouped


def markdown_table(table: Sequence[Sequence[int]], labels: Sequence[str] = LABELS) -> str:
    """The A-vs-B table as Markdown (rows: labeller A, columns: labeller B)."""
    header = "| A \\ B | " + " | ".join(labels) + " |"
    rule = "|---|" + "---|" * len(labels)
    body = [f"| {label} | " + " | ".join(str(count) for count in row) + " |" for label, row in zip(labels, table)]
    return "\n".join([header, rule, *body])


def kappa_explanation(kappa_status: str, table: Sequence[Sequence[int]] | None,
                      labels: Sequence[str] = LABELS) -> str | None:
    """Why kappa is undefined, in words (None when it is defined); `table` as in Agreement.table."""
    if kappa_status == KAPPA_NO_PAIRS:
        return "Cohen's kappa is undefined: no item has a usable label from both labellers."
    if kappa_status != KAPPA_UNDEFINED:
        return None
    used = [(label, row[position]) for position, (label, row) in enumerate(zip(labels, table or []))
            if row[position]]
    which = f"{used[0][0]} to all {used[0][1]} items" if len(used) == 1 else "one and the same label to every item"
    return (f"Cohen's kappa is undefined: both labellers gave {which}, so chance agreement is 1 and agreement beyond "
            "chance cannot be measured; the raw agreement of 1.000 only says they never differed.")


def labeller_warning(labeller: str, source: str, counts: Mapping[str, int]) -> str | None:
    """The plain-words warning for a labeller that gave one label to 90% or more of its pairs on a source."""
    dominant = label_metrics.dominant_label(counts)
    if dominant is None:
        return None
    return (f"Labeller {labeller} answered {dominant.label} to {dominant.count} of the {dominant.answered} {source} "
            f"items both labellers labelled ({dominant.share}): raw agreement mostly reflects how common "
            f"{dominant.label} is; read kappa and the table, not raw agreement.")


def agreement_warnings(rows: Iterable[Mapping[str, Any]], labels: Sequence[str] = LABELS) -> list[str]:
    """The sentences labeller_agreement rows (source, claim_type, kappa_status, confusion) call for: every undefined
    kappa explained, and a labeller that gave one label to 90% or more of the pairs of a source (its `all`
    claim-type row, where kappa is defined: an undefined one already says both gave one label; the pooled source
    is left out, it would repeat them). A sentence that would repeat another of the same source word for word (a
    venue with a single claim type) is said once."""
    warnings, said = [], set()
    for row in rows:
        table = row.get("confusion") or []
        explained = kappa_explanation(row["kappa_status"], table, labels)
        if explained and (row["source"], explained) not in said:
            said.add((row["source"], explained))
            warnings.append(f"{row['source']}, claim type {row['claim_type']}: {explained}")
        elif row["claim_type"] == "all" and row["source"] in SOURCES and table:
            answers = {"a": [sum(cells) for cells in table], "b": [sum(cells) for cells in zip(*table)]}
            warnings += [warning for labeller, sums in answers.items()
                         if (warning := labeller_warning(labeller, row["source"], dict(zip(labels, sums))))]
    return warnings


def describe(summary: AgreementSummary) -> str:
    """One line: pairs, agreement, kappa (or why there is none, in words), and what was counted apart."""
    result = summary.agreement
    if result.kappa_status == KAPPA_NO_PAIRS:
        core = "no pairs to compare"
    else:
        kappa = f"{result.kappa:.3f}" if result.kappa is not None else f"undefined ({result.kappa_status})"
        core = f"{result.n_pairs} pairs, agreement {result.raw_agreement:.3f}, Cohen's kappa {kappa}"
    explained = kappa_explanation(result.kappa_status, result.table)
    return (f"{core}; counted apart: {summary.n_without_call} without a call, {summary.n_parse_failed} parse failures"
            + (f". {explained}" if explained else ""))
