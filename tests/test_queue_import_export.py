"""`peerify queue export` and `peerify decisions import`: each format's round trip to canonical provenance (exports
name items by opaque id only; files of the older claim_id:source form still import), and every way an import is
rejected whole (nothing written to the ledger)."""

from __future__ import annotations

import csv
import io
import json
import threading
import xml.etree.ElementTree as ET

import dagster as dg
import pytest

from peerify_dagster import cli
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
from peerify_dagster.annotation.sessions import LeaseStore, queue_opaque_ids
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.resources.lake import Lake
from tests.arbitration_support import CANONICAL, build, canonical, standard_labels, write_inputs

VENUE = "X.cc/2026"


@pytest.fixture
def venue(tmp_path, monkeypatch):
    """A built queue (c1:thread disagree, c3:thread parse_failed, c5:manuscript disagree) and the lake's env."""
    registry = tmp_path / "venues.yaml"
    registry.write_text(f"venues:\n  {VENUE}:\n    seed: 11\n")
    lake_root = tmp_path / "lake"
    write_inputs(lake_root, VENUE, standard_labels(VENUE))
    instance = dg.DagsterInstance.ephemeral()
    build(VENUE, registry, lake_root, instance)
    monkeypatch.setenv("PEERIFY_LAKE", str(lake_root))
    monkeypatch.setenv("PEERIFY_VENUES", str(registry))
    lake = Lake(lake_root)
    key = {row["item_id"]: row for row in lake.read_table("arbitration_key", VENUE).to_dicts()}
    return {"lake_root": lake_root, "registry": registry, "instance": instance, "key": key,
            "ledger": DecisionLedger(lake_root, VENUE)}


def by_item(venue, records: list[dict]) -> dict[str, dict]:
    """Exported records by the queue's own item id (claim_id:source), which the export does not show: the ids of the
    queue as it is now (they change with its version)."""
    queue = Lake(venue["lake_root"]).read_table("arbitration_queue", VENUE).to_dicts()
    item_of = {opaque: item_id for item_id, opaque in queue_opaque_ids(venue["lake_root"], VENUE, queue).items()}
    return {item_of[record["item_id"]]: record for record in records}


def rebuild_canonical(venue) -> dict[str, dict]:
    build(VENUE, venue["registry"], venue["lake_root"], venue["instance"], CANONICAL)
    return canonical(venue["lake_root"], VENUE)


def export(tmp_path, fmt: str, *extra: str) -> list[dict]:
    out = tmp_path / f"queue.{fmt}"
    assert cli.main(["queue", "export", "--venue", VENUE, "--format", fmt, "--out", str(out), *extra]) == 0
    text = out.read_text()
    if fmt == "jsonl":
        return [json.loads(line) for line in text.splitlines()]
    return list(csv.DictReader(io.StringIO(text)))


def import_file(path, annotator: str = "carol") -> int:
    return cli.main(["decisions", "import", "--venue", VENUE, str(path), "--annotator", annotator])


