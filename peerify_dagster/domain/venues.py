"""The venue registry: which OpenReview venues the project builds, and how each is read.

The registry is a YAML file in the repository (`venues.yaml`); each key is a Dagster partition of
the `venues` dynamic partitions definition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

SOURCES = ("api", "snapshot")
DEFAULT_API_URL = "https://api2.openreview.net"


class RegistryError(ValueError):
    """The registry file or one of its entries is invalid; the message names the entry."""


@dataclass(frozen=True)
class Venue:
    key: str  # partition key
    openreview_id: str
    source: str  # "api" (live, crawled into a lake snapshot) or "snapshot" (replay a local folder)
    seed: int
    sample_size: int | None = None
    api_url: str = DEFAULT_API_URL
    snapshot: str | None = None  # folder for source=snapshot, relative to the registry file
    gold_claims: str | None = None  # claim answer key (YAML) with gold evidence, relative to the registry file

    @property
    def slug(self) -> str:
        """File-system-safe form of the key (partition files, snapshot folders)."""
        return self.key.replace("/", "__")


def _venue_from_entry(key: str, entry: dict) -> Venue:
    if not isinstance(entry, dict):
        raise RegistryError(f"venue {key!r}: entry must be a mapping")
    source = entry.get("source", "api")
    if source not in SOURCES:
        raise RegistryError(f"venue {key!r}: source must be one of {SOURCES}, got {source!r}")
    if source == "snapshot" and not entry.get("snapshot"):
        raise RegistryError(f"venue {key!r}: source 'snapshot' needs a 'snapshot' folder")
    if "seed" not in entry or not isinstance(entry["seed"], int):
        raise RegistryError(f"venue {key!r}: an integer 'seed' is required (sampling must be reproducible)")
    sample_size = entry.get("sample_size")
    if sample_size is not None and (not isinstance(sample_size, int) or sample_size < 1):
        raise RegistryError(f"venue {key!r}: sample_size must be a positive integer or null")
    known = {f for f in Venue.__dataclass_fields__ if f != "key"}
    unknown = set(entry) - known
    if unknown:
        raise RegistryError(f"venue {key!r}: unknown field(s) {', '.join(sorted(unknown))}")
    return Venue(key=key, **{**entry, "openreview_id": entry.get("openreview_id", key), "source": source})


def load_registry(path: Path) -> dict[str, Venue]:
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("venues") or {}
    if not isinstance(entries, dict):
        raise RegistryError(f"{path.name}: 'venues' must be a mapping of venue key -> settings")
    return {key: _venue_from_entry(key, entry) for key, entry in entries.items()}


def add_venue(path: Path, venue: Venue) -> None:
    """Append a venue to the registry file, refusing to overwrite an existing entry."""
    registry = load_registry(path) if path.exists() else {}
    if venue.key in registry:
        raise RegistryError(f"venue {venue.key!r} is already registered")
    entry = {k: v for k, v in asdict(venue).items() if k != "key" and v is not None}
    if entry.get("api_url") == DEFAULT_API_URL:
        del entry["api_url"]
    if entry.get("openreview_id") == venue.key:
        del entry["openreview_id"]
    _venue_from_entry(venue.key, entry)  # validate before touching the file
    block = yaml.safe_dump({venue.key: entry}, sort_keys=False, default_flow_style=False)
    indented = "".join(f"  {line}\n" for line in block.splitlines())
    text = path.read_text() if path.exists() else "venues:\n"
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text + indented)
