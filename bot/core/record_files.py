"""A published repo held to its record's file list from the hashes the Hub lists, without downloading a byte.

Planning (`bot.plan.reuse`: is the published target still the one its record describes?) and publishing (has the
draft repo been edited outside the bot since?) ask the same question of the same two lists, so it is answered here,
below both.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.core.hashes import HubHash
from bot.core.record import FileList


def differs_from_record(listed: Mapping[str, HubHash], files: FileList, rendered: tuple[str, ...]) -> str | None:
    """Why the files a published repo holds are not the ones its record lists (None: they are), from the hashes
    the Hub lists (an LFS file's sha256 and size, a regular file's git blob id): a repo edited outside the bot.

    Args:
        listed: the Hub's hashes of every file at the published commit (`Hub.listed_hashes`).
        files: the record's list of the files the bot wrote.
        rendered: files publish renders from the record (card, record, chart), which the list does not hold.

    Returns:
        The first difference in words, or None when the repo holds exactly the recorded files.
    """
    for name, recorded in sorted(files.items()):
        hub = listed.get(name)
        if hub is None:
            return f"{name} is missing"
        same = (
            hub.sha256 == recorded.sha256 and hub.size == recorded.size
            if hub.sha256
            else hub.blob_id is not None and hub.blob_id == recorded.git_blob_id
        )
        if not same:
            return f"{name} differs from its record"
    extra = sorted(set(listed) - set(files) - set(rendered))
    if extra:
        return f"it holds files its record does not list ({', '.join(extra[:5])})"
    return None
