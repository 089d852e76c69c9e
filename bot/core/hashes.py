"""File hashes as the Hub states them, so every downloaded byte is checked and a record can list what it was built from.

The Hub lists, for each file at a revision, the sha256 of an LFS file's bytes and the git blob id of every file (for
an LFS file that id is its pointer's, so it says nothing about the bytes; for a regular file it is the sha1 of
`blob <size>\\0` + the bytes). `bot.hub` checks each download against them (docs/design.md §3) and writes the verified
sha256 and size of every file beside the folder (`write_manifest`), where the build reads them back with
`read_manifest` without importing `bot.hub`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from bot.core.errors import Failure, Stage

MANIFEST_SUFFIX = ".files.json"  # `<folder>.files.json`, beside the folder: the folder holds the repo's files only
_CHUNK = 8 * 1024 * 1024
_SHA256_HEX, _SHA1_HEX = 64, 40


@dataclass(frozen=True)
class FileHash:
    """One file as a record lists it: the sha256 of its bytes and its size."""

    sha256: str
    size: int


@dataclass(frozen=True)
class HubHash:
    """What the Hub lists for one file at one revision (its file metadata).

    Attributes:
        sha256: the LFS object id (an LFS file); None for a regular file.
        blob_id: the git blob id; the bytes' own for a regular file, the pointer's for an LFS file.
    """

    size: int
    sha256: str | None = None
    blob_id: str | None = None

    @property
    def checkable(self) -> bool:
        return bool(self.sha256) or bool(self.blob_id)


@dataclass(frozen=True)
class LocalHash:
    """A local file's sha256 and size, and its git blob id, from one read."""

    file: FileHash
    blob_id: str


def hash_file(path: Path) -> LocalHash:
    """Hash a file once for both checks (sha256 for LFS files and records, git blob id for regular files)."""
    size = path.stat().st_size
    sha256, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha256.update(chunk)
            blob.update(chunk)
    return LocalHash(FileHash(sha256.hexdigest(), size), blob.hexdigest())


def mismatch(local: LocalHash, listed: HubHash) -> str | None:
    """Why the local bytes are not the file the Hub lists, naming both hashes; None when they are.

    An LFS file is checked by its sha256 and size, a regular file by its git blob id (which covers its size).
    """
    if listed.sha256:
        if local.file.sha256 != listed.sha256.lower() or local.file.size != listed.size:
            return (
                f"sha256 {local.file.sha256} ({local.file.size} bytes) downloaded, the Hub lists sha256 "
                f"{listed.sha256} ({listed.size} bytes)"
            )
        return None
    if listed.blob_id and local.blob_id != listed.blob_id.lower():
        return f"git blob id {local.blob_id} downloaded, the Hub lists {listed.blob_id}"
    return None


def manifest_path(folder: Path) -> Path:
    return folder.with_name(folder.name + MANIFEST_SUFFIX)


def write_manifest(folder: Path, files: Mapping[str, FileHash]) -> Path:
    """Record the verified files of a downloaded folder beside it (never inside: the folder may be published)."""
    path = manifest_path(folder)
    payload = {name: asdict(files[name]) for name in sorted(files)}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def read_manifest(folder: Path) -> dict[str, FileHash]:
    """The verified sha256 and size of each file `bot.hub.download.Downloads.download` put into `folder`.

    Raises:
        Failure: there is no manifest (the folder was not downloaded by the bot) or it is not one.
    """
    path = manifest_path(folder)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Failure(f"no readable list of verified files for {folder.name} ({exc})", stage=Stage.VERIFY) from None
    damaged = Failure(f"the list of verified files for {folder.name} is damaged", stage=Stage.VERIFY)
    if not isinstance(data, dict):
        raise damaged
    files = {}
    for name, entry in data.items():
        size = entry.get("size") if isinstance(entry, dict) else None
        if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0 and is_sha256(entry.get("sha256"))):
            raise damaged
        files[str(name)] = FileHash(entry["sha256"], size)
    return files


def is_sha256(text: object) -> bool:
    return _is_hex(text, _SHA256_HEX)


def is_blob_id(text: object) -> bool:
    return _is_hex(text, _SHA1_HEX)


def _is_hex(text: object, length: int) -> bool:
    return isinstance(text, str) and len(text) == length and all(c in "0123456789abcdef" for c in text.lower())
