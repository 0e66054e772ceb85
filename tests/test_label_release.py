"""Label releases end to end: the sample venue built, arbitrated and audited by the real `peerify` command (its LLM
calls answered from the shipped recording), released, loaded with the `datasets` library, verified, tampered with in
every way the issue names, released again under the same version, and rebuilt from the release alone without API
keys."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from peerify_dagster import cli
from peerify_dagster.annotation.decisions import DecisionLedger, new_decision
from peerify_dagster.definitions import defs
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain import records
from peerify_dagster.domain.labels import LABELS, NOT_SUPPORTED, SUPPORTED
from peerify_dagster.domain.slices import SLICES
from peerify_dagster.resources.lake import Lake
from tests.cli_support import cli_env, fresh_home, peerify
from tests.support import ALL_ASSETS, SAMPLE_RECORDING, sample_registry

VERSION = "1.0.0"
EXPECTED_FILES = sorted([name for s in SLICES for name in rel.slice_files(s)]
                        + [rel.CALLS, rel.DECISIONS, rel.DATASHEET, rel.CARD, rel.CROISSANT, rel.MANIFEST])


# A note as pasted from a review: line and paragraph separators, which str.splitlines() would break a line at.
PASTED_NOTE = "the authors conceded\u2028in their reply\u2029see the appendix\x85(twice)"


def _decide(lake: Path, env: dict[str, str]) -> dict[str, str]:
    """Human decisions on three arbitration items (a candidate upheld, imported with `peerify decisions import` from a
    file whose note holds line separators; a third label; a decision retracted and another made) and an audit of the
    audit sample (two annotators, one disagreement settled by consensus). Returns the arbitrated item ids by what was
    decided."""
    queue = Lake(lake).read_table("arbitration_queue", "sample")  # SmolLM2's items: mostly one answer unparsed
    upheld = queue.filter(pl.col("candidate_1_label").is_not_null()).row(0, named=True)
    redone = queue.filter(pl.col("candidate_2_label").is_not_null() & (pl.col("item_id") != upheld["item_id"])).row(
        0, named=True)
    third = queue.filter(~pl.col("item_id").is_in([upheld["item_id"], redone["item_id"]])).row(0, named=True)

    def not_offered(row: dict) -> str:
        return next(label for label in LABELS if label not in (row["candidate_1_label"], row["candidate_2_label"]))

    def arbitration(row: dict, choice: str, label: str, **extra):
        return new_decision(venue="sample", claim_id=row["claim_id"], source=row["source"], kind="arbitration",
                            action="decide", choice=choice, label=label, annotator="alice",
                            queue_version=row["queue_version"], **extra)

    answers = lake.parent / "answers.jsonl"
    answers.write_text(json.dumps({"venue": "sample", "item_id": upheld["item_id"], "choice": "candidate_1",
                                   "queue_version": upheld["queue_version"], "note": PASTED_NOTE},
                                  ensure_ascii=False) + "\n", encoding="utf-8")
    imported = peerify("decisions", "import", str(answers), "--venue", "sample", "--annotator", "alice", env=env)
    assert imported.returncode == 0, imported.stderr
    ledger = DecisionLedger(lake, "sample")
    first_try = arbitration(redone, "candidate_2", redone["candidate_2_label"])
    ledger.append([arbitration(third, "third_label", not_offered(third)), first_try])
    ledger.append([new_decision(venue="sample", claim_id=redone["claim_id"], source=redone["source"],
                                kind="arbitration", action="retract", choice=None, label=None, annotator="alice",
                                queue_version=redone["queue_version"], supersedes=first_try.decision_id)])
    ledger.append([arbitration(redone, "third_label", not_offered(redone))])

    sample = pl.read_parquet(lake / "human_decisions" / "sample" / "audit_sample.parquet")
    version = sample["audit_sample_version"][0]

    def audited(row: dict, annotator: str, label: str, kind: str = "audit"):
        return new_decision(venue="sample", claim_id=row["claim_id"], source="thread", kind=kind, action="decide",
                            choice="label", label=label, annotator=annotator, queue_version=version)

    rows = list(sample.iter_rows(named=True))
    disputed = rows[0]
    audit_ledger = DecisionLedger(lake, "sample", "audit")
    audit_ledger.append([audited(row, "alice", row["stratum"]) for row in rows])
    audit_ledger.append([audited(row, "bob", NOT_SUPPORTED if row is disputed else row["stratum"]) for row in rows])
    audit_ledger.append([audited(disputed, "carol", SUPPORTED, kind="consensus")])
    return {"upheld": upheld["item_id"], "third_label": third["item_id"], "redone": redone["item_id"]}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """The sample built by `peerify build`, arbitrated and audited, built again, and released as 1.0.0."""
    tmp = tmp_path_factory.mktemp("release")
    registry = sample_registry(tmp, llm_recording=str(SAMPLE_RECORDING))
    lake, home = tmp / "lake", fresh_home(tmp / "home")
    env = cli_env(lake, registry, home)
    for step in (("build", "sample"), ("audit", "sample", "--venue", "sample", "--n", "4")):
        done = peerify(*step, env=env, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    decided = _decide(lake, env)
    rebuilt = peerify("build", "sample", env=env, timeout=900)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    release = peerify("release", "--venue", "sample", "--version", VERSION, env=env, timeout=600)
    assert release.returncode == 0, release.stderr[-3000:]
    return {"tmp": tmp, "lake": lake, "home": home, "env": env, "registry": registry, "decided": decided,
            "folder": lake / "releases" / VERSION, "stdout": release.stdout}


@pytest.fixture
def copy(released, tmp_path) -> Path:
    """A copy of the release to tamper with."""
    return Path(shutil.copytree(released["folder"], tmp_path / VERSION))


def verify_exit(folder: Path, capsys, *extra: str) -> tuple[int, str]:
    code = cli.main(["release", "verify", str(folder), *extra])
    return code, capsys.readouterr().err


def reseal(folder: Path, edit_rows=None, edit_calls=None) -> None:
    """A forger's edit: rows or calls changed and every hash in the manifest, its own included, recomputed."""
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    if edit_rows is not None:
        for name in SLICES:
            frame = edit_rows(pl.read_parquet(folder / f"{name}.parquet"))
            parquet_name, jsonl_name = rel.slice_files(name)
            (folder / parquet_name).write_bytes(rel.slice_parquet(frame))
            (folder / jsonl_name).write_bytes(rel.slice_jsonl(frame))
    if edit_calls is not None:
        (folder / rel.CALLS).write_bytes(rel.parquet_bytes(edit_calls(pq.read_table(folder / rel.CALLS))))
    for name in rel.data_files():
        data, entry = (folder / name).read_bytes(), manifest["files"][name]
        rows = pq.read_metadata(folder / name).num_rows if name.endswith(".parquet") else \
            len(data.splitlines()) if name.endswith(".jsonl") else None
        entry.update(sha256=rel.sha256_hex(data), bytes=len(data), rows=rows)
    # the metadata files too, made as the writer makes them (the Croissant distribution hashes the edited files)
    body = {k: v for k, v in manifest.items() if k not in ("files", rel.SELF_HASH)}
    entries = {name: manifest["files"][name] for name in rel.data_files() if name not in rel.METADATA_FILES}
    for name, data in rel.metadata_files(body, entries).items():
        (folder / name).write_bytes(data)
        manifest["files"][name].update(sha256=rel.sha256_hex(data), bytes=len(data))
    manifest.pop(rel.SELF_HASH)
    (folder / rel.MANIFEST).write_bytes(rel.seal_manifest(manifest))


