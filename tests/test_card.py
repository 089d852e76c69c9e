"""Card rendering of both templates against fixture records (no export): LLM and VLM targets, plain wording."""

from __future__ import annotations

import jinja2
import pytest
from huggingface_hub import ModelCard

from bot.core.record import TargetRecord
from bot.publish.card import render_draft_card, render_target_card
from tests.records import REPOS, build_record


def cards(**kwargs) -> tuple[str, str]:
    built = build_record(**kwargs).published_as(REPOS, "fp")
    target = TargetRecord.from_build(built, [built.summary(REPOS.draft)], "fp")
    return render_draft_card(built), render_target_card(target, target_repo=REPOS.target)


@pytest.mark.parametrize("is_vlm", [False, True])
def test_both_cards_render_with_metadata_the_hub_parser_reads(is_vlm):
    draft, target = cards(is_vlm=is_vlm)
    draft_meta, target_meta = ModelCard(draft).data.to_dict(), ModelCard(target).data.to_dict()
    assert draft_meta["base_model"] == "z-lab/Qwen3-Tiny-DFlash-b16" and draft_meta["license"] == "mit"
    assert target_meta["base_model"] == "Qwen/Qwen3-Tiny" and target_meta["license"] == "apache-2.0"
    assert draft_meta["pipeline_tag"] == "text-generation"
    assert target_meta["pipeline_tag"] == ("image-text-to-text" if is_vlm else "text-generation")
    assert "dflash" in draft_meta["tags"] and "openvino" in target_meta["tags"]
    assert ("VLMPipeline" in draft) == is_vlm and ("VLMPipeline" in target) == is_vlm
    assert REPOS.target in draft and REPOS.draft in target
    assert "num_assistant_tokens = 3" in draft  # the recommended k from the record


def test_a_draft_that_speeds_up_says_so_with_its_figure():
    draft, _ = cards(speedups=(1.4, 1.1))
    assert "**Speed-up**: 1.40× over plain greedy decoding at `num_assistant_tokens=3`" in draft
    assert "Recommended: `num_assistant_tokens = 3`" in draft


def test_a_draft_slower_everywhere_says_so_plainly_instead_of_recommending():
    draft, _ = cards(speedups=(0.6, 0.5))
    assert "no speed-up on the validation machine: CPU (Test CPU)" in draft
    assert "Recommended:" not in draft


def test_templates_refuse_what_the_record_does_not_have(tmp_path):
    (tmp_path / "draft_card.md.j2").write_text("{{ p.validation.no_such_field }}")
    with pytest.raises(jinja2.UndefinedError):
        render_draft_card(build_record().published_as(REPOS, "fp"), folder=tmp_path)


def test_a_per_row_draft_card_says_pagedattention_ready_and_drops_the_stateful_limits():
    from bot.core.record import BuildRecord
    from tests.records import record_data

    data = record_data()
    data["draft"]["format"] = data["toolchain"]["draft_format"] = data["inspect"]["draft"]["format"] = "per-row"
    built = BuildRecord.model_validate(data).published_as(REPOS, "fp")
    card = render_draft_card(built)
    assert "**PagedAttention-ready**" in card and "one active request" not in card
    stateful, _ = cards()
    assert "**stateful**" in stateful and "one active request" in stateful


def test_a_draft_built_against_a_reused_target_says_which_published_ir_it_was_validated_with():
    built = build_record().published_as(REPOS, "fp")
    fresh = render_draft_card(built)
    assert "built and validated in the same run" in fresh and "not exported again" not in fresh
    reused = built.model_copy(update={"export": built.export.model_copy(
        update={"target_reused_from": f"{REPOS.target}@{'c' * 40}"})})
    text = render_draft_card(reused)
    assert "validated against that repo's published int4 IR (commit `ccccccc`" in text
    assert "built and validated in the same run" not in text
