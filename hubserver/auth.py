"""Who is calling, and what they may see and change.

The main token belongs to the server's user and may do anything (it is also the admin token). Extra tokens,
added at runtime, belong to other users, read-only unless created with `write`; a user may be a member of
organisations and then reads their private repos and, with a write token, writes to them. Gated repos need a
grant for the user. Only sha256 digests of tokens are kept, in memory and in `accounts.json`: no token value is
ever written to disk or to a log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from . import errors
from .storage import Repo, write_json_atomic


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    """The identity behind one request. `user` is None for anonymous callers."""

    user: str | None
    write: bool = False
    admin: bool = False
    orgs: tuple[str, ...] = ()

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.user, *self.orgs) if self.user else ()


ANONYMOUS = Caller(user=None)


@dataclass(frozen=True)
class TokenGrant:
    """What an extra token stands for."""

    user: str
    write: bool
    orgs: tuple[str, ...]


class Accounts:
    """Tokens and gated-repo grants, persisted in `data_dir/accounts.json`."""

    def __init__(self, data_dir: Path, main_user: str, main_token: str):
        self._path = Path(data_dir) / "accounts.json"
        self._main_user = main_user
        self._main_digest = _digest(main_token)
        self._lock = threading.Lock()
        self._tokens: dict[str, TokenGrant] = {}
        self._grants: set[tuple[str, str, str]] = set()  # (repo_type, repo_id, user)
        if self._path.is_file():
            data = json.loads(self._path.read_text(encoding="utf-8"))
            self._tokens = {
                digest: TokenGrant(user=t["user"], write=t["write"], orgs=tuple(t["orgs"]))
                for digest, t in data["tokens"].items()
            }
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
            return Caller(user=self._main_user, write=True, admin=True)
        grant = self._tokens.get(digest)
        if grant is None:
            raise errors.HubError(401, errors.INVALID_CREDENTIALS)
        return Caller(user=grant.user, write=grant.write, orgs=grant.orgs)

    def add_token(self, token: str, user: str, *, write: bool, orgs: tuple[str, ...] = ()) -> None:
        if not token or not user:
            raise errors.bad_request("token and user are required")
        if hmac.compare_digest(_digest(token), self._main_digest):
            raise errors.bad_request("That token is the main token")
        with self._lock:
            self._tokens[_digest(token)] = TokenGrant(user=user, write=write, orgs=tuple(orgs))
            self._save()

    def grant(self, repo_type: str, repo_id: str, user: str) -> None:
        with self._lock:
            self._grants.add((repo_type, repo_id, user))
            self._save()

    def _save(self) -> None:
        write_json_atomic(
            self._path,
            {
                "tokens": {
                    digest: {"user": t.user, "write": t.write, "orgs": list(t.orgs)}
                    for digest, t in self._tokens.items()
                },
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

    def require_write(self, caller: Caller, namespace: str, what: str) -> None:
        """Refuse a change to `namespace` unless the caller holds a write token for it.

        Raises:
            HubError: 401 for anonymous callers (the Hub's "Invalid username or password."), 403 otherwise.
        """
        if caller.user is None:
            raise errors.unauthorized()
        if caller.admin or (caller.write and namespace in caller.namespaces):
            return
        if not caller.write:
            raise errors.forbidden(f"Your token is read-only: you cannot {what}")
        raise errors.forbidden(f"You don't have the rights to {what} under the namespace {namespace!r}")

    def require_admin(self, caller: Caller) -> None:
        if caller.user is None:
            raise errors.unauthorized()
        if not caller.admin:
            raise errors.forbidden("Admin endpoints need the server's main token")
