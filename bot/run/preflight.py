"""Before any download: who the tokens are, and whether the write token may publish where the recipe says.

A wrong namespace used to cost a whole build: the first `create_repo` after hours of export answered 403, and the
status page could not be written either, so the next run did the same work again. `run`, `publish` and
`dflash-bot check` therefore ask the Hub who the token is (`/api/whoami-v2`, one request) and check, with the Hub's
permission model (`hubserver.auth` mirrors it), that it may create and write repos in `publish.namespace`, write the
status repo and the collection, and that `publish.bot_user` (when set) is that user. The Actions plan job holds no
write token: it checks its read token, and the publish job runs `dflash-bot check` before it downloads the bundles.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.core import log
from bot.core.errors import Stage, UsageError
from bot.core.recipe import Recipe
from bot.hub import Hub, TokenIdentity

REPO_WRITE = "repo.write"
COLLECTION_WRITE = "collection.write"
# The roles in an organisation that may create repos there (the Hub's `roleInOrg`; "read" may not).
WRITING_ORG_ROLES = ("admin", "write", "contributor")


@dataclass(frozen=True)
class Need:
    """One namespace the run writes to, what for, and the permission a fine-grained token needs there."""

    namespace: str
    what: str  # "create and write repos", "write the status repo X", "write the collection"
    field: str  # the recipe field that names it
    permission: str = REPO_WRITE


def needs(recipe: Recipe) -> list[Need]:
    """Where a run of `recipe` writes: the output namespace, the status repo's and the collection's."""
    status_repo = recipe.status_repo_id
    return [
        Need(recipe.publish.namespace, "create and write repos", "publish.namespace"),
        Need(status_repo.split("/")[0], f"write the status repo {status_repo}", "publish.status_repo"),
        Need(
            recipe.publish.collection_namespace,
            f"write the collection {recipe.collection_title!r}",
            "publish.collection.namespace",
            COLLECTION_WRITE,
        ),
    ]


def namespaces_writable(identity: TokenIdentity, permission: str = REPO_WRITE) -> list[str]:
    """The namespaces this token may change in the way `permission` names."""
    return [ns for ns in (identity.user, *identity.org_roles) if _why_not(identity, ns, permission) is None]


def _why_not(identity: TokenIdentity, namespace: str, permission: str) -> str | None:
    """Why the token may not do `permission` in `namespace` (None: it may)."""
    if identity.role == "read":
        return "it is a read token"
    if namespace != identity.user:
        if namespace not in identity.org_roles:
            return f"{identity.user!r} is no member of {namespace!r}"
        role = identity.org_roles[namespace]
        if role and role not in WRITING_ORG_ROLES:
            return f"{identity.user!r} has the {role!r} role in {namespace!r}"
    if identity.role == "fineGrained" and permission not in identity.scopes.get(namespace, ()):
        return f"it is a fine-grained token without {permission} on {namespace!r}"
    return None


def problems(identity: TokenIdentity, recipe: Recipe, token_name: str = "HF_TOKEN") -> list[str]:
    """Each reason the token cannot publish `recipe`, one line each saying what to change (empty: it can)."""
    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    for need in needs(recipe):
        if (need.namespace, need.permission) in seen:
            continue
        seen.add((need.namespace, need.permission))
        why = _why_not(identity, need.namespace, need.permission)
        if why is None:
            continue
        writable = namespaces_writable(identity, need.permission)
        choices = f"set {need.field} to one it may write ({', '.join(writable)})" if writable else None
        fix = " or ".join(
            part
            for part in (choices, f"use a write token of a member of {need.namespace} ({_token_fix(need)})")
            if part
        )
        found.append(
            f"{token_name} belongs to {identity.user!r} and may not {need.what} in {need.namespace!r} ({need.field}): "
            f"{why}; {fix}"
        )
    bot_user = recipe.publish.bot_user
    if bot_user is not None and bot_user != identity.user:
        found.append(
            f"publish.bot_user is {bot_user!r} but {token_name} belongs to {identity.user!r}: set publish.bot_user "
            f"to {identity.user!r}, or use {bot_user!r}'s token (reuse trusts only the bot user's commits)"
        )
    return found


def _token_fix(need: Need) -> str:
    return f"role write, or fine-grained with {need.permission} on {need.namespace}"


def check_writer(writer: Hub, recipe: Recipe, token_name: str = "HF_TOKEN") -> TokenIdentity:
    """Ask the Hub who the write token is and refuse, before anything is built, a token that cannot publish.

    Returns:
        The token's identity (its `user` is the bot user the run publishes as).

    Raises:
        UsageError: the token may not write where the recipe publishes, or is not `publish.bot_user`: one line
            naming the namespace, the token's user and the fix.
        HubError: the Hub rejected the token (naming `token_name`) or could not be reached.
    """
    identity = writer.whoami()
    found = problems(identity, recipe, token_name)
    if found:
        raise UsageError(found[0], subject=recipe.publish.namespace, stage=Stage.WHOAMI)
    log.step(
        "%s: %s (%s token) may publish to %s, the status repo %s and the collection",
        token_name,
        identity.user,
        identity.role,
        recipe.publish.namespace,
        recipe.status_repo_id,
    )
    return identity


def check_reader(reader: Hub, token_name: str) -> TokenIdentity | None:
    """Ask the Hub who the read token is (None without one): a rejected token fails here, naming `token_name`,
    rather than as a skip of every gated source."""
    if not reader.token:
        return None
    identity = reader.whoami()
    log.step("%s: %s (%s token)", token_name, identity.user, identity.role)
    return identity


def check_only(reader: Hub, only: str | None) -> None:
    """Refuse a `--only` repo that does not exist (a dispatch with a mistyped id must not end green).

    Raises:
        UsageError: the Hub has no such repo, or the token cannot see it.
    """
    if only is not None and not reader.repo_exists(only):
        raise UsageError(
            f"--only {only}: no such repo on {reader.endpoint} (or private and the token cannot see it): check the "
            "repo id",
            stage=Stage.USAGE,
        )
