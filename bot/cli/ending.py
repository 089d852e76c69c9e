"""How a command line ends: every exit path comes back to `run_command_line`, which writes the `--report` on each of
them (a fallback one naming the cause when the command ended before writing its own), then prints one line."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
import typer

from bot.cli.app import app
from bot.core import log
from bot.core.errors import UNEXPECTED_EXIT_CODE, BotError, Stage, UsageError

if TYPE_CHECKING:
    from bot.run.report import RunReport


@dataclass(frozen=True)
class Ending:
    """How a command ended: its exit code, why (for a report it did not write) and the line that says so."""

    code: int
    reason: str | None = None
    stage: Stage | None = None
    show: Callable[[], None] | None = None


def run_command_line(args: Sequence[str]) -> int:
    """Run one command line; every exit path ends here, so `--report PATH` is written on each of them.

    A command that writes its own report (run, publish) keeps it; when it ended before doing so (a usage error, a
    recipe error, a refused option, a signal) a report with one failed outcome naming the cause is written, before
    anything is printed. A report path that cannot be written is refused before the command runs.

    Args:
        args: the arguments after the program name.

    Returns:
        The exit code (a usage error: 2; an expected error: its `exit_code`; an unexpected exception: 70; a
        signal: 128 + its number). The README's "Exit codes" table lists them (`bot.core.errors.EXIT_CODES`).
    """
    args = list(args)
    report = _report_path(args)
    if report is not None and (problem := _unwritable(report)):
        typer.echo(f"error: --report {report}: {problem}", err=True)
        return 2
    before = _stamp(report)
    ending = _invoke(args)
    code = ending.code
    if report is not None and _stamp(report) == before:
        try:
            _fallback_report(args, ending).write(report)
        except OSError as exc:
            typer.echo(f"error: cannot write --report {report}: {exc.strerror or exc}", err=True)
            code = code or 1
    if ending.show is not None:
        ending.show()
    return code


def _invoke(args: list[str]) -> Ending:
    """Run the app without click's own exit handling, so that every ending comes back here."""
    try:
        result = app(args=args, prog_name="dflash-bot", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError:  # the help was printed already
        return Ending(2, "no command given", Stage.USAGE)
    except click.ClickException as error:  # an unknown option, a missing argument, a --recipe that does not exist
        return Ending(error.exit_code, error.format_message(), Stage.USAGE, error.show)
    except click.Abort:
        return Ending(1, "aborted", None, lambda: typer.echo("Aborted!", err=True))
    except BotError as error:
        line = f"error: {error.one_line()}"
        reason = f"{error.subject}: {error.reason()}" if error.subject else error.reason()
        stage = error.stage or (Stage.USAGE if isinstance(error, UsageError) else None)
        return Ending(error.exit_code, reason, stage, lambda: typer.echo(log.error_line(line), err=True))
    except SystemExit as exit_:  # SIGTERM (`bot.cli.sigterm.terminate`) or a library's sys.exit
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        return Ending(code, f"stopped (exit {code})" if code else None)
    except Exception as error:  # a bug: the whole traceback at error level, and an exit code no expected error has
        cause = f"unexpected {type(error).__name__}: {' '.join(str(error).split())[:300]}"
        show = functools.partial(log.get().error, "error: %s", cause, exc_info=error)
        return Ending(UNEXPECTED_EXIT_CODE, cause, None, show)
    code = result if isinstance(result, int) else 0
    return Ending(code, f"ended with exit code {code}" if code else None)


def _report_path(args: list[str]) -> Path | None:
    """The `--report PATH` (or `--report=PATH`) in `args`, the last one when repeated, as click reads it."""
    found: Path | None = None
    for index, token in enumerate(args):
        if token == "--":
            break
        if token == "--report" and index + 1 < len(args):
            found = Path(args[index + 1])
        elif token.startswith("--report="):
            found = Path(token.partition("=")[2])
    return found


def _unwritable(path: Path) -> str | None:
    """Why a report could not be written at `path` (None: it can)."""
    if path.is_dir():
        return "is a folder, not a file"
    folder = path.parent
    if not folder.is_dir():
        return f"its folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"its folder {folder} is not writable"
    return None


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    """Identity of the file at `path` (a report is written by a rename, so a new one always differs)."""
    try:
        found = path.stat() if path is not None else None
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size) if found else None


def _fallback_report(args: list[str], ending: Ending) -> RunReport:
    """The report of a command that ended before writing its own: one failed outcome naming why (none on exit 0)."""
    from bot.core.outcome import Outcome, Status
    from bot.run.report import RunReport

    command: click.Command = typer.main.get_command(app)
    names = []
    for token in (a for a in args if not a.startswith("-")):
        if not isinstance(command, click.Group) or token not in command.commands:
            break
        command = command.commands[token]
        names.append(token)
    report = RunReport(dry_run="--dry-run" in args)
    if ending.code:
        source = f"({' '.join(names) or 'dflash-bot'})"
        reason = ending.reason or f"exit code {ending.code}"
        report.add(Outcome(source, None, Status.FAILED, reason, stage=ending.stage))
    return report
