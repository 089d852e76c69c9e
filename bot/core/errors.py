"""One error hierarchy for the whole bot: a skip is not a failure, and our side's failure is not the source's.

The orchestrator catches `BotError` per candidate, records it and moves on; the run exits non-zero only when
something *failed*. Messages say what was wrong and, where possible, what to change. Every error names the `Stage`
it happened in, and each stage says whose fault a failure there is (`Fault`): the status memory remembers a
failure as the source's only at a stage whose failures are the source's, and never an `InfrastructureFailure`.

Each class exits a command with a code of its own (`EXIT_CODES`, the README's "Exit codes" table).
"""

from __future__ import annotations

import errno
import re
from enum import Enum, StrEnum
from typing import ClassVar


class Fault(Enum):
    """Whose fault a skip or failure at a stage is: what the status memory may keep of it between runs."""

    # The checkpoint's: its skip or failure is remembered until the source, the toolchain or the recipe change.
    SOURCE = "source"
    # A failure is the Hub's, the runner's or the bot's, so the source is examined again; a skip is still the
    # source's (the Hub's answer that it is gated or missing).
    ENVIRONMENT = "environment"
    # About the bot's own output repos (no write token, a lost commit race): nothing is remembered.
    OUTPUT = "output"
    # The recipe's or a maintainer's decision, not the source's (who is trusted, docs/design.md §14): nothing is
    # remembered, so a source becomes buildable on the first run after its author is trusted.
    DECISION = "decision"


class Stage(StrEnum):
    """Where an error happened: a step of the pipeline or the Hub operation that failed.

    The values are the labels reports, `status.json` and `--report` files have always held, so stored memory still
    reads. Each member states its `Fault`: a new stage cannot be added without deciding what the memory keeps.
    """

    fault: Fault

    def __new__(cls, value: str, fault: Fault) -> Stage:
        member = str.__new__(cls, value)
        member._value_ = value
        member.fault = fault
        return member

    @classmethod
    def named(cls, label: str | None) -> Stage | None:
        """The stage a stored label names (None: no label, or one this bot does not know)."""
        return next((stage for stage in cls if stage.value == label), None)

    # Hub operations (`Hub.call`): a failure is the Hub's or the network's; a skip is the Hub's answer about the repo.
    LIST = "list", Fault.ENVIRONMENT
    INFO = "info", Fault.ENVIRONMENT
    READ = "read", Fault.ENVIRONMENT
    WHOAMI = "whoami", Fault.ENVIRONMENT
    COMMITS = "commits", Fault.ENVIRONMENT
    DOWNLOAD = "download", Fault.ENVIRONMENT
    CREATE_REPO = "create repo", Fault.ENVIRONMENT
    COMMIT = "commit", Fault.ENVIRONMENT
    TAG = "tag", Fault.ENVIRONMENT
    LIST_NAMESPACE = "list namespace", Fault.ENVIRONMENT
    COLLECTION = "collection", Fault.ENVIRONMENT
    # Discovery and planning.
    PLAN = "plan", Fault.ENVIRONMENT  # the plan deadline (`hub.plan_deadline_s`)
    DISCOVER = "discover", Fault.SOURCE
    APPROVE = "approve", Fault.DECISION  # seen, not approved: no trusted author, no dispatch (`bot.discover.trust`)
    CLASSIFY = "classify", Fault.SOURCE
    CROSS_CHECK = "cross-check", Fault.SOURCE
    FETCH = "fetch", Fault.ENVIRONMENT  # the working copy and its disk space
    TOOLCHAIN = "toolchain", Fault.ENVIRONMENT
    REUSE_TARGET = "reuse-target", Fault.ENVIRONMENT  # our own published target IR moved or is damaged: plan again
    # The build.
    VERIFY = "verify", Fault.ENVIRONMENT  # the downloaded files against their hashes
    SANDBOX = "sandbox", Fault.ENVIRONMENT
    EXPORT = "export", Fault.SOURCE
    EXPORT_TARGET = "export-target", Fault.SOURCE
    EXPORT_DRAFT = "export-draft", Fault.SOURCE
    INSPECT = "inspect", Fault.SOURCE
    INSPECT_TARGET = "inspect-target", Fault.SOURCE
    INSPECT_DRAFT = "inspect-draft", Fault.SOURCE
    VALIDATE = "validate", Fault.SOURCE
    QUALITY = "quality", Fault.SOURCE
    BUILD = "build", Fault.SOURCE
    BUNDLE = "bundle", Fault.ENVIRONMENT
    # Publishing and the command itself.
    PUBLISH = "publish", Fault.OUTPUT
    RUN = "run", Fault.ENVIRONMENT
    USAGE = "usage", Fault.ENVIRONMENT
    RECIPE = "recipe", Fault.ENVIRONMENT
    JOB = "job", Fault.ENVIRONMENT


