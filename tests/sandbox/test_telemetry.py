"""No egress but the Hub, no hang (issue 21): telemetry switches, the strace reading, SIGTERM in a fork.

The end-to-end checks (the offline demo under strace, two runs at once three times) are hostile-suite scenarios in
tests/reliability/test_reliability_egress.py; this module holds what they rely on, each checked on its own.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from bot.sandbox.confinement import builder_env
from bot.sandbox.isolation import untrusted_env
from bot.sandbox.telemetry import SWITCHES

ROOT = Path(__file__).resolve().parents[2]
# A host lookup, wherever it would have gone: glibc reads its resolver files first (then asks nscd, /etc/hosts or
# DNS). A connect to nscd alone is not one: nscd also serves the user database (torch's getpass.getuser() in the
# export children, when USER is unset), which is a local file.
RESOLVER_FILES = ("/etc/resolv.conf", "/etc/host.conf", "/etc/hosts")
RESOLVER_SOCKETS = ("/run/systemd/resolve/", "/var/run/systemd/resolve/")
_ADDRESS = re.compile(r"\{sa_family=(AF_INET6?|AF_UNIX)(?P<fields>[^{}]*)\}")
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_IP = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')
_PATH = re.compile(r'sun_path=@?"([^"]*)"')
_OPEN = re.compile(r'\bopen(?:at2?)?\((?:AT_FDCWD, )?"([^"]+)"')


def outside_loopback(trace: str) -> list[str]:
    """The strace lines (`-f`; connect, send*, openat) that reach beyond loopback or look a name up: an AF_INET or
    AF_INET6 address outside 127.0.0.0/8 and ::1, any port 53, systemd-resolved's socket, a resolver file opened."""
    found = []
    for line in trace.splitlines():
        opened = _OPEN.search(line)
        if opened and opened.group(1) in RESOLVER_FILES and "O_PATH" not in line:  # O_PATH: a Landlock rule
            found.append(line.strip())
        for match in _ADDRESS.finditer(line):
            family, fields = match.group(1), match.group("fields")
            if family == "AF_UNIX":
                path = _PATH.search(fields)
                if path and path.group(1).startswith(RESOLVER_SOCKETS):
                    found.append(line.strip())
                continue
            port = _PORT.search(fields)
            ip = _IP.search(fields)
            address = ipaddress.ip_address((ip.group(1) or ip.group(2)) if ip else "0.0.0.0")
            mapped = getattr(address, "ipv4_mapped", None)
            loopback = (mapped or address).is_loopback
            if not loopback or (port and int(port.group(1)) == 53):
                found.append(line.strip())
    return found


def test_outside_loopback_flags_dns_remote_hosts_and_resolver_sockets_but_not_the_local_hub():
    v6 = 'sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "{}", &sin6_addr), sin6_scope_id=0'
    lines = [
        '8827  openat(AT_FDCWD, "/etc/resolv.conf", O_RDONLY|O_CLOEXEC) = 6',
        '8827  connect(5, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT',
        '8827  connect(5, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0',
        '8827  connect(5, {sa_family=AF_INET, sin_port=htons(35907), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
        "8830  connect(7, {sa_family=AF_INET6, sin6_port=htons(443), " + v6.format("2600:1f18::1") + "}, 28) = -1",
        "8830  connect(7, {sa_family=AF_INET6, sin6_port=htons(8080), " + v6.format("::1") + "}, 28) = 0",
        '8831  sendto(3, "\\x12"..., 40, MSG_NOSIGNAL, {sa_family=AF_INET, sin_port=htons(53), '
        'sin_addr=inet_addr("127.0.0.53")}, 16) = 40',
        '8832  sendto(5, "POST /api/repos/create HTTP/1.1\\r"..., 356, 0, NULL, 0) = 356',
        '8833  connect(4, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("142.250.74.46")} '
        "<unfinished ...>",
        '8834  connect(9, {sa_family=AF_UNIX, sun_path="/tmp/pymp-x/listener"}, 110) = 0',
        "8835  connect(4, {sa_family=AF_INET6, sin6_port=htons(80), " + v6.format("::ffff:127.0.0.1") + "}, 28) = 0",
        '8836  openat(AT_FDCWD, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 3',
        '8836  openat(AT_FDCWD, "/etc/hosts", O_RDONLY|O_CLOEXEC|O_PATH) = 4',
        '8837  connect(3, {sa_family=AF_UNIX, sun_path="/run/systemd/resolve/io.systemd.Resolve"}, 42) = 0',
    ]
    trace = "\n".join(lines)
    flagged = outside_loopback(trace)
    assert [line.split()[0] for line in flagged] == ["8827", "8827", "8830", "8831", "8833", "8837"], flagged


