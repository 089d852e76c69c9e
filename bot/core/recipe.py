"""Recipes: the declarative YAML in `workflows/` that says what to watch, how to export and how to validate.

Parsed once into frozen, typed models. Unknown keys are errors with a "did you mean" hint, so a typo in a
scheduled recipe fails loudly before any Hub call instead of silently using a default.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import string
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from bot.core import package_data
from bot.core.errors import RecipeError, Skip, Stage
from bot.core.naming import DRAFT_WEIGHT_FORMATS, default_collection_title, template_parts, validate_repo_id
from bot.core.naming import status_repo_id as naming_status_repo_id
from bot.core.recipe_section import RecipeSection
from bot.core.runners import RunnerSettings, SizingModel
from bot.core.schedule import period as schedule_period
from bot.core.watch import WatchRules

DEFAULT_RECIPE = package_data.folder(package_data.WORKFLOWS) / "dflash.yaml"

TargetRule = Literal["map", "card_metadata", "card_text", "repo_name"]
WeightFormat = Literal["int4", "int8"]
# Odd values are refused with a message rather than overflowing a timer or a date later.
MAX_TIMEOUT_S = 7 * 24 * 3600


class TargetRules(RecipeSection):
    """How a draft's target is found: the draft config does not name it (docs/design.md §4)."""

    order: list[TargetRule] = Field(
        default_factory=lambda: list[TargetRule](["map", "card_metadata", "card_text", "repo_name"])
    )
    map: dict[str, str] = Field(default_factory=dict, description="draft repo id -> target repo id")
    default_namespace: str = Field("Qwen", description="namespace for targets inferred from a repo name")
    namespace_by_prefix: dict[str, str] = Field(
        default_factory=lambda: {"gemma": "google", "gpt-oss": "openai", "llama": "meta-llama"},
        description="target-name prefix -> namespace, for names inferred from a repo name",
    )


class WeightCompression(RecipeSection):
    """NNCF's weight compression as optimum-cli's flags take it, defined once: the recipe's `export` section asks
    for it (`ExportSettings`), the build record keeps what the IRs were exported with (`bot.core.record.ExportInfo`)
    and a target's int4 settings extend it (`bot.builder.quantization.Int4Settings`). Each holds these fields at
    its own top level, so recipes and records keep their flat layout."""

    weight_format: Literal["int4", "int8"] = "int4"
    sym: bool = False
    group_size: int = Field(128, ge=-1)
    ratio: float = Field(1.0, gt=0, le=1)
    group_size_fallback: Literal["error", "ignore", "adjust"] = "adjust"
    backup_precision: Literal["none", "int8_sym", "int8_asym"] | None = None

    def compression(self) -> WeightCompression:
        """These fields alone (of a recipe's export section or a record's export)."""
        return WeightCompression.model_validate(self.model_dump(include=set(WeightCompression.model_fields)))

    def cli_args(self) -> list[str]:
        """The `optimum-cli export openvino` flags these settings are (everything but the model, task and output)."""
        args = [
            "--weight-format",
            self.weight_format,
            "--group-size",
            str(self.group_size),
            "--ratio",
            str(self.ratio),
            "--group-size-fallback",
            self.group_size_fallback,
        ]
        if self.sym:
            args.append("--sym")
        if self.backup_precision:
            args += ["--backup-precision", self.backup_precision]
        return args


class ExportSettings(WeightCompression):
    """optimum-cli / NNCF settings; part of the recipe fingerprint."""

    timeout_s: int = Field(3600, ge=1, le=MAX_TIMEOUT_S, description="seconds (at most a week)")
    draft_weight_formats: list[WeightFormat] = Field(
        default_factory=lambda: list[WeightFormat](["int4", "int8"]),
        min_length=1,
        description="draft exported, gated and measured in each; the best measured speed-up is published",
    )

    @field_validator("draft_weight_formats")
    @classmethod
    def _unique_formats(cls, formats: list[str]) -> list[str]:
        return list(dict.fromkeys(formats))


