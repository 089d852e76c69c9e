"""`bot.sandbox.wire`: the one request/answer helper every child uses.

With real sandboxed children (no export, no GenAI generation): a request the tool's model refuses (a field it does
not know) is refused on arrival, before anything runs; a tool module that does not exist fails naming the child; a
check that fails in the child comes back as its own message. With `run_logged` standing in for a child that exited
cleanly: a reply that is missing, a link, too large, or not the answer's model is a Failure naming the child.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from bot.core.errors import Failure, Stage
from bot.core.recipe import ValidationSettings
from bot.sandbox import wire
from bot.sandbox.wire import Child, Reply, read_bounded, read_reply, run_child

LAYERS = ("landlock",)  # no namespace wrapper: quicker, and what these checks need


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool


class _Smuggling(wire.Request):
    """A per-row request with one field more than the tool's model has."""

    target: Path
    draft: Path
    settings: ValidationSettings
    requests: int = 2
    token: str = "hf_not_a_real_token"


def _child(tmp_path: Path, tool: str, what: str, **kw) -> Child:
    return Child(tool=tool, work=tmp_path / "work", name="check", what=what, timeout_s=60, layers=LAYERS, **kw)


def _pair(tmp_path: Path) -> tuple[Path, Path, ValidationSettings]:
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    return target, draft, ValidationSettings(prompts=["a", "b", "c"], timeout_s=60)


def test_a_request_with_a_field_the_tool_does_not_know_is_refused_on_arrival(tmp_path: Path) -> None:
    target, draft, settings = _pair(tmp_path)
    child = _child(tmp_path, "bot.builder.validate_per_row", "GenAI per-row validation", stage=Stage.VALIDATE)
    with pytest.raises(Failure) as caught:
        run_child(child, _Smuggling(target=target, draft=draft, settings=settings), _Answer)
    assert caught.value.message.startswith("GenAI per-row validation failed (exit 2")
    assert caught.value.stage is Stage.VALIDATE
    log = (child.work / "check.log").read_text()
    assert "sandbox: no Hub token in this process" in log
    assert (
        "refusing the request: not a PerRowRequest (1 error(s), first at token: Extra inputs are not permitted)" in log
    )
    assert not (child.work / "check.json").exists()


def test_a_missing_tool_module_fails_naming_the_child(tmp_path: Path) -> None:
    child = _child(tmp_path, "bot.builder.no_such_tool", "GenAI validation")
    with pytest.raises(Failure) as caught:
        run_child(child, _Answer(ok=True), _Answer)
    assert caught.value.message.startswith("GenAI validation failed (")
    assert "no tool module bot.builder.no_such_tool" in (child.work / "check.log").read_text()


def test_a_check_that_fails_in_the_child_comes_back_as_its_own_message(tmp_path: Path) -> None:
    """The draft inspection of a folder with no IR: `check_ir` raises a Failure in the child, the reply carries it."""
    from bot.builder.inspect_child import inspect_draft_in_child
    from bot.discover.checkpoints import DraftSpec

    empty = tmp_path / "ir"
    empty.mkdir()
    spec = DraftSpec.of_kind("dflash", "DFlashDraftModel", "qwen3")
    work = tmp_path / "inspect"
    with pytest.raises(Failure) as caught:
        inspect_draft_in_child(empty, spec, work=work, timeout_s=120, memory_budget_bytes=4 << 30, layers=LAYERS)
    assert caught.value.message == "draft IR openvino_model.xml was not written by the export"
    assert caught.value.stage is Stage.INSPECT
    assert Reply[_Answer].model_validate_json((work / "inspect.json").read_text()).failure == caught.value.message


@pytest.fixture
def clean_exit(monkeypatch: pytest.MonkeyPatch):
    """`run_logged` replaced by a child that exits 0 after writing `reply` (bytes; None: nothing) as its reply."""
    replies: list[bytes | None] = []

    def run_logged(command, **_):
        answer = Path(command[command.index("--answer") + 1])
        if replies[0] is not None:
            answer.write_bytes(replies[0])

    monkeypatch.setattr(wire, "run_logged", run_logged)
    return replies


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (None, "No such file"),
        (b'{"answer": {"ok": true, "extra": 1}}', "Extra inputs are not permitted"),
        (b'{"answer": {"ok": "maybe"}}', "valid boolean"),
        (b'{"answer": {"ok": true}, "token": "x"}', "Extra inputs are not permitted"),
        (b"\x80 not json", "Invalid JSON"),
        (b"{}", "either an answer or a failure"),
        (b'{"answer": {"ok": true}, "failure": "x"}', "either an answer or a failure"),
    ],
)
def test_a_reply_that_is_not_the_answers_model_is_a_failure_naming_the_child(tmp_path, clean_exit, reply, reason):
    clean_exit.append(reply)
    child = _child(tmp_path, "bot.builder.validate", "GenAI validation", stage=Stage.VALIDATE)
    with pytest.raises(Failure) as caught:
        run_child(child, _Answer(ok=True), _Answer)
    assert caught.value.message.startswith("GenAI validation wrote no readable report (")
    assert reason in caught.value.message and caught.value.stage is Stage.VALIDATE


def test_the_answer_comes_back_validated_and_an_earlier_reply_is_never_read(tmp_path, clean_exit):
    child = _child(tmp_path, "bot.builder.validate", "GenAI validation")
    clean_exit.append(Reply[_Answer](answer=_Answer(ok=True)).model_dump_json().encode())
    assert run_child(child, _Answer(ok=False), _Answer) == _Answer(ok=True)
    assert (child.work / "check.request.json").read_text() == '{"ok":false}'
    clean_exit[0] = None  # the next child writes nothing: the first one's reply is not taken for its own
    with pytest.raises(Failure, match="wrote no readable report"):
        run_child(child, _Answer(ok=False), _Answer)


def test_replies_are_read_bounded_from_regular_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"answer": {"ok": true}}')
    link = tmp_path / "link.json"
    link.symlink_to(secret)
    with pytest.raises(OSError):
        read_reply(link, _Answer)  # a child cannot point its reply at a file of the builder's
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_bounded(fifo, 100)  # nor make the builder wait on a pipe
    with pytest.raises(OSError, match="not a regular file"):
        read_bounded(tmp_path, 100)
    assert read_reply(secret, _Answer).answer == _Answer(ok=True)
    monkeypatch.setattr(wire, "MAX_REPLY_BYTES", 10)
    with pytest.raises(ValueError, match="over the 10-byte limit"):
        read_reply(secret, _Answer)


def test_a_failure_message_is_bounded_on_both_sides() -> None:
    with pytest.raises(ValueError):
        Reply[_Answer](failure="x" * (wire.MAX_FAILURE_CHARS + 1))
