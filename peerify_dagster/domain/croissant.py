"""Croissant metadata (MLCommons, JSON-LD, conformsTo 1.0) of a label release: the dataset (name, description, version,
licences and sources per venue, citation), its distribution (every file with sha256, size and encoding format) and
one record set per slice whose fields are the slice's columns with their data types and descriptions. Pure logic: the
release writer (peerify_dagster/assets/release.py) writes it, verification (domain/label_release.py) rebuilds and
compares it.

manifest.json cannot be in the distribution (it hashes this file), so the metadata points at it as the provenance
record: `isBasedOn` names it, and every file here is the one the manifest hashes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from peerify_dagster.domain.columns import column_description

CONFORMS_TO = "http://mlcommons.org/croissant/1.0"
# The standard Croissant 1.0 @context (what mlcroissant expects word for word).
CONTEXT: dict[str, Any] = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs", "column": "cr:column",
    "conformsTo": "dct:conformsTo", "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/", "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract", "field": "cr:field",
    "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject", "fileSet": "cr:fileSet", "format": "cr:format",
    "includes": "cr:includes", "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key",
    "md5": "cr:md5", "parentField": "cr:parentField", "path": "cr:path", "recordSet": "cr:recordSet",
    "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated", "replace": "cr:replace",
    "samplingRate": "cr:samplingRate", "sc": "https://schema.org/", "separator": "cr:separator", "source": "cr:source",
    "subField": "cr:subField", "transform": "cr:transform",
}
ENCODINGS = {".parquet": "application/x-parquet", ".jsonl": "application/jsonlines", ".md": "text/markdown",
             ".json": "application/json"}
SLICE_TABLE = "benchmark_slices"  # the lake table whose column descriptions the slice fields carry


def encoding_format(name: str) -> str:
    return next(encoding for suffix, encoding in ENCODINGS.items() if name.endswith(suffix))


def licence_urls(venues: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each venue's licence (its URL where the registry gives one, else its SPDX id), each once, in venue order."""
    return list(dict.fromkeys(v["licence_url"] or v["licence"] for v in venues))


def sources_text(venues: Sequence[Mapping[str, Any]]) -> str:
    """One sentence per venue: where its text comes from and its licence."""
    return " ".join(f"{v['venue']}: {v['source_description']} (licence {v['licence']})." for v in venues)


def citation(venues: Sequence[Mapping[str, Any]], version: str) -> str:
    """The release's citation, followed by each venue's own where the registry gives one."""
    own = [v["citation"] for v in venues if v.get("citation")]
    return "\n".join([f"Peerify label release {version} ({', '.join(v['venue'] for v in venues)})", *own])


def _field(slice_name: str, parquet_name: str, column: str, dtype: pl.DataType) -> dict[str, Any]:
    return {"@type": "cr:Field", "@id": f"{slice_name}/{column}", "name": column,
            "description": column_description(SLICE_TABLE, column), "dataType": "sc:Text",
            **({"repeated": True} if isinstance(dtype, pl.List) else {}),
            "source": {"fileObject": {"@id": parquet_name}, "extract": {"column": column}}}


def croissant(manifest: Mapping[str, Any], files: Mapping[str, Mapping[str, Any]], slice_parquet: Mapping[str, str],
              schema: Mapping[str, pl.DataType], manifest_name: str) -> bytes:
    """The release's croissant.json: `files` (name -> its manifest entry: sha256, bytes) is the distribution,
    `slice_parquet` (slice -> its Parquet file) the record sets, `schema` the slice columns."""
    venues, version = manifest["venues"], manifest["version"]
    metadata = {
        "@context": CONTEXT, "@type": "sc:Dataset", "conformsTo": CONFORMS_TO,
        "name": f"peerify-label-release-{version}",
        "description": ("Peer-review claim verification benchmark: review claims with gold labels (Supported, "
                        "Partially Supported, Not Supported, Not Determined) and the LLM calls and human decisions "
                        f"behind each label, in {len(slice_parquet)} slices. Sources: {sources_text(venues)}"),
        "version": version, "datePublished": manifest["created_at"], "license": licence_urls(venues),
        "citeAs": citation(venues, version),
        "isBasedOn": {"@type": "sc:CreativeWork", "name": manifest_name, "url": manifest_name,
                      "description": "The release manifest: every file's sha256, the venues, seeds, models, prompts "
                                     "and the Dagster data and code versions of every upstream table."},
        "distribution": [{"@type": "cr:FileObject", "@id": name, "name": name, "contentUrl": name,
                          "contentSize": f"{entry['bytes']} B", "encodingFormat": encoding_format(name),
                          "sha256": entry["sha256"]} for name, entry in files.items()],
        "recordSet": [{"@type": "cr:RecordSet", "@id": name, "name": name,
                       "description": f"The {name} slice, every venue's rows ({manifest['slices'][name]['rows']}).",
                       "field": [_field(name, parquet_name, column, dtype) for column, dtype in schema.items()]}
                      for name, parquet_name in slice_parquet.items()],
    }
    return (json.dumps(metadata, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
