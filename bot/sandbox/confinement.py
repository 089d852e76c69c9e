"""Which OS confinement the checkpoint-loading children get here, and how the write token is kept from them.

Two layers, each probed on this machine and used when it works:
- **namespaces**: children start through `unshare` (util-linux, on every Debian/Ubuntu) in fresh user, PID, mount
  and network namespaces: they see no process outside their own tree (so no `/proc/<ancestor>/environ`), hold no
  capability outside it, and have no network. Unprivileged user namespaces can be switched off (GitHub's Ubuntu
  24.04 runners restrict them through AppArmor; `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`
  turns them back on), so this layer is probed, not assumed.
- **landlock**: applied by the child itself (`bot.sandbox.child`, `bot.sandbox.landlock`): files outside its folders
  and the Python environment cannot be opened, TCP is refused, other processes cannot be read through `/proc`.
Whatever the layers, a child without a PID namespace of its own installs a seccomp filter that refuses signals and
traces to other processes, also the indirect ways Landlock's signal scope (ABI 6+) leaves open (`bot.sandbox.signals`).
A mode in which a child could still signal or trace a process outside its own tree is refused with the reason
(`Confinement.refusal`): no PID namespace and no seccomp; or no PID namespace, no Landlock, and a process that can open
its parent's `/proc/<pid>/mem` (root, or Yama's ptrace_scope 0). Every child runs below a subreaper of its own
(`bot.sandbox.reaper`) that adopts its orphans and kills its whole tree when it ends.
With neither, the fallback is `none`: scrubbed environment, path sanitising, token scrubbing; it is logged.

`DFLASH_BOT_SANDBOX` (`auto`, default; or a comma list of `namespaces`, `landlock`; or `none`) narrows the layers,
for tests of each layer and for machines where one misbehaves; `Settings.sandbox_layers` holds what it says, and the
functions here take those layers as an argument (all of them by default: leaving it out never confines less).

The process that holds the write token calls `hold_write_token()` first and starts the build side with
`start_builder()`: the builder tree never has the token in its environment, cannot read it from the holder's
`/proc` entries, and its checkpoint children are confined as above.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core.settings import SANDBOX_LAYERS, SANDBOX_VARIABLE
from bot.sandbox import signals
from bot.sandbox.landlock import SIGNAL_SCOPE_ABI, abi_version
from bot.sandbox.telemetry import off_env

# Anything that looks like a credential stays out of the build processes: they load untrusted files.
SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|CREDENTIALS?|API_KEY|PRIVATE_KEY)(_|$)", re.IGNORECASE)
# A fresh user namespace (no capability outside it), PID namespace with its own /proc (no ancestor visible),
# mount namespace (for that /proc) and network namespace (no network); whatever the child leaves behind in it dies
# with it (--kill-child).
NAMESPACE_PREFIX = (
    "unshare",
    "--user",
    "--map-root-user",
    "--pid",
    "--fork",
    "--kill-child",
    "--mount-proc",
    "--net",
    "--",
)
# The builder downloads, so it keeps the network; it still cannot see the token holder.
BUILDER_PREFIX = ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount-proc", "--")
WRITE_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
READ_TOKEN_VARIABLES = ("HF_READ_TOKEN",)
_PR_SET_DUMPABLE = 4


@dataclass(frozen=True)
class Confinement:
    """The OS confinement in force for checkpoint-loading children on this machine."""

    namespaces: bool
    landlock_abi: int  # 0: not used
    detail: str  # why a layer is off

    @property
    def name(self) -> str:
        layers = [name for name, on in (("namespaces", self.namespaces), ("landlock", self.landlock_abi > 0)) if on]
        return "+".join(layers) or "none"

    def describe(self) -> str:
        """One log line: what confines the children, or that nothing does and why."""
        if self.name == "none":
            return f"sandbox: no OS confinement ({self.detail}); children run with a scrubbed environment only"
        abi = f" (Landlock ABI {self.landlock_abi})" if self.landlock_abi else ""
        return f"sandbox: checkpoint children confined by {self.name}{abi}" + (
            f"; {self.detail}" if self.detail else ""
        )

    def signal_guard(self) -> str | None:
        """What keeps a child from signalling or tracing its siblings and the builder here (None: nothing, and the
        mode is refused): its own PID namespace, or the seccomp filter `bot.sandbox.child` installs in every child
        without one (`bot.sandbox.signals`; Landlock's signal scope, ABI 6+, covers `kill` and SIGIO but not
        `prlimit64`, `perf_event_open` nor `setpgid`)."""
        if self.namespaces:
            return "a PID namespace per child"
        if signals.available():
            scope = (
                f", besides Landlock ABI {self.landlock_abi}'s signal scope"
                if self.landlock_abi >= SIGNAL_SCOPE_ABI
                else ""
            )
            return f"a seccomp filter per child (no signal or trace to a process but its own{scope})"
        return None

    def refusal(self) -> str | None:
        """Why no checkpoint child may start in this mode, and what to change (None: children may start)."""
        enable = "give the children a PID namespace (user namespaces: `make sandbox-host`, and DFLASH_BOT_SANDBOX=auto)"
        if self.signal_guard() is None:
            return (
                f"sandbox mode {self.name} refused: no PID namespace and no seccomp filter here "
                f"({os.uname().sysname} {os.uname().machine}), so a child could signal or trace any process of its "
                f"user; {enable}"
            )
        if not self.namespaces and not self.landlock_abi and traces_outside():
            return (
                f"sandbox mode {self.name} refused: without a PID namespace or Landlock a child here can open its "
                "parent's /proc/<pid>/mem (this runs as root, or Yama's ptrace_scope is 0), so it could trace the "
                f"builder and its siblings; {enable}, or allow Landlock, or run as a user without CAP_SYS_PTRACE "
                "where kernel.yama.ptrace_scope is 1 or more"
            )
        return None

    def as_provenance(self) -> dict:
        return {"confinement": self.name, "landlock_abi": self.landlock_abi}


def confinement(layers: Sequence[str] = SANDBOX_LAYERS) -> Confinement:
    """What this machine gives the children, within the layers allowed (`Settings.sandbox_layers`)."""
    notes = []
    namespaces = False
    if "namespaces" in layers:
        namespaces, why = _namespaces_work(NAMESPACE_PREFIX)
        if not namespaces:
            notes.append(f"namespaces unavailable: {why}")
    landlock_abi = 0
    if "landlock" in layers:
        landlock_abi = abi_version()
        if not landlock_abi:
            notes.append("Landlock not enabled in this kernel")
    off = [layer for layer in SANDBOX_LAYERS if layer not in layers]
    if off:
        notes.append(f"{', '.join(off)} switched off by {SANDBOX_VARIABLE}")
    return Confinement(namespaces=namespaces, landlock_abi=landlock_abi, detail="; ".join(notes))


# Run as a process of its own, as a child would: can it open its parent's memory (PTRACE_MODE_ATTACH)?
_TRACE_PROBE = """
import os
try:
    os.close(os.open(f"/proc/{os.getppid()}/mem", os.O_RDONLY))
