"""Output repo names, and the one check every repo id that comes from a source goes through.

Two sources must never map to one output repo: before this rule, `Qwen/Qwen3-Coll` and `other-org/Qwen3-Coll`
were both published as `OpenVINO-drafts/Qwen3-Coll-int4-ov`, the second overwriting the first. The rule:

- A source in its role's **home namespace** (`publish.draft_home_namespace`, `publish.target_home_namespace`;
  e.g. `z-lab` for drafts, `Qwen` for targets) keeps its bare name: `Qwen/Qwen3-8B` -> `Qwen3-8B-int4-ov`.
  One home per role: two homes could hold the same name.
- Any other source is prefixed with its namespace and `__`: `other-org/Qwen3-Coll` ->
  `other-org__Qwen3-Coll-int4-ov`. (`--`, the obvious separator, is forbidden in Hub repo ids.) A home source
  whose name itself holds `__` is prefixed too, so a bare name never contains `__` and a prefixed one splits
  back into namespace and name at its first `__`.
- A name over the Hub's 96-character limit, a source namespace holding `_` (the split would be ambiguous), or a
  name that already ends like a shortened one is **shortened**: cut, then `-h` and 12 hex digits of the
  SHA-256 of the lower-cased source repo id, before the template's fixed suffix. Plain names never end like
  that, so a shortened name can only meet another shortened name, which differs in its hash.

Hub repo ids are case-insensitive, so homes compare case-insensitively and the hash reads the lower-cased id:
two spellings of one source give one output, and distinct sources (ignoring case) give distinct outputs.

A draft's name also says which weights it holds: its template may use `{weight_format}` (the default,
`{source_name}-{weight_format}-ov`, gives `Qwen3-8B-DFlash-b16-int8-ov` for a draft whose int8 export measured
fastest). The format's text is fixed for the name, so the rule above holds per format, and since every format is
spelled with as many characters (`int4`, `int8`), two formats of one template never give one name either: the
fixed texts around the source differ at the same place. A source therefore has one candidate name per format
(`draft_output_repos`), which planning looks up to find where it is published.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Mapping
from typing import Protocol

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id as hf_validate_repo_id

from bot.core.errors import Skip

MAX_NAME_LENGTH = 96  # the Hub's limit on the name part of `namespace/name`
# The draft weight formats a name can be made for: `bot.core.recipe.WeightFormat` (tests/core/test_naming.py checks that
# they agree; recipe.py imports this module, not the reverse). Equal lengths keep two formats' names apart.
DRAFT_WEIGHT_FORMATS = ("int4", "int8")
WEIGHT_FORMAT_FIELD = "weight_format"
NAMESPACE_SEPARATOR = "__"
HASH_DIGITS = 12
_ID_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+")
_SHORTENED_TAIL = re.compile(rf"-h[0-9a-f]{{{HASH_DIGITS}}}$")


class OutputNaming(Protocol):
    """The fields of the recipe's `publish` section the naming rule reads (`bot.core.recipe.PublishSettings` has
    them; recipe.py checks its name templates with `template_parts`, so this module cannot import it)."""

    @property
    def namespace(self) -> str: ...
    @property
    def draft_name(self) -> str: ...
    @property
    def target_name(self) -> str: ...
    @property
    def draft_home_namespace(self) -> str | None: ...
    @property
    def target_home_namespace(self) -> str | None: ...


def validate_repo_id(value: object, *, what: str) -> str:
    """Check a `namespace/name` repo id that entered from a source (card metadata, card text, a repo name, a CLI
    argument) before anything uses it.

    Args:
        value: the candidate id, as read (not stripped: a stray newline or space is a defect worth naming).
        what: where it came from, for the message (e.g. "card base_model of z-lab/X", "--only").

    Returns:
        `value`, unchanged.

    Raises:
        Skip: not a string, a URL, not `namespace/name`, other characters than ASCII letters, digits, `-`, `_`
            and `.` (whitespace and newlines included), or refused by huggingface_hub's
            `validate_repo_id` (characters, `--`/`..`, a leading or trailing `-`/`.`, a name over 96 characters,
            `.git`); the message names `what`, the value and the rule. Never `HFValidationError`.
    """
    if not isinstance(value, str):
        raise Skip(f"{what} must be a repo id string (namespace/name), got {type(value).__name__} {value!r}")
    if "://" in value or value.startswith(("www.", "huggingface.co/", "hf.co/")):
        raise Skip(f"{what} {value!r} is a URL, not a repo id (namespace/name)")
    if value.count("/") != 1:
        raise Skip(f"{what} {value!r} is not a repo id: expected exactly one '/' (namespace/name)")
    if not _ID_CHARACTERS.fullmatch(value):  # huggingface_hub's regex ends in `$`, which admits a trailing "\n"
        raise Skip(f"{what} {value!r} is not a valid Hub repo id: only ASCII letters, digits, '-', '_' and '.'")
    try:
        hf_validate_repo_id(value)
    except HFValidationError as exc:
        raise Skip(f"{what} {value!r} is not a valid Hub repo id: {exc}") from None
    return value


def draft_output_repo(publish: OutputNaming, source: str, weight_format: str) -> str:
    """The repo a draft's OpenVINO export in one weight format is published to (see the module docstring).

    Args:
        publish: the recipe's publish settings (namespace, `draft_name` template, draft home namespace).
        source: the draft's Hub repo id.
        weight_format: the published draft's weight format (`int4`, `int8`), for the template's
            `{weight_format}` (a template without it gives one name for every format).

    Returns:
        `{publish.namespace}/{name}`, validated.

    Raises:
        Skip: `source` or the resulting id is not a valid repo id, or `weight_format` is not one of
            `DRAFT_WEIGHT_FORMATS` (the reason is named).
    """
    if weight_format not in DRAFT_WEIGHT_FORMATS:
        raise Skip(
            f"cannot name the draft of {source} for weight format {weight_format!r}: not one of "
            f"{', '.join(DRAFT_WEIGHT_FORMATS)}",
            subject=source,
        )
    fill = {WEIGHT_FORMAT_FIELD: weight_format}
    return _output_repo(
        publish.namespace, publish.draft_name, "source_name", publish.draft_home_namespace, source, "draft", fill
    )


def draft_output_repos(publish: OutputNaming, source: str) -> dict[str, str]:
    """Every repo the draft of `source` may be published in: weight format -> repo, in
    `DRAFT_WEIGHT_FORMATS` order (one repo for all when the template has no `{weight_format}`).

    Planning reads each distinct one to find where the source is published now, whatever format won last time.

    Raises:
        Skip: as `draft_output_repo`.
    """
    return {fmt: draft_output_repo(publish, source, fmt) for fmt in DRAFT_WEIGHT_FORMATS}


def target_output_repo(publish: OutputNaming, target: str) -> str:
    """The repo a target's OpenVINO export is published to; the same rule as `draft_output_repo`, with the
    `target_name` template and the target home namespace.

    Raises:
        Skip: `target` or the resulting id is not a valid repo id.
    """
    return _output_repo(
        publish.namespace, publish.target_name, "target_name", publish.target_home_namespace, target, "target"
    )


def template_parts(template: str, field: str, fill: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The fixed text before and after the single `{field}` of a name template, with each field of `fill` (which
    the template may hold at most once) replaced by its value.

    Raises:
        ValueError: the template does not hold `{field}` exactly once, holds a `fill` field twice, holds another
            field, a format spec or a conversion (each makes the mapping from source to output name
            non-injective or unpredictable).
    """
    fill = fill or {}
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"name template {template!r} is malformed: {exc}") from None
    fields = [(name, spec, conversion) for _, name, spec, conversion in parsed if name is not None]
    names = [name for name, _, _ in fields]
    if (
        names.count(field) != 1
        or any(spec or conversion is not None for _, spec, conversion in fields)
        or any(name != field and name not in fill for name in names)
        or any(names.count(name) > 1 for name in fill)
    ):
        optional = "".join(f", {{{name}}} at most once" for name in fill)
        raise ValueError(
            f"name template {template!r} must contain {{{field}}} exactly once{optional} and no other field"
        )
    parts: tuple[list[str], list[str]] = ([], [])  # before and after `{field}`; literals come unescaped
    side = 0
    for literal, name, _, _ in parsed:
        parts[side].append(literal)
        if name == field:
            side = 1
        elif name is not None:
            parts[side].append(fill[name])
    return "".join(parts[0]), "".join(parts[1])


