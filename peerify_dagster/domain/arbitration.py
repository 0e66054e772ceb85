"""The human arbitration of the two LLM labellers: the anonymised queue, the canonical labels and the file formats
humans answer it in (JSONL, CSV, Label Studio). Pure logic: no Dagster, no file system.

Anonymisation, blind to anyone who can read the public reviews and this repository but not the lake: a queue row
shows the two labellers' answers as `candidate_1` / `candidate_2` in an order that is a coin flip per item keyed with
the venue's item id secret (an HMAC-SHA256, see keyed_order), never a plain hash of public inputs such as the claim id
and the venue's seed; which labeller is which lives only in `arbitration_key`. Nothing here that builds an export or
a queue row reads the key. The manuscript passages an item shows are tagged [P1], [P2], ... in the order shown (the
chunk ids behind them, which name the forum, are in the row's `passage_chunks`), and any other mention of the item's
forum id in what the annotator reads is hidden too (PassageTags). A candidate without a usable label carries its
labeller's raw answer (`candidate_N_raw_answer`), so the human sees what the model actually said.

Opaque ids: what an annotator sees of an item is never its claim id (`claim_labels` and `canonical_labels.label_a/b`
are keyed by it, so one join would tell which candidate is which labeller) but `q-` + 12 hex of an HMAC-SHA256, keyed
by a secret the lake keeps beside the decisions, of (venue, queue or audit-sample version, item id). Without the
secret an id cannot be computed from a claim id, so it cannot be joined to anything; and it changes with the queue
version, so ids from two exports cannot be matched up either. Exports carry it in their `item_id` field; an import
maps it back through the queue it was exported from, and still takes the claim_id:source form older exports wrote.

Decisions answering an older queue version (the queue is rebuilt whenever any item changes, so every decision
soon answers an older version) are applied while what was chosen is still on offer in the same form: a candidate
choice when that candidate still carries the label chosen, a third label when neither candidate now carries it.
Otherwise the decision is stale: kept in the ledger, reported, and the item is pending again. So a changed candidate
order (queues built before keyed_order ordered them by a plain hash) never turns a decision into an upholding of the
other labeller: where the chosen candidate now carries the other labeller's label, the decision is stale.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import reprlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

from peerify_dagster.domain import records
from peerify_dagster.domain.labels import LABELS

LABELLERS = ("a", "b")
CANDIDATES = ("candidate_1", "candidate_2")
THIRD_LABEL = "third_label"
DISAGREE, PARSE_FAILED = "disagree", "parse_failed"
NO_MATERIAL_MODES = frozenset({"no_manuscript"})  # evidence modes where the labeller had nothing to judge against
# canonical provenance
AGREED, PENDING, UNLABELLED = "agreed", "pending", "unlabelled"
UPHELD = {"a": "a_upheld", "b": "b_upheld"}

QUEUE_COLUMNS = (
    "venue", "item_id", "claim_id", "paper_id", "review_id", "source", "claim_text", "claim_type", "source_material",
    "passage_chunks", "candidate_1_label", "candidate_1_justification", "candidate_1_evidence",
    "candidate_1_raw_answer", "candidate_2_label", "candidate_2_justification", "candidate_2_evidence",
    "candidate_2_raw_answer", "reason", "queue_version",
)
KEY_COLUMNS = ("item_id", "candidate_1_labeller", "candidate_2_labeller", "queue_version")
CANONICAL_COLUMNS = (
    "venue", "item_id", "claim_id", "paper_id", "review_id", "source", "label", "provenance", "decision_id",
    "annotator", "label_a", "label_b", "call_id_a", "call_id_b", "queue_version",
)
# What an export shows per item (`item_id`: the item's opaque id), then the answer fields a human fills in.
EXPORT_COLUMNS = (
    "venue", "item_id", "source", "claim_type", "claim_text", "source_material",
    "candidate_1_label", "candidate_1_justification", "candidate_1_evidence", "candidate_1_raw_answer",
    "candidate_2_label", "candidate_2_justification", "candidate_2_evidence", "candidate_2_raw_answer", "reason",
    "queue_version",
)
ANSWER_COLUMNS = ("choice", "label", "note")
EXPORT_FORMATS = ("jsonl", "csv", "labelstudio")
# Label Studio control names: the labelling config and the importer agree on them.
LS_LABEL_CONTROL, LS_NOTE_CONTROL = "label", "note"
OPAQUE_ID_PREFIX = "q-"
OPAQUE_ID_HEX = 12  # 48 bits: a clash in a queue of 10,000 items has a chance below 1 in 5 million, and is refused
PASSAGE_TAG, FORUM_MENTION = "P{}", "the paper"  # what annotators read instead of a chunk id, and of a bare forum id
# item id -> (the labeller shown as candidate_1, the one shown as candidate_2)
CandidateOrder = Callable[[str], tuple[str, str]]


def item_id_of(claim_id: str, source: str) -> str:
    return f"{claim_id}:{source}"


def is_opaque_id(value: object) -> bool:
    return isinstance(value, str) and value.startswith(OPAQUE_ID_PREFIX) and ":" not in value


def opaque_item_ids(secret: bytes, venue: str, version: str | None, item_ids: Iterable[str]) -> dict[str, str]:
    """item id -> its opaque id for one queue (or audit sample) version; see the module's docstring."""
    ids = {}
    for item_id in item_ids:
        message = "\n".join([venue, version or "", item_id]).encode("utf-8")
        ids[item_id] = OPAQUE_ID_PREFIX + hmac.new(secret, message, hashlib.sha256).hexdigest()[:OPAQUE_ID_HEX]
    if len(set(ids.values())) != len(ids):
        raise ValueError(f"two items of {venue} version {version} got the same opaque id; rotate the lake's item id "
                         "secret (nothing has been decided on these ids if the clash is new)")
    return ids


