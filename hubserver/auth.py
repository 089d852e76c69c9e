"""Who is calling, and what they may see and change.

The main token belongs to the server's user and may do anything (it is also the admin token). Extra tokens,
added at runtime, belong to other users, read-only unless created with `write`; a user may be a member of
organisations and then reads their private repos and, with a write token, writes to them. Gated repos need a
grant for the user. Only sha256 digests of tokens are kept, in memory and in `accounts.json`: no token value is
ever written to disk or to a log.

The permission model is the Hub's: a token's role is `read`, `write` or `fineGrained`; a user's role in an
organisation (`roleInOrg`) is `admin`, `write`, `contributor` or `read`, and only the first three may create and
write repos there; a fine-grained token writes repos only in the namespaces it is scoped to with `repo.write`, and
collections only with `collection.write`. `whoami` answers `/api/whoami-v2` in the Hub's shape (`HfApi.whoami`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import errors
from .storage import Repo, write_json_atomic


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKEN_ROLES = ("read", "write", "fineGrained")
ORG_ROLES = ("admin", "write", "contributor", "read")
WRITING_ORG_ROLES = ("admin", "write", "contributor")
REPO_WRITE = "repo.write"
COLLECTION_WRITE = "collection.write"


@dataclass(frozen=True)
class Scope:
    """One entry of a fine-grained token's `scoped` list: what it may do in one user's or organisation's namespace."""

    entity: str
    permissions: tuple[str, ...]
    entity_type: str = "org"


@dataclass(frozen=True)
class Caller:
    """The identity behind one request. `user` is None for anonymous callers.

    `org_roles` maps an organisation to the user's role there (`write` when not given); `scopes` are a fine-grained
    token's (`role == "fineGrained"`).
    """

    user: str | None
    write: bool = False
    admin: bool = False
    orgs: tuple[str, ...] = ()
    role: str = ""
    org_roles: Mapping[str, str] = field(default_factory=dict)
    scopes: tuple[Scope, ...] = ()
    fullname: str = ""

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.user, *self.orgs) if self.user else ()

    @property
    def token_role(self) -> str:
        return self.role or ("write" if self.write else "read")

    def may(self, namespace: str, permission: str) -> bool:
        """Whether this caller may change `namespace` in the way `permission` names (`repo.write`, ...)."""
        if self.admin:
            return True
        if namespace not in self.namespaces or self.token_role == "read":
            return False
        if namespace != self.user and self.org_roles.get(namespace, "write") not in WRITING_ORG_ROLES:
            return False
        if self.token_role == "fineGrained":
            return any(s.entity == namespace and permission in s.permissions for s in self.scopes)
        return True


ANONYMOUS = Caller(user=None)


@dataclass(frozen=True)
class TokenGrant:
    """What an extra token stands for."""

    user: str
    write: bool
    orgs: tuple[str, ...]
    role: str = ""
    org_roles: Mapping[str, str] = field(default_factory=dict)
    scopes: tuple[Scope, ...] = ()
    fullname: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "write": self.write,
            "orgs": list(self.orgs),
            "role": self.role,
            "org_roles": dict(self.org_roles),
            "scopes": [
                {"entity": s.entity, "type": s.entity_type, "permissions": list(s.permissions)} for s in self.scopes
            ],
            "fullname": self.fullname,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenGrant:
        scopes = tuple(
            Scope(s["entity"], tuple(s["permissions"]), s.get("type", "org")) for s in data.get("scopes", ())
        )
        return cls(
            user=data["user"],
            write=data["write"],
            orgs=tuple(data["orgs"]),
            role=data.get("role", ""),
            org_roles=dict(data.get("org_roles", {})),
            scopes=scopes,
            fullname=data.get("fullname", ""),
        )


def whoami(caller: Caller) -> dict[str, Any]:
    """The Hub's `/api/whoami-v2` answer for an identified caller: the user, their organisations with the role they
    hold in each, and the token's role (with a fine-grained token's scopes)."""
    assert caller.user is not None
    orgs = [
        {"type": "org", "name": org, "fullname": org, "roleInOrg": caller.org_roles.get(org, "write")}
        for org in caller.orgs
    ]
    token: dict[str, Any] = {"displayName": "local", "role": caller.token_role}
    if caller.token_role == "fineGrained":
        token["fineGrained"] = {
            "canReadGatedRepos": True,
            "global": [],
            "scoped": [
                {"entity": {"type": s.entity_type, "name": s.entity}, "permissions": list(s.permissions)}
                for s in caller.scopes
            ],
        }
    return {
        "type": "user",
        "name": caller.user,
        "fullname": caller.fullname or caller.user,
        "orgs": orgs,
        "auth": {"type": "access_token", "accessToken": token},
    }