def _output_repo(
    namespace: str,
    template: str,
    field: str,
    home: str | None,
    source: str,
    role: str,
    fill: Mapping[str, str] | None = None,
) -> str:
    validate_repo_id(source, what=f"{role} repo id")
    source_namespace, source_name = source.split("/")
    try:
        prefix, suffix = template_parts(template, field, fill)
    except ValueError as exc:
        raise Skip(f"cannot name the output of {source}: {exc}", subject=source) from None
    is_home = home is not None and source_namespace.lower() == home.lower()
    if is_home and NAMESPACE_SEPARATOR not in source_name:
        inner = source_name
    else:
        inner = f"{source_namespace}{NAMESPACE_SEPARATOR}{source_name}"
    name = prefix + inner + suffix
    must_shorten = (
        len(name) > MAX_NAME_LENGTH
        or (inner != source_name and "_" in source_namespace)
        or _SHORTENED_TAIL.search(inner) is not None
    )
    if must_shorten:
        name = _shortened(prefix, inner, suffix, source)
    output = f"{namespace}/{name}"
    try:
        return validate_repo_id(output, what=f"output repo id for {role} {source}")
    except Skip as skip:
        raise skip.at(subject=source) from None


def _shortened(prefix: str, inner: str, suffix: str, source: str) -> str:
    """`prefix + cut inner + -h<hash> + suffix`, at most MAX_NAME_LENGTH characters, deterministic."""
    tail = "-h" + hashlib.sha256(source.lower().encode()).hexdigest()[:HASH_DIGITS]
    room = MAX_NAME_LENGTH - len(prefix) - len(suffix) - len(tail)
    cut = inner[: max(room, 0)].rstrip("-._")  # no `--`, `.-` or `_-` where the hash is joined on
    return prefix + cut + tail + suffix


