"""The local Hub's HTTP application: components, access checks, pagination, and the request dispatcher.

Every request goes through `HubHandler._dispatch`: fault injection, caller identification, routing, error
translation, the response, and one request-log record (admin calls excepted, see `requestlog`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import secrets
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

from . import errors, routes_admin, routes_collections, routes_files, routes_refs, routes_repos, routes_upload
from .auth import ANONYMOUS, Accounts, Caller
from .collection_store import CollectionStore
from .faults import FaultInjector, FaultRule, padded
from .metadata import MetadataCache
from .protocol import CHUNK, BodyReader, Request, Response, RouteTable
from .requestlog import RequestLog, RequestRecord, mask_query
from .storage import Commit, HubStore, Repo

ADMIN_PREFIX = "/api/_admin/"
T = TypeVar("T")


class HubApp:
    """Everything one server instance holds: store, accounts, faults, request log and routes."""

    def __init__(
        self,
        data_dir: Path,
        user: str,
        token: str,
        *,
        page_size: int = 1000,
        faults: Iterable[FaultRule] = (),
        orgs: Iterable[str] = (),
    ):
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.store = HubStore(data_dir)
        self.accounts = Accounts(data_dir, user, token, tuple(orgs))
        self.metadata = MetadataCache(self.store)
        self.collections = CollectionStore(data_dir)
        self.faults = FaultInjector(faults)
        self.log = RequestLog()
        self.page_size = page_size
        self.upload_key = secrets.token_bytes(32)  # signs the LFS upload URLs the batch endpoint hands out
        self.router = RouteTable()
        for module in (routes_admin, routes_upload, routes_files, routes_repos, routes_refs, routes_collections):
            self.router.extend(module.routes)

    def close(self) -> None:
        self.store.close()

    # Access

    def visible_repo(self, req: Request, repo_type: str, repo_id: str) -> Repo:
        """The repo if the caller may know it exists; 404 RepoNotFound otherwise (private looks like missing)."""
        repo = self.store.get_repo(repo_type, repo_id)
        if repo is None or not self.accounts.can_see(req.caller, repo):
            raise errors.repo_not_found(repo_id)
        return repo

    def writable_repo(self, req: Request, repo_type: str, repo_id: str) -> Repo:
        """The repo if the caller may change it: 401 without a token, 404 if invisible, 403 without rights."""
        if req.caller.user is None:
            raise errors.unauthorized()
        repo = self.visible_repo(req, repo_type, repo_id)
        self.accounts.require_write(req.caller, repo.namespace, f"write to {repo_id}")
        return repo

    def revision(self, repo: Repo, revision: str | None) -> Commit:
        return self.store.resolve(repo, revision) if revision else self.store.get_commit(repo, repo.head)

    # Pagination

    def paginate(
        self, req: Request, items: Sequence[T], key: Callable[[T], str], render: Callable[[T], Any]
    ) -> Response:
        """One page of `items` and, when more follow, a `Link: <…>; rel="next"` header, as the Hub pages.

        The cursor names the last item served (plus its position as a fallback if that item disappears), so
        pages stay consistent while repos or files are added between two page requests. With an
        `endless_listing` fault the page links to itself, so a client that trusts `Link` never stops.
        """
        start = 0
        cursor = req.arg("cursor")
        if cursor:
            try:
                last_key, last_index = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            except (ValueError, binascii.Error, TypeError):
                raise errors.bad_request("Invalid cursor") from None
            keys = [key(item) for item in items]
            start = keys.index(last_key) + 1 if last_key in keys else int(last_index) + 1
        page = items[start : start + self.page_size]
        headers = {}
        endless = req.fault is not None and req.fault.endless_listing
        if endless:
            headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(req.query, doseq=True)}>; rel="next"'
        elif start + self.page_size < len(items):
            position = start + len(page) - 1
            token = base64.urlsafe_b64encode(json.dumps([key(page[-1]), position]).encode()).decode()
            query = {**req.query, "cursor": [token]}
            headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(query, doseq=True)}>; rel="next"'
        return Response.json([render(item) for item in page], headers=headers)


class HubHTTPServer(ThreadingHTTPServer):
    """A threading server that can also cut its open keep-alive connections when it stops."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], hub: HubApp):
        self.hub = hub
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, HubHandler)

    def server_bind(self) -> None:
        """Bind without `HTTPServer.server_bind`'s `getfqdn(host)`: a name lookup of the address, sent to DNS where
        /etc/hosts lacks it, and the offline demo makes no connection outside loopback
        (tests/sandbox/test_telemetry.py)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self._connections_lock:
                self._connections.discard(request)

    def close_connections(self) -> None:
        """Without this, a client's pooled connection would keep talking to a stopped server's handler thread."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class HubHandler(BaseHTTPRequestHandler):
    """Turns each HTTP request into a `Request`, runs its route, writes the `Response` and logs it."""

    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses connections
    server: HubHTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: the request log records requests, and access logs must never risk showing secrets."""

    def _dispatch(self) -> None:
        hub = self.server.hub
        started, clock = time.time(), time.perf_counter()
        split = urlsplit(self.path)
        path, query = split.path, parse_qs(split.query, keep_blank_values=True)
        try:
            body = BodyReader(self.rfile, self.headers)
        except ValueError:
            self.send_error(400, "Invalid Content-Length")
            return
        is_admin = path.startswith(ADMIN_PREFIX)
        if not is_admin:
            hub.log.start()  # the record is added in `finally`, after the answer is sent
        fault = None if is_admin else hub.faults.take(self.command, path)
        if fault is not None:  # hostile-mirror faults: a renamed commit, an upload read at a crawl (`faults`)
            path = fault.request_path(path)
            body = BodyReader(fault.slowed_body(self.rfile), self.headers) if fault.slows_body else body
        caller: Caller = ANONYMOUS
        status: int | None = None
        bytes_out = 0
        try:
            if fault is not None and fault.delay:
                time.sleep(fault.delay)
            if fault is not None and fault.drop:
                self._hang_up(body)
                return
            if fault is not None and fault.stall is not None and fault.after_bytes is None:
                self._stall(fault.stall)  # accepted, then silence: not even a status line
                return
            try:
                caller = hub.accounts.identify(self.headers.get("Authorization"))
                response = self._route(hub, path, query, body, caller, fault)
            except errors.HubError as error:
                response = Response.error(error)
            except ConnectionError:  # the client went away in the middle of its body
                self.close_connection = True
                return
            except Exception as exc:  # a bug in a route: answer 500 and keep serving
                traceback.print_exc(file=sys.stderr)
                response = Response.error(errors.HubError(500, f"Internal error: {type(exc).__name__}: {exc}"))
            try:
                body.drain()
            except (ConnectionError, ValueError):
                self.close_connection = True
            if fault is None or not fault.bare:  # a proxy's bare answer carries none of the Hub's headers
                # Every Hub answer names its request; huggingface_hub puts it in its error texts ("Request ID: …").
                response.headers.setdefault("X-Request-Id", f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)}")
            status = response.status
            bytes_out = self._send(response, fault)
        finally:
            if not is_admin:
                hub.log.add(
                    RequestRecord(
                        method=self.command,
                        path=path,
                        query=mask_query(query),
                        status=status,
                        bytes_out=bytes_out,
                        time=started,
                        duration=time.perf_counter() - clock,
                        user=caller.user,
                        fault=fault.label if fault is not None else None,
                    )
                )

    def _route(
        self,
        hub: HubApp,
        path: str,
        query: dict[str, list[str]],
        body: BodyReader,
        caller: Caller,
        fault: FaultRule | None,
    ) -> Response:
        """Run the route for this request (or the fault's injected error)."""
        if fault is not None and fault.status is not None:
            if fault.bare:
                return _bare_error(fault.status)
            raise _injected_error(fault)
        route, params = hub.router.match(self.command, path)
        host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
        request = Request(
            method=self.command,
            path=path,
            query=query,
            headers=self.headers,
            caller=caller,
            base_url=f"http://{host}",
            body=body,
            params=params,
            fault=fault,
        )
        response = route.handler(hub, request)
        if fault is not None and fault.extra_siblings and response.status == 200 and response.body:
            response = _with_extra_siblings(response, fault.extra_siblings)
        if fault is not None and fault.rewrites_answer and "json" in response.headers.get("Content-Type", ""):
            data = fault.rewrite_answer(json.loads(response.body))
            response = Response.json(data, status=200, headers={**response.headers, "Content-Type": "application/json"})
        return response

    def _hang_up(self, body: BodyReader) -> None:
        """Close without answering; for an upload, after taking half of its body, like a connection lost mid-way."""
        declared = body.declared_length
        wanted = declared // 2 if declared is not None else CHUNK
        try:
            received = 0
            for chunk in body.chunks(min(CHUNK, max(wanted, 1))):
                received += len(chunk)
                if received >= wanted:
                    break
        except (ConnectionError, ValueError):
            pass
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _stall(self, seconds: float) -> None:
        """Say nothing for `seconds`, then hang up: a Hub (or a proxy) that accepted the request and went silent."""
        time.sleep(seconds)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, response: Response, fault: FaultRule | None = None) -> int:
        """Write status, headers and (except for HEAD) the body; returns the body bytes sent.

        A body fault changes only how the body goes out: in a trickle, stalled part-way, or with its last byte
        flipped (`corrupt`: same length and headers, so only a hash check can tell).
        """
        if response.file is not None:
            start, end = response.file_range or (0, response.file.stat().st_size)
            length = end - start
        else:
            start, end, length = 0, 0, len(response.body)
        extra = fault.oversize if fault is not None and fault.oversize and response.file is not None else 0
        try:
            self.send_response(response.status)
            self.send_header("Content-Length", str(length + extra))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command == "HEAD" or length == 0:
                return 0
            return self._write_body(padded(_body_chunks(response, start, length), extra), length + extra, fault)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return 0

    def _write_body(self, chunks: Iterator[bytes], length: int, fault: FaultRule | None) -> int:
        sent = 0
        for chunk in chunks:
            if fault is not None and fault.corrupt and sent + len(chunk) == length:
                chunk = chunk[:-1] + bytes([chunk[-1] ^ 0xFF])
            if fault is not None and fault.trickle is not None:
                for index in range(len(chunk)):
                    self.wfile.write(chunk[index : index + 1])
                    sent += 1
                    time.sleep(fault.trickle)
                continue
            if fault is not None and fault.stall is not None and fault.after_bytes is not None:
                room = fault.after_bytes - sent
                if room < len(chunk):
                    self.wfile.write(chunk[: max(room, 0)])
                    self._stall(fault.stall)
                    return sent + max(room, 0)
            self.wfile.write(chunk)
            sent += len(chunk)
        return sent


