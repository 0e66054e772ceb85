"""The human arbitration of the two LLM labellers: the anonymised queue, the canonical labels and the file formats
humans answer it in (JSONL, CSV, Label Studio). Pure logic: no Dagster, no file system.

Anonymisation: a queue row shows the two labellers' answers as `candidate_1` / `candidate_2` in an order drawn per
record from the venue's seed; which labeller is which lives only in `arbitration_key`. Nothing here that builds an
export or a queue row reads the key. A candidate without a usable label carries its labeller's raw answer
(`candidate_N_raw_answer`), so the human sees what the model actually said.

Opaque ids: what an annotator sees of an item is never its claim id (`claim_labels` and `canonical_labels.label_a/b`
are keyed by it, so one join would tell which candidate is which labeller) but `q-` + 12 hex of an HMAC-SHA256, keyed
by a secret the lake keeps beside the decisions, of (venue, queue or audit-sample version, item id). Without the
secret an id cannot be computed from a claim id, so it cannot be joined to anything; and it changes with the queue
version, so ids from two exports cannot be matched up either. Exports carry it in their `item_id` field; an import
maps it back through the queue it was exported from, and still takes the claim_id:source form older exports wrote.

Decisions answering an older queue version (the queue is rebuilt whenever any item changes, so every decision
soon answers an older version) are applied while what was chosen is still on offer in the same form: a candidate
choice when that candidate still carries the label chosen, a third label when neither candidate now carries it.
Otherwise the decision is stale: kept in the ledger, reported, and the item is pending again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
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
    "candidate_1_label", "candidate_1_justification", "candidate_1_evidence", "candidate_1_raw_answer",
    "candidate_2_label", "candidate_2_justification", "candidate_2_evidence", "candidate_2_raw_answer", "reason",
    "queue_version",
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


def candidate_order(venue: str, item_id: str, seed: int) -> tuple[str, str]:
    """Which labeller is candidate_1 and which candidate_2: a coin flip per record, the same on every rebuild."""
    digest = hashlib.sha256(f"{venue}:{item_id}:{seed}".encode()).digest()
    return ("a", "b") if digest[-1] % 2 == 0 else ("b", "a")


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


def build_queue(venue: str, seed: int, label_rows: Iterable[Mapping], claim_texts: Mapping[str, str],
                claim_types: Mapping[str, str | None], raw_answers: Mapping[str, str] | None = None) -> Queue:
    """Every (claim, source) whose labellers disagree or failed to parse, with anonymised candidates. `raw_answers`:
    call id -> the model's raw response, for the calls of unparsed_call_ids (from the llm_calls ledger)."""
    rows, orders = [], {}
    for item_id, pair in sorted(labeller_pairs(label_rows).items()):
        reason = queue_reason(_label(pair, "a"), _label(pair, "b"))
        if reason is None or has_no_material(pair):
            continue
        order = orders[item_id] = candidate_order(venue, item_id, seed)
        any_row = pair.get("a") or pair["b"]
        row = {
            "venue": venue, "item_id": item_id, "claim_id": any_row["claim_id"], "paper_id": any_row["paper_id"],
            "review_id": any_row["review_id"], "source": any_row["source"],
            "claim_text": claim_texts.get(any_row["claim_id"]), "claim_type": claim_types.get(any_row["claim_id"]),
            # The labellers may have seen different evidence (whole manuscript vs retrieved chunks): show the
            # fuller one, chosen without regard to which labeller saw it.
            "source_material": max((r.get("evidence_text") or "" for r in pair.values()), key=len),
            "reason": reason,
        }
        for candidate, labeller in zip(CANDIDATES, order):
            answer = pair.get(labeller, {})
            row[f"{candidate}_label"] = _label(pair, labeller)
            row[f"{candidate}_justification"] = answer.get("justification")
            row[f"{candidate}_evidence"] = list(answer.get("evidence_quotes") or [])
            row[f"{candidate}_raw_answer"] = (_raw_answer(answer, raw_answers or {})
                                              if row[f"{candidate}_label"] is None else None)
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
    fields: dict  # venue, item_id, queue_version, choice, label, note (+ claim_id, source when the file has them)
    line: int | None = None  # where the answer starts in a JSONL or CSV file


@dataclass(frozen=True)
class ValidAnswer:
    queue_row: Mapping
    choice: str
    label: str
    note: str | None


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _clean(value: object) -> object:
    return None if _blank(value) else value.strip() if isinstance(value, str) else value


