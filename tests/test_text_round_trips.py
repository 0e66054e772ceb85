"""Every JSONL and CSV reader/writer pair carries arbitrary text unchanged (hypothesis: generated Unicode with the
line separators U+2028, U+2029, U+0085, carriage returns and the other control characters that `str.splitlines()`
breaks on), malformed input is `file:line: reason` with exit code 2, and a decisions import is idempotent. A note
reaches the ledger exactly as written, its leading and trailing separators too, from every path: a JSONL, CSV or
Label Studio import, the web form and the terminal (tests/test_decision_files_fuzz.py feeds the readers junk).

A release made after a decision whose note holds a line separator, and verifying, is exercised on the real release
in tests/test_label_release.py (its `released` fixture is the costly one: a sample build)."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peerify_dagster import cli
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
from peerify_dagster.domain import arbitration as arb
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain import records
from peerify_dagster.domain.release import RELEASE_FILES, load_release
from peerify_dagster.domain.release_import import import_release
from peerify_dagster.domain.slices import SLICE_COLUMNS, SLICE_SCHEMA
from peerify_dagster.resources.lake import Lake
from peerify_dagster.web.pages import venue_url
from tests.arbitration_support import build, standard_labels, write_inputs
from tests.cli_support import cli_env
from tests.test_arbitrate_terminal import arbitrate
from tests.test_queue_import_export import (  # noqa: F401
    VENUE,
    by_item,
    export,
    import_file,
    labelstudio_export,
    venue,
)
from tests.test_release_import import b1, import_cli, lake_files, review_row, workspace, write_release  # noqa: F401
from tests.web_support import csrf_from, live_server, sign_in_client

# What str.splitlines() breaks a line at, besides "\n": each must stay inside its record.
SEPARATORS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
CHARACTERS = st.one_of(st.sampled_from(list(SEPARATORS + '\n\x00\t ",;\ufeff')),
                       st.characters(blacklist_categories=("Cs",)))  # every code point UTF-8 can encode
TEXT = st.text(CHARACTERS, max_size=30)
# Text an import keeps as it is although it strips the whitespace around an id (separators inside stay).
INNER_TEXT = TEXT.map(lambda text: f"<{text}>")
# A note only separators and spaces surround, which every path must keep (it once lost them, and "\r" alone).
EDGED_NOTE = "\u2028\r \u0085looked twice\x85\u2029 \r"
PURE = settings(max_examples=200, deadline=None)
WITH_FILES = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- the record module ----------------------------------------------------------------------------------------------
@PURE
@given(st.lists(st.dictionaries(TEXT, st.one_of(TEXT, st.lists(TEXT, max_size=3), st.none()), max_size=4),
                max_size=5))
def test_json_lines_round_trip_any_text(values):
    data = records.jsonl_bytes(values)
    assert [line.record for line in records.json_lines(data)] == values
    assert [line.number for line in records.json_lines(data)] == list(range(1, len(values) + 1))
    # the writer escapes what JSON leaves raw, so even a reader that splits on every line break sees one record a line
    assert len(data.decode("utf-8").splitlines()) == len(values)


@PURE
@given(st.lists(st.tuples(TEXT, TEXT, TEXT), max_size=5))
def test_csv_round_trips_any_text(rows):
    columns = ("first", "second", "third")
    text = records.csv_text(columns, [dict(zip(columns, row)) for row in rows])
    read = list(records.csv_records(text))
    assert [tuple(record[name] for name in columns) for _, record in read] == rows
    # a row starts on the line after the previous one's last: its fields' line feeds count
    assert [number for number, _ in read] == [2 + sum("".join(row).count("\n") + 1 for row in rows[:i])
                                              for i in range(len(rows))]
    assert len(list(csv.reader(io.StringIO(text, newline="")))) == len(rows) + 1  # the csv module agrees


def test_undecodable_and_unparsable_lines_are_named_by_line_and_the_rest_reads():
    data = b'{"a": 1}\n\n{"b": "\xff"}\n{not json\n{"c": "\xe2\x80\xa8"}\n'
    lines = list(records.json_lines(data))
    assert [(line.number, line.record, line.problem) for line in lines] == [
        (1, {"a": 1}, None), (3, None, "not UTF-8 (byte 0xff at column 8)"),
        (4, None, "not valid JSON (Expecting property name enclosed in double quotes, column 2)"),
        (5, {"c": "\u2028"}, None)]
    try:
        records.decoded(b"header\nfine\nbad \xc3(\n", "answers.csv")
    except records.RecordError as exc:
        assert str(exc) == "answers.csv:3: not UTF-8 (byte 0xc3 at column 5)"
    else:
        raise AssertionError("an invalid byte was decoded")


# -- the arbitration exports and imports ------------------------------------------------------------------------------
def _queue_row(texts: list[str]) -> dict:
    claim, material, justification, evidence = texts
    return {**dict.fromkeys(arb.QUEUE_COLUMNS), "venue": VENUE, "item_id": "c1:thread", "claim_id": "c1",
            "paper_id": "p1", "review_id": "r1",
            "source": "thread", "claim_text": claim, "claim_type": "factual", "source_material": material,
            "candidate_1_label": "Supported", "candidate_1_justification": justification,
            "candidate_1_evidence": [evidence, claim], "candidate_1_raw_answer": justification,
            "candidate_2_label": "Not Supported",
            "candidate_2_justification": None, "candidate_2_evidence": [], "reason": "disagree",
            "queue_version": "v1"}


OPAQUE = {"c1:thread": "q-0123456789ab"}  # the row's opaque id (its value is the secret's business, not these tests')


def _imported_note(answers: list[arb.Answer], row: dict) -> str | None:
    valid, problems = arb.validate_answers(answers, VENUE, [row], {"c1"}, OPAQUE)
    assert problems == [] and len(valid) == 1
    return valid[0].note


@PURE
@given(st.lists(INNER_TEXT, min_size=4, max_size=4), TEXT)
def test_jsonl_export_and_import_round_trip_any_text(texts, note):
    row = _queue_row(texts)
    [record] = [line.record for line in records.json_lines(arb.to_jsonl([row], OPAQUE).encode())]
    assert {name: record[name] for name in arb.EXPORT_COLUMNS} == {**{name: row[name] for name in arb.EXPORT_COLUMNS},
                                                                   "item_id": OPAQUE["c1:thread"]}
    answers, problems = arb.read_jsonl(records.jsonl_bytes([{**record, "choice": "candidate_1", "note": note}]))
    assert problems == []
    assert _imported_note(answers, row) == (note or None)  # exactly; an empty note is no note


@PURE
@given(st.lists(INNER_TEXT, min_size=4, max_size=4), TEXT)
def test_csv_export_and_import_round_trip_any_text(texts, note):
    row = _queue_row(texts)
    exported = arb.to_csv([row], OPAQUE)
    [(line, record)] = list(records.csv_records(exported))
    assert line == 2 and (record["claim_text"], record["source_material"]) == (row["claim_text"],
                                                                               row["source_material"])
    assert record["candidate_1_evidence"] == "\n".join(row["candidate_1_evidence"])
    answers, problems = arb.read_csv(records.csv_text(list(record), [{**record, "choice": "candidate_1",
                                                                      "note": note}]).encode())
    assert problems == []
    assert _imported_note(answers, row) == (note or None)


@PURE
@given(st.lists(INNER_TEXT, min_size=4, max_size=4), TEXT)
def test_labelstudio_export_and_import_round_trip_any_text(texts, note):
    row = _queue_row(texts)
    tasks = json.loads(json.dumps(arb.to_labelstudio_tasks([row], OPAQUE), ensure_ascii=False, indent=1))
    assert tasks[0]["data"]["claim_text"] == row["claim_text"]
    exported = labelstudio_export(tasks, {OPAQUE["c1:thread"]: ["Supported"]})
    exported[0]["annotations"][0]["result"][1]["value"]["text"] = [note]
    answers, problems = arb.read_labelstudio(json.dumps(exported, ensure_ascii=False).encode())
    assert problems == []
    assert _imported_note(answers, row) == "label studio user 7" + (f": {note}" if note else "")


def test_a_csv_field_longer_than_the_csv_modules_limit_imports():
    """A whole manuscript as source material is longer than the csv module's default field limit (128 KiB)."""
    row = _queue_row(["claim", "x" * 300_000, "why", "quote"])
    [(_, record)] = list(records.csv_records(arb.to_csv([row], OPAQUE)))
    answers, problems = arb.read_csv(records.csv_text(list(record), [{**record, "choice": "candidate_1"}]).encode())
    assert problems == [] and record["source_material"] == row["source_material"]
    assert _imported_note(answers, row) is None