def keyed_order(secret: bytes, venue: str) -> CandidateOrder:
    """Which labeller is candidate_1 and which candidate_2 of each item: a coin flip per item, the same on every
    rebuild, keyed with the venue's item id secret. Everything else it depends on (venue, claim id, source) can be
    worked out from the public reviews, so without the key the order would be too; with it, telling which candidate
    is which labeller is a guess. Its message starts with a purpose line, so it is never an opaque id's message."""
    def order(item_id: str) -> tuple[str, str]:
        message = "\n".join(["candidate order", venue, item_id]).encode("utf-8")
        return LABELLERS if hmac.new(secret, message, hashlib.sha256).digest()[-1] % 2 == 0 else LABELLERS[::-1]
    return order


def decided_order(label_rows: Iterable[Mapping], current: Mapping[str, object]) -> CandidateOrder:
    """The candidate order of a queue rebuilt without its venue's secret (a released dataset's rebuild): each item
    whose decision chose a candidate shows the labeller that gave the decision's label as that candidate; any other
    item shows a then b. A candidate choice applies only while its candidate carries the label chosen (stale_reason),
    so it upholds the labeller that gave that label, as it did when the pipeline applied it. `current`:
    current_decisions of the arbitration ledger."""
    pairs = labeller_pairs(label_rows)
    orders = {}
    for item_id, decision in current.items():
        chosen = [labeller for labeller in LABELLERS if _label(pairs.get(item_id, {}), labeller) == decision.label]
        if decision.choice in CANDIDATES and chosen:
            other = next(labeller for labeller in LABELLERS if labeller != chosen[0])
            orders[item_id] = (chosen[0], other) if decision.choice == CANDIDATES[0] else (other, chosen[0])
    return lambda item_id: orders.get(item_id, LABELLERS)


@dataclass
class PassageTags:
    """What an item shows its annotator instead of chunk ids: `[<forum id>:0010:<hash>]` names the forum, whose
    reviews and claim ids are public, so each passage is tagged P1, P2, ... in the order its source material shows
    them. A mention of a chunk elsewhere (a labeller quoting a passage's tag, perhaps garbled) gets the tag of the
    shown chunk with the same position in the paper, else a tag of its own; a bare forum id becomes "the paper".
    `chunks[n - 1]` is what P<n> stands for (a chunk id, or a mention as the model wrote it)."""

    paper_id: str | None
    chunks: list[str]

    def hide(self, text: str | None) -> str | None:
        if not text or not self.paper_id:
            return text
        pattern = rf"(?<![\w-]){re.escape(self.paper_id)}(?::(\d+)(?::[0-9a-fA-F]*)?)?"
        return re.sub(pattern, self._tag, text)

    def _tag(self, mention: re.Match) -> str:
        if mention.group(1) is None:
            return FORUM_MENTION
        position = int(mention.group(1))
        known = next((n for n, chunk in enumerate(self.chunks, start=1) if self._position(chunk) == position), None)
        if known is None:
            self.chunks.append(mention.group(0))
            known = len(self.chunks)
        return PASSAGE_TAG.format(known)

    def _position(self, chunk: str) -> int | None:
        """The position in the paper that a chunk id (`<forum id>:<position>:<hash>`) or a mention of one names."""
        position = chunk.removeprefix(f"{self.paper_id}:").split(":")[0]
        return int(position) if chunk.startswith(f"{self.paper_id}:") and position.isdigit() else None


