"""Progress on every long step (issue 30): a child that runs long says so every `log.PROGRESS_INTERVAL_S` with its
last log line, and a download says its bytes and rate, against a slow local Hub (`hubserver/faults.py`)."""

from __future__ import annotations

import logging
import os
import re
import sys

import pytest

from bot.core import log
from bot.core.recipe import HubSettings
from bot.hub.client import Hub
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN

REPO = "org/slow-checkpoint"
WEIGHTS = os.urandom(12_000)


@pytest.fixture
def captured(caplog, monkeypatch):
    """The bot's logger sending its records to caplog, progress lines every 0.3 s."""
    logger = log.get()
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(log, "PROGRESS_INTERVAL_S", 0.3)
    logger.addHandler(caplog.handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.setLevel(level)


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> LocalHub:
    seed = tmp_path_factory.mktemp("seed")
    (seed / "config.json").write_text('{"architectures": ["DFlashDraftModel"]}', encoding="utf-8")
    (seed / "model.safetensors").write_bytes(WEIGHTS)
    hub.seed_folder(REPO, seed)
    return hub


def messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_child_that_runs_long_says_every_interval_what_it_is_doing(tmp_path, captured, monkeypatch):
    """A sandboxed child (the same runner and sandbox entry point as an export) that logs a line, then works
    silently: the parent prints the stage, the elapsed time and the child's last line while it waits."""
    script = "import time; print('loading the draft', flush=True); time.sleep(1.6)"
    # No OS layer (fast), as a runner user under Yama 1 may; as root it is refused (tests/sandbox/test_signal_paths.py).
    monkeypatch.setattr("bot.sandbox.confinement.traces_outside", lambda: False)
    command = [*sandboxed("exec", layers=()), sys.executable, "-c", script]
    run_logged(command, log_path=tmp_path / "slow.log", timeout_s=30, env=untrusted_env(), what="draft export")
    beats = [line for line in messages(captured) if "still running" in line]
    assert len(beats) >= 2, messages(captured)
    assert re.fullmatch(r"    draft export: still running after \d+s \(slow\.log: loading the draft\)", beats[-1]), (
        beats
    )
    assert "no output yet" not in beats[-1]


def test_a_child_that_ends_within_the_interval_prints_no_progress(tmp_path, captured, monkeypatch):
    # An interval no interpreter start-up reaches, even on a loaded machine (0.3 s did: "still running after 0s").
    monkeypatch.setattr(log, "PROGRESS_INTERVAL_S", 30)
    run_logged([sys.executable, "-c", "print('done')"], log_path=tmp_path / "quick.log", timeout_s=30,
               env=untrusted_env(), what="quality measurement")  # fmt: skip
    assert not [line for line in messages(captured) if "still running" in line]


def test_a_slow_download_says_its_bytes_and_rate(hub, tmp_path, captured):
    """12 kB at a few kB/s (the Hub trickles one byte every 50 us, in the server's chunks): the progress lines
    name the repo and file, the bytes so far of the total and the rate, and never the token."""
    hub.set_faults([{"path": "/resolve/.+model.safetensors", "trickle": 0.00005, "times": -1}])
    try:
        settings = HubSettings(read_timeout_s=5, min_bytes_per_s=0, download_attempts=1)
        reader = Hub(hub.url, HUB_TOKEN, settings=settings)
        download = reader.download(REPO, reader.head(REPO), tmp_path / "checkpoint", ["model.safetensors"])
    finally:
        hub.clear_faults()
    assert (download.path / "model.safetensors").read_bytes() == WEIGHTS
    lines = [line for line in messages(captured) if "model.safetensors:" in line]
    assert lines, messages(captured)
    pattern = rf"    {REPO}: model\.safetensors: [\d.]+ k?B of 12\.0 kB, [\d.]+ k?B/s"
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    assert not any(HUB_TOKEN in line for line in messages(captured))


def test_units_and_durations_read_as_a_person_writes_them():
    assert [log.size(n) for n in (512, 120_300_000, 4_000_000_000)] == ["512 B", "120.3 MB", "4.0 GB"]
    assert [log.duration(s) for s in (45.9, 90, 7500)] == ["45s", "1m30s", "2h05m"]