class ValidationSettings(RecipeSection):
    """GenAI gates and the speed sweep; part of the recipe fingerprint."""

    prompts: list[str] = Field(min_length=3)
    max_new_tokens: int = Field(32, ge=4, le=65_536)
    num_assistant_tokens: list[int] = Field(default_factory=lambda: [3, 7, 15], min_length=1)
    min_accept_length: float = Field(1.5, ge=1.0, allow_inf_nan=False)
    repeats: int = Field(
        2,
        ge=1,
        le=100,
        description="the fewest interleaved plain/speculative pairs timed per setting (at least 2: an interval needs "
        "two); more are timed until the interval is tight, `timing_max_pairs` or `timing_budget_s`",
    )
    timing_budget_s: float = Field(
        120.0,
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        description="seconds of speed timing per draft format, shared by its num_assistant_tokens; a setting stops "
        "at its share once it has `repeats` pairs",
    )
    timing_max_pairs: int = Field(12, ge=2, le=1000, description="the most interleaved pairs timed per setting")
    timing_target_share: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="timing stops once the 95 % interval of the speed-up is within this share of its median",
    )
    min_speedup: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="when set, a pair whose best speed-up over plain "
        "greedy is below this fails validation (default: no speed gate)",
    )
    device: str = "CPU"
    timeout_s: int = Field(1800, ge=1, le=MAX_TIMEOUT_S, description="seconds (at most a week)")
    min_top1_agreement: float | None = Field(
        None,
        ge=0,
        le=1,
        description="quality gate: the int4 target's top-1 agreement with the original weights "
        "on the prompts (off when unset)",
    )

    @field_validator("num_assistant_tokens")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if any(not 1 <= v <= 256 for v in values):
            raise ValueError("every num_assistant_tokens value must be between 1 and 256")
        return sorted(set(values))


class CollectionSettings(RecipeSection):
    """The Hub collection that lists every published draft and target repo (kept in sync by publish)."""

    title: str | None = Field(
        None,
        min_length=1,
        max_length=60,
        description="default: derived from the recipe's name (`Recipe.collection_title`), one collection per recipe",
    )
    namespace: str | None = Field(None, description="default: publish.namespace")
    description: str = Field(
        "Speculative-decoding draft models and their targets, exported to OpenVINO int4 and "
        "validated with OpenVINO GenAI by dflash-bot.",
        max_length=150,
    )


# The OpenVINO organisation publishes int4 IRs of many targets under this name; one that passes the target IR
# rules serves every draft of that target (bot.plan.official, bot.builder.official_target).
DEFAULT_OFFICIAL_TARGETS = ("OpenVINO/{target_name}-int4-ov",)
_OFFICIAL_FIELDS = ("target_name", "target_namespace")


def official_repo_id(template: str, target_repo: str) -> str:
    """`template` filled with the target's repo id parts, checked as a repo id.

    Raises:
        ValueError: the template is malformed, names another field (or none of the target's name), or does not
            make a valid `namespace/name` id for this target.
    """
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"official target template {template!r} is malformed: {exc}") from None
    if "target_name" not in fields or not set(fields) <= set(_OFFICIAL_FIELDS):
        raise ValueError(
            f"official target template {template!r} must contain {{target_name}} and no field but "
            f"{{target_name}} and {{target_namespace}}"
        )
    namespace, _, name = target_repo.partition("/")
    repo = template.format(target_name=name, target_namespace=namespace)
    try:
        return validate_repo_id(repo, what=f"official target template {template!r} for {target_repo}")
    except Skip as skip:
        raise ValueError(skip.message) from None