def queue_reason(label_a: str | None, label_b: str | None) -> str | None:
    """Why an item needs a human (either labeller's answer unusable, or the two differ), or None when they agree."""
    if label_a is None or label_b is None:
        return PARSE_FAILED
    return DISAGREE if label_a != label_b else None


def queue_version(rows: Iterable[Mapping]) -> str:
    content = sorted([r["item_id"], r["candidate_1_label"], r["candidate_2_label"]] for r in rows)
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]


def labeller_pairs(label_rows: Iterable[Mapping]) -> dict[str, dict[str, Mapping]]:
    """claim_labels rows grouped per item: item_id -> {'a': row, 'b': row} (a labeller without a row is absent)."""
    pairs: dict[str, dict[str, Mapping]] = {}
    for row in label_rows:
        pairs.setdefault(item_id_of(row["claim_id"], row["source"]), {})[row["labeller"]] = row
    return pairs


def _label(pair: Mapping[str, Mapping], labeller: str) -> str | None:
    row = pair.get(labeller)
    return row["label"] if row and row["parse_ok"] and row["label"] in LABELS else None


def has_no_material(pair: Mapping[str, Mapping]) -> bool:
    """Neither labeller had source material (e.g. the paper has no manuscript): nothing for a human to judge."""
    return all(pair.get(labeller, {}).get("evidence_mode") in NO_MATERIAL_MODES for labeller in LABELLERS)


@dataclass
class Queue:
    rows: list[dict]  # arbitration_queue
    key: list[dict]  # arbitration_key: the A/B mapping, never shown


def unparsed_call_ids(label_rows: Iterable[Mapping]) -> list[str]:
    """The calls whose answer gave no usable label: the raw answers a queue shows (see build_queue)."""
    return sorted({row["call_id"] for row in label_rows if row.get("call_id") and not row["parse_ok"]})


def _raw_answer(answer: Mapping, raw_answers: Mapping[str, str]) -> str | None:
    """The raw text of an answer without a usable label: the ledger's raw response of its call, else the label as
    the model wrote it (claim_labels' raw_label); None when no call was made."""
    if not answer.get("call_id"):
        return None
    return raw_answers.get(answer["call_id"]) or answer.get("raw_label")


def build_queue(venue: str, order: CandidateOrder, label_rows: Iterable[Mapping], claim_texts: Mapping[str, str],
                claim_types: Mapping[str, str | None], raw_answers: Mapping[str, str] | None = None) -> Queue:
    """Every (claim, source) whose labellers disagree or failed to parse, with anonymised candidates in `order`
    (keyed_order). `raw_answers`: call id -> the model's raw response, for the calls of unparsed_call_ids (from the
    llm_calls ledger). Every text an annotator reads has its passages tagged by PassageTags."""
    rows, orders = [], {}
    for item_id, pair in sorted(labeller_pairs(label_rows).items()):
        reason = queue_reason(_label(pair, "a"), _label(pair, "b"))
        if reason is None or has_no_material(pair):
            continue
        orders[item_id] = order(item_id)
        any_row = pair.get("a") or pair["b"]
        # The labellers may have seen different evidence (whole manuscript vs retrieved chunks): show the fuller
        # one, chosen without regard to which labeller saw it.
        shown = max(pair.values(), key=lambda r: len(r.get("evidence_text") or ""))
        tags = PassageTags(any_row["paper_id"], list(shown.get("evidence_chunk_ids") or []))
        row = {
            "venue": venue, "item_id": item_id, "claim_id": any_row["claim_id"], "paper_id": any_row["paper_id"],
            "review_id": any_row["review_id"], "source": any_row["source"],
            "claim_text": tags.hide(claim_texts.get(any_row["claim_id"])),
            "claim_type": claim_types.get(any_row["claim_id"]),
            "source_material": tags.hide(shown.get("evidence_text") or ""), "reason": reason,
        }
        for candidate, labeller in zip(CANDIDATES, orders[item_id]):
            answer = pair.get(labeller, {})
            row[f"{candidate}_label"] = _label(pair, labeller)
            row[f"{candidate}_justification"] = tags.hide(answer.get("justification"))
            row[f"{candidate}_evidence"] = [tags.hide(quote) for quote in answer.get("evidence_quotes") or []]
            row[f"{candidate}_raw_answer"] = (tags.hide(_raw_answer(answer, raw_answers or {}))
                                              if row[f"{candidate}_label"] is None else None)
        row["passage_chunks"] = tags.chunks  # last: the texts above may have added mentions of their own
        rows.append(row)
    version = queue_version(rows)
    for row in rows:
        row["queue_version"] = version
    key = [{"item_id": r["item_id"], "candidate_1_labeller": orders[r["item_id"]][0],
            "candidate_2_labeller": orders[r["item_id"]][1], "queue_version": version} for r in rows]
    return Queue([{c: r[c] for c in QUEUE_COLUMNS} for r in rows], key)


