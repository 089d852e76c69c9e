"""Hostile suite, issue 21: no egress but the Hub on a laptop (CI unset, no switch in the environment).

Each scenario runs the real `dflash-bot` as a subprocess against the local Hub over real HTTP and records a row
(tests/reliability/rows.py) from what it really did. No hang with two runs at once: test_reliability_concurrency.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bot.sandbox.telemetry import SWITCHES
from tests.reliability.rows import record
from tests.sandbox.test_telemetry import outside_loopback
from tests.test_wheel import assert_the_demo_published

ROOT = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT_S = 1800


def laptop_env(tmp_path: Path) -> dict[str, str]:
    """A laptop or self-hosted runner: CI unset, no telemetry switch set, a fresh HOME with no OpenVINO consent
    file (so OpenVINO's telemetry would send) and a fresh HF_HOME (no cached huggingface_hub agent registry)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "HF_HUB_OFFLINE", *SWITCHES}}
    return {**env, "HOME": str(home), "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}


def run_bounded(
    command: list[str], env: dict[str, str], timeout: float, what: str, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """Run `command` in its own process group; past `timeout`, stop it (SIGTERM, then SIGKILL) and fail the test."""
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        pytest.fail(f"{what} did not exit within {timeout:.0f}s: it hung")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM a run's group (the run's own handler stops its builder), SIGKILL what is left after a minute."""
    for sig, grace in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.communicate(timeout=grace)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def test_the_offline_demo_connects_to_nothing_but_the_local_hub(venv, tmp_path):
    """Before: one DNS query from the demo (huggingface_hub's agent registry, fetched from huggingface.co to fill
    in a user agent) and, in the builder, OpenVINO's telemetry posting `import` events from a fork.

    The demo is the one a user installs: the built wheel in a fresh venv (the `venv` fixture, conftest), run from a
    folder that is not the checkout, so this one run also shows the installed bot finds its package data and
    publishes."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed here (`make test` installs it with apt-get)")
    env = {k: v for k, v in laptop_env(tmp_path).items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env = {k: v for k, v in env.items() if k not in {"HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN"}}
    trace = tmp_path / "strace.log"
    command = [
        strace,
        "-f",
        "--seccomp-bpf",
        "-qq",
        "-e",
        "trace=connect,sendto,sendmsg,sendmmsg,openat",
        "-e",
        "signal=none",
        "-o",
        str(trace),
        str(venv / "bin" / "dflash-bot"),
        "demo",
    ]
    started = time.monotonic()
    done = run_bounded(command, env, DEMO_TIMEOUT_S, "dflash-bot demo under strace", cwd=tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert_the_demo_published(done.stdout)
    text = trace.read_text(errors="replace")
    hub_connects = sum(1 for line in text.splitlines() if "connect(" in line and 'inet_addr("127.0.0.1")' in line)
    assert hub_connects, "strace saw no connection to the local hub: it traced nothing"
    flagged = outside_loopback(text)
    consent = Path(env["HOME"]) / "intel"
    record(
        "security",
        "offline demo (`dflash-bot demo`, installed from the wheel) under `strace -f` with CI unset, no telemetry "
        "switch in the environment and a fresh HOME (OpenVINO telemetry would send)",
        f"{hub_connects} connections, all to the local hub on loopback; {len(flagged)} outside loopback or name "
        f"lookups; OpenVINO telemetry state in HOME: {'written' if consent.exists() else 'none'} ({took:.0f}s)",
        "demo pair published, exit 0",
        consistent=not flagged and not consent.exists(),
    )
    assert flagged == [], "\n".join(flagged[:20])
    assert not consent.exists(), sorted(p.name for p in consent.rglob("*"))
