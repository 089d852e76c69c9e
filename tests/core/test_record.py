"""The build record: round trip, the committed schema, the rule for older versions, and what "current" means."""

from __future__ import annotations

import json

import pytest

from bot.core import record
from bot.core.record import (
    BuildInputs,
    RecordError,
    TargetRecord,
    parse_draft_record,
    parse_target_record,
    to_json,
)
from tests.records import REPOS, TOOLCHAIN, build_record, record_data


def test_a_record_round_trips_through_its_json_with_the_published_field_names():
    built = build_record()
    text = to_json(built)
    data = json.loads(text)
    assert data["toolchain"]["openvino-genai"] == "2026.4.1.0" and "openvino_genai" not in data["toolchain"]
    assert data["source"] == {
        "repo": "z-lab/Qwen3-Tiny-DFlash-b16",
        "revision": "a" * 40,
        "license": "mit",
        "license_link": None,
    }
    assert parse_draft_record(text) == built
    assert data == json.loads(to_json(parse_draft_record(text)))


def test_the_committed_schema_is_the_one_the_models_generate(repo_root):
    committed = (repo_root / "schemas" / "openvino_export.schema.json").read_text(encoding="utf-8")
    assert committed == record.schema_text(), "stale schema: run `python -m bot.core.record --write`"
    schema = json.loads(committed)
    assert {"BuildRecord", "TargetRecord"} <= set(schema["$defs"])
    assert "openvino-genai" in schema["$defs"]["ToolchainInfo"]["properties"]


def test_a_version_1_record_is_read_by_the_one_upgrade_rule():
    data = record_data()
    data["schema_version"] = 1
    data["recipe_fingerprint"] = data["recipe"]["fingerprint"]
    upgraded = parse_draft_record(json.dumps(data))
    assert upgraded.schema_version == record.SCHEMA_VERSION
    assert upgraded.recipe.fingerprint == data["recipe_fingerprint"]


def test_a_version_2_record_is_read_without_a_file_list_and_certifies_no_file():
    data = record_data()
    data["schema_version"] = 2
    upgraded = parse_draft_record(json.dumps(data))
    assert upgraded.schema_version == record.SCHEMA_VERSION and upgraded.files is None
    target = TargetRecord.from_build(upgraded, [], "fp")
    assert target.files is None and target.source_files is None  # never reused (bot.plan.reuse)


@pytest.mark.parametrize(
    "text,why",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({**record_data(), "schema_version": 99}), "schema_version 99"),
        (json.dumps({**record_data(), "status": "maybe"}), "field status"),
        (json.dumps({**record_data(), "surprise": 1}), "surprise"),
    ],
)
def test_records_this_bot_cannot_trust_are_refused_with_the_reason(text, why):
    with pytest.raises(RecordError, match=why):
        parse_draft_record(text)


def test_a_target_record_is_built_from_the_draft_build_and_merges_drafts():
    built = build_record()
    summary = built.summary(REPOS.draft)
    target = TargetRecord.from_build(built, [summary], "card1")
    assert parse_target_record(to_json(target)) == target
    other = summary.model_copy(update={"repo": "ns/Other-int4-ov", "source_revision": "c" * 40})
    merged = target.with_draft(other, "card2")
    assert [d.repo for d in merged.drafts] == ["OpenVINO-drafts/Qwen3-Tiny-DFlash-b16-int4-ov", "ns/Other-int4-ov"]
    assert merged.card.template_fingerprint == "card2"
    assert merged.target_inputs() == target.target_inputs()
    assert summary.speedup == 1.4 and summary.recommended_num_assistant_tokens == 3


def test_inputs_changes_name_every_difference_and_ignore_what_is_unknown():
    published = build_record().inputs()
    assert published.changes_to(published) == []
    wanted = BuildInputs(
        source_revision="c" * 40,
        target_revision="d" * 40,
        recipe_fingerprint="f" * 16,
        draft_format="per-row",
        toolchain={**TOOLCHAIN, "openvino": "2027.0.0"},
    )
    reasons = published.changes_to(wanted)
    assert reasons == [
        "source changed (aaaaaaa -> ccccccc)",
        "target changed (bbbbbbb -> ddddddd)",
        "recipe changed",
        "toolchain changed (openvino 2026.4.1 -> 2027.0.0)",
        "draft format changed (stateful -> per-row)",
    ]
    unknown = wanted.model_copy(
        update={
            "source_revision": None,
            "target_revision": None,
            "draft_format": None,
            "recipe_fingerprint": published.recipe_fingerprint,
            "toolchain": TOOLCHAIN,
        }
    )
    assert published.changes_to(unknown) == []


def test_published_as_adds_repos_and_card():
    published = build_record().published_as(REPOS, "fp")
    assert published.repos == REPOS and published.card.template_fingerprint == "fp"
    assert parse_draft_record(to_json(published)) == published