except OSError:
    raise SystemExit(1)
"""


@functools.cache
def traces_outside() -> bool:
    """Whether a process started here can open its parent's `/proc/<pid>/mem` (as a child without Landlock could
    its reaper's, the builder's and its siblings'); asked once per process, by trying it."""
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", _TRACE_PROBE], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return True  # unknown: assume the worst
    return probe.returncode == 0


@functools.cache
def _namespaces_work(prefix: tuple[str, ...]) -> tuple[bool, str]:
    """Run `true` under the prefix once per process: the only reliable test (sysctls and LSMs vary)."""
    try:
        result = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if result.returncode != 0:
        return False, (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1][:200]
    return True, ""


# ---- the token holder ----


def hold_write_token(names: Sequence[str] = WRITE_TOKEN_VARIABLES) -> str | None:
    """Take the write token out of this process's environment before anything is started, and return it.

    The variables are removed from `os.environ` (so no child inherits them), their text is overwritten in the
    process's initial environment block (which `/proc/<pid>/environ` shows even after `unsetenv`), and the
    process is made non-dumpable (its `/proc` entries and memory are closed to other processes of the same user;
    root is not stopped by that, the children's namespaces and Landlock are). Call it first thing in the one
    process that publishes; keep the returned token in memory and pass it to the Hub client explicitly.
    """
    token = None
    for name in names:
        value = os.environ.pop(name, None)
        token = token or value
        if value:
            _scrub_initial_environment(name.encode(), value.encode())
    _set_dumpable(False)
    return token


