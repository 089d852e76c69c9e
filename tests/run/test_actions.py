"""The Actions side of a command (`bot.run.actions`): step outputs, the step summary and token masking written to the
runner's command files named in the settings (built from an environment Mapping), and nothing at all off Actions."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bot.core.outcome import Outcome, Status
from bot.core.settings import Settings
from bot.run.actions import Actions, summary_markdown
from bot.run.report import RunReport

SHA = "abcdef0123" * 4


def on_actions(tmp_path: Path, **env: str) -> Actions:
    return Actions(
        Settings.from_env(
            {
                "GITHUB_ACTIONS": "true",
                "GITHUB_OUTPUT": str(tmp_path / "output"),
                "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
                **env,
            }
        )
    )


def outputs(path: Path) -> dict[str, str]:
    """The step outputs a GITHUB_OUTPUT file holds (`name=value` lines or `name<<delimiter` blocks)."""
    found: dict[str, str] = {}
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if match := re.fullmatch(r"([\w-]+)<<(\S+)", lines[i]):
            end = lines.index(match.group(2), i + 1)
            found[match.group(1)] = "\n".join(lines[i + 1 : end])
            i = end + 1
        else:
            name, _, value = lines[i].partition("=")
            found[name] = value
            i += 1
    return found


def sample() -> RunReport:
    report = RunReport(hub_requests=4, deferred=["z/Later"])
    report.add(Outcome("z/A", SHA, Status.PUBLISHED, "new", ["ns/B-int4-ov", "ns/A-int4-ov"]))
    report.add(Outcome("z/B", SHA, Status.SKIPPED, "gated"))
    report.add(Outcome("z/C", None, Status.FAILED, "export crashed"))
    report.add(Outcome("z/C2", None, Status.FAILED, "timeout"))
    return report


def test_outputs_are_written_as_json_unless_strings(tmp_path):
    before = {name: os.environ.get(name) for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
    actions = on_actions(tmp_path)
    actions.set_output("name", "plain")
    actions.set_output("matrix", {"include": [{"a": 1}]})
    assert outputs(tmp_path / "output") == {"name": "plain", "matrix": '{"include": [{"a": 1}]}'}
    # The command files are pointed at for each call only: the process environment is left as it was.
    assert {name: os.environ.get(name) for name in before} == before


def test_summary_is_appended_to_the_summary_file(tmp_path):
    actions = on_actions(tmp_path)
    actions.summary("## one")
    actions.summary("## two")
    text = (tmp_path / "summary.md").read_text()
    assert text.index("## one") < text.index("## two")


def test_report_writes_outputs_summary_and_annotations(tmp_path, capsys):
    on_actions(tmp_path).report(sample(), title="dflash-bot run", endpoint="https://hub", settings={"only": "z/A"})
    found = outputs(tmp_path / "output")
    assert json.loads(found["published"]) == ["ns/A-int4-ov", "ns/B-int4-ov"]
    assert json.loads(found["failed"]) == ["z/C", "z/C2"]
    summary = (tmp_path / "summary.md").read_text()
    assert "## dflash-bot run" in summary and "**only**: `z/A`" in summary
    assert "2 failed, 1 published, 1 skipped" in summary  # counts in status-name order
    assert "[ns/A-int4-ov](https://hub/ns/A-int4-ov)" in summary
    assert "Deferred to the next run (1): z/Later" in summary
    out = capsys.readouterr().out
    assert "::error title=dflash-bot%3A z/C failed::z/C@: export crashed" in out
    assert "::notice title=dflash-bot%3A z/B skipped::z/B@abcdef0: gated" in out


def test_mask_tokens_masks_each_token_on_stderr(tmp_path, capsys):
    actions = on_actions(tmp_path, HF_TOKEN="hf_write_secret", HF_READ_TOKEN="hf_read_secret")
    assert actions.mask_tokens() == ["hf_write_secret", "hf_read_secret"]
    captured = capsys.readouterr()
    masks = re.findall(r"^::add-mask ?::(.*)$", captured.err, flags=re.MULTILINE)
    assert masks == ["hf_write_secret", "hf_read_secret"]
    assert captured.out == ""


def test_off_actions_nothing_is_written(tmp_path, capsys):
    env = {
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "HF_TOKEN": "hf_write_secret",
    }
    actions = Actions(Settings.from_env(env))
    assert actions.enabled is False
    assert actions.mask_tokens() == []
    actions.set_output("x", 1)
    actions.report(sample(), title="t", endpoint="https://hub")
    actions.error("boom")
    assert not (tmp_path / "output").exists() and not (tmp_path / "summary.md").exists()
    assert capsys.readouterr() == ("", "")


def test_summary_markdown_marks_a_dry_run_and_omits_empty_parts():
    text = summary_markdown(RunReport(dry_run=True), title="plan", endpoint="https://hub")
    assert text.splitlines()[0] == "## plan (dry run)"
    assert "Deferred" not in text and "**" not in text
    assert "Hub requests: 0; commits: 0" in text
