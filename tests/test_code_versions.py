"""Code versions derived from the code (domain/code_versions.py, lineage.py) and the committed graph snapshot
(asset_graph.json), tested on copies of the project whose code a test edits: the edited copy is loaded in a child
process, exactly as a maintainer's upgraded checkout would be, and Dagster's own staleness is read from real
materialisations in a real instance."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from peerify_dagster.dagster_private import compute_functions
from peerify_dagster.definitions import all_assets, defs
from peerify_dagster.domain.code_versions import reached_names
from peerify_dagster.lineage import graph_snapshot, read_snapshot, snapshot_differences

REPO = Path(__file__).resolve().parents[1]
COPIED = ("peerify_dagster", "sql", "cluster", "venues.yaml", "configurations.yaml", "models.yaml",
          "dagster.yaml", "workspace.yaml", "pyproject.toml", "asset_graph.json")
FORUM_TABLES = {"author_responses", "chair_comments", "decisions", "meta_reviews", "note_errors", "public_comments",
                "review_threads", "reviewer_followups", "reviews", "status_notes", "submissions"}
VERSIONS = """
import json
from peerify_dagster.definitions import defs
from peerify_dagster.domain.layout import LAYOUT_VERSION
graph = defs.resolve_asset_graph()
versions = {key.to_user_string(): graph.get(key).code_version for key in graph.get_all_asset_keys()}
print(json.dumps({"assets": versions, "layout": LAYOUT_VERSION}))
"""


def child_env(root: Path, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PEERIFY_", "DAGSTER_"))}
    return {**env, "PYTHONPATH": str(root), **extra}


def run_python(root: Path, code: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=child_env(root, **env), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def versions_of(root: Path) -> dict:
    return json.loads(run_python(root, VERSIONS).strip().splitlines()[-1])


def peerify(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "peerify_dagster.cli", *args], cwd=root, env=child_env(root, **env),
                          capture_output=True, text=True, timeout=300)


def copy_project(target: Path) -> Path:
    target.mkdir(parents=True)
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)
    return target


def edit(root: Path, relative: str, old: str, new: str) -> None:
    path = root / relative
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{relative}: expected one {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def reaching(symbol: str) -> set[str]:
    """The assets whose code reaches `symbol` (module:name), as this process computes it."""
    reached = set()
    for assets_def in all_assets:
        if getattr(assets_def, "is_executable", False) and symbol in reached_names(compute_functions(assets_def)):
            reached |= {key.to_user_string() for key in assets_def.keys}
    return reached


def changed(before: dict, after: dict) -> set[str]:
    return {key for key in before["assets"] if before["assets"][key] != after["assets"][key]}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    return versions_of(copy_project(tmp_path_factory.mktemp("baseline") / "project"))


def test_every_asset_has_a_derived_version_independent_of_where_the_code_lies(baseline):
    graph = defs.resolve_asset_graph()
    here = {key.to_user_string(): graph.get(key).code_version for key in graph.get_all_asset_keys()}
    assert baseline["assets"] == here
    materialisable = {key.to_user_string() for key in graph.get_all_asset_keys() if graph.get(key).is_materializable}
    assert all(len(here[name] or "") == 16 for name in materialisable)
    assert len({here[name] for name in materialisable}) > 20  # one per computation, not one for all


def test_comments_docstrings_and_formatting_change_no_version(baseline, tmp_path):
    root = copy_project(tmp_path / "project")
    edit(root, "peerify_dagster/domain/forum_tables.py", "def _review_row(venue: str, note: dict) -> dict:\n    row = "
         "{",
         'def _review_row(venue: str, note: dict) -> dict:\n    """A docstring added."""\n    # a comment\n\n'
         "    row = {  # why\n")
    edit(root, "peerify_dagster/domain/citations/metadata.py", "TITLE_CONTRADICTION = 0.6",
         "TITLE_CONTRADICTION = (\n    0.6   # the same number, set out differently\n)")
    edit(root, "peerify_dagster/domain/layout/blocks.py", "BLOCK_KINDS = (", "# a note on the kinds\nBLOCK_KINDS = (")
    assert versions_of(root) == baseline


def test_editing_one_definition_changes_exactly_the_assets_whose_code_reaches_it(baseline, tmp_path):
    root = copy_project(tmp_path / "project")
    edit(root, "peerify_dagster/domain/forum_tables.py", '        "review_id": note["id"],',
         '        "review_id": str(note["id"]),')
    after = versions_of(root)
    assert changed(baseline, after) == reaching("peerify_dagster.domain.forum_tables:_review_row") == FORUM_TABLES
    assert after["layout"] == baseline["layout"]

    # the case: a threshold of metadata matching, with no version bump, must mark the reference checks stale
    edit(root, "peerify_dagster/domain/forum_tables.py", '        "review_id": str(note["id"]),',
         '        "review_id": note["id"],')
    edit(root, "peerify_dagster/domain/citations/metadata.py", "TITLE_CONTRADICTION = 0.6",
         "TITLE_CONTRADICTION = 0.65")
    threshold = versions_of(root)
    assert changed(baseline, threshold) == reaching("peerify_dagster.domain.citations.metadata:TITLE_CONTRADICTION")
    assert changed(baseline, threshold) == {"reference_checks", "review_citations"}  # both check references


def test_a_layout_rule_changes_the_layout_version_and_the_parsing_assets(baseline, tmp_path):
    root = copy_project(tmp_path / "project")
    layout = root / "peerify_dagster/domain/layout/floats.py"
    layout.write_text(layout.read_text(encoding="utf-8") + "\nEXTRA_RULE = 1\n", encoding="utf-8")
    after = versions_of(root)
    assert after["layout"] != baseline["layout"]
    # a rule reached by no function still names a new layout in every parse: the parsers' assets follow it
    assert changed(baseline, after) == reaching("peerify_dagster.domain.layout.blocks:LAYOUT_VERSION")
    assert {"parsed_manuscripts", "parse_errors", "cited_papers"} <= changed(baseline, after)
    assert not changed(baseline, after) & FORUM_TABLES


def _reached(asset: str) -> list[str]:
    assets_def = next(a for a in all_assets if getattr(a, "is_executable", False)
                      and asset in {key.to_user_string() for key in a.keys})
    return reached_names(compute_functions(assets_def))


def test_module_aliases_re_exports_and_prompts_are_followed():
    labels = _reached("claim_labels")
    # `from peerify_dagster.domain import labelling as lab` ... `lab.THREAD_PROMPT` (a module alias's attribute)
    assert "peerify_dagster.domain.labelling:THREAD_PROMPT" in labels and "prompt:label_rebuttal" in labels
    # document_parser takes LAYOUT_VERSION from the layout package, which re-exports it from layout/blocks.py
    assert "peerify_dagster.domain.layout.blocks:LAYOUT_VERSION" in _reached("parsed_manuscripts")
    # a parameter named like a module-level asset is the parameter: claim_types' ops never reach review_claims's
    assert "peerify_dagster.assets.claims:review_claims" not in _reached("claim_types")


def test_the_llm_stage_registry_is_what_the_assets_really_call():
    """domain/llm_stages.py declares which assets call models with which prompts (preflight, estimates and usage
    read it); the code each asset runs must agree: exactly those assets reach the gateway, each naming its prompts."""
    from peerify_dagster.domain.llm_stages import LLM_STAGES

    calling = set()
    for stage in LLM_STAGES:
        assets_def = next(a for a in all_assets if getattr(a, "is_executable", False)
                          and stage.name in {key.to_user_string() for key in a.keys})
        calling |= {key.to_user_string() for key in assets_def.keys}
        named = {name.removeprefix("prompt:") for name in _reached(stage.name) if name.startswith("prompt:")}
        assert set(stage.prompts) <= named, stage.name
    assert reaching("peerify_dagster.resources.dagster_resources:LLMGatewayResource") == calling


# -- no version is typed by hand ---------------------------------------------------------------------------------------

def hand_written_versions(source: str, filename: str) -> list[str]:
    """`code_version=` given a literal, or a *VERSION* constant assigned one: what this project no longer writes."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        literal = (ast.Constant, ast.JoinedStr)
        if isinstance(node, ast.keyword) and node.arg == "code_version" and isinstance(node.value, literal):
            found.append(f"{filename}:{node.value.lineno}: code_version={ast.unparse(node.value)}")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            if (isinstance(target, ast.Name) and target.id.isupper() and target.id.endswith("VERSION")
                    and isinstance(node.value, literal)
                    and (isinstance(node.value, ast.JoinedStr) or isinstance(node.value.value, str))):
                found.append(f"{filename}:{node.lineno}: {target.id} = {ast.unparse(node.value)}")
    return found


