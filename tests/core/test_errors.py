"""The error hierarchy: typed stages, one exit code per class (the README's table), and what a log shows on Actions."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import typer

from bot import cli
from bot.cli import ending
from bot.core import errors, log
from bot.core.errors import (
    EXIT_CODES,
    UNEXPECTED_EXIT_CODE,
    BotError,
    Failure,
    Fault,
    InfrastructureFailure,
    Stage,
    UsageError,
)
from bot.run.report import RunReport
from bot.run.run_side import guard

ROOT = Path(__file__).resolve().parents[2]
# Every stage label the bot wrote into reports and `status.json` before stages were typed: stored memory must read.
STORED_LABELS = (
    *("build", "bundle", "classify", "collection", "commit", "commits", "create repo", "cross-check", "discover"),
    *("download", "export", "export-draft", "export-target", "fetch", "info", "inspect", "inspect-draft"),
    *("inspect-target", "job", "list", "list namespace", "plan", "publish", "quality", "read", "recipe"),
    *("reuse-target", "run", "sandbox", "tag", "toolchain", "usage", "validate", "verify", "whoami"),
)


def error_classes() -> list[type[BotError]]:
    found, todo = [], [BotError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


# ---- stages ----


def test_every_stored_label_is_a_stage_and_every_stage_says_whose_fault_it_is() -> None:
    assert [label for label in STORED_LABELS if Stage.named(label) != label] == []
    assert len(Stage.__members__) == len(list(Stage)), "two stages share a value (an Enum alias)"
    assert all(isinstance(stage.fault, Fault) for stage in Stage)
    assert Stage.named("a-stage-no-bot-wrote") is None and Stage.named(None) is None
    assert json.dumps({"stage": Stage.CREATE_REPO}) == '{"stage": "create repo"}'  # stored as the same text


def test_no_stage_is_free_text_in_the_bot() -> None:
    """Every error names a `Stage` member: a string would be a stage the memory rules have never decided."""
    literal = re.compile(r"""\bstage=["']|\.call\(\s*["']|\bdeadline\(\s*["']|_step\(\s*["']""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "bot").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def test_an_error_is_raised_as_a_kind_never_as_the_root() -> None:
    with pytest.raises(TypeError, match="subclass"):
        BotError("what kind of error is this?")
    error = InfrastructureFailure("unknown layer", stage=Stage.SANDBOX).at(stage=Stage.EXPORT_DRAFT)
    assert isinstance(error, Failure) and error.stage is Stage.SANDBOX and error.reason() == "sandbox: unknown layer"


# ---- exit codes ----


def test_every_error_class_exits_with_a_code_of_its_own() -> None:
    raised = [cls for cls in error_classes() if cls is not BotError]
    codes = [cls.exit_code for cls in raised]
    assert len(set(codes)) == len(codes), {cls.__name__: cls.exit_code for cls in raised}
    assert set(EXIT_CODES) == {0, UNEXPECTED_EXIT_CODE, *codes}
    assert all(f"`{cls.__name__}`" in EXIT_CODES[cls.exit_code] for cls in raised)
    assert (UsageError.exit_code, errors.RecipeError.exit_code, errors.Skip.exit_code) == (2, 4, 3)  # tests, docs
    assert Failure.exit_code == RunReport().exit_code + 1  # a Failure exits like a run with a failed source


def test_the_whole_hierarchy_lives_in_errors_py() -> None:
    names = "|".join(cls.__name__ for cls in error_classes())
    subclass = re.compile(rf"^class \w+\((?:{names})\):", re.MULTILINE)
    elsewhere = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "bot").rglob("*.py"))
        if path.name != "errors.py" and subclass.search(path.read_text(encoding="utf-8"))
    ]
    assert elsewhere == []


def test_the_readme_table_is_the_exit_codes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Exit codes\n", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", section, re.MULTILINE))
    assert {int(code): text for code, text in rows.items()} == EXIT_CODES


@pytest.fixture()
def bare_logger(own_logger):
    """The bot's logger with no handler, so `log.setup` makes one on this test's stderr; off Actions afterwards."""
    logging.getLogger("dflash-bot").handlers.clear()
    yield
    log.setup(on_actions=False)


def test_a_bug_in_a_command_exits_70_with_its_traceback_and_a_report(bare_logger, tmp_path, capsys, monkeypatch):
    app = typer.Typer()

    @app.command()
    def boom(report: Path = typer.Option(None)) -> None:
        log.setup()
        raise KeyError("a key nobody foresaw")

    monkeypatch.setattr(ending, "app", app)
    report = tmp_path / "report.json"
    assert cli.run_command_line(["--report", str(report)]) == UNEXPECTED_EXIT_CODE
    err = capsys.readouterr().err
    assert "error: unexpected KeyError: 'a key nobody foresaw'" in err and "Traceback" in err and "in boom" in err
    (outcome,) = json.loads(report.read_text())["outcomes"]
    assert outcome["status"] == "failed" and outcome["reason"] == "unexpected KeyError: 'a key nobody foresaw'"