def stale_reason(decision, queue_row: Mapping | None) -> str | None:  # noqa: ANN001 - an annotation.decisions.Decision
    """Why an arbitration decision cannot be applied to the queue as it is now, or None when it applies."""
    if queue_row is None:
        return "the item is no longer in the arbitration queue"
    if decision.queue_version == queue_row["queue_version"]:
        return None
    offered = {candidate: queue_row[f"{candidate}_label"] for candidate in CANDIDATES}
    if decision.choice in CANDIDATES and offered[decision.choice] != decision.label:
        return (f"it chose {decision.choice} = {decision.label!r} in queue version {decision.queue_version}; "
                f"{decision.choice} is now {offered[decision.choice]!r}")
    if decision.choice == THIRD_LABEL and decision.label in offered.values():
        return (f"its third label {decision.label!r} (queue version {decision.queue_version}) is now one of the "
                "candidates")
    return None


def open_items(queue_rows: Sequence[Mapping], current: Mapping[str, object]) -> list[Mapping]:
    """The queue rows no applicable human decision answers yet (`current`: current_decisions of the ledger)."""
    return [row for row in queue_rows
            if (decision := current.get(row["item_id"])) is None or stale_reason(decision, row) is not None]


@dataclass
class Canonical:
    rows: list[dict]
    not_applied: list[tuple[object, str]] = field(default_factory=list)  # (decision, why it was not applied)

    def counts(self) -> dict[str, int]:
        return dict(Counter(row["provenance"] for row in self.rows))


def canonical_labels(venue: str, label_rows: Iterable[Mapping], queue_rows: Sequence[Mapping],
                     key_rows: Sequence[Mapping], current: Mapping[str, object]) -> Canonical:
    """Per item of claim_labels: the agreed label, else the applicable current human decision, else pending (label
    null, never guessed). `current`: current_decisions of the arbitration ledger."""
    queue = {row["item_id"]: row for row in queue_rows}
    key = {row["item_id"]: row for row in key_rows}
    result = Canonical(rows=[])
    pairs = labeller_pairs(label_rows)
    for item_id, pair in sorted(pairs.items()):
        any_row = pair.get("a") or pair["b"]
        label_a, label_b = _label(pair, "a"), _label(pair, "b")
        row = {
            "venue": venue, "item_id": item_id, "claim_id": any_row["claim_id"], "paper_id": any_row["paper_id"],
            "review_id": any_row["review_id"], "source": any_row["source"], "label": None, "provenance": PENDING,
            "decision_id": None, "annotator": None, "label_a": label_a, "label_b": label_b,
            "call_id_a": pair.get("a", {}).get("call_id"), "call_id_b": pair.get("b", {}).get("call_id"),
            "queue_version": None,
        }
        decision = current.get(item_id)
        reason = stale_reason(decision, queue.get(item_id)) if decision is not None else None
        if queue_reason(label_a, label_b) is None:
            row.update(label=label_a, provenance=AGREED)
        elif item_id not in queue and has_no_material(pair):
            row["provenance"] = UNLABELLED
        elif decision is not None and reason is None:
            labeller = key[item_id][f"{decision.choice}_labeller"] if decision.choice in CANDIDATES else None
            row.update(label=decision.label, provenance=UPHELD[labeller] if labeller else THIRD_LABEL,
                       decision_id=decision.decision_id, annotator=decision.annotator,
                       queue_version=decision.queue_version)
        if decision is not None and reason is not None:
            result.not_applied.append((decision, reason))
        result.rows.append(row)
    result.not_applied += [(decision, "no such item in claim_labels")
                           for item_id, decision in current.items() if item_id not in pairs]
    return result