def test_no_code_version_is_written_by_hand():
    files = sorted((REPO / "peerify_dagster").rglob("*.py"))
    found = [line for path in files
             for line in hand_written_versions(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))]
    assert found == []


@pytest.mark.parametrize("source", [
    '@dg.asset(code_version="citations-v1")\ndef a(): ...',
    'X = dg.AssetOut(code_version=f"v1-{h}")',
    'CITATIONS_CODE_VERSION = "citations-v1"',
    'LAYOUT_VERSION: str = "6"',
])
def test_the_hand_written_version_check_catches(source):
    assert hand_written_versions(source, "x.py")


# -- the graph snapshot ------------------------------------------------------------------------------------------------

def test_the_committed_snapshot_is_the_graph():
    committed = read_snapshot(REPO / "asset_graph.json")
    differences = snapshot_differences(committed, graph_snapshot(defs))
    assert differences == [], "run `peerify graph snapshot` and commit asset_graph.json:\n" + "\n".join(differences)
    assert committed["assets"]["benchmark_slices"]["checks"]["one_row_per_claim_per_slice"] == "blocking"
    assert committed["assets"]["predictions"]["partitions"] == "dynamic:predictions"


def test_graph_check_names_a_change_and_snapshot_takes_it(tmp_path):
    root = copy_project(tmp_path / "project")
    assert peerify(root, "graph", "check").returncode == 0
    edit(root, "peerify_dagster/domain/forum_tables.py", '        "review_id": note["id"],',
         '        "review_id": str(note["id"]),')
    check = peerify(root, "graph", "check")
    assert check.returncode == 1
    named = {line.split(":")[0] for line in check.stdout.splitlines()}
    assert named == FORUM_TABLES and all(" code_version " in line for line in check.stdout.splitlines())
    snapshot = peerify(root, "graph", "snapshot")
    assert snapshot.returncode == 0 and "11 change(s)" in snapshot.stderr
    assert peerify(root, "graph", "check").returncode == 0


