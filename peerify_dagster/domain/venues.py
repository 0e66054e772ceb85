"""The venue registry: which OpenReview venues the project builds, and how each is read.

The registry is a YAML file in the repository (`venues.yaml`); each key is a Dagster partition of
the `venues` dynamic partitions definition. `peerify verify` registers its ad-hoc venues (source `upload`: one
uploaded paper and its reviews) in a second file of the same format inside the lake (`uploads/venues.yaml`, never
the tracked one); `load_registry` merges it into the repository's, so every reader knows both.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from peerify_dagster.domain.chunking import ChunkingConfig, ChunkingConfigError
from peerify_dagster.domain.citations.options import CitationOptions, CitationOptionsError
from peerify_dagster.domain.labelling import LabellingConfig, LabellingConfigError
from peerify_dagster.domain.records import RecordError, decoded
from peerify_dagster.domain.sampling import SamplingConfig, SamplingConfigError
from peerify_dagster.domain.shards import ShardCountError, check_shard_count
from peerify_dagster.domain.slices import SliceConfig, SliceConfigError

SOURCE_RELEASE = "release"  # imported from a published release's JSONL files (`peerify import-release`)
SOURCE_SNAPSHOT = "snapshot"  # replays a local snapshot folder: no network
SOURCES = ("api", SOURCE_SNAPSHOT, SOURCE_RELEASE)  # what the repository's registry may name
# A snapshot folder `peerify verify` wrote into the lake from an upload (or one forum of a built venue); only in the
# lake's upload registry, whose relative paths are read against its own folder.
SOURCE_UPLOAD = "upload"
# Upload venue keys are minted by `peerify verify` (`upload-<content hash>`); the prefix is theirs alone, so what
# needs only the key (the configurations an upload venue builds by default) tells an upload venue by it.
UPLOAD_KEY_PREFIX = "upload-"
DEFAULT_API_URL = "https://api2.openreview.net"
# What a venue's text is licensed under when its entry says nothing: OpenReview's licence for the notes it serves.
OPENREVIEW_LICENCE, OPENREVIEW_LICENCE_URL = "CC-BY-4.0", "https://creativecommons.org/licenses/by/4.0/"
_TEXT_FIELDS = ("openreview_id", "api_url", "snapshot", "gold_claims", "gold_citations", "llm_recording", "release",
                "licence", "licence_url", "source_description", "citation")


class RegistryError(ValueError):
    """The registry file or one of its entries is invalid; the message names the entry."""


@dataclass(frozen=True)
class Venue:
    key: str  # partition key
    openreview_id: str
    source: str  # "api" (live, crawled into a lake snapshot), "snapshot" (replay a local folder), "release", "upload"
    seed: int
    sample_size: int | None = None
    api_url: str = DEFAULT_API_URL
    snapshot: str | None = None  # folder for source=snapshot or upload, relative to the registry file
    gold_claims: str | None = None  # claim answer key (YAML) with gold evidence, relative to the registry file
    gold_citations: str | None = None  # citation answer key (YAML): citing sentences and their verdicts, relative too
    chunking: dict | None = None  # chunking options (domain.chunking.ChunkingConfig); None = the defaults
    api_version: int | None = None  # OpenReview API 1 or 2; None = detect (year before 2023 -> 1, else probe)
    sampling: dict | None = None  # paper-sampling options (domain.sampling.SamplingConfig); None = the defaults
    llm_recording: str | None = None  # recorded LLM calls answered from the ledger (Parquet), relative to the registry
    # claim-labelling evidence options (domain.labelling.LabellingConfig); None = defaults
    labelling: dict | None = None
    slices: dict | None = None  # benchmark-slice options and gate settings (domain.slices.SliceConfig); None = defaults
    release: str | None = None  # for source=release: the release folder it was imported from, relative to the registry
    citations: dict | None = None  # citation-half options (domain.citations.options.CitationOptions); None = defaults
    shards: int | None = None  # shards of the papers for the heavy steps (domain.shards); None = automatic
    licence: str | None = None  # SPDX id of the licence of the venue's text; None = OpenReview's CC-BY-4.0
    licence_url: str | None = None  # the licence's text; None = CC BY 4.0's when the licence is the default
    source_description: str | None = None  # where the venue's text comes from; None = OpenReview, by its id
    citation: str | None = None  # how to cite the venue's text (BibTeX or a sentence); None = cite the venue

    @property
    def terms(self) -> dict[str, str | None]:
        """The licence and source of the venue's text as a release states them, defaults filled in."""
        licence = self.licence or OPENREVIEW_LICENCE
        return {"licence": licence,
                "licence_url": self.licence_url or (OPENREVIEW_LICENCE_URL if licence == OPENREVIEW_LICENCE else None),
                "source_description": self.source_description or (
                    f"Review, response and manuscript text of {self.openreview_id}, read from OpenReview; its "
                    "authors license it CC BY 4.0 there: cite the venue and OpenReview."),
                "citation": self.citation}

    @property
    def slug(self) -> str:
        """File-system-safe form of the key (partition files, snapshot folders)."""
        return self.key.replace("/", "__")


