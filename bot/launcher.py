"""A preloaded launcher for the sandboxed children of one build group.

Every export and quality child would import torch, transformers, optimum-intel, NNCF and OpenVINO afresh:
about 5 s of CPU each, more than a small model's whole export, and on two cores the group's children pay it
side by side. The launcher imports them once, in a process that holds no token, reads no checkpoint and runs in
the same namespaces as the children, and forks one child per request. Each child then takes exactly the path
`python -m bot.sandbox` takes (credential check, Landlock to its own folders, the tool), with its own log file
and process group, so the parent times, measures, budgets and kills it like any other child.

A launcher serves exactly the interpreter, namespaces and environment it was started with (modules read their
environment when they are imported); `bot.isolation.run_logged` starts any other command as a fresh process.

    with preloaded(python, env=child_env, log_path=logs / "launcher.log"):
        run_logged(sandboxed("optimum-cli", python, ...) + args, env=child_env, ...)   # forked by the launcher
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

# What the export and quality children import (bot.sandbox._run): optimum-cli's OpenVINO export with NNCF and the
# tokenizer converter, the quality step's torch and transformers. Importing only: creating an OpenVINO Core or
# running a torch op would start thread pools that a fork does not carry over. GenAI's validations start afresh:
# at real sizes they set a build's memory peak, which stays what docs/scale.md measured, with no launcher beside it.
PRELOAD = (
    "torch",
    "transformers",
    "openvino",
    "openvino_tokenizers",
    "nncf",
    "optimum.commands.optimum_cli",
    "optimum.commands.export.openvino",
    "optimum.exporters.openvino.__main__",
    "bot.quality",
)
TOOLS = ("optimum-cli", "quality")  # the sandbox tools a launcher forks
_PR_SET_PDEATHSIG = 1
_READY_TIMEOUT_S = 300.0


class LauncherError(RuntimeError):
    """The launcher could not be started or stopped answering (its log says why)."""


class LaunchedChild:
    """A child forked by the launcher, with the part of `subprocess.Popen` that `run_logged` uses.

    `pid` is the child's PID as this process sees it (its process group too: the child starts its own session).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"launched child {self.pid}", timeout or 0)
        assert self.returncode is not None  # set before the event
        return self.returncode

    def _exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()