def scrubbed_env(
    base: Mapping[str, str] | None = None,
    *,
    keep: Collection[str] = (),
    drop: Collection[str] = (),
    variables: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The one environment scrubber: what every process the bot starts gets, from `base` (this process's
    environment by default). `builder_env` and `bot.sandbox.isolation.untrusted_env` are its two uses, and the
    token holder hands the builder its read token through it (`bot.run.pipeline`).

    Args:
        base: the environment to start from (None: `os.environ`).
        keep: credential-like names to keep (the builder's read token); every other name `SECRET_NAME` matches is
            removed.
        drop: names removed whatever they look like (a read token the caller replaces).
        variables: set last, after the telemetry switches (`bot.sandbox.telemetry`), which are always set.
    """
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k not in drop and (k in keep or not SECRET_NAME.search(k))}
    return off_env(env) | dict(variables or {})


def builder_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of the build side: every secret removed except the read token, no stored Hub token reachable,
    telemetry switched off (`bot.sandbox.telemetry`; its `main` also makes OpenVINO's telemetry unimportable in it)."""
    # A token saved by `hf auth login` lives in HF_HOME/token: point the client at an empty file instead.
    no_stored_token = {"HF_TOKEN_PATH": os.devnull, "HF_STORED_TOKENS_PATH": os.devnull}
    return scrubbed_env(base, keep=READ_TOKEN_VARIABLES, variables=no_stored_token)


def start_builder(
    argv: Sequence[str],
    *,
    layers: Sequence[str] = SANDBOX_LAYERS,
    env: Mapping[str, str] | None = None,
    **popen: object,
) -> subprocess.Popen:
    """Start the token-free build side (`argv`, e.g. `dflash-bot build ...`) as its own process tree.

    It gets `builder_env(env)`, no inherited file descriptors, its own session, and, where namespaces work and
    `layers` (`Settings.sandbox_layers`) allows them, its own user and PID namespaces, so nothing in it can see the
    caller.

    Returns:
        The running process (wait on it, read its output as with any Popen).
    """
    use_namespaces = "namespaces" in layers and _namespaces_work(BUILDER_PREFIX)[0]
    prefix = list(BUILDER_PREFIX) if use_namespaces else []
    return subprocess.Popen([*prefix, *argv], env=builder_env(env), close_fds=True, start_new_session=True, **popen)  # type: ignore[call-overload]


def _set_dumpable(dumpable: bool) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)


def _scrub_initial_environment(name: bytes, value: bytes) -> None:
    """Overwrite `NAME=value` in the environment block the kernel shows as /proc/self/environ."""
    try:
        fields = Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51 of proc(5)
    except (OSError, IndexError, ValueError):
        return
    block = ctypes.string_at(start, end - start)
    needle = name + b"=" + value
    offset = block.find(needle)
    while offset >= 0:
        if offset == 0 or block[offset - 1] == 0:
            ctypes.memset(start + offset + len(name) + 1, ord("x"), len(value))
        offset = block.find(needle, offset + 1)
