"""Model cards rendered from `templates/*.md.j2` (DESIGN §7).

Metadata goes through `huggingface_hub.ModelCardData` so the YAML is what the Hub expects; the body is a Jinja2
template rendered with `StrictUndefined`, so a missing figure fails the render instead of printing blank.
The card is written into the bundle and committed with the rest: nothing here contacts the Hub.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import jinja2

from bot.core import package_data
from bot.core.draft_formats import facts
from bot.core.record import BuildRecord, TargetRecord

TEMPLATES = package_data.folder(package_data.TEMPLATES)
DRAFT_TEMPLATE = "draft_card.md.j2"
TARGET_TEMPLATE = "target_card.md.j2"


def template_fingerprint(folder: Path | None = None) -> str:
    """Hash of every card template: a change re-renders published cards without a rebuild."""
    digest = hashlib.sha256()
    for path in sorted((folder or TEMPLATES).glob("*.j2")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _environment(folder: Path | None) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder or TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _metadata(
    *, base_model: str, license_: str | None, license_link: str | None, tags: list[str], pipeline_tag: str
) -> str:
    from huggingface_hub import ModelCardData

    data = ModelCardData(
        base_model=base_model,
        base_model_relation="quantized",
        license=license_,
        license_link=license_link,
        library_name="openvino",
        pipeline_tag=pipeline_tag,
        tags=tags,
    )
    return data.to_yaml()


def render_draft_card(built: BuildRecord, *, folder: Path | None = None) -> str:
    """The draft repo's README.md from its published record (`built.repos` names both repos)."""
    if built.repos is None:
        raise ValueError("a draft card needs the record's repos (BuildRecord.published_as)")
    family = "dspark" if built.draft.kind == "dspark" else "dflash"
    metadata = _metadata(
        base_model=built.source.repo or "local",
        license_=built.source.license,
        license_link=built.source.license_link,
        tags=["openvino", "nncf", "int4", family, "speculative-decoding"],
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
            best=built.validation.best_run,
            speeds_up=built.validation.speeds_up,
            facts=facts(built.draft.format),
        )
    )


def render_target_card(target: TargetRecord, *, target_repo: str, folder: Path | None = None) -> str:
    """The target repo's README.md; `target.drafts` lists the draft repos validated against it, with figures."""
    metadata = _metadata(
        base_model=target.target.repo or "local",
        license_=target.target.license,
        license_link=target.target.license_link,
        tags=["openvino", "nncf", "int4", "speculative-decoding"],
        pipeline_tag="image-text-to-text" if target.target.is_vlm else "text-generation",
    )
    return (
        _environment(folder)
        .get_template(TARGET_TEMPLATE)
        .render(metadata=metadata, p=target, target_repo=target_repo, drafts=target.drafts)
    )
