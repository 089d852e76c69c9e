"""GitHub Actions integration: masked tokens, step outputs, the step summary, annotations (docs/design.md §8).

Everything goes through `github-action-utils`, and only when the environment says the process runs on Actions
(`GITHUB_ACTIONS=true`); elsewhere every method is a no-op, so local runs and tests print nothing extra. The
environment comes in as the run's `Settings` (`Actions(Settings())` in a test is "not on Actions").
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping

import github_action_utils as gha

from bot.core.errors import Stage
from bot.core.outcome import Status
from bot.core.settings import Settings
from bot.run.report import RunReport

# The runner's command files; github-action-utils reads their paths from os.environ.
_FILE_VARIABLES = ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")


class Actions:
    """The Actions side of one CLI command.

    Args:
        settings: the run's settings (`Settings.from_env(os.environ)` in the CLI).
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.enabled = settings.on_actions
        self._files_env = {"GITHUB_OUTPUT": settings.github_output, "GITHUB_STEP_SUMMARY": settings.step_summary}

    # ---- commands ----

    def mask_tokens(self) -> list[str]:
        """Mask every Hub token value this process holds; returns the values masked."""
        if not self.enabled:
            return []
        masked = []
        # On stderr (the runner reads workflow commands from both streams), so stdout stays a command's data.
        with contextlib.redirect_stdout(sys.stderr):
            for value in self.settings.token_values():
                if value.strip():
                    gha.add_mask(value.strip())
                    masked.append(value)
        return masked

    def set_output(self, name: str, value: object) -> None:
        """A step output; lists and dicts are written as JSON (what `fromJSON` in the workflow reads)."""
        if self.enabled and self.settings.github_output:
            with self._files():
                gha.set_output(name, value if isinstance(value, str) else json.dumps(value))

    def summary(self, markdown: str) -> None:
        if self.enabled and self.settings.step_summary:
            with self._files():
                gha.append_job_summary(markdown)

    def error(self, message: str, title: str | None = None) -> None:
        if self.enabled:
            gha.error(message, title=title)

    def notice(self, message: str, title: str | None = None) -> None:
        if self.enabled:
            gha.notice(message, title=title)

    # ---- the run report ----

    def report(self, report: RunReport, *, title: str, endpoint: str, settings: Mapping[str, object] = {}) -> None:
        """Step summary (outcome table with links), outputs `published` and `failed`, one annotation per outcome.

        `published` is the JSON list of output repos this job wrote to; `failed` the JSON list of failed sources.
        """
        if not self.enabled:
            return
        seen = 0
        for outcome in report.outcomes:
            where = f"{outcome.source}@{(outcome.revision or '')[:7]}"
            if outcome.status == Status.FAILED:
                self.error(f"{where}: {outcome.reason}", title=f"dflash-bot: {outcome.source} failed")
            elif outcome.stage == Stage.APPROVE:
                seen += 1  # the radar may see hundreds: one notice for all of them
            elif outcome.status == Status.SKIPPED:
                self.notice(f"{where}: {outcome.reason}", title=f"dflash-bot: {outcome.source} skipped")
        if seen:
            self.notice(
                f"{seen} draft(s) seen, not approved: the status page lists each with the dispatch that would build it",
                title="dflash-bot: seen, not approved",
            )
        published = sorted({repo for o in report.outcomes if o.status == Status.PUBLISHED for repo in o.repos})
        self.set_output("published", published)
        self.set_output("failed", sorted({o.source for o in report.outcomes if o.status == Status.FAILED}))
        self.summary(summary_markdown(report, title=title, endpoint=endpoint, settings=settings))

    @contextlib.contextmanager
    def _files(self) -> Iterator[None]:
        """Point github-action-utils at this environment's command files for one call."""
        saved = {name: os.environ.get(name) for name in _FILE_VARIABLES}
        for name in _FILE_VARIABLES:
            value = self._files_env.get(name)
            if value:
                os.environ[name] = value
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def summary_markdown(report: RunReport, *, title: str, endpoint: str, settings: Mapping[str, object] = {}) -> str:
    """The step summary: a heading, the resolved settings, the outcome table with repo links, deferred sources."""
    counts: dict[str, int] = {}
    for outcome in report.outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    lines = [f"## {title}" + (" (dry run)" if report.dry_run else ""), ""]
    if settings:
        lines.append(" · ".join(f"**{k}**: `{v}`" for k, v in settings.items()))
        lines.append("")
    if counts:
        lines.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
        lines.append("")
    lines.append(report.markdown(endpoint))
    if report.deferred:
        lines.append(f"Deferred to the next run ({len(report.deferred)}): " + ", ".join(report.deferred))
    return "\n".join(lines)