class Launcher:
    """The parent's side: starts the launcher process, asks it for children, hears when they exit."""

    def __init__(
        self, prefix: Sequence[str], *, env: Mapping[str, str], log_path: Path, tools: Sequence[str] = TOOLS
    ) -> None:
        """`prefix` is `bot.isolation.sandbox_prefix`: the namespace wrapper (if any), `python -m bot.sandbox`."""
        self.prefix = list(prefix)  # what the commands it serves start with
        self.wrapper = self.prefix[:-3]  # `unshare ...` in front of `python -m bot.sandbox`, or nothing
        self.tools = tuple(tools)
        self.env = dict(env)
        self.log_path = log_path
        self._process: subprocess.Popen | None = None
        self._launcher_pid = 0  # the preloading process itself (under `unshare`, the child of the Popen)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._spawned: dict[int, tuple[threading.Event, dict]] = {}
        self._children: dict[int, LaunchedChild] = {}  # by the PID the launcher sees
        self._next_id = 0
        self._dead = False

    # ---- parent side ----

    def start(self, preload: Sequence[str] = PRELOAD) -> None:
        """Start the launcher; it preloads in the background (a request waits until it is done)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [*self.prefix[:-1], "bot.launcher", *preload],  # the same interpreter under the same wrapper
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        threading.Thread(target=self._read_replies, name="launcher-replies", daemon=True).start()

    @property
    def pid(self) -> int:
        """The process the bot started (`unshare` around the launcher, or the launcher itself); 0 once closed."""
        return self._process.pid if self._process is not None else 0

    def wait_ready(self, timeout: float = _READY_TIMEOUT_S) -> bool:
        """Wait until the launcher has preloaded (False: it did not in `timeout`, or died)."""
        return self._ready.wait(timeout) and not self._dead

    def serves(self, cmd: Sequence[str], env: Mapping[str, str]) -> list[str] | None:
        """The `bot.sandbox` arguments of `cmd` when this launcher can run it, else None."""
        if self._dead or self._process is None or list(cmd[: len(self.prefix)]) != self.prefix:
            return None
        argv = list(cmd[len(self.prefix) :])
        return argv if _tool(argv) in self.tools and dict(env) == self.env else None

    def spawn(self, argv: Sequence[str], *, log_path: Path, cwd: Path | None = None) -> LaunchedChild:
        """Fork a child that runs `python -m bot.sandbox ARGV` with its output in `log_path`.

        Raises:
            LauncherError: the launcher is gone or did not answer.
        """
        if not self.wait_ready():
            raise LauncherError(f"the launcher is not running (log: {self.log_path.name})")
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            answered = threading.Event()
            self._spawned[request_id] = (answered, {})
        self._send({"id": request_id, "argv": list(argv), "log": str(log_path), "cwd": str(cwd) if cwd else None})
        if not answered.wait(60) or self._dead:
            raise LauncherError(f"the launcher did not start the child (log: {self.log_path.name})")
        reply = self._spawned.pop(request_id)[1]
        if "error" in reply:
            raise LauncherError(f"the launcher could not start the child: {reply['error']}")
        inner = int(reply["pid"])
        try:
            outer = self._outer_pid(inner)
        except LauncherError:
            self._send({"kill": inner})  # not measurable or stoppable from here: it must not run on its own
            raise
        child = LaunchedChild(outer)
        with self._lock:
            self._children[inner] = child
        self._send({"release": inner})  # from now on the launcher reaps it and reports its exit
        return child

    def close(self) -> None:
        """Stop the launcher (it kills children still running, then exits); later commands start afresh."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def _send(self, message: dict) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise LauncherError("the launcher is closed")
        try:
            with self._lock:
                process.stdin.write(json.dumps(message).encode() + b"\n")
                process.stdin.flush()
        except OSError as exc:
            raise LauncherError(f"the launcher is gone ({exc}; log: {self.log_path.name})") from None

    def _read_replies(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        for line in process.stdout:
            message = json.loads(line)
            if "ready" in message:
                self._launcher_pid = self._find_launcher(process.pid)
                self._ready.set()
            elif "id" in message:
                answered, reply = self._spawned[message["id"]]
                reply.update(message)
                answered.set()
            elif "exited" in message:
                with self._lock:
                    child = self._children.pop(int(message["exited"]), None)
                if child is not None:
                    child._exit(int(message["code"]))
        # EOF: the launcher died (or was closed); nothing it started can still be waited for.
        self._dead = True
        self._ready.set()
        for answered, _ in list(self._spawned.values()):
            answered.set()
        with self._lock:
            orphans, self._children = list(self._children.values()), {}
        for child in orphans:
            child._exit(-signal.SIGKILL)

    def _find_launcher(self, popen_pid: int) -> int:
        """The preloading process: the Popen itself, or under `unshare --fork` its only child."""
        if not self.wrapper:
            return popen_pid
        for _ in range(100):
            children = _children_of(popen_pid)
            if children:
                return children[0]
            time.sleep(0.05)
        return popen_pid

    def _outer_pid(self, inner: int) -> int:
        """This process's PID for the launcher's child `inner` (the same number without a PID namespace)."""
        if not self.wrapper:
            return inner
        for pid in _children_of(self._launcher_pid):
            if _namespace_pids(pid)[-1:] == [inner]:
                return pid
        raise LauncherError(f"the launcher's child {inner} is not visible from the builder")


@contextlib.contextmanager
def preloaded(
    python: str | None,
    *,
    env: Mapping[str, str],
    log_path: Path,
    preload: Sequence[str] = PRELOAD,
    tools: Sequence[str] = TOOLS,
) -> Iterator[Launcher | None]:
    """Serve the sandboxed children of `tools` started in this block (same interpreter and environment) from one
    launcher; `Launcher.close` ends that early.

    Yields None, and the children start as fresh processes, where `DFLASH_BOT_LAUNCHER=0` says so.
    """
    from bot.isolation import sandbox_prefix

    if not enabled():
        yield None
        return
    launcher = Launcher(sandbox_prefix(python), env=env, log_path=log_path, tools=tools)
    launcher.start(preload)
    with _active_lock:
        _active.append(launcher)
    try:
        yield launcher
    finally:
        with _active_lock:
            _active.remove(launcher)
        launcher.close()


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """False where `DFLASH_BOT_LAUNCHER=0` starts every child afresh."""
    return (os.environ if env is None else env).get("DFLASH_BOT_LAUNCHER", "1").strip() != "0"


_active: list[Launcher] = []
_active_lock = threading.Lock()


def route(cmd: Sequence[str], env: Mapping[str, str]) -> tuple[Launcher, list[str]] | None:
    """The active launcher that can run `cmd` in `env`, with the sandbox arguments to send it."""
    with _active_lock:
        launchers = list(_active)
    for launcher in launchers:
        argv = launcher.serves(cmd, env)
        if argv is not None:
            return launcher, argv
    return None


def _children_of(pid: int) -> list[int]:
    from bot.resources import parent_pid

    return sorted(
        int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit() and parent_pid(int(entry.name)) == pid
    )


def _namespace_pids(pid: int) -> list[int]:
    """The process's PID in each PID namespace from this one inwards (`NSpid` of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return [int(field) for field in line.split()[1:]]
    except OSError:
        pass
    return []


# ---- the launcher process ----


def serve(preload: Sequence[str]) -> int:
    """Preload, then fork one sandboxed child per request line on stdin until stdin closes.

    Requests: `{"id", "argv", "log", "cwd"}` starts a child (answered with its PID), `{"release": PID}` lets the
    launcher reap it (the parent first looks the child up in /proc, which needs it not reaped) and report
    `{"exited": PID, "code": ...}` when it ends, `{"kill": PID}` kills and releases it.
    """
    replies = os.dup(1)
    os.dup2(2, 1)  # whatever an import prints goes to the launcher's log, never into the replies
    started = time.monotonic()
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a toolchain without it: its children import what they need themselves
            print(f"launcher: could not preload {name}: {type(exc).__name__}: {exc}", flush=True)
    threads = len(os.listdir("/proc/self/task"))
    with open("/proc/self/statm", "rb") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    print(
        f"launcher: preloaded {len(preload)} modules in {time.monotonic() - started:.1f}s "
        f"({threads} threads, {rss} bytes resident)"
    )
    sys.stdout.flush()
    _reply(replies, {"ready": True})

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    released: set[int] = set()
    running: set[int] = set()
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    pending = b""
    try:
        while True:
            for key, _ in selector.select():
                if key.fd == wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_read, 512)
                    continue
                data = os.read(0, 65536)
                if not data:
                    print(f"launcher: closed ({len(running)} child(ren) still running, killed)", flush=True)
                    _stop(running)
                    os._exit(0)  # nothing to flush: skip tearing down the preloaded libraries (a second or more)
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    message = json.loads(line)
                    if "release" in message:
                        released.add(int(message["release"]))
                    elif "kill" in message:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(int(message["kill"]), signal.SIGKILL)
                        released.add(int(message["kill"]))
                    else:
                        reply = _fork(message, keep_closed=(replies, wake_read, wake_write))
                        if "pid" in reply:
                            running.add(reply["pid"])
                        _reply(replies, reply)
            _reap(running & released, running, replies)
    finally:
        _stop(running)


def _stop(running: set[int]) -> None:
    """Kill what is still running (the parent closed the launcher, or gave up on it)."""
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _reap(candidates: set[int], running: set[int], replies: int) -> None:
    for pid in candidates:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its code is unknown, so it does not count as a success
            done, status = pid, 255 << 8
        if done:
            running.discard(pid)
            _reply(replies, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _reply(fd: int, message: dict) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")


def _fork(request: dict, *, keep_closed: Sequence[int]) -> dict:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"id": request["id"], "error": str(exc)}
    if pid:
        print(f"launcher: child {pid}: {_tool(request['argv'])}", flush=True)
        return {"id": request["id"], "pid": pid}
    _run_child(request, keep_closed)  # never returns
    return {}


def _tool(argv: Sequence[str]) -> str | None:
    """The tool a `bot.sandbox` argv runs, read by the sandbox's own parser (None: not a sandbox argv)."""
    from bot.sandbox import parse_args

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage message is not wanted here
            return str(parse_args(list(argv)).tool)
    except SystemExit:
        return None


def _run_child(request: dict, keep_closed: Sequence[int]) -> None:
    """In the forked child: become the sandboxed process the request describes, then exit with its code."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in keep_closed:
            os.close(fd)
        os.setsid()
        with contextlib.suppress(OSError, AttributeError):  # the child dies with the launcher
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        tempfile.tempdir = None  # the child's own TMPDIR, not a value cached while preloading
        if request.get("cwd"):
            os.chdir(request["cwd"])
        from bot import sandbox

        code = sandbox.main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
