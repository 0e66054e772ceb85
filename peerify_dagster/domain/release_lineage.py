"""The code behind a label release, read from its manifest: each released table's code version (the Dagster code
version its latest materialisation recorded, per `upstream` entry) and the environment that built it (the
Python, every lock file's sha256, the lock it was installed from). `release verify` prints them; `release diff`
names what changed between two releases beside the label changes. Releases made before the environment was
recorded say so rather than guess."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NOT_RECORDED = "not recorded"


def code_versions(manifest: Mapping[str, Any]) -> dict[str, str]:
    """asset -> its code version(s) across the released partitions ("a, b" when partitions were built by different
    code; "not recorded" when a materialisation recorded none)."""
    found: dict[str, set[str]] = {}
    for entry in manifest.get("upstream") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("asset"), str):
            version = entry.get("code_version")
            found.setdefault(entry["asset"], set()).add(version if isinstance(version, str) and version
                                                        else NOT_RECORDED)
    return {asset: ", ".join(sorted(versions)) for asset, versions in sorted(found.items())}


def environment(manifest: Mapping[str, Any]) -> dict | None:
    recorded = manifest.get("environment")
    return recorded if isinstance(recorded, Mapping) else None


def installed_lock(recorded: Mapping[str, Any] | None) -> str:
    """"dev.txt (sha256 1a2b...)", or why there is none."""
    if recorded is None:
        return f"{NOT_RECORDED} (a release made before environments were recorded)"
    name = recorded.get("installed_from")
    locks = recorded.get("locks") if isinstance(recorded.get("locks"), Mapping) else {}
    if not name or not isinstance(name, str):
        return "none: the environment matched no lock file (installed otherwise)"
    return f"{name} (sha256 {str(locks.get(name, '?'))[:16]})"


def lineage_lines(manifest: Mapping[str, Any]) -> list[str]:
    """What `release verify` prints of the code behind a release."""
    recorded = environment(manifest)
    python = recorded.get("python") if recorded else None
    lines = [f"installed from: {installed_lock(recorded)}" + (f", Python {python}" if python else "")]
    versions = code_versions(manifest)
    width = max((len(asset) for asset in versions), default=0)
    lines += ["code versions:"] + [f"  {asset.ljust(width)}  {version}" for asset, version in versions.items()]
    return lines


@dataclass
class LineageChanges:
    code: list[tuple[str, str, str]] = field(default_factory=list)  # (asset, old version, new version)
    dependencies: list[str] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.code or self.dependencies)


def lineage_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> LineageChanges:
    """Code versions and dependencies that differ between two releases' manifests."""
    old_versions, new_versions = code_versions(old), code_versions(new)
    code = [(asset, old_versions.get(asset, "absent"), new_versions.get(asset, "absent"))
            for asset in sorted(set(old_versions) | set(new_versions))
            if old_versions.get(asset) != new_versions.get(asset)]
    old_env, new_env = environment(old), environment(new)
    dependencies = []
    if installed_lock(old_env) != installed_lock(new_env):
        dependencies.append(f"installed from: {installed_lock(old_env)} -> {installed_lock(new_env)}")
    old_python, new_python = (env.get("python") if env else None for env in (old_env, new_env))
    if old_python != new_python:
        dependencies.append(f"Python: {old_python or NOT_RECORDED} -> {new_python or NOT_RECORDED}")
    return LineageChanges(code, dependencies)
