"""The build's IR checks (`bot.builder.check_ir`) in a sandboxed child of their own.

An IR is written by an export child, so it is as untrusted as the checkpoint it came from, and checking it means
OpenVINO parses it. The builder holds the read token and the network: the parse happens in a fresh process started
through `bot.sandbox.child` like every other child (no credential, its own folder, Landlock to the IR it reads), and the
report comes back as the record's own JSON (never pickled) and is validated here by the same pydantic model
`bot.builder.check_ir` returns (`record.TargetInspect`, `record.DraftInspect`).

`python -m bot.sandbox.child --read IR --write WORK bot.builder.inspect_child --role target|draft --ir IR --draft JSON
[--target JSON] --out FILE`
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from bot.builder.check_ir import inspect_draft, inspect_target
from bot.core.errors import Failure, Stage
from bot.core.record_checks import DraftInspect, TargetInspect
from bot.core.settings import SANDBOX_LAYERS
from bot.discover.checkpoints import DraftSpec, TargetSpec
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env

_FAILED = 3  # the child's exit code when a check failed (its message is in the report file)
Inspect = TypeVar("Inspect", bound=BaseModel)


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
            a report that is not a `TargetInspect`.
    """
    data = _run(
        "target", ir_dir, draft, target, work=work, timeout_s=timeout_s, budget=memory_budget_bytes, layers=layers
    )
    return _parsed(TargetInspect, data, "target")


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
    data = _run("draft", ir_dir, draft, None, work=work, timeout_s=timeout_s, budget=memory_budget_bytes, layers=layers)
    return _parsed(DraftInspect, data, "draft")


def _run(
    role: str,
    ir_dir: Path,
    draft: DraftSpec,
    target: TargetSpec | None,
    *,
    work: Path,
    timeout_s: float,
    budget: int,
    layers: Sequence[str],
) -> dict[str, Any]:
    out = work / "report.json"
    cmd = [
        *sandboxed("bot.builder.inspect_child", reads=[ir_dir], writes=[work], layers=layers),
        "--role",
        role,
        "--ir",
        str(ir_dir),
        "--draft",
        json.dumps(asdict(draft)),
        "--out",
        str(out),
    ]
    if target is not None:
        cmd += ["--target", json.dumps(asdict(target))]
    try:
        run_logged(
            cmd,
            log_path=work / "inspect.log",
            timeout_s=timeout_s,
            env=untrusted_env(home=work / "home"),
            what=f"{role} IR inspection",
            memory_budget_bytes=budget,
        )
    except Failure as failure:
        reported = _read(out)
        if reported is not None and isinstance(reported.get("failure"), str):
            raise Failure(reported["failure"], stage=Stage.INSPECT) from None  # a check failed: its own message
        raise failure.at(stage=Stage.INSPECT) from None
    data = _read(out)
    if data is None or not isinstance(data.get("report"), dict):
        raise Failure(f"the {role} IR inspection wrote no report", stage=Stage.INSPECT)
    return data["report"]


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _parsed(model: type[Inspect], data: dict[str, Any], role: str) -> Inspect:
    """The child's report, validated by the record's own model.

    Raises:
        Failure: the JSON is not such a report.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise Failure(
            f"the {role} IR inspection's report is malformed ({exc.error_count()} error(s): {exc.errors()[0]['msg']})",
            stage=Stage.INSPECT,
        ) from None


def main(argv: list[str] | None = None) -> int:
    """The child: run one check, write its report (or the check's failure) as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bot.sandbox.child bot.builder.inspect_child")
    parser.add_argument("--role", choices=("target", "draft"), required=True)
    parser.add_argument("--ir", type=Path, required=True)
    parser.add_argument("--draft", required=True, help="the draft's DraftSpec as JSON")
    parser.add_argument("--target", help="the target's TargetSpec as JSON (role target)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    draft_fields = json.loads(args.draft)
    draft = DraftSpec(**{**draft_fields, "target_layer_ids": tuple(draft_fields["target_layer_ids"])})
    try:
        if args.role == "target":
            report: TargetInspect | DraftInspect = inspect_target(args.ir, TargetSpec(**json.loads(args.target)), draft)
        else:
            report = inspect_draft(args.ir, draft)
    except Failure as failure:
        args.out.write_text(json.dumps({"failure": failure.message}), encoding="utf-8")
        return _FAILED
    args.out.write_text(json.dumps({"report": report.model_dump(mode="json")}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
