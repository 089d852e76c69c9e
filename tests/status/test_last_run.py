"""The status says when the bot last ran and on what schedule, and `dflash-bot status` says "stale" (exit 1) when
no run was recorded for `STALE_PERIODS` periods (issue 30 deliverable 3). Records by hand and hand-made published
repos on the local Hub (bench/noop_seed.py), no export."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from bench.noop_seed import seed_published
from bot.cli.ending import run_command_line
from bot.core import schedule
from bot.core.recipe import load_recipe
from bot.hub.client import Hub
from bot.hub.transport import configure_client
from bot.plan.step import RunOptions
from bot.run.pipeline import run
from bot.status.memory import STALE_PERIODS, StatusFile, now_utc, run_stamp
from bot.status.page import render_readme, show_status, write_status
from bot.status.read import read_status
from hubserver import LocalHub

CRON = "23 */6 * * *"
SIX_HOURS = dt.timedelta(hours=6)
NOW = dt.datetime(2026, 12, 2, 18, 23, tzinfo=dt.UTC)
WATCH = Path(__file__).parents[2] / ".github" / "workflows" / "watch.yml"


def status(last_run: dt.datetime | None, cron: str | None = CRON) -> StatusFile:
    return StatusFile(recipe="dflash", namespace="OV", schedule=cron, last_run=last_run)


def test_the_shipped_recipe_runs_on_the_workflows_schedule():
    """The recipe's `publish.schedule` is what the status measures by; the workflow is what actually runs."""
    (tick,) = yaml.safe_load(WATCH.read_text())[True]["schedule"]  # YAML 1.1 reads the key `on` as True
    assert load_recipe().publish.schedule == tick["cron"] == CRON
    assert schedule.period(CRON) == SIX_HOURS


@pytest.mark.parametrize(
    ("cron", "every"),
    [
        ("*/5 * * * *", dt.timedelta(minutes=5)),
        ("0 3 * * 1", dt.timedelta(days=7)),
        ("0 9 * * 1-5", dt.timedelta(days=3)),
    ],
)
def test_a_cron_lines_period_is_its_longest_gap(cron, every):
    assert schedule.period(cron) == every


@pytest.mark.parametrize("cron", ["0 3 * *", "0 3 * * MON", "61 * * * *", "0 0 31 2 *"])
def test_a_cron_line_that_cannot_be_read_or_never_fires_is_refused(cron):
    with pytest.raises(ValueError):
        schedule.period(cron)


def test_last_run_is_kept_for_one_and_a_half_periods_so_a_noop_run_commits_every_second_run():
    stamped = status(NOW)
    assert run_stamp(stamped, schedule=CRON, now=NOW + SIX_HOURS + dt.timedelta(minutes=40)) == NOW  # a late tick
    later = NOW + 2 * SIX_HOURS
    assert run_stamp(stamped, schedule=CRON, now=later) == later
    assert run_stamp(None, schedule=CRON, now=NOW) == NOW  # first run, or a version-2 file (no stamp)
    assert run_stamp(status(NOW, "0 3 * * 1"), schedule=CRON, now=NOW + SIX_HOURS / 2) == NOW + SIX_HOURS / 2
    assert run_stamp(status(NOW + SIX_HOURS), schedule=CRON, now=NOW) == NOW  # a stamp "in the future"
    assert run_stamp(stamped, schedule=None, now=later) is None


def test_stale_after_three_periods_and_the_page_says_when():
    fresh = status(NOW)
    assert not fresh.is_stale(NOW + 2.5 * SIX_HOURS)  # the longest a healthy schedule's stamp gets
    assert fresh.is_stale(NOW + STALE_PERIODS * SIX_HOURS)
    assert not status(None).is_stale(NOW + 100 * SIX_HOURS) and not status(NOW, None).is_stale(NOW + 100 * SIX_HOURS)
    page = render_readme(fresh, endpoint="https://hub")
    assert "**Last run: 2026-12-02 18:23 UTC**" in page and r"23 \*/6 \* \* \*" in page and "every 6 h" in page
    assert "**Stale after 2026-12-03 12:23 UTC**" in page
    assert "Last run" not in render_readme(status(None), endpoint="https://hub")


def test_a_run_stamps_the_status_once_a_period_and_a_stopped_schedule_reads_stale(tmp_path, capsys, monkeypatch):
    """A no-op run whose stamp is due commits the status with this run's time (and nothing else); `status`
    then exits 0; the same status three periods on exits 1 and says "stale"."""
    recipe = load_recipe()
    with LocalHub(tmp_path / "hub", user="maintainer", token="hf_write") as server:
        configure_client(server.url)
        hub = Hub(server.url, "hf_write")
        seed_published(hub, recipe, tmp_path / "seed", 1)
        seeded = read_status(hub, recipe.status_repo_id)
        assert seeded is not None and seeded.last_run is not None and seeded.schedule == CRON
        old = seeded.last_run - 2 * SIX_HOURS
        write_status(hub, recipe.status_repo_id, seeded.model_copy(update={"last_run": old}))
        report = run(recipe, hub, hub, RunOptions(work=tmp_path / "w"))
        assert report.commits == [] and report.status_commit is not None and not report.failed
        stamped = read_status(hub, recipe.status_repo_id)
        assert stamped is not None and stamped.last_run is not None and stamped.last_run > old
        assert stamped.entries == seeded.entries
        capsys.readouterr()
        assert show_status(hub, recipe.status_repo_id, now=stamped.last_run + SIX_HOURS) == 0
        assert "stale" not in capsys.readouterr().out.replace("stale after", "")
        assert show_status(hub, recipe.status_repo_id, now=stamped.last_run + 3 * SIX_HOURS) == 1
        assert "stale since" in capsys.readouterr().out
        # The command itself, at the real time, on a status whose last run was three periods ago.
        write_status(hub, recipe.status_repo_id, stamped.model_copy(update={"last_run": now_utc() - 3 * SIX_HOURS}))
        monkeypatch.setenv("HF_TOKEN", "hf_write")
        assert run_command_line(["status", "--endpoint", server.url]) == 1
        assert "stale since" in capsys.readouterr().out