class PublishSettings(RecipeSection):
    """Where outputs go and how they are named (the naming rule is in `bot/core/naming.py`)."""

    namespace: str
    draft_name: str = Field(
        "{source_name}-{weight_format}-ov",
        description="{source_name}, and {weight_format}: the published draft's measured weight format (int4, int8)",
    )
    target_name: str = "{target_name}-int4-ov"
    private: bool = False
    schedule: str | None = Field(
        None,
        description="the cron line (UTC) the bot runs on, as `.github/workflows/watch.yml`'s `on.schedule` gives it: "
        "the status page says when the bot last ran and calls it stale two periods later (`bot.core.schedule`); "
        "unset, the status records no last run",
    )
    install: str | None = Field(
        None,
        description="the package (`name` or `name==version`) the cards' install line gives; publish checks that the "
        "index has it. Unset, the line pins the source that built the card (the Actions run's repository@sha), or is "
        "left out outside Actions",
    )

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            schedule_period(value)  # a ValueError names the field that is wrong
        return value

    format_switch_margin: float = Field(
        0.10,
        description="the held weight format (the published one; for a new draft the smaller file, int4) gives way "
        "to another only when that format's 95 % interval clears the held one's by more than this share (0.1: 10 %), "
        "on the first publication as on later ones, so two runs agree and a noisy measurement never flips it",
    )
    draft_home_namespace: str | None = Field(
        "z-lab", description="drafts from this namespace keep their bare name; others get `namespace__` in front"
    )
    target_home_namespace: str | None = Field(
        "Qwen", description="targets from this namespace keep their bare name; others get `namespace__` in front"
    )
    official_targets: list[str] = Field(
        default_factory=lambda: list(DEFAULT_OFFICIAL_TARGETS),
        max_length=8,
        description="repo ids to try, in order, as the target IR a draft is validated with instead of exporting "
        "and publishing one (`{target_name}`, `{target_namespace}`: the target's repo id parts); [] turns it off",
    )

    @field_validator("official_targets")
    @classmethod
    def _official_repo_templates(cls, templates: list[str]) -> list[str]:
        for template in templates:
            official_repo_id(template, "Qwen/Qwen3-8B")  # raises ValueError naming the template
        return list(dict.fromkeys(templates))

    def official_target_repos(self, target_repo: str) -> list[str]:
        """The official repos `official_targets` names for a target, in order (none when the target's id cannot
        fill a template into a valid repo id)."""
        repos = []
        for template in self.official_targets:
            try:
                repos.append(official_repo_id(template, target_repo))
            except ValueError:
                continue
        return list(dict.fromkeys(repos))

    @field_validator("draft_name", "target_name")
    @classmethod
    def _one_name_field(cls, template: str, info: ValidationInfo) -> str:
        if info.field_name == "draft_name":
            parts = [template_parts(template, "source_name", {"weight_format": f}) for f in DRAFT_WEIGHT_FORMATS]
        else:
            parts = [template_parts(template, "target_name")]
        for prefix, suffix in parts:
            try:
                validate_repo_id(f"namespace/{prefix}x{suffix}", what=str(info.field_name))
            except Skip as skip:
                raise ValueError(f"{template!r} does not make valid repo names ({skip.message})") from None
        return template

    @field_validator("format_switch_margin", mode="before")
    @classmethod
    def _margin_share(cls, value: object) -> object:
        """`10%` reads as 0.1; a bare number over 1 is refused rather than read as a percentage."""
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                return float(value.strip()[:-1]) / 100
            except ValueError:
                raise ValueError(f"{value!r} is not a percentage (e.g. 10%)") from None
        return value

    @field_validator("format_switch_margin")
    @classmethod
    def _margin_range(cls, margin: float) -> float:
        if not 0 <= margin <= 1:  # NaN fails this too
            raise ValueError(
                f"must be a share between 0 and 1 (0.1 or 10% for ten per cent: the other weight format must "
                f"measure that much faster to replace the published one), not {margin!r}"
            )
        return margin

    @field_validator("namespace")
    @classmethod
    def _hub_namespace(cls, namespace: str) -> str:
        try:
            validate_repo_id(f"{namespace}/x", what="publish.namespace")
        except Skip as skip:
            raise ValueError(f"{namespace!r} is not a valid Hub namespace ({skip.message})") from None
        return namespace

    status_repo: str | None = Field(
        None,
        description="dataset repo of the status page and the bot's memory; may use {namespace} and {recipe}; "
        "default `{namespace}/{recipe}-bot-status` (`Recipe.status_repo_id`), one per recipe",
    )
    collection: CollectionSettings = Field(default_factory=CollectionSettings)
    bot_user: str | None = Field(
        None,
        pattern=r"^[\w.-]+$",
        description="the Hub user the bot publishes as: a published target is reused only from its own commits "
        "(default: the write token's user where the plan holds it, as `run` does; the Actions plan job does not)",
    )

    @property
    def collection_namespace(self) -> str:
        return self.collection.namespace or self.namespace


