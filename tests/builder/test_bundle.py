"""The bundle's allow-list and the record's file list (issue 20): nothing a step of the bot did not write reaches a
published folder, and publish holds each folder to its record. Real files, real hashes; no build needed."""

from __future__ import annotations

import hashlib

import pytest

from bot.builder.bundle import (
    check_export_output,
    check_folder,
    digests,
    source_files,
    write_target_folder,
)
from bot.core.errors import Failure
from bot.core.hashes import HubHash, hash_file, write_manifest
from bot.core.record_files import differs_from_record


def _export_folder(folder, *extra: str):
    folder.mkdir(parents=True)
    for name in (
        "openvino_model.xml",
        "openvino_model.bin",
        "config.json",
        "tokenizer.json",
        "chat_template.jinja",
        "openvino_tokenizer.xml",
        "openvino_tokenizer.bin",
        *extra,
    ):
        (folder / name).write_bytes(name.encode() * 3)
    return folder


def test_an_export_folder_with_a_file_no_step_writes_fails_the_build_with_its_name(tmp_path):
    check_export_output(_export_folder(tmp_path / "clean"), "target")
    planted = _export_folder(tmp_path / "planted", "sitecustomize.py")
    (planted / "models").mkdir()
    with pytest.raises(
        Failure,
        match=r"target export folder holds files no step of the bot writes: "
        r"models/, sitecustomize.py",
    ):
        check_export_output(planted, "target")
    linked = _export_folder(tmp_path / "linked")
    (linked / "generation_config.json").symlink_to("/etc/passwd")
    with pytest.raises(Failure, match=r"generation_config\.json"):
        check_export_output(linked, "draft")


def test_the_target_folder_holds_only_allow_listed_files(tmp_path):
    ir = _export_folder(tmp_path / "ir")
    out = write_target_folder(ir, tmp_path / "target")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ir.iterdir())


def test_publish_refuses_a_folder_that_differs_from_its_record(tmp_path):
    folder = _export_folder(tmp_path / "draft")
    listed = digests(folder)
    assert listed["config.json"].sha256 == hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()
    (folder / "README.md").write_text("card")  # rendered at publish: allowed, not listed
    check_folder(folder, listed, ("README.md",), "a/draft")
    (folder / "chat_template.jinja").write_text("{{ 'changed' }}")
    (folder / "evil.py").write_text("print(1)")
    with pytest.raises(Failure) as caught:
        check_folder(folder, listed, ("README.md",), "a/draft")
    assert "not in the record: evil.py" in caught.value.message
    assert "changed: chat_template.jinja (sha256 " in caught.value.message
    (folder / "config.json").unlink()
    with pytest.raises(Failure, match=r"missing: config\.json"):
        check_folder(folder, listed, ("README.md", "evil.py", "chat_template.jinja"), "a/draft")


def test_a_published_repo_is_compared_with_its_record_by_the_hubs_hashes(tmp_path):
    folder = _export_folder(tmp_path / "target")
    listed = digests(folder)
    hub = {name: HubHash(size=d.size, blob_id=d.git_blob_id) for name, d in listed.items()}
    hub["openvino_model.bin"] = HubHash(
        size=listed["openvino_model.bin"].size, sha256=listed["openvino_model.bin"].sha256
    )  # stored with LFS
    hub["README.md"] = HubHash(size=4, blob_id="0" * 40)
    assert differs_from_record(hub, listed, ("README.md",)) is None
    changed = dict(hub, **{"openvino_model.bin": HubHash(size=hub["openvino_model.bin"].size, sha256="f" * 64)})
    assert differs_from_record(changed, listed, ("README.md",)) == "openvino_model.bin differs from its record"
    extra = dict(hub, **{"model.py": HubHash(size=1, blob_id="1" * 40)})
    assert "does not list (model.py)" in differs_from_record(extra, listed, ("README.md",))


def test_source_files_come_from_the_verified_download_list_else_are_hashed(tmp_path):
    folder = _export_folder(tmp_path / "src", "model.safetensors")
    local = source_files(folder)
    assert "model.safetensors" in local and "openvino_model.bin" not in local  # only files a build may read
    write_manifest(folder, {"model.safetensors": hash_file(folder / "model.safetensors").file})
    assert list(source_files(folder)) == ["model.safetensors"]
