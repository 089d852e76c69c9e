"""Git and Git-LFS object rules the Hub applies: blob ids, LFS pointers, and which files go to LFS.

The client compares these ids with its own (`CommitOperationAdd._local_oid`): git sha1 for regular files,
sha256 for LFS files. If we computed them differently, unchanged files would be uploaded again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath

# Above this size the Hub refuses a regular (non-LFS) file, and preupload answers "lfs".
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024

# The `.gitattributes` the Hub writes into every new repo's first commit.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gguf", "*.gz", "*.h5", "*.joblib",
        "*.lfs.*", "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet",
        "*.pb", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*",
        "*.tar.*", "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
    )
)  # fmt: skip


def git_blob_sha1(data: bytes) -> str:
    """The id git gives a blob: sha1 over a `blob <size>\\0` header and the content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The pointer file git stores in place of an LFS object; its git sha1 is the file's blob id."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def lfs_patterns(gitattributes: str) -> list[str]:
    """Patterns marked `filter=lfs` in a `.gitattributes` text (later `-filter` lines are not handled)."""
    patterns = []
    for line in gitattributes.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            patterns.append(parts[0])
    return patterns


def matches_lfs_pattern(path: str, patterns: list[str]) -> bool:
    """gitattributes matching: a pattern without `/` matches the file name, one with `/` the whole path."""
    name = posixpath.basename(path)
    for pattern in patterns:
        if "/" in pattern:
            if fnmatch.fnmatchcase(path, pattern.lstrip("/").replace("**/", "*")):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def looks_binary(sample: bytes) -> bool:
    """The Hub sends binary files to LFS; a NUL byte in the first 512 bytes is git's own test."""
    return b"\0" in sample[:512]


def needs_lfs(path: str, size: int, sample: bytes, patterns: list[str]) -> bool:
    """Whether preupload should answer `uploadMode: lfs` for this file.

    Empty files are regular whatever their name: LFS cannot store them (the client forces that too).
    """
    if size == 0:
        return False
    return size >= LFS_SIZE_THRESHOLD or looks_binary(sample) or matches_lfs_pattern(path, patterns)


def tree_sha1(entries: list[tuple[str, str]]) -> str:
    """A stable id for a folder, from its (name, child id) pairs: not git's tree format, but stable per content."""
    digest = hashlib.sha1()
    for name, oid in sorted(entries):
        digest.update(f"{name}\0{oid}\n".encode())
    return digest.hexdigest()


def check_repo_path(path: str) -> str | None:
    """Why `path` is not a valid file path inside a repo, or None when it is."""
    if not path or path.startswith("/") or path.endswith("/"):
        return f"Invalid path {path!r}: must be relative and name a file"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"Invalid path {path!r}: empty, '.' or '..' segment"
    # The Hub reads a backslash as a separator too when it looks for '.' and '..' (`..\x` is refused with 422).
    if any(part in (".", "..") for part in path.replace("\\", "/").split("/")):
        return f"Invalid path {path!r}: '.' or '..' segment"
    if parts[0] == ".git":
        return f"Invalid path {path!r}: .git is reserved"
    return None
