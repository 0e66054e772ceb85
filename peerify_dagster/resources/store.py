"""Where the lake's objects live: a local folder (the default) or an S3 bucket prefix, behind one fsspec filesystem.

A location in the lake is a `pathlib.Path` for a folder lake (exactly what the lake used before) and a `UPath` over
s3fs for an S3 lake, so `location / name`, `.exists()`, `.glob()`, `.read_bytes()` and `.open()` read either. What
differs between the two is here:

- Writes are whole objects written once. A local file is written to a temporary sibling renamed over it (readers see
  the old file or the whole new one); an S3 object is uploaded by one PUT from a local staging file, never renamed
  (an S3 rename is a copy and a delete: not atomic), so a crashed writer leaves no object, only a local temporary.
- Create-if-absent: a local hard link of a complete temporary (fails if the name exists, never shows a partial
  file); on S3 a conditional PUT (`If-None-Match: *`), refused by the store when the object exists.
- What must be a local file (the DuckDB catalog, staged uploads, a PDF handed to the parser) lives in the lake
  folder itself, or for an S3 lake in this machine's cache folder (deployment.lake_cache_dir).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Union

import duckdb
from upath import UPath

from peerify_dagster import deployment
from peerify_dagster.resources.files import atomic_folder, atomic_path, temporary_path, write_atomic

Location = Union[Path, UPath]  # a Path in a folder lake, a UPath (s3://...) in an S3 lake
STAGING_DIR = "staging"  # in the cache folder: tables written locally before their one upload
DOWNLOADS_DIR = "downloads"  # in the cache folder: objects copied down for readers that need a local file


def s3_storage_options() -> dict:
    """s3fs options from the standard AWS variables, read when a lake is opened. Listings are never cached: another
    worker's writes must be seen at once."""
    options: dict = {"use_listings_cache": False}
    for option, variable in (("endpoint_url", "AWS_ENDPOINT_URL"), ("key", "AWS_ACCESS_KEY_ID"),
                             ("secret", "AWS_SECRET_ACCESS_KEY")):
        if value := os.environ.get(variable):
            options[option] = value
    if region := os.environ.get("AWS_REGION"):
        options["client_kwargs"] = {"region_name": region}
    return options


def location_of(value: str | os.PathLike | Location) -> Location:
    """A lake location from what a caller holds: a Path or UPath as it is, an `s3://` URL as a UPath signed with the
    AWS_* keys, any other string as a local Path."""
    if isinstance(value, (Path, UPath)):
        return value
    text = os.fspath(value)
    return UPath(text.rstrip("/"), **s3_storage_options()) if deployment.is_object_store(text) else Path(text)


def readable(location: Location) -> Path | IO[bytes]:
    """What pyarrow and polars read a lake object from: a local path itself, an S3 object as a seekable file (the
    Parquet footer and the row groups asked for are fetched by range)."""
    return location if isinstance(location, Path) else location.open("rb")


