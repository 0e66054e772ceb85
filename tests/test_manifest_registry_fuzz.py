"""Hostile manifests and registries read without a traceback, ever: generated release manifests (re-sealed as the
project seals them, so the tamper check passes and the shape checks are what is tested) and venues.yaml,
models.yaml and configurations.yaml files (random YAML shapes, wrong types, invalid UTF-8, a folder) go to the real
readers, which raise nothing but their own error, naming the file and the key; a few go through `peerify` itself."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peerify_dagster import cli
from peerify_dagster.cli.release import verify
from peerify_dagster.domain import label_release as rel
from peerify_dagster.domain.predictions import ConfigurationError as BadConfigurations
from peerify_dagster.domain.predictions import load_configurations
from peerify_dagster.domain.release_lineage import lineage_changes, lineage_lines
from peerify_dagster.domain.slices import SLICE_SCHEMA, SLICES
from peerify_dagster.domain.venues import RegistryError, Venue, load_registry
from peerify_dagster.resources.llm_gateway import LEDGER_SCHEMA
from peerify_dagster.resources.llm_gateway.errors import ConfigurationError as BadModels
from peerify_dagster.resources.llm_gateway.registry import ModelRegistry
from tests.cli_support import cli_env, peerify
from tests.test_release_import import write_release as write_published_release

VENUE = "tiny"
# Derandomised: the same examples on every run; few enough for seconds, not minutes.
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
# The manifest keys the issue found raising, and how each is retyped.
SHAPED_KEYS = ("files", "venues", "models", "prompts", "arbitration", "left_out", "seeds")


# -- a release small enough to make per example ------------------------------------------------------------------------
def release_manifest(rows: pl.DataFrame) -> dict:
    """A manifest as the label_release asset writes one (every key it records), for `rows` of one venue."""
    return {
        "format": rel.FORMAT, "version": "1.0.0", "created_at": "2026-01-01T00:00:00+00:00", "dagster_run_id": "run",
        "venues": [{"venue": VENUE, "openreview_id": VENUE, "source": "snapshot", "seed": 1, "sample_size": None,
                    "sampling": None, "labelling": None,
                    "slices": {"min_size": {"RebuttalSourced": 0, "LLMJudged": 0}}, "licence": "CC-BY-4.0",
                    "licence_url": None, "source_description": "Made up for a test.", "citation": None,
                    "rows": {name: rows.filter(pl.col("slice") == name).height for name in SLICES}}],
        "seeds": {VENUE: 1},
        "slices": {name: {"rows": rows.filter(pl.col("slice") == name).height, "labels": labels}
                   for name, labels in rel.label_counts(rows).items()},
        "schema": {name: str(dtype) for name, dtype in rows.schema.items()},
        "upstream": [{"asset": "benchmark_slices", "partition": VENUE, "code_version": "v1"}],
        "models": {"m": {"backend": "openai", "model_id": "x", "roles": ["labeller_a"], "calls": 0, "decoding": {},
                         "context_window": None}},
        "prompts": {"verify": {"hashes": ["0" * 64], "current": None}},
        "arbitration": {VENUE: {"manuscript:agreed": 0}}, "left_out": {VENUE: {"RebuttalSourced": {"pending": 1}}},
        "licence": {VENUE: "CC-BY-4.0"}, "slices_sha256": {VENUE: "0" * 64},
        "environment": {"python": "3.11", "locks": {"dev.txt": "0" * 64}, "installed_from": "dev.txt"},
    }


def write_release(folder: Path) -> Path:
    """A release of two PaperSourced claims that verifies: every file written as the release asset writes it."""
    rows = pl.DataFrame([{"venue": VENUE, "slice": "PaperSourced", "claim_id": f"c{i}", "paper_id": "P1",
                          "review_id": None, "claim_text": f"Claim {i}.", "claim_type": "factual",
                          "gold_label": "Supported", "gold_source": "paper", "gold_provenance": "paper_construction",
                          "gold_chunk_ids": ["k1"], "gold_call_ids": [], "gold_decision_ids": []} for i in range(2)],
                        schema=SLICE_SCHEMA)
    files, counts = {}, {}
    for name in SLICES:
        part = rows.filter(pl.col("slice") == name)
        parquet_name, jsonl_name = rel.slice_files(name)
        files[parquet_name], files[jsonl_name] = rel.slice_parquet(part), rel.slice_jsonl(part)
        counts[parquet_name] = counts[jsonl_name] = part.height
    files[rel.CALLS], counts[rel.CALLS] = rel.parquet_bytes(LEDGER_SCHEMA.empty_table()), 0
    files[rel.DECISIONS], counts[rel.DECISIONS] = rel.jsonl_bytes([]), 0
    folder.mkdir(parents=True)
    for name, data in rel.release_files(release_manifest(rows), files, counts).items():
        (folder / name).write_bytes(data)
    return folder


def resealed(folder: Path, edit: Callable[[dict], None]) -> Path:
    """The manifest edited and sealed again, its own hash recomputed: it passes the tamper check."""
    manifest = json.loads((folder / rel.MANIFEST).read_text(encoding="utf-8"))
    manifest.pop(rel.SELF_HASH)
    edit(manifest)
    (folder / rel.MANIFEST).write_bytes(rel.seal_manifest(manifest))
    return folder


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return write_release(tmp_path_factory.mktemp("release") / "1.0.0")


def copy_of(release: Path, parent: Path) -> Path:
    return Path(shutil.copytree(release, parent / release.name))


def paths_of(value, path: tuple = ()) -> list[tuple]:
    """Every key path of a JSON value (its own root left out)."""
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [p for key, child in children for p in [(*path, key), *paths_of(child, (*path, key))]]


def apply(manifest: dict, path: tuple, replacement) -> None:
    """Replace the value at `path` (or drop it, when `replacement` is DROP and it is an object's key)."""
    *parents, last = path
    node = manifest
    for key in parents:
        node = node[key]
    if replacement is DROP and isinstance(node, dict):
        del node[last]
    else:
        node[last] = None if replacement is DROP else replacement


DROP = object()


# -- manifests ---------------------------------------------------------------------------------------------------------
def test_the_release_made_here_verifies(release, capsys):
    assert cli.main(["release", "verify", str(release)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("key", SHAPED_KEYS)
@pytest.mark.parametrize("change", ["missing", "a string", "a list", "an object of numbers"])
def test_a_resealed_manifest_missing_or_retyping_a_key_is_one_line_naming_it(release, tmp_path, capsys, key, change):
    replacement = {"missing": DROP, "a string": "x", "a list": [1], "an object of numbers": {"a": 1}}[change]
    if (key, change) == ("seeds", "an object of numbers"):
        replacement = {VENUE: "x"}  # an object of numbers is the seeds' own shape: a seed that is no number
    folder = resealed(copy_of(release, tmp_path), lambda manifest: apply(manifest, (key,), replacement))
    for command in (["release", "verify"], ["rebuild-from-release"]):
        assert cli.main([*command, str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"{folder / rel.MANIFEST}: not a release manifest: key `{key}"), err


def test_an_edited_manifest_whose_shape_broke_is_reported_as_the_edit(release, tmp_path, capsys):
    folder = copy_of(release, tmp_path)
    manifest = json.loads((folder / rel.MANIFEST).read_text(encoding="utf-8"))
    manifest["venues"] = "gone"  # not re-sealed: the tamper check names it
    (folder / rel.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    assert cli.main(["release", "verify", str(folder)]) == 1
    assert "manifest.json: edited after release" in capsys.readouterr().err


@FUZZ
@given(st.data())
def test_generated_manifests_give_problems_or_a_manifest_error_naming_the_key(release, data):
    manifest = json.loads((release / rel.MANIFEST).read_text(encoding="utf-8"))
    manifest.pop(rel.SELF_HASH)
    changes = data.draw(st.lists(st.tuples(st.sampled_from(paths_of(manifest)), st.just(DROP) | JSON),
                                 min_size=1, max_size=3))
    roots = set()
    for path, replacement in changes:
        try:
            apply(manifest, path, replacement)
        except (KeyError, IndexError, TypeError):  # an earlier change removed or retyped its parent
            continue
        roots.add(path[0])
    with tempfile.TemporaryDirectory() as parent:
        folder = resealed(copy_of(release, Path(parent)), lambda m: (m.clear(), m.update(manifest)))
        try:
            contents, _ = rel.read_release(folder, LEDGER_SCHEMA)
            problems = verify(folder)
        except rel.ManifestError as error:
            assert any(root in str(error) for root in roots), (roots, str(error))
            assert str(error).startswith("key `") and "\n" not in str(error)
            return
    if contents is not None:
        rel.link_problems(contents)
        lineage_lines(contents.manifest)
        lineage_changes(contents.manifest, manifest)
    assert roots or not problems


def test_the_command_names_a_resealed_manifest_without_venues_in_one_line(release, tmp_path):
    folder = resealed(copy_of(release, tmp_path), lambda manifest: manifest.pop("venues"))
    env = cli_env(tmp_path / "lake", tmp_path / "venues.yaml", None)
    for command in (("release", "verify"), ("rebuild-from-release",)):
        done = peerify(*command, str(folder), env=env, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr == f"{folder / rel.MANIFEST}: not a release manifest: key `venues`: missing\n"


# -- registries --------------------------------------------------------------------------------------------------------
VENUE_FIELDS = [name for name in Venue.__dataclass_fields__ if name != "key"] + ["colour"]
# Mostly valid shapes with a few generated values, so the readers' later checks are reached too, and anything at all.
VENUE_ENTRY = st.dictionaries(st.sampled_from(VENUE_FIELDS), JSON, max_size=3).map(lambda extra: {"seed": 1, **extra})
REGISTRY = st.one_of(
    st.fixed_dictionaries({"venues": st.dictionaries(st.text(max_size=6) | st.integers(), VENUE_ENTRY | JSON,
                                                     max_size=3)}),
    JSON)
MODEL = st.dictionaries(st.sampled_from(["backend", "model", "decoding", "max_concurrency", "batch", "context_window",
                                         "price_in_per_million"]), JSON, max_size=2).map(
    lambda extra: {"backend": "openai", "model": "x", **extra})
ROLES = st.dictionaries(st.sampled_from(["extractor", "verifiers"]), st.sampled_from(["m", "m, n", ""]) | JSON,
                        max_size=2)
MODELS = st.fixed_dictionaries({
    "models": st.dictionaries(st.sampled_from(["m", "n"]) | st.text(max_size=3), MODEL | JSON, max_size=2) | JSON,
    "profiles": st.dictionaries(st.sampled_from(["offline", "p"]) | st.text(max_size=3), ROLES | JSON,
                                max_size=2) | JSON,
    "default_profile": st.sampled_from(["offline", "p"]) | JSON})
CONFIGURATION = st.dictionaries(st.sampled_from(["verifier", "mode", "retriever", "k", "claims", "colour"]), JSON,
                                max_size=2).map(lambda extra: {"verifier": "m", "mode": "oracle", **extra})
NAMES = st.lists(st.sampled_from(["c", "d"]) | JSON, max_size=2) | JSON
CONFIGURATIONS = st.fixed_dictionaries({
    "configurations": st.dictionaries(st.sampled_from(["c", "d", "bad name"]) | st.text(max_size=3),
                                      CONFIGURATION | JSON, min_size=1, max_size=2) | JSON,
    "venues": st.dictionaries(st.text(max_size=3) | st.integers(), NAMES, max_size=2) | JSON,
    "release_venues": NAMES, "default_venues": NAMES})


def file_bytes(shapes: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    """A registry's bytes: a generated shape as YAML, that YAML with a byte that is not UTF-8, or any bytes."""
    text = shapes.map(lambda shape: yaml.safe_dump(shape, allow_unicode=True).encode("utf-8"))
    broken = st.tuples(text, st.integers(min_value=0), st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])).map(
        lambda t: t[0][:t[1] % (len(t[0]) + 1)] + t[2] + t[0][t[1] % (len(t[0]) + 1):])
    return st.one_of(text, broken, st.binary(max_size=40))


def read_by(reader: Callable[[Path], object], errors: tuple[type[Exception], ...], content: bytes | None) -> str:
    """`reader` on a file of `content` (None: a folder in its place): it returns (""), or raises one of `errors`
    naming the file (its message returned)."""
    with tempfile.TemporaryDirectory() as parent:
        path = Path(parent) / "registry.yaml"
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        try:
            reader(path)
        except errors as error:
            assert str(path) in str(error), str(error)
            return str(error)
    return ""


NOT_A_FILE = st.none()
# The venue registry's errors are printed as they are; the model and configuration files' through cli.common.one_line,
# which joins the lines of a YAML error (a model name may hold a line break).


@FUZZ
@given(file_bytes(REGISTRY) | NOT_A_FILE)
def test_generated_venue_registries_raise_only_registry_errors_naming_the_file(content):
    assert "\n" not in read_by(load_registry, (RegistryError,), content)  # printed as it is


@FUZZ
@given(file_bytes(MODELS) | NOT_A_FILE)
def test_generated_model_registries_raise_only_configuration_errors_naming_the_file(content):
    read_by(lambda path: ModelRegistry.load(path, env={}), (BadModels,), content)


@FUZZ
@given(file_bytes(CONFIGURATIONS) | NOT_A_FILE)
def test_generated_configuration_files_raise_only_configuration_errors_naming_the_file(content):
    read_by(lambda path: load_configurations(path, ["m"]), (BadConfigurations,), content)


@pytest.mark.parametrize(("registry", "reason"), [("not UTF-8", ":3: not UTF-8 (byte 0xe9 at column 18)"),
                                                  ("a folder", ": venue registry cannot be read (Is a directory)")])
def test_every_command_reading_the_registry_names_it_in_one_line(tmp_path, registry, reason):
    path = tmp_path / "venues.yaml"
    if registry == "a folder":
        path.mkdir()
    else:
        path.write_bytes(b"venues:\n  sample:\n    seed: 1 # caf\xe9\n")
    published = write_published_release(tmp_path / "release")
    env = cli_env(tmp_path / "lake", path, None)
    for command in (("venues", "list"), ("venues", "add", "other"), ("build", "sample"),
                    ("build", "sample", "--estimate"), ("import-release", str(published))):
        done = peerify(*command, env=env, timeout=120)
        assert done.returncode == 2 and f"{path}{reason}" in done.stderr, (command, done.stderr)
        assert len(done.stderr.splitlines()) == 1, (command, done.stderr)