# ---- the log on Actions ----


def test_on_actions_warnings_and_errors_are_annotations_and_nothing_else_is_a_command(bare_logger, capsys):
    log.setup(on_actions=True)
    log.step("::add-mask::%s", "planted by a file name")
    log.get().warning("100%% of %s\nsecond line", "x")
    log.get().info("  ::stop-commands::token")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "    : :add-mask::planted by a file name",
        "::warning::100%25 of x%0Asecond line",
        "  : :stop-commands::token",
    ]


def test_a_bug_under_guard_is_an_error_annotation_followed_by_its_traceback(bare_logger, capsys):
    """An unexpected exception is a bug: on Actions the run's page lists it, and its log shows where it happened."""
    log.setup(on_actions=True)
    report = RunReport()

    def planning_step() -> None:
        raise ValueError("bad value\n::set-output name=x::forged")

    assert guard(report, "org/source", "a" * 40, planning_step) is False
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "::error::org/source: unexpected ValueError: bad value ::set-output name=x::forged"
    assert lines[1] == "Traceback (most recent call last):" and any("in planning_step" in line for line in lines)
    assert not any(line.lstrip().startswith("::") for line in lines[1:]), lines
    (outcome,) = report.outcomes
    assert outcome.status == "failed" and outcome.stage is None


def test_off_actions_a_bug_under_guard_still_logs_its_traceback_without_verbose(bare_logger, capsys):
    log.setup(verbose=False)
    guard(RunReport(), "org/source", None, lambda: [][1])
    err = capsys.readouterr().err
    assert "org/source: unexpected IndexError: list index out of range" in err and "Traceback" in err
    assert "::error::" not in err


def test_an_expected_error_ending_a_command_on_actions_is_an_annotation(bare_logger, capsys, monkeypatch):
    for name in ("HF_TOKEN", "HF_READ_TOKEN", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert cli.run_command_line(["run", "--only", "Qwen3-8B-DFlash-b16"]) == UsageError.exit_code
    err = capsys.readouterr().err.splitlines()
    assert any(line.startswith("::error::error: ") and "is not a repo id" in line for line in err), err


def _killed_from_outside() -> Failure:
    """A real child killed by SIGKILL from another process, its end told in the bot's own words
    (`bot.sandbox.isolation.exit_cause`, as `run_logged` reports a child's end)."""
    import subprocess
    import sys

    from bot.sandbox.isolation import exit_cause, kernel_oom_kills
    from bot.sandbox.resources import Peaks

    oom_kills = kernel_oom_kills()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    subprocess.run(["kill", "-KILL", str(child.pid)], check=True)  # another process sends it
    code = child.wait(30)
    return Failure(f"target export failed ({exit_cause(code, oom_kills, Peaks())}): ", stage=Stage.EXPORT_TARGET)


def test_a_child_killed_from_outside_is_the_runners_fault_not_the_sources() -> None:
    failure = _killed_from_outside()
    assert errors.runner_fault_in(failure.message) in (errors.RunnerFault.KILLED, errors.RunnerFault.OUT_OF_MEMORY)
    converted = errors.as_runners(failure)
    assert isinstance(converted, InfrastructureFailure) and converted.runner is not None
    assert (converted.message, converted.stage) == (failure.message, Stage.EXPORT_TARGET)
    assert f"[the runner's fault ({converted.runner}), not the source's: tried again next run]" in converted.reason()


def test_the_machines_own_errors_are_the_runners_and_a_source_crash_is_not(tmp_path) -> None:
    with pytest.raises(OSError) as full, open("/dev/full", "wb") as device:
        device.write(b"x" * 65536)
        device.flush()
    assert errors.runner_fault_of(full.value) is errors.RunnerFault.DISK_FULL  # ENOSPC, from the kernel
    assert errors.runner_fault_of(MemoryError()) is errors.RunnerFault.OUT_OF_MEMORY
    source_crash = Failure("target export failed (exit 1): ValueError: rope_scaling must be a dict", stage=Stage.EXPORT)
    assert errors.as_runners(source_crash) is source_crash
    guard_budget = Failure("draft export stopped: its processes held 9.0 GB of anonymous memory, over the budget")
    assert errors.as_runners(guard_budget) is guard_budget  # the recipe's budget: the source's, as before
    for line, fault in (
        ("target export failed (exit 1): OSError: [Errno 28] No space left on device", errors.RunnerFault.DISK_FULL),
        ("draft export failed (exit -9: killed by SIGKILL from the kernel's OOM killer, the machine ran out of "
         "memory)", errors.RunnerFault.OUT_OF_MEMORY),
        ("target export failed (exit 1): ModuleNotFoundError: No module named 'optimum'",
         errors.RunnerFault.MISSING_TOOL),
    ):  # fmt: skip
        converted = errors.as_runners(Failure(line, stage=Stage.EXPORT_TARGET))
        assert isinstance(converted, InfrastructureFailure) and converted.runner is fault, line
