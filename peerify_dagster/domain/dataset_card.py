"""The Hugging Face dataset card (`README.md`) of a label release: YAML front matter (licences, language, task
categories, size category, pretty name, one `configs:` entry per non-empty slice naming its Parquet file, so
`datasets.load_dataset(<release>, "<Slice>")` needs no file names) over the datasheet as its body. Pure logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

SPLIT = "test"  # a benchmark: every slice is an evaluation split
# Hugging Face's size categories, by their upper bound
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
          (10_000_000, "1M<n<10M"))


def size_category(rows: int) -> str:
    return next((name for bound, name in _SIZES if rows < bound), "n>10M")


def hub_licences(venues: Sequence[Mapping[str, Any]]) -> list[str]:
    """The venues' licences as the Hub spells SPDX ids (lower case), each once."""
    return list(dict.fromkeys(v["licence"].lower() for v in venues))


def front_matter(manifest: Mapping[str, Any], slice_parquet: Mapping[str, str]) -> dict[str, Any]:
    rows = sum(entry["rows"] for entry in manifest["slices"].values())
    return {
        "pretty_name": f"Peerify label release {manifest['version']}",
        "license": hub_licences(manifest["venues"]),
        "language": ["en"],
        "task_categories": ["text-classification"],
        "size_categories": [size_category(rows)],
        "tags": ["peer-review", "claim-verification", "croissant"],
        # an empty slice has no config: `datasets` cannot load a split without rows
        "configs": [{"config_name": name, "data_files": [{"split": SPLIT, "path": parquet_name}]}
                    for name, parquet_name in slice_parquet.items() if manifest["slices"][name]["rows"]],
    }


def dataset_card(manifest: Mapping[str, Any], slice_parquet: Mapping[str, str], datasheet: str) -> bytes:
    """README.md: the front matter, then the datasheet."""
    head = yaml.safe_dump(front_matter(manifest, slice_parquet), sort_keys=False, allow_unicode=True, width=120)
    return f"---\n{head}---\n\n{datasheet}".encode("utf-8")
