"""``POST /api/revoke``: the page's revoke button (``tenure serve --allow-revoke``, off by
default; docs/serve.md).

Always a safe revoke of the grant the page showed: with its token (a click on a stale page
cannot revoke a newer holder's grant), never ``now`` (the name is held back until the old lease
could no longer be acting). Cross-site requests are refused: a request must carry the server's
random token (`CSRF_HEADER`, embedded in the page, which only this origin can read) and be
JSON, so a form or a script elsewhere cannot send it without a CORS preflight this server never
answers.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import tenure
from tenure.stores import revocations_of

from .. import one_line

CSRF_HEADER = "X-Tenure-CSRF"
"""The header that carries the server's random token (the page reads it from its meta tag)."""
MAX_REASON = 200
"""Characters of a reason sent with a request (the rest is cut)."""
OFF = "revoke is off: start tenure serve with --allow-revoke (docs/serve.md)"

Endpoint = Callable[[Request], Awaitable[Response]]


def _error(status: int, message: str, headers: dict[str, str]) -> Response:
    return JSONResponse({"error": one_line(message)}, status_code=status, headers=headers)


def _parse(body: object) -> tuple[str, int, str]:
    """The name, token and reason a request asks for; ``ValueError`` with one line if not."""
    if not isinstance(body, dict):
        raise ValueError('send a JSON object: {"name": …, "token": …, "reason": …}')
    name, token, reason = body.get("name"), body.get("token"), body.get("reason", "")
    if not isinstance(name, str) or not name:
        raise ValueError('"name" must be a lock name')
    if isinstance(token, bool) or not isinstance(token, int):
        raise ValueError('"token" must be the integer token of the grant shown')
    if not isinstance(reason, str):
        raise ValueError('"reason" must be text')
    return name, token, one_line(reason)[:MAX_REASON]


def revoke_endpoint(
    client: tenure.AsyncClient, csrf: str | None, headers: dict[str, str]
) -> Endpoint:
    """The route's handler; ``csrf`` is None unless ``--allow-revoke`` (then every request is
    refused, 403)."""

    async def revoke(request: Request) -> Response:
        if csrf is None:
            return _error(403, OFF, headers)
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), csrf.encode()):
            return _error(403, f"missing or wrong {CSRF_HEADER} header: revoke from the page",
                          headers)  # fmt: skip
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "send Content-Type: application/json", headers)
        if not client.capabilities.revoke:
            try:
                revocations_of(client.store)
            except tenure.InvalidArgument as exc:
                return _error(409, str(exc), headers)
        try:
            body = json.loads(await request.body())
        except ValueError as exc:  # not JSON, or not UTF-8
            return _error(400, f"the body is not JSON: {exc}", headers)
        try:
            name, token, reason = _parse(body)
        except ValueError as exc:
            return _error(400, str(exc), headers)
        peer = request.client
        where = f"{peer.host}:{peer.port}" if peer else "an unknown address"
        why = f"from tenure serve, client {where}" + (f": {reason}" if reason else "")
        try:
            revoked = await client.revoke(name, token=token, reason=why)
        except tenure.InvalidArgument as exc:
            return _error(400, str(exc), headers)
        except tenure.TenureError as exc:
            return _error(503, f"store unavailable: {exc}", headers)
        if revoked is None:
            return _error(409, f"{name!r} is not held with token {token}: nothing revoked",
                          headers)  # fmt: skip
        found = {"name": revoked.name, "token": revoked.token, "free_in": revoked.free_in,
                 "revoked": revoked.describe()}  # fmt: skip
        return JSONResponse(found, headers=headers)

    return revoke


__all__ = ["CSRF_HEADER", "MAX_REASON", "OFF", "revoke_endpoint"]