# ---- the recipe's own status repo and collection ----

RECIPE_SLUG_LENGTH = 24  # leaves room for the collection title's fixed text within the Hub's 60 characters
STATUS_REPO_SUFFIX = "-bot-status"
COLLECTION_TITLE = "DFlash drafts for OpenVINO GenAI ({recipe})"
_PLAIN_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?")


def recipe_slug(recipe_name: str) -> str:
    """The recipe's name as it appears in its default status repo and collection title: one per recipe.

    A name that is already short, lower-case and made of `a-z0-9._-` is used as it is (`dflash` keeps the status
    repo `{namespace}/dflash-bot-status`); any other name, and one ending like a shortened one, is cut and given
    `-h` and 12 hex digits of its SHA-256, so two names (even differing only in case, which Hub repo ids do not
    tell apart) never give one slug.
    """
    plain = (
        len(recipe_name) <= RECIPE_SLUG_LENGTH
        and _PLAIN_SLUG.fullmatch(recipe_name) is not None
        and "--" not in recipe_name
        and ".." not in recipe_name
        and _SHORTENED_TAIL.search(recipe_name) is None
    )
    if plain:
        return recipe_name
    tail = "-h" + hashlib.sha256(recipe_name.encode()).hexdigest()[:HASH_DIGITS]
    words = re.sub(r"[^a-z0-9]+", "-", recipe_name.lower()).strip("-")
    return (words[: RECIPE_SLUG_LENGTH - len(tail)].rstrip("-") or "recipe") + tail


def default_status_repo(namespace: str, recipe_name: str) -> str:
    """`{namespace}/{recipe slug}-bot-status`: the status repo of a recipe that names none."""
    return f"{namespace}/{recipe_slug(recipe_name)}{STATUS_REPO_SUFFIX}"


def default_collection_title(recipe_name: str) -> str:
    """The collection title of a recipe that names none: the recipe's slug in it, so two recipes publishing to
    one namespace never keep (and prune) one collection."""
    return COLLECTION_TITLE.format(recipe=recipe_slug(recipe_name))


def status_repo_id(template: str | None, namespace: str, recipe_name: str) -> str:
    """The status repo a recipe writes: its `publish.status_repo` with `{namespace}` and `{recipe}` (the
    recipe's slug) filled in, or `default_status_repo` when it names none.

    Raises:
        ValueError: the template holds another field, a format spec or a conversion, or does not make a valid
            dataset repo id (the recipe loader reports it against `publish.status_repo`).
    """
    if template is None:
        return default_status_repo(namespace, recipe_name)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"status repo template {template!r} is malformed: {exc}") from None
    fields = {(name, spec, conversion) for _, name, spec, conversion in parsed if name is not None}
    if not fields <= {("namespace", "", None), ("recipe", "", None)}:
        raise ValueError(f"status repo template {template!r} may only use {{namespace}} and {{recipe}}")
    repo_id = template.format(namespace=namespace, recipe=recipe_slug(recipe_name))
    try:
        return validate_repo_id(repo_id, what="publish.status_repo")
    except Skip as skip:
        raise ValueError(skip.message) from None