# -- the decisions ledger and the label release -----------------------------------------------------------------------
@WITH_FILES
@given(st.lists(TEXT, min_size=1, max_size=3))
def test_the_decisions_ledger_round_trips_any_note(notes):
    with tempfile.TemporaryDirectory() as lake:
        ledger = DecisionLedger(lake, VENUE)
        decisions = [new_decision(venue=VENUE, claim_id=f"c{i}", source="thread", kind="arbitration",
                                  action="decide", choice="third_label", label="Supported", annotator="ann",
                                  note=note) for i, note in enumerate(notes)]
        ledger.append(decisions)
        contents = ledger.read()
        assert contents.problems == [] and contents.decisions == decisions
        assert contents.line_count == len(notes)


def _slice_frame(texts: list[str]) -> pl.DataFrame:
    rows = [{**dict.fromkeys(SLICE_COLUMNS), "venue": VENUE, "slice": "LLMJudged", "claim_id": f"c{i}",
             "claim_text": text, "gold_provenance": text, "gold_chunk_ids": [text], "gold_call_ids": [],
             "gold_decision_ids": []} for i, text in enumerate(texts)]
    return pl.DataFrame(rows, schema=SLICE_SCHEMA)


@WITH_FILES
@given(st.lists(TEXT, max_size=4))
def test_release_slice_and_decision_files_round_trip_any_text(texts):
    frame = _slice_frame(texts)
    decisions = [{"decision_id": f"d{i}", "note": text} for i, text in enumerate(texts)]
    with tempfile.TemporaryDirectory() as folder:
        slice_path, decisions_path = Path(folder) / "LLMJudged.jsonl", Path(folder) / rel.DECISIONS
        slice_path.write_bytes(rel.slice_jsonl(frame))
        decisions_path.write_bytes(rel.jsonl_bytes(decisions))
        assert rel._read_jsonl(slice_path, SLICE_COLUMNS) == (rel.slice_rows(frame).to_dicts(), None)
        assert rel._read_decisions(decisions_path) == (decisions, None)


