"""Who gets published: the recipe's trusted authors, a maintainer's dispatch, and the look-alikes (docs/design.md §14).

The whole-Hub searches find every draft format, and also every stranger's upload. What the organisation publishes
under its name is decided here, by the recipe and the maintainer only: a draft is built on schedule when its author
is one of the recipe's `watch.trust.draft_authors` and its target's author one of `watch.trust.target_authors`; a
manual dispatch of one repo (`run --only`, the Actions `source` input) approves that draft and its target once.
Anything else is *seen, not approved*: reported with its author and the two ways to approve it, never built.

Ids are matched as the Hub matches them, case-insensitively. An author that imitates a trusted one (a confusable
character, a separator, an edit or two away: `z-1ab`, `zlab`, `z-labs`) is still a stranger, and its reason says
which trusted author it looks like, so a maintainer approving it does so with open eyes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from bot.core.errors import Skip, Stage
from bot.core.recipe import Recipe
from bot.core.record import Approval
from bot.core.watch import TrustRules

# Characters that read alike in a repo id (the Hub allows ASCII letters, digits, '-', '_', '.'), folded to one.
_CONFUSABLE = str.maketrans({"0": "o", "1": "l", "i": "l", "|": "l", "3": "e", "5": "s", "8": "b", "$": "s"})
_SEPARATORS = str.maketrans("", "", "-_.")
_DIGRAPHS = (("rn", "m"), ("vv", "w"), ("cl", "d"))


def not_approved(reason: str, repo_id: str) -> Skip:
    """Seen, not approved: a `Skip` at `Stage.APPROVE`, which the status memory never keeps for planning
    (`Fault.DECISION`): not a failure, and the next run decides again."""
    return Skip(reason, subject=repo_id, stage=Stage.APPROVE)


def dispatch_hint(repo_id: str) -> str:
    """How a maintainer approves one repo by hand: the two spellings of a dispatch."""
    return f"`dflash-bot run --only {repo_id}`, or on Actions the watch workflow's Run workflow with source={repo_id}"


def author_of(repo_id: str) -> str:
    return repo_id.partition("/")[0]


def skeleton(author: str) -> str:
    """The author as it reads: lower case, confusable characters folded, separators dropped."""
    folded = author.lower().translate(_CONFUSABLE).translate(_SEPARATORS)
    for pair, single in _DIGRAPHS:
        folded = folded.replace(pair, single)
    return folded


def edit_distance(left: str, right: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions), for names of at most a few dozen characters."""
    previous = list(range(len(right) + 1))
    for i, a in enumerate(left, 1):
        current = [i]
        for j, b in enumerate(right, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def lookalike(author: str, trusted: list[str]) -> str | None:
    """The trusted author this one imitates, or None: the same skeleton, or within one edit (two for names of eight
    characters or more) of a trusted author, without being it."""
    lowered = author.lower()
    for name in trusted:
        if name.lower() == lowered:
            return None
    for name in trusted:
        allowed = 2 if len(name) >= 8 else 1
        if skeleton(name) == skeleton(author) or edit_distance(name.lower(), lowered) <= allowed:
            return name
    return None


def excluded_by(repo_id: str, patterns: list[str]) -> str | None:
    """The recipe's `watch.exclude` entry that matches a repo id, case-insensitively (None: not excluded). An entry
    without a '/' is an author (or a pattern of authors)."""
    lowered = repo_id.lower()
    for pattern in patterns:
        target = lowered if "/" in pattern else author_of(lowered)
        if fnmatch.fnmatchcase(target, pattern.lower()):
            return pattern
    return None


def exclusion(repo_id: str, patterns: list[str]) -> str | None:
    """Why the recipe's `watch.exclude` rules a repo out (None: it does not), in the one wording every caller uses."""
    pattern = excluded_by(repo_id, patterns)
    return f"excluded by the recipe's watch.exclude entry '{pattern}'" if pattern else None


@dataclass(frozen=True)
class Trust:
    """One run's approvals: the recipe's trusted authors and the repo a maintainer dispatched (if any).

    Args:
        rules: the recipe's `watch.trust`.
        dispatched: the repo of this run's `--only` (a maintainer's manual dispatch), approved with its target.
    """

    rules: TrustRules
    dispatched: str | None = None

    @classmethod
    def of(cls, recipe: Recipe, dispatched: str | None = None) -> Trust:
        return cls(recipe.watch.trust, dispatched)

    def draft_trusted(self, repo_id: str) -> bool:
        return _among(author_of(repo_id), self.rules.draft_authors)

    def target_trusted(self, repo_id: str) -> bool:
        return _among(author_of(repo_id), self.rules.target_authors)

    def is_dispatched(self, repo_id: str) -> bool:
        return self.dispatched is not None and self.dispatched.lower() == repo_id.lower()

    def approval(self, repo_id: str) -> Approval | None:
        """Why a draft may be built now: its author is trusted ("recipe"), or this run is its dispatch
        ("dispatch"); None: seen, not approved."""
        if self.draft_trusted(repo_id):
            return "recipe"
        return "dispatch" if self.is_dispatched(repo_id) else None

    def require_draft(self, repo_id: str) -> Approval:
        """The draft's approval.

        Raises:
            Skip: at `Stage.APPROVE`, its author is not trusted and this run is not its dispatch; the reason names
                the author, the look-alike if any, and the two ways to approve it.
        """
        approval = self.approval(repo_id)
        if approval is None:
            raise not_approved(self.draft_reason(repo_id), repo_id)
        return approval

    def require_target(self, draft_repo: str, target_repo: str) -> None:
        """A trusted draft's target must be from a trusted author too (its weights are what users get), unless the
        draft was dispatched: the dispatch approves the pair.

        Raises:
            Skip: at `Stage.APPROVE`, naming the target's author and the two ways to approve the pair.
        """
        if self.target_trusted(target_repo) or self.is_dispatched(draft_repo):
            return
        author = author_of(target_repo)
        raise not_approved(
            f"seen, not approved: its target {target_repo} is by '{author}'"
            f"{_looks_like(author, self.rules.target_authors)}, who is not among the recipe's trusted target authors "
            f"(watch.trust.target_authors); to build the pair, add '{author}' there, or dispatch {draft_repo} once "
            f"({dispatch_hint(draft_repo)})",
            draft_repo,
        )

    def draft_reason(self, repo_id: str) -> str:
        """Why a draft is seen, not approved, and how to approve it."""
        author = author_of(repo_id)
        return (
            f"seen, not approved: author '{author}'{_looks_like(author, self.rules.draft_authors)} is not among the "
            f"recipe's trusted draft authors (watch.trust.draft_authors); to build it, add '{author}' there, or "
            f"dispatch this repo once ({dispatch_hint(repo_id)})"
        )


def _among(author: str, authors: list[str]) -> bool:
    lowered = author.lower()
    return any(name.lower() == lowered for name in authors)


def _looks_like(author: str, trusted: list[str]) -> str:
    imitated = lookalike(author, trusted)
    return f" (a look-alike of the trusted '{imitated}', and not it)" if imitated else ""
