"""Hostile suite, issue 21: no egress but the Hub, and no hang, on a laptop (CI unset, no switch in the environment).

Each scenario runs the real `dflash-bot` as a subprocess against the local Hub over real HTTP and records a row
(tests/reliability/rows.py) from what it really did.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bot.hub import Hub
from bot.plan.planner import draft_output_repo, target_output_repo
from bot.run import demo
from bot.sandbox.telemetry import SWITCHES
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import fast_recipe
from tests.reliability.rows import record
from tests.sandbox.test_telemetry import outside_loopback
from tests.test_wheel import assert_the_demo_published

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3
ROUND_TIMEOUT_S = 1200  # generous (two builds on 2 shared cores beside a busy loop), but finite: a hang fails
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


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) holding the smallest pair that passes both gates (the shallow oracle pair)."""
    pair = (demo.SeededRepo(demo.TARGET_REPO, "oracle", "target"), demo.SeededRepo(demo.DRAFT_REPO, "oracle", "draft"))
    demo.seed(hub.url, TOKEN, tmp_path_factory.mktemp("seed"), pair)
    return hub


def start_run(recipe_file: Path, tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        "--recipe",
        str(recipe_file),
        "--only",
        demo.DRAFT_REPO,
        "--report",
        str(tmp_path / f"{name}.json"),
        "--work",
        str(tmp_path / f"work-{name}"),
    ]
    return subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def wait_round(procs: list[subprocess.Popen], deadline: float) -> list[tuple[int | None, str]]:
    """Each run's exit code and stderr tail; a run still alive at the deadline is stopped and counts as hung."""
    results = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((proc.returncode, err[-1500:]))
        except subprocess.TimeoutExpired:
            stop_group(proc)
            results.append((None, "hung"))
    return results


def test_two_runs_at_once_under_cpu_contention_end_with_two_reports_three_times_in_three(hub, tmp_path):
    """Before: on a laptop one builder never exited (OpenVINO's telemetry fork inherited the bot's SIGTERM handler
    and hung in it; the builder waited for that fork at exit)."""
    env = {**laptop_env(tmp_path), "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    rounds = []
    # The contention is the two runs' own: two builds, each exporting side by side, on the runner's 2 cores.
    for index in range(ROUNDS):
        base = fast_recipe(num_assistant_tokens=[3])
        publish = base.publish.model_copy(update={"namespace": f"egress-{index}"})
        recipe = base.model_copy(update={"publish": publish})
        recipe_file = tmp_path / f"recipe-{index}.yaml"
        recipe_file.write_text(yaml.safe_dump(json.loads(recipe.model_dump_json())))
        started = time.monotonic()
        procs = [start_run(recipe_file, tmp_path, f"r{index}-{i}", env) for i in range(2)]
        results = wait_round(procs, started + ROUND_TIMEOUT_S)
        reports = [tmp_path / f"r{index}-{i}.json" for i in range(2)]
        statuses = [
            next(
                (o["status"] for o in json.loads(r.read_text())["outcomes"] if o["source"] == demo.DRAFT_REPO),
                "no outcome",
            )
            if r.exists()
            else "no report"
            for r in reports
        ]
        rounds.append((recipe, results, statuses, time.monotonic() - started))
    api = Hub(hub.url, TOKEN).api
    commits = []
    for recipe, _, _, _ in rounds:
        for repo in (
            draft_output_repo(recipe.publish, demo.DRAFT_REPO, "int4"),
            target_output_repo(recipe.publish, demo.TARGET_REPO),
        ):
            commits.append(
                sum(1 for c in api.list_repo_commits(repo) if "dflash-bot" in c.title) if api.repo_exists(repo) else 0
            )
    both = sum(1 for _, _, statuses, _ in rounds if "no report" not in statuses)
    codes = [code for _, results, _, _ in rounds for code, _ in results]
    record(
        "concurrency",
        f"two `dflash-bot run` at once, each building (2 cores), CI unset and no telemetry switch set, {ROUNDS} rounds",
        f"two reports in {both} of {ROUNDS} rounds; exits {codes}; draft outcomes "
        f"{[s for _, _, s, _ in rounds]}; slowest round {max(t for *_, t in rounds):.0f}s",
        f"bot commits per published repo: {commits}",
        consistent=both == ROUNDS and set(commits) == {1},
    )
    for recipe, results, statuses, _ in rounds:
        assert [code for code, _ in results] == [0, 0], (recipe.publish.namespace, results)
        assert set(statuses) <= {"published", "up-to-date"} and "published" in statuses, statuses
    assert set(commits) == {1}, commits
    assert not (Path(env["HOME"]) / "intel").exists()
