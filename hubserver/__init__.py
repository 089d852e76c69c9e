"""A Hub-compatible local HTTP server that the unmodified huggingface_hub client talks to through HF_ENDPOINT.

It persists repos (git-like commits, branches, tags, LFS blobs) and collections in a data directory, enforces
tokens, private and gated repos, records every request and injects faults on demand, so the bot's Hub code is
tested over real HTTP without huggingface.co. It refuses what the Hub refuses for the calls the bot makes (card
metadata on validate-yaml and on every commit, `card_rules`; unknown `expand` values; dot segments in paths) and
treats repo ids without regard to case, as the Hub does. Client side, set `HF_HUB_DISABLE_XET=1` (the server speaks LFS,
not Xet) and point `HF_ENDPOINT` at `LocalHub.url` before huggingface_hub is imported (or patch
`huggingface_hub.constants`).

Public API: `LocalHub` (background thread), `serve` (foreground, for the CLI), `start_subprocess` /
`stop_subprocess` (child process), `FaultRule` / `load_rules` (fault injection), `RequestRecord` (log entries).
"""

from __future__ import annotations

from .faults import FaultRule, load_rules, parse_rules
from .requestlog import RequestRecord
from .server import LocalHub, serve, start_subprocess, stop_subprocess

__all__ = [
    "FaultRule",
    "LocalHub",
    "RequestRecord",
    "load_rules",
    "parse_rules",
    "serve",
    "start_subprocess",
    "stop_subprocess",
]
