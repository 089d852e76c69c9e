"""SIGTERM (a cancelled Actions job, a killed cron) unwinds like Ctrl-C in the process that installed the handler,
and only in it: the children are killed and the `finally` blocks on the way out remove scratch folders and write
the report."""

from __future__ import annotations

import os
import signal
import sys

_handler_pid = 0  # the process that installed `terminate` (0: none did)


def terminate(signum: int, frame: object) -> None:
    """SIGTERM in the process that installed it: kill the children, then unwind (the report is written on the way).

    In a fork that still has it (one made below Python, which skips `_default_sigterm_in_fork`) it does what SIGTERM
    does by default: the fork owns none of the children, and a lock their bookkeeping holds may be copied locked.
    """
    if os.getpid() != _handler_pid:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    from bot.sandbox.isolation import stop_all_children

    stop_all_children()
    sys.exit(128 + signum)


def _default_sigterm_in_fork() -> None:
    """A forked child gets the default SIGTERM back. OpenVINO's telemetry posts from a multiprocessing fork and
    SIGTERMs it after a timeout; with our handler that fork hung, and so did its parent waiting for it at exit."""
    if signal.getsignal(signal.SIGTERM) is terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def install_signal_handlers() -> None:
    """SIGTERM (a cancelled Actions job, a killed cron) unwinds like Ctrl-C in this process, and only in it:
    scratch folders are removed and child exporters are killed by the `finally` blocks on the way out."""
    global _handler_pid
    if not _handler_pid:
        os.register_at_fork(after_in_child=_default_sigterm_in_fork)
    _handler_pid = os.getpid()
    signal.signal(signal.SIGTERM, terminate)