# -- the release -------------------------------------------------------------------------------------------------------
def test_release_folder_manifest_and_provenance(released):
    folder, lake = released["folder"], Lake(released["lake"])
    assert sorted(path.name for path in folder.iterdir()) == EXPECTED_FILES
    assert not list((released["lake"] / "releases").glob(".*.tmp"))  # the temporary folder was renamed into place
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    assert manifest[rel.SELF_HASH] == rel.manifest_body_hash(manifest)
    assert manifest["version"] == VERSION and [v["venue"] for v in manifest["venues"]] == ["sample"]
    assert manifest["seeds"] == {"sample": 20260110}
    for name, entry in manifest["files"].items():  # round trip: every file as the manifest describes it
        data = (folder / name).read_bytes()
        assert (entry["sha256"], entry["bytes"]) == (rel.sha256_hex(data), len(data)), name
        if name.endswith(".parquet"):
            assert entry["rows"] == pq.read_metadata(folder / name).num_rows, name
        elif name.endswith(".jsonl"):
            assert entry["rows"] == len(data.splitlines()), name

    slices = lake.read_table("benchmark_slices", "sample")
    rows = pl.concat([pl.read_parquet(folder / f"{name}.parquet") for name in SLICES])
    assert rows.height == slices.height
    assert {name: manifest["slices"][name]["rows"] for name in SLICES} == dict(slices.group_by("slice").len().rows()) \
        | {name: 0 for name in SLICES if name not in set(slices["slice"])}
    key = ["slice", "claim_id", "gold_label", "gold_call_ids"]
    assert rows.select(key).sort(key[:2]).equals(slices.select(key).sort(key[:2]))

    # provenance: the arbitrated items carry their decision, HumanVerified its two annotators (and the consensus)
    decisions = [json.loads(line) for line in (folder / rel.DECISIONS).read_text().splitlines()]
    by_id = {d["decision_id"]: d for d in decisions}
    for item, provenance in ((released["decided"]["upheld"], {"a_upheld", "b_upheld"}),
                             (released["decided"]["third_label"], {"third_label"})):
        claim_id, source = item.rsplit(":", 1)
        row = rows.filter((pl.col("claim_id") == claim_id) & (pl.col("gold_source") == source)).row(0, named=True)
        assert row["gold_provenance"] in provenance and len(row["gold_decision_ids"]) == 1
        assert by_id[row["gold_decision_ids"][0]]["label"] == row["gold_label"]
    redone = [d for d in decisions if d["item_id"] == released["decided"]["redone"]]
    assert [d["action"] for d in redone] == ["decide", "retract", "decide"]  # the whole history of a released item
    human = rows.filter(pl.col("slice") == "HumanVerified")
    assert human.height == 4 and sorted(human["gold_decision_ids"].list.len()) == [2, 2, 2, 3]
    assert set(human["gold_provenance"]) == {"agreement", "consensus_decision"}

    calls = pq.read_table(folder / rel.CALLS)
    named, _ = rel.provenance_links(rows)
    assert set(calls["call_id"].to_pylist()) == set(named) and len(named) > 100
    assert set(calls["role"].to_pylist()) >= {"labeller_a", "labeller_b", "extractor"}
    assert manifest["arbitration"]["sample"]["thread:agreed"] > 0
    assert {"a_upheld", "b_upheld", "third_label"} & {k.split(":")[1] for k in manifest["arbitration"]["sample"]}
    upstream = {(u["asset"], u["partition"]): u for u in manifest["upstream"]}
    assert {"benchmark_slices", "canonical_labels", "claim_labels", "raw_openreview_notes"} <= {a for a, _ in upstream}
    assert all(u["data_version"] and u["code_version"] for u in upstream.values())
    graph = defs.resolve_asset_graph()
    assert upstream[("benchmark_slices", "sample")]["code_version"] == graph.get(
        dg.AssetKey("benchmark_slices")).code_version
    assert "label_rebuttal" in manifest["prompts"] and manifest["models"]
    sheet = (folder / rel.DATASHEET).read_text()
    assert "Apache-2.0" in sheet and "CC BY" not in sheet  # the sample's terms, from its registry entry
    assert "| HumanVerified | 4 |" in sheet and "## Known limits" in sheet
    assert rel.sha256_hex((folder / rel.MANIFEST).read_bytes()) in released["stdout"]
    # the slice file its gates judged, which is the file released
    shipped = released["lake"] / "benchmark_slices" / "sample.parquet"
    assert manifest["slices_sha256"] == {"sample": rel.sha256_hex(shipped.read_bytes())}


