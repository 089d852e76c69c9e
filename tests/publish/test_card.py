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
    "_usage_download.md.j2",
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


def measured_record():
    """The fixture record with what a validation now measures: intervals, the machine, the method and the
    default-properties comparison."""
    from bot.core.record import BuildRecord
    from tests.records import record_data

    data = record_data()
    for run, (low, high) in zip(data["validation"]["runs"], ((1.3, 1.5), (1.0, 1.2)), strict=True):
        run.update(speedup_low=low, speedup_high=high, pairs=9)
    data["validation"].update(
        recommendation="k=3: fastest, x1.40 [1.30, 1.50], 9 pairs",
        machine={"cpu": "Test CPU", "cores": 4, "threads": 2, "memory_bytes": 16 * 2**30, "os": "Debian 12"},
        timing={
            "method": "plain and speculative interleaved",
            "min_pairs": 3,
            "max_pairs": 12,
            "target_share": 0.05,
            "budget_s": 600,
            "seconds": 41.0,
        },
        default_properties={
            "lossless": False,
            "num_assistant_tokens": 3,
            "prompts": 3,
            "prompt_index": 1,
            "first_difference": 17,
        },
    )
    return BuildRecord.model_validate(data).published_as(REPOS, "fp")


def test_the_card_gives_the_machine_the_method_and_each_speedup_with_its_interval():
    draft = render_draft_card(measured_record())
    validation = draft.split("## Validation", 1)[1].split("\n## ", 1)[0]
    assert "on CPU: Test CPU, 4 logical cores, 2 inference threads, 16.0 GiB of memory, Debian 12." in validation
    assert "OpenVINO GenAI `LLMPipeline` 2026.4.1.0 (OpenVINO 2026.4.1)" in validation
    assert "3 prompts, 33 new tokens per generation" in validation
    assert "(median of 9 pairs, 95 % interval 1.30×–1.50×)" in validation
    assert "| 3 | 3.50 | 14.0 | 10.0 | 1.40× | 1.30×–1.50× | 9 |" in validation
    assert "within ±5 % of the median, or at 12 pairs, or when its share of 600 s was spent" in validation
    assert "Recommended: `num_assistant_tokens = 3` (k=3: fastest, x1.40 [1.30, 1.50], 9 pairs)." in validation
    # "Lossless" with the properties it was measured under, and the defaults' own result.
    assert "under exact CPU properties on both models (`KV_CACHE_PRECISION=f32`" in validation
    assert (
        "**With GenAI's default CPU properties** (what the Usage snippet runs): not lossless: at "
        "num_assistant_tokens=3 prompt 1 first diverges from plain greedy at token 17." in validation
    )
    assert "# GenAI's default CPU properties, as validated: not lossless" in draft.split("## Usage", 1)[1]


def test_compatibility_gives_minimum_versions_and_calls_the_genai_path_experimental():
    draft, target = cards()
    compatibility = draft.split("## Compatibility", 1)[1].split("\n## ", 1)[0]
    assert "Runs with **OpenVINO GenAI 2026.4.1.0 and higher**" in compatibility
    assert "> **Experimental.** OpenVINO GenAI's DFlash support is experimental: GenAI's DFlash path supports " in (
        compatibility
    )
    assert "batch size 1" in compatibility and "| OpenVINO GenAI |" not in compatibility
    assert "**OpenVINO GenAI 2026.4.1.0 and higher**" in target.split("## Compatibility", 1)[1]


def test_the_install_line_is_the_pinned_source_or_absent_never_a_bare_package_name():
    sha = "c" * 40
    install = f"dflash-ov-bot @ git+https://github.com/someone/dflash-bot@{sha}"
    built = build_record().published_as(REPOS, "fp")
    pinned = render_draft_card(built, install=install).split("## Measure it on your machine", 1)[1]
    assert f'pip install "{install}"\ndflash-bot try {REPOS.draft} --device CPU\n' in pinned
    unknown = render_draft_card(built).split("## Measure it on your machine", 1)[1].split("\n## ", 1)[0]
    assert "pip install" not in unknown and f"`dflash-bot try {REPOS.draft} --device CPU`" in unknown
    assert "pip install dflash-ov-bot\n" not in render_draft_card(built, install=install)


def test_the_snippet_pins_the_draft_and_the_target_to_the_commits_validated_together():
    built = build_record().published_as(REPOS, "fp")
    usage = render_draft_card(built, target_commit="d" * 40, draft_revision="e" * 40).split("## Usage", 1)[1]
    assert f'hf.snapshot_download("{REPOS.target}", revision="{"d" * 40}")' in usage
    assert f'hf.snapshot_download("{REPOS.draft}", revision="{"e" * 40}")' in usage
    # A reused target's commit is in the record: the snippet pins it without being told.
    reused = built.model_copy(
        update={"export": built.export.model_copy(update={"target_reused_from": f"{REPOS.target}@{'f' * 40}"})}
    )
    assert f'revision="{"f" * 40}")' in render_draft_card(reused).split("## Usage", 1)[1]
    vlm = build_record(is_vlm=True).published_as(REPOS, "fp")
    assert f'revision="{"d" * 40}")' in render_draft_card(vlm, target_commit="d" * 40).split("## Usage", 1)[1]
