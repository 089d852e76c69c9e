"""Resource guards of the build processes: time limits, disk checks, cleanup on every exit path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.errors import Failure
from bot.fetch import require_free_disk
from bot.isolation import run_logged, untrusted_env


def test_a_child_past_its_time_limit_is_killed_with_its_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    started = time.monotonic()
    with pytest.raises(Failure, match="timed out after 2s"):
        run_logged([sys.executable, "-c", script], log_path=tmp_path / "log", timeout_s=2, env=untrusted_env(),
                   what="sleeper")
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    time.sleep(0.2)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    """Running (a killed process may linger as a zombie until its new parent reaps it)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


def test_free_disk_check_names_the_bytes_needed(tmp_path):
    with pytest.raises(Failure, match=r"needs 10000000000000000 bytes free .* only \d+ available"):
        require_free_disk(tmp_path, 10**16, "download and export")
    require_free_disk(tmp_path, 1, "download and export")


def test_untrusted_env_carries_no_secret_and_is_offline():
    env = untrusted_env({"HF_TOKEN": "x", "GITHUB_TOKEN": "y", "AWS_SECRET_ACCESS_KEY": "z", "PATH": "/bin",
                         "TOKENIZERS_PARALLELISM": "true"})
    assert not {"HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/bin"


def test_sigterm_during_a_build_removes_scratch_and_stops_the_exporters(tiny, tmp_path):
    pair = tiny("dflash")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}
    process = subprocess.Popen([sys.executable, "-m", "bot.cli", "build", "--draft", str(pair.draft), "--target",
                                str(pair.target), "--out", str(tmp_path / "out")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(work.glob("dflash-bot-*/logs/export-*.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(work.glob("dflash-bot-*")), "the build never started its exports"
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM
    assert list(work.iterdir()) == []
    leftover = subprocess.run(["pgrep", "-f", f"bot.sandbox .*optimum-cli export openvino -m {work}"],
                              capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
    assert not Path(tmp_path / "out").exists()
