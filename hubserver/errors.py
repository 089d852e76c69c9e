"""HTTP errors the local Hub answers with, shaped so huggingface_hub raises its typed exceptions.

`hf_raise_for_status` (huggingface_hub/utils/_http.py) reads the `X-Error-Code` header first
(`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`, `GatedRepo`) and only then the status code, and it
copies `X-Error-Message` and the JSON `error` into the exception text. Every error here carries both.
"""

from __future__ import annotations

from collections.abc import Mapping

# The exact texts the real Hub sends: callers (and our bot) may match on them.
INVALID_USER_OR_PASSWORD = "Invalid username or password."
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


class HubError(Exception):
    """An error answer: status, message, optional Hub error code, extra headers and body fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, object] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})  # more JSON body fields, e.g. the `url` of an existing repo


def repo_not_found(repo_id: str) -> HubError:
    """Missing and invisible (private) repos look the same, as on the real Hub."""
    return HubError(404, f"Repository {repo_id} not found", code="RepoNotFound")


def revision_not_found(revision: str) -> HubError:
    return HubError(404, f"Invalid rev id: {revision}", code="RevisionNotFound")


def entry_not_found(path: str, commit_id: str | None = None) -> HubError:
    """`X-Repo-Commit` lets the client cache the file's absence for that commit (`.no_exist`)."""
    headers = {"X-Repo-Commit": commit_id} if commit_id else None
    return HubError(404, f"Entry not found: {path}", code="EntryNotFound", headers=headers)


def gated(repo_id: str, authenticated: bool) -> HubError:
    """401 for anonymous callers and 403 for users without a grant, like the Hub; both raise GatedRepoError."""
    message = (
        f"Access to model {repo_id} is restricted and you are not in the authorized list. "
        f"Ask the repo owner for access."
        if authenticated
        else f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it."
    )
    return HubError(403 if authenticated else 401, message, code="GatedRepo")


def unauthorized() -> HubError:
    """A write (or admin call) without any token."""
    return HubError(401, INVALID_USER_OR_PASSWORD)


def forbidden(message: str) -> HubError:
    return HubError(403, message)


def bad_request(message: str) -> HubError:
    return HubError(400, message)


def conflict(message: str, **extra: object) -> HubError:
    return HubError(409, message, extra=extra)
