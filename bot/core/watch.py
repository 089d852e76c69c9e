"""The recipe's `watch` section: which Hub repos are candidates, whose drafts are built on schedule, what is never
built, and how long a remembered skip stands (`bot.core.recipe.Recipe.watch`).

Parsed with the rest of the recipe (`bot.core.recipe.load_recipe`): unknown keys are errors, as everywhere in it.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from bot.core.recipe_section import RecipeSection

DraftKind = Literal["dflash", "dflash-other-base", "dflash2", "dspark", "unknown"]
MAX_DURATION = dt.timedelta(days=3650)  # an odd value is refused with a message rather than overflowing a date later


class SourceQuery(RecipeSection):
    """One server-side filtered listing (author + search + tags): a page of results costs one request."""

    author: str | None = None
    search: str | None = None
    filter_tags: list[str] = Field(default_factory=list, description="tags every result must carry")


# A Hub namespace (user or organisation) as the Hub spells one; matched case-insensitively, as the Hub does.
AUTHOR_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
Author = Annotated[str, Field(pattern=AUTHOR_PATTERN)]
# An `exclude` entry: a repo id, an author, or a pattern of either with `*`, `?` or `[...]` (fnmatch).
_EXCLUDE_PATTERN = re.compile(r"^[A-Za-z0-9._*?\[\]!-]{1,96}(/[A-Za-z0-9._*?\[\]!-]{1,96})?$")


def _query_key(query: SourceQuery) -> tuple[str, str, tuple[str, ...]]:
    return ((query.author or "").lower(), (query.search or "").lower(), tuple(sorted(query.filter_tags)))


class TrustRules(RecipeSection):
    """Who gets published on schedule (docs/design.md §14): the authors whose drafts are built without asking, and
    the authors whose models may be their targets. Anything else the searches find is seen, not approved: reported
    with the two ways to approve it (name its author here, or dispatch that repo once), never built on schedule."""

    draft_authors: list[Author] = Field(
        default_factory=list, description="authors whose drafts are built on schedule (each listed whole, every page)"
    )
    target_authors: list[Author] = Field(
        default_factory=list, description="authors whose models may be the target of a draft built on schedule"
    )

    @field_validator("draft_authors", "target_authors")
    @classmethod
    def _unique_authors(cls, authors: list[str]) -> list[str]:
        first: dict[str, str] = {}
        for author in authors:
            first.setdefault(author.lower(), author)
        return list(first.values())


class WatchRules(RecipeSection):
    """Which Hub repos are candidates, found with server-side filters so a run costs few requests.

    Each trusted author is listed whole for every search word (`authored_queries`), so no number of other repos can
    push a trusted draft out of the listing; a source without an author is the radar: the whole Hub, the newest
    `max_candidates` repos of that search alone, seen and reported, built only when trusted or dispatched.
    """

    sources: list[SourceQuery] = Field(
        default_factory=lambda: [SourceQuery(author="z-lab", search="DFlash")], min_length=1
    )
    trust: TrustRules = Field(default_factory=TrustRules)
    kinds: list[DraftKind] = Field(default_factory=lambda: list[DraftKind](["dflash"]), description="kinds to build")
    exclude: list[str] = Field(
        default_factory=list,
        description="repo ids, authors or fnmatch patterns of either (`mallory`, `someone/*-test`) never to build; "
        "matched case-insensitively, as the Hub matches ids",
    )
    max_candidates: int = Field(
        200, ge=1, le=100_000, description="the radar: the newest repos listed per whole-Hub search (each apart)"
    )
    max_checkpoint_bytes: int | None = Field(
        None,
        ge=1,
        description="an optional cap on the draft + target bytes downloaded; unset, the runner classes decide (a pair "
        "no class takes is skipped at planning, naming the class it needs)",
    )
    recheck_after: dt.timedelta | None = Field(
        dt.timedelta(days=7),
        description="re-examine a remembered skip or failure after this age (e.g. 7d, 12h); "
        "null: only when its revision, the toolchain or the recipe changes",
    )

    @field_validator("exclude")
    @classmethod
    def _exclude_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if not _EXCLUDE_PATTERN.match(pattern):
                raise ValueError(
                    f"{pattern!r} is not a repo id, an author or a pattern of either (letters, digits, '.', '_', "
                    "'-', and the wildcards '*', '?', '[...]'; e.g. 'mallory' or 'someone/*-test')"
                )
        return patterns

    def authored_queries(self) -> list[SourceQuery]:
        """The listings that are read whole: every source that names an author, and each trusted draft author for
        every search of the radar (the sources without one). A recipe whose sources all name authors is listed as
        it says, and nothing more."""
        queries = [query for query in self.sources if query.author]
        seen = {_query_key(query) for query in queries}
        for author in self.trust.draft_authors:
            for query in self.radar_queries():
                authored = query.model_copy(update={"author": author})
                if _query_key(authored) not in seen:
                    seen.add(_query_key(authored))
                    queries.append(authored)
        return queries

    def radar_queries(self) -> list[SourceQuery]:
        """The whole-Hub searches: bounded to `max_candidates` each, the finder of formats and authors nobody
        trusts yet."""
        return [query for query in self.sources if not query.author]

    @field_validator("recheck_after", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip().upper().startswith("P"):  # ISO 8601 ("P7D"): pydantic's
            return parse_duration(value)
        return value

    @field_validator("recheck_after")
    @classmethod
    def _sane_duration(cls, value: dt.timedelta | None) -> dt.timedelta | None:
        if value is not None and not dt.timedelta(0) <= value <= MAX_DURATION:
            raise ValueError(
                f"must be between 0s and {MAX_DURATION.days}d (null: never by age), not {value.total_seconds():g}s"
            )
        return value


_DURATION_RE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> dt.timedelta | None:
    """`30m`, `12h`, `7d`, `2w` (or `none`) as a timedelta.

    Raises:
        ValueError: anything else (pydantic reports it against the recipe key).
    """
    if text.strip().lower() in ("none", "never", ""):
        return None
    found = _DURATION_RE.match(text)
    if not found:
        raise ValueError(f"invalid duration {text!r}: expected a number and a unit s, m, h, d or w (e.g. 7d)")
    try:
        return dt.timedelta(**{_DURATION_UNITS[found.group(2)]: int(found.group(1))})
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long (at most {MAX_DURATION.days}d)") from None