class HubSettings(RecipeSection):
    """How long the bot waits for the Hub; not part of the recipe fingerprint (it changes no built file).

    Every Hub request gets these connect and read timeouts, whatever huggingface_hub's call site asks for, and an
    answer that trickles counts as stalled (`bot.core.deadlines`). A stalled download resumes where it stopped, up to
    `download_attempts` times, then fails naming the repo, the file and the bytes received. A stage past its deadline
    stops at its next request: its sources fail this run (not remembered) and are tried again by the next one.
    """

    connect_timeout_s: float = Field(10.0, gt=0, le=600, description="to open a connection to the Hub")
    read_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="longest silence on an open connection (also an upload's write timeout)"
    )
    min_bytes_per_s: int = Field(
        16 * 1024,
        ge=0,
        le=10**9,
        description="an answer slower than this over a whole read_timeout_s window is stalled (0: off)",
    )
    download_attempts: int = Field(3, ge=1, le=20, description="tries per file, each resuming where the last stopped")
    # Both fit their GitHub Actions jobs with room for install and the report (tests/test_workflows.py): a deadline
    # the job's `timeout-minutes` cut short would never report the stage that ran out of time.
    download_deadline_s: float = Field(
        5400.0, gt=0, le=7 * 86400, description="one checkpoint's whole download, every file and retry"
    )
    plan_deadline_s: float = Field(
        1200.0, gt=0, le=7 * 86400, description="discover and plan: every listing, record and config read"
    )
    upload_deadline_s: float = Field(
        5400.0, gt=0, le=7 * 86400, description="every upload of one publish job together: all its commits and retries"
    )


class Recipe(RecipeSection):
    name: str
    description: str = ""
    watch: WatchRules = Field(default_factory=WatchRules)
    targets: TargetRules = Field(default_factory=TargetRules)
    export: ExportSettings = Field(default_factory=ExportSettings)
    validation: ValidationSettings
    publish: PublishSettings
    runners: RunnerSettings = Field(default_factory=RunnerSettings)
    hub: HubSettings = Field(default_factory=HubSettings)

    @model_validator(mode="after")
    def _status_repo_names_a_repo(self) -> Recipe:
        naming_status_repo_id(self.publish.status_repo, self.publish.namespace, self.name)
        return self

    @property
    def status_repo_id(self) -> str:
        """The status repo (memory and page) of this recipe: derived from its name unless `publish.status_repo`
        names one, so two recipes publishing to one namespace never share it unless told to."""
        return naming_status_repo_id(self.publish.status_repo, self.publish.namespace, self.name)

    @property
    def collection_title(self) -> str:
        """The collection's title: `publish.collection.title`, or one derived from the recipe's name."""
        return self.publish.collection.title or default_collection_title(self.name)

    def fingerprint(self) -> str:
        """Hash of what changes the built files or their validation; a change here rebuilds everything."""
        # An unset min_speedup stays out of the hash, so recipes that predate it keep their fingerprint.
        validation_exclude = {"timeout_s"} | ({"min_speedup"} if self.validation.min_speedup is None else set())
        payload = {
            "export": self.export.model_dump(exclude={"timeout_s"}),
            "validation": self.validation.model_dump(exclude=validation_exclude),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def load_recipe(path: Path | None = None) -> Recipe:
    """Load and validate a recipe file (the default one when `path` is None).

    Raises:
        RecipeError: the file is missing, not YAML, or has unknown/invalid keys (named, with a suggestion).
    """
    path = Path(path) if path else DEFAULT_RECIPE
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecipeError(f"cannot read recipe: {exc.strerror}", subject=str(path), stage=Stage.RECIPE) from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe is not valid YAML: {exc}", subject=str(path), stage=Stage.RECIPE) from None
    if not isinstance(raw, dict):
        raise RecipeError("recipe must be a YAML mapping", subject=str(path), stage=Stage.RECIPE)
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise RecipeError(_explain(exc), subject=str(path), stage=Stage.RECIPE) from None


def _explain(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        location = ".".join(_recipe_keys(error["loc"]))
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{location}'{_did_you_mean(error['loc'])}")
        else:
            problems.append(f"'{location}': {error['msg']}")
    return "; ".join(problems)


def _recipe_keys(loc: tuple) -> list[str]:
    """An error's location as the recipe spells it: a sizing line is `<stage>_<kind>` there (`SizingModel`)."""
    parts = [str(part) for part in loc]
    for at in range(len(parts) - 3):
        if parts[at : at + 2] == ["sizing", "stages"]:
            parts[at + 1 : at + 4] = [f"{parts[at + 2]}_{parts[at + 3]}"]
            break
    return parts


def _did_you_mean(loc: tuple) -> str:
    model: type[BaseModel] = Recipe
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    keys = model.line_names() if issubclass(model, SizingModel) else list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
