"""Export a checkpoint to OpenVINO IR with int4 weights through optimum-cli (optimum-intel + NNCF).

The CLI is used rather than `main_export`: with a quantization config the Python API writes an fp32 IR and the
CLI applies weight compression as a separate step (notes/toolchain-on-cpu.md §4). Each export runs in its own
process, inside the trust boundary of `bot.sandbox.isolation`, so the draft and target exports can run side by side.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# optimum-cli's task names are the exporter's facts, named in core so that planning can compare them too.
from bot.core.exporter import TASK_LLM as TASK_LLM
from bot.core.exporter import TASK_VLM as TASK_VLM
from bot.core.exporter import target_task as target_task
from bot.core.profiles import child_env
from bot.core.recipe import ExportSettings
from bot.core.record import StageResources
from bot.core.settings import SANDBOX_LAYERS
from bot.sandbox.isolation import run_logged, sandboxed, untrusted_env
from bot.sandbox.resources import stage_resources


@dataclass(frozen=True)
class ExportRequest:
    """One model to export. `role` is "draft" or "target" (what messages say); `name` keeps logs apart."""

    role: str
    source: Path
    output: Path
    task: str
    trust_remote_code: bool
    name: str = ""

    @property
    def name_or_role(self) -> str:
        return self.name or self.role


@dataclass(frozen=True)
class ExportResult:
    """An IR folder and what exporting it cost: wall time and the exporter's whole process tree's memory peaks
    (anonymous plus swap is what the memory guard compares with the budget; file-backed pages are the mapped
    checkpoint, which the kernel can drop). An IR not exported here (reused, official) costs nothing."""

    role: str
    ir_dir: Path
    log: Path
    resources: StageResources = field(default_factory=lambda: StageResources(seconds=0.0))


def optimum_cli_args(
    request: ExportRequest, settings: ExportSettings, quantization: Sequence[str] | None = None
) -> list[str]:
    """The optimum-cli arguments a user would type for this export.

    `quantization` replaces the recipe's compression flags (`bot.builder.quantization`: a recommended int4 config, or a
    draft's weight format).
    """
    args = ["export", "openvino", "-m", str(request.source), "--task", request.task]
    args += list(quantization) if quantization is not None else settings.cli_args()
    if request.trust_remote_code:
        # Loads optimum-intel's own Qwen3DFlashForCausalLM: the source's auto_map and *.py never reach here.
        args += ["--trust-remote-code", "--disable-convert-tokenizer"]
    args.append(str(request.output))
    return args


def export_model(
    request: ExportRequest,
    settings: ExportSettings,
    *,
    log_dir: Path,
    home: Path,
    python: str | None = None,
    memory_budget_bytes: int | None = None,
    quantization: Sequence[str] | None = None,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> ExportResult:
    """Run one export in an untrusted-input subprocess.

    `home` is this export's own HOME, TMPDIR, XDG and HF folder (no other child's: see `export_command`).
    `python` is the interpreter of the job's toolchain profile (None: this environment's).
    `memory_budget_bytes` stops the export when its process tree outgrows it (the runner class's memory).
    `quantization` replaces the recipe's compression flags (see `optimum_cli_args`).
    `layers` are the OS confinement layers the child may use (`Settings.sandbox_layers`).

    Raises:
        Failure: optimum-cli failed, ran past the recipe's `export.timeout_s`, or went over the memory budget.
    """
    started = time.monotonic()
    log = log_dir / f"export-{request.name_or_role}.log"
    command, env = export_command(request, settings, home=home, python=python, quantization=quantization, layers=layers)
    peaks = run_logged(
        command,
        log_path=log,
        timeout_s=settings.timeout_s,
        env=env,
        what=f"{request.role} export",  # never the internal name (draft-0): messages reach the report
        memory_budget_bytes=memory_budget_bytes,
    )
    return ExportResult(
        role=request.role, ir_dir=request.output, log=log, resources=stage_resources(time.monotonic() - started, peaks)
    )


def export_command(
    request: ExportRequest,
    settings: ExportSettings,
    *,
    home: Path,
    python: str | None = None,
    quantization: Sequence[str] | None = None,
    layers: Sequence[str] = SANDBOX_LAYERS,
) -> tuple[list[str], dict[str, str]]:
    """The sandboxed optimum-cli command of one export and its environment.

    The child may read its working copy and write its output and its own HOME/TMPDIR/HF cache (`home`), nothing
    else: optimum-cli stages the IR under TMPDIR before moving it into the output, so no other child may write
    there (a shared TMPDIR let one export plant files in another's IR).
    """
    command = sandboxed("optimum-cli", python, reads=[request.source], writes=[request.output, home], layers=layers)
    return command + optimum_cli_args(request, settings, quantization), child_env(untrusted_env(home=home), python)
