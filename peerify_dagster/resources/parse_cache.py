"""Parsed manuscripts kept in the lake by the PDF's sha256 and the parser's identity, so that a lake parses the same
PDF once: a venue rebuilt, a paper verified again, a cited paper found twice are answered from the cache.

`<lake>/parse_cache/<identity key>/<pdf sha256>.json.gz`: one entry per PDF, the gzipped JSON of what the parse gave
(the document, or a parse error that the PDF's content causes) with the PDF's sha256 and the parser's full identity
(`DocumentParser.identity`: the Docling packages, the layout rules' and the parser's code versions, the pipeline and
its options). A new parser identity is a new folder, so a parser change misses the cache and parses again. An entry
is written whole or not at all (the lake's atomic writes, `store.py`: a rename locally, one PUT on S3); one that
cannot be read back whole (gzip's checksum, the JSON, the recorded PDF and identity, the decoder) is counted as
rejected and parsed again, and the new parse replaces it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

from peerify_dagster.resources.store import LakeStore, Location

PARSE_CACHE_DIR = "parse_cache"
ENTRY_FORMAT = 1  # the layout of an entry; part of the folder key, so a new layout never reads an old entry

_log = logging.getLogger(__name__)
Decoded = TypeVar("Decoded")


class ParseCache:
    """The parse cache of one lake (a folder or an S3 lake) for one parser identity; `hits`, `misses` and `rejected`
    (entries found unreadable, counted among the misses) count this instance's lookups."""

    def __init__(self, lake_root: str | Location, identity: str) -> None:
        self.store = LakeStore(lake_root)
        self.identity = identity
        key = hashlib.sha256(f"{ENTRY_FORMAT}\n{identity}".encode()).hexdigest()[:16]
        self.folder = self.store.root / PARSE_CACHE_DIR / key
        self.hits = self.misses = self.rejected = 0

    def path(self, pdf_sha256: str) -> Location:
        return self.folder / f"{pdf_sha256}.json.gz"

    def get(self, pdf_sha256: str, decode: Callable[[Any], Decoded]) -> Decoded | None:
        """The entry of the PDF with that sha256 turned into a result by `decode` (which raises KeyError, TypeError or
        ValueError on a record it cannot use), or None when there is none or it cannot be trusted."""
        location = self.path(pdf_sha256)
        try:
            raw = location.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        try:
            entry = json.loads(gzip.decompress(raw))
            if (entry["format"], entry["pdf_sha256"], entry["parser_identity"]) != \
                    (ENTRY_FORMAT, pdf_sha256, self.identity):
                raise ValueError("it records another PDF or parser")
            result = decode(entry["result"])
        except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError) as error:
            self.misses += 1
            self.rejected += 1
            _log.warning("parse cache entry %s is unreadable (%s: %s); parsing the PDF again",
                         self.store.url(location), type(error).__name__, error)
            return None
        self.hits += 1
        return result

    def put(self, pdf_sha256: str, result: Any) -> None:
        """Keep `result` (JSON-serialisable) as the PDF's entry, replacing any; written whole or not at all."""
        entry = {"format": ENTRY_FORMAT, "pdf_sha256": pdf_sha256, "parser_identity": self.identity, "result": result}
        # mtime=0: the same parse gives the same bytes.
        self.store.write_bytes(self.path(pdf_sha256), gzip.compress(json.dumps(entry).encode(), mtime=0))
