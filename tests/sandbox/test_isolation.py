"""Resource guards of the build processes: time limits, disk checks, cleanup on every exit path."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.core.errors import Failure
from bot.discover.fetch import require_free_disk
from bot.sandbox.isolation import run_logged, untrusted_env


def test_a_child_past_its_time_limit_is_killed_with_its_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
        f"time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    started = time.monotonic()
    with pytest.raises(Failure, match="timed out after 2s"):
        run_logged(
            [sys.executable, "-c", script], log_path=tmp_path / "log", timeout_s=2, env=untrusted_env(), what="sleeper"
        )
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
    env = untrusted_env(
        {
            "HF_TOKEN": "x",
            "GITHUB_TOKEN": "y",
            "AWS_SECRET_ACCESS_KEY": "z",
            "PATH": "/bin",
            "TOKENIZERS_PARALLELISM": "true",
        }
    )
    assert not {"HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/bin"


def test_sigterm_during_a_build_removes_scratch_and_stops_the_exporters(tiny, tmp_path):
    pair = tiny("dflash")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "build",
            "--draft",
            str(pair.draft),
            "--target",
            str(pair.target),
            "--out",
            str(tmp_path / "out"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(work.glob("dflash-bot-*/logs/export-*.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(work.glob("dflash-bot-*")), "the build never started its exports"
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM
    assert list(work.iterdir()) == []
    leftover = subprocess.run(
        ["pgrep", "-f", f"bot.sandbox.child .*optimum-cli export openvino -m {work}"], capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""
    # A child's environment names its own folder in the scratch folder, whatever its command line says.
    assert processes_mentioning(str(work), "environ") == []
    assert not Path(tmp_path / "out").exists()


def processes_mentioning(text: str, where: str) -> list[int]:
    """Live processes whose /proc/PID/`where` (`environ`: the initial environment, `cmdline`) mentions `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive(int(entry.name)):
            try:
                if text.encode() in (entry / where).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_a_child_tree_over_its_memory_budget_is_stopped_with_a_named_failure(tmp_path):
    # The allocation happens in a grandchild: the guard sums the whole process tree, not just the direct child.
    grow = (
        "import time; blocks = []\n"
        "for _ in range(40):\n"
        "    blocks.append(bytearray(50 * 2**20)); time.sleep(0.1)\n"
        "time.sleep(30)"
    )
    script = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grow!r}])"
    budget = 300 * 2**20
    started = time.monotonic()
    with pytest.raises(Failure) as caught:
        run_logged(
            [sys.executable, "-c", script],
            log_path=tmp_path / "log",
            timeout_s=60,
            env=untrusted_env(),
            what="target export",
            memory_budget_bytes=budget,
        )
    message = caught.value.message
    assert message.startswith("target export stopped:"), message
    assert f"over the budget of 0.31 GB ({budget} bytes)" in message
    assert re.search(r"GB file-backed besides, which does not count", message), message
    anonymous = int(re.search(r"GB of anonymous memory \((\d+) bytes", message).group(1))
    assert budget < anonymous < 2 * budget  # sampled soon after it crossed, long before the 2 GB it was heading to
    assert time.monotonic() - started < 20


def test_a_child_within_its_memory_budget_runs_and_reports_its_peak(tmp_path):
    script = "import time; block = bytearray(200 * 2**20); time.sleep(1)"
    peaks = run_logged(
        [sys.executable, "-c", script],
        log_path=tmp_path / "log",
        timeout_s=60,
        env=untrusted_env(),
        what="small child",
        memory_budget_bytes=2 * 2**30,
    )
    assert 200 * 2**20 < peaks.anon_bytes < 400 * 2**20
    assert peaks.anon_bytes < peaks.rss_bytes < 400 * 2**20


def test_a_child_reading_a_mapped_file_larger_than_its_budget_is_not_stopped(tmp_path):
    """Mapped weights are file-backed: the kernel can drop and re-read them, so they never count against the
    budget (a build mapping a checkpoint bigger than the runner's free memory still finishes)."""
    weights = tmp_path / "weights.bin"
    with weights.open("wb") as handle:
        # Sparse: read through the mapping, each page becomes resident page cache. Three budgets' worth: under memory
        # pressure the kernel drops some of it again (a loaded run saw 585 MiB of a 600 MiB mapping resident).
        handle.truncate(900 * 2**20)
    read = (
        "import mmap, sys, time\n"
        f"with open({str(weights)!r}, 'rb') as handle:\n"
        "    mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)\n"
        "    touched = sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE))\n"
        "    time.sleep(1)\n"
    )
    budget = 300 * 2**20
    peaks = run_logged(
        [sys.executable, "-c", read],
        log_path=tmp_path / "log",
        timeout_s=60,
        env=untrusted_env(),
        what="quality measurement",
        memory_budget_bytes=budget,
    )
    assert peaks.file_bytes > 2 * budget > peaks.anon_bytes  # the mapping was resident, and counted as file-backed
    assert peaks.rss_bytes > budget  # the guard of old (on RSS) would have stopped it
