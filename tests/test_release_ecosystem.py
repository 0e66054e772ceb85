"""Releases the ecosystem reads (issue 22), on the sample built once per session (conftest `sample_lake`): its
croissant.json validates with mlcroissant and loads back record by record as the slice Parquet, its README.md dataset
card lets `datasets.load_dataset(<release>, "<Slice>")` load every slice without file names, the datasheet states the
sample's own licence and source, `release verify` names a tampered or invalid croissant.json / README.md, and
`peerify release diff` between releases before and after one human decision names exactly that change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from peerify_dagster import cli
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain.labels import LABELS
from peerify_dagster.domain.release_diff import release_diff
from peerify_dagster.domain.slices import SLICES
from peerify_dagster.domain.venues import load_registry
from peerify_dagster.paths import REPO_ROOT
from peerify_dagster.resources.lake import Lake
from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA
from tests.cli_support import cli_env, peerify
from tests.support import SAMPLE_RECORDING, sample_registry

SAMPLE_TERMS = {k: v for k, v in load_registry(REPO_ROOT / "venues.yaml")["sample"].terms.items() if v is not None}


def _decide(lake: Path, item: dict, label: str) -> str:
    decision = new_decision(venue="sample", claim_id=item["claim_id"], source=item["source"], kind="arbitration",
                            action="decide", choice="third_label", label=label, annotator="erin",
                            queue_version=item["queue_version"])
    DecisionLedger(lake, "sample").append([decision])
    return decision.decision_id


def _release(env: dict, version: str) -> None:
    done = peerify("release", "--venue", "sample", "--version", version, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def releases(sample_lake, tmp_path_factory):
    """The built sample (a copy), one thread item decided and rebuilt, released as 1.0.0; the same item decided
    again with another label, rebuilt, released as 1.1.0."""
    tmp = tmp_path_factory.mktemp("ecosystem")
    lake, home = tmp / "lake", tmp / "home"
    shutil.copytree(sample_lake, lake)
    shutil.copytree(sample_lake.parent / "home", home)
    registry = sample_registry(tmp, llm_recording=str(SAMPLE_RECORDING), **SAMPLE_TERMS)
    env = cli_env(lake, registry, home)
    queue = Lake(lake).read_table("arbitration_queue", "sample")
    queued = set(queue["item_id"])
    # a thread item whose manuscript item is pending too: the claim is in no slice that needs both sources
    item = queue.filter((pl.col("source") == "thread")
                        & (pl.col("claim_id") + ":manuscript").is_in(sorted(queued))).sort("item_id").row(0, named=True)
    first, second = [label for label in LABELS if label not in (item["candidate_1_label"],
                                                                item["candidate_2_label"])][:2]
    decisions = [_decide(lake, item, first)]
    assert peerify("build", "sample", env=env, timeout=900).returncode == 0
    _release(env, "1.0.0")
    decisions.append(_decide(lake, item, second))
    assert peerify("build", "sample", env=env, timeout=900).returncode == 0
    _release(env, "1.1.0")
    return {"old": lake / "releases" / "1.0.0", "new": lake / "releases" / "1.1.0", "item": item,
            "labels": (first, second), "decisions": decisions, "tmp": tmp}


def _slices(folder: Path) -> dict[str, pl.DataFrame]:
    contents, problems = rel.read_release(folder, LEDGER_SCHEMA)
    assert problems == [], problems
    return contents.slices


def test_the_release_lists_and_hashes_its_card_and_croissant_and_verifies(releases, capsys):
    folder = releases["old"]
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    for name in (rel.CARD, rel.CROISSANT):
        data = (folder / name).read_bytes()
        assert manifest["files"][name] == {"sha256": rel.sha256_hex(data), "bytes": len(data), "rows": None}
    assert cli.main(["release", "verify", str(folder)]) == 0, capsys.readouterr().err


# Both readers run in a child process: mlcroissant imports absl, whose log handler keeps the stderr of the moment
# (pytest's capture file) and closes it when any later `logging.config.dictConfig` shuts handlers down, which broke
# the capture of every later test in the worker.
CROISSANT_READER = """
import json, sys
import mlcroissant as mlc

def text(value):
    # mlcroissant's value as the Parquet's: bytes decoded, repeated fields as lists, missing as None
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return [text(v) for v in list(value)]
    return None if value is None or value != value else value

dataset = mlc.Dataset(jsonld=sys.argv[1])  # raises on an invalid file
records = {name: [{key.split("/", 1)[1]: text(value) for key, value in record.items()}
                  for record in dataset.records(record_set=name)] for name in sys.argv[2:]}
