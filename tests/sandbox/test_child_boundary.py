"""Each checkpoint child is a fresh process with folders of its own (issue 20): it cannot write into a sibling's
output or scratch, cannot signal a sibling, cannot leave an orphan the memory guard does not count, and a child
killed by a signal is reported with its killer. Real processes, real confinement of this machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.core.errors import Failure
from bot.sandbox.confinement import confinement
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
from tests.sandbox.test_isolation import _alive

CONFINED = confinement().name != "none"
SIBLING_SLEEP = "6.0417"  # a duration no other process sleeps, so the sibling is found among other tests' processes

# Tries every way a compromised child could reach a sibling: its output, its HOME/TMPDIR, the group's shared
# scratch folder, and a signal to its process.
_INTRUDER = r"""
import json, os, signal, sys
from pathlib import Path
targets, sibling_pid, out = json.loads(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
result = {}
for name, path in targets.items():
    try:
        Path(path).write_text("planted")
        result[name] = "written"
    except OSError as error:
        result[name] = type(error).__name__
try:
    os.kill(sibling_pid, signal.SIGKILL)
    result["signal"] = "sent"
except OSError as error:
    result["signal"] = type(error).__name__
(out / "result.json").write_text(json.dumps(result))
"""


def _start_sibling(work: Path) -> tuple[threading.Thread, dict]:
    """A sibling child (sandboxed the same way) that sleeps, and what became of it."""
    folder = work / "sibling"
    env = untrusted_env(home=folder / "home")
    ended: dict = {}

    def run() -> None:
        try:
            run_logged(
                [*sandboxed("exec", writes=[folder]), "sleep", SIBLING_SLEEP],
                log_path=work / "sibling.log",
                timeout_s=60,
                env=env,
                what="sibling",
            )
            ended["ok"] = True
        except Failure as error:
            ended["error"] = error.message

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, ended


def _host_pid_of_sleep(deadline_s: float = 20) -> int:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pgrep = subprocess.run(["pgrep", "-xf", f"sleep {SIBLING_SLEEP}"], capture_output=True, text=True)
        found = pgrep.stdout.split()
        if found:
            return int(found[-1])
        time.sleep(0.1)
    raise AssertionError("the sibling never started")


@pytest.mark.skipif(not CONFINED, reason="this machine offers no OS confinement; the bundle allow-list covers it")
def test_a_child_cannot_write_into_a_siblings_folders_nor_signal_it(tmp_path):
    work = tmp_path / "group"
    (work / "ir" / "target").mkdir(parents=True)
    (work / "homes" / "target" / "tmp").mkdir(parents=True)
    thread, ended = _start_sibling(work)
    sibling_pid = _host_pid_of_sleep()
    own = work / "homes" / "draft-0"
    targets = {
        "sibling output": str(work / "ir" / "target" / "chat_template.jinja"),
        "sibling TMPDIR": str(work / "homes" / "target" / "tmp" / "planted.py"),
        "shared work folder": str(work / "planted.txt"),
        "sibling scratch": str(work / "sibling" / "planted.txt"),
    }
    run_logged(
        [
            *sandboxed("exec", writes=[own]),
            sys.executable,
            "-c",
            _INTRUDER,
            json.dumps(targets),
            str(sibling_pid),
            str(own),
        ],
        log_path=tmp_path / "intruder.log",
        timeout_s=60,
        env=untrusted_env(home=own / "home"),
        what="intruder",
    )
    result = json.loads((own / "result.json").read_text())
    assert {name: result[name] for name in targets} == dict.fromkeys(targets, "PermissionError"), result
    assert result["signal"] in ("PermissionError", "ProcessLookupError"), result
    thread.join(30)
    assert ended == {"ok": True}, ended  # the sibling ran to its end
    assert not any(Path(path).exists() for path in targets.values())


def test_a_draft_export_child_cannot_plant_files_in_the_target_exports_folders(tmp_path):
    """The group layout `bot.builder.group` gives its export children (`child_home`, `export_command`): the draft
    export's own grants and environment, with the tool swapped for an intruder, try the target export's TMPDIR (where
    optimum-cli stages the target IR) and its output. A shared HOME/TMPDIR let this through before."""
    from bot.builder.draft_build import child_home
    from bot.builder.export import ExportRequest, export_command
    from bot.core.exporter import TASK_LLM
    from bot.core.recipe import load_recipe

    scratch, settings = tmp_path / "scratch", load_recipe().export
    target = ExportRequest("target", scratch / "src" / "target", scratch / "ir" / "target", TASK_LLM, False)
    draft = ExportRequest(
        "draft", scratch / "src" / "draft-0", scratch / "ir" / "draft-0-int4", TASK_LLM, True, name="draft-0-int4"
    )
    _, target_env = export_command(target, settings, home=child_home(scratch, target.name_or_role))
    command, draft_env = export_command(draft, settings, home=child_home(scratch, draft.name_or_role))
    for folder in (target.source, draft.source, target.output, Path(target_env["TMPDIR"])):
        folder.mkdir(parents=True, exist_ok=True)
    assert target_env["TMPDIR"] != draft_env["TMPDIR"] and target_env["HOME"] != draft_env["HOME"]
    intruder = [*command[: command.index("optimum-cli")], "exec", sys.executable, "-c", _INTRUDER]
    targets = {
        "target TMPDIR": str(Path(target_env["TMPDIR"]) / "staged" / "planted.py"),
        "target output": str(target.output / "chat_template.jinja"),
    }
    Path(targets["target TMPDIR"]).parent.mkdir()
    bystander = subprocess.Popen(["sleep", "30"])  # a process of the builder's, as the target export would be
    try:
        run_logged(
            [*intruder, json.dumps(targets), str(bystander.pid), str(draft.output)],
            log_path=tmp_path / "intruder.log",
            timeout_s=60,
            env=draft_env,
            what="draft export",
        )
        alive = bystander.poll() is None
    finally:
        bystander.kill()
    result = json.loads((draft.output / "result.json").read_text())
    if CONFINED:
        assert {name: result[name] for name in targets} == dict.fromkeys(targets, "PermissionError"), result
        assert not any(Path(path).exists() for path in targets.values())
        assert result["signal"] in ("PermissionError", "ProcessLookupError") and alive, result


def test_an_orphan_counts_against_the_budget_of_the_child_that_left_it(tmp_path):
    """The child starts a grandchild in a new process group, re-parented away when the child exits at once; the
    grandchild then grows past the child's budget: it is counted, and killed with the child's session."""
    pid_file = tmp_path / "orphan.pid"
    grow = (
        "import os, time; blocks = []\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "for _ in range(30):\n"
        "    blocks.append(bytearray(50 * 2**20)); time.sleep(0.1)\n"
        "time.sleep(30)"
    )
    leave = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {grow!r}], process_group=0)\n"
        "time.sleep(4)"
    )  # the child lives on while its orphan-to-be grows, then exits without waiting
    budget = 300 * 2**20
    with pytest.raises(Failure, match=r"over the budget of 0\.31 GB"):
        run_logged(
            [sys.executable, "-c", leave],
            log_path=tmp_path / "log",
            timeout_s=60,
            env=untrusted_env(),
            what="draft export",
            memory_budget_bytes=budget,
        )
    time.sleep(0.3)
    assert not _alive(int(pid_file.read_text()))


def test_an_orphan_left_behind_by_a_child_that_succeeded_is_killed(tmp_path):
    pid_file = tmp_path / "orphan.pid"
    orphan = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    leave = (
        f"import subprocess, sys, time, os\n"
        f"subprocess.Popen([sys.executable, '-c', {orphan!r}], process_group=0)\n"
        f"while not os.path.exists({str(pid_file)!r}): time.sleep(0.05)\n"
    )
    run_logged(
        [sys.executable, "-c", leave],
        log_path=tmp_path / "log",
        timeout_s=60,
        env=untrusted_env(),
        what="quality measurement",
    )
    time.sleep(0.3)
    assert not _alive(int(pid_file.read_text()))


@pytest.mark.parametrize("sandbox", [False, True], ids=["plain", "sandboxed"])
def test_a_child_killed_from_outside_names_the_signal_and_that_the_bot_did_not_send_it(tmp_path, sandbox):
    marker = tmp_path / "child" / "started"
    marker.parent.mkdir()
    script = f"import time; open({str(marker)!r}, 'w').close(); time.sleep(60)"
    prefix = sandboxed("exec", writes=[tmp_path / "child"]) if sandbox else []
    caught: dict = {}

    def run() -> None:
        try:
            run_logged(
                [*prefix, sys.executable, "-c", script],
                log_path=tmp_path / "log",
                timeout_s=60,
                env=untrusted_env(home=tmp_path / "child" / "home"),
                what="int8 draft export",
            )
        except Failure as error:
            caught["message"] = error.message

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = next(pid for pid in _pids_running(script))
    os.kill(victim, signal.SIGKILL)
    thread.join(30)
    message = caught["message"]
    assert message.startswith("int8 draft export failed (exit "), message
    assert "killed by SIGKILL from outside the bot" in message or "from the kernel's OOM killer" in message, message


def _pids_running(script: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if script.encode() in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                pass
    # the innermost (the Python process itself), not the unshare wrapper or the sandbox that exec'd into it
    return sorted(found, key=lambda pid: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"unshare"))


def test_the_child_runs_only_a_build_tool_module_named_on_its_command_line(tmp_path, capsys):
    """`bot.sandbox` imports nothing from `bot.builder`: the child imports the tool by name once confined, and a name
    outside `bot.builder`, a module that is not there, or one without `main(argv)` is refused."""
    from bot.sandbox import child

    for name in ("os", "bot.core.settings", "bot.builder", "bot.builder.validate;rm", "tests.conftest"):
        with pytest.raises(SystemExit) as refused:
            child.parse_args([name])
        assert refused.value.code == 2, name
    assert "nor a bot.builder tool module" in capsys.readouterr().err
    assert child.parse_args(["bot.builder.quality", "--help"]).tool == "bot.builder.quality"
    assert child._run_module("bot.builder.no_such_tool", []) == 2
    assert child._run_module("bot.builder.bundle", []) == 2  # a module of the build side, but not a tool
    assert "has no main(argv)" in capsys.readouterr().err
    done = subprocess.run(
        [*sandboxed("bot.builder.validate", writes=[tmp_path / "child"]), "--help"],
        env=untrusted_env(home=tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "sandbox: no Hub token in this process" in done.stdout
    assert "usage: python -m bot.builder.validate" in done.stdout
