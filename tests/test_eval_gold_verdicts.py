"""benchmarks/eval_gold_verdicts.py on synthetic rows in RefVerifier's end-to-end gold format: two verifiers behind a
loopback OpenAI server, one scripted to known verdicts (known accuracy, macro-F1 and lenient score beside the
majority baseline), one answering Supported to everything (named in a plain sentence), every call in the ledger; and
a malformed rows file refused in one line naming the file and the line, before any call."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from peerify_dagster.resources.llm_gateway import CallLedger
from tests.benchmark_scripts import BENCHMARKS, load_benchmark
from tests.cli_support import cli_env
from tests.fakes.openai_server import ScriptedOpenAIServer

HEADER = ["session_id", "citance_id", "kept", "reference_key", "verdict", "claim_type", "n_evidence", "citance_text",
          "evidence_sentences"]
# (kept, gold verdict as RefVerifier spells it, evidence sentences, what the scripted verifier answers)
ROWS = [
    ("True", "Supported", ["Dropout reduces overfitting.", "It improves test error."], "Supported"),
    ("True", "Supported", ["Training took\ntwo days."], "Partially Supported"),  # a field over two lines
    ("True", "Partially Supported", ["Batch norm speeds up training."], "Partially Supported"),
    ("True", "Not Supported", ["We study speech, not images."], "Not Supported"),
    ("True", "NEI", ["The appendix lists the hyper-parameters."], "Not Enough Information"),
    ("True", "Supported", ["Attention is all you need."], "I would say it is supported"),  # no verdict in it
    ("False", "Not Supported", ["Removed by the annotator."], "Supported"),  # not kept: not gold
    ("True", "Supported", [], "Supported"),  # no evidence sentence: left out
]
MODELS_YAML = """
default_profile: test
models:
  scripted:
    backend: openai
    model: scripted-model
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    structured_output: json_schema
  always:
    backend: openai
    model: always-supported
    base_url_env: TEST_OPENAI_URL
    api_key_env: TEST_OPENAI_KEY
    structured_output: json_schema
profiles:
  test:
    citation_verifiers: [scripted, always]
