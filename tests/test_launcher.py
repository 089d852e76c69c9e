"""The preloaded launcher (bot.launcher): children it forks are run, confined, timed, budgeted and killed like
children started afresh, and commands it cannot serve still run."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from bot.confinement import confinement
from bot.errors import Failure
from bot.isolation import run_logged, sandboxed, untrusted_env
from bot.launcher import preloaded
from tests.test_isolation import processes_mentioning

# A cheap preload: the mechanism is the same as with the toolchain's modules, in a fraction of a second.
LIGHT = ("json",)


def _launched(log: Path) -> list[str]:
    """The tools the launcher says it forked."""
    return re.findall(r"launcher: child \d+: (\S+)", log.read_text())


def test_a_launched_child_runs_in_its_own_log_environment_and_folder(tmp_path):
    env = untrusted_env(home=tmp_path / "hf")
    out = tmp_path / "out"
    out.mkdir()
    script = ("import os, tempfile; print('home', os.environ['HOME']); print('tmp', tempfile.gettempdir()); "
              "print('cwd', os.getcwd()); open(os.path.join(os.environ['OUT'], 'f'), 'w').write('x')")
    env_out = {**env, "OUT": str(out)}
    with preloaded(None, env=env_out, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)):
        command = sandboxed("exec", reads=[], writes=[out, tmp_path / "hf"])
        peak = run_logged([*command, sys.executable, "-c", script], log_path=tmp_path / "child.log", timeout_s=60,
                          env=env_out, what="child", cwd=out)
    log = (tmp_path / "child.log").read_text()
    assert f"home {tmp_path / 'hf' / 'home'}" in log and f"tmp {tmp_path / 'hf' / 'tmp'}" in log
    assert f"cwd {out}" in log and (out / "f").read_text() == "x"
    assert "sandbox: no Hub token in this process" in log
    assert _launched(tmp_path / "launcher.log") == ["exec"]
    assert peak > 0


def test_a_launched_childs_exit_code_and_last_error_are_reported(tmp_path):
    env = untrusted_env(home=tmp_path / "hf")
    with preloaded(None, env=env, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)):
        command = sandboxed("exec", writes=[tmp_path / "hf"])
        with pytest.raises(Failure, match=r"child failed \(exit 3\): ValueError: broken checkpoint"):
            run_logged([*command, sys.executable, "-c", "print('ValueError: broken checkpoint'); raise SystemExit(3)"],
                       log_path=tmp_path / "child.log", timeout_s=60, env=env, what="child")
    assert _launched(tmp_path / "launcher.log") == ["exec"]


def test_a_launched_child_past_its_time_limit_is_killed(tmp_path):
    env = untrusted_env(home=tmp_path / "hf")
    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    started = time.monotonic()
    with preloaded(None, env=env, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)):
        command = sandboxed("exec", writes=[tmp_path, tmp_path / "hf"])
        with pytest.raises(Failure, match="timed out after 3s"):
            run_logged([*command, sys.executable, "-c", script], log_path=tmp_path / "child.log", timeout_s=3,
                       env=env, what="sleeper")
        assert time.monotonic() - started < 20
        assert pid_file.is_file()  # it did run, and now no process runs its command line any more
        assert processes_mentioning(str(pid_file), "cmdline") == []
    assert _launched(tmp_path / "launcher.log") == ["exec"]


def test_a_launched_child_over_its_memory_budget_is_stopped_with_a_named_failure(tmp_path):
    env = untrusted_env(home=tmp_path / "hf")
    grow = ("import time; blocks = []\n"
            "for _ in range(40):\n"
            "    blocks.append(bytearray(50 * 2**20)); time.sleep(0.1)\n"
            "time.sleep(30)")
    budget = 300 * 2**20
    with preloaded(None, env=env, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)):
        command = sandboxed("exec", writes=[tmp_path / "hf"])
        with pytest.raises(Failure) as caught:
            run_logged([*command, sys.executable, "-c", grow], log_path=tmp_path / "child.log", timeout_s=60,
                       env=env, what="target export", memory_budget_bytes=budget)
    message = caught.value.message
    assert message.startswith("target export stopped:") and f"over the budget of 0.31 GB ({budget} bytes)" in message
    peak = int(re.search(r"\((\d+) bytes\), over", message).group(1))
    assert budget < peak < 2 * budget
    assert _launched(tmp_path / "launcher.log") == ["exec"]


@pytest.mark.skipif(confinement({}).landlock_abi == 0, reason="no Landlock here")
def test_a_launched_child_is_confined_to_its_own_folders(tmp_path):
    """The launcher is not confined (it serves children with different folders): each child confines itself."""
    env = untrusted_env(home=tmp_path / "hf")
    secret = tmp_path / "outside.txt"
    secret.write_text("outside")
    mine = tmp_path / "mine"
    with preloaded(None, env=env, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)):
        command = sandboxed("exec", reads=[], writes=[mine, tmp_path / "hf"])
        with pytest.raises(Failure, match="PermissionError"):
            run_logged([*command, sys.executable, "-c", f"open({str(secret)!r}).read()"],
                       log_path=tmp_path / "child.log", timeout_s=60, env=env, what="reader")
    assert secret.read_text() == "outside"
    assert _launched(tmp_path / "launcher.log") == ["exec"]


def test_a_launcher_holding_a_token_gets_children_that_refuse_to_run(tmp_path):
    """The credential check runs in every forked child, as in a child started afresh."""
    env = {**untrusted_env(home=tmp_path / "hf"), "HF_TOKEN": "hf_" + "x" * 30}
    with preloaded(None, env=env, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)):
        command = sandboxed("exec", writes=[tmp_path / "hf"])
        with pytest.raises(Failure, match="exit 70.*credentials in reach: HF_TOKEN"):
            run_logged([*command, "true"], log_path=tmp_path / "child.log", timeout_s=60, env=env, what="child")
    assert _launched(tmp_path / "launcher.log") == ["exec"]


def test_a_command_in_another_environment_or_after_the_launcher_died_starts_afresh(tmp_path):
    env = untrusted_env(home=tmp_path / "hf")
    other = {**env, "EXTRA": "1"}
    with preloaded(None, env=env, log_path=tmp_path / "launcher.log", preload=LIGHT, tools=("exec",)) as launcher:
        assert launcher is not None
        command = sandboxed("exec", writes=[tmp_path / "hf"])
        run_logged([*command, "true"], log_path=tmp_path / "other.log", timeout_s=60, env=other, what="other")
        assert _launched(tmp_path / "launcher.log") == []
        run_logged([*command, "true"], log_path=tmp_path / "served.log", timeout_s=60, env=env, what="served")
        assert _launched(tmp_path / "launcher.log") == ["exec"]
        os.killpg(launcher._process.pid, signal.SIGKILL)  # the launcher dies (OOM kill, say)
        deadline = time.monotonic() + 10
        while launcher.serves([*command, "true"], env) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        run_logged([*command, sys.executable, "-c", "print('fresh')"], log_path=tmp_path / "after.log",
                   timeout_s=60, env=env, what="after")
    assert "fresh" in (tmp_path / "after.log").read_text()


def test_a_group_build_forks_its_children_from_one_launcher(built_group):
    """The tiny group build (one target, one draft): the target and draft exports and the quality step come from
    the launcher, which preloaded the toolchain once; it is closed before the validation."""
    logs = built_group / "logs"
    launcher_log = (logs / "launcher.log").read_text()
    assert re.search(r"launcher: preloaded \d+ modules in [\d.]+s", launcher_log), launcher_log
    assert "could not preload" not in launcher_log
    tools = _launched(logs / "launcher.log")
    assert sorted(tools) == ["optimum-cli", "optimum-cli", "quality"], tools
    assert "launcher: closed" in launcher_log  # before the validations, which start afresh
    assert "sandbox: no Hub token" in (built_group / "validate-0-int4" / "validate.log").read_text()
    export_log = next(logs.glob("export-target.log")).read_text()
    assert "sandbox: Landlock" in export_log or "files are not confined" in export_log


@pytest.fixture(scope="module")
def built_group(tiny, tmp_path_factory) -> Path:
    from bot.build import Checkout, DraftBuild, build_group
    from bot.discover import classify_folders
    from tests.conftest import fast_recipe

    pair = tiny("dflash")
    work = tmp_path_factory.mktemp("group")
    candidate = classify_folders(pair.draft, pair.target, fast_recipe())
    (outcome,) = build_group(Checkout(pair.target, "Qwen/Qwen3-Tiny", "1" * 40),
                             [DraftBuild(candidate, Checkout(pair.draft, "z-lab/Qwen3-Tiny-DFlash-b16", "2" * 40),
                                         work / "bundle")], fast_recipe(), work=work, keep_work=True)
    assert outcome.bundle is not None, outcome.error and outcome.error.one_line()
    (scratch,) = work.glob("dflash-bot-*")
    return scratch

