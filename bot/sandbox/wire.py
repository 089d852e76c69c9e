"""One wire between the builder and every child it starts for a `bot.builder` tool (docs/design.md §3).

Inspection, quality and both validations cross the process boundary the same way: the parent writes the request,
a pydantic model, as JSON into the child's own work folder (`<name>.request.json`) and starts the tool behind
`bot.sandbox.child` (`run_child`); the tool's `main` hands its argv to `serve`, which reads the request with the
same model (extra fields forbidden, size-bounded), runs the tool's handler and writes one `Reply` (`<name>.json`):
the answer, the tool's own pydantic model, or the message of a `Failure` the handler raised. The parent reads the
reply size-bounded, never through a link or from anything but a regular file, and validates it with the answer's
model before anything uses it. JSON both ways, never a pickle; nothing is written or read by hand.

This module is apart from `bot.sandbox.child` because the builder imports it: the child's entry imports
huggingface_hub (to look for a stored token), which the bot's entry points must not import before telemetry is off.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot.core.errors import Failure, Stage
from bot.core.profiles import child_env
from bot.core.settings import SANDBOX_LAYERS
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_REPLY_BYTES = 16 * 1024 * 1024  # a validation's reply (every run, the timing rows) is tens of kB
MAX_FAILURE_CHARS = 2000
FAILED = 3  # the tool's exit code when its handler raised a Failure (the reply holds the message)
REFUSED_REQUEST = 2  # the tool's exit code for a request its model does not accept

RequestT = TypeVar("RequestT", bound=BaseModel)
AnswerT = TypeVar("AnswerT", bound=BaseModel)


class Request(BaseModel):
    """Base of every child's request: frozen, and a field the tool does not know is refused on arrival."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Reply(BaseModel, Generic[AnswerT]):
    """What a child writes back: its answer, or the message of the check that failed in it (never both)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answer: AnswerT | None = None
    failure: str | None = Field(None, max_length=MAX_FAILURE_CHARS)

    @model_validator(mode="after")
    def _one_of_them(self) -> Reply[AnswerT]:
        if (self.answer is None) == (self.failure is None):
            raise ValueError("a reply holds either an answer or a failure")
        return self


@dataclass(frozen=True, kw_only=True)
class Child:
    """One child: the tool it runs, its folders and its limits.

    Attributes:
        tool: the module the child imports once confined (`bot.builder.<module>`, whose `main` calls `serve`).
        work: the child's own folder, the only one it may write: its request (`<name>.request.json`), reply
            (`<name>.json`), log (`<name>.log`) and HOME, TMPDIR and HF cache (`hf-home`).
        name: what its files are called.
        what: what the log and failure messages call it.
        reads: the folders it may read besides `work` (checkpoints, IRs).
        timeout_s, memory_budget_bytes: its wall-clock limit and memory budget (`run_logged`; None: no budget).
        python: the interpreter of the job's toolchain profile (None: this one).
        layers: the OS confinement layers it may use (`Settings.sandbox_layers`).
        stage: where its failures happened, unless an inner layer knew better.
    """

    tool: str
    work: Path
    name: str
    what: str
    reads: Sequence[Path] = ()
    timeout_s: float
    memory_budget_bytes: int | None = None
    python: str | None = None
    layers: Sequence[str] = SANDBOX_LAYERS
    stage: Stage | None = None


def run_child(child: Child, request: BaseModel, answer: type[AnswerT]) -> AnswerT:
    """Run `child.tool` on `request` in a sandboxed, token-free child and return its answer, validated by `answer`.

    Raises:
        Failure: a check in the child failed (its own message), the child failed, ran past its time limit or memory
            budget (`run_logged`), or wrote no reply the answer's model accepts.
    """
    work, what, stage = child.work, child.what, child.stage
    work.mkdir(parents=True, exist_ok=True)
    request_file, reply_file = work / f"{child.name}.request.json", work / f"{child.name}.json"
    reply_file.unlink(missing_ok=True)  # an earlier attempt's reply is never read as this one's
    request_file.write_text(request.model_dump_json(), encoding="utf-8")
    command = [
        *sandboxed(child.tool, child.python, reads=child.reads, writes=[work], layers=child.layers),
        *("--request", str(request_file), "--answer", str(reply_file)),
    ]
    try:
        run_logged(
            command,
            log_path=work / f"{child.name}.log",
            timeout_s=child.timeout_s,
            env=child_env(untrusted_env(home=work / "hf-home"), child.python),
            what=what,
            memory_budget_bytes=child.memory_budget_bytes,
        )
    except Failure as failure:
        try:
            failed = read_reply(reply_file, answer).failure
        except (OSError, ValueError):
            failed = None
        if failed is not None:
            raise Failure(failed, stage=stage) from None  # a check failed: its own message
        raise failure.at(stage=stage) from None
    try:
        reply = read_reply(reply_file, answer)
    except (OSError, ValueError) as exc:
        raise Failure(f"{what} wrote no readable report ({exc})"[:300], stage=stage) from None
    if reply.answer is None:
        raise Failure(reply.failure or "", stage=stage)  # a check failed: its own message
    return reply.answer


def read_reply(path: Path, answer: type[AnswerT]) -> Reply[AnswerT]:
    """A child's reply, validated by `Reply[answer]`.

    Raises:
        OSError: no such regular file (a link, a FIFO or a folder is refused without being opened through).
        ValueError: over `MAX_REPLY_BYTES`, or not a reply (`ValidationError` is a `ValueError`).
    """
    return Reply[answer].model_validate_json(read_bounded(path, MAX_REPLY_BYTES))  # type: ignore[valid-type]


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of a regular file a child could have replaced, at most `limit` of them.

    Raises:
        OSError: `path` is a link, or not a regular file (a FIFO would block the reader).
        ValueError: it holds more than `limit` bytes.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(f"{path.name} is not a regular file")
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path.name} is over the {limit}-byte limit")
    return data


def serve(
    request_type: type[RequestT], handler: Callable[[RequestT], BaseModel], argv: Sequence[str] | None, *, prog: str
) -> int:
    """The child's side of `run_child`: read the request, run `handler` on it, write its reply.

    Args:
        request_type: the request's model; a request it does not accept (an unknown field, a wrong type) is refused
            before the handler runs.
        handler: the tool's work; a `Failure` it raises is replied as a failure (its message), anything else
            propagates (a traceback in the child's log, its last line in the parent's failure).
        argv: `--request FILE --answer FILE`, as `run_child` passes them.
        prog: the tool's name in its usage line.

    Returns:
        The exit code: 0 with an answer, `FAILED` with a failure, `REFUSED_REQUEST` for a refused request.
    """
    parser = argparse.ArgumentParser(prog=prog, description=f"answer one {request_type.__name__} (bot.sandbox.wire)")
    parser.add_argument("--request", type=Path, required=True, help=f"the {request_type.__name__} as JSON")
    parser.add_argument("--answer", type=Path, required=True, help="where to write the reply (JSON)")
    args = parser.parse_args(argv)
    try:
        request = request_type.model_validate_json(read_bounded(args.request, MAX_REQUEST_BYTES))
    except (OSError, ValueError) as exc:
        print(f"refusing the request: not a {request_type.__name__} ({_first_problem(exc)})", flush=True)
        return REFUSED_REQUEST
    try:
        answer = handler(request)
    except Failure as failure:
        args.answer.write_text(Reply(failure=failure.message[:MAX_FAILURE_CHARS]).model_dump_json(), encoding="utf-8")
        return FAILED
    reply = Reply[type(answer)](answer=answer)  # type: ignore[misc,operator]  # the tool's own answer model
    args.answer.write_text(reply.model_dump_json(indent=2), encoding="utf-8")
    return 0


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(the whole request)"
        return f"{exc.error_count()} error(s), first at {where}: {first['msg']}"
    return str(exc)