# -- the published release's reader and importer -------------------------------------------------------------------
@WITH_FILES
@given(st.lists(INNER_TEXT, min_size=1, max_size=3))
def test_a_published_release_with_any_text_loads_and_imports_every_row_on_its_line(texts):
    """A third party's files hold the separators raw (ensure_ascii off): each stays inside its line."""
    claims = [f"The paper claims {text}." for text in texts]
    with tempfile.TemporaryDirectory() as root:
        folder = write_release(Path(root) / "release", B3=[
            json.dumps(review_row(claim, "Supported", review=f"R{i}", evidence=text), ensure_ascii=False)
            for i, (claim, text) in enumerate(zip(claims, texts))])
        b3_lines = (folder / RELEASE_FILES["B3"]).read_bytes().decode().split("\n")
        release = load_release(folder)
        assert release["errors"] == []
        assert [(row["claim"], row["source_line"]) for row in release["B3"]] == [
            (claim, number) for number, claim in enumerate(claims, start=1)]
        imported = import_release(folder, "release-tiny")
        b3_rows = [row for row in imported.tables["release_rows"] if row["release_file"] == RELEASE_FILES["B3"]]
        assert [row["row_json"] for row in b3_rows] == [line.strip() for line in b3_lines[:len(texts)]]
        assert [row["claim_text"] for row in b3_rows] == claims


