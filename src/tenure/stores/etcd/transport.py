"""What both transports to etcd share (`Transport`): the members and fail-over through them,
the rule that a request is sent again only when it provably did not apply or is idempotent,
etcd's simple auth tokens and their renewal, and the TLS probe that tells why a handshake
failed. `GrpcTransport` (grpc_transport.py) and `Gateway` (gateway.py) only send one request
to one member, open a watch, and ask a member for its status.

Requests and answers are etcd's JSON, whatever the wire: bytes base64, int64s strings, zero
fields omitted (protobuf's JSON mapping with the .proto field names, as etcd's gateway speaks
it). A failure leaves as one-line ``StoreUnavailable``, or as `EtcdError` for a definite answer
(see docs/stores/etcd.md, "The transport").
"""

from __future__ import annotations

import contextlib
import logging
import math
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio

from ..._errors import StoreUnavailable
from .._connect import tls_failure
from .._kit import Backoff, Unavailable

JSON = dict[str, Any]
log = logging.getLogger("tenure.stores.etcd")


class Call(Protocol):
    """One request: `Transport.call`'s signature (a store's own has its refusals translated)."""

    async def __call__(
        self, path: str, body: JSON, *, retry: bool = True, timeout: float | None = None
    ) -> JSON: ...


DEFINITE_CODES = frozenset({3, 5, 6, 7, 9, 11, 12, 16})
"""gRPC codes of a definite refusal (invalid, not found, exists, denied, precondition, out of
range, unimplemented, unauthenticated). Every other code ("no leader", "leader changed",
"request timed out", "context deadline exceeded" as Unknown…) means: try again, maybe elsewhere."""
NOT_FOUND = 5
ALREADY_EXISTS = 9  # etcd answers "lease already exists" with FailedPrecondition
PERMISSION_DENIED = 7
UNAUTHENTICATED = 16  # "invalid auth token" (HTTP 401 from the gateway)
_STALE_TOKEN = ("invalid auth token", "revision of auth store is old")
_PROBE_WAIT = 0.5
"""Seconds a TLS probe waits for the server's alert after the handshake (only after a broken
connection whose cause the client library did not show)."""
SPEAKS_TLS = "the server speaks TLS only: connect with tls=true (and ca=<CA file>)"


