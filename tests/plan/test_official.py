"""bot.plan.official: which files of an official target repo a build downloads (`pin_official` on listings)."""

from __future__ import annotations

import pydantic
import pytest

from bot.core.hub_records import RepoFiles
from bot.discover.candidates import MAX_SMALL_FILE_BYTES
from bot.plan.official import IR_FILE, TOKENIZER_IRS, OfficialRepo, pin_official, why_not_named

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


# ---- issue 29: an official repo serves only the model its card or record names ----

FT, BASE = "ft-org/Qwen3-X", "Qwen/Qwen3-X"


def named(card: dict, sizes: dict[str, int] | None = None) -> RepoFiles:
    return RepoFiles(
        repo_id="OpenVINO/Qwen3-X-int4-ov", sha=SHA, sizes=sizes or {}, gated=False, private=False, card_data=card
    )


@pytest.mark.parametrize(
    ("card", "target", "why"),
    [
        ({"base_model": BASE}, BASE, None),
        ({"base_model": ["other/x", "qwen/qwen3-x"]}, BASE, None),  # a list; repo ids compare as the Hub does
        ({"base_model": BASE}, FT, f"its card names {BASE} as its model (base_model), not {FT}"),
        ({}, FT, f"neither its card (base_model) nor a record names {FT} as its model"),
        ({"base_model": 42}, FT, f"neither its card (base_model) nor a record names {FT} as its model"),
    ],
)
def test_an_official_repo_is_an_export_of_the_target_only_by_its_own_word(card, target, why):
    assert why_not_named(None, named(card), target) == why  # no record in the listing: the reader is never asked


def test_a_fine_tunes_draft_never_gets_the_base_models_official_export(hub):
    """`ft-org/Qwen3-X` maps to `OpenVINO/Qwen3-X-int4-ov` by name; that repo's card says it is an export of
    `Qwen/Qwen3-X`: not pinned for the fine-tune, pinned for the base model. A repo whose record names the
    fine-tune serves it."""
    from huggingface_hub import HfApi

    from bot.core import record
    from bot.core.recipe import PublishSettings
    from bot.core.record import TargetRecord
    from bot.hub.client import Hub
    from bot.plan.official import find_official
    from tests.conftest import HUB_TOKEN
    from tests.records import build_record

    api = HfApi(endpoint=hub.url, token=HUB_TOKEN)
    for repo in (BASE, FT):
        api.create_repo(repo, exist_ok=True)
    files = {name: b"x" for name in (*TEXT_IR, *COMMON)}
    card = f"---\nbase_model: {BASE}\nbase_model_relation: quantized\n---\n# int4\n".encode()
    official = "OpenVINO/Qwen3-X-int4-ov"
    api.create_repo(official)
    for name, data in {**files, "README.md": card}.items():
        api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id=official)
    reader = Hub(hub.url)
    publish = PublishSettings(namespace="me")
    assert publish.official_target_repos(FT) == [official]
    pinned, why = find_official(reader, publish, FT, is_vlm=False)
    assert pinned is None and why == f"{official} its card names {BASE} as its model (base_model), not {FT}"
    pinned, why = find_official(reader, publish, BASE, is_vlm=False)
    assert why is None and pinned is not None and pinned.repo == official

    built = build_record()
    target = TargetRecord.from_build(
        built.model_copy(update={"target": built.target.model_copy(update={"repo": FT})}), [], "fp"
    )
    mine = "me/ft-org__Qwen3-X"
    api.create_repo(mine)
    for name, data in {**files, record.PROVENANCE_FILE: record.to_json(target).encode()}.items():
        api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id=mine)
    by_record = PublishSettings(namespace="me", official_targets=["me/{target_namespace}__{target_name}"])
    pinned, why = find_official(reader, by_record, FT, is_vlm=False)
    assert why is None and pinned is not None and pinned.repo == mine
    pinned, why = find_official(reader, by_record, "ft-org/Qwen3-X", is_vlm=True)
    assert pinned is None  # the VLM IR is not there: the name check never saves a repo without its IR