class BotError(Exception):
    """Root of every expected error. Carries the checkpoint and the stage it happened in.

    Never raised itself: the subclass says what kind of error it is, and with that the exit code.
    """

    exit_code: ClassVar[int]

    def __init__(self, message: str, *, subject: str | None = None, stage: Stage | None = None):
        if type(self) is BotError:
            raise TypeError("raise a Skip, Failure or another subclass: the class decides the exit code")
        super().__init__(message)
        self.message = message
        self.subject = subject
        self.stage = stage

    def at(self, *, subject: str | None = None, stage: Stage | None = None) -> BotError:
        """Fill in where the error happened, keeping what an inner layer already knew."""
        self.subject = self.subject or subject
        self.stage = self.stage or stage
        return self

    def reason(self) -> str:
        """The message with the step it happened in (`export-draft: ...`), for a report's reason column."""
        return f"{self.stage}: {self.message}" if self.stage else self.message

    def one_line(self) -> str:
        where = " ".join(part for part in (self.subject, f"[{self.stage}]" if self.stage else None) if part)
        return f"{where}: {self.message}" if where else self.message


class Skip(BotError):
    """The input is not something this bot can or should build (unsupported, broken, gated). Not a failure."""

    exit_code = 3


class Failure(BotError):
    """Something that should have worked did not: export crashed, IR check failed, a validation gate failed."""

    exit_code = 1


class RunnerFault(StrEnum):
    """What of the runner failed, when a failure is the runner's and not the source's
    (`InfrastructureFailure.runner`)."""

    DISK_FULL = "disk full"
    OUT_OF_MEMORY = "out of memory"  # the kernel's OOM killer, or an allocation the machine refused
    KILLED = "killed from outside"  # a signal neither the bot nor the kernel's OOM killer sent
    MISSING_TOOL = "missing tool"  # an executable or module of the environment is not there
    TIMEOUT = "infrastructure timeout"  # the network or the machine, not the recipe's time limits


class InfrastructureFailure(Failure):
    """Our side failed, not the source: the runner (disk, SIGTERM), the sandbox, the builder process, the Hub.

    The status memory never remembers one as the source's fault (`bot.core.outcome.Outcome.of_error` records it
    without a stage), so the next run examines the source again whatever stage it stopped at. `runner` names what of
    the runner failed when that is known (a full disk, an OOM kill, a child killed from outside, a missing tool, an
    infrastructure timeout: `as_runners`), and the reason says so.
    """

    exit_code = 6

    def __init__(
        self,
        message: str,
        *,
        subject: str | None = None,
        stage: Stage | None = None,
        runner: RunnerFault | None = None,
    ):
        super().__init__(message, subject=subject, stage=stage)
        self.runner = runner

    def reason(self) -> str:
        if self.runner is None:
            return super().reason()
        return f"{super().reason()} [the runner's fault ({self.runner}), not the source's: tried again next run]"


# The phrases that show a failure was the runner's: the bot's own words for a child's end
# (`bot.sandbox.isolation.exit_cause`) and the operating system's for a machine that ran out of something.
_RUNNER_PHRASES: tuple[tuple[re.Pattern[str], RunnerFault], ...] = (
    (re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]"), RunnerFault.DISK_FULL),
    (
        re.compile(r"from the kernel's OOM killer|Cannot allocate memory|\[Errno 12\]|\bMemoryError\b"),
        RunnerFault.OUT_OF_MEMORY,
    ),
    (re.compile(r"killed by SIG[A-Z0-9]+ from outside the bot"), RunnerFault.KILLED),
    (
        re.compile(r"ModuleNotFoundError: No module named|: command not found|unshare: failed to execute"),
        RunnerFault.MISSING_TOOL,
    ),
    (re.compile(r"Connection timed out|\[Errno 110\]"), RunnerFault.TIMEOUT),
)
_RUNNER_ERRNOS = {
    errno.ENOSPC: RunnerFault.DISK_FULL,
    errno.EDQUOT: RunnerFault.DISK_FULL,
    errno.ENOMEM: RunnerFault.OUT_OF_MEMORY,
    errno.ETIMEDOUT: RunnerFault.TIMEOUT,
}