def write_jsonl(path, records: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_export_holds_open_items_unless_all(tmp_path, venue, capsys):
    records = by_item(venue, export(tmp_path, "jsonl"))
    assert sorted(records) == ["c1:thread", "c3:thread", "c5:manuscript"]
    c1 = records["c1:thread"]
    venue["ledger"].append([new_decision(venue=VENUE, claim_id="c1", source="thread", kind="arbitration",
                                         action="decide", choice="candidate_1", label=c1["candidate_1_label"],
                                         annotator="alice", queue_version=c1["queue_version"])])
    assert sorted(by_item(venue, export(tmp_path, "jsonl"))) == ["c3:thread", "c5:manuscript"]
    assert len(export(tmp_path, "csv", "--all")) == 3
    assert "exported 3 of 3 queue items (all items)" in capsys.readouterr().out


def test_jsonl_round_trip(tmp_path, venue, capsys):
    records = by_item(venue, export(tmp_path, "jsonl"))
    records["c1:thread"].update(choice="candidate_1", note="the authors conceded")
    records["c3:thread"].update(label="Not Determined")  # neither candidate's: a third label
    path = write_jsonl(tmp_path / "answers.jsonl", list(records.values()))  # c5 left undecided
    assert import_file(path) == 0
    assert "imported 2 decision(s)" in capsys.readouterr().out
    labels = rebuild_canonical(venue)
    upheld = f"{venue['key']['c1:thread']['candidate_1_labeller']}_upheld"
    assert (labels["c1:thread"]["label"], labels["c1:thread"]["provenance"], labels["c1:thread"]["annotator"]) == (
        records["c1:thread"]["candidate_1_label"], upheld, "carol")
    assert (labels["c3:thread"]["label"], labels["c3:thread"]["provenance"]) == ("Not Determined", "third_label")
    assert labels["c5:manuscript"]["provenance"] == "pending"
    decisions = venue["ledger"].read().decisions
    assert [d.note for d in decisions] == ["the authors conceded", None]


def test_an_import_waits_for_the_decision_lock_and_supersedes_a_decision_made_meanwhile(tmp_path, venue, capsys):
    """A browser decision is checked and appended under the venue's lease lock; an import checked meanwhile waits for
    that lock and then sees the decision, so its own supersedes it rather than standing beside it."""
    c1 = by_item(venue, export(tmp_path, "jsonl"))["c1:thread"]
    path = write_jsonl(tmp_path / "answers.jsonl", [{**c1, "label": "Not Determined"}])
    outcome = {}
    with LeaseStore(venue["lake_root"], VENUE).locked():  # the browser deciding c1 holds the lock
        importer = threading.Thread(target=lambda: outcome.update(code=import_file(path)))
        importer.start()
        importer.join(1.5)
        assert importer.is_alive() and venue["ledger"].read().decisions == []  # the import waits, writes nothing
        in_browser = new_decision(venue=VENUE, claim_id="c1", source="thread", kind="arbitration", action="decide",
                                  choice="candidate_2", label=c1["candidate_2_label"], annotator="alice",
                                  queue_version=c1["queue_version"])
        venue["ledger"].append([in_browser])
    importer.join(30)
    assert outcome == {"code": 0} and "imported 1 decision(s)" in capsys.readouterr().out
    browser_decision, imported = venue["ledger"].read().decisions
    assert (browser_decision.annotator, imported.annotator) == ("alice", "carol")
    assert imported.supersedes == in_browser.decision_id  # one chain of decisions on c1, nothing recorded twice


def test_csv_round_trip_with_labels_only(tmp_path, venue):
    rows = export(tmp_path, "csv")
    c5 = by_item(venue, rows)["c5:manuscript"]
    c5["label"] = c5["candidate_2_label"].lower()  # a spreadsheet user typing the label in lower case
    path = tmp_path / "answers.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert import_file(path) == 0
    [decision] = venue["ledger"].read().decisions
    assert (decision.choice, decision.label) == ("candidate_2", c5["candidate_2_label"])
    labels = rebuild_canonical(venue)
    upheld = f"{venue['key']['c5:manuscript']['candidate_2_labeller']}_upheld"
    assert (labels["c5:manuscript"]["label"], labels["c5:manuscript"]["provenance"]) == (
        c5["candidate_2_label"], upheld)


def labelstudio_export(tasks: list[dict], answers: dict[str, list[str]]) -> list[dict]:
    """What Label Studio's "Export JSON" writes after labelling the imported tasks (one annotation per answer)."""
    exported = []
    for number, task in enumerate(tasks, start=1):
        annotations = [{"id": 100 + number, "completed_by": 7, "was_cancelled": False, "result": [
            {"from_name": "label", "to_name": "claim", "type": "choices", "value": {"choices": [label]}},
            {"from_name": "note", "to_name": "claim", "type": "textarea", "value": {"text": ["looked twice"]}},
        ]} for label in answers.get(task["data"]["item_id"], [])]
        exported.append({"id": number, "data": task["data"], "annotations": annotations, "predictions": []})
    return exported


def test_labelstudio_round_trip(tmp_path, venue):
    folder = tmp_path / "ls"
    assert cli.main(["queue", "export", "--venue", VENUE, "--format", "labelstudio", "--out", str(folder)]) == 0
    tasks = json.loads((folder / "tasks.json").read_text())
    config = ET.fromstring((folder / "labelling_config.xml").read_text())
    assert [c.get("value") for c in config.iter("Choice")] == list(LABELS)
    shown = {t.get("value") for t in config.iter("Text")}
    assert shown == {"$claim_text", "$source_material", "$candidate_1", "$candidate_2"}
    assert all(set(("claim_text", "source_material", "candidate_1", "candidate_2")) <= set(t["data"]) for t in tasks)
    c1 = by_item(venue, [t["data"] for t in tasks])["c1:thread"]
    assert c1["candidate_2"].startswith(f"Label: {c1['candidate_2_label']}")
    path = tmp_path / "project-1-at-2026.json"
    path.write_text(json.dumps(labelstudio_export(tasks, {c1["item_id"]: [c1["candidate_2_label"]]})))
    assert import_file(path) == 0
    [decision] = venue["ledger"].read().decisions
    assert (decision.choice, decision.note) == ("candidate_2", "label studio user 7: looked twice")
    labels = rebuild_canonical(venue)
    upheld = f"{venue['key']['c1:thread']['candidate_2_labeller']}_upheld"
    assert labels["c1:thread"]["provenance"] == upheld


JSONL_REJECTIONS = {
    "unknown claim": ({"item_id": "c99:thread", "claim_id": "c99", "choice": "candidate_1"},
                      "item 'c99:thread': unknown claim id"),
    "item not queued": ({"item_id": "c2:thread", "claim_id": "c2", "label": "Supported"},
                        "item 'c2:thread': known claim, but this item is not in the arbitration queue"),
    "label outside vocabulary": ({"label": "Mostly Supported"}, "label 'Mostly Supported' is not one of"),
    "wrong venue": ({"venue": "Y.cc/2026", "choice": "candidate_1"}, "venue 'Y.cc/2026' is not 'X.cc/2026'"),
    "stale queue version": ({"queue_version": "0123456789abcdef", "choice": "candidate_1"},
                            "answers queue version 0123456789abcdef, the current one is"),
    "missing field": ({"queue_version": None, "choice": "candidate_1"}, "missing field(s) queue_version"),
    "unknown choice": ({"choice": "candidate_3"}, "choice 'candidate_3' is not one of"),
    "choice and label disagree": ({"choice": "candidate_1", "label": "Not Determined"},
                                  "but the label given is 'Not Determined'"),
    "claim id mismatch": ({"claim_id": "c5", "choice": "candidate_1"}, "claim_id 'c5' does not match item_id"),
    "opaque id of no item": ({"item_id": "q-0123456789ab", "choice": "candidate_1"},
                             "item 'q-0123456789ab' is no item of queue version"),
    "third label that is a candidate": ({"choice": "third_label", "label": "Not Supported"},
                                        "third_label 'Not Supported' is one of the candidates"),
    # fields of another type than a string, as a script writing the file may give them
    "integer item_id": ({"item_id": 17, "choice": "candidate_1"}, "item_id must be a string or null, got int 17"),
    "non-string note": ({"note": ["looked", "twice"], "choice": "candidate_1"},
                        "note must be a string or null, got list ['looked', 'twice']"),
    "numeric label": ({"label": 2}, "label must be a string or null, got int 2"),
    "object venue": ({"venue": {"id": VENUE}, "choice": "candidate_1"}, "venue must be a string or null, got dict"),
    "boolean choice": ({"choice": True}, "choice must be a string or null, got bool True"),
    "huge number as queue version": ({"queue_version": 10 ** 300, "choice": "candidate_1"},
                                     "queue_version must be a string or null, got int 1000000000"),
    "lone surrogate in the note": ({"note": "\ud800", "choice": "candidate_1"}, "note holds a lone surrogate"),
}


@pytest.mark.parametrize("case", list(JSONL_REJECTIONS))
def test_jsonl_rejections_name_the_line_and_write_nothing(tmp_path, venue, capsys, case):
    change, reason = JSONL_REJECTIONS[case]
    records = by_item(venue, export(tmp_path, "jsonl"))
    good = {**records["c5:manuscript"], "label": "Not Determined"}
    bad = {**records["c1:thread"], **change}
    capsys.readouterr()
    path = write_jsonl(tmp_path / "answers.jsonl", [good, bad])
    assert import_file(path) == 2
    err = capsys.readouterr().err
    assert "nothing was imported" in err, err
    assert [line for line in err.splitlines() if line.strip().startswith(f"{path}:2: ") and reason in line], err
    assert not venue["ledger"].path.exists()


def test_every_problem_of_a_file_is_reported_at_once(tmp_path, venue, capsys):
    records = by_item(venue, export(tmp_path, "jsonl"))
    c3 = records["c3:thread"]
    unusable = "candidate_1" if c3["candidate_1_label"] is None else "candidate_2"  # its labeller did not parse
    path = tmp_path / "answers.jsonl"
    lines = [json.dumps({**records["c1:thread"], "choice": "candidate_1"}), "{not json",
             json.dumps({**records["c1:thread"], "choice": "candidate_2"}), json.dumps({**c3, "choice": unusable})]
    path.write_text("\n".join(lines) + "\n")
    assert import_file(path) == 2
    err = capsys.readouterr().err
    assert "rejected" in err and "4 problem(s)" in err
    assert f"{path}:2: not valid JSON" in err
    c1 = records["c1:thread"]["item_id"]
    assert f"{path}:1: duplicate answer for {c1} (also line 3)" in err
    assert f"{path}:3: duplicate answer for {c1} (also line 1)" in err
    assert f"{path}:4: {unusable} has no usable label" in err
    assert not venue["ledger"].path.exists()


def test_csv_and_labelstudio_rejections(tmp_path, venue, capsys):
    rows = export(tmp_path, "csv")
    rows[0]["label"] = "Contradicted"  # a synonym is not the vocabulary
    path = tmp_path / "answers.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[c for c in rows[0] if c != "venue"])
        writer.writeheader()
        writer.writerows({k: v for k, v in row.items() if k != "venue"} for row in rows)
    capsys.readouterr()
    assert import_file(path) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: missing field(s) venue" in err

    tasks = [{"data": {"item_id": "c1:thread", "venue": VENUE, "queue_version": rows[0]["queue_version"]}}]
    twice = labelstudio_export(tasks, {"c1:thread": ["Supported", "Not Supported"]})
    wrong = labelstudio_export([{"data": {**tasks[0]["data"], "item_id": "c1:manuscript"}}],
                               {"c1:manuscript": ["Refuted"]})
    wrong[0]["id"] = 2
    ls_path = tmp_path / "export.json"
    ls_path.write_text(json.dumps(twice + wrong))
    assert import_file(ls_path) == 2
    err = capsys.readouterr().err
    assert f"{ls_path}: task 1 (id 1): 2 annotations; export one per task" in err
    assert "task 2 (id 2): item 'c1:manuscript': known claim, but this item is not in the arbitration queue" in err
    assert "task 2 (id 2): label 'Refuted' is not one of" in err
    assert not venue["ledger"].path.exists()


@pytest.mark.parametrize(("line", "reason"), [
    ("[1, 2]", "not a JSON object but a list"),
    ('"a string"', "not a JSON object but a str"),
    ("[" * 100_000, "not valid JSON (arrays or objects nested too deeply)"),
    ('{"item_id": ' + "7" * 5000 + "}", "not valid JSON (a number with more digits than can be read)"),
    ('{"note": "cut', "not valid JSON (Unterminated string"),
])
def test_a_line_that_is_no_answer_is_named_and_nothing_is_written(tmp_path, venue, capsys, line, reason):
    good = {**by_item(venue, export(tmp_path, "jsonl"))["c5:manuscript"], "label": "Not Determined"}
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    capsys.readouterr()
    assert import_file(path) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: {reason}" in err and "Traceback" not in err, err[-2000:]
    assert not venue["ledger"].path.exists()


def _labelled_tasks(tmp_path, venue) -> list[dict]:
    """The exported tasks as Label Studio exports them, c1:thread labelled with its candidate 2's label."""
    folder = tmp_path / "ls"
    assert cli.main(["queue", "export", "--venue", VENUE, "--format", "labelstudio", "--out", str(folder)]) == 0
    tasks = json.loads((folder / "tasks.json").read_text())
    c1 = by_item(venue, [t["data"] for t in tasks])["c1:thread"]
    return labelstudio_export(tasks, {c1["item_id"]: [c1["candidate_2_label"]]})


def _first_annotation(tasks: list[dict]) -> tuple[dict, dict]:
    task = next(t for t in tasks if t["annotations"])
    return task, task["annotations"][0]


LABELSTUDIO_SHAPES = {  # a change to the one labelled task's parts, and the reason given for it
    "a value that is a string": (lambda task, ann: ann["result"][0].update(value="Supported"),
                                 "the `label` result's value must be an object, got 'Supported'"),
    "annotations an object": (lambda task, ann: task.update(annotations={"result": []}),
                              "`annotations` must be a list of objects, got {'result': []}"),
    "annotations a number": (lambda task, ann: task.update(annotations=3),
                             "`annotations` must be a list of objects, got 3"),
    "result missing": (lambda task, ann: ann.pop("result"), "the annotation's `result` must be a list, got None"),
    "a note that is a string": (lambda task, ann: ann["result"][1]["value"].update(text="looked twice"),
                                "the note (`note`'s text) must be a list of strings, got 'looked twice'"),
    "a note holding a number": (lambda task, ann: ann["result"][1]["value"].update(text=["looked", 2]),
                                "the note (`note`'s text) must be a list of strings, got ['looked', 2]"),
    "choices a string": (lambda task, ann: ann["result"][0]["value"].update(choices="Supported"),
                         "expected one choice in `label`, got 'Supported'"),
    "a numeric choice": (lambda task, ann: ann["result"][0]["value"].update(choices=[1]),
                         "expected one choice in `label`, got [1]"),
    "two label results": (lambda task, ann: ann["result"].append(ann["result"][0]), "two results for `label`"),
    "an integer item id": (lambda task, ann: task["data"].update(item_id=17),
                           "item_id must be a string or null, got int 17"),
}


@pytest.mark.parametrize("case", list(LABELSTUDIO_SHAPES))
def test_labelstudio_shapes_are_named_by_task_and_nothing_is_written(tmp_path, venue, capsys, case):
    change, reason = LABELSTUDIO_SHAPES[case]
    tasks = _labelled_tasks(tmp_path, venue)
    task, annotation = _first_annotation(tasks)
    change(task, annotation)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks))
    capsys.readouterr()
    assert import_file(path) == 2
    err = capsys.readouterr().err
    number = tasks.index(task) + 1
    assert f"{path}: task {number} (id {task['id']}): {reason}" in err and "Traceback" not in err, err[-2000:]
    assert not venue["ledger"].path.exists()