def test_release_loads_with_the_datasets_library(released, tmp_path):
    code = f"""
import json
from datasets import load_dataset
folder = {str(released['folder'])!r}
parquet = load_dataset("parquet", data_files={{"train": folder + "/RebuttalSourced.parquet"}})["train"]
lines = load_dataset("json", data_files={{"train": folder + "/LLMJudged.jsonl"}})["train"]
print(json.dumps({{"parquet": parquet.num_rows, "columns": parquet.column_names, "first": parquet[0]["claim_id"],
                  "json": lines.num_rows, "calls": lines[0]["gold_call_ids"]}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    rebuttal = pl.read_parquet(released["folder"] / "RebuttalSourced.parquet")
    judged = pl.read_parquet(released["folder"] / "LLMJudged.parquet")
    assert (loaded["parquet"], loaded["first"], loaded["columns"]) == (rebuttal.height, rebuttal["claim_id"][0],
                                                                        list(rel.SLICE_ARROW_SCHEMA.names))
    assert (loaded["json"], loaded["calls"]) == (judged.height, judged["gold_call_ids"][0].to_list())


def test_a_second_release_of_the_same_version_is_refused_and_nothing_is_touched(released):
    folder = released["folder"]
    before = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in folder.iterdir()}
    again = peerify("release", "--venue", "sample", "--version", VERSION, env=released["env"], timeout=300)
    assert again.returncode == 2 and f"release {VERSION} already exists" in again.stderr
    # the asset refuses on its own too (a run started from the UI)
    from peerify_dagster.definitions import build_resources

    run = dg.materialize(ALL_ASSETS, selection=["label_release"], instance=dg.DagsterInstance.ephemeral(),
                         resources=build_resources(str(released["lake"])), raise_on_error=False,
                         run_config={"ops": {"label_release": {"config": {"version": VERSION,
                                                                          "venues": ["sample"]}}}})
    [failure] = [e for e in run.all_events if e.is_step_failure]
    assert "already exists" in failure.event_specific_data.user_failure_data.description
    assert {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in folder.iterdir()} == before


def test_a_bad_version_or_an_unknown_venue_is_a_usage_error(released):
    for args, message in ((("--version", "1.0"), "is not X.Y.Z"), (("--version", "01.0.0"), "is not X.Y.Z")):
        done = peerify("release", "--venue", "sample", *args, env=released["env"], timeout=120)
        assert done.returncode == 2 and message in done.stderr
    done = peerify("release", "--venue", "Nowhere", "--version", "2.0.0", env=released["env"], timeout=120)
    assert done.returncode == 2 and "Nowhere" in done.stderr
    assert not (released["lake"] / "releases" / "2.0.0").exists()


def test_a_venue_whose_blocking_gate_failed_is_not_released(released, tmp_path):
    """The slices rebuilt under a size minimum the sample cannot meet: the blocking gate fails, the release says so."""
    from peerify_dagster.definitions import build_resources
    from peerify_dagster.resources.dagster_resources import VenueRegistryResource
    from peerify_dagster.resources.runs import open_instance

    lake, home = tmp_path / "lake", tmp_path / "home"
    shutil.copytree(released["lake"], lake, ignore=shutil.ignore_patterns("releases"))
    shutil.copytree(released["home"], home)
    registry = sample_registry(tmp_path, llm_recording=str(SAMPLE_RECORDING),
                               slices={"min_size": {"PaperSourced": 1000}})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(home))
        instance, _ = open_instance(home, "test", on_wait=lambda _: None)
        with instance:
            run = dg.materialize(ALL_ASSETS, selection=["benchmark_slices"], instance=instance, partition_key="sample",
                                 resources=build_resources(str(lake), venue_registry=VenueRegistryResource(
                                     path=str(registry))), raise_on_error=False)
    [size_gate] = [e for e in run.get_asset_check_evaluations() if e.check_name == "slice_sizes_at_least_minimum"]
    assert not size_gate.passed
    done = peerify("release", "--venue", "sample", "--version", "2.0.0", env=cli_env(lake, registry, home), timeout=300)
    assert done.returncode == 2
    assert "blocking gate slice_sizes_at_least_minimum failed" in done.stderr and "PaperSourced" in done.stderr
    assert not (lake / "releases" / "2.0.0").exists()


def _copy_built(released, tmp_path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of the released sample's lake (without its releases) and Dagster home, and the environment to use them."""
    lake, home = tmp_path / "lake", tmp_path / "home"
    shutil.copytree(released["lake"], lake, ignore=shutil.ignore_patterns("releases"))
    shutil.copytree(released["home"], home)
    return lake, home, cli_env(lake, released["registry"], home)