# -- the commands ---------------------------------------------------------------------------------------------------
def test_import_release_names_undecodable_and_mistyped_rows_by_file_and_line(workspace, capsys):  # noqa: F811
    folder = write_release(workspace["root"] / "bad", B1=[{**b1("P1", "A claim."), "paper_id": 17}], B3=[
        review_row("The paper lacks an ablation of the filter.", "Supported"),
        {**review_row("A list for a claim.", "Supported"), "claim": ["two", "parts"]}])
    with open(folder / RELEASE_FILES["B3"], "ab") as handle:
        handle.write(b'{"claim": "caf\xe9", "paper_id": "P1", "label": "Supported", "review_id": "R1"}\n')
    b1_name, b3_name = RELEASE_FILES["B1"], RELEASE_FILES["B3"]

    assert import_cli(folder) == 2

    err = capsys.readouterr().err
    assert "Traceback" not in err and "nothing was written" in err
    for expected in (f"{b1_name}:1: field paper_id must be a string, got int",
                     f"{b3_name}:2: field claim must be a string, got list",
                     f"{b3_name}:3: not UTF-8 (byte 0xe9 at column 15)"):
        assert expected in err, err
    assert lake_files(workspace["lake"]) == []


def test_verify_and_rebuild_refuse_a_folder_that_is_not_a_release(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a release\n")
    for command in (["release", "verify"], ["rebuild-from-release"]):
        assert cli.main([*command, str(tmp_path)]) == 2
        assert f"{tmp_path}: not a release folder (no manifest.json)" in capsys.readouterr().err


def _relabel_with_text(venue_: dict, justification: str) -> None:
    """The built queue again, its c1 labellers' justifications holding `justification`."""
    rows = [{**row, "justification": justification} if row["claim_id"] == "c1" else row
            for row in standard_labels(VENUE)]
    write_inputs(venue_["lake_root"], VENUE, rows)
    build(VENUE, venue_["registry"], venue_["lake_root"], venue_["instance"])


def test_a_csv_export_holding_a_bare_carriage_return_imports(tmp_path, venue, capsys):  # noqa: F811
    _relabel_with_text(venue, "first part\rsecond part\u2028third")
    out = tmp_path / "queue.csv"
    assert cli.main(["queue", "export", "--venue", VENUE, "--format", "csv", "--out", str(out)]) == 0
    with open(out, newline="") as handle:  # what a spreadsheet reads, and writes back filled in
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 and {r["candidate_1_justification"] for r in rows} >= {"first part\rsecond part\u2028third"}
    for item_id, row in by_item(venue, rows).items():
        row.update(label="Not Determined" if item_id != "c3:thread" else "Supported",
                   note=f"seen\rtwice {row['item_id']}")
    answers = tmp_path / "answers.csv"
    with open(answers, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert import_file(answers) == 0, capsys.readouterr().err
    decisions = venue["ledger"].read().decisions
    assert sorted(d.note for d in decisions) == sorted(f"seen\rtwice {r['item_id']}" for r in rows)


def test_a_decisions_file_whose_note_holds_line_separators_is_accepted(tmp_path, venue, capsys):  # noqa: F811
    note = "checked twice\u2028then\u2029once more\x85done"
    records_ = by_item(venue, export(tmp_path, "jsonl"))
    path = tmp_path / "answers.jsonl"  # written raw, as any JSON writer with ensure_ascii off does
    path.write_text(json.dumps({**records_["c1:thread"], "choice": "candidate_1", "note": note},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    assert import_file(path) == 0, capsys.readouterr().err
    [decision] = venue["ledger"].read().decisions
    assert decision.note == note


def test_importing_the_same_export_twice_records_each_decision_once(tmp_path, venue, capsys):  # noqa: F811
    folder = tmp_path / "ls"
    assert cli.main(["queue", "export", "--venue", VENUE, "--format", "labelstudio", "--out", str(folder)]) == 0
    tasks = json.loads((folder / "tasks.json").read_text())
    labels = {t["data"]["item_id"]: [t["data"]["candidate_2_label"] or "Not Determined"] for t in tasks}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(labelstudio_export(tasks, labels)))
    assert import_file(path) == 0 and import_file(path) == 0
    out = capsys.readouterr().out
    assert f"imported 0 decision(s) from {path}" in out and "(3 already recorded: skipped)" in out
    first = venue["ledger"].read().decisions
    assert len(first) == 3
    assert import_file(path, annotator="dave") == 0  # another annotator's answers are theirs to record
    records_ = by_item(venue, export(tmp_path, "jsonl", "--all"))
    changed = tmp_path / "changed.jsonl"  # carol changes her mind on one item: a new decision, superseding hers
    changed.write_text(json.dumps({**records_["c5:manuscript"], "label": "Supported"}) + "\n")
    assert import_file(changed) == 0
    decisions = venue["ledger"].read().decisions
    assert len(decisions) == 7 and decisions[-1].label == "Supported" and decisions[-1].supersedes is not None


# -- a note through every path into the ledger ------------------------------------------------------------------------
def _answered_export(tmp_path, venue_: dict, file_format: str, note: str) -> Path:
    """The queue exported in `file_format` and written back with c1:thread answered, `note` beside the answer, as a
    JSON writer (ensure_ascii off), a spreadsheet or Label Studio writes it."""
    if file_format == "labelstudio":
        assert cli.main(["queue", "export", "--venue", VENUE, "--format", "labelstudio",
                         "--out", str(tmp_path / "ls")]) == 0
        tasks = json.loads((tmp_path / "ls" / "tasks.json").read_text())
        c1 = by_item(venue_, [task["data"] for task in tasks])["c1:thread"]
        exported = labelstudio_export(tasks, {c1["item_id"]: [c1["candidate_1_label"]]})
        next(task for task in exported if task["annotations"])["annotations"][0]["result"][1]["value"]["text"] = [note]
        path = tmp_path / "answers.json"
        path.write_text(json.dumps(exported, ensure_ascii=False), encoding="utf-8")
        return path
    rows = export(tmp_path, file_format)
    by_item(venue_, rows)["c1:thread"].update(choice="candidate_1", note=note)
    path = tmp_path / f"answers.{file_format}"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        if file_format == "jsonl":
            handle.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        else:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


@pytest.mark.parametrize("note", [EDGED_NOTE, "\r"], ids=["edged by separators", "a carriage return alone"])
@pytest.mark.parametrize("file_format", ["jsonl", "csv", "labelstudio"])
def test_an_imported_note_reaches_the_ledger_exactly(tmp_path, venue, capsys, file_format, note):  # noqa: F811
    path = _answered_export(tmp_path, venue, file_format, note)
    assert import_file(path) == 0, capsys.readouterr().err
    [decision] = venue["ledger"].read().decisions
    assert decision.note == (note if file_format != "labelstudio" else f"label studio user 7: {note}")
    assert import_file(path) == 0 and len(venue["ledger"].read().decisions) == 1  # the same note: recorded once


def test_a_note_sent_from_the_web_form_reaches_the_ledger_exactly(venue):  # noqa: F811
    # The web app counts a venue as built once it has submissions; the queue is all arbitration reads.
    Lake(venue["lake_root"]).write_table("submissions", VENUE, pl.DataFrame({"paper_id": ["paper-c1"]}))
    with live_server(venue["lake_root"]) as server:
        client = server.client()
        sign_in_client(client, "Ann")
        item_url = client.get(venue_url(VENUE, "arbitration", "arbitration")).headers["location"]
        form = {"key": "d", "note": EDGED_NOTE, "csrf_token": csrf_from(client.get(item_url).text)}
        assert client.post(f"{item_url}/decide", data=form).status_code == 303
    [decision] = venue["ledger"].read().decisions
    assert (decision.annotator, decision.label, decision.note) == ("Ann", "Not Determined", EDGED_NOTE)


def test_a_note_typed_in_the_terminal_reaches_the_ledger_exactly(venue):  # noqa: F811
    note = "\u2028 \u0085looked twice\x85\u2029 "  # a terminal's note is one line: it ends at the line end
    env = cli_env(venue["lake_root"], venue["registry"], None)
    result = arbitrate(env, "--venue", VENUE, "--annotator", "Tom", input_text=f"o\n{note}\nd\nq\n")
    assert result.returncode == 0, result.stderr
    [decision] = venue["ledger"].read().decisions
    assert (decision.annotator, decision.label, decision.note) == ("Tom", "Not Determined", note)