"""


def write_rows(path: Path, rows=ROWS) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for number, (kept, verdict, evidence, _) in enumerate(rows):
            writer.writerow(["s1", f"c{number}", kept, f"ref{number}", verdict, "other", len(evidence),
                             f"Claim number {number} cites a paper [{number}].", " ||| ".join(evidence)])
    return path


def answer(request) -> str:
    prompt = request["messages"][-1]["content"]
    if request["model"] == "always-supported":
        return json.dumps({"verdict": "Supported", "explanation": "Always."})
    scripted = ROWS[int(re.search(r"Claim number (\d+)", prompt).group(1))][3]
    return json.dumps({"verdict": scripted, "explanation": "From [e1]."}) if scripted in (
        "Supported", "Partially Supported", "Not Supported", "Not Enough Information") else scripted


def section(out: str, verifier: str) -> str:
    return out.split(f"### {verifier}\n", 1)[1].split("\n### ", 1)[0]


def test_scripted_verdicts_give_known_figures_beside_the_majority_baseline(tmp_path, capsys, models_file,
                                                                           monkeypatch):
    rows = write_rows(tmp_path / "gold_rows_human.csv")
    with ScriptedOpenAIServer(responder=answer) as server:
        monkeypatch.setenv("PEERIFY_MODELS_FILE", str(models_file))
        monkeypatch.setenv("TEST_OPENAI_URL", server.base_url)
        monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test")
        code = load_benchmark("eval_gold_verdicts").main(["--rows", str(rows), "--lake", str(tmp_path / "lake")])
        prompts = [request["messages"][-1]["content"] for request in server.requests]

    out = capsys.readouterr().out
    assert code == 0, out
    assert "6 gold rows with evidence (1 rows not kept or without a verdict, 1 without an evidence sentence" in out
    # Gold S S PS NS NEI S, answered S PS PS NS NEI (none): 4 of 6 right. F1: Supported P 1 R 1/3 -> 0.5, Partially
    # Supported P 1/2 R 1 -> 2/3, Not Supported 1, Not Enough Information 1 -> macro 0.792. Lenient (PS -> S): gold
    # S S S NS NEI S, answered S S S NS NEI (none): 5 of 6.
    scripted = section(out, "scripted")
    assert "| scripted (scripted-model) | 6 | 0.667 | 0.792 | 0.833 |" in scripted, scripted
    # Always Supported, the gold's majority: 3 of 6; F1 of Supported P 1/2 R 1 -> 2/3, over four -> 0.167; lenient 4/6.
    assert "| majority class (always Supported; lenient: always Supported) | 6 | 0.500 | 0.167 | 0.667 |" in scripted
    assert "Answers: ok 5, parse_failed 1" in scripted
    assert "| Supported | 1 | 1 | 0 | 0 | 1 |" in scripted  # the unparsed answer is a row of the confusion matrix
    assert "answered" not in scripted.split("Answers:")[1].split("|")[0]  # no one-label sentence for this one
    always = section(out, "always")
    assert "| always (always-supported) | 6 | 0.500 | 0.167 | 0.667 |" in always
    assert "Verifier always (gold evidence) answered Supported to 6 of 6 citations (100%)" in always
    summary = out.strip().splitlines()[-1]
    assert summary == ("summary: rows=6 scripted: accuracy=0.667 macro_f1=0.792 lenient=0.833 always: accuracy=0.500 "
                       "macro_f1=0.167 lenient=0.667 baseline: accuracy=0.500 macro_f1=0.167 lenient=0.667")
    # The verifier saw the annotator's sentences as numbered passages, the two-line one whole.
    assert len(prompts) == 12 and any("[e1] Training took\ntwo days." in prompt for prompt in prompts)
    assert any("[e2] It improves test error." in prompt for prompt in prompts)
    # Every call went through the gateway into the ledger of --lake.
    assert len(CallLedger(tmp_path / "lake").successful_call_ids()) == 12


def test_the_lenient_baseline_answers_the_most_frequent_verdict_after_the_mapping():
    script = load_benchmark("eval_gold_verdicts")
    gold = ["Not Supported"] * 3 + ["Supported"] * 2 + ["Partially Supported"] * 2
    always, always_lenient, floor = script.majority_scores(gold)
    # Not Supported is the most frequent verdict (3 of 7), Supported once Partially Supported counts as it (4 of 7).
    assert (always, always_lenient) == ("Not Supported", "Supported")
    assert floor.accuracy == pytest.approx(3 / 7) and floor.lenient == pytest.approx(4 / 7)
    assert floor.macro_f1 == pytest.approx((2 * (3 / 7) / (3 / 7 + 1)) / 4)


def test_limit_and_seed_draw_the_same_rows_again():
    script = load_benchmark("eval_gold_verdicts")
    rows = [script.GoldRow(line, f"c{line}", ("e",), "Supported") for line in range(2, 40)]
    first = script.drawn(rows, 5, seed=7)
    assert first == script.drawn(rows, 5, seed=7) and len(first) == 5
    assert [row.line for row in first] == sorted(row.line for row in first)
    assert script.drawn(rows, 5, seed=8) != first and script.drawn(rows, 100, seed=7) == rows


@pytest.mark.parametrize(("mangle", "expected"), [
    # Line 1 is the header; the second data row's evidence spans lines 3 and 4, so the third row starts on line 5.
    (lambda text: text.replace("Partially Supported,other", "Maybe,other", 1),
     r":5: verdict 'Maybe' is not one of \['Supported', 'Partially Supported', 'Not Supported', "
     r"'Not Enough Information', 'NEI'\]$"),
    (lambda text: text.replace(",verdict,", ",label,", 1), r":1: no column \['verdict'\] in the header"),
    (lambda text: text.replace("Not Supported,other,1", "Not Supported,other", 1), r":6: 8 fields, the header has 9$"),
    (lambda text: text.replace("Claim number 0 cites a paper [0].", "", 1),
     r":2: a row with a verdict but no citance_text$"),
])
def test_a_malformed_rows_file_is_refused_in_one_line_naming_file_and_line(tmp_path, mangle, expected):
    rows = write_rows(tmp_path / "gold.csv")
    rows.write_text(mangle(rows.read_text(encoding="utf-8")), encoding="utf-8")
    # No model is configured at all: the file is refused before the gateway is opened.
    result = subprocess.run([sys.executable, str(BENCHMARKS / "eval_gold_verdicts.py"), "--rows", str(rows)],
                            capture_output=True, text=True, timeout=120,
                            env=cli_env(tmp_path / "lake", tmp_path / "venues.yaml", None,
                                        PEERIFY_MODELS_FILE=str(tmp_path / "no-models.yaml")))
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{rows}:"), result.stderr
    assert re.search(expected, lines[0]), lines[0]
