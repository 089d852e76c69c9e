"""bot.cli's exit paths: every command, however it ends, leaves the `--report` it was given and one line, no traceback.

The commands run in this process through `run_command_line` (what `main` runs after installing its signal handler),
so that each case costs no interpreter start; `tests/reliability/test_reliability_cli.py` runs the real entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bot.cli.ending import run_command_line
from bot.core.recipe import DEFAULT_RECIPE

COMMANDS = (["run"], ["plan"], ["publish"], ["build"], ["status"], ["inspect"], ["make-tiny"], ["demo"],
            ["hub", "serve"], ["toolchain", "check"])  # fmt: skip

# recipe key -> odd value, and what the refusal must say
ODD_RECIPES = {
    "timeout-10e30": (("export", "timeout_s"), 10**30, "'export.timeout_s': Input should be less than or equal to"),
    "timeout-1e400": (("validation", "timeout_s"), float("inf"), "'validation.timeout_s': Input should be a finite"),
    "timeout-nan": (("export", "timeout_s"), float("nan"), "'export.timeout_s': Input should be a finite number"),
    "timeout-negative": (("export", "timeout_s"), -5, "'export.timeout_s': Input should be greater than or equal"),
    "recheck-overflowing": (("watch", "recheck_after"), "99999999999d", "'watch.recheck_after'"),
    "recheck-negative": (("watch", "recheck_after"), -3600, "must be between 0s and 3650d"),
    "recheck-negative-text": (("watch", "recheck_after"), "-5d", "invalid duration '-5d'"),
    "recheck-1e400": (("watch", "recheck_after"), float("inf"), "'watch.recheck_after'"),
    "accept-length-nan": (("validation", "min_accept_length"), float("nan"), "'validation.min_accept_length'"),
    "speedup-infinite": (("validation", "min_speedup"), float("inf"), "'validation.min_speedup': Input should be a"),
    "candidates-10e30": (("watch", "max_candidates"), 10**30, "'watch.max_candidates'"),
    "repeats-10e30": (("validation", "repeats"), 10**30, "'validation.repeats'"),
    "k-10e30": (("validation", "num_assistant_tokens"), [3, 10**30], "between 1 and 256"),
    "schedule-never": (("publish", "schedule"), "0 0 31 2 *", "'publish.schedule': Value error, cron"),
}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """A loopback endpoint nothing listens on, and no Actions: a case that reached the Hub would fail loudly."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    for name in ("HF_TOKEN", "GITHUB_ACTIONS", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)


pytestmark = pytest.mark.usefixtures("own_logger")  # the commands set up the bot's logger (tests/conftest.py)


def odd_recipe(folder: Path, name: str) -> Path:
    (section, key), value, _ = ODD_RECIPES[name]
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw.setdefault(section, {})[key] = value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def ended(args: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = run_command_line(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def only_outcome(report: Path) -> dict:
    data = json.loads(report.read_text())
    assert len(data["outcomes"]) == 1, data["outcomes"]
    return data["outcomes"][0]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_usage_error_of_every_command_writes_the_report(command, tmp_path, capsys):
    report = tmp_path / "report.json"
    code, err = ended([*command, "--no-such-option", "--report", str(report)], capsys)
    assert code == 2 and "No such option '--no-such-option'" in err
    outcome = only_outcome(report)
    assert outcome["source"] == f"({' '.join(command)})" and outcome["status"] == "failed"
    assert outcome["stage"] == "usage" and "No such option" in outcome["reason"]


def test_usage_errors_a_command_refuses_itself_write_the_report(tmp_path, capsys, monkeypatch):
    report = tmp_path / "r.json"
    cases = [
        (["run", "--only", "https://huggingface.co/z-lab/Qwen3-8B-DFlash-b16"], 2, "is a URL, not a repo id"),
        (["run", "--only", "Qwen3-8B-DFlash-b16"], 2, "is not a repo id"),
        (["run"], 2, "no write token (HF_TOKEN) is set"),
        (["run", "--recipe", str(tmp_path / "missing.yaml")], 2, "does not exist"),
        (["run", f"--report={report}", "--only"], 2, "requires an argument"),
        (["publish"], 2, "give --bundle alone, or --bundles and/or --plan"),
        (["publish", "--bundles", str(tmp_path / "none")], 2, "no such folder"),
        (["publish", "--bundles", str(tmp_path)], 2, "no write token"),
        (["dflash-bot-has-no-such-command"], 2, "No such command"),
    ]
    for args, want_code, words in cases:
        report.unlink(missing_ok=True)
        code, err = ended([*args, "--report", str(report)] if args[-1] != "--only" else args, capsys)
        assert (code, words in err) == (want_code, True), (args, code, err)
        assert words in only_outcome(report)["reason"], args
    monkeypatch.setenv("HF_TOKEN", "hf_unused")
    code, err = ended(["publish", "--bundle", str(tmp_path), "--report", str(report)], capsys)
    assert code == 1 and "cannot read openvino_export.json" in only_outcome(report)["reason"]


@pytest.mark.parametrize("name", sorted(ODD_RECIPES))
def test_an_odd_recipe_value_is_refused_naming_the_key_and_writes_the_report(name, tmp_path, capsys, monkeypatch):
    recipe, words = odd_recipe(tmp_path, name), ODD_RECIPES[name][2]
    monkeypatch.setenv("HF_TOKEN", "hf_unused")  # publish checks the token first; run only after the recipe
    for command in (["run"], ["publish", "--bundles", str(tmp_path)]):
        report = tmp_path / f"{command[0]}.json"
        code, err = ended([*command, "--recipe", str(recipe), "--report", str(report)], capsys)
        assert code == 4 and words in err, err
        outcome = only_outcome(report)
        assert outcome["stage"] == "recipe" and words in outcome["reason"] and str(recipe) in outcome["reason"]


def test_a_report_that_cannot_be_written_is_refused_before_the_command_runs(tmp_path, capsys):
    code, err = ended(["run", "--dry-run", "--report", str(tmp_path / "no" / "r.json")], capsys)
    assert code == 2 and f"its folder {tmp_path / 'no'} does not exist" in err
    code, err = ended(["run", "--dry-run", "--report", str(tmp_path)], capsys)
    assert code == 2 and "is a folder" in err


def test_a_report_the_command_wrote_is_kept(tmp_path):
    """A dry run against an empty local Hub writes its own report (exit 0); nothing replaces it. (A process of its
    own: the run sets up logging for the process.)"""
    import os
    import subprocess
    import sys

    from hubserver import LocalHub

    report = tmp_path / "report.json"
    report.write_text("stale")
    with LocalHub(tmp_path / "hub", user="bot", token="hf_cli") as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url}
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "run", "--dry-run", "--report", str(report)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    data = json.loads(report.read_text())
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert data["dry_run"] is True and data["hub_requests"] > 0
    assert not any(o["source"].startswith("(") for o in data["outcomes"])


def test_help_and_success_without_a_report_of_its_own_still_leave_one(tmp_path, capsys):
    report = tmp_path / "report.json"
    code, _ = ended(["run", "--help", "--report", str(report)], capsys)
    assert code == 0 and json.loads(report.read_text())["outcomes"] == []
