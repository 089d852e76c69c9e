"""The card's install line: this project at the exact source that built the card, or nothing (docs/design.md §11).

A package name nobody owns would install whatever someone later registers under it for every reader of every card,
so the line is either a pinned `git+https://...@<sha>` requirement built from the GitHub Actions context of the run
that publishes (`GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`, `GITHUB_SHA`), or the package the recipe names in
`publish.install`, checked to exist on the index first. When neither is known the card gives no install line.
`dflash-bot try` needs only the base install (GenAI, the Hub client and the CLI), so the requirement names no extra.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

from bot.core.errors import Failure, Stage

DISTRIBUTION = "dflash-ov-bot"  # pyproject.toml's [project] name
DEFAULT_INDEX = "https://pypi.org"
_SHA = re.compile(r"^[0-9a-f]{40}$")
_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_SERVER = re.compile(r"^https://[A-Za-z0-9.-]+(:[0-9]+)?$")
# What `publish.install` may be: a project name, optionally pinned to one version (the index is asked for both).
_PACKAGE = re.compile(r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:==(?P<version>[A-Za-z0-9.+!_-]+))?$")


def source_requirement(env: Mapping[str, str]) -> str | None:
    """`dflash-ov-bot @ git+https://<server>/<owner>/<repo>@<sha>` from the Actions context, or None outside
    Actions (or with a context that does not name one commit of one https repository)."""
    server = env.get("GITHUB_SERVER_URL", "").rstrip("/")
    repository = env.get("GITHUB_REPOSITORY", "")
    sha = env.get("GITHUB_SHA", "").lower()
    if not (_SERVER.match(server) and _REPOSITORY.match(repository) and _SHA.match(sha)):
        return None
    return f"{DISTRIBUTION} @ git+{server}/{repository}@{sha}"


def index_has(package: str, *, index: str = DEFAULT_INDEX, timeout_s: float = 10.0) -> bool:
    """Whether the index's JSON API knows the project (and, for `name==version`, that release).

    Raises:
        Failure: the index could not be asked (a card must not give a line nobody checked).
    """
    match = _PACKAGE.match(package.strip())
    if match is None:
        return False
    url = f"{index.rstrip('/')}/pypi/{match['name']}/json"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            releases = json.load(response).get("releases", {})
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise Failure(f"cannot check publish.install on {index}: HTTP {exc.code}", stage=Stage.PUBLISH) from None
    except (urllib.error.URLError, TimeoutError, ValueError) as exc:
        raise Failure(f"cannot check publish.install on {index}: {exc}", stage=Stage.PUBLISH) from None
    return match["version"] is None or match["version"] in releases


def install_line(
    env: Mapping[str, str], package: str | None, *, exists: Callable[[str], bool] = index_has
) -> str | None:
    """The requirement the card's install line gives: the recipe's `publish.install` when set (and on the
    index), else the Actions source's pinned requirement, else None (no install line).

    Raises:
        Failure: `publish.install` is set but is not `name` or `name==version`, or the index does not have it.
    """
    if package:
        if _PACKAGE.match(package.strip()) is None:
            raise Failure(
                f"publish.install {package!r} is not a project name, optionally pinned (name or name==version)",
                stage=Stage.PUBLISH,
            )
        if not exists(package):
            raise Failure(
                f"publish.install {package!r} is not on the package index: a card must not install a name nobody "
                "owns; publish it first or unset publish.install (the card then pins the Actions source)",
                stage=Stage.PUBLISH,
            )
        return package
    return source_requirement(env)
