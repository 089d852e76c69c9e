"""The trust boundary for the processes that touch untrusted checkpoints (DESIGN §3).

Exports and GenAI runs happen in child processes that get an environment without any Hub token, run offline,
have a wall-clock limit and, optionally, a memory budget, and have their whole process group killed when they
overrun either: a build that outgrows its runner class ends as a named failure, not as the kernel's OOM kill that
takes the runner (and the report) down with it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from bot.errors import Failure
from bot.resources import PeakSampler

# Anything that looks like a credential stays out of the build processes: they load untrusted files.
SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|CREDENTIALS?|API_KEY|PRIVATE_KEY)(_|$)", re.IGNORECASE)


def untrusted_env(base: Mapping[str, str] | None = None, *, home: Path | None = None) -> dict[str, str]:
    """Environment for a process that loads checkpoint files: no secrets, offline, no telemetry."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not SECRET_NAME.search(k)}
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    if home is not None:
        # A private HF cache: nothing from the user's cache (or a token file in it) is visible.
        env["HF_HOME"] = str(home)
    return env


def sandboxed(tool: str, python: str | None = None) -> list[str]:
    """Command prefix running `tool` (optimum-cli or validate) behind `bot.sandbox`'s credential check."""
    return [python or sys.executable, "-m", "bot.sandbox", tool]


_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
_stopping = threading.Event()


def stop_all_children() -> None:
    """Kill every running child process group and refuse new ones (on SIGTERM: threads waiting on an exporter
    return at once, so the scratch folders can be removed before the bot exits)."""
    _stopping.set()
    with _children_lock:
        children = list(_children)
    for child in children:
        _kill_group(child)


def run_logged(cmd: Sequence[str], *, log_path: Path, timeout_s: float, env: Mapping[str, str],
               what: str, cwd: Path | None = None, memory_budget_bytes: int | None = None) -> int:
    """Run `cmd`, stdout and stderr into `log_path`, within `timeout_s` and `memory_budget_bytes`.

    The RSS of the child's whole process tree is sampled while it runs (`bot.resources.PeakSampler`).

    Args:
        memory_budget_bytes: when the tree's RSS goes over this, its process group is killed (None: no limit).

    Returns:
        The peak RSS of the child's process tree, in bytes.

    Raises:
        Failure: non-zero exit (with the last meaningful log line), timeout, or the memory budget exceeded (naming
            `what`, the measured peak and the budget); the process group is killed in the last two cases.
    """
    if _stopping.is_set():
        raise Failure(f"{what} not started: the bot is stopping")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                   start_new_session=True)
        with _children_lock:
            _children.add(process)
        over_budget = threading.Event()

        def guard(rss: int) -> None:
            if memory_budget_bytes is not None and rss > memory_budget_bytes and not over_budget.is_set():
                over_budget.set()
                _kill_group(process, wait=False)

        try:
            with PeakSampler(process.pid, on_sample=guard) as sampler:
                code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise Failure(f"{what} timed out after {timeout_s:.0f}s (log: {log_path.name})") from None
        except BaseException:  # KeyboardInterrupt or SystemExit from SIGTERM: no orphaned exporter
            _kill_group(process)
            raise
        finally:
            with _children_lock:
                _children.discard(process)
    if over_budget.is_set():
        raise Failure(f"{what} stopped: its processes reached {_gb(sampler.peak_rss_bytes)} of memory "
                      f"({sampler.peak_rss_bytes} bytes), over the budget of {_gb(memory_budget_bytes or 0)} "
                      f"({memory_budget_bytes} bytes); build it on a runner class with more memory "
                      f"(log: {log_path.name})")
    if _stopping.is_set():
        raise Failure(f"{what} stopped: the bot is stopping")
    if code != 0:
        raise Failure(f"{what} failed (exit {code}): {last_error_line(log_path)}")
    return sampler.peak_rss_bytes


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _kill_group(process: subprocess.Popen, *, wait: bool = True) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if wait:
        process.wait()


_NOISE = re.compile(r"^\s*(warnings\.warn|File \"|\^|~|$)")


def last_error_line(log_path: Path, limit: int = 400) -> str:
    """The line that says what went wrong: the last exception line of a traceback, else the last line."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line.strip()):
            return line.strip()[:limit]
    for line in reversed(lines):
        if not _NOISE.match(line):
            return line.strip()[:limit]
    return "(empty log)"
