"""Ways to run the local Hub: in a background thread (`LocalHub`), in the foreground (`serve`, for the CLI), or
as a child process (`start_subprocess`) when a test or benchmark needs the server outside its own process.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .app import HubApp, HubHTTPServer
from .auth import Scope
from .faults import FaultRule, parse_rules
from .gitobjects import needs_lfs
from .storage import DEFAULT_BRANCH, AddFile, CommitOp, FileEntry

LISTENING = "Local hub listening on "
TOKEN_ENV = "LOCAL_HUB_TOKEN"  # how start_subprocess hands over the token: argv is visible to `ps`


def _rules(faults: Iterable[FaultRule | Mapping[str, Any]]) -> list[FaultRule]:
    return [rule if isinstance(rule, FaultRule) else parse_rules([rule])[0] for rule in faults]


class LocalHub:
    """A local Hub served from a background thread of this process.

    Example:
        with LocalHub(tmp_path / "hub", user="bot", token="hf_local") as hub:
            api = HfApi(endpoint=hub.url, token="hf_local")

    Args:
        data_dir: where repos, blobs and accounts persist; a later LocalHub on the same folder sees them.
        user: the main token's user, who may write to any namespace and call the admin API.
        orgs: the organisations whoami lists for the main user (its role there: admin); a preflight checks them.
        token: the main token.
        port: 0 picks a free port.
        page_size: entries per page of listings, trees and commit lists (small values exercise pagination).
        faults: initial fault rules (`FaultRule`s or their JSON dicts).
    """

    def __init__(
        self,
        data_dir: Path,
        user: str,
        token: str,
        port: int = 0,
        page_size: int = 1000,
        *,
        faults: Iterable[FaultRule | Mapping[str, Any]] = (),
        host: str = "127.0.0.1",
        orgs: Iterable[str] = (),
    ):
        self.data_dir = Path(data_dir)
        self.user = user
        self._token = token
        self._address = (host, port)
        self._page_size = page_size
        self._faults = _rules(faults)
        self._orgs = tuple(orgs)
        self._app: HubApp | None = None
        self._server: HubHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LocalHub:
        """Bind the port and start serving; the hub answers as soon as this returns."""
        if self._server is not None:
            raise RuntimeError("LocalHub is already running")
        app = HubApp(
            self.data_dir, self.user, self._token, page_size=self._page_size, faults=self._faults, orgs=self._orgs
        )
        try:
            server = HubHTTPServer(self._address, app)
        except BaseException:
            app.close()
            raise
        self._app, self._server = app, server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="local-hub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections and release the data directory."""
        if self._server is None or self._app is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        if self._thread is not None:
            self._thread.join()
        self._app.close()
        self._app = self._server = self._thread = None

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def app(self) -> HubApp:
        if self._app is None:
            raise RuntimeError("LocalHub is not running")
        return self._app

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("LocalHub is not running")
        return f"http://{self._address[0]}:{self._server.server_port}"

    def requests(self) -> list[dict[str, Any]]:
        """The request log (see `requestlog.RequestRecord`), oldest first."""
        return [record.to_json() for record in self.app.log.snapshot()]

    def clear_requests(self) -> None:
        self.app.log.clear()

    def set_faults(self, rules: Iterable[FaultRule | Mapping[str, Any]]) -> None:
        """Replace the active fault rules."""
        self.app.faults.replace_rules(_rules(rules))

    def clear_faults(self) -> None:
        self.app.faults.clear()

    def add_org(self, org: str) -> None:
        """Make the main user a member (admin) of the organisation `org` (whoami lists it; a preflight passes)."""
        self.app.accounts.add_main_org(org)

    def add_token(
        self,
        token: str,
        user: str,
        *,
        write: bool = False,
        orgs: Iterable[str] = (),
        role: str = "",
        org_roles: Mapping[str, str] | None = None,
        scopes: Iterable[Scope] = (),
        fullname: str = "",
    ) -> None:
        """Issue a token (`hubserver.auth.Accounts.add_token`: role read/write/fineGrained, org roles, scopes)."""
        self.app.accounts.add_token(
            token,
            user,
            write=write,
            orgs=tuple(orgs),
            role=role,
            org_roles=org_roles,
            scopes=tuple(scopes),
            fullname=fullname,
        )

    def seed_folder(self, repo_id: str, folder: Path, *, title: str = "seed") -> str:
        """Commit every file of `folder` to the model repo `repo_id` (created if missing) from inside the server,
        without sending the bytes over HTTP: weights are adopted into the blob store (`HubStore.adopt_file`), so a
        sparse real-size checkpoint stays a few kilobytes. Clients then see an ordinary repo. Returns the commit id.
        """
        store = self.app.store
        repo, _ = store.create_repo("model", repo_id, private=False, author=self.user)
        ops: list[CommitOp] = []
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            name = path.relative_to(folder).as_posix()
            size = path.stat().st_size
            with path.open("rb") as handle:
                sample = handle.read(512)
            if needs_lfs(name, size, sample, ["*.safetensors"]):
                ops.append(AddFile(name, FileEntry.lfs_object(store.adopt_file(path), size)))
            else:
                data = path.read_bytes()
                store.put_bytes(data)
                ops.append(AddFile(name, FileEntry.regular(data)))
        commit = store.commit(repo, DEFAULT_BRANCH, ops, title=title, message="", author=self.user, parent=None)
        return commit.id

    def grant(self, repo_id: str, user: str, repo_type: str = "model") -> None:
        """Let `user` download the gated repo `repo_id`."""
        self.app.accounts.grant(repo_type, repo_id, user)


def serve(
    port: int,
    data_dir: Path,
    user: str,
    token: str,
    host: str = "127.0.0.1",
    page_size: int = 1000,
    *,
    faults: Iterable[FaultRule | Mapping[str, Any]] = (),
    orgs: Iterable[str] = (),
) -> None:
    """Serve in the foreground until SIGINT or SIGTERM (the `dflash-bot hub serve` command).

    Prints one line, `Local hub listening on http://HOST:PORT`, once requests are accepted; with port 0 it is
    the only way to learn the port. `orgs`: the organisations the main user is an admin of (whoami lists them).
    """
    hub = LocalHub(data_dir, user, token, port=port, page_size=page_size, faults=faults, host=host, orgs=orgs).start()
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
    try:
        print(f"{LISTENING}{hub.url}", flush=True)
        stop.wait()
    finally:
        hub.stop()


def start_subprocess(
    data_dir: Path,
    user: str,
    token: str,
    *,
    port: int = 0,
    page_size: int = 1000,
    faults_file: Path | None = None,
    host: str = "127.0.0.1",
    timeout: float = 30.0,
) -> tuple[subprocess.Popen[str], str]:
    """Start `python -m hubserver` in a child process and wait until it listens.

    Returns:
        The process and the hub's URL. Stop it with `stop_subprocess(process)`.

    Raises:
        RuntimeError: the server exited or did not report its address within `timeout` seconds.
    """
    command = [sys.executable, "-m", "hubserver", "--port", str(port), "--data", str(data_dir),
               "--user", user, "--host", host, "--page-size", str(page_size)]  # fmt: skip
    if faults_file is not None:
        command += ["--faults", str(faults_file)]
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, TOKEN_ENV: token}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.05)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if line.startswith(LISTENING):
            return process, line[len(LISTENING) :].strip()
        break
    stop_subprocess(process)
    raise RuntimeError(f"The local hub subprocess did not start (exit code {process.returncode})")


def stop_subprocess(process: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """Terminate a `start_subprocess` server (SIGTERM lets it close cleanly), killing it if it hangs."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