def folded_table(table: Sequence[Sequence[int]]) -> list[list[int | None]]:
    """labeller_agreement's A-by-B table (`table[i][j]`: A said LABELS[i], B said LABELS[j]) folded over its diagonal:
    `folded[i][j]` for j >= i counts the items where one labeller said LABELS[i] and the other LABELS[j], whichever
    said which; None below the diagonal. What annotators may see: the directed table would tell them which candidate
    is which labeller wherever one kind of disagreement is rare (a single item of S vs N, say)."""
    size = len(table)
    return [[None if j < i else table[i][j] + (table[j][i] if j != i else 0) for j in range(size)]
            for i in range(size)]


# -- exports -----------------------------------------------------------------------------------------------------
def export_records(queue_rows: Iterable[Mapping], opaque_ids: Mapping[str, str]) -> list[dict]:
    """The queue rows as an export shows them (`opaque_ids`: item id -> opaque id), with empty answer fields."""
    return [{**{c: row[c] for c in EXPORT_COLUMNS}, "item_id": opaque_ids[row["item_id"]],
             **dict.fromkeys(ANSWER_COLUMNS)} for row in queue_rows]


def to_jsonl(queue_rows: Iterable[Mapping], opaque_ids: Mapping[str, str]) -> str:
    return records.jsonl_text(export_records(queue_rows, opaque_ids))


def to_csv(queue_rows: Iterable[Mapping], opaque_ids: Mapping[str, str]) -> str:
    return records.csv_text([*EXPORT_COLUMNS, *ANSWER_COLUMNS], (
        {name: "\n".join(value) if isinstance(value, list) else value for name, value in record.items()}
        for record in export_records(queue_rows, opaque_ids)))


def no_label_text(raw_answer: str | None) -> str:
    """What a candidate without a usable label is shown as (the terminal and the Label Studio tasks)."""
    return "(no label: the answer did not parse)" if raw_answer else "(no label: no usable answer)"


def _candidate_text(row: Mapping, candidate: str) -> str:
    evidence = "\n".join(f"- {quote}" for quote in row[f"{candidate}_evidence"] or [])
    raw = row.get(f"{candidate}_raw_answer")
    parts = [f"Label: {row[f'{candidate}_label'] or no_label_text(raw)}", row[f"{candidate}_justification"] or "",
             f"Raw answer:\n{raw}" if raw else ""]
    return "\n\n".join(part for part in (*parts, f"Evidence quoted:\n{evidence}" if evidence else "") if part)


def to_labelstudio_tasks(queue_rows: Iterable[Mapping], opaque_ids: Mapping[str, str]) -> list[dict]:
    """Label Studio tasks (import JSON): `data` carries what the labelling config shows plus the ids to import by."""
    return [{"data": {**{c: row[c] for c in ("venue", "source", "claim_type", "claim_text", "source_material",
                                             "candidate_1_label", "candidate_2_label", "queue_version")},
                      "item_id": opaque_ids[row["item_id"]],
                      "candidate_1": _candidate_text(row, "candidate_1"),
                      "candidate_2": _candidate_text(row, "candidate_2")}}
            for row in queue_rows]


def labelstudio_config() -> str:
    """The Label Studio labelling config: the claim, its source material, the two candidates, the four labels."""
    choices = "\n".join(f"    <Choice value={quoteattr(label)}/>" for label in LABELS)
    return f"""<View>
  <Header value="Claim ($source source)"/>
  <Text name="claim" value="$claim_text"/>
  <Header value="Source material"/>
  <Text name="source_material" value="$source_material"/>
  <Header value="Candidate 1"/>
  <Text name="candidate_1" value="$candidate_1"/>
  <Header value="Candidate 2"/>
  <Text name="candidate_2" value="$candidate_2"/>
  <Header value="Your label (a candidate's, or another one)"/>
  <Choices name="{LS_LABEL_CONTROL}" toName="claim" choice="single" showInline="true" required="true">
{choices}
  </Choices>
  <TextArea name="{LS_NOTE_CONTROL}" toName="claim" placeholder="optional note" maxSubmissions="1"/>
</View>
"""


# -- imports -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImportProblem:
    where: str | None  # "line 4", "task 2 (id 17)"; None: the file as a whole
    reason: str
    line: int | None = None  # the file's line, where the problem has one

    def located(self, file: str) -> str:
        """`file:line: reason` (`file: task 2 (id 17): reason` for a problem without a line)."""
        if self.line is not None:
            return f"{file}:{self.line}: {self.reason}"
        return f"{file}: {self.where}: {self.reason}" if self.where else f"{file}: {self.reason}"


@dataclass(frozen=True)
class Answer:
    """One answer read from a file, before validation against the queue."""

    where: str
    fields: dict  # ANSWER_FIELDS, each a string or None (see _answer_fields)
    line: int | None = None  # where the answer starts in a JSONL or CSV file