print(json.dumps({"errors": sorted(dataset.metadata.ctx.issues.errors), "records": records}))
"""

DATASETS_READER = """
import json, sys
from datasets import load_dataset
print(json.dumps({name: load_dataset(sys.argv[1], name, split="test").to_list() for name in sys.argv[2:]}))
"""


def _read_in_child(code: str, tmp_path: Path, *args: str):
    """What `code` prints last, as JSON, run offline in a child process with `args`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_croissant_validates_and_loads_back_record_by_record(releases, tmp_path):
    folder = releases["old"]
    read = _read_in_child(CROISSANT_READER, tmp_path, str(folder / rel.CROISSANT), *SLICES)
    assert read["errors"] == []
    metadata = json.loads((folder / rel.CROISSANT).read_text())
    assert metadata["license"] == [SAMPLE_TERMS["licence_url"]] and metadata["version"] == "1.0.0"
    assert SAMPLE_TERMS["source_description"] in metadata["description"]
    assert metadata["isBasedOn"]["url"] == rel.MANIFEST
    hashes = {entry["name"]: entry["sha256"] for entry in metadata["distribution"]}
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    assert hashes == {name: manifest["files"][name]["sha256"] for name in rel.data_files() if name != rel.CROISSANT}
    descriptions = {f["name"]: f["description"] for f in metadata["recordSet"][0]["field"]}
    assert all(descriptions.values()) and "gold label" in descriptions["gold_label"]
    for name in SLICES:
        assert read["records"][name] == pl.read_parquet(folder / f"{name}.parquet").to_dicts(), name
    assert any(pl.read_parquet(folder / f"{name}.parquet").height for name in SLICES)


def test_load_dataset_by_config_name_without_naming_files(releases, tmp_path):
    folder = releases["old"]
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    filled = [name for name in SLICES if manifest["slices"][name]["rows"]]  # datasets loads no empty split
    assert len(filled) >= 3
    loaded = _read_in_child(DATASETS_READER, tmp_path, str(folder), *filled)
    for name in filled:
        assert loaded[name] == pl.read_parquet(folder / f"{name}.parquet").to_dicts(), name
    card = (folder / rel.CARD).read_text()
    assert [f"config_name: {name}" in card for name in SLICES] == [name in filled for name in SLICES]
    assert card.startswith("---\n") and "license:\n- apache-2.0\n" in card and "cc-by" not in card


def test_the_datasheet_states_the_samples_own_licence_and_source(releases):
    sheet = (releases["old"] / rel.DATASHEET).read_text()
    assert SAMPLE_TERMS["source_description"] in sheet and f"Licence: {SAMPLE_TERMS['licence']}" in sheet
    assert "CC BY" not in sheet and "from OpenReview and are licensed" not in sheet


def _reseal(folder: Path) -> None:
    """A forger's step: every hash in the manifest recomputed over the files as they now are."""
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        entry.update(sha256=rel.sha256_hex(data), bytes=len(data))
    manifest.pop(rel.SELF_HASH)
    (folder / rel.MANIFEST).write_bytes(rel.seal_manifest(manifest))


@pytest.mark.parametrize(("name", "edit", "reason"), [
    (rel.CROISSANT, lambda text: text.replace('"sc:Dataset"', '"sc:Dataset",', 1), "not JSON"),
    (rel.CROISSANT, lambda text: text.replace("Benchmark slice", "Any slice", 1), "first difference at recordSet"),
    (rel.CARD, lambda text: text.replace("config_name: PaperSourced", "config_name: Papers", 1),
     "first difference at line"),
])
def test_verify_names_a_tampered_or_invalid_card_or_croissant(releases, tmp_path, capsys, name, edit, reason):
    folder = Path(shutil.copytree(releases["old"], tmp_path / "1.0.0"))
    (folder / name).write_text(edit((folder / name).read_text()))
    assert cli.main(["release", "verify", str(folder)]) == 1
    assert f"{name}: content changed" in capsys.readouterr().err  # the manifest's hash catches the edit ...
    _reseal(folder)
    assert cli.main(["release", "verify", str(folder)]) == 1
    err = capsys.readouterr().err
    assert f"MISMATCH in release {folder}: {name}: " in err and reason in err, err  # ... and the content a forgery


def test_the_diff_of_one_decision_names_exactly_that_change(releases, capsys):
    item, (first, second) = releases["item"], releases["labels"]
    diff = release_diff("1.0.0", _slices(releases["old"]), "1.1.0", _slices(releases["new"]))
    changed = [(s.name, c) for s in diff.slices for c in s.changed]
    assert [s for s in diff.slices if s.added or s.removed] == []
    assert [(name, c.claim_id, c.old_label, c.new_label, c.decision_ids) for name, c in changed] == [
        ("RebuttalSourced", item["claim_id"], first, second, (releases["decisions"][1],))]
    assert cli.main(["release", "diff", str(releases["old"]), str(releases["new"])]) == 0
    report = capsys.readouterr().out
    assert f"{first} -> {second}, by decision {releases['decisions'][1]}" in report and "1 change(s)" in report
