"""The build's IR checks (`bot.builder.check_ir`) in a sandboxed child of their own.

An IR is written by an export child, so it is as untrusted as the checkpoint it came from, and checking it means
OpenVINO parses it. The builder holds the read token and the network: the parse happens in a fresh process started
through `bot.sandbox.child` like every other child (no credential, its own folder, Landlock to the IR it reads), over
the one wire every child uses (`bot.sandbox.wire`): an `InspectRequest` in, the record's own model out
(`record_checks.TargetInspect`, `record_checks.DraftInspect`, what `bot.builder.check_ir` returns), or the failed
check's message.

`python -m bot.sandbox.child --read IR --write WORK bot.builder.inspect_child --request FILE --answer FILE`
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from bot.builder.check_ir import inspect_draft, inspect_target
from bot.core.errors import Stage
from bot.core.record_checks import DraftInspect, TargetInspect
from bot.core.settings import SANDBOX_LAYERS
from bot.discover.checkpoints import DraftSpec, TargetSpec
from bot.sandbox.wire import Child, Request, run_child, serve

TOOL = "bot.builder.inspect_child"
Inspect = TypeVar("Inspect", TargetInspect, DraftInspect)


class InspectRequest(Request):
    """One IR to check: the target's (with what the draft needs of it) or the draft's."""

    role: Literal["target", "draft"]
    ir: Path
    draft: DraftSpec
    target: TargetSpec | None = None  # role target


def inspect_target_in_child(
    ir_dir: Path,
    target: TargetSpec,
    draft: DraftSpec,
    *,
    work: Path,
    timeout_s: float,
    memory_budget_bytes: int,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> TargetInspect:
    """`check_ir.inspect_target` in a sandboxed child (confined by `layers`, `Settings.sandbox_layers`).

    Raises:
        Failure: a check failed (the child's message), or the child failed, overran, outgrew its budget or wrote
            a reply that is not a `TargetInspect`.
    """
    request = InspectRequest(role="target", ir=ir_dir, draft=draft, target=target)
    return _run(request, TargetInspect, work=work, timeout_s=timeout_s, budget=memory_budget_bytes, layers=layers)


def inspect_draft_in_child(
    ir_dir: Path,
    draft: DraftSpec,
    *,
    work: Path,
    timeout_s: float,
    memory_budget_bytes: int,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> DraftInspect:
    """`check_ir.inspect_draft` in a sandboxed child.

    Raises:
        Failure: as for `inspect_target_in_child`.
    """
    request = InspectRequest(role="draft", ir=ir_dir, draft=draft)
    return _run(request, DraftInspect, work=work, timeout_s=timeout_s, budget=memory_budget_bytes, layers=layers)


def _run(
    request: InspectRequest, answer: type[Inspect], *, work: Path, timeout_s: float, budget: int, layers: Sequence[str]
) -> Inspect:
    child = Child(
        tool=TOOL,
        work=work,
        name="inspect",
        what=f"{request.role} IR inspection",
        reads=[request.ir],
        timeout_s=timeout_s,
        memory_budget_bytes=budget,
        layers=layers,
        stage=Stage.INSPECT,
    )
    return run_child(child, request, answer)


def _inspect(request: InspectRequest) -> TargetInspect | DraftInspect:
    """The child's work: one check (`check_ir`), whose `Failure` goes back as the reply's failure."""
    if request.role == "draft":
        return inspect_draft(request.ir, request.draft)
    if request.target is None:
        raise ValueError("a target inspection needs the target's TargetSpec")
    return inspect_target(request.ir, request.target, request.draft)


def main(argv: list[str] | None = None) -> int:
    """The child: answer one `InspectRequest`."""
    return serve(InspectRequest, _inspect, argv, prog=f"python -m bot.sandbox.child {TOOL}")


if __name__ == "__main__":
    sys.exit(main())