# Per-venue options of pipeline stages, validated when the registry is read: (key, config class, its error).
_STAGE_OPTIONS = (
    ("chunking", ChunkingConfig, ChunkingConfigError),
    ("sampling", SamplingConfig, SamplingConfigError),
    ("labelling", LabellingConfig, LabellingConfigError),
    ("slices", SliceConfig, SliceConfigError),
    ("citations", CitationOptions, CitationOptionsError),
)


def _venue_from_entry(key: str, entry: dict, sources: tuple[str, ...] = SOURCES) -> Venue:
    if not isinstance(entry, dict):
        raise RegistryError(f"venue {key!r}: entry must be a mapping of settings, got {entry!r}")
    source = entry.get("source", "api")
    if source == SOURCE_UPLOAD and source not in sources:
        raise RegistryError(f"venue {key!r}: source '{SOURCE_UPLOAD}' venues are registered by `peerify verify` in "
                            "the lake's upload registry, not here")
    if source not in sources:
        raise RegistryError(f"venue {key!r}: source must be one of {sources}, got {source!r}")
    if key.startswith(UPLOAD_KEY_PREFIX) != (source == SOURCE_UPLOAD):
        raise RegistryError(f"venue {key!r}: the key prefix {UPLOAD_KEY_PREFIX!r} is for source '{SOURCE_UPLOAD}' "
                            "venues only, and theirs")
    if source in (SOURCE_SNAPSHOT, SOURCE_UPLOAD) and not entry.get("snapshot"):
        raise RegistryError(f"venue {key!r}: source {source!r} needs a 'snapshot' folder")
    if (source == SOURCE_RELEASE) != bool(entry.get("release")):
        raise RegistryError(f"venue {key!r}: a 'release' folder goes with source '{SOURCE_RELEASE}' and only with it")
    if "seed" not in entry or not isinstance(entry["seed"], int) or isinstance(entry["seed"], bool):
        raise RegistryError(f"venue {key!r}: an integer 'seed' is required (sampling must be reproducible), "
                            f"got {entry.get('seed')!r}")
    sample_size = entry.get("sample_size")
    if sample_size is not None and (not isinstance(sample_size, int) or isinstance(sample_size, bool)
                                    or sample_size < 1):
        raise RegistryError(f"venue {key!r}: sample_size must be a positive integer or null, got {sample_size!r}")
    known = {f for f in Venue.__dataclass_fields__ if f != "key"}
    unknown = set(entry) - known
    if unknown:
        raise RegistryError(f"venue {key!r}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; "
                            f"known: {', '.join(sorted(known))}")
    if entry.get("api_version") not in (None, 1, 2) or isinstance(entry.get("api_version"), bool):
        raise RegistryError(f"venue {key!r}: api_version must be 1, 2 or absent (detect), got {entry['api_version']!r}")
    for name in _TEXT_FIELDS:
        if entry.get(name) is not None and not isinstance(entry[name], str):
            raise RegistryError(f"venue {key!r}: {name} must be a string, got {entry[name]!r}")
    try:
        check_shard_count(entry.get("shards"))
    except ShardCountError as error:
        raise RegistryError(f"venue {key!r}: shards: {error}") from None
    for option, config, config_error in _STAGE_OPTIONS:
        try:
            config.from_mapping(entry.get(option))
        except config_error as error:
            raise RegistryError(f"venue {key!r}: {option}: {error}") from None
    return Venue(key=key, **{**entry, "openreview_id": entry.get("openreview_id", key), "source": source})