@dataclass(frozen=True)
class ValidAnswer:
    queue_row: Mapping
    choice: str
    label: str
    note: str | None


# What an import reads of a record (every other exported field is there for the human, and ignored).
ID_FIELDS = ("venue", "item_id", "queue_version", "claim_id", "source")
ANSWER_FIELDS = (*ID_FIELDS, *ANSWER_COLUMNS)
# A value quoted in a problem is cut short: a huge or deeply nested one would drown the message (or, nested deeper
# than the interpreter recurses, fail to print at all).
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 60
_SHOWN.maxlevel = 3


def _shown(value: object) -> str:
    return _SHOWN.repr(value)


def _plain(text: str) -> str:
    """`text` as it is where it is short and printable (an id, a version), else as _shown quotes it: a problem is
    one line, whatever the file holds."""
    return text if len(text) <= _SHOWN.maxstring and text.isprintable() else _shown(text)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _clean(value: str | None) -> str | None:
    return None if _blank(value) else value.strip()


def _answer_fields(record: Mapping) -> tuple[dict, list[str]]:
    """The ANSWER_FIELDS of a record as an import reads them, and why any cannot be read. Each must be a string
    (UTF-8 can encode) or null (or absent). Whitespace around an id or an answer is dropped (a spreadsheet's stray
    space), but a note is kept exactly as written: its leading and trailing line breaks and separators are part of
    it, and only an empty note is no note."""
    fields, reasons = {}, []
    for name in ANSWER_FIELDS:
        value = record.get(name)
        if value is not None and not isinstance(value, str):
            reasons.append(f"{name} must be a string or null, got {type(value).__name__} {_shown(value)}")
        elif value is not None and not _encodable(value):
            reasons.append(f"{name} holds a lone surrogate (an escape such as \\ud800 that is no character)")
        elif name == "note":
            fields[name] = value or None
        else:
            fields[name] = _clean(value)
    return fields, reasons


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _read_record(record: object, where: str, line: int | None) -> tuple[list[Answer], list[ImportProblem]]:
    """One JSONL or CSV record as an answer, or the problems that make it none."""
    if not isinstance(record, dict):
        return [], [ImportProblem(where, f"not a JSON object but a {type(record).__name__}", line)]
    fields, reasons = _answer_fields(record)
    if reasons:
        return [], [ImportProblem(where, reason, line) for reason in reasons]
    return [Answer(where, fields, line)], []


def read_jsonl(data: bytes) -> tuple[list[Answer], list[ImportProblem]]:
    answers, problems = [], []
    for line in records.json_lines(data):
        where = f"line {line.number}"
        if line.problem is not None:
            problems.append(ImportProblem(where, line.problem, line.number))
            continue
        read, refused = _read_record(line.record, where, line.number)
        answers += read
        problems += refused
    return answers, problems


def read_csv(data: bytes) -> tuple[list[Answer], list[ImportProblem]]:
    answers, problems = [], []
    try:
        for number, record in records.csv_records(records.decoded(data)):
            read, refused = _read_record(record, f"line {number}", number)
            answers += read
            problems += refused
    except records.RecordError as exc:
        problems.append(ImportProblem(f"line {exc.line}", exc.reason, exc.line))
    return answers, problems


def read_labelstudio(data: bytes) -> tuple[list[Answer], list[ImportProblem]]:
    """Label Studio's "Export JSON": a list of tasks, each with `data` and `annotations[].result[]`."""
    try:
        tasks = records.json_value(records.decoded(data))
    except records.RecordError as exc:
        return [], [ImportProblem(None if exc.line is None else f"line {exc.line}", exc.reason, exc.line)]
    if not isinstance(tasks, list):
        return [], [ImportProblem(None, f"not a Label Studio export (a JSON list of tasks) but a "
                                        f"{type(tasks).__name__}")]
    answers, problems = [], []
    for number, task in enumerate(tasks, start=1):
        task_id = task.get("id") if isinstance(task, dict) else None
        where = f"task {number}" + (f" (id {_shown(task_id)})" if task_id is not None else "")
        answer, reasons = _labelstudio_answer(task, where)
        answers += [answer] if answer else []
        problems += [ImportProblem(where, reason) for reason in reasons]
    return answers, problems