# -- Dagster's own staleness -------------------------------------------------------------------------------------------

MATERIALISE = """
import dagster as dg
from peerify_dagster.definitions import build_resources, defs
from peerify_dagster.partitions import add_venue_partitions
instance = dg.DagsterInstance.get()
add_venue_partitions(instance, "sample", [])
selection = dg.AssetSelection.assets("paper_sample", "raw_openreview_notes", "submissions")
result = dg.materialize(list(defs.assets), selection=selection.required_multi_asset_neighbors(), instance=instance,
                        partition_key="sample", resources=build_resources())
assert result.success
"""


def test_dagster_marks_exactly_the_edited_code_stale(tmp_path):
    root = copy_project(tmp_path / "project")
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy2(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {"DAGSTER_HOME": str(home), "PEERIFY_LAKE": str(tmp_path / "lake")}
    run_python(root, MATERIALISE, **env)

    fresh = peerify(root, "stale", "sample", **env)
    assert fresh.returncode == 0 and "nothing stale" in fresh.stderr, fresh.stderr

    edit(root, "peerify_dagster/domain/forum_tables.py", "def _review_row(venue: str, note: dict) -> dict:\n",
         "def _review_row(venue: str, note: dict) -> dict:\n    # a comment marks nothing stale\n")
    assert "nothing stale" in peerify(root, "stale", "sample", **env).stderr

    edit(root, "peerify_dagster/domain/forum_tables.py", '        "review_id": note["id"],',
         '        "review_id": str(note["id"]),')
    stale = peerify(root, "stale", "sample", **env)
    assert stale.returncode == 0, stale.stderr
    rows = [line.split() for line in stale.stdout.splitlines()[2:]]
    code_stale = {row[0] for row in rows if row[2] == "CODE"}
    assert code_stale == FORUM_TABLES  # one op makes them all: each is stale by its own code
    assert not {"paper_sample", "raw_openreview_notes", "forum_crawl_log"} & {row[0] for row in rows}


# -- the analysis itself, on a package written here
# ---------------------------------------------------------------------

FIXTURE = {
    "__init__.py": "from fixturepkg.rules import threshold as threshold\n",
    "rules.py": ("LIMIT = 3\nUNUSED = 4\n\n\ndef threshold(value):\n    return value > LIMIT\n\n\n"
                 "def other():\n    return UNUSED\n"),
    "work.py": ("import fixturepkg.rules as rules_alias\nfrom fixturepkg import threshold\n\n\n"
                "def helper():\n    return rules_alias.other()\n\n\n"
                "def by_alias(values):\n    return [v for v in values if rules_alias.threshold(v)]\n\n\n"
                "def by_re_export(values):\n    return list(filter(threshold, values))\n\n\n"
                "def shadowing(helper):\n    return helper + 1\n"),
}


@pytest.fixture
def fixture_package(tmp_path, monkeypatch):
    from peerify_dagster.domain import code_versions

    package = tmp_path / "fixturepkg"
    package.mkdir()
    for name, text in FIXTURE.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(code_versions, "PROJECT_PACKAGES", (*code_versions.PROJECT_PACKAGES, "fixturepkg"))

    def load():
        code_versions._module.cache_clear()
        code_versions._definition.cache_clear()
        for name in [name for name in sys.modules if name.startswith("fixturepkg")]:
            del sys.modules[name]
        import fixturepkg.work

        return fixturepkg.work

    yield package, load
    code_versions._module.cache_clear()
    code_versions._definition.cache_clear()


def test_the_analysis_follows_aliases_and_re_exports_and_keeps_parameters_apart(fixture_package):
    from peerify_dagster.domain.code_versions import code_version

    package, load = fixture_package
    work = load()
    assert reached_names([work.by_alias]) == ["fixturepkg.rules:LIMIT", "fixturepkg.rules:threshold",
                                              "fixturepkg.work:by_alias"]
    assert reached_names([work.by_re_export]) == ["fixturepkg.rules:LIMIT", "fixturepkg.rules:threshold",
                                                  "fixturepkg.work:by_re_export"]
    assert reached_names([work.shadowing]) == ["fixturepkg.work:shadowing"]  # its `helper` is the parameter
    before = {name: code_version([getattr(work, name)]) for name in ("by_alias", "shadowing", "helper")}

    rules = package / "rules.py"
    rules.write_text(rules.read_text().replace("UNUSED = 4", "UNUSED = 5"))
    work = load()
    after = {name: code_version([getattr(work, name)]) for name in before}
    assert after["by_alias"] == before["by_alias"] and after["shadowing"] == before["shadowing"]
    assert after["helper"] != before["helper"]  # helper -> rules.other -> UNUSED

    rules.write_text(rules.read_text().replace("LIMIT = 3", "LIMIT = 2"))
    work = load()
    assert code_version([work.by_alias]) != before["by_alias"]
    assert code_version([work.shadowing]) == before["shadowing"]


def test_the_cache_answers_for_the_same_sources_and_starts_afresh_when_they_change(fixture_package, tmp_path):
    from peerify_dagster.domain.code_versions import VersionCache, code_version

    package, load = fixture_package
    work = load()
    first = VersionCache(tmp_path / "cache")
    version = first.version([work.by_alias])
    first.save()
    assert version == code_version([work.by_alias]) and first.path.is_file()
    again = VersionCache(tmp_path / "cache")
    assert again.path == first.path and again.known == first.known  # read, not derived again

    rules = package / "rules.py"
    rules.write_text(rules.read_text().replace("LIMIT = 3", "LIMIT = 2"))
    work = load()
    changed = VersionCache(tmp_path / "cache")
    assert changed.path != first.path and changed.known == {}
    assert changed.version([work.by_alias]) != version
