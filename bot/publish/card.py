"""Model cards rendered from `templates/*.md.j2` (DESIGN §7).

Metadata goes through `huggingface_hub.ModelCardData` so the YAML is what the Hub expects; the body is a Jinja2
template rendered with `StrictUndefined`, so a missing figure fails the render instead of printing blank.
The card is written into the bundle and committed with the rest: nothing here contacts the Hub.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Iterable
from pathlib import Path

import jinja2
from huggingface_hub import ModelCardData
from jinja2 import nodes

from bot.core import package_data
from bot.core.draft_formats import facts
from bot.core.record import BuildRecord, TargetRecord

TEMPLATES = package_data.folder(package_data.TEMPLATES)
DRAFT_TEMPLATE = "draft_card.md.j2"
TARGET_TEMPLATE = "target_card.md.j2"
# The code that renders a card besides its templates: this module and the charts (the acceptance chart is published
# beside the card); found as the package data is (`bot.core.package_data`), from a checkout or a wheel alike.
CARD_CODE = (("bot.publish", "card.py"), ("bot.publish", "charts.py"))
PLOTTING = "matplotlib"  # the library that draws the charts: its version changes their bytes


def template_fingerprint(folder: Path | None = None) -> str:
    """Hash of everything that renders a card besides its record: the card templates and the ones they include,
    this module, the chart code and matplotlib's version (`rendered_by`). A change to any of them re-renders the
    published cards without a rebuild; the status page's template is not among them (it has its own fingerprint,
    `bot.status.page.renderer_fingerprint`)."""
    return files_fingerprint(rendered_by(folder), plotting=importlib.metadata.version(PLOTTING))


def rendered_by(folder: Path | None = None) -> list[Path]:
    """The files a card is rendered with: its templates (`card_templates`) and `CARD_CODE`."""
    folder = folder or TEMPLATES
    code = [package_data.folder(package) / name for package, name in CARD_CODE]
    return [folder / name for name in card_templates(folder)] + code


def card_templates(folder: Path | None = None) -> list[str]:
    """The draft and target card templates and every template they include, import or extend, by name."""
    folder = folder or TEMPLATES
    parser = jinja2.Environment()
    names: set[str] = set()
    pending = [DRAFT_TEMPLATE, TARGET_TEMPLATE]
    while pending:
        name = pending.pop()
        if name in names:
            continue
        names.add(name)
        tree = parser.parse((folder / name).read_text(encoding="utf-8"))
        for node in tree.find_all(_LOADS):
            assert isinstance(node, _LOADS)
            # `{% include "a" if x else "b" %}` names both: every string constant of the expression counts.
            found = [node.template, *node.template.find_all(nodes.Const)]
            pending += [c.value for c in found if isinstance(c, nodes.Const) and isinstance(c.value, str)]
    return sorted(names)


_LOADS = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)  # the tags that load another template


def files_fingerprint(paths: Iterable[Path], *, plotting: str) -> str:
    """Hash of files (each name and its bytes) and the plotting library's version: the renderer of a file."""
    digest = hashlib.sha256(f"{PLOTTING} {plotting}".encode())
    for path in paths:
        digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _environment(folder: Path | None) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder or TEMPLATES),
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
        raise ValueError("a draft card needs the record's repos (BuildRecord.published_as)")
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