def _refusals(done, version: str) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith(f"release {version} refused: ")]


def test_a_release_after_a_new_decision_is_refused_until_the_venue_is_rebuilt(released, tmp_path):
    """The issue's case: a decision recorded after the build. The release names the ledger and the rebuild; after
    `peerify build sample` the release carries the decision."""
    lake, _, env = _copy_built(released, tmp_path)
    queue = Lake(lake).read_table("arbitration_queue", "sample")
    undecided = queue.filter(~pl.col("item_id").is_in(list(released["decided"].values()))
                             & pl.col("candidate_1_label").is_not_null()).sort("source").row(0, named=True)
    decision = new_decision(venue="sample", claim_id=undecided["claim_id"], source=undecided["source"],
                            kind="arbitration", action="decide", choice="candidate_1",
                            label=undecided["candidate_1_label"], annotator="dana",
                            queue_version=undecided["queue_version"])
    DecisionLedger(lake, "sample").append([decision])

    refused = peerify("release", "--venue", "sample", "--version", "1.1.0", env=env, timeout=300)
    assert refused.returncode == 2, refused.stderr[-2000:]
    [line] = _refusals(refused, "1.1.0")
    assert "the arbitration decisions ledger" in line and "arbitration.jsonl" in line
    assert "newer than the benchmark_slices" in line and line.endswith("rebuild first: peerify build sample")
    assert not (lake / "releases" / "1.1.0").exists()

    assert peerify("build", "sample", env=env, timeout=900).returncode == 0
    done = peerify("release", "--venue", "sample", "--version", "1.1.0", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = lake / "releases" / "1.1.0"
    released_ids = {json.loads(line)["decision_id"] for line in (folder / rel.DECISIONS).read_text().splitlines()}
    assert decision.decision_id in released_ids
    rows = pl.concat([pl.read_parquet(folder / f"{name}.parquet") for name in SLICES])
    decided = rows.filter((pl.col("claim_id") == undecided["claim_id"])
                          & (pl.col("gold_source") == undecided["source"]))
    assert decided.height and set(decided["gold_decision_ids"].explode()) == {decision.decision_id}
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    shipped = Lake(lake).table_path("benchmark_slices", "sample").read_bytes()
    assert manifest["slices_sha256"] == {"sample": rel.sha256_hex(shipped)}


def test_a_slice_file_changed_after_its_gates_ran_is_not_released(released, tmp_path):
    """The gates passed one file; the lake now holds another (same rows, written again): its hash differs, and both
    `peerify release` and the asset itself (a run from the UI) refuse it."""
    from peerify_dagster.definitions import build_resources
    from peerify_dagster.resources.dagster_resources import VenueRegistryResource
    from peerify_dagster.resources.runs import open_instance

    lake, home, env = _copy_built(released, tmp_path)
    path = Lake(lake).table_path("benchmark_slices", "sample")
    pl.read_parquet(path).write_parquet(path, compression="uncompressed")
    done = peerify("release", "--venue", "sample", "--version", "1.2.0", env=env, timeout=300)
    assert done.returncode == 2
    [line] = _refusals(done, "1.2.0")
    assert f"sha256 {rel.sha256_hex(path.read_bytes())}) is not the file its gates judged" in line
    assert line.endswith("rebuild first: peerify build sample")
    instance, _ = open_instance(home, "test", on_wait=lambda _: None)
    with instance:
        run = dg.materialize(ALL_ASSETS, selection=["label_release"], instance=instance, raise_on_error=False,
                             resources=build_resources(str(lake), venue_registry=VenueRegistryResource(
                                 path=str(released["registry"]))),
                             run_config={"ops": {"label_release": {"config": {"version": "1.2.0",
                                                                              "venues": ["sample"]}}}})
    [failure] = [e for e in run.all_events if e.is_step_failure]
    assert "is not the file its gates judged" in failure.event_specific_data.user_failure_data.description
    assert not (lake / "releases" / "1.2.0").exists()


# -- verify ------------------------------------------------------------------------------------------------------------
def test_verify_accepts_the_release_and_its_published_manifest_hash(released):
    manifest_hash = rel.sha256_hex((released["folder"] / rel.MANIFEST).read_bytes())
    done = peerify("release", "verify", str(released["folder"]), "--manifest-sha256", manifest_hash,
                   env=released["env"], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"release {VERSION} verified" in done.stdout
    # the code behind it: the lock this environment was installed from, and each released table's code version
    manifest = json.loads((released["folder"] / rel.MANIFEST).read_text())
    environment = manifest["environment"]
    assert set(environment["locks"]) >= {"base.txt", "dev.txt"} and environment["python"]
    if environment["installed_from"]:  # `make install` installs from requirements/dev.txt
        assert f"installed from: {environment['installed_from']} (sha256 " in done.stdout
    slices_version = defs.resolve_asset_graph().get(dg.AssetKey("benchmark_slices")).code_version
    assert "  benchmark_slices " in done.stdout and slices_version in done.stdout
    assert peerify("release", "verify", str(released["tmp"] / "nowhere"), env=released["env"]).returncode == 2
    assert peerify("release", "verify", env=released["env"]).returncode == 2  # no folder: argparse's usage error


def test_a_released_note_with_line_separators_reads_back_and_verifies(released, capsys):
    data = (released["folder"] / rel.DECISIONS).read_bytes()
    [upheld] = [line.record for line in records.json_lines(data)
                if line.record["item_id"] == released["decided"]["upheld"]]
    assert upheld["note"] == PASTED_NOTE
    manifest = json.loads((released["folder"] / rel.MANIFEST).read_text())
    assert len(data.decode().splitlines()) == manifest["files"][rel.DECISIONS]["rows"]  # escaped: one line each
    assert verify_exit(released["folder"], capsys) == (0, "")


def test_verify_and_rebuild_name_a_slice_file_that_is_not_utf8(copy, capsys):
    path = copy / "LLMJudged.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"claim_id": "', b'"claim_id": "\xff', 1)
    path.write_bytes(b"\n".join(lines))
    code, err = verify_exit(copy, capsys)
    assert code == 1 and err.startswith(f"MISMATCH in release {copy}: LLMJudged.jsonl: content changed"), err
    assert "also: LLMJudged.jsonl:2: not UTF-8 (byte 0xff at column" in err and "Traceback" not in err
    assert cli.main(["rebuild-from-release", str(copy)]) == 1
    assert "the release does not verify: LLMJudged.jsonl: content changed" in capsys.readouterr().err


def _flip_byte(folder: Path) -> str:
    path = folder / "LLMJudged.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return "LLMJudged.parquet: content changed"


def _edit_jsonl_row(folder: Path) -> str:
    path = folder / "RebuttalSourced.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[2])
    row["gold_label"] = NOT_SUPPORTED if row["gold_label"] != NOT_SUPPORTED else SUPPORTED
    lines[2] = json.dumps(row, ensure_ascii=False) + "\n"
    path.write_text("".join(lines))
    return "RebuttalSourced.jsonl: content changed"


def _remove_file(folder: Path) -> str:
    (folder / rel.CALLS).unlink()
    return "calls.parquet: missing"


def _add_file(folder: Path) -> str:
    (folder / "notes.txt").write_text("added later\n")
    return "notes.txt: extra file"


def _edit_manifest(folder: Path) -> str:
    path = folder / rel.MANIFEST
    path.write_text(path.read_text().replace(f'"version": "{VERSION}"', '"version": "1.0.1"'))
    return "manifest.json: edited after release"


def _edit_manifest_row_count(folder: Path) -> str:
    manifest = json.loads((folder / rel.MANIFEST).read_text())
    manifest["files"]["PaperSourced.parquet"]["rows"] += 1
    (folder / rel.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return "manifest.json: edited after release"


@pytest.mark.parametrize("tamper", [_flip_byte, _edit_jsonl_row, _remove_file, _add_file, _edit_manifest,
                                    _edit_manifest_row_count])
def test_verify_names_each_kind_of_tampering(copy, capsys, tamper):
    assert verify_exit(copy, capsys) == (0, "")
    expected = tamper(copy)
    code, err = verify_exit(copy, capsys)
    assert code == 1
    assert err.startswith(f"MISMATCH in release {copy}: {expected}"), err


def test_verify_catches_a_resealed_forgery_by_its_rules_links_and_published_hash(copy, capsys):
    published = rel.sha256_hex((copy / rel.MANIFEST).read_bytes())
    reseal(copy, edit_rows=lambda f: f.with_columns(
        gold_label=pl.when(pl.col("slice") == "PaperSourced").then(pl.lit(NOT_SUPPORTED)).otherwise("gold_label")))
    code, err = verify_exit(copy, capsys)
    assert code == 1 and "slice rule paper_sourced_all_supported broken" in err
    code, err = verify_exit(copy, capsys, "--manifest-sha256", published)
    assert code == 1 and err.startswith(f"MISMATCH in release {copy}: manifest.json: sha256")


def test_verify_catches_a_dangling_provenance_link(copy, capsys):
    dropped = pl.read_parquet(copy / "LLMJudged.parquet")["gold_call_ids"][0][0]
    reseal(copy, edit_calls=lambda calls: calls.filter(pc.field("call_id") != dropped))
    code, err = verify_exit(copy, capsys)
    assert code == 1 and f"call {dropped} is not in calls.parquet" in err


# -- rebuild -----------------------------------------------------------------------------------------------------------
def test_rebuild_reproduces_every_label_byte_for_byte_without_api_keys(released, tmp_path):
    env = {**released["env"], "PEERIFY_LLM_PROFILE": "paper"}  # the paper's line-up: API models, and no key for them
    assert not [name for name in env if name.startswith(("OPENAI_", "ANTHROPIC_", "VLLM_"))]
    out = tmp_path / "rebuilt"
    done = peerify("rebuild-from-release", str(released["folder"]), "--out", str(out), env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sum(pq.read_metadata(released["folder"] / f"{name}.parquet").num_rows for name in SLICES)
    assert f"rebuilt {rows} of {rows} labels" in done.stdout and "12 of 12 slice files byte-identical" in done.stdout
    for name in SLICES:
        for file_name in rel.slice_files(name):
            assert (out / file_name).read_bytes() == (released["folder"] / file_name).read_bytes(), file_name
    again = peerify("rebuild-from-release", str(released["folder"]), "--out", str(out), env=env, timeout=120)
    assert again.returncode == 2 and "not an empty folder" in again.stderr  # nothing overwritten


def test_rebuild_reports_every_row_it_cannot_reproduce(released, copy, tmp_path):
    judged = pl.read_parquet(copy / "LLMJudged.parquet").filter(pl.col("gold_provenance") == "agreed")
    third = released["decided"]["third_label"]
    forged = judged.filter(pl.col("gold_label") != NOT_SUPPORTED)["claim_id"][0]
    answered = judged.filter(pl.col("claim_id") != forged).row(0, named=True)  # an answer edited in calls.parquet
    labelled = answered["gold_call_ids"][0]
    decisions = [json.loads(line) for line in (copy / rel.DECISIONS).read_text().splitlines()]
    (copy / rel.DECISIONS).write_text("".join(json.dumps(d) + "\n" for d in decisions if d["item_id"] != third))

    def forge_label(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(gold_label=pl.when((pl.col("slice") == "LLMJudged") & (pl.col("claim_id") == forged))
                                  .then(pl.lit(NOT_SUPPORTED)).otherwise("gold_label"),
                                  gold_decision_ids=pl.col("gold_decision_ids").list.filter(
                                      pl.element().is_in([d["decision_id"] for d in decisions if d["item_id"] == third])
                                      .not_()))

    def rewrite_answer(calls):
        rows = calls.to_pylist()
        for row in rows:
            if row["call_id"] == labelled:
                row["raw_response"] = json.dumps({"label": "Not Determined", "evidence_quotes": [],
                                                  "justification": "edited"})
        return calls.from_pylist(rows, schema=calls.schema)

    reseal(copy, edit_rows=forge_label, edit_calls=rewrite_answer)
    done = peerify("rebuild-from-release", str(copy), "--out", str(tmp_path / "out"), env=released["env"],
                   timeout=300)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("not reproduced: ")]
    assert any(f"LLMJudged claim {forged} (sample): gold_label rebuilt as" in line for line in lines), lines
    third_claim, _ = third.rsplit(":", 1)
    assert any(f"claim {third_claim} (sample): the canonical-label rule leaves {third} pending" in line
               for line in lines), lines
    # the edited answer is read again from its raw text (not from the recorded label): the labellers now disagree
    assert any(f"LLMJudged claim {answered['claim_id']} (sample): the canonical-label rule leaves "
               f"{answered['claim_id']}:manuscript pending" in line for line in lines), lines
    assert not [line for line in lines if "rebuilt as" not in line and "rule leaves" not in line], lines
    assert "rebuilt files differing from the release: " in done.stderr


# -- the parts
# ----------------------------------------------------------------------------------------------------------
def test_the_gateway_replays_a_recorded_call_only_while_its_request_is_unaltered(tmp_path):
    from peerify_dagster.resources.llm_gateway import LLMGateway, ReplayMissError

    recording = pq.read_table(SAMPLE_RECORDING)
    (tmp_path / "llm_calls").mkdir()
    pq.write_table(recording, tmp_path / "llm_calls" / "part-recording.parquet")
    rows = recording.filter(pc.field("prompt_id") == "label_manuscript").slice(0, 5).to_pylist()
    with LLMGateway(tmp_path, cache_mode="replay-only", env={}) as gateway:
        for row in rows:
            result = gateway.call_recorded(row)
            assert (result.call_id, result.raw_response, result.cached) == (row["call_id"], row["raw_response"], True)
        altered = {**rows[0], "request": rows[0]["request"].replace("claim", "Claim", 1)}
        with pytest.raises(ReplayMissError):
            gateway.call_recorded(altered)


def test_a_release_folder_is_complete_or_absent(tmp_path):
    from peerify_dagster.resources.files import atomic_folder, remove_stale_temporaries
    from tests.fakes.cli import dead_pid

    target = tmp_path / "releases" / VERSION
    target.parent.mkdir()
    with pytest.raises(RuntimeError), atomic_folder(target) as folder:
        (folder / "PaperSourced.parquet").write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert list(target.parent.iterdir()) == []
    with atomic_folder(target) as folder:
        (folder / "manifest.json").write_text("{}")
    assert [path.name for path in target.iterdir()] == ["manifest.json"]
    with pytest.raises(FileExistsError), atomic_folder(target) as folder:
        (folder / "manifest.json").write_text("{\"other\": 1}")
    assert (target / "manifest.json").read_text() == "{}"  # never replaced
    left = tmp_path / "releases" / f".2.0.0.{dead_pid()}.tmp"  # a writer killed mid-release left its folder
    left.mkdir()
    (left / "calls.parquet").write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == [left] and not left.exists() and target.exists()