def read_jsonl(data: bytes) -> tuple[list[Answer], list[ImportProblem]]:
    answers, problems = [], []
    for line in records.json_lines(data):
        where = f"line {line.number}"
        if line.problem is not None or not isinstance(line.record, dict):
            problems.append(ImportProblem(where, line.problem or "not a JSON object", line.number))
            continue
        answers.append(Answer(where, {k: _clean(v) for k, v in line.record.items()}, line.number))
    return answers, problems


def read_csv(data: bytes) -> tuple[list[Answer], list[ImportProblem]]:
    answers = []
    try:
        for number, record in records.csv_records(records.decoded(data)):
            answers.append(Answer(f"line {number}", {k: _clean(v) for k, v in record.items()}, number))
    except records.RecordError as exc:
        return answers, [ImportProblem(f"line {exc.line}", exc.reason, exc.line)]
    return answers, []


def read_labelstudio(data: bytes) -> tuple[list[Answer], list[ImportProblem]]:
    """Label Studio's "Export JSON": a list of tasks, each with `data` and `annotations[].result[]`."""
    try:
        tasks = json.loads(records.decoded(data))
    except records.RecordError as exc:
        return [], [ImportProblem(f"line {exc.line}", exc.reason, exc.line)]
    except json.JSONDecodeError as exc:
        return [], [ImportProblem(f"line {exc.lineno}", f"not valid JSON ({exc.msg})", exc.lineno)]
    if not isinstance(tasks, list):
        return [], [ImportProblem(None, "not a Label Studio export (a JSON list of tasks)")]
    answers, problems = [], []
    for number, task in enumerate(tasks, start=1):
        where = f"task {number}" + (f" (id {task['id']})" if isinstance(task, dict) and "id" in task else "")
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            problems.append(ImportProblem(where, "not a task with a `data` object"))
            continue
        done = [a for a in task.get("annotations") or [] if isinstance(a, dict) and not a.get("was_cancelled")]
        if len(done) > 1:
            problems.append(ImportProblem(where, f"{len(done)} annotations; export one per task (resolve them in "
                                                 "Label Studio first)"))
            continue
        if not done:
            continue  # not labelled yet
        results = {r.get("from_name"): r.get("value") or {} for r in done[0].get("result") or [] if isinstance(r, dict)}
        choices = results.get(LS_LABEL_CONTROL, {}).get("choices") or []
        if len(choices) != 1:
            problems.append(ImportProblem(where, f"expected one choice in `{LS_LABEL_CONTROL}`, got {choices!r}"))
            continue
        note_text = results.get(LS_NOTE_CONTROL, {}).get("text") or []
        user = done[0].get("completed_by")
        note = " ".join(t for t in note_text if isinstance(t, str)).strip() or None
        if user is not None:  # keep who labelled it in Label Studio beside the annotator named on import
            note = f"label studio user {user.get('email', user) if isinstance(user, dict) else user}" + (
                f": {note}" if note else "")
        data = {k: _clean(task["data"].get(k)) for k in ("venue", "item_id", "queue_version", "claim_id", "source")}
        answers.append(Answer(where, {**data, "label": _clean(choices[0]), "choice": None, "note": note}))
    return answers, problems


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
            reasons.append(f"duplicate answer for {answer.fields['item_id']} (also {', '.join(others)})")
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
        reasons.append(f"venue {fields['venue']!r} is not {venue!r}")
    stale = fields["queue_version"] != current_version
    if stale:
        reasons.append(f"answers queue version {fields['queue_version']}, the current one is {current_version}; "
                       "export the queue again")
    if item_id is None:  # an opaque id, which names an item only within the queue version it was exported from
        return reasons if stale else [*reasons, f"item {fields['item_id']!r} is no item of queue version "
                                                f"{current_version} (an id this queue never exported)"]
    claim_id, _, source = item_id.rpartition(":")
    row = queue.get(item_id)
    if row is None:
        known = "known claim, but this item is not in the arbitration queue (its labellers agree)" \
            if claim_id in known_claim_ids else "unknown claim id"
        reasons.append(f"item {item_id!r}: {known}")
    for name, expected in (("claim_id", claim_id), ("source", source)):
        if not _blank(fields.get(name)) and fields[name] != expected:
            reasons.append(f"{name} {fields[name]!r} does not match item_id {fields['item_id']!r}")
    label, choice = fields.get("label"), fields.get("choice")
    if label is not None and _vocabulary_label(str(label)) is None:
        reasons.append(f"label {label!r} is not one of {', '.join(LABELS)}")
    if choice is not None and choice not in (*CANDIDATES, THIRD_LABEL):
        reasons.append(f"choice {choice!r} is not one of {', '.join((*CANDIDATES, THIRD_LABEL))}")
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
