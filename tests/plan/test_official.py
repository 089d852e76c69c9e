"""bot.plan.official: which files of an official target repo a build downloads (`pin_official` on listings)."""

from __future__ import annotations

import pydantic
import pytest

from bot.discover.candidates import MAX_SMALL_FILE_BYTES
from bot.hub import RepoFiles
from bot.plan.official import IR_FILE, TOKENIZER_IRS, OfficialRepo, pin_official

SHA = "f" * 40
TEXT_IR = {"openvino_model.xml": 1000, "openvino_model.bin": 5_000_000}
COMMON = {"config.json": 100, **{name: 10 for name in TOKENIZER_IRS}}


def listing(sizes: dict[str, int], *, gated: bool = False, private: bool = False) -> RepoFiles:
    return RepoFiles(repo_id="OpenVINO/Qwen3-Tiny-int4-ov", sha=SHA, sizes=sizes, gated=gated, private=private)


def test_text_target_is_pinned_with_only_the_allowed_files():
    sizes = {
        **TEXT_IR,
        **COMMON,
        "README.md": 50,
        ".gitattributes": 5,
        "tokenizer_config.json": 20,
        "chat_template.jinja": 30,
        "model.safetensors": 10**9,
        "modeling.py": 10,
        "pytorch_model.pt": 10,
        "sub/openvino_model.xml": 10,
    }
    official, why = pin_official(listing(sizes), is_vlm=False)
    assert why is None
    assert official is not None
    assert official.files == tuple(sorted([*TEXT_IR, *COMMON, "tokenizer_config.json", "chat_template.jinja"]))
    assert official.ir_bytes == sum(TEXT_IR.values()) + sum(COMMON.values()) + 20 + 30
    assert official.pinned == f"OpenVINO/Qwen3-Tiny-int4-ov@{SHA}"
    assert official.short == "OpenVINO/Qwen3-Tiny-int4-ov@fffffff"


def test_vlm_target_needs_the_language_model_ir():
    sizes = {**TEXT_IR, **COMMON}
    official, why = pin_official(listing(sizes), is_vlm=True)
    assert official is None
    assert why == "holds no openvino_language_model.xml, openvino_language_model.bin"
    vlm = {
        "openvino_language_model.xml": 1,
        "openvino_language_model.bin": 2,
        "openvino_vision_embeddings_model.xml": 3,
        "openvino_vision_embeddings_model.bin": 4,
        **COMMON,
    }
    official, why = pin_official(listing(vlm), is_vlm=True)
    assert why is None
    assert official is not None
    assert "openvino_vision_embeddings_model.bin" in official.files


def test_missing_tokenizer_irs_are_named():
    sizes = {**TEXT_IR, "config.json": 100, "openvino_tokenizer.xml": 1, "openvino_tokenizer.bin": 1}
    assert pin_official(listing(sizes), is_vlm=False) == (
        None,
        "holds no openvino_detokenizer.xml, openvino_detokenizer.bin",
    )


def test_missing_config():
    sizes = {**TEXT_IR, **{name: 10 for name in TOKENIZER_IRS}}
    assert pin_official(listing(sizes), is_vlm=False) == (None, "holds no config.json")


@pytest.mark.parametrize(("gated", "private"), [(True, False), (False, True)])
def test_gated_or_private_is_refused(gated, private):
    official, why = pin_official(listing({**TEXT_IR, **COMMON}, gated=gated, private=private), is_vlm=False)
    assert official is None
    assert why == "is gated or private"


def test_oversized_non_ir_file_is_refused_but_large_ir_is_not():
    big = MAX_SMALL_FILE_BYTES + 1
    official, why = pin_official(listing({**TEXT_IR, **COMMON, "tokenizer.json": big}), is_vlm=False)
    assert official is None
    assert why == f"tokenizer.json is over the {MAX_SMALL_FILE_BYTES}-byte limit for a non-IR file"
    official, why = pin_official(listing({**COMMON, "openvino_model.xml": 1, "openvino_model.bin": big}), is_vlm=False)
    assert why is None
    assert official is not None and official.ir_bytes >= big


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("openvino_model.xml", True),
        ("openvino_language_model.bin", True),
        ("openvino_model.onnx", False),
        ("my_openvino_model.xml", False),
        ("openvino_model.xml.bak", False),
        ("openvino_../x.xml", False),
    ],
)
def test_ir_file_pattern(name, matches):
    assert bool(IR_FILE.fullmatch(name)) is matches


def test_official_repo_requires_a_full_commit_sha():
    with pytest.raises(pydantic.ValidationError):
        OfficialRepo(repo="OpenVINO/x", revision="main", files=(), ir_bytes=0)
    with pytest.raises(pydantic.ValidationError):
        OfficialRepo(repo="OpenVINO x", revision=SHA, files=(), ir_bytes=0)
