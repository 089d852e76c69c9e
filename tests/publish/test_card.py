"""Card rendering of both templates against fixture records (no export): LLM and VLM targets, plain wording."""

from __future__ import annotations

from pathlib import Path

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
    reused = built.model_copy(
        update={"export": built.export.model_copy(update={"target_reused_from": f"{REPOS.target}@{'c' * 40}"})}
    )
    text = render_draft_card(reused)
    assert "validated against that repo's published int4 IR (commit `ccccccc`" in text
    assert "built and validated in the same run" not in text


# ---- what the fingerprints cover ----

CARD_TEMPLATES = {
    "draft_card.md.j2",
    "target_card.md.j2",
    "_draft_formats.md.j2",
    "_int4_settings.md.j2",
    "_quality.md.j2",
    "_usage.md.j2",
    "_usage_vlm.md.j2",
}


def _edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_card_fingerprint_covers_its_templates_its_code_and_matplotlib_but_not_the_status_page(tmp_path):
    import importlib.metadata
    import shutil

    from bot.publish import card, charts

    assert set(card.card_templates()) == CARD_TEMPLATES  # the partials too, the conditional include's both names
    code = [path for path in card.rendered_by() if path.suffix == ".py"]
    assert code == [Path(card.__file__), Path(charts.__file__)]
    version = importlib.metadata.version(card.PLOTTING)
    assert card.template_fingerprint() == card.files_fingerprint(card.rendered_by(), plotting=version)
    assert card.files_fingerprint(code, plotting=version) != card.files_fingerprint(code, plotting=version + ".1")
    templates = tmp_path / "templates"
    shutil.copytree(card.TEMPLATES, templates)
    before = card.template_fingerprint(templates)
    _edit(templates / "status_card.md.j2", "#", "# changed ")
    assert card.template_fingerprint(templates) == before
    _edit(templates / "_usage_vlm.md.j2", "import", "import  ")  # named only on one side of an `if`
    assert card.template_fingerprint(templates) != before


def test_the_status_page_fingerprint_covers_its_template_page_and_chart_code_not_the_cards(tmp_path, monkeypatch):
    import shutil

    from bot.publish import charts
    from bot.status import page

    files = page.rendered_by()
    assert [p.name for p in files] == ["status_card.md.j2", "page.py", "charts.py"] and all(p.is_file() for p in files)
    assert files[1:] == [Path(page.__file__), Path(charts.__file__)]
    templates = tmp_path / "templates"
    shutil.copytree(page.TEMPLATES, templates)
    monkeypatch.setattr(page, "TEMPLATES", templates)
    before = page.renderer_fingerprint()
    _edit(templates / "draft_card.md.j2", "## Usage", "## Usage (changed)")
    assert page.renderer_fingerprint() == before
    _edit(templates / "status_card.md.j2", "#", "# changed ")
    assert page.renderer_fingerprint() != before
