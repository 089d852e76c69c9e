"""bot.plan.reuse: the pure decisions on records (same inputs? provably the bot's files?) and `check_reused` on a
downloaded folder with its manifest; no Hub."""

from __future__ import annotations

import hashlib

import pydantic
import pytest

from bot.core import record
from bot.core.errors import Failure, Stage
from bot.core.hashes import FileHash, write_manifest
from bot.core.recipe import ExportSettings
from bot.core.record import FileDigest, TargetRecord
from bot.core.toolchain import Toolchain
from bot.plan import reuse
from bot.plan.reuse import ReusedTarget, check_reused, why_not_reusable
from tests.records import TARGET_SHA, TOOLCHAIN, build_record

TASK = "text-generation-with-past"
TOOLS = Toolchain(versions=dict(TOOLCHAIN), capabilities=frozenset({"dflash-stateful"}))


def published(files: dict[str, FileDigest] | None = None) -> TargetRecord:
    target = TargetRecord.from_build(build_record(), [], "fp")
    return target.model_copy(update={"files": files}) if files is not None else target


def test_same_inputs_are_reusable():
    assert why_not_reusable(published(), TARGET_SHA, ExportSettings(), TASK, TOOLS) is None


def test_other_target_revision():
    reason = why_not_reusable(published(), "c" * 40, ExportSettings(), TASK, TOOLS)
    assert reason == "built from target revision bbbbbbb, not ccccccc"


def test_other_export_settings():
    assert why_not_reusable(published(), TARGET_SHA, ExportSettings(sym=True), TASK, TOOLS) == (
        "built with other export settings"
    )
    assert why_not_reusable(published(), TARGET_SHA, ExportSettings(), "image-text-to-text", TOOLS) == (
        "built with other export settings"
    )


def test_export_settings_outside_the_ir_bytes_do_not_matter():
    export = ExportSettings(timeout_s=10, draft_weight_formats=["int8"])
    assert why_not_reusable(published(), TARGET_SHA, export, TASK, TOOLS) is None


def test_other_toolchain_names_the_changed_packages():
    tools = Toolchain(versions={**TOOLCHAIN, "openvino": "2027.0", "nncf": "9"}, capabilities=frozenset())
    assert why_not_reusable(published(), TARGET_SHA, ExportSettings(), TASK, tools) == (
        "built with another toolchain (nncf, openvino)"
    )


def test_capabilities_and_profile_do_not_matter():
    tools = Toolchain(versions=dict(TOOLCHAIN), capabilities=frozenset({"dflash-per-row"}), profile="next")
    assert why_not_reusable(published(), TARGET_SHA, ExportSettings(), TASK, tools) is None


def test_record_without_file_hashes_is_not_trusted():
    reason = reuse._why_not_trusted(None, "o/t", "d" * 40, published(), "bot", False)
    assert reason == "its record lists no file hashes (built by an older bot)"


def test_record_without_its_ir_file_is_not_trusted():
    files = {"config.json": FileDigest(sha256="1" * 64, size=1)}
    reason = reuse._why_not_trusted(None, "o/t", "d" * 40, published(files), "bot", False)
    assert reason == "its record does not list its IR file"


def test_reused_target_model():
    pinned = ReusedTarget(repo="OpenVINO-drafts/Qwen3-Tiny-int4-ov", revision="e" * 40, files=("a",), ir_bytes=3)
    assert pinned.pinned == "OpenVINO-drafts/Qwen3-Tiny-int4-ov@" + "e" * 40
    with pytest.raises(pydantic.ValidationError):
        ReusedTarget(repo="not a repo", revision="e", files=(), ir_bytes=0)
    with pytest.raises(pydantic.ValidationError):
        ReusedTarget(repo="a/b", revision="e", files=(), ir_bytes=-1)


def downloaded(tmp_path, contents: dict[str, bytes], recorded: dict[str, bytes] | None = None):
    """A target folder as `Hub.download` leaves it: the files, the record and the manifest beside the folder."""
    folder = tmp_path / "target"
    folder.mkdir()
    for name, data in contents.items():
        (folder / name).write_bytes(data)
    digests = {
        name: FileDigest(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        for name, data in (contents if recorded is None else recorded).items()
    }
    record.write(published(digests), folder)
    write_manifest(folder, {n: FileHash(hashlib.sha256(d).hexdigest(), len(d)) for n, d in contents.items()})
    return folder


IR = {"openvino_model.xml": b"<xml/>", "openvino_model.bin": b"\x00" * 16}


def test_check_reused_accepts_the_recorded_files(tmp_path):
    folder = downloaded(tmp_path, IR)
    found = check_reused(folder, TARGET_SHA, ExportSettings(), TASK, TOOLS)
    assert set(found.files or {}) == set(IR)


def test_check_reused_refuses_a_file_other_than_recorded(tmp_path):
    folder = downloaded(tmp_path, IR, {**IR, "openvino_model.bin": b"\x01" * 16})
    with pytest.raises(Failure, match=r"do not match its record \(openvino_model.bin\)") as caught:
        check_reused(folder, TARGET_SHA, ExportSettings(), TASK, TOOLS)
    assert caught.value.stage is Stage.REUSE_TARGET


def test_check_reused_refuses_an_unrecorded_file(tmp_path):
    folder = downloaded(tmp_path, {**IR, "extra.json": b"{}"}, IR)
    with pytest.raises(Failure, match=r"extra.json"):
        check_reused(folder, TARGET_SHA, ExportSettings(), TASK, TOOLS)


def test_check_reused_refuses_changed_inputs(tmp_path):
    folder = downloaded(tmp_path, IR)
    with pytest.raises(Failure, match=r"changed since planning \(built from target revision"):
        check_reused(folder, "c" * 40, ExportSettings(), TASK, TOOLS)


def test_check_reused_without_a_record(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(Failure, match="record is unusable") as caught:
        check_reused(folder, TARGET_SHA, ExportSettings(), TASK, TOOLS)
    assert caught.value.stage is Stage.REUSE_TARGET
