"""Before any download: who the tokens are, and whether the write token may publish where the recipe says.

A wrong namespace used to cost a whole build: the first `create_repo` after hours of export answered 403, and the
status page could not be written either, so the next run did the same work again. `run`, `publish` and
`dflash-bot check` therefore ask the Hub who the token is (`/api/whoami-v2`, one request) and check, with the Hub's
permission model (`hubserver.auth` mirrors it), that it may create and write repos in `publish.namespace`, write the
status repo and the collection, and that `publish.bot_user` (when set) is that user. The Actions plan job holds no
write token: it checks its read token, and the publish job runs `dflash-bot check` before it downloads the bundles.

Whether there is a write token at all is asked in one place, `require_write_token`, by `run` (before the token
leaves the environment), by `pipeline.run` (for callers that are no command line) and by `publish`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from bot.core import log
from bot.core.errors import Stage, UsageError
from bot.core.hub_records import TokenIdentity
from bot.core.recipe import Recipe
from bot.core.settings import Settings
from bot.hub.client import Hub

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


def require_write_token(token: str | None, *, dry_run_hint: bool = False, stage: Stage | None = None) -> str:
    """The write token, or the one error every publishing path gives without it (before any Hub call).

    Args:
        token: `HF_TOKEN` as the settings (or a writer `Hub`) hold it.
        dry_run_hint: the command has a `--dry-run` that would work without one: the message says so.
        stage: the stage the error names (None: a usage error of the command line).

    Raises:
        UsageError: no write token.
    """
    if token:
        return token
    fix = "set it, or use --dry-run to see the plan" if dry_run_hint else "set it"
    raise UsageError(f"no write token (HF_TOKEN) is set, so nothing could be published: {fix}", stage=stage)


def reader_token_name(settings: Settings) -> str:
    """The variable the read side's token comes from (the write token stands in when no read token is set)."""
    return "HF_READ_TOKEN" if settings.read_token else "HF_TOKEN"


def check_read_side(reader: Hub, settings: Settings, only: str | None, *, identity_known: bool = False) -> None:
    """The read token is one the Hub accepts (unless the write token's check just said who it is), and a `--only`
    repo exists."""
    if not identity_known:
        check_reader(reader, reader_token_name(settings))
    check_only(reader, only)


def check_tokens(settings: Settings, recipe: Recipe, *, read_only: bool = False) -> Iterator[str]:
    """`dflash-bot check`: each token the settings hold, checked against the Hub and the recipe; yields one line
    per token that passed, the write token's first (so a failing read token is reported after it).

    Raises:
        UsageError: no token to check, or the write token may not publish where the recipe says.
        HubError: the Hub rejected a token or could not be reached.
    """
    if not settings.read_token and (read_only or not settings.write_token):
        wanted = "HF_READ_TOKEN" if read_only else "HF_TOKEN (publishing) or HF_READ_TOKEN (reading)"
        raise UsageError(f"no token to check: set {wanted}")
    if settings.write_token and not read_only:
        writer = Hub(settings.endpoint, settings.write_token, settings=recipe.hub, token_name="HF_TOKEN")
        identity = check_writer(writer, recipe)
        yield (
            f"HF_TOKEN: {identity.user} ({identity.role} token) may publish to {recipe.publish.namespace}, the "
            f"status repo {recipe.status_repo_id} and the collection in {recipe.publish.collection_namespace}"
        )
    if settings.read_token:
        reader = Hub(settings.endpoint, settings.read_token, settings=recipe.hub, token_name="HF_READ_TOKEN")
        found = check_reader(reader, "HF_READ_TOKEN")
        assert found is not None
        yield f"HF_READ_TOKEN: {found.user} ({found.role} token) is accepted by {settings.endpoint}"