def _labelstudio_answer(task: object, where: str) -> tuple[Answer | None, list[str]]:
    """One task's answer (None when it is not labelled yet), or why it has none."""
    if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
        return None, ["not a task with a `data` object"]
    annotations = task.get("annotations", [])
    if not isinstance(annotations, list) or not all(isinstance(a, dict) for a in annotations):
        return None, [f"`annotations` must be a list of objects, got {_shown(annotations)}"]
    done = [a for a in annotations if not a.get("was_cancelled")]
    if len(done) > 1:
        return None, [f"{len(done)} annotations; export one per task (resolve them in Label Studio first)"]
    if not done:
        return None, []  # not labelled yet
    values, reasons = _labelstudio_values(done[0].get("result"))
    if reasons:
        return None, reasons
    choices = values.get(LS_LABEL_CONTROL, {}).get("choices", [])
    one_choice = isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], str)
    if not one_choice:
        reasons.append(f"expected one choice in `{LS_LABEL_CONTROL}`, got {_shown(choices)}")
    texts = values.get(LS_NOTE_CONTROL, {}).get("text", [])
    note_texts = isinstance(texts, list) and all(isinstance(text, str) for text in texts)
    if not note_texts:
        reasons.append(f"the note (`{LS_NOTE_CONTROL}`'s text) must be a list of strings, got {_shown(texts)}")
    fields, field_reasons = _answer_fields({**{name: task["data"].get(name) for name in ID_FIELDS},
                                            "label": choices[0] if one_choice else None,
                                            "note": " ".join(texts) if note_texts else None})
    if reasons or field_reasons:
        return None, reasons + field_reasons
    user = done[0].get("completed_by")
    user = user.get("email", user.get("id")) if isinstance(user, dict) else user
    if user is not None and (isinstance(user, bool) or not isinstance(user, int | str)):
        return None, [f"`completed_by` must be a user id or a user with an email, got {_shown(user)}"]
    if user is not None:  # keep who labelled it in Label Studio beside the annotator named on import
        fields["note"] = f"label studio user {user}" + (f": {fields['note']}" if fields["note"] else "")
    return Answer(where, fields), []


def _labelstudio_values(results: object) -> tuple[dict[str, dict], list[str]]:
    """The `value` object of each of our controls' results in an annotation, and why any cannot be read."""
    if not isinstance(results, list):
        return {}, [f"the annotation's `result` must be a list, got {_shown(results)}"]
    values, reasons = {}, []
    for result in results:
        name = result.get("from_name") if isinstance(result, dict) else None
        if name not in (LS_LABEL_CONTROL, LS_NOTE_CONTROL):
            continue  # another control's result (or no result of ours): nothing this import reads
        if name in values:
            reasons.append(f"two results for `{name}`")
        elif not isinstance(result.get("value"), dict):
            reasons.append(f"the `{name}` result's value must be an object, got {_shown(result.get('value'))}")
        else:
            values[name] = result["value"]
    return values, reasons


READERS = {"jsonl": read_jsonl, "csv": read_csv, "labelstudio": read_labelstudio}


def import_format(file_name: str) -> str | None:
    """The import format a file name implies (.jsonl, .csv, .json = a Label Studio export)."""
    suffix = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    return {"jsonl": "jsonl", "csv": "csv", "json": "labelstudio"}.get(suffix)


def _vocabulary_label(value: str) -> str | None:
    return next((label for label in LABELS if label.lower() == value.lower()), None)


def validate_answers(answers: Sequence[Answer], venue: str, queue_rows: Sequence[Mapping],
                     known_claim_ids: set[str], opaque_ids: Mapping[str, str]) -> tuple[list[ValidAnswer],
                                                                                       list[ImportProblem]]:
    """Check every answer against the queue; the answers are usable only when the problem list is empty. An answer
    with neither a choice nor a label is an item left undecided and is skipped. `opaque_ids`: the queue's item id ->
    opaque id (what an export's `item_id` holds); an `item_id` of the claim_id:source form (exports written before
    opaque ids) is taken as it is."""
    queue = {row["item_id"]: row for row in queue_rows}
    current_version = queue_rows[0]["queue_version"] if queue_rows else None
    by_opaque = {opaque: item_id for item_id, opaque in opaque_ids.items()}
    decided = [a for a in answers if not (_blank(a.fields.get("choice")) and _blank(a.fields.get("label")))]
    # the queue's own item id of each answer; None for an opaque id of no item of the current queue
    resolved = [by_opaque.get(a.fields.get("item_id")) if is_opaque_id(a.fields.get("item_id"))
                else a.fields.get("item_id") for a in decided]
    seen = Counter(item_id for item_id in resolved if item_id)
    valid, problems = [], []
    for answer, item_id in zip(decided, resolved):
        reasons = _answer_problems(answer.fields, item_id, venue, queue, current_version, known_claim_ids)
        if item_id and seen[item_id] > 1:
            others = [other.where for other, other_id in zip(decided, resolved)
                      if other_id == item_id and other is not answer]
            reasons.append(f"duplicate answer for {_plain(answer.fields['item_id'])} (also {', '.join(others)})")
        if reasons:
            problems += [ImportProblem(answer.where, reason, answer.line) for reason in reasons]
            continue
        row = queue[item_id]
        choice, label = _resolve_choice(answer.fields, row)
        valid.append(ValidAnswer(row, choice, label, answer.fields.get("note")))
    return valid, problems


