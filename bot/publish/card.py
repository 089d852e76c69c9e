"""Model cards rendered from `templates/*.md.j2` (docs/design.md §7).

Metadata goes through `huggingface_hub.ModelCardData` so the YAML is what the Hub expects; the body is a Jinja2
template rendered with `StrictUndefined`, so a missing figure fails the render instead of printing blank.
The card is written into the bundle and committed with the rest: nothing here contacts the Hub.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from huggingface_hub import ModelCardData

from bot.core import fingerprints
from bot.core.draft_formats import facts
from bot.core.fingerprints import (
    CARD_CODE,
    DRAFT_TEMPLATE,
    PLOTTING,
    TARGET_TEMPLATE,
    TEMPLATES,
    card_templates,
    files_fingerprint,
    rendered_by,
    template_fingerprint,
)
from bot.core.record import BuildRecord, TargetRecord

# What renders a card besides its record lives in `bot.core.fingerprints`, so planning can compare its fingerprint.
__all__ = [
    "CARD_CODE",
    "DRAFT_TEMPLATE",
    "PLOTTING",
    "TARGET_TEMPLATE",
    "TEMPLATES",
    "card_templates",
    "files_fingerprint",
    "render_draft_card",
    "render_target_card",
    "rendered_by",
    "template_fingerprint",
]


def _environment(folder: Path | None) -> jinja2.Environment:
    return jinja2.Environment(
        # The folder the fingerprint hashes (`bot.core.fingerprints.TEMPLATES`), looked up when a card is rendered.
        loader=jinja2.FileSystemLoader(folder or fingerprints.TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


# Bits per weight of each weight format the bot publishes (`bot.core.naming.DRAFT_WEIGHT_FORMATS`).
FORMAT_BITS = {"int4": 4, "int8": 8}


def _metadata(
    *,
    base_model: str,
    license_: str | None,
    license_link: str | None,
    weight_format: str,
    tags: list[str],
    pipeline_tag: str,
) -> str:
    """The card's YAML: the weight format is a tag and the `quantization` entry, from the record, never assumed."""
    quantization = {"weight_format": weight_format, "bits": FORMAT_BITS.get(weight_format), "library": "nncf"}
    data = ModelCardData(
        base_model=base_model,
        base_model_relation="quantized",
        license=license_,
        license_link=license_link,
        library_name="openvino",
        pipeline_tag=pipeline_tag,
        tags=["openvino", "nncf", weight_format, *tags],
        quantization={key: value for key, value in quantization.items() if value is not None},
    )
    return data.to_yaml()


def render_draft_card(
    built: BuildRecord,
    *,
    folder: Path | None = None,
    superseded_by: str | None = None,
    install: str | None = None,
    target_commit: str | None = None,
    draft_revision: str | None = None,
) -> str:
    """The draft repo's README.md from its published record (`built.repos` names both repos).

    Args:
        superseded_by: the repo this draft moved to (another weight format's): its card then says so at the top.
        install: the pip requirement of the source that built the card (`bot.publish.install.install_line`); the
            card gives no install line without one.
        target_commit: the target repo's commit holding the IR this draft was validated with, when the record does
            not name it (an official or reused target's is in the record).
        draft_revision: a revision of the draft repo that holds this card's files (a tag: a card cannot name the
            commit it is part of); the snippet downloads the draft at its head without one.
    """
    if built.repos is None:
        raise ValueError("a draft card needs the record's repos (set by the build of a planned job)")
    family = "dspark" if built.draft.kind == "dspark" else "dflash"
    metadata = _metadata(
        base_model=built.source.repo or "local",
        license_=built.source.license,
        license_link=built.source.license_link,
        weight_format=built.draft_weight_format,
        tags=[family, "speculative-decoding"],
        pipeline_tag="text-generation",
    )
    return (
        _environment(folder)
        .get_template(DRAFT_TEMPLATE)
        .render(
            metadata=metadata,
            p=built,
            draft_repo=built.repos.draft,
            target_repo=built.repos.target,
            family=family,
            weight_format=built.draft_weight_format,
            superseded_by=superseded_by,
            best=built.validation.best_run,
            speeds_up=built.validation.speeds_up,
            facts=facts(built.draft.format),
            install=install,
            target_pin=_target_pin(built, target_commit),
            draft_pin=draft_revision,
        )
    )


def _target_pin(built: BuildRecord, target_commit: str | None) -> str | None:
    """The target repo's commit the draft was validated with: the official one's, the reused IR's, or the one the
    publisher committed it in (None: unknown, the snippet downloads the head)."""
    if built.official_target is not None and built.official_target.used:
        return built.official_target.revision
    if built.export.target_reused_from:
        return built.export.target_reused_from.rsplit("@", 1)[-1]
    return target_commit


def render_target_card(target: TargetRecord, *, target_repo: str, folder: Path | None = None) -> str:
    """The target repo's README.md; `target.drafts` lists the draft repos validated against it, with figures."""
    metadata = _metadata(
        base_model=target.target.repo or "local",
        license_=target.target.license,
        license_link=target.target.license_link,
        weight_format=target.export.weight_format,
        tags=["speculative-decoding"],
        pipeline_tag="image-text-to-text" if target.target.is_vlm else "text-generation",
    )
    return (
        _environment(folder)
        .get_template(TARGET_TEMPLATE)
        .render(metadata=metadata, p=target, target_repo=target_repo, drafts=target.drafts)
    )