class Accounts:
    """Tokens and gated-repo grants, persisted in `data_dir/accounts.json`."""

    def __init__(self, data_dir: Path, main_user: str, main_token: str, main_orgs: tuple[str, ...] = ()):
        self._path = Path(data_dir) / "accounts.json"
        self._main_user = main_user
        self._main_orgs = tuple(main_orgs)
        self._main_digest = _digest(main_token)
        self._lock = threading.Lock()
        self._tokens: dict[str, TokenGrant] = {}
        self._grants: set[tuple[str, str, str]] = set()  # (repo_type, repo_id, user)
        if self._path.is_file():
            data = json.loads(self._path.read_text(encoding="utf-8"))
            self._tokens = {digest: TokenGrant.from_json(t) for digest, t in data["tokens"].items()}
            self._grants = {(repo_type, repo_id, user) for repo_type, repo_id, user in data["grants"]}

    @property
    def main_user(self) -> str:
        return self._main_user

    def identify(self, authorization: str | None) -> Caller:
        """Map an `Authorization: Bearer <token>` header to a caller.

        Raises:
            HubError: 401 "Invalid credentials in Authorization header" for a token nobody issued, as the Hub does
                even on public reads, so a mistyped token is noticed at once.
        """
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise errors.HubError(401, errors.INVALID_CREDENTIALS)
        digest = _digest(token.strip())
        if hmac.compare_digest(digest, self._main_digest):
            # The main user may write anywhere; whoami lists the organisations it was declared a member of
            # (admin there), as the Hub lists a maintainer's organisations.
            return Caller(
                user=self._main_user,
                write=True,
                admin=True,
                orgs=self._main_orgs,
                org_roles=dict.fromkeys(self._main_orgs, "admin"),
            )
        grant = self._tokens.get(digest)
        if grant is None:
            raise errors.HubError(401, errors.INVALID_CREDENTIALS)
        return Caller(
            user=grant.user,
            write=grant.write,
            orgs=grant.orgs,
            role=grant.role,
            org_roles=grant.org_roles,
            scopes=grant.scopes,
            fullname=grant.fullname,
        )

    def add_main_org(self, org: str) -> None:
        """Make the main user a member (admin) of `org`, as whoami will list it from now on."""
        with self._lock:
            if org not in self._main_orgs:
                self._main_orgs = (*self._main_orgs, org)

    def add_token(
        self,
        token: str,
        user: str,
        *,
        write: bool,
        orgs: tuple[str, ...] = (),
        role: str = "",
        org_roles: Mapping[str, str] | None = None,
        scopes: tuple[Scope, ...] = (),
        fullname: str = "",
    ) -> None:
        """Issue a token for `user`. `role` (`read`, `write`, `fineGrained`) defaults to what `write` says; a
        fine-grained token writes only where one of its `scopes` allows it; `org_roles` gives the user's role in
        each of `orgs` (default `write`)."""
        if not token or not user:
            raise errors.bad_request("token and user are required")
        if hmac.compare_digest(_digest(token), self._main_digest):
            raise errors.bad_request("That token is the main token")
        if role and role not in TOKEN_ROLES:
            raise errors.bad_request(f"role must be one of {', '.join(TOKEN_ROLES)}")
        roles = dict(org_roles or {})
        if any(r not in ORG_ROLES for r in roles.values()) or set(roles) - set(orgs):
            raise errors.bad_request(f"org_roles name orgs of the user, each one of {', '.join(ORG_ROLES)}")
        grant = TokenGrant(
            user=user,
            write=write or role == "write",
            orgs=tuple(orgs),
            role=role,
            org_roles=roles,
            scopes=tuple(scopes),
            fullname=fullname,
        )
        with self._lock:
            self._tokens[_digest(token)] = grant
            self._save()

    def grant(self, repo_type: str, repo_id: str, user: str) -> None:
        with self._lock:
            self._grants.add((repo_type, repo_id, user))
            self._save()

    def _save(self) -> None:
        write_json_atomic(
            self._path,
            {
                "tokens": {digest: t.to_json() for digest, t in self._tokens.items()},
                "grants": sorted(self._grants),
            },
        )

    # Policy

    def can_see(self, caller: Caller, repo: Repo) -> bool:
        """Private repos exist only for their namespace's members (and the admin)."""
        return not repo.private or caller.admin or repo.namespace in caller.namespaces

    def can_download(self, caller: Caller, repo: Repo) -> bool:
        """Gating hides file contents only; listings, model_info and trees stay visible, as on the Hub."""
        if not self.can_see(caller, repo):
            return False
        if not repo.gated or caller.admin or repo.namespace in caller.namespaces:
            return True
        return caller.user is not None and (repo.repo_type, repo.repo_id, caller.user) in self._grants

    def require_write(self, caller: Caller, namespace: str, what: str, permission: str = REPO_WRITE) -> None:
        """Refuse a change to `namespace` unless the caller's token may make it (`Caller.may`).

        Raises:
            HubError: 401 for anonymous callers (the Hub's "Invalid username or password."), 403 otherwise.
        """
        if caller.user is None:
            raise errors.unauthorized()
        if caller.may(namespace, permission):
            return
        if caller.token_role == "read":
            raise errors.forbidden(f"Your token is read-only: you cannot {what}")
        if caller.token_role == "fineGrained" and namespace in caller.namespaces:
            raise errors.forbidden(
                f"Your fine-grained token has no {permission} permission on {namespace!r}: you cannot {what}"
            )
        raise errors.forbidden(f"You don't have the rights to {what} under the namespace {namespace!r}")

    def require_admin(self, caller: Caller) -> None:
        if caller.user is None:
            raise errors.unauthorized()
        if not caller.admin:
            raise errors.forbidden("Admin endpoints need the server's main token")
