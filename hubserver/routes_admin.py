"""Admin API (main token only): request log, fault rules, extra tokens and gated-repo grants.

    GET    /api/_admin/requests      the request log, oldest first
    DELETE /api/_admin/requests      clear it
    GET    /api/_admin/faults        active rules, with the `times` each has left
    POST   /api/_admin/faults        replace the rules: a JSON list (see `faults`)
    DELETE /api/_admin/faults        remove all rules
    POST   /api/_admin/tokens        {"token", "user", "write": bool, "orgs": [..]} adds a token
    POST   /api/_admin/grants        {"repo_id", "user", "repo_type"?} lets `user` download a gated repo
    DELETE /api/_admin/grants        the same body revokes it

These paths bypass fault rules and are not written to the request log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .faults import parse_rules
from .protocol import Request, Response, RouteTable
from .storage import REPO_TYPES

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


@routes.route("GET", "/api/_admin/faults")
def get_faults(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    return Response.json([rule.to_json() for rule in hub.faults.rules()])


@routes.route("POST", "/api/_admin/faults")
def set_faults(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    try:
        rules = parse_rules(req.json())
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None
    hub.faults.replace_rules(rules)
    return Response.json([rule.to_json() for rule in rules])


@routes.route("DELETE", "/api/_admin/faults")
def clear_faults(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    hub.faults.clear()
    return Response.json([])


@routes.route("POST", "/api/_admin/tokens")
def add_token(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    body = req.json_object()
    token, user, orgs = body.get("token"), body.get("user"), body.get("orgs") or []
    if not isinstance(token, str) or not isinstance(user, str) or not isinstance(orgs, list):
        raise errors.bad_request("Expected {token: str, user: str, write: bool, orgs: [str]}")
    hub.accounts.add_token(token, user, write=bool(body.get("write")), orgs=tuple(map(str, orgs)))
    return Response.json({"user": user, "write": bool(body.get("write")), "orgs": orgs})


def _grant_target(req: Request) -> tuple[str, str, str]:
    body: dict[str, Any] = req.json_object()
    repo_type = body.get("repo_type") or "model"
    repo_id, user = body.get("repo_id"), body.get("user")
    if repo_type not in REPO_TYPES or not isinstance(repo_id, str) or not isinstance(user, str):
        raise errors.bad_request("Expected {repo_id: str, user: str, repo_type?: model|dataset|space}")
    return repo_type, repo_id, user


@routes.route("POST", "/api/_admin/grants")
def grant(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    hub.accounts.grant(*_grant_target(req))
    return Response.json({})


@routes.route("DELETE", "/api/_admin/grants")
def revoke(hub: HubApp, req: Request) -> Response:
    _admin(hub, req)
    hub.accounts.revoke(*_grant_target(req))
    return Response.json({})