@pytest.mark.parametrize(("text", "reason"), [
    ("{}", "not a Label Studio export (a JSON list of tasks) but a dict"),
    ("[" * 100_000, "not valid JSON (arrays or objects nested too deeply)"),
    ('[{"id": 1,\n "data": ', "2: not valid JSON (Expecting value, column 10)"),
])
def test_a_labelstudio_file_that_is_no_export_is_named(tmp_path, venue, capsys, text, reason):
    path = tmp_path / "export.json"
    path.write_text(text)
    assert import_file(path) == 2
    err = capsys.readouterr().err
    assert f"{path}{':' if reason[0].isdigit() else ': '}{reason}" in err and "Traceback" not in err, err[-2000:]
    assert not venue["ledger"].path.exists()


def _csv_answers(tmp_path, venue) -> tuple[list[dict], list[str]]:
    """The CSV export's rows with c1:thread answered (a note with a comma), and its header."""
    rows = export(tmp_path, "csv")
    by_item(venue, rows)["c1:thread"].update(choice="candidate_1", note="the authors conceded, then retracted")
    return rows, list(rows[0])


def _csv_bytes(header: list[str], rows: list[dict]) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def test_a_csv_cut_inside_a_note_is_refused_naming_its_line(tmp_path, venue, capsys):
    rows, header = _csv_answers(tmp_path, venue)
    whole = _csv_bytes(header, rows)
    answered = rows.index(by_item(venue, rows)["c1:thread"])
    rows = rows[:answered + 1]  # the answered row last: the file is cut inside its note
    data = _csv_bytes(header, rows)
    cut = data[:data.index(b", then retracted")]
    path = tmp_path / "answers.csv"
    path.write_bytes(cut)
    capsys.readouterr()
    assert import_file(path) == 2
    err = capsys.readouterr().err
    line = _csv_bytes(header, rows[:answered]).count(b"\n") + 1  # where the answered row starts
    assert f"{path}:{line}: the file ends inside a quoted field of the row starting here" in err, err
    assert not venue["ledger"].path.exists()
    path.write_bytes(whole)  # the whole file imports the whole note
    assert import_file(path) == 0, capsys.readouterr().err
    assert [d.note for d in venue["ledger"].read().decisions] == ["the authors conceded, then retracted"]


