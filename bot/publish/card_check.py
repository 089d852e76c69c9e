"""The Hub's check of the cards a publish will commit, before anything of it is uploaded.

The Hub refuses a commit whose README.md metadata it finds invalid (a `license` not on its list, a `base_model`
that names no model...). `Hub.create_commit` would ask it too, but only per repo and after the repos before it were
committed; asking first for every card of a group means a refused card stops the group before its first upload.
"""

from __future__ import annotations

from bot.builder.bundle import Bundle
from bot.core.errors import BotError
from bot.core.record import Repos, TargetRecord
from bot.hub.client import Hub
from bot.publish.card import render_draft_card, render_target_card


def refused_card(hub: Hub, members: list[tuple[Bundle, Repos]], card_fp: str) -> BotError | None:
    """The error of the first card of this group the Hub refuses (a `Failure` naming the field), or None.

    Args:
        members: (bundle, repos) pairs, `repos` already paired (`bot.plan.job.OutputRepos.for_build`).
    """
    for bundle, repos in members:
        built = bundle.record
        cards = [(repos.draft, render_draft_card(built))]  # its record names `repos` (`publish_group` checked)
        if built.official_target is None or not built.official_target.used:  # an official target is not ours
            target = TargetRecord.from_build(built, [], card_fp)
            cards.append((repos.target, render_target_card(target, target_repo=repos.target)))
        for repo_id, text in cards:
            try:
                hub.validate_card(text, repo_id=repo_id)
            except BotError as error:
                return error
    return None