def _body_chunks(response: Response, start: int, length: int) -> Iterator[bytes]:
    """A response's body in pieces of at most CHUNK bytes: its bytes, or its file's range."""
    if response.file is None:
        for offset in range(0, length, CHUNK):
            yield response.body[offset : offset + CHUNK]
        return
    sent = 0
    with open(response.file, "rb") as handle:
        handle.seek(start)
        while sent < length:
            data = handle.read(min(CHUNK, length - sent))
            if not data:
                return
            sent += len(data)
            yield data


def _bare_error(status: int) -> Response:
    """An error as a proxy or CDN answers it: a status and an HTML page, none of the Hub's error headers."""
    page = f"<html><body><h1>{status}</h1></body></html>".encode()
    return Response(status=status, body=page, headers={"Content-Type": "text/html"})


def _with_extra_siblings(response: Response, names: tuple[str, ...]) -> Response:
    """Add file entries to a repo-info answer, as a compromised or buggy server might."""
    data = json.loads(response.body)
    if not isinstance(data, dict) or "siblings" not in data:
        return response
    data["siblings"] = data["siblings"] + [{"rfilename": name, "size": 1, "blobId": "0" * 40} for name in names]
    return Response.json(
        data, status=response.status, headers={k: v for k, v in response.headers.items() if k.lower() != "content-type"}
    )


def _injected_error(fault: FaultRule) -> errors.HubError:
    headers = {}
    if fault.retry_after is not None:
        seconds = math.ceil(fault.retry_after)
        headers["Retry-After"] = str(seconds)
        # huggingface_hub waits for the RateLimit reset (plus 1 s) before retrying a 429.
        headers["RateLimit"] = f'"api";r=0;t={seconds}'
        headers["RateLimit-Policy"] = '"fixed window";"api";q=1000;w=300'
    return errors.HubError(fault.status or 500, f"Injected fault: status {fault.status}", headers=headers)
