"""The build's IR checks (`bot.build.check_ir`) in a sandboxed child of their own.

An IR is written by an export child, so it is as untrusted as the checkpoint it came from, and checking it means
OpenVINO parses it. The builder holds the read token and the network: the parse happens in a fresh process started
through `bot.sandbox.child` like every other child (no credential, its own folder, Landlock to the IR it reads), and the
report comes back as JSON (never pickled), rebuilt here into the same records `bot.build.check_ir` returns.

`python -m bot.sandbox.child --read IR --write WORK inspect --role target|draft --ir IR --draft JSON [--target JSON]
--out FILE`
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bot.build.check_ir import DraftIrReport, PagedAttentionCheck, RuleResult, TargetIrReport
from bot.core.errors import Failure
from bot.discover.checkpoints import DraftSpec, TargetSpec
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env

_FAILED = 3  # the child's exit code when a check failed (its message is in the report file)


def inspect_target_in_child(
    ir_dir: Path, target: TargetSpec, draft: DraftSpec, *, work: Path, timeout_s: float, memory_budget_bytes: int
) -> TargetIrReport:
    """`check_ir.inspect_target` in a sandboxed child.

    Raises:
        Failure: a check failed (the child's message), or the child failed, overran or outgrew its budget.
    """
    data = _run("target", ir_dir, draft, target, work=work, timeout_s=timeout_s, budget=memory_budget_bytes)
    return target_report(data)


def inspect_draft_in_child(
    ir_dir: Path, draft: DraftSpec, *, work: Path, timeout_s: float, memory_budget_bytes: int
) -> DraftIrReport:
    """`check_ir.inspect_draft` in a sandboxed child.

    Raises:
        Failure: as for `inspect_target_in_child`.
    """
    data = _run("draft", ir_dir, draft, None, work=work, timeout_s=timeout_s, budget=memory_budget_bytes)
    return draft_report(data)


def _run(
    role: str,
    ir_dir: Path,
    draft: DraftSpec,
    target: TargetSpec | None,
    *,
    work: Path,
    timeout_s: float,
    budget: int,
) -> dict[str, Any]:
    out = work / "report.json"
    cmd = [
        *sandboxed("inspect", reads=[ir_dir], writes=[work]),
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
            raise Failure(reported["failure"], stage="inspect") from None  # a check failed: its own message
        raise failure.at(stage="inspect") from None
    data = _read(out)
    if data is None or not isinstance(data.get("report"), dict):
        raise Failure(f"the {role} IR inspection wrote no report", stage="inspect")
    return data["report"]


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def target_report(data: dict[str, Any]) -> TargetIrReport:
    """A `TargetIrReport` from its JSON form (`dataclasses.asdict`).

    Raises:
        Failure: the JSON is not such a report.
    """
    try:
        return TargetIrReport(
            **{
                **data,
                "paged_attention": PagedAttentionCheck(**data["paged_attention"]),
                "hidden_state_layers": tuple(data["hidden_state_layers"]),
            }
        )
    except (KeyError, TypeError) as exc:
        raise Failure(f"the target IR inspection's report is malformed ({exc})", stage="inspect") from None


def draft_report(data: dict[str, Any]) -> DraftIrReport:
    """A `DraftIrReport` from its JSON form (`dataclasses.asdict`).

    Raises:
        Failure: the JSON is not such a report.
    """
    try:
        return DraftIrReport(
            **{
                **data,
                "inputs": tuple(data["inputs"]),
                "outputs": tuple(data["outputs"]),
                "target_layer_ids": tuple(data["target_layer_ids"]),
                "paged_attention": PagedAttentionCheck(**data["paged_attention"]),
                "rules": tuple(RuleResult(**rule) for rule in data["rules"]),
                "layer_windows": tuple(data["layer_windows"]),
            }
        )
    except (KeyError, TypeError) as exc:
        raise Failure(f"the draft IR inspection's report is malformed ({exc})", stage="inspect") from None


def main(argv: list[str] | None = None) -> int:
    """The child: run one check, write its report (or the check's failure) as JSON."""
    from bot.build.check_ir import inspect_draft, inspect_target

    parser = argparse.ArgumentParser(prog="python -m bot.sandbox.child inspect")
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
            report: TargetIrReport | DraftIrReport = inspect_target(
                args.ir, TargetSpec(**json.loads(args.target)), draft
            )
        else:
            report = inspect_draft(args.ir, draft)
    except Failure as failure:
        args.out.write_text(json.dumps({"failure": failure.message}), encoding="utf-8")
        return _FAILED
    args.out.write_text(json.dumps({"report": asdict(report)}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