def test_csv_rows_that_are_not_the_headers_fields_are_refused(tmp_path, venue, capsys):
    rows, header = _csv_answers(tmp_path, venue)
    fields = [list(row.values()) for row in rows]
    path = tmp_path / "answers.csv"

    def write(header_: list[str], rows_: list[list[str]]) -> None:
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerows([header_, *rows_])

    for header_, rows_, where, reason in (
            (header, [fields[0][:-3], *fields[1:]], 2, "16 field(s) where the header has 19: the row is cut short"),
            (header, [[*fields[0], "and then some"], *fields[1:]], 2,
             "20 fields where the header has 19 (a delimiter outside quotes?); beyond the header: 'and then some'"),
            ([*header, "note"], [[*row, ""] for row in fields], 1,
             "column(s) 'note' appear more than once in the header"),
            ([], fields, 1, "the first line is empty; it must be the header")):
        write(header_, rows_)
        capsys.readouterr()
        assert import_file(path) == 2
        assert f"{path}:{where}: {reason}" in capsys.readouterr().err
        assert not venue["ledger"].path.exists()
    write([*header, "", ""], [[*row, "", ""] for row in fields])
    assert import_file(path) == 0, capsys.readouterr().err  # a spreadsheet's trailing empty columns are no problem


def test_an_empty_annotator_is_refused(tmp_path, venue, capsys):
    path = write_jsonl(tmp_path / "answers.jsonl", [{**by_item(venue, export(tmp_path, "jsonl"))["c1:thread"],
                                                     "choice": "candidate_1"}])
    capsys.readouterr()
    assert import_file(path, annotator=" ") == 2
    assert capsys.readouterr().err.strip() == "--annotator must name who made the decisions; it is empty"
    assert not venue["ledger"].path.exists()