class EtcdError(Exception):
    """A definite error answer from etcd (the request did not apply)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Failed(Exception):
    """One try at one member ended without a verdict: the next member may be tried.

    ``sent``: the request may have applied (so a non-idempotent one is not sent again);
    ``refused``: the member refused the connection outright; ``tls``: the TLS handshake failed
    (a configuration mistake: tried once on each member, then raised)."""

    def __init__(
        self, problem: str, *, sent: bool, refused: bool = False, tls: bool = False
    ) -> None:
        super().__init__(problem)
        self.problem, self.sent, self.refused, self.tls = problem, sent, refused, tls


SHUNNED = 5.0
"""Seconds a member that failed is passed over while another has not failed that long."""
PROBE = 0.3
"""Seconds the other members are given to answer when the one in use failed."""


def next_member(failed: int, failed_at: dict[int, float], now: float, count: int) -> int:
    """The member after ``failed`` (in order, round the list) that has not failed in the last
    `SHUNNED` seconds; the very next one if every member has."""
    for step in range(1, count + 1):
        candidate = (failed + step) % count
        if now - failed_at.get(candidate, -math.inf) > SHUNNED:
            return candidate
    return (failed + 1) % count


def stale_token(message: str) -> bool:
    return any(text in message for text in _STALE_TOKEN)


def answered(code: int, message: str) -> Exception:
    """etcd's error answer: `EtcdError` if definite, else `Failed` (not applied only if etcd
    had no leader)."""
    if code in DEFINITE_CODES:
        return EtcdError(code, message)
    return Failed(message, sent="no leader" not in message)


class Transport:
    """A client for a list of etcd members (``host:port``), with fail-over."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        connect_timeout: float = 0.5,
        request_timeout: float = 2.0,
        budget: float = 8.0,
        tls: ssl.SSLContext | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.budget = budget
        """Seconds one call keeps trying (idempotent calls, through an election)."""
        self.current = 0
        self._failed: dict[int, float] = {}  # member index → when it last failed
        self._probing: anyio.Lock | None = None
        self._tls = tls
        self._username = username
        self._password = password
        self._token: str | None = None
        """None: not authenticated yet; "": etcd has authentication off (none sent)."""
        self._auth_lock: anyio.Lock | None = None
        self.unavailable = Unavailable(
            f"etcd at {', '.join(endpoints)}", [password] if password else []
        )
        """This store's ``StoreUnavailable``: ``etcd at <members>: <problem>``."""
        self.authentications = 0
        """Tokens obtained (the first and every renewal): for tests."""

    # -- what a transport does -------------------------------------------------------------

    async def _send(
        self, index: int, path: str, body: JSON, timeout: float, token: str, probed: set[int]
    ) -> JSON:
        """``body`` to ``path`` at member ``index``, once: the answer, or `EtcdError` (a
        definite refusal) or `Failed`. ``token``: the auth token to send ("" for none);
        ``probed``: the members probed for a hidden TLS refusal in this call."""
        raise NotImplementedError

    async def _leader_at(self, index: int) -> bool:
        """Whether member ``index`` answers a status request, within `PROBE` seconds, with a
        leader."""
        raise NotImplementedError

    def watch(self, body: JSON) -> AbstractAsyncContextManager[AsyncIterator[JSON]]:
        """A watch stream on the current member: yields each ``WatchResponse`` (as JSON).

        The caller bounds the time (no read timeout here). A broken stream ends the iteration
        (the member is skipped for later calls); the caller simply attempts again. A watch
        refused for a stale token is opened again once with a new one."""
        raise NotImplementedError

    async def wait_event(self, body: JSON) -> bool:
        """Wait for the first event of the watch ``body`` creates (or etcd's cancel of it):
        True; False when the stream broke or could not be opened (the caller attempts again
        soon). The caller bounds the time. One stream per call here; `GrpcTransport` shares
        one among its waiters."""
        async with self.watch({"create_request": body}) as results:
            async for result in results:
                if result.get("events") or result.get("canceled"):
                    return True
        return False

    async def aclose(self) -> None:
        raise NotImplementedError

    # -- members ---------------------------------------------------------------------------

    def _skip(self, index: int) -> None:
        """That member failed: the next call goes to the next one that has not failed lately
        (unless moved on already). A member cut off but still accepting connections costs a
        whole time-out per try: without the memory, a hiccup of the member in use would send
        every client round to it again, each of them past its lease's deadline."""
        now = time.monotonic()
        self._failed[index] = now
        if self.current == index:
            self.current = next_member(index, self._failed, now, len(self.endpoints))

    async def _move_on(self, index: int) -> None:
        """That member failed: move to one that answers now. The others are asked for their
        status at once, for `PROBE` seconds, and the first to answer with a leader is used
        (a member cut off answers nothing: trying them in turn would cost a time-out each);
        if none does, the next one that has not failed lately (`_skip`). One probe at a time:
        calls that failed meanwhile take its choice."""
        if self.current != index or len(self.endpoints) < 2:
            self._skip(index)
            return
        if self._probing is None:
            self._probing = anyio.Lock()
        async with self._probing:
            if self.current != index:
                return  # moved on meanwhile
            found = await self._answering(avoid=index)
            self._skip(index)
            if found is not None:
                self.current = found

    async def _answering(self, avoid: int) -> int | None:
        """The first member but ``avoid`` to answer a status request with a leader."""
        first: list[int] = []

        async def ask(index: int, done: anyio.CancelScope) -> None:
            if await self._leader_at(index):
                first.append(index)
                done.cancel()

        with anyio.move_on_after(PROBE * 2):
            async with anyio.create_task_group() as tg:
                for index in range(len(self.endpoints)):
                    if index != avoid:
                        tg.start_soon(ask, index, tg.cancel_scope)
        return first[0] if first else None

    def _unavailable(self, what: str, problem: str) -> StoreUnavailable:
        return self.unavailable(f"{what}: {problem}")

    # -- requests --------------------------------------------------------------------------

    async def call(
        self, path: str, body: JSON, *, retry: bool = True, timeout: float | None = None
    ) -> JSON:
        """``body`` to ``path`` (etcd's gateway path: ``kv/txn``…), sent again to the next
        member, for up to ``budget`` seconds, while it provably did not apply, or (``retry``:
        it is idempotent) while no answer came.

        ``timeout``: seconds to wait for one member's answer (default ``request_timeout``).
        """
        await self._authenticated()
        token = self._token
        try:
            return await self._call(path, body, retry, timeout)
        except EtcdError as exc:
            if not token or not stale_token(str(exc)):
                raise self._explained(exc, path) from None
        await self._renew(token)  # refused before it applied: safe to send once more
        try:
            return await self._call(path, body, retry, timeout)
        except EtcdError as exc:
            raise self._explained(exc, path) from None

    def _explained(self, exc: EtcdError, path: str) -> Exception:
        """``exc`` as the caller should see it: a missing login is one clear line."""
        if "user name is empty" in str(exc):
            return self._unavailable(path, "authentication is on: give a user name and password")
        return exc

    async def _call(
        self, path: str, body: JSON, retry: bool, timeout: float | None, login: bool = False
    ) -> JSON:
        """``call`` with the current token (none if ``login``: authenticating)."""
        per_member = timeout or self.request_timeout
        give_up = time.monotonic() + self.budget
        failures = 0
        refused = 0  # consecutive members that refused the connection outright
        tls_failed = 0  # consecutive members whose TLS handshake failed
        probed: set[int] = set()  # members probed for a hidden TLS refusal (once per call)
        rounds = Backoff(0.1, 0.5, jitter=False)  # after each round through every member
        token = "" if login else (self._token or "")
        while True:
            index = self.current
            try:
                return await self._send(index, path, body, per_member, token, probed)
            except Failed as failed:
                problem = failed.problem
                tls_failed = tls_failed + 1 if failed.tls else 0
                if tls_failed >= len(self.endpoints):  # every member: a mistake, not an outage
                    raise self._unavailable(path, problem) from None
                refused = refused + 1 if failed.refused else 0
                if failed.sent and not retry:
                    raise self._unavailable(path, f"{problem} (outcome unknown)") from None
            await self._move_on(index)
            failures += 1
            if refused >= 2 * len(self.endpoints) or time.monotonic() > give_up:
                raise self._unavailable(path, problem)
            if tls_failed:
                continue  # the next member at once: TLS failures are not worth waiting out
            if failures % len(self.endpoints) == 0:  # every member failed once more: back off
                await rounds.sleep()

    # -- TLS -------------------------------------------------------------------------------

    def _hint(self, reason: str) -> str:
        if "alert" in reason and self._tls is not None:
            return f"{reason} (the server refused this client's certificate, or wants one)"
        return reason

    async def _probe(self, index: int) -> str | None:
        """Handshake with member ``index`` and wait briefly for an alert: a TLS failure's
        reason; or, for a plain client, whether the server speaks TLS. None: neither."""
        host, _, port = self.endpoints[index].rpartition(":")
        host = host.strip("[]")
        context = self._tls or _sniffer()
        try:
            with anyio.fail_after(self.connect_timeout + _PROBE_WAIT):
                stream = await anyio.connect_tcp(
                    host,
                    int(port),
                    ssl_context=context,
                    tls_hostname=host,
                    tls_standard_compatible=False,  # no close_notify wait on the way out
                )
                async with stream:
                    with anyio.move_on_after(_PROBE_WAIT):
                        await stream.receive()
        except Exception as exc:  # any failure: only an SSL error in it tells something
            reason = tls_failure(exc)
            if self._tls is not None:
                return self._hint(reason) if reason else None
            return SPEAKS_TLS if reason and "alert" in reason else None
        return None if self._tls is not None else SPEAKS_TLS

    async def _probed(self, index: int, probed: set[int]) -> str | None:
        """`_probe` of member ``index``, once per call (``probed``): None the second time."""
        if index in probed:
            return None
        probed.add(index)
        return await self._probe(index)

    # -- authentication --------------------------------------------------------------------

    async def _authenticated(self) -> None:
        if self._token is None and self._username is not None:
            await self._renew(None)

    async def _renew(self, stale: str | None) -> None:
        """A new token, unless another task replaced ``stale`` meanwhile."""
        if self._auth_lock is None:
            self._auth_lock = anyio.Lock()
        async with self._auth_lock:
            if self._token != stale:
                return
            body = {"name": self._username, "password": self._password}
            log.debug("etcd auth/authenticate as %r", self._username)
            try:
                answer = await self._call("auth/authenticate", body, True, None, login=True)
            except EtcdError as exc:
                if "authentication is not enabled" in str(exc):
                    self._token = ""  # nothing to send; etcd's own client does the same
                    return
                if "authentication failed" in str(exc):
                    where = ", ".join(self.endpoints)
                    raise StoreUnavailable(
                        f"etcd authentication failed for user {self._username!r} at {where}:"
                        " wrong user name or password"
                    ) from None
                raise self._unavailable("auth/authenticate", str(exc)) from None
            self._token = str(answer.get("token") or "")
            self.authentications += 1

    async def _fresh_token(self, stale: str) -> bool:
        """After a watch was refused for ``stale``: whether a new token is there to try."""
        try:
            await self._renew(stale)
        except StoreUnavailable:
            return False  # the caller's next call will say why
        return True

    async def _token_for_watch(self) -> str:
        with contextlib.suppress(StoreUnavailable):  # the caller's next call will say why
            await self._authenticated()
        return self._token or ""


def _sniffer() -> ssl.SSLContext:
    """A context that only finds out whether a server speaks TLS (nothing is sent over it)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # one line
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