def runner_fault_in(text: str) -> RunnerFault | None:
    """The runner's fault a failure's message (or a remembered reason) shows, None when it shows none."""
    return next((fault for pattern, fault in _RUNNER_PHRASES if pattern.search(text)), None)


def runner_fault_of(exc: BaseException) -> RunnerFault | None:
    """The runner's fault an exception is: an `OSError` the machine raised (no space, no memory, a timeout), a
    `MemoryError`, an `InfrastructureFailure` that names one, or a `Failure` whose message shows one
    (`runner_fault_in`)."""
    if isinstance(exc, InfrastructureFailure) and exc.runner is not None:
        return exc.runner
    if isinstance(exc, MemoryError):
        return RunnerFault.OUT_OF_MEMORY
    if isinstance(exc, OSError) and exc.errno in _RUNNER_ERRNOS:
        return _RUNNER_ERRNOS[exc.errno]
    if isinstance(exc, Failure) and not isinstance(exc, HubError):
        return runner_fault_in(exc.message)
    return None


def as_runners(error: BotError) -> BotError:
    """`error` as an `InfrastructureFailure` naming the runner's fault when it shows one (same message, subject and
    stage), else as it is.

    Applied where a build's error becomes an outcome (`bot.run.pipeline`), so a target export that died of a full
    disk or a kill from outside is reported as the runner's and the status memory does not keep it.
    """
    if not isinstance(error, Failure) or isinstance(error, HubError):
        return error
    if isinstance(error, InfrastructureFailure) and error.runner is not None:
        return error
    fault = runner_fault_of(error)
    if fault is None:
        return error
    converted = InfrastructureFailure(error.message, runner=fault, subject=error.subject, stage=error.stage)
    converted.__cause__ = error.__cause__
    return converted


class HubError(InfrastructureFailure):
    """The Hub refused or kept failing a request; `status` is its HTTP status (None: no answer at all)."""

    exit_code = 7

    def __init__(self, message: str, *, status: int | None, subject: str | None = None, stage: Stage | None = None):
        super().__init__(message, subject=subject, stage=stage)
        self.status = status


class PreconditionFailed(HubError):
    """A commit lost the `parent_commit` race (HTTP 412): another writer committed first."""

    exit_code = 8


class UsageError(BotError):
    """Options or environment that cannot work together; refused before any Hub call or download."""

    exit_code = 2  # what click exits with for its own usage errors (an unknown option, a missing argument)


class RecipeError(BotError):
    """The recipe YAML is invalid; raised before any Hub call or download."""

    exit_code = 4


class JobError(BotError):
    """A `--job` or plan record that is not what `plan --matrix` writes; fix the caller, not the checkpoint."""

    exit_code = 5


UNEXPECTED_EXIT_CODE = 70  # an exception that is no BotError: a bug (BSD sysexits' EX_SOFTWARE)

# Every exit code a command may end with, for the README's table (a test keeps the two equal).
EXIT_CODES: dict[int, str] = {
    0: "success; skipped sources are no failure",
    Failure.exit_code: "`Failure`: something that should have worked did not; also a command whose report lists "
    "a failure (a failed source, IR check or toolchain candidate)",
    UsageError.exit_code: "`UsageError`: options or environment that cannot work together (and click's own usage "
    "errors)",
    Skip.exit_code: "`Skip`: the one checkpoint a command was given is not one this bot builds",
    RecipeError.exit_code: "`RecipeError`: the recipe YAML is invalid",
    JobError.exit_code: "`JobError`: a `--job` or plan record that `plan --matrix` did not write",
    InfrastructureFailure.exit_code: "`InfrastructureFailure`: our side failed (runner, disk, sandbox, builder)",
    HubError.exit_code: "`HubError`: the Hub refused or kept failing a request",
    PreconditionFailed.exit_code: "`PreconditionFailed`: a commit lost the race to another writer (HTTP 412)",
    UNEXPECTED_EXIT_CODE: "an unexpected exception, a bug: its traceback is on stderr",
}
