"""`bot.builder.pair_child.run_pair_child` with real sandboxed children (no export, no GenAI generation): a tool that
exits cleanly without writing its report, a tool module that does not exist, and a tool that fails on its inputs
each give a Failure naming the child, with the child's log kept in its work folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from bot.builder.pair_child import PairChild, run_pair_child
from bot.core.errors import Failure, Stage
from bot.core.recipe import ValidationSettings

LAYERS = ("landlock",)  # no namespace wrapper: quicker, and what these checks need


class _Report(BaseModel):
    ok: bool


def _child(tmp_path: Path, what: str) -> PairChild:
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    settings = ValidationSettings(prompts=["a", "b", "c"], timeout_s=60)
    return PairChild(target, draft, settings, tmp_path / "work", name="check", what=what)


def test_a_child_that_writes_no_report_is_a_failure_naming_it(tmp_path: Path) -> None:
    child = _child(tmp_path, "per-row validation")
    # `--help`: the tool prints its usage and exits 0 without writing `check.json`.
    with pytest.raises(Failure) as caught:
        run_pair_child("bot.builder.validate_per_row", _Report, child, ["--help"], python=None, layers=LAYERS)
    assert caught.value.message.startswith("per-row validation wrote no readable report (")
    assert caught.value.stage is Stage.VALIDATE
    assert not (child.work / "check.json").exists()
    log = (child.work / "check.log").read_text()
    assert "sandbox: no Hub token in this process" in log and "usage:" in log


def test_a_missing_tool_module_fails_naming_the_child(tmp_path: Path) -> None:
    child = _child(tmp_path, "GenAI validation")
    with pytest.raises(Failure) as caught:
        run_pair_child("bot.builder.no_such_tool", _Report, child, [], python=None, layers=LAYERS)
    assert caught.value.message.startswith("GenAI validation failed (")
    assert "no tool module bot.builder.no_such_tool" in (child.work / "check.log").read_text()


def test_a_tool_refusing_its_inputs_fails_naming_the_child(tmp_path: Path) -> None:
    child = _child(tmp_path, "GenAI validation")
    with pytest.raises(Failure) as caught:
        run_pair_child("bot.builder.validate_per_row", _Report, child, ["--no-such-option"], python=None, layers=LAYERS)
    assert caught.value.message.startswith("GenAI validation failed (")
    assert "unrecognized arguments: --no-such-option" in (child.work / "check.log").read_text()
