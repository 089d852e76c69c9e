"""Entry point of every child process that loads checkpoint files.

`python -m bot.sandbox.child [--read DIR]... [--write DIR]... TOOL ARGS...`

TOOL is `optimum-cli`, `exec` (any command, confined the same way) or the name of one of the bot's build tool modules
(`bot.builder.validate`, `bot.builder.quality`, ...), whose `main(argv)` runs (each answers one typed request through
`bot.sandbox.wire.serve`). The module is imported by name after the confinement is in force, so this package imports
nothing from `bot.builder` and no loader runs unconfined; only names of the form `bot.builder.<module>` are accepted,
so a command line cannot make it import anything else.

It checks, from inside the process that will read the untrusted files, that no Hub credential is reachable (no
secret-looking environment variable, no token file in its HF_HOME) and refuses to run otherwise. Then, before
anything imports a loader, it confines itself with Landlock (`bot.sandbox.landlock`) to the folders it was given, the
Python environment and the system libraries: a path a checkpoint names outside them cannot be opened, nothing outside
the `--write` folders can be written, no TCP connection can be made, and no process outside the sandbox can be read
through `/proc`. Where the kernel has no Landlock it says so in its log and runs with the other layers (the
namespaces `bot.sandbox.isolation` starts it in, if any; the scrubbed environment; `bot.discover.sanitize`'s path
checks).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from huggingface_hub import get_token

from bot.core import package_data
from bot.core.settings import SANDBOX_VARIABLE
from bot.sandbox import signals
from bot.sandbox.confinement import SECRET_NAME
from bot.sandbox.landlock import SIGNAL_SCOPE_ABI, LandlockError, abi_version, restrict

REFUSED = 70  # EX_SOFTWARE: the parent built a wrong environment
COMMANDS = ("optimum-cli", "exec")
# The build side's tool modules (each defines `main(argv) -> int`); nothing outside `bot.builder` can be named.
TOOL_MODULE = re.compile(r"bot\.builder\.[a-z][a-z0-9_]*")
# System files a Python process and OpenVINO need; the rest of /etc (keys, shadow, machine ids) stays closed.
_SYSTEM_READS = (
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/sys",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/mime.types",
)
# Outside a PID namespace /proc shows every process of the machine, and Landlock does not stop reading another
# process's `environ` (only `mem` and the like): there, only this process's own entries and the machine-wide
# files libraries read are granted.
_PROC_READS = (
    "/proc/self",
    "/proc/thread-self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/sys",
    "/proc/filesystems",
    "/proc/mounts",
    "/proc/version",
)
_DEVICE_WRITES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/shm")


def visible_credentials(env: dict[str, str] | None = None) -> list[str]:
    """Names of credentials this process could use: secret-looking variables and a stored Hub token."""
    env = dict(os.environ) if env is None else env
    found = sorted(name for name in env if SECRET_NAME.search(name))
    if get_token() is not None:
        found.append("huggingface_hub.get_token()")
    return found


def python_environment() -> list[Path]:
    """The folders this interpreter imports from: its prefixes, `sys.path`, the bot's own package and its data
    packages (`bot.toolchains`, ...: an editable install maps them in from the checkout, outside `bot/`, and
    `bot.core.profiles` imports one)."""
    roots = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(sys.executable).resolve().parent,
        Path(__file__).resolve().parents[1],
        *(package_data.folder(name) for name in package_data.DATA_PACKAGES),
    }
    roots |= {Path(entry) for entry in sys.path if entry and os.path.isabs(entry)}
    return sorted({root for path in roots for root in (path, path.resolve())})


def _confine(reads: list[Path], writes: list[Path], *, landlock: bool, max_abi: int | None) -> tuple[str, int]:
    """Apply Landlock for this process and its children, unless the parent's settings switched it off
    (`--no-landlock`). `max_abi` caps the ABI used (`--landlock-abi`: the tests of an older kernel's mode).

    Returns:
        The line that says what is in force (for the log), and the Landlock ABI in force (0: none).
    """
    if not landlock:
        line = f"sandbox: Landlock switched off by {SANDBOX_VARIABLE}: files are not confined by the OS in this process"
        return line, 0
    if abi_version() < 1:
        return "sandbox: Landlock unavailable in this kernel: files are not confined by the OS in this process", 0
    try:
        # PID 1: started by `unshare --pid --fork` with its own /proc, which shows this sandbox's processes only.
        proc = ("/proc",) if os.getpid() == 1 else _PROC_READS
        abi = restrict(
            [*map(Path, _SYSTEM_READS + proc), *python_environment(), *reads],
            [*map(Path, _DEVICE_WRITES), *writes],
            max_abi=max_abi,
        )
    except LandlockError as exc:
        return f"sandbox: Landlock refused ({exc}): files are not confined by the OS in this process", 0
    return f"sandbox: Landlock ABI {abi}: reads confined to {len(reads)} input and {len(writes)} work folder(s)", abi


def guard_signals(landlock_abi: int, *, landlock_asked: bool = False) -> tuple[str, bool]:
    """Keep this process and all it starts from signalling or tracing other processes: without a PID namespace of its
    own (it is not PID 1) the seccomp filter (`bot.sandbox.signals`), whatever Landlock's ABI (its signal scope leaves
    `prlimit64`, `perf_event_open` and `setpgid` open). The parent refuses a mode in which a child could still do so
    before it starts one (`Confinement.refusal`); this holds the same rule where the child found less than the parent
    counted on: no seccomp, or Landlock asked for (`landlock_asked`) but not in force while this process can open
    its parent's `/proc/<pid>/mem`.

    Returns:
        The line for the log, and False when the child must refuse to run (the line says why).
    """
    if os.getpid() == 1:
        return "sandbox: signals confined by its own PID namespace", True
    try:
        signals.guard()
    except OSError as exc:
        return f"sandbox: refusing to load checkpoints: no PID namespace and no seccomp signal guard ({exc})", False
    if landlock_asked and not landlock_abi and _opens_parent_memory():
        return (
            "sandbox: refusing to load checkpoints: Landlock is not in force and there is no PID namespace, and this "
            "process can open its parent's /proc/<pid>/mem (root, or Yama's ptrace_scope is 0)",
            False,
        )
    scope = f" (and Landlock ABI {landlock_abi}'s signal scope)" if landlock_abi >= SIGNAL_SCOPE_ABI else ""
    return f"sandbox: signals confined by seccomp{scope}: no signal or trace to a process but its own", True


def _opens_parent_memory() -> bool:
    try:
        os.close(os.open(f"/proc/{os.getppid()}/mem", os.O_RDONLY))
    except OSError:
        return False
    return True


def prepare_home(env: Mapping[str, str]) -> None:
    """Create the HOME, TMPDIR and HF_HOME this process was given (`untrusted_env(home=...)`) and record OpenVINO's
    telemetry as declined in that HOME."""
    for variable in ("HOME", "TMPDIR", "HF_HOME"):
        if env.get(variable):
            Path(env[variable]).mkdir(parents=True, exist_ok=True)
    decline_telemetry(env.get("HOME"))


def decline_telemetry(home: str | None) -> None:
    """OpenVINO's telemetry keeps its consent state in $HOME/intel: record "declined" in the sandbox's own HOME."""
    if not home:
        return
    consent = Path(home) / "intel" / "openvino_telemetry"
    if not consent.exists():
        consent.parent.mkdir(parents=True, exist_ok=True)
        consent.write_text("0", encoding="utf-8")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """`[--no-landlock] [--landlock-abi N] --read DIR`... `--write DIR`... `TOOL ARGS...` (what
    `bot.sandbox.isolation.sandboxed` builds from the parent's `Settings.sandbox_layers`)."""
    parser = argparse.ArgumentParser(prog="python -m bot.sandbox.child", allow_abbrev=False)
    parser.add_argument("--no-landlock", action="store_true", help=f"no Landlock ({SANDBOX_VARIABLE} leaves it out)")
    parser.add_argument("--landlock-abi", type=int, default=None, help="use at most this Landlock ABI (tests)")
    parser.add_argument("--read", action="append", default=[], type=Path, help="input folder (read-only)")
    parser.add_argument("--write", action="append", default=[], type=Path, help="work folder (read-write)")
    parser.add_argument("tool", type=_tool, help=f"{' or '.join(COMMANDS)}, or a tool module (bot.builder.<module>)")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def _tool(name: str) -> str:
    if name in COMMANDS or TOOL_MODULE.fullmatch(name):
        return name
    raise argparse.ArgumentTypeError(f"{name!r} is neither {' nor '.join(COMMANDS)} nor a bot.builder tool module")


def main(argv: list[str] | None = None) -> int:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    leaked = visible_credentials()
    if leaked:
        print(f"sandbox: refusing to load checkpoints with credentials in reach: {', '.join(leaked)}", file=sys.stderr)
        return REFUSED
    print("sandbox: no Hub token in this process", flush=True)
    landlock_abi, landlock_asked = 0, bool(options.read or options.write) and not options.no_landlock
    if options.read or options.write:
        for folder in options.write:
            folder.mkdir(parents=True, exist_ok=True)
        prepare_home(os.environ)
        line, landlock_abi = _confine(
            options.read, options.write, landlock=not options.no_landlock, max_abi=options.landlock_abi
        )
        print(line, flush=True)
    else:
        print("sandbox: no folders given: files are not confined by the OS in this process", flush=True)
    line, guarded = guard_signals(landlock_abi, landlock_asked=landlock_asked)
    print(line, file=sys.stdout if guarded else sys.stderr, flush=True)
    return _run(options.tool, options.args) if guarded else REFUSED


def _run(tool: str, args: list[str]) -> int:
    if tool == "optimum-cli":
        # heavy (torch, transformers), and a loader: imported only here, behind the confinement
        from optimum.commands.optimum_cli import main as optimum_main

        sys.argv = ["optimum-cli", *args]
        return optimum_main() or 0
    if tool != "exec":
        return _run_module(tool, args)
    # exec: any command, confined the same way (Landlock and namespaces are inherited across exec).
    if not args:
        print("sandbox: exec needs a command", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execvp(args[0], args)
    return 2  # not reached


def _run_module(name: str, args: list[str]) -> int:
    """Import a build tool module (now, behind the confinement) and run its `main(argv)`."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:  # the tool itself is missing, not one of its imports
            print(f"sandbox: no tool module {name}", file=sys.stderr)
            return 2
        raise
    entry = getattr(module, "main", None)
    if not callable(entry):
        print(f"sandbox: {name} has no main(argv): not a tool", file=sys.stderr)
        return 2
    return entry(args)


if __name__ == "__main__":
    sys.exit(main())