@contextmanager
def local_folder(location: Location) -> Iterator[Path]:
    """The folder at `location` as a local folder for the block, for readers that take a folder (a release): a local
    folder itself; for an S3 prefix, a temporary folder holding a copy of every object under it (by the same relative
    names), removed after the block. A prefix without objects gives an empty folder."""
    if isinstance(location, Path):
        yield location
        return
    prefix = location.path.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="peerify-fetched-") as temporary:
        for key in location.fs.find(prefix):
            if key != prefix:  # SeaweedFS's marker of the prefix itself is no object under it
                target = Path(temporary, key[len(prefix) + 1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                location.fs.get_file(key, str(target))
        yield Path(temporary)


def _is_precondition_failure(exc: OSError) -> bool:
    response = getattr(exc.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code") == "PreconditionFailed"


class LakeStore:
    """The lake's storage under `root`: a folder, or `s3://bucket/prefix` (keys from the AWS_* variables)."""

    def __init__(self, root: str | Location):
        text = str(root)  # a UPath gives its s3:// URL
        self.is_object_store = deployment.is_object_store(text)
        if self.is_object_store:
            self.root: Location = location_of(text)
            self.cache_dir = Path(deployment.lake_cache_dir(text)).resolve()
        else:
            self.root = Path(root).resolve()
            self.cache_dir = self.root

    @property
    def fs(self):  # noqa: ANN201 - an fsspec filesystem
        return self.root.fs if self.is_object_store else None

    def url(self, location: Location) -> str:
        """The location as DuckDB and messages name it: a local path, or `s3://bucket/key`."""
        return location.as_posix() if isinstance(location, Path) else str(location)

    def relative(self, location: Location) -> str:
        return self.url(location)[len(self.url(self.root)):].lstrip("/")

    # -- writing ---------------------------------------------------------------------------------------------------
    def staging_path(self, location: Location) -> Path:
        """The local file a writer of `location` writes before `commit`: a temporary sibling in a folder lake, a
        temporary under the cache folder's staging/ for an S3 lake (named as files.temporary_path names them, so
        `remove_stale_temporaries` of the cache folder removes a killed writer's)."""
        if not self.is_object_store:
            return temporary_path(location)
        return temporary_path(self.cache_dir / STAGING_DIR / self.relative(location))

    def commit(self, staged: Path, location: Location) -> None:
        """Make a complete staged file the object at `location`: a rename over it locally, one upload on S3."""
        if not self.is_object_store:
            os.replace(staged, location)
            return
        self.fs.put_file(str(staged), location.path)
        staged.unlink(missing_ok=True)

    @contextmanager
    def writing(self, location: Location) -> Iterator[Path]:
        """A local file to write the whole object to; it becomes `location` only when the block completes, and is
        removed if the block fails (nothing is written to the lake then)."""
        if not self.is_object_store:
            with atomic_path(location) as temporary:
                yield temporary
            return
        staged = self.staging_path(location)
        try:
            yield staged
            self.commit(staged, location)
        finally:
            staged.unlink(missing_ok=True)

    def write_bytes(self, location: Location, data: bytes) -> None:
        """Write a whole object (replacing any): atomically locally, one PUT on S3."""
        if self.is_object_store:
            self.fs.pipe_file(location.path, data)
        else:
            write_atomic(location, data)

    def create(self, location: Location, data: bytes) -> bool:
        """Write the object only if none exists at `location`; False (nothing written) when one does. Safe between
        processes and, on S3, between machines: the store itself refuses the second writer."""
        if self.is_object_store:
            try:
                self.fs.pipe_file(location.path, data, mode="create")
            except OSError as exc:
                if _is_precondition_failure(exc):
                    return False
                raise
            return True
        # A temporary of this call's own (threads of one process may race for the same name), which the hard link
        # publishes whole; named as TEMPORARY_NAME expects, so a killed writer's is removed as stale.
        temporary = temporary_path(location.with_name(f"{location.name}.{secrets.token_hex(4)}"))
        try:
            temporary.write_bytes(data)
            os.link(temporary, location)  # fails on an existing name
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)
        return True

    def create_folder(self, location: Location, files: dict[str, bytes]) -> None:
        """Write a folder that is never replaced (a release), its files in the order given; FileExistsError when it
        exists. Locally the folder is filled under a temporary name and renamed into place whole. On S3, which has
        no folders to rename, each object is created once (a conditional PUT), so the last file (a manifest) marks
        the folder complete, and a second writer stops at the first object the first one wrote."""
        if not self.is_object_store:
            with atomic_folder(location) as folder:
                for name, data in files.items():
                    (folder / name).write_bytes(data)
            return
        if location.exists():
            raise FileExistsError(f"{self.url(location)} exists; it is never replaced")
        for name, data in files.items():
            if not self.create(location / name, data):
                raise FileExistsError(f"{self.url(location / name)} exists; it is never replaced")

    def delete(self, location: Location) -> None:
        """Remove the object if present."""
        if self.is_object_store:
            if location.exists():
                self.fs.rm_file(location.path)
        else:
            location.unlink(missing_ok=True)

    def move(self, source: Location, target: Location) -> None:
        """Move an object aside (a quarantined file): a rename locally; on S3 a copy and a delete, so both names may
        hold it for a moment. FileNotFoundError when the source is gone."""
        if not self.is_object_store:
            os.replace(source, target)
            return
        self.fs.copy(source.path, target.path)
        self.fs.rm_file(source.path)

    # -- reading ---------------------------------------------------------------------------------------------------
    def local_copy(self, location: Location) -> Path:
        """A local file with a content-addressed object's bytes (its name is its sha256, as under `pdfs/`), for
        readers that take only a path (the PDF parser): the object itself in a folder lake; for an S3 lake a copy in
        the cache folder under the same name, downloaded once per machine (the name changes whenever the bytes do)."""
        if not self.is_object_store:
            return location
        copy = self.cache_dir / DOWNLOADS_DIR / self.relative(location)
        if not copy.exists():
            write_atomic(copy, location.read_bytes())
        return copy

    def register(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """Let a DuckDB connection read the lake: an S3 lake's filesystem registered on it (DuckDB's own httpfs
        extension cannot be installed offline). A folder lake needs nothing."""
        if self.is_object_store:
            con.register_filesystem(self.fs)
        return con