def load_registry(path: Path, uploads: Path | None = None) -> dict[str, Venue]:
    """The registry's venues by key, and those of the lake's upload registry `uploads` when given and present (see the
    module doc; paths.upload_registry_path). Any problem raises RegistryError naming the file, and the line or the
    venue."""
    venues = _read_registry(path, SOURCES)
    if uploads is None or not uploads.exists():
        return venues
    uploaded = _read_registry(uploads, (SOURCE_UPLOAD,))
    if clash := sorted(set(uploaded) & set(venues)):
        raise RegistryError(f"{uploads}: venue {clash[0]!r} is registered in {path} too")
    # The upload registry lives in the lake: its folders are read against it wherever the reader's registry is.
    return venues | {key: dataclasses.replace(venue, snapshot=str(uploads.parent / venue.snapshot))
                     for key, venue in uploaded.items()}


def _read_registry(path: Path, sources: tuple[str, ...]) -> dict[str, Venue]:
    return _parse_registry(registry_text(path), path, sources)


def registry_text(path: Path) -> str:
    """The registry file's text; RegistryError naming the file when it is missing, a folder or not UTF-8."""
    try:
        return decoded(path.read_bytes(), str(path))
    except FileNotFoundError:
        raise RegistryError(f"{path}: venue registry not found (PEERIFY_VENUES points elsewhere)") from None
    except OSError as exc:  # a folder, no permission
        raise RegistryError(f"{path}: venue registry cannot be read ({exc.strerror or exc})") from None
    except RecordError as exc:  # not UTF-8: `file:line: reason` with the byte
        raise RegistryError(str(exc)) from None


