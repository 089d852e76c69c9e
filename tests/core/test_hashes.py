"""bot/core/hashes.py: a file's hashes as the Hub states them, and the list of verified files beside a download."""

from __future__ import annotations

import hashlib

import pytest

from bot.core.errors import Failure
from bot.core.hashes import FileHash, HubHash, hash_file, manifest_path, mismatch, read_manifest, write_manifest
from hubserver.gitobjects import git_blob_sha1


def test_one_read_gives_the_sha256_and_the_git_blob_id_the_hub_lists(tmp_path):
    data = b'{"model_type": "qwen3"}\n'
    path = tmp_path / "config.json"
    path.write_bytes(data)
    local = hash_file(path)
    assert local.file == FileHash(hashlib.sha256(data).hexdigest(), len(data))
    assert local.blob_id == git_blob_sha1(data)  # the local Hub's (and git's) blob id
    assert mismatch(local, HubHash(len(data), blob_id=git_blob_sha1(data))) is None
    assert mismatch(local, HubHash(len(data), sha256=local.file.sha256.upper())) is None
    wrong = mismatch(local, HubHash(len(data), blob_id=git_blob_sha1(data + b" ")))
    assert wrong is not None and local.blob_id in wrong and git_blob_sha1(data + b" ") in wrong
    shorter = mismatch(local, HubHash(len(data) - 1, sha256=local.file.sha256))
    assert shorter is not None and f"({len(data) - 1} bytes)" in shorter  # an LFS file: sha256 and size


def test_the_manifest_lives_beside_the_folder_and_a_damaged_one_is_refused(tmp_path):
    folder = tmp_path / "draft"
    folder.mkdir()
    files = {"model.safetensors": FileHash("a" * 64, 10), "config.json": FileHash("b" * 64, 2)}
    assert write_manifest(folder, files) == manifest_path(folder) == tmp_path / "draft.files.json"
    assert read_manifest(folder) == files and list(folder.iterdir()) == []
    for damaged in ('{"x": {"sha256": "zz", "size": 1}}', '{"x": {"sha256": "' + "a" * 64 + '", "size": -1}}',
                    '["x"]', '{"x": 3}', "{"):  # fmt: skip
        manifest_path(folder).write_text(damaged)
        with pytest.raises(Failure, match="verified files for draft"):
            read_manifest(folder)
    with pytest.raises(Failure):
        read_manifest(tmp_path / "never-downloaded")
