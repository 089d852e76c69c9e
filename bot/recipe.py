"""Recipes: the declarative YAML in `workflows/` that says what to watch, how to export and how to validate.

Parsed once into frozen, typed models. Unknown keys are errors with a "did you mean" hint, so a typo in a
scheduled recipe fails loudly before any Hub call instead of silently using a default.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.errors import RecipeError

DEFAULT_RECIPE = Path(__file__).resolve().parent.parent / "workflows" / "dflash.yaml"

DraftKind = Literal["dflash", "dflash-other-base", "dflash2", "dspark", "unknown"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceQuery(_Strict):
    """One server-side filtered listing (author + search + tags): a page of results costs one request."""

    author: str | None = None
    search: str | None = None
    filter_tags: list[str] = Field(default_factory=list, description="tags every result must carry")


class WatchRules(_Strict):
    """Which Hub repos are candidates, found with server-side filters so a run costs few requests."""

    sources: list[SourceQuery] = Field(default_factory=lambda: [SourceQuery(author="z-lab", search="DFlash")],
                                       min_length=1)
    kinds: list[DraftKind] = Field(default_factory=lambda: ["dflash"], description="kinds to build")
    exclude: list[str] = Field(default_factory=list, description="repo ids never to build")
    max_candidates: int = Field(200, ge=1)
    max_checkpoint_bytes: int = Field(40 * 1024**3, ge=1, description="draft + target safetensors bytes")


class TargetRules(_Strict):
    """How a draft's target is found: the draft config does not name it (DESIGN §4)."""

    order: list[Literal["map", "card_metadata", "card_text", "repo_name"]] = Field(
        default_factory=lambda: ["map", "card_metadata", "card_text", "repo_name"]
    )
    map: dict[str, str] = Field(default_factory=dict, description="draft repo id -> target repo id")
    default_namespace: str = Field("Qwen", description="namespace for targets inferred from a repo name")
    namespace_by_prefix: dict[str, str] = Field(
        default_factory=lambda: {"gemma": "google", "gpt-oss": "openai", "llama": "meta-llama"},
        description="target-name prefix -> namespace, for names inferred from a repo name")


class ExportSettings(_Strict):
    """optimum-cli / NNCF settings; part of the recipe fingerprint."""

    weight_format: Literal["int4", "int8"] = "int4"
    sym: bool = False
    group_size: int = Field(128, ge=-1)
    ratio: float = Field(1.0, gt=0, le=1)
    group_size_fallback: Literal["error", "ignore", "adjust"] = "adjust"
    backup_precision: Literal["none", "int8_sym", "int8_asym"] | None = None
    timeout_s: int = Field(3600, ge=1)
    draft_weight_formats: list[Literal["int4", "int8"]] = Field(
        default_factory=lambda: ["int4", "int8"], min_length=1,
        description="draft exported, gated and measured in each; the best measured speed-up is published")

    @field_validator("draft_weight_formats")
    @classmethod
    def _unique_formats(cls, formats: list[str]) -> list[str]:
        return list(dict.fromkeys(formats))


class ValidationSettings(_Strict):
    """GenAI gates and the speed sweep; part of the recipe fingerprint."""

    prompts: list[str] = Field(min_length=3)
    max_new_tokens: int = Field(32, ge=4)
    num_assistant_tokens: list[int] = Field(default_factory=lambda: [3, 7, 15], min_length=1)
    min_accept_length: float = Field(1.5, ge=1.0)
    repeats: int = Field(2, ge=1, description="timed generations per setting; the best is kept")
    device: str = "CPU"
    timeout_s: int = Field(1800, ge=1)
    min_top1_agreement: float | None = Field(
        None, ge=0, le=1, description="quality gate: the int4 target's top-1 agreement with the original weights "
        "on the prompts (off when unset)")

    @field_validator("num_assistant_tokens")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if any(v < 1 for v in values):
            raise ValueError("every num_assistant_tokens value must be >= 1")
        return sorted(set(values))


class PublishSettings(_Strict):
    namespace: str
    draft_name: str = "{source_name}-int4-ov"
    target_name: str = "{target_name}-int4-ov"
    private: bool = False


class RunnerClass(_Strict):
    """One kind of GitHub Actions runner a build can be sent to, by the memory it has."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    max_memory_bytes: int = Field(ge=1, description="largest estimated export peak this runner takes")
    runs_on: str | list[str] = Field(description="the job's `runs-on`: a label or a list of labels")


class RunnerSettings(_Strict):
    """Runner classes for the GitHub Actions fan-out (`plan --matrix`); not part of the recipe fingerprint.

    A build goes to the smallest class whose `max_memory_bytes` covers its estimated peak (about 2x the
    safetensors bytes of draft + target); a build no class covers is skipped with a reason naming the fix.
    """

    classes: list[RunnerClass] = Field(
        default_factory=lambda: [RunnerClass(name="standard", max_memory_bytes=14 * 10**9, runs_on="ubuntu-latest")],
        min_length=1)
    peak_factor: float = Field(2.0, gt=0, description="estimated peak memory / safetensors bytes")
    max_entries: int = Field(256, ge=1, le=256, description="matrix entries per run (GitHub allows 256)")

    @field_validator("classes")
    @classmethod
    def _sorted_unique(cls, classes: list[RunnerClass]) -> list[RunnerClass]:
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise ValueError(f"runner class names must be unique: {names}")
        return sorted(classes, key=lambda c: c.max_memory_bytes)


class Recipe(_Strict):
    name: str
    description: str = ""
    watch: WatchRules = Field(default_factory=WatchRules)
    targets: TargetRules = Field(default_factory=TargetRules)
    export: ExportSettings = Field(default_factory=ExportSettings)
    validation: ValidationSettings
    publish: PublishSettings
    runners: RunnerSettings = Field(default_factory=RunnerSettings)

    def fingerprint(self) -> str:
        """Hash of what changes the built files or their validation; a change here rebuilds everything."""
        payload = {"export": self.export.model_dump(exclude={"timeout_s"}),
                   "validation": self.validation.model_dump(exclude={"timeout_s"})}
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
        raise RecipeError(f"cannot read recipe: {exc.strerror}", subject=str(path), stage="recipe") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe is not valid YAML: {exc}", subject=str(path), stage="recipe") from None
    if not isinstance(raw, dict):
        raise RecipeError("recipe must be a YAML mapping", subject=str(path), stage="recipe")
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise RecipeError(_explain(exc), subject=str(path), stage="recipe") from None


def _explain(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{location}'{_did_you_mean(error['loc'])}")
        else:
            problems.append(f"'{location}': {error['msg']}")
    return "; ".join(problems)


def _did_you_mean(loc: tuple) -> str:
    model: type[BaseModel] = Recipe
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