def _parse_registry(text: str, path: Path, sources: tuple[str, ...] = SOURCES) -> dict[str, Venue]:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RegistryError(f"{path}{where}: not valid YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:  # also a number past int()'s digits, deep nesting
        raise RegistryError(f"{path}: not valid YAML: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    if not isinstance(data, dict) or not isinstance(data.get("venues") or {}, dict):
        raise RegistryError(f"{path}: 'venues' must be a mapping of venue key -> settings")
    try:
        return {str(key): _venue_from_entry(str(key), entry, sources)
                for key, entry in (data.get("venues") or {}).items()}
    except RegistryError as exc:
        raise RegistryError(f"{path}: {exc}") from None


def missing_files(venue: Venue, registry_path: Path) -> list[str]:
    """The files and folders a venue entry names (relative to the registry) that do not exist, one line each."""
    named = {"snapshot": venue.snapshot if venue.source in (SOURCE_SNAPSHOT, SOURCE_UPLOAD) else None,
             "gold_claims": venue.gold_claims,
             "llm_recording": venue.llm_recording}
    return [f"{registry_path}: venue {venue.key!r}: {name} {value!r} does not exist ({registry_path.parent / value})"
            for name, value in named.items() if value and not (registry_path.parent / value).exists()]


def add_venue(path: Path, venue: Venue, replace: bool = False) -> None:
    """Add a venue to the registry file (created when missing), refusing to overwrite an existing entry unless
    `replace` (then the old entry's lines go). The rest of the file, comments included, stays as it was; a file whose
    `venues:` cannot take the entry that way (a flow mapping `{...}`, an explicit null) is refused, untouched."""
    text = registry_text(path) if path.exists() else ""
    registry = _parse_registry(text, path)
    if venue.key in registry and not replace:
        raise RegistryError(f"venue {venue.key!r} is already registered")
    entry = _entry(venue)
    added = _venue_from_entry(venue.key, entry)  # validate before touching the file
    if venue.key in registry:
        text = _without_entry(text, venue.key)
    updated = _with_entry(text, venue.key, entry)
    expected = {**{key: v for key, v in registry.items() if key != venue.key}, venue.key: added}
    try:
        registered = _parse_registry(updated, path)
    except RegistryError:
        registered = None
    if registered != expected:
        raise RegistryError(f"{path}: its `venues:` is not a block mapping that venue {venue.key!r} can be added to "
                            "without rewriting the file; add the entry under `venues:` by hand")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(updated, encoding="utf-8")
        os.replace(temporary, path)  # a reader sees the old file or the new one, never half of it
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise RegistryError(f"{path}: venue registry cannot be written ({exc.strerror or exc})") from None


def _with_entry(text: str, key: str, entry: dict) -> str:
    """The registry text with the venue's entry added at the end of `venues:` (the key added when there is none),
    indented as the entries already there are."""
    block = yaml.safe_dump({key: entry}, sort_keys=False, default_flow_style=False).splitlines()
    root = yaml.compose(text)
    venues = next(((name, value) for name, value in root.value if name.value == "venues"), None) \
        if isinstance(root, yaml.MappingNode) else None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if venues is None:
        return "".join(lines) + "venues:\n" + "".join(f"  {line}\n" for line in block)
    name, value = venues
    if isinstance(value, yaml.MappingNode) and value.value and not value.flow_style:
        indent, end = value.value[0][0].start_mark.column, value.end_mark.line + (value.end_mark.column > 0)
    else:  # `venues:` with nothing under it yet
        indent, end = 2, name.end_mark.line + 1
    return "".join(lines[:end] + [f"{' ' * indent}{line}\n" for line in block] + lines[end:])


def _entry(venue: Venue) -> dict:
    """A venue's registry entry: its settings that differ from the defaults."""
    entry = {k: v for k, v in asdict(venue).items() if k != "key" and v is not None}
    if entry.get("api_url") == DEFAULT_API_URL:
        del entry["api_url"]
    if entry.get("openreview_id") == venue.key:
        del entry["openreview_id"]
    return entry


def upload_registry_text(uploads: Path, venue: Venue) -> str:
    """The upload registry's text with `venue` (source upload, its snapshot relative to the file) added or replaced;
    machine-written, so it is rewritten whole (the caller writes it atomically, under a lock)."""
    entry = _entry(venue)
    _venue_from_entry(venue.key, entry, (SOURCE_UPLOAD,))
    registered = yaml.safe_load(uploads.read_text()) if uploads.exists() else None
    venues = dict((registered or {}).get("venues") or {})
    venues[venue.key] = entry
    return yaml.safe_dump({"venues": venues}, sort_keys=False, default_flow_style=False)


def _without_entry(text: str, key: str) -> str:
    """The registry text without the lines of one venue's entry (from its key to the next venue's key)."""
    venues = next(value for name, value in yaml.compose(text).value if name.value == "venues")
    starts = [name.start_mark.line for name, _ in venues.value] + [None]
    index = [name.value for name, _ in venues.value].index(key)
    lines = text.splitlines(keepends=True)
    last = venues.end_mark  # the mapping ends at the start of the next line, or inside the last one
    end = starts[index + 1] if starts[index + 1] is not None else last.line + (last.column > 0)
    return "".join(lines[:starts[index]] + lines[end:])