def answer_recorded(answer: ValidAnswer, decision) -> bool:  # noqa: ANN001 - an annotation.decisions.Decision
    """Whether `decision` (the annotator's current decision on the item, or None) records this answer already: the
    same queue version, choice, label and note. Importing the same file twice records each answer once."""
    return decision is not None and (decision.queue_version, decision.choice, decision.label, decision.note) == (
        answer.queue_row["queue_version"], answer.choice, answer.label, answer.note)


def _answer_problems(fields: Mapping, item_id: str | None, venue: str, queue: Mapping[str, Mapping],
                     current_version: str | None, known_claim_ids: set[str]) -> list[str]:
    """Why an answer cannot be recorded (`item_id`: the queue's own id of the answer's item, see validate_answers)."""
    missing = [name for name in ("venue", "item_id", "queue_version") if _blank(fields.get(name))]
    if missing:
        return [f"missing field(s) {', '.join(missing)}"]
    reasons = []
    if fields["venue"] != venue:
        reasons.append(f"venue {_shown(fields['venue'])} is not {venue!r}")
    stale = fields["queue_version"] != current_version
    if stale:
        reasons.append(f"answers queue version {_plain(fields['queue_version'])}, the current one is "
                       f"{current_version}; export the queue again")
    if item_id is None:  # an opaque id, which names an item only within the queue version it was exported from
        return reasons if stale else [*reasons, f"item {_shown(fields['item_id'])} is no item of queue version "
                                                f"{current_version} (an id this queue never exported)"]
    claim_id, _, source = item_id.rpartition(":")
    row = queue.get(item_id)
    if row is None:
        known = "known claim, but this item is not in the arbitration queue (its labellers agree)" \
            if claim_id in known_claim_ids else "unknown claim id"
        reasons.append(f"item {_shown(item_id)}: {known}")
    for name, expected in (("claim_id", claim_id), ("source", source)):
        if not _blank(fields.get(name)) and fields[name] != expected:
            reasons.append(f"{name} {_shown(fields[name])} does not match item_id {_shown(fields['item_id'])}")
    label, choice = fields.get("label"), fields.get("choice")
    if label is not None and _vocabulary_label(label) is None:
        reasons.append(f"label {_shown(label)} is not one of {', '.join(LABELS)}")
    if choice is not None and choice not in (*CANDIDATES, THIRD_LABEL):
        reasons.append(f"choice {_shown(choice)} is not one of {', '.join((*CANDIDATES, THIRD_LABEL))}")
    if reasons or row is None:
        return reasons
    offered = row.get(f"{choice}_label") if choice in CANDIDATES else None
    label = _vocabulary_label(label) if label is not None else None
    if choice in CANDIDATES and offered is None:
        reasons.append(f"{choice} has no usable label (its labeller's answer did not parse); give a label instead")
    elif choice in CANDIDATES and label is not None and label != offered:
        reasons.append(f"choice {choice} is {offered!r} but the label given is {label!r}")
    elif choice == THIRD_LABEL and label is None:
        reasons.append("choice third_label needs a label")
    elif choice == THIRD_LABEL and label in (row["candidate_1_label"], row["candidate_2_label"]):
        reasons.append(f"third_label {label!r} is one of the candidates; choose that candidate")
    return reasons


def _resolve_choice(fields: Mapping, row: Mapping) -> tuple[str, str]:
    """(choice, label) of a valid answer: a label alone picks the candidate that carries it, else a third label."""
    choice, label = fields.get("choice"), fields.get("label")
    if choice in CANDIDATES:
        return choice, row[f"{choice}_label"]
    label = _vocabulary_label(label)
    for candidate in CANDIDATES:
        if row[f"{candidate}_label"] == label:
            return candidate, label
    return THIRD_LABEL, label
