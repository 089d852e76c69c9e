"""Admin API (main token only): the request log of a server in another process (`start_subprocess`).

    GET    /api/_admin/requests      the request log, oldest first
    DELETE /api/_admin/requests      clear it

These paths bypass fault rules and are not written to the request log. In-process servers (`LocalHub`) set
faults, tokens and grants through their methods; a child process takes its faults from `--faults FILE`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .protocol import Request, Response, RouteTable

if TYPE_CHECKING:
    from .app import HubApp

routes = RouteTable()


def _admin(hub: HubApp, req: Request) -> None:
    hub.accounts.require_admin(req.caller)


@routes.route("GET", "/api/_admin/requests")
def get_requests(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    return Response.json([record.to_json() for record in hub.log.snapshot()])


@routes.route("DELETE", "/api/_admin/requests")
def clear_requests(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    hub.log.clear()
    return Response.json({})
