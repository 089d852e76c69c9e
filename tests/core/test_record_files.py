"""bot.core.record_files: a published repo's Hub hashes held against its record's file list."""

from __future__ import annotations

from bot.core.hashes import HubHash
from bot.core.record import FileDigest
from bot.core.record_files import differs_from_record

SHA_A, SHA_B = "a" * 64, "b" * 64
BLOB_A, BLOB_B = "1" * 40, "2" * 40

FILES = {
    "openvino_model.bin": FileDigest(sha256=SHA_A, size=100),
    "config.json": FileDigest(sha256=SHA_B, size=10, git_blob_id=BLOB_A),
}
RENDERED = ("README.md", "openvino_export.json")


def listed(**overrides: HubHash) -> dict[str, HubHash]:
    base = {
        "openvino_model.bin": HubHash(size=100, sha256=SHA_A, blob_id=BLOB_B),
        "config.json": HubHash(size=10, blob_id=BLOB_A),
        "README.md": HubHash(size=5, blob_id=BLOB_B),
        "openvino_export.json": HubHash(size=5, blob_id=BLOB_B),
    }
    return {**base, **overrides}


def test_exact_repo_matches():
    assert differs_from_record(listed(), FILES, RENDERED) is None


def test_missing_file():
    hashes = listed()
    del hashes["config.json"]
    assert differs_from_record(hashes, FILES, RENDERED) == "config.json is missing"


def test_lfs_file_with_other_sha256_differs():
    hashes = listed(**{"openvino_model.bin": HubHash(size=100, sha256=SHA_B)})
    assert differs_from_record(hashes, FILES, RENDERED) == "openvino_model.bin differs from its record"


def test_lfs_file_with_other_size_differs():
    hashes = listed(**{"openvino_model.bin": HubHash(size=101, sha256=SHA_A)})
    assert differs_from_record(hashes, FILES, RENDERED) == "openvino_model.bin differs from its record"


def test_regular_file_compared_by_blob_id():
    hashes = listed(**{"config.json": HubHash(size=10, blob_id=BLOB_B)})
    assert differs_from_record(hashes, FILES, RENDERED) == "config.json differs from its record"


def test_regular_file_without_recorded_blob_id_differs():
    files = {**FILES, "config.json": FileDigest(sha256=SHA_B, size=10)}
    assert differs_from_record(listed(), files, RENDERED) == "config.json differs from its record"


def test_extra_files_are_listed_sorted():
    hashes = listed(**{"z.py": HubHash(size=1, blob_id=BLOB_A), "evil.bin": HubHash(size=1, blob_id=BLOB_A)})
    assert differs_from_record(hashes, FILES, RENDERED) == "it holds files its record does not list (evil.bin, z.py)"


def test_rendered_files_are_not_extra_but_others_are():
    assert differs_from_record(listed(), FILES, ("README.md",)) == (
        "it holds files its record does not list (openvino_export.json)"
    )
