"""The build record: `openvino_export.json`, one typed, frozen model from the build to the card (docs/design.md §2).

A build writes one `BuildRecord` into its bundle; publish commits it to the draft repo (with the card fingerprint
and the repo names) and a `TargetRecord` (the target's part plus every draft validated against it) to the target
repo; plan reads either back from the Hub. Every reader goes through `parse_draft_record` / `parse_target_record`,
which apply the one rule for older schema versions, and every writer through `to_json`. The committed JSON Schema
(`schemas/openvino_export.schema.json`) is generated from these models (`python -m bot.core.record --write`); a test
fails when the two differ.

Field names are public: people and scripts read them. Renaming or removing one is a schema version bump, with an
upgrade rule in `_upgrade`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from bot.core import package_data
from bot.core.recipe import WeightCompression
from bot.core.record_base import DraftFormat, RecordModel, _Open
from bot.core.record_checks import Inspection, TargetInspect, Validation
from bot.core.toolchain import TRACKED_PACKAGES

if TYPE_CHECKING:
    from bot.core.toolchain import Toolchain

PROVENANCE_FILE = "openvino_export.json"
SCHEMA_FILE = package_data.folder(package_data.SCHEMAS) / "openvino_export.schema.json"
# 1: the first published layout (the recipe fingerprint at the top level and under `recipe`).
# 2: `recipe_fingerprint` dropped (it is `recipe.fingerprint`); `resources`, `quality` and `draft_formats` added.
# 3: `files` added: the sha256 and size of every built file published, and of the source files built from.
SCHEMA_VERSION = 3
BuildStatus = Literal["validated", "failed"]
Approval = Literal["recipe", "dispatch"]  # who approved a build (`bot.discover.trust`)


class SourceRef(RecordModel):
    """A checkpoint on the Hub at one revision, with what its card says about the license."""

    repo: str | None = Field(description="Hub repo id; None for a build from local folders")
    revision: str | None = Field(description="commit sha the build used")
    license: str | None = Field(None, description="license id from the source card, validated")
    license_link: str | None = Field(None, description="license link from the source card, validated")


class TargetRef(SourceRef):
    model_type: str
    architecture: str
    is_vlm: bool = Field(description="a vision-language target (exported image-text-to-text, run by VLMPipeline)")


class DraftInfo(RecordModel):
    kind: str = Field(description="dflash | dspark | ... (docs/design.md §4)")
    format: DraftFormat
    architecture: str
    base_model_type: str


class ToolchainInfo(RecordModel):
    """The versions that produced the IRs; a change to a tracked one rebuilds (docs/design.md §5)."""

    optimum_intel: str = Field(alias="optimum-intel")
    openvino: str
    openvino_genai: str = Field(alias="openvino-genai")
    openvino_tokenizers: str = Field(alias="openvino-tokenizers")
    nncf: str
    transformers: str
    torch: str
    profile: str
    capabilities: list[str]
    draft_format: DraftFormat

    @classmethod
    def of(cls, toolchain: Toolchain, draft_format: DraftFormat) -> ToolchainInfo:
        """The record of the toolchain a build ran with (its tracked versions under their package names)."""
        return cls.model_validate(
            {
                **toolchain.tracked(),
                "profile": toolchain.profile,
                "capabilities": sorted(toolchain.capabilities),
                "draft_format": draft_format,
            }
        )

    def tracked(self) -> dict[str, str]:
        """Package name -> version, for the packages `bot.core.toolchain.TRACKED_PACKAGES` names."""
        versions = self.model_dump(by_alias=True)
        return {name: versions[name] for name in TRACKED_PACKAGES}


class RecipeRef(RecordModel):
    name: str
    fingerprint: str = Field(description="hash of the recipe's export and validation settings")


class ExportTasks(RecordModel):
    draft: str
    target: str


class ExportSeconds(RecordModel):
    draft: float
    target: float


def _settings_required(schema: dict[str, Any]) -> None:
    schema["required"] = [*WeightCompression.model_fields, *schema.get("required", ())]


class ExportInfo(WeightCompression, RecordModel):
    """The NNCF / optimum-cli settings the IRs were exported with (the recipe's, `WeightCompression`).

    A recipe may leave a setting at its default; a record names every one (a record without one is refused).
    """

    model_config = ConfigDict(json_schema_extra=_settings_required)

    task: ExportTasks
    seconds: ExportSeconds
    target_reused_from: str | None = Field(None, description="the published target repo@sha whose IR was reused")
    target_int4: _Open | None = Field(
        None,
        description="the target's int4 settings: optimum-intel's default for "
        "the model id, or the recipe's (bot.builder.quantization)",
    )
    draft_weight_format: str | None = Field(None, description="the draft's published weight format")

    @model_validator(mode="before")
    @classmethod
    def _names_every_setting(cls, data: Any) -> Any:
        missing = [name for name in WeightCompression.model_fields if isinstance(data, dict) and name not in data]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        return data

    def settings(self) -> tuple:
        """What changes the target IR's bytes: equal settings and inputs mean an equal export."""
        return export_settings(self, self.task.target)


def export_settings(export: WeightCompression, target_task: str) -> tuple:
    """The settings that change the target IR's bytes, of a record or of a recipe (equal means an equal export)."""
    return (*export.compression().model_dump().values(), target_task)


class CardInfo(RecordModel):
    template_fingerprint: str


class FileDigest(RecordModel):
    """One file: the sha256 of its bytes and its size, and its git blob id (what the Hub lists for a file stored
    without LFS, so a published repo can be checked against its record from its file metadata alone)."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    git_blob_id: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")


FileList = dict[str, FileDigest]


class BuildFiles(RecordModel):
    """What a build published, file by file, and what it was built from (docs/design.md §3: hashes end to end).

    `draft` and `target` list the built files of each repo; the card, the record and the chart are rendered at
    publish from the record and are not listed. The sources are the files downloaded and checked against the
    Hub's hashes (a reused target: the published IR files, checked against that repo's record). With an official
    target (`official_target.used`), `target` lists its files as downloaded, which the bot does not publish, and
    `target_source` the source target's files they were compared with.
    """

    draft: FileList
    target: FileList
    draft_source: FileList
    target_source: FileList


class Repos(RecordModel):
    draft: str
    target: str


class OfficialTarget(RecordModel):
    """An official int4 target repo the build tried as the target IR (`publish.official_targets`): used, the draft
    was validated against it and no target was exported or published (the pair's target repo is this one);
    refused, the target was exported as usual and `reason` says why the official one did not serve."""

    repo: str
    revision: str = Field(description="the commit whose files were downloaded (each checked against the Hub's hash)")
    used: bool
    reason: str | None = Field(None, description="why it did not serve (None when used)")

    @property
    def pinned(self) -> str:
        return f"{self.repo}@{self.revision}"

    def note(self) -> str:
        """One line for the run report."""
        if self.used:
            return f"validated against the official target {self.repo}@{self.revision[:7]} (no target exported)"
        return f"official target {self.repo} not used: {self.reason}"


class StageResources(RecordModel):
    """What one build stage cost (docs/design.md §8): the sizing model is checked against these.

    The memory peaks are of the stage's process tree, each its own maximum over the samples: RSS, and its two
    parts apart (absent in records written before they were kept): anonymous memory plus swap, which must fit the
    runner's memory, and file-backed pages (mapped weights), which the kernel drops and reads again under pressure.
    """

    seconds: float
    peak_rss_bytes: int | None = None
    peak_anon_bytes: int | None = None
    peak_file_bytes: int | None = None
    peak_disk_bytes: int | None = None
    output_bytes: int | None = None


class BuildRecord(RecordModel):
    """A draft build: the bundle's `openvino_export.json`, and the draft repo's once published."""

    schema_version: int = SCHEMA_VERSION
    bot_version: str
    built_at: str
    status: BuildStatus
    failed_gates: list[str]
    draft: DraftInfo
    source: SourceRef
    target: TargetRef
    toolchain: ToolchainInfo
    recipe: RecipeRef
    export: ExportInfo
    inspect: Inspection
    validation: Validation
    resources: dict[str, StageResources] = Field(default_factory=dict, description="stage name -> cost")
    quality: _Open | None = Field(
        None, description="the int4 target against its original weights (bot.builder.quality)"
    )
    draft_formats: _Open | None = Field(
        None, description="each draft weight format measured, the one published and why (bot.builder.weight_formats)"
    )
    card: CardInfo | None = Field(
        None, description="the card templates it is rendered with, set by the build of a planned job (None: local)"
    )
    repos: Repos | None = Field(
        None, description="the draft and target repos of the pair, set by the build of a planned job (None: local)"
    )
    files: BuildFiles | None = Field(None, description="every built file published and every source file (sha256)")
    official_target: OfficialTarget | None = Field(
        None, description="the official target repo the build tried (publish.official_targets), used or not and why"
    )
    approved_by: Approval | None = Field(
        None,
        description="who approved the build (docs/design.md §14): 'recipe' (its authors are the recipe's trusted "
        "ones, built on schedule) or 'dispatch' (a maintainer's manual dispatch of the repo); None: a local build, "
        "or a record older than the rule",
    )

    @property
    def passed(self) -> bool:
        return self.status == "validated"

    @property
    def draft_weight_format(self) -> str:
        """The draft's published weight format: the one measured fastest, or the export's for a record written
        before the draft was measured in several (its repo name and card tags say it)."""
        return self.export.draft_weight_format or self.export.weight_format

    def inputs(self) -> BuildInputs:
        return BuildInputs(
            source_revision=self.source.revision,
            target_revision=self.target.revision,
            recipe_fingerprint=self.recipe.fingerprint,
            draft_format=self.draft.format,
            toolchain=self.toolchain.tracked(),
        )

    def published_as(self, repos: Repos, card_fingerprint: str) -> BuildRecord:
        """The record naming these repos and card templates: what a card refresh commits over a published record
        (a build's record has them from its builder, `bot.builder.draft_record`, and is committed as written)."""
        return self.model_copy(update={"repos": repos, "card": CardInfo(template_fingerprint=card_fingerprint)})

    def summary(self, draft_repo: str) -> DraftSummary:
        best = self.validation.best_run
        return DraftSummary(
            repo=draft_repo,
            source=self.source.repo or "",
            source_revision=self.source.revision or "",
            lossless=self.validation.lossless,
            accept_length=self.validation.accept_length,
            recommended_num_assistant_tokens=self.validation.recommended_num_assistant_tokens,
            speedup=best.speedup,
        )


class DraftSummary(RecordModel):
    """How one draft fared against the target: a row of the target card."""

    repo: str
    source: str
    source_revision: str
    lossless: bool
    accept_length: float
    recommended_num_assistant_tokens: int
    speedup: float


class TargetInspection(RecordModel):
    target: TargetInspect


class TargetRecord(RecordModel):
    """The target repo's `openvino_export.json`: how the target was built, and the drafts validated against it."""

    schema_version: int = SCHEMA_VERSION
    bot_version: str
    built_at: str
    target: TargetRef
    toolchain: ToolchainInfo
    recipe: RecipeRef
    export: ExportInfo
    inspect: TargetInspection
    drafts: list[DraftSummary]
    card: CardInfo
    quality: _Open | None = None
    files: FileList | None = Field(None, description="the built files of the target repo (sha256 and size)")
    source_files: FileList | None = Field(None, description="the target checkpoint's files it was built from")
    approved_by: Approval | None = Field(
        None, description="who approved the build that exported it (`BuildRecord.approved_by`)"
    )

    @classmethod
    def from_build(cls, build: BuildRecord, drafts: list[DraftSummary], card_fingerprint: str) -> TargetRecord:
        return cls(
            schema_version=build.schema_version,
            bot_version=build.bot_version,
            built_at=build.built_at,
            target=build.target,
            toolchain=build.toolchain,
            recipe=build.recipe,
            export=build.export,
            inspect=TargetInspection(target=build.inspect.target),
            drafts=drafts,
            card=CardInfo(template_fingerprint=card_fingerprint),
            quality=build.quality,
            files=build.files.target if build.files else None,
            source_files=build.files.target_source if build.files else None,
            approved_by=build.approved_by,
        )

    def target_inputs(self) -> tuple:
        """What makes two target IRs the same: the target revision, the export settings, the tracked toolchain."""
        return (self.target.revision, self.export.settings(), tuple(sorted(self.toolchain.tracked().items())))

    def with_draft(self, summary: DraftSummary, card_fingerprint: str) -> TargetRecord:
        drafts = sorted([d for d in self.drafts if d.repo != summary.repo] + [summary], key=lambda d: d.repo)
        return self.model_copy(update={"drafts": drafts, "card": CardInfo(template_fingerprint=card_fingerprint)})

    def draft_keys(self) -> set[tuple[str, str]]:
        """Which draft builds the card lists; speed figures differ run to run and do not make a card stale."""
        return {(d.repo, d.source_revision) for d in self.drafts}


class BuildInputs(RecordModel):
    """Everything that decides whether a published build is current: the one definition plan and publish share."""

    source_revision: str | None
    target_revision: str | None
    recipe_fingerprint: str
    draft_format: str | None
    toolchain: dict[str, str]

    def changes_to(self, wanted: BuildInputs) -> list[str]:
        """Why a build with `wanted` inputs differs from this published one; empty when it is current.

        A `None` in `wanted` means "not known at this point" (planning before the target is looked up, or a
        toolchain that cannot export the kind): it is not compared.
        """
        reasons = []
        if wanted.source_revision is not None and wanted.source_revision != self.source_revision:
            reasons.append(f"source changed ({_short(self.source_revision)} -> {_short(wanted.source_revision)})")
        if wanted.target_revision is not None and wanted.target_revision != self.target_revision:
            reasons.append(f"target changed ({_short(self.target_revision)} -> {_short(wanted.target_revision)})")
        if wanted.recipe_fingerprint != self.recipe_fingerprint:
            reasons.append("recipe changed")
        reasons += [
            f"toolchain changed ({name} {self.toolchain.get(name)} -> {version})"
            for name, version in wanted.toolchain.items()
            if self.toolchain.get(name) != version
        ]
        if wanted.draft_format is not None and wanted.draft_format != self.draft_format:
            reasons.append(f"draft format changed ({self.draft_format} -> {wanted.draft_format})")
        return reasons


class RecordError(ValueError):
    """A provenance file that is not a record this bot can read (damaged, foreign, or from a newer bot)."""


def now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def to_json(record: BuildRecord | TargetRecord) -> str:
    """The one writer: field names as published (aliases), stable order, a trailing newline."""
    return json.dumps(record.model_dump(mode="json", by_alias=True), indent=2) + "\n"


def write(record: BuildRecord | TargetRecord, folder: Path) -> Path:
    path = folder / PROVENANCE_FILE
    path.write_text(to_json(record), encoding="utf-8")
    return path


def parse_draft_record(data: bytes | str) -> BuildRecord:
    """Parse a draft build record (a bundle's or a draft repo's `openvino_export.json`).

    Raises:
        RecordError: not JSON, not a draft record, or a schema version this bot does not know.
    """
    try:
        return BuildRecord.model_validate(_load(data, kind="draft"))
    except ValidationError as exc:
        raise RecordError(_explain(exc)) from None


def parse_target_record(data: bytes | str) -> TargetRecord:
    """Parse a target repo's `openvino_export.json`.

    Raises:
        RecordError: as `parse_draft_record`.
    """
    try:
        return TargetRecord.model_validate(_load(data, kind="target"))
    except ValidationError as exc:
        raise RecordError(_explain(exc)) from None


def read_bundle_record(folder: Path) -> BuildRecord:
    """The record of a bundle folder (an Actions artifact or a local build).

    Raises:
        RecordError: missing, unreadable or malformed.
    """
    try:
        data = (folder / PROVENANCE_FILE).read_bytes()
    except OSError as exc:
        raise RecordError(f"cannot read {PROVENANCE_FILE}: {exc.strerror or exc}") from None
    return parse_draft_record(data)


def _load(data: bytes | str, *, kind: str) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise RecordError(f"{PROVENANCE_FILE} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise RecordError(f"{PROVENANCE_FILE} is not a JSON object")
    return _upgrade(raw, kind=kind)


def _upgrade(raw: dict[str, Any], *, kind: str) -> dict[str, Any]:
    """The one rule for older records: version 1 is read as version 2 (its duplicate fingerprint dropped), version 2
    as version 3 without `files` (such a record certifies no file: its repo is never reused); any other version is
    refused, and the caller rebuilds rather than trusts it."""
    version = raw.get("schema_version")
    if version == SCHEMA_VERSION:
        return raw
    if version == 2:
        return {**raw, "schema_version": SCHEMA_VERSION}
    if version == 1:
        upgraded = {k: v for k, v in raw.items() if k != "recipe_fingerprint"}
        upgraded["schema_version"] = SCHEMA_VERSION
        if kind == "draft" and "recipe" in upgraded and "fingerprint" not in upgraded["recipe"]:
            upgraded["recipe"] = {**upgraded["recipe"], "fingerprint": raw.get("recipe_fingerprint")}
        return upgraded
    raise RecordError(f"schema_version {version!r} is not one this bot reads (it writes {SCHEMA_VERSION})")


def _explain(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(record)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{PROVENANCE_FILE} field {where}: {first['msg']}{more}"


def _short(sha: str | None) -> str:
    return (sha or "none")[:7]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of both record kinds, as committed in `schemas/`."""
    schema = TypeAdapter(BuildRecord | TargetRecord).json_schema(by_alias=True, mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "openvino_export.json (dflash-bot build record)",
        "description": f"schema_version {SCHEMA_VERSION}: a draft repo holds a BuildRecord, a target repo a "
        "TargetRecord",
        **schema,
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m bot.core.record --write` regenerates the committed schema; `--check` fails when it is stale."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        SCHEMA_FILE.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
        return 0
    if args == ["--check"]:
        current = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.is_file() else ""
        if current != schema_text():
            print(f"{SCHEMA_FILE} is stale: run `python -m bot.core.record --write`", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m bot.core.record --write | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