def test_every_process_the_bot_starts_gets_the_telemetry_switches():
    for env in (builder_env({"PATH": "/usr/bin", "HF_TOKEN": "hf_x"}), untrusted_env({"PATH": "/usr/bin"})):
        assert {k: env.get(k) for k in SWITCHES} == dict(SWITCHES)
    # The switches are the libraries' own: huggingface_hub's and NNCF's.
    assert {"HF_HUB_DISABLE_TELEMETRY", "NNCF_CI"} <= set(SWITCHES)


def _child_env(home: Path) -> dict[str, str]:
    """This environment without CI or any switch (a laptop), with a fresh HOME that holds no consent file."""
    env = {k: v for k, v in os.environ.items() if k not in {"CI", *SWITCHES}}
    return {**env, "HOME": str(home), "PYTHONPATH": str(ROOT)}


def test_switch_off_leaves_nncf_and_ovc_their_stubs_and_writes_nothing_in_home(tmp_path):
    """Without it, importing NNCF writes a client id and a usage counter into $HOME/intel, and ovc and NNCF send
    events (each from a fork of the process); with it both take their no-telemetry stubs."""
    script = textwrap.dedent(
        """\
        import json, os, sys
        if sys.argv[1] == "off":
            from bot.sandbox.telemetry import switch_off
            switch_off()
        import nncf.telemetry
        from openvino.tools.ovc import convert_impl
        print(json.dumps({"nncf": type(nncf.telemetry.telemetry).__name__, "ovc": convert_impl.tm.__name__,
                          "switches": {k: os.environ.get(k) for k in ("HF_HUB_DISABLE_TELEMETRY", "NNCF_CI")}}))
        """
    )
    seen = {}
    for mode in ("on", "off"):
        home = tmp_path / mode
        home.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", script, mode],
            env=_child_env(home),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen[mode] = (json.loads(done.stdout.strip().splitlines()[-1]), sorted(p.name for p in home.rglob("*")))
    # The control: the real telemetry, and its state in HOME (so the check below can see it).
    assert seen["on"][0]["ovc"] == "openvino_telemetry" and "openvino_ga_cid" in seen["on"][1], seen["on"]
    stubs, files = seen["off"]
    assert stubs["nncf"] == "MagicMock" and stubs["ovc"] == "openvino.tools.ovc.telemetry_stub", stubs
    assert stubs["switches"] == {"HF_HUB_DISABLE_TELEMETRY": "1", "NNCF_CI": "1"}
    assert files == [], files


# What the builder does when OpenVINO's telemetry posts an event: one thread waits on a child process (holding
# Popen's wait lock), another forks through multiprocessing and SIGTERMs the fork after a timeout.
_FORK_SCRIPT = textwrap.dedent(
    """\
    import json, multiprocessing, os, signal, subprocess, threading, time
    from bot.cli import sigterm
    from bot.sandbox.isolation import tracked

    sigterm.install_signal_handlers()
    out = {"handler_here": sigterm.terminate is signal.getsignal(signal.SIGTERM)}
    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    with tracked(sleeper):
        threading.Thread(target=sleeper.wait, daemon=True).start()
        time.sleep(0.3)
        fork = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
        starter = threading.Thread(target=fork.start)
        starter.start()
        starter.join()
        time.sleep(0.5)
        fork.terminate()
        fork.join(20)
        out["mp_fork_exitcode"] = fork.exitcode
        if fork.exitcode is None:
            os.kill(fork.pid, signal.SIGKILL)
        out["sleeper_alive_after_mp_fork"] = sleeper.poll() is None
        # A fork that kept the handler (made below Python, where at-fork hooks do not run): the pid check.
        pid = os.fork()
        if pid == 0:
            out_child = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            signal.signal(signal.SIGTERM, sigterm.terminate)
            time.sleep(60 if out_child else 0)
            os._exit(3)
        time.sleep(0.5)
        os.kill(pid, signal.SIGTERM)
        for _ in range(200):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            status = None
        out["raw_fork_signal"] = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else status
        out["sleeper_alive_after_raw_fork"] = sleeper.poll() is None
        out["handler_still_here"] = sigterm.terminate is signal.getsignal(signal.SIGTERM)
        sleeper.kill()
    print(json.dumps(out))
    """
)


def test_a_fork_of_the_bot_gets_the_default_sigterm_and_leaves_the_bots_children_alone():
    """Before: the fork ran the bot's handler, killed the builder's tracked child and then waited for ever on that
    child's wait lock, copied while the builder's thread held it; the fork never died, and its parent hung at exit."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "handler_here": True,
        "mp_fork_exitcode": -signal.SIGTERM,  # died of SIGTERM, as multiprocessing expects
        "sleeper_alive_after_mp_fork": True,
        "raw_fork_signal": signal.SIGTERM,
        "sleeper_alive_after_raw_fork": True,
        "handler_still_here": True,
    }, out
