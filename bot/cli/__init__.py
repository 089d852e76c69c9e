"""CLI: `dflash-bot`, a thin typed command line over the stages.

Owns the command tree (`app`) and one module per command group: `build` (build, make-tiny), `pipeline_commands`
(plan, run, publish, check), `status_command`, `toolchain_command`, `examine` (inspect, try), `local_hub` (hub
serve) and `demo_command`; what they share (`context`: the settings, `--endpoint`, the option types, the build
extra); how a command line ends (`ending`: one line, the exit code and the `--report` on every exit path); and
SIGTERM (`sigterm`). A command reads its options and hands on to its stage; the work behind plan, run, publish and
build --job is `bot.run.commands`.

Expected failures (a Skip or Failure, a usage error) end with one line naming the checkpoint, the stage and the
cause, and the error's exit code; only a bug prints a traceback. Commands raise; `main` prints, exits, and writes
the `--report` on every exit path, usage errors included.

The commands import the stages (and the local Hub server) inside their functions: `main` switches telemetry off
before anything imports huggingface_hub, whose import otherwise fetches a registry from huggingface.co
(tests/test_layout.py checks that nothing this package imports at module level brings it in).

May import: core, hub, sandbox, discover, plan, builder, publish, status, run.
"""

from __future__ import annotations

import sys

from bot.cli.app import app
from bot.cli.ending import run_command_line
from bot.cli.sigterm import install_signal_handlers

__all__ = ["app", "main", "run_command_line"]


def main() -> int:
    """The `dflash-bot` console script (and `python -m bot.cli`): telemetry off, SIGTERM handled, then the command."""
    from bot.sandbox.telemetry import switch_off

    switch_off()  # before anything imports huggingface_hub, NNCF or OpenVINO, in every command and the builder
    install_signal_handlers()
    return run_command_line(sys.argv[1:])
