"""Materialise the held-out journal-layout set (benchmarks/journal_layouts.json) into a folder beside the checkout.

    .venv/bin/python benchmarks/fetch_journal_layouts.py [--dest ../journal-layouts] [--git-mirrors DIR]
        [--manifest benchmarks/journal_layouts.json]

Each paper of the manifest is a real journal PDF with a ground truth of its structure, both read from one commit of a
public repository. They are written as `<dest>/<half>/<id>.pdf` and `<dest>/<half>/<id><suffix>`, the suffix being
the one `eval_real_manuscripts.py` reads for the ground truth's format, so that a half is measured with

    .venv/bin/python benchmarks/eval_real_manuscripts.py --pdfs ../journal-layouts/none \
        --journals ../journal-layouts/dev

`--dest` defaults to `journal-layouts` beside the repository (the data is never copied into it: a destination inside
the repository is refused). Sources, tried in order for each file:

1. `--git-mirrors DIR`: a folder of bare git directories; the one for `owner/name` is a folder whose name holds
   `owner+name` (the git directory itself, or its `repo/`, `repo/.git/` or `.git/`), read with `git cat-file`;
2. the file at its commit on raw.githubusercontent.com over HTTPS (a short timeout; after one connection failure
   HTTPS is not tried again).

Every file is checked against its SHA-256 in the manifest: a mismatch names the file and both hashes, and the paper is
skipped while the others go on. A file already in place with the right hash is kept, so a second run fetches nothing.
When no source can be reached and nothing is in place the script says so in one line on stderr and exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MANIFEST = Path(__file__).with_name("journal_layouts.json")
DEFAULT_DEST = REPO_ROOT.parent / "journal-layouts"
# The suffixes eval_real_manuscripts.py looks for next to a PDF, by ground-truth format.
GROUND_TRUTH_SUFFIXES = {
    "s2orc-json": ".json",
    "grobid-tei": ".tei.xml",
    "jats": ".jats.xml",
    "publisher-jats": ".nxml",
    "markdown": ".md",
    "docling-md": ".groundtruth.md",
}
# dev: rules studied on it; measured: reported (read at issue 37's second stop); fresh: added once the rules were
# final and measured as it came.
HALVES = ("dev", "measured", "fresh")
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
HTTPS_TIMEOUT_S = 15
GIT_TIMEOUT_S = 60
_REQUIRED = ("id", "repo", "commit", "pdf", "pdf_sha256", "ground_truth", "ground_truth_sha256",
             "ground_truth_format", "half")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class Unavailable(Exception):
    """No source could give the file (the reason says which were tried)."""


class Mismatch(Exception):
    """A source gave the file, but not the bytes the manifest names."""


@dataclass(frozen=True)
class Paper:
    id: str
    repo: str
    commit: str
    half: str
    files: tuple[tuple[str, str, str], ...]  # (path in the repository, sha256, file name in <dest>/<half>/)


def _paper(entry: object) -> Paper:
    """A manifest entry checked field by field; ValueError names what is wrong."""
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    missing = [key for key in _REQUIRED if not isinstance(entry.get(key), str) or not entry[key]]
    if missing:
        raise ValueError(f"missing or empty: {', '.join(missing)}")
    if not _ID.match(entry["id"]):
        raise ValueError(f"id {entry['id']!r} is not a slug of lower-case letters, digits and hyphens")
    if entry["repo"].count("/") != 1:
        raise ValueError(f"repo {entry['repo']!r} is not owner/name")
    if not _COMMIT.match(entry["commit"]):
        raise ValueError(f"commit {entry['commit']!r} is not 40 hex digits")
    if entry["half"] not in HALVES:
        raise ValueError(f"half {entry['half']!r} is not one of {', '.join(HALVES)}")
    suffix = GROUND_TRUTH_SUFFIXES.get(entry["ground_truth_format"])
    if suffix is None:
        raise ValueError(f"ground_truth_format {entry['ground_truth_format']!r} is not one of "
                         f"{', '.join(GROUND_TRUTH_SUFFIXES)}")
    for key in ("pdf_sha256", "ground_truth_sha256"):
        if not _SHA256.match(entry[key]):
            raise ValueError(f"{key} is not 64 lower-case hex digits")
    return Paper(entry["id"], entry["repo"], entry["commit"], entry["half"], (
        (entry["pdf"], entry["pdf_sha256"], f"{entry['id']}.pdf"),
        (entry["ground_truth"], entry["ground_truth_sha256"], f"{entry['id']}{suffix}"),
    ))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _git_dir(mirrors: Path, repo: str) -> Path | None:
    """The bare git directory for `owner/name` under `mirrors`: a folder whose name holds `owner+name` (not as part
    of a longer name: `kermitt2+grobid` is not `kermitt2+grobid_client_python`)."""
    owner, name = repo.split("/")
    pattern = re.compile(rf"(?:^|[^\w.-]){re.escape(owner)}\+{re.escape(name)}(?:$|[^\w.-])", re.IGNORECASE)
    for folder in sorted(path for path in mirrors.iterdir() if path.is_dir() and pattern.search(path.name)):
        for candidate in (folder, folder / "repo", folder / "repo" / ".git", folder / ".git"):
            if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
                return candidate
    return None


class Sources:
    """Where files come from: local git mirrors first, then GitHub over HTTPS until it proves unreachable."""

    def __init__(self, mirrors: Path | None) -> None:
        self.mirrors = mirrors
        self.https_down: str | None = None
        self.reached = False

    def read(self, repo: str, commit: str, path: str) -> bytes:
        tried = []
        if self.mirrors is not None:
            git_dir = _git_dir(self.mirrors, repo)
            if git_dir is None:
                tried.append(f"no mirror of {repo} in {self.mirrors}")
            else:
                self.reached = True
                try:
                    result = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", f"{commit}:{path}"],
                                            capture_output=True, timeout=GIT_TIMEOUT_S)
                except (OSError, subprocess.TimeoutExpired) as error:
                    tried.append(f"git failed: {error}")
                else:
                    if result.returncode == 0:
                        return result.stdout
                    # A snapshot may lack a large file or an old commit; the next source may still have it.
                    tried.append(f"mirror lacks it ({result.stderr.decode(errors='replace').strip()[:120]})")
        if self.https_down is None:
            url = RAW_URL.format(repo=repo, commit=commit, path=urllib.parse.quote(path))
            try:
                with urllib.request.urlopen(url, timeout=HTTPS_TIMEOUT_S) as response:
                    data = response.read()
                self.reached = True
                return data
            except urllib.error.HTTPError as error:
                self.reached = True
                tried.append(f"HTTPS {error.code} for {url}")
            except (urllib.error.URLError, OSError) as error:
                self.https_down = str(getattr(error, "reason", error))
                tried.append(f"HTTPS unreachable ({self.https_down})")
        else:
            tried.append(f"HTTPS unreachable ({self.https_down})")
        raise Unavailable("; ".join(tried))


def _materialise(paper: Paper, sources: Sources, dest: Path) -> str:
    """Write the paper's files into its half (only once every file is verified); 'fetched' or 'kept'."""
    folder = dest / paper.half
    wanted: list[tuple[Path, bytes | None]] = []
    for path, sha256, file_name in paper.files:
        target = folder / file_name
        if target.is_file() and _sha256(target.read_bytes()) == sha256:
            wanted.append((target, None))
            continue
        data = sources.read(paper.repo, paper.commit, path)
        if _sha256(data) != sha256:
            raise Mismatch(f"{paper.repo}@{paper.commit[:12]}:{path} has sha256 {_sha256(data)}, "
                           f"the manifest says {sha256}")
        wanted.append((target, data))
    folder.mkdir(parents=True, exist_ok=True)
    for target, data in wanted:
        if data is not None:
            partial = target.with_name(target.name + ".partial")
            partial.write_bytes(data)
            partial.replace(target)
    # A paper that changed halves must not stay in the other one: the halves are measured apart.
    for other in HALVES:
        if other != paper.half:
            for _, _, file_name in paper.files:
                stale = dest / other / file_name
                if stale.is_file():
                    stale.unlink()
                    print(f"{paper.id}: removed {stale}, left from an earlier split", file=sys.stderr)
    return "fetched" if any(data is not None for _, data in wanted) else "kept"


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--dest", type=Path, default=DEFAULT_DEST,
                           help="folder to write dev/, measured/ and fresh/ into (default: journal-layouts beside "
                                "the repository)")
    arguments.add_argument("--git-mirrors", type=Path, default=None,
                           help="folder of bare git directories, one per repository, named with owner+name")
    arguments.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="the set's manifest")
    options = arguments.parse_args(argv)
    dest = options.dest.resolve()
    if dest == REPO_ROOT or REPO_ROOT in dest.parents:
        print(f"--dest {options.dest} is inside the repository; the papers are not redistributed with it: "
              "choose a folder outside", file=sys.stderr)
        return 2
    try:
        entries = json.loads(options.manifest.read_text())["papers"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"{options.manifest}: not a readable manifest with a 'papers' list: {error}", file=sys.stderr)
        return 2
    mirrors = options.git_mirrors
    if mirrors is not None and not mirrors.is_dir():
        print(f"--git-mirrors {mirrors} is not a folder; trying HTTPS only", file=sys.stderr)
        mirrors = None
    sources = Sources(mirrors)
    outcomes: dict[str, list[str]] = {"fetched": [], "kept": [], "skipped": []}
    unavailable = 0
    for position, entry in enumerate(entries, start=1):
        label = entry.get("id") if isinstance(entry, dict) and isinstance(entry.get("id"), str) else f"#{position}"
        try:
            paper = _paper(entry)
            outcomes[_materialise(paper, sources, dest)].append(label)
        except ValueError as error:
            outcomes["skipped"].append(f"{label}: bad manifest entry: {error}")
        except Mismatch as error:
            outcomes["skipped"].append(f"{label}: hash mismatch: {error}")
        except Unavailable as error:
            unavailable += 1
            outcomes["skipped"].append(f"{label}: not available: {error}")
        except OSError as error:
            outcomes["skipped"].append(f"{label}: cannot write into {dest}: {error}")
    if not sources.reached and not outcomes["fetched"] and not outcomes["kept"] and unavailable:
        print(f"no source reachable (no git mirror of these repositories, HTTPS: {sources.https_down}); "
              f"nothing fetched into {dest}", file=sys.stderr)
        return 0
    print(f"journal layouts in {dest}: {len(outcomes['fetched'])} fetched, {len(outcomes['kept'])} already in place, "
          f"{len(outcomes['skipped'])} skipped")
    for half in HALVES:
        count = sum(1 for entry in entries if isinstance(entry, dict) and entry.get("half") == half
                    and entry.get("id") in outcomes["fetched"] + outcomes["kept"])
        print(f"  {half}: {count} papers in {dest / half}")
    for line in outcomes["skipped"]:
        print(f"  skipped {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
