"""The PostgreSQL store: ``postgresql://user@host:5432/db?schema=tenure``.

URL forms: ``postgresql://[user[:password]@]host[:port][,host2[:port2]…][/db][?options]``
(``postgres://`` too). ``schema=NAME`` is tenure's own (default ``tenure``: a plain identifier,
letters, digits and ``_``, at most 63, not ``pg_…``); every other query option is libpq's
(``sslmode``, ``connect_timeout``, ``application_name``, ``passfile``…) and keeps libpq's
meaning, or one of the common connection options (``tenure.stores._connect``), which are mapped
onto libpq's; keyword arguments of ``tenure.connect`` win over the URL's:

=================  ======================================  ====================================
common option      libpq parameter                         note
=================  ======================================  ====================================
``tls=true``       ``sslmode=verify-full``                 always verify the server and its name
``tls=false``      ``sslmode=disable``
``ca=FILE``        ``sslrootcert=FILE``                    implies ``tls=true``
(none)             ``sslrootcert=`` the system's roots     when TLS is on without ``ca``: the
                                                           CA file Python's ``ssl`` uses (so
                                                           every store trusts the same roots;
                                                           ``$SSL_CERT_FILE`` if set), or, if
                                                           it finds none, ``system`` (libpq >=
                                                           16) — psycopg-binary's own OpenSSL
                                                           looks in a directory of its build,
                                                           so that needs ``$SSL_CERT_FILE``
``cert``, ``key``  ``sslcert``, ``sslkey``                 imply ``tls=true``
user info          ``user``, ``password``                  or ``username=``/``password=``
$TENURE_PASSWORD   ``password``                            only if nothing above gives one
=================  ======================================  ====================================

A setting given under both names must agree, else ``InvalidArgument``; so must ``tls`` and
``sslmode`` (``ca``/``cert``/``key`` with a weaker libpq ``sslmode`` than ``verify-full`` keep
that ``sslmode``, except ``disable``, refused). With no password anywhere above, libpq's own
``$PGPASSWORD`` and password file (``$PGPASSFILE``, ``~/.pgpass``, ``passfile=``) apply, as do
its other ``$PG…`` variables. Every file is checked before connecting (one line). A failed
TLS handshake, a wrong CA, a missing client certificate or a wrong password is a one-line
``StoreUnavailable`` with libpq's reason; no message and no ``url`` shows a password or
``sslpassword``. With libpq's names only (no common ones), libpq's defaults stand: e.g.
``sslrootcert`` alone does not verify the host name; ``sslmode=verify-full`` does.

- Tables live in their own schema, created on first use and versioned in its ``meta`` table:
  one application's locks, tokens and records are invisible to another's schema. The name
  is spliced into SQL only through ``psycopg.sql.Identifier``; every value is a parameter.
- Expiry is judged by the server's clock: a session row carries ``expires timestamptz``, set and
  compared with ``clock_timestamp()``, never a client's wall clock. ``keep_alive`` is one UPDATE
  of that row, which renews every lock the session holds (a lock row names its session).
- Every call is one statement, so one round trip, in autocommit (its own transaction): a grant
  (``attempt``), a release, a leave and closing a session call server-side functions created
  with the schema (version 2); each first locks the name's row in ``tokens``, so they are
  serialised per name (why that holds inside one statement: see ``FUNCTIONS``). That row is
  also the fencing counter: it is never deleted, and its increment commits with the grant
  (rule 7), so tokens keep growing across releases and server restarts. A grant that finds the
  holder's session expired locks that session row first: a renewal racing with it either lands
  before (the holder lives) or fails. A grant renews the session it proves alive.
- Waiters queue in ``waiters`` in arrival order. A release looks at the queue only when someone
  is in it; then it hands the lock straight to the first live waiter in its own transaction
  (its token is counted there) and ``NOTIFY``\\ s that waiter's own channel with the place and
  token, delivered on commit: one release wakes one waiter, which checks with one read that
  the lock is still its own and its session alive. Each store listens on one dedicated
  connection; a waiter is live while its session is and while that listening connection is
  (``pg_stat_activity``), so a dead process never holds up the queue. When no notification
  comes, the waiter polls (``Busy.retry_in``: when the holder's lease would expire).
- Lock-delay (rule 8) by the server's clock: a lock whose session expired is not granted until
  ``expires + lock_delay`` (a column of the session). Deleting an expired session row (any
  client's sweep) fires a trigger that keeps its names in ``held`` until then, so no version of
  the sweep can forget them. A release or close by an expired session frees nothing early. No
  NOTIFY marks the end of a delay: a waiter comes back by its ``retry_in`` (the time left).
- Leader election: a lock row has a ``value`` (NULL on each new grant), set by ``proclaim``, one
  function that locks the name's row and checks session, token and expiry. Each change of a
  lock (grant, hand-over, proclaim, release, closing the session) is announced by its function
  with a NOTIFY carrying the state after it (JSON), on a channel per name, but only if a watcher
  is registered in ``watchers``: a NOTIFY serialises the commits of every notifying transaction
  of the server, so unwatched locks do not pay for it. Watches share the listening connection;
  registering locks the name's row too, so no change falls between the state a registration
  sees and the announcements after it. Expiry is not announced (nobody writes it).
- A grant carries a random request id, stored with the lock: sent again after a dead
  connection it gets the same answer, and a grant whose answer never came is released by it.
- Records (``tenure once``) are rows of ``records`` (key, value, version): the key in the "C"
  collation, so its order is the byte order of its UTF-8 and a prefix listing is one index range.
  A write is one statement: an ``INSERT … ON CONFLICT`` (create) or an ``UPDATE … WHERE
  version =`` the version read (replace), which adds 1, committed before the answer. It carries
  a random request id stored with the row, so sent again after a dead connection it finds its
  own write instead of being refused by it.
- psycopg's errors are translated here: ``StoreUnavailable`` (one line, passwords scrubbed).
  A broken connection is dropped and reopened by the next call; nothing is ever renewed on the
  client's behalf, so the session keeper's deadline governs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import ssl
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlunsplit

import anyio

from .._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ._connect import (
    ENV_PASSWORD,
    NO_OPTIONS,
    SECRET_QUERY,
    ConnectOptions,
    check,
    redact,
    scrub,
    url_options,
)
from ._kit import InDoubt, Unavailable, owner_of, parse_url
from ._registry import BY_SCHEME
from ._spi import (
    Busy,
    Capabilities,
    Change,
    Elections,
    Grant,
    HeldBack,
    LockInfo,
    Owner,
    Record,
    Records,
    Session,
    Store,
    Watch,
)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: from_url says so
    psycopg = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection, Notify
    from psycopg.sql import Composed

T = TypeVar("T")
SCHEMA_VERSION = 4
"""1: tables only, every call a multi-statement transaction. 2: adds ``locks.request`` and the
server-side functions below. 3: leader election: ``locks.value``, ``watchers``, and changes
announced by NOTIFY; later, within version 3, the ``records`` table (added on connecting if
missing: a table that older clients never touch). 4: lock-delay: ``sessions.lock_delay``,
``held`` and its trigger. Older schemas are migrated in place (see ``_ensure_schema``)."""
DEFAULT_SCHEMA = "tenure"
CONNECT_TIMEOUT = 5
"""Seconds to wait for a connection, unless the URL sets ``connect_timeout``."""
CALL_TIMEOUT = 10.0
"""Seconds one store call may take before the store is reported unavailable."""
RETRIES = 5
"""Times a call is retried after a deadlock or serialization failure."""
SETUP_LOCK = 0x7465_6E75_7265  # 'tenure': one advisory lock serialises schema creation
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
WAITER_CHANNEL = "tenure_w_"
WATCH_CHANNEL = "tenure_o_"
STORE = "PostgreSQL"
SCHEMES = BY_SCHEME["postgresql"].schemes
COMMON_TO_LIBPQ = {
    "ca": "sslrootcert",
    "cert": "sslcert",
    "key": "sslkey",
    "username": "user",
    "password": "password",
}
"""Each common connection option (``tenure.stores._connect``) and its libpq name."""
LIBPQ_EQUIVALENTS = frozenset((*COMMON_TO_LIBPQ.values(), "sslmode"))

# Why one call is one statement and still atomic and serialised: each function below runs
# as one statement in autocommit, i.e. in a transaction of its own, so it commits or rolls
# back as a whole. It is VOLATILE and plpgsql, and the connection is READ COMMITTED (set at
# connect), so every statement inside it takes a fresh snapshot: after the first one has
# locked the name's row in ``tokens`` (FOR UPDATE, waiting for whoever holds it to commit),
# the following statements see everything that the previous holder of that row lock
# committed. Every call that changes a name's lock or queue (attempt, release, leave,
# close_session) locks that row first, so they are serialised per name exactly as the
# multi-statement transactions of schema version 1 were. (A single CTE could not do this:
# all its parts share the snapshot taken before it waited for the row lock.)
FUNCTIONS = """
-- Grant p_name to session p_id if free and nobody live is ahead of p_seq; else say who holds
-- it and (re)queue. p_request: the caller's id for this grant, so a grant whose answer was lost
-- can be found (repeated: the same answer) and released.
CREATE OR REPLACE FUNCTION {s}.attempt(
    p_id bigint, p_name text, p_seq bigint, p_channel text, p_listener integer,
    p_request bigint,
    OUT r_state text, OUT r_token bigint, OUT r_host text, OUT r_pid integer,
    OUT r_label text, OUT r_expires float8, OUT r_queued bigint, OUT r_seq bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_held boolean;
    v_session bigint;
    v_waiter bigint;
    v_request bigint;
    v_head bigint;
    v_free_at timestamptz;
BEGIN
    PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR UPDATE;
    IF NOT FOUND THEN  -- a new name: its counter starts at 0 and is never deleted
        INSERT INTO {s}.tokens (name, last) VALUES (p_name, 0) ON CONFLICT (name) DO NOTHING;
        PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR UPDATE;
    END IF;
    SELECT l.token, l.session, l.waiter, l.request, s.host, s.pid, s.label,
           extract(epoch FROM s.expires - clock_timestamp())::float8
      INTO r_token, v_session, v_waiter, v_request, r_host, r_pid, r_label, r_expires
      FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session WHERE l.name = p_name;
    v_held := FOUND;
    IF v_held AND r_expires <= 0 THEN
        -- Looks expired: judge again with the holder's session row locked (FOR SHARE), so a
        -- renewal racing with us either committed before (and counts) or waits, then fails.
        SELECT l.token, l.session, l.waiter, l.request, s.host, s.pid, s.label,
               extract(epoch FROM s.expires - clock_timestamp())::float8
          INTO r_token, v_session, v_waiter, v_request, r_host, r_pid, r_label, r_expires
          FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session WHERE l.name = p_name
           FOR SHARE OF s;
        v_held := FOUND;
    END IF;
    v_held := v_held AND r_expires > 0;
    IF v_held AND v_session = p_id AND (v_waiter = p_seq OR v_request = p_request) THEN
        -- Handed to us by a release (our session was renewed by its keeper, not by this call),
        -- or granted by this very request before its answer was lost (renewed then).
        r_state := CASE WHEN v_waiter = p_seq THEN 'handed' ELSE 'granted' END;
        RETURN;
    END IF;
    IF NOT v_held THEN
        -- Lock-delay: a holder whose session expired holds the name back until its expiry
        -- plus its lock_delay; once a sweep deleted that session, its row in held does.
        SELECT max(x.free_at) INTO v_free_at FROM (
            SELECT h.free_at FROM {s}.held h WHERE h.name = p_name
            UNION ALL
            SELECT s.expires + s.lock_delay * interval '1 second'
              FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session WHERE l.name = p_name) x;
    END IF;
    IF NOT v_held AND v_free_at > clock_timestamp() THEN
        -- Held back: no holder to show; r_expires says how long still (queueing goes on).
        r_token := NULL; r_host := NULL; r_pid := NULL; r_label := NULL;
        r_expires := extract(epoch FROM v_free_at - clock_timestamp())::float8;
    ELSIF NOT v_held THEN
        IF EXISTS (SELECT 1 FROM {s}.waiters w WHERE w.name = p_name) THEN
            SELECT w.seq INTO v_head FROM {s}.waiters w JOIN {s}.sessions s ON s.id = w.session
             WHERE w.name = p_name AND s.expires > clock_timestamp()
               AND w.listener IN (SELECT a.pid FROM pg_stat_activity a)
             ORDER BY w.seq LIMIT 1;
        END IF;
        IF v_head IS NULL OR v_head = p_seq THEN
            -- Renew the session (proving it alive by the server's clock), count the token,
            -- take the lock (replacing a row left by an expired holder), leave the queue.
            UPDATE {s}.sessions SET expires = clock_timestamp() + ttl * interval '1 second'
             WHERE id = p_id AND expires > clock_timestamp();
            IF NOT FOUND THEN
                r_state := 'gone';
                RETURN;
            END IF;
            UPDATE {s}.tokens SET last = last + 1 WHERE name = p_name RETURNING last INTO r_token;
            DELETE FROM {s}.held WHERE name = p_name;  -- its delay has passed
            INSERT INTO {s}.locks (name, token, session, waiter, request, value)
                 VALUES (p_name, r_token, p_id, NULL, p_request, NULL)
                 ON CONFLICT (name) DO UPDATE SET token = excluded.token,
                    session = excluded.session, waiter = NULL, request = excluded.request,
                    value = NULL;
            IF p_seq IS NOT NULL THEN
                DELETE FROM {s}.waiters WHERE seq = p_seq;
            END IF;
            PERFORM {s}.announce(p_name);
            r_state := 'granted';
            r_host := NULL; r_pid := NULL; r_label := NULL; r_expires := NULL;
            RETURN;
        END IF;
        -- Free, but a live waiter is ahead: no holder to show.
        r_token := NULL; r_host := NULL; r_pid := NULL; r_label := NULL; r_expires := NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {s}.sessions s
                    WHERE s.id = p_id AND s.expires > clock_timestamp()) THEN
        r_state := 'gone';
        RETURN;
    END IF;
    IF v_held THEN
        SELECT count(*) INTO r_queued FROM {s}.waiters w WHERE w.name = p_name;
    END IF;
    IF p_seq IS NOT NULL THEN
        UPDATE {s}.waiters w SET listener = p_listener WHERE w.seq = p_seq RETURNING w.seq
          INTO r_seq;
        IF NOT FOUND THEN  -- our place was dropped (e.g. swept): queue again at the end
            INSERT INTO {s}.waiters (name, session, channel, listener)
                 VALUES (p_name, p_id, p_channel, p_listener) RETURNING seq INTO r_seq;
        END IF;
    ELSIF p_channel IS NOT NULL THEN
        INSERT INTO {s}.waiters (name, session, channel, listener)
             VALUES (p_name, p_id, p_channel, p_listener) RETURNING seq INTO r_seq;
    END IF;
    r_state := 'busy';
END $$;

-- With p_name's row in tokens locked by the caller, and the lock just freed: drop the dead
-- waiters, grant the lock to the first live one (its token counted here) and NOTIFY that
-- waiter alone, with 'seq token' (delivered on commit, so the grant it names is committed).
CREATE OR REPLACE FUNCTION {s}.hand_over(p_name text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_seq bigint;
    v_session bigint;
    v_channel text;
    v_token bigint;
BEGIN
    DELETE FROM {s}.waiters w WHERE w.name = p_name
       AND (w.listener NOT IN (SELECT a.pid FROM pg_stat_activity a WHERE a.pid IS NOT NULL)
            OR NOT EXISTS (SELECT 1 FROM {s}.sessions s
                            WHERE s.id = w.session AND s.expires > clock_timestamp()));
    DELETE FROM {s}.waiters w
     WHERE w.seq = (SELECT min(x.seq) FROM {s}.waiters x WHERE x.name = p_name)
    RETURNING w.seq, w.session, w.channel INTO v_seq, v_session, v_channel;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE {s}.tokens SET last = last + 1 WHERE name = p_name RETURNING last INTO v_token;
    DELETE FROM {s}.held WHERE name = p_name;  -- only one whose delay has passed
    INSERT INTO {s}.locks (name, token, session, waiter, request, value)
         VALUES (p_name, v_token, v_session, v_seq, NULL, NULL)
         ON CONFLICT (name) DO UPDATE SET token = excluded.token, session = excluded.session,
            waiter = excluded.waiter, request = NULL, value = NULL;
    PERFORM pg_notify(v_channel, v_seq::text || ' ' || v_token::text);
END $$;

-- Delete p_name's lock if session p_id, alive, holds it with p_token (or, for a grant in doubt,
-- by p_request); hand it over only when someone waits. Idempotent. An expired session's lock
-- ended without a release: it stays, holding the name back (lock-delay).
CREATE OR REPLACE FUNCTION {s}.release(
    p_id bigint, p_name text, p_token bigint, p_request bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR UPDATE;
    DELETE FROM {s}.locks l WHERE l.name = p_name AND l.session = p_id
       AND (l.token = p_token OR l.request = p_request)
       AND EXISTS (SELECT 1 FROM {s}.sessions s
                    WHERE s.id = p_id AND s.expires > clock_timestamp());
    IF NOT FOUND THEN
        RETURN false;  -- not ours (any more): nothing to release, nobody to wake
    END IF;
    IF EXISTS (SELECT 1 FROM {s}.waiters w WHERE w.name = p_name) THEN
        PERFORM {s}.hand_over(p_name);
    END IF;
    PERFORM {s}.announce(p_name);  -- freed, or handed over: one change
    RETURN true;
END $$;

-- Leave p_name's queue; a lock handed to us as we gave up is passed on. Idempotent.
CREATE OR REPLACE FUNCTION {s}.leave(p_name text, p_seq bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR UPDATE;
    DELETE FROM {s}.waiters w WHERE w.seq = p_seq;
    DELETE FROM {s}.locks l WHERE l.name = p_name AND l.waiter = p_seq;
    IF FOUND THEN
        PERFORM {s}.hand_over(p_name);
        PERFORM {s}.announce(p_name);
    END IF;
END $$;

-- End session p_id: leave every queue, release every lock (handing each on), delete the row.
-- A session that has expired released nothing: deleting its row holds its names back.
CREATE OR REPLACE FUNCTION {s}.close_session(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_names text[];
    v_name text;
    v_first boolean := true;
BEGIN
    DELETE FROM {s}.sessions s WHERE s.id = p_id AND s.expires <= clock_timestamp();
    IF FOUND THEN  -- (trigger hold_back) then what it left, as a sweep does
        DELETE FROM {s}.waiters w WHERE w.session = p_id;
        DELETE FROM {s}.locks l WHERE l.session = p_id;
        RETURN;
    END IF;
    LOOP
        SELECT array_agg(l.name ORDER BY l.name) INTO v_names
          FROM {s}.locks l WHERE l.session = p_id;
        IF v_names IS NOT NULL THEN  -- in name order, as every call locks at most one name
            PERFORM 1 FROM {s}.tokens t WHERE t.name = ANY(v_names) ORDER BY t.name FOR UPDATE;
        END IF;
        IF v_first THEN  -- after this, no release can hand us another lock
            DELETE FROM {s}.waiters w WHERE w.session = p_id;
            v_first := false;
        END IF;
        EXIT WHEN v_names IS NULL;
        FOR v_name IN DELETE FROM {s}.locks l WHERE l.session = p_id AND l.name = ANY(v_names)
                      RETURNING l.name LOOP
            PERFORM {s}.hand_over(v_name);
            PERFORM {s}.announce(v_name);
        END LOOP;
    END LOOP;
    DELETE FROM {s}.sessions WHERE id = p_id;
END $$;

-- Leader election (version 3). Tell p_name's watchers its state now: a JSON object of token,
-- value, host, pid, label and expires, empty when free; delivered on commit, in commit order.
-- Only if someone watches: a NOTIFY serialises the commits of all notifying transactions of
-- the server. A payload over NOTIFY's 8000 bytes (a long value) goes in numbered parts:
-- '+<i> ' before each but the last, '$<i> ' before the last (numbered, as NOTIFY drops
-- duplicates within a transaction).
CREATE OR REPLACE FUNCTION {s}.announce(p_name text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_channel text;
    v_payload text;
    v_parts integer;
BEGIN
    FOR v_channel IN SELECT DISTINCT w.channel FROM {s}.watchers w WHERE w.name = p_name LOOP
        IF v_payload IS NULL THEN
            SELECT json_build_object('token', l.token, 'value', l.value, 'host', s.host,
                       'pid', s.pid, 'label', s.label,
                       'expires', extract(epoch FROM s.expires - clock_timestamp())::float8)
              INTO v_payload
              FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session WHERE l.name = p_name;
            v_payload := coalesce(v_payload, '{{}}');  -- free: an empty object
            v_parts := ceil(length(v_payload) / 1900.0);  -- 1900 characters < 7600 bytes
        END IF;
        IF octet_length(v_payload) < 7900 THEN
            PERFORM pg_notify(v_channel, v_payload);
        ELSE
            FOR i IN 1..v_parts LOOP
                PERFORM pg_notify(v_channel, CASE WHEN i < v_parts THEN '+' ELSE '$' END
                    || i || ' ' || substr(v_payload, 1900 * (i - 1) + 1, 1900));
            END LOOP;
        END IF;
    END LOOP;
END $$;

-- Set p_name's value if session p_id, alive, holds it with p_token, and announce it. The
-- name's row is locked first, like every change (see watch).
CREATE OR REPLACE FUNCTION {s}.proclaim(
    p_id bigint, p_name text, p_token bigint, p_value text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR UPDATE;
    UPDATE {s}.locks l SET value = p_value
     WHERE l.name = p_name AND l.token = p_token AND l.session = p_id
       AND EXISTS (SELECT 1 FROM {s}.sessions s
                    WHERE s.id = p_id AND s.expires > clock_timestamp());
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM {s}.announce(p_name);
    RETURN true;
END $$;

-- Register the backend p_listener, LISTENing on p_channel, as a watcher of p_name; return
-- the lock's state now, then NOTIFY p_mark on the channel. With the name's row locked (shared)
-- as every change locks it (exclusive), each change either committed before, and is in the
-- state returned and announced before the mark, or sees this row and is announced after it.
CREATE OR REPLACE FUNCTION {s}.watch(
    p_name text, p_channel text, p_listener integer, p_mark text,
    OUT r_token bigint, OUT r_value text, OUT r_host text, OUT r_pid integer,
    OUT r_label text, OUT r_expires float8)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR SHARE;
    IF NOT FOUND THEN
        INSERT INTO {s}.tokens (name, last) VALUES (p_name, 0) ON CONFLICT (name) DO NOTHING;
        PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR SHARE;
    END IF;
    DELETE FROM {s}.watchers w  -- left by listeners that are gone (they would cost NOTIFYs)
     WHERE w.name = p_name
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.listener);
    INSERT INTO {s}.watchers (name, listener, channel) VALUES (p_name, p_listener, p_channel)
        ON CONFLICT (name, listener) DO NOTHING;
    SELECT l.token, l.value, s.host, s.pid, s.label,
           extract(epoch FROM s.expires - clock_timestamp())::float8
      INTO r_token, r_value, r_host, r_pid, r_label, r_expires
      FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
     WHERE l.name = p_name AND s.expires > clock_timestamp();
    PERFORM pg_notify(p_channel, json_build_object('mark', p_mark)::text);
END $$;

-- Lock-delay (version 4). A session row deleted after it expired (by any client's sweep, or a
-- late close) ended without a release: each name it still holds is held back until its
-- expiry plus its lock_delay, by the server's clock. A trigger, so that no deleter forgets it.
CREATE OR REPLACE FUNCTION {s}.hold_back() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO {s}.held AS h (name, token, free_at)
    SELECT l.name, l.token, OLD.expires + OLD.lock_delay * interval '1 second'
      FROM {s}.locks l
     WHERE l.session = OLD.id AND OLD.expires <= clock_timestamp()
       AND OLD.expires + OLD.lock_delay * interval '1 second' > clock_timestamp()
    ON CONFLICT (name) DO UPDATE SET token = excluded.token,
        free_at = greatest(h.free_at, excluded.free_at);
    RETURN OLD;
END $$;
DROP TRIGGER IF EXISTS sessions_hold_back ON {s}.sessions;
CREATE TRIGGER sessions_hold_back BEFORE DELETE ON {s}.sessions
    FOR EACH ROW EXECUTE FUNCTION {s}.hold_back();
"""

RECORDS = """
CREATE TABLE IF NOT EXISTS {s}.records (
    key text COLLATE "C" PRIMARY KEY, value text NOT NULL, version bigint NOT NULL,
    request bigint);
"""
# records.request: the request id of the write that set the version (see write_record).

SCHEMA = (
    """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.sessions (
    id bigserial PRIMARY KEY, expires timestamptz NOT NULL, ttl float8 NOT NULL,
    host text NOT NULL, pid integer NOT NULL, label text NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_expires ON {s}.sessions (expires);
ALTER TABLE {s}.sessions ADD COLUMN IF NOT EXISTS lock_delay float8 NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS {s}.held (
    name text PRIMARY KEY, token bigint NOT NULL, free_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.tokens (name text PRIMARY KEY, last bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.locks (
    name text PRIMARY KEY, token bigint NOT NULL, session bigint NOT NULL, waiter bigint);
ALTER TABLE {s}.locks ADD COLUMN IF NOT EXISTS request bigint;
ALTER TABLE {s}.locks ADD COLUMN IF NOT EXISTS value text;
CREATE INDEX IF NOT EXISTS locks_session ON {s}.locks (session);
CREATE TABLE IF NOT EXISTS {s}.waiters (
    seq bigserial PRIMARY KEY, name text NOT NULL, session bigint NOT NULL,
    channel text NOT NULL, listener integer NOT NULL);
CREATE INDEX IF NOT EXISTS waiters_name ON {s}.waiters (name, seq);
CREATE INDEX IF NOT EXISTS waiters_session ON {s}.waiters (session);
CREATE TABLE IF NOT EXISTS {s}.watchers (
    name text NOT NULL, listener integer NOT NULL, channel text NOT NULL,
    PRIMARY KEY (name, listener));
"""
    + RECORDS
    + FUNCTIONS
    + """
INSERT INTO {s}.meta (key, value) VALUES ('schema', '4')
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;
"""
)

QUERIES = {
    "version": "SELECT value FROM {s}.meta WHERE key = 'schema'",
    # By name, as parameters (not to_regclass of a text, which would fold case).
    "has_table": (
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables"
        " WHERE schemaname = %(schema)s AND tablename = %(table)s)"
    ),
    "records": RECORDS,
    # Forget expired sessions (counters stay; trigger hold_back keeps what lock-delay holds
    # back) and ended delays, and open ours.
    "open": (
        "WITH dead AS (DELETE FROM {s}.sessions WHERE expires <= clock_timestamp() RETURNING id),"
        " w AS (DELETE FROM {s}.waiters WHERE session IN (SELECT id FROM dead)),"
        " l AS (DELETE FROM {s}.locks WHERE session IN (SELECT id FROM dead)),"
        " h AS (DELETE FROM {s}.held WHERE free_at <= clock_timestamp())"
        " INSERT INTO {s}.sessions (expires, ttl, host, pid, label, lock_delay)"
        " VALUES (clock_timestamp() + %(ttl)s * interval '1 second',"
        " %(ttl)s, %(host)s, %(pid)s, %(label)s, %(lock_delay)s) RETURNING id"
    ),
    "renew": (
        "UPDATE {s}.sessions SET expires = clock_timestamp() + ttl * interval '1 second'"
        " WHERE id = %(id)s AND expires > clock_timestamp()"
    ),
    "attempt": (
        "SELECT * FROM {s}.attempt(%(id)s::bigint, %(name)s::text, %(seq)s::bigint,"
        " %(channel)s::text, %(listener)s::integer, %(request)s::bigint)"
    ),
    # A waiter told by NOTIFY that it was handed the lock: still ours, session alive?
    "handed": (
        "SELECT 1 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session"
        " WHERE l.name = %(name)s AND l.token = %(token)s AND l.session = %(id)s"
        " AND l.waiter = %(seq)s AND s.expires > clock_timestamp()"
    ),
    "release": (
        "SELECT {s}.release(%(id)s::bigint, %(name)s::text, %(token)s::bigint, %(request)s::bigint)"
    ),
    "leave": "SELECT {s}.leave(%(name)s::text, %(seq)s::bigint)",
    "proclaim": (
        "SELECT {s}.proclaim(%(id)s::bigint, %(name)s::text, %(token)s::bigint, %(value)s::text)"
    ),
    "watch": (
        "SELECT * FROM {s}.watch(%(name)s::text, %(channel)s::text, %(listener)s::integer,"
        " %(mark)s::text)"
    ),
    "unwatch": (
        "DELETE FROM {s}.watchers"
        " WHERE name = %(name)s AND listener = ANY(%(listeners)s::integer[])"
    ),
    "close": "SELECT {s}.close_session(%(id)s::bigint)",
    "read_record": "SELECT value, version FROM {s}.records WHERE key = %(key)s",
    # Create; a row left by this very request (sent again after a dead connection) is written
    # again as it is and answered again; any other row refuses it.
    "create_record": (
        "INSERT INTO {s}.records AS r (key, value, version, request)"
        " VALUES (%(key)s, %(value)s, 1, %(request)s)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        " WHERE r.version = 1 AND r.request = excluded.request"
        " RETURNING r.version"
    ),
    # Replace at the version read; or answer again a replacement made by this very request.
    "replace_record": (
        "UPDATE {s}.records SET value = %(value)s, version = %(version)s::bigint + 1,"
        " request = %(request)s"
        " WHERE key = %(key)s AND (version = %(version)s::bigint"
        " OR (version = %(version)s::bigint + 1 AND request = %(request)s))"
        " RETURNING version"
    ),
    "list_records": (
        "SELECT key, value, version FROM {s}.records WHERE starts_with(key, %(prefix)s)"
        ' ORDER BY key COLLATE "C"'
    ),
    "locks": (
        "SELECT l.name, l.token, s.host, s.pid, s.label,"
        " extract(epoch FROM s.expires - clock_timestamp())::float8,"
        " (SELECT count(*) FROM {s}.waiters w WHERE w.name = l.name), l.value"
        " FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session"
        " WHERE s.expires > clock_timestamp() AND (%(name)s::text IS NULL OR l.name = %(name)s)"
        " ORDER BY l.name"
    ),
    # As attempt judges it: a swept session's names in held, an unswept one's lock row.
    "held_back": (
        "SELECT DISTINCT ON (x.name) x.name, x.token,"
        " extract(epoch FROM x.free_at - clock_timestamp())::float8"
        " FROM (SELECT h.name, h.token, h.free_at FROM {s}.held h"
        " UNION ALL SELECT l.name, l.token, s.expires + s.lock_delay * interval '1 second'"
        " FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session"
        " WHERE s.expires <= clock_timestamp()) x"
        " WHERE x.free_at > clock_timestamp() AND (%(name)s::text IS NULL OR x.name = %(name)s)"
        " ORDER BY x.name, x.free_at DESC"
    ),
}


@dataclass
class PostgresSession(Session):
    id: int
    ttl: float


Call = Callable[["AsyncConnection[Any]"], Awaitable[T]]
"""What `Commands.run` runs: one statement on the command connection."""
Row = tuple[Any, ...] | None


async def one(conn: AsyncConnection[Any], query: Composed, params: dict[str, Any]) -> Row:
    """``query``'s first row (None if it returns none)."""
    cur = await conn.execute(query, params)
    return await cur.fetchone() if cur.description is not None else None


def statement(query: Composed, params: dict[str, Any]) -> Call[Row]:
    """``query`` with ``params`` as a call for `Commands.run`: its first row."""

    async def call(conn: AsyncConnection[Any]) -> Row:
        return await one(conn, query, params)

    return call


# -- the transport ---------------------------------------------------------------------------


class Transport:
    """How the store reaches its server: libpq's connection string (everything in it: host,
    TLS, credentials, libpq's options), and the one-line error of a failure."""

    def __init__(self, dsn: str, shown: str | None = None) -> None:
        """``dsn``: libpq's connection string (or URL); ``shown``: the URL to show, redacted
        here."""
        self.dsn = dsn
        self.shown = redact(shown if shown is not None else dsn)
        self.unavailable = Unavailable(
            f"{STORE} store {self.shown}", _secrets_in(dsn), CALL_TIMEOUT
        )
        self._add_connect_timeout = "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn)

    async def connect(self) -> AsyncConnection[Any]:
        """A new connection, in autocommit, within ``connect_timeout`` (`CONNECT_TIMEOUT` unless
        the URL sets one). psycopg's errors come out as they are."""
        if self._add_connect_timeout:
            return await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            )
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)


class Commands:
    """The store's command connection: one call at a time, each one statement in autocommit;
    reopened (and set up: ``setup``) when broken; owed cleanups first."""

    def __init__(
        self, transport: Transport, setup: Callable[[AsyncConnection[Any]], Awaitable[None]]
    ) -> None:
        self.transport = transport
        self._setup = setup
        self._lock = anyio.Lock()  # one command at a time on the command connection
        self.conn: AsyncConnection[Any] | None = None
        self.owed: InDoubt[Call[object]] = InDoubt()
        """Releases and leaves whose outcome is in doubt (the store went away): done again,
        idempotently, one statement each, before the next call, so no lock stays held by
        nobody."""

    async def _connection(self) -> AsyncConnection[Any]:
        conn = self.conn
        if conn is not None and not conn.closed:
            return conn
        self.conn = None
        conn = await self.transport.connect()
        try:
            # Every call relies on READ COMMITTED (see FUNCTIONS), whatever the server's
            # default; a client paused inside a transaction must not hold a name's row for long.
            await conn.execute(
                "SET default_transaction_isolation = 'read committed';"
                " SET idle_in_transaction_session_timeout = 10000"
            )
            await self._setup(conn)
        except BaseException:
            await conn.close()
            raise
        self.conn = conn
        return conn

    async def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    async def run(self, fn: Call[T]) -> T:
        """Run ``fn(conn)`` on the command connection (reopened if needed).

        ``fn`` is one statement, in autocommit: its own transaction, one round trip. Every one
        is idempotent (a grant by its request id), so one that failed as a reused connection
        turned out dead (e.g. the server restarted) is sent once more on a fresh one; deadlocks
        and serialization failures (rolled back whole) are retried too. Owed cleanups go first.
        psycopg's errors come out as ``StoreUnavailable``; a call that fails or is interrupted
        drops the connection, so the next call starts from a fresh one in a known state.
        """
        async with self._lock:
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    reused = self.conn is not None
                    conn = await self._connection()
                    retries = 0
                    while True:
                        try:
                            while self.owed:
                                cleanup = next(iter(self.owed))
                                await cleanup(conn)
                                self.owed.discard(cleanup)
                            return await fn(conn)
                        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                            # Not Backoff: a few fixed, short steps, then the error.
                            if retries == RETRIES:
                                raise
                            retries += 1
                            await anyio.sleep(0.001 * 2**retries)
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            await self.drop()
                            reused = False
                            conn = await self._connection()
            except StoreUnavailable:
                raise
            except (psycopg.Error, TimeoutError, OSError) as exc:
                await self.drop()
                raise self.transport.unavailable.of(exc) from exc
            except BaseException:
                await self.drop()
                raise

    async def fetch(self, query: Composed, params: dict[str, Any]) -> Row:
        """``query``'s first row, run as one call."""
        return await self.run(statement(query, params))


async def ensure_schema(
    conn: AsyncConnection[Any],
    schema: str,
    q: Mapping[str, Composed],
    setup: Composed,
    unavailable: Unavailable,
) -> None:
    """Create the schema, or migrate version 1 in place; refuse a newer version.

    Version 1 -> 2 adds a nullable column and the functions, nothing else: a client of
    version 1 still connected keeps working beside version 2 (same tables, same per-name
    row lock; it ignores the NOTIFY payload), and a version-1 client connecting afterwards
    is refused by its own version check. Version 2 -> 3 adds a nullable column, a table and
    functions, and replaces the bodies of the others, keeping their signatures: a version-2
    client still connected keeps working (its changes are announced too); one connecting
    afterwards is refused. The ``records`` table came later within version 3 (a table that
    no older client touches, so the version stays): it is created here if it is missing.
    Version 3 -> 4 (lock-delay) adds a column with a default, a table and a trigger, and
    replaces function bodies, keeping their signatures: a version-3 client still connected
    keeps working and is held back like any other (the functions and the trigger judge);
    its own sessions have no lock-delay.
    """

    async def version() -> int:
        row = await (await conn.execute(q["version"])).fetchone()
        return int(row[0]) if row is not None else 0

    def table(name: str) -> dict[str, str]:
        return {"schema": schema, "table": name}

    try:
        found = await version()
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
        found = 0
    if found < SCHEMA_VERSION:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
            has_meta = await one(conn, q["has_table"], table("meta"))
            found = await version() if has_meta and has_meta[0] else 0
            if found < SCHEMA_VERSION:
                await conn.execute(setup)
        found = await version()
    if found != SCHEMA_VERSION:
        raise unavailable(
            f"schema {schema!r} has version {found}, this tenure knows version {SCHEMA_VERSION}"
        )
    has_records = await one(conn, q["has_table"], table("records"))
    if not (has_records and has_records[0]):
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
            await conn.execute(q["records"])


# -- the listening connection ----------------------------------------------------------------


class Waiter(Protocol):
    """Who sleeps in `Listener.sleep`: a waiter's ticket, or a watch."""

    event: anyio.Event

    @property
    def woken(self) -> bool: ...


class Route(Protocol):
    """Where the notifications of one channel go."""

    def notified(self, payload: str) -> None: ...

    def reconnected(self) -> None:
        """A new listening connection replaced one that broke: what was in flight is gone."""

    def dropped(self) -> None:
        """The listening connection is gone: nothing is heard until one listens again."""


@dataclass(eq=False)
class Ticket:
    """A place in the queue, and the channel its wake-up comes on."""

    name: str
    seq: int
    channel: str
    listener: int
    """Backend pid of the listening connection named in the queue row."""
    woken: bool = False
    handed: int | None = None
    """The token a release handed us, as its NOTIFY said (committed: NOTIFY comes on commit)."""
    event: anyio.Event = field(default_factory=anyio.Event, repr=False)

    def notified(self, payload: str) -> None:
        """``payload`` is 'seq token' of the hand-over: ours if the seq is our place."""
        seq, _, token = payload.partition(" ")
        if seq == str(self.seq) and token.isdigit():
            self.handed = int(token)
        self.woken = True
        self.event.set()

    def reconnected(self) -> None:
        pass

    def dropped(self) -> None:
        pass  # a waiter polls meanwhile (its retry time), until attempt listens again


class Listener:
    """The store's one listening connection (LISTEN/NOTIFY), shared by its waiters and
    watches: each channel's notifications go to its `Route`.

    Whichever sleeper finds nobody reading becomes the reader and passes on the others'
    notifications; LISTEN and UNLISTEN take the connection from the reader for a moment.
    ``connect`` opens a connection; ``unavailable`` makes the error of a failure.
    """

    def __init__(
        self, connect: Callable[[], Awaitable[AsyncConnection[Any]]], unavailable: Unavailable
    ) -> None:
        self._connect = connect
        self._unavailable = unavailable
        self._lock = anyio.Lock()  # LISTEN and reading notifications take turns
        self.conn: AsyncConnection[Any] | None = None
        self.pid = 0
        """Backend pid of the listening connection (a queue row names it)."""
        self.generation = 0
        """Counts listening connections: a watch knows the one it listens on."""
        self._listening: set[str] = set()  # channels LISTENed on the current connection
        self._routes: dict[str, Route] = {}  # channel -> who hears it
        self._claimed: set[str] = set()  # channels picked by an attempt not yet returned
        self._early: dict[str, str] = {}  # channel -> a payload that came before its route
        self._waiting: set[Waiter] = set()  # inside sleep()
        self._reader: Waiter | None = None  # reading notifications for all
        self._reading: anyio.CancelScope | None = None
        self._pending = 0
        self.notifications = 0
        """Notifications received (a release wakes one waiter: one notification)."""

    # -- who hears what ----------------------------------------------------------------------

    def route(self, channel: str, to: Route) -> None:
        """From now on, ``channel``'s notifications go to ``to`` (one that came early too)."""
        self._routes[channel] = to
        early = self._early.pop(channel, None)
        if early is not None:  # its NOTIFY came before we got here
            to.notified(early)

    def unroute(self, channel: str, route: Route | None = None) -> None:
        """``channel``'s notifications go nowhere any more (if ``route``: only if to it)."""
        if route is None or self._routes.get(channel) is route:
            self._routes.pop(channel, None)
        self._early.pop(channel, None)

    def routed(self, channel: str) -> Route | None:
        return self._routes.get(channel)

    def routes(self) -> list[tuple[str, Route]]:
        return list(self._routes.items())

    def claim(self, channel: str) -> None:
        """Keep what comes on ``channel`` until it is routed (its attempt has not returned)."""
        self._claimed.add(channel)

    def unclaim(self, channel: str) -> None:
        self._claimed.discard(channel)

    def spare_channel(self, *, listened_only: bool) -> str | None:
        """A waiter's channel already listened on and free; else a new one (None if
        ``listened_only``)."""
        conn = self.conn
        if conn is not None and not conn.closed:
            for channel in self._listening:
                if (
                    channel.startswith(WAITER_CHANNEL)
                    and channel not in self._routes
                    and channel not in self._claimed
                ):
                    return channel
        return None if listened_only else f"{WAITER_CHANNEL}{uuid.uuid4().hex}"

    def lost(self, generation: int) -> bool:
        """Whether the connection of ``generation`` is gone (or replaced: not listening)."""
        conn = self.conn
        return conn is None or conn.closed or generation != self.generation

    # -- listening ---------------------------------------------------------------------------

    async def listen(self, channel: str) -> int:
        """LISTEN on ``channel`` (connecting the listener if needed); its backend pid."""
        conn = self.conn
        if conn is not None and not conn.closed and channel in self._listening:
            return self.pid
        self._pending += 1
        try:
            if self._reading is not None:
                self._reading.cancel()  # the reader gives the connection up for a moment
            async with self._lock:
                with anyio.fail_after(CALL_TIMEOUT):
                    conn = self.conn
                    reused = conn is not None and not conn.closed
                    while True:
                        if conn is None or conn.closed:
                            self._listening = set()
                            for route in list(self._routes.values()):
                                route.reconnected()
                            conn = await self._connect()
                            self.conn = conn
                            self.pid = conn.info.backend_pid
                            self.generation += 1
                        listen = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
                        try:
                            await conn.execute(listen)
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            self.drop(conn)  # died while idle: once more, afresh
                            conn, reused = None, False
                            continue
                        self._listening.add(channel)
                        return self.pid
        except (psycopg.Error, TimeoutError, OSError) as exc:
            if conn is not None:
                self.drop(conn)
            raise self._unavailable.of(exc) from exc
        finally:
            self._pending -= 1

    async def unlisten(self, channel: str) -> None:
        conn = self.conn
        if conn is None or conn.closed or channel not in self._listening:
            return
        self._pending += 1
        try:
            if self._reading is not None:
                self._reading.cancel()  # the reader gives the connection up for a moment
            async with self._lock:
                if conn is self.conn and not conn.closed:
                    with anyio.fail_after(CALL_TIMEOUT):
                        await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
                    self._listening.discard(channel)
        except (psycopg.Error, TimeoutError, OSError):
            self.drop(conn)
        finally:
            self._pending -= 1

    def drop(self, conn: AsyncConnection[Any]) -> None:
        """Give ``conn`` up (if it is the listening connection: nothing listens now)."""
        if self.conn is conn:
            self.conn = None
            self._listening = set()
            for route in list(self._routes.values()):
                route.dropped()
        if not conn.closed:
            conn.pgconn.finish()  # what AsyncConnection.close() does, without awaiting

    def close(self) -> None:
        if self.conn is not None:
            self.drop(self.conn)

    # -- sleeping --------------------------------------------------------------------------

    async def sleep(self, waiter: Waiter, timeout: float) -> None:
        """Until ``waiter`` is woken (a waiter's or a watch's notification), or ``timeout``.
        If the listener is broken this is plain sleep: polling, until one listens again."""
        self._waiting.add(waiter)
        try:
            with anyio.move_on_after(timeout):
                while not waiter.woken:
                    conn = self.conn
                    if self._reader is None and conn is not None and not conn.closed:
                        await self._read_until(waiter, conn)
                    else:
                        await waiter.event.wait()
                        waiter.event = anyio.Event()
        finally:
            self._waiting.discard(waiter)
            if self._reader is None:
                for other in self._waiting:  # let another one take over the reading
                    other.event.set()
                    break

    async def _read_until(self, waiter: Waiter, conn: AsyncConnection[Any]) -> None:
        self._reader = waiter
        try:
            async with self._lock:
                if conn is not self.conn:
                    return
                with anyio.CancelScope() as scope:
                    self._reading = scope
                    if self._pending:
                        scope.cancel()  # someone needs the connection for LISTEN first
                    try:
                        while not waiter.woken:
                            # Whole batches (psycopg >= 3.2): leaving notifies() within one
                            # drops the rest of it, and a watch must see every announcement.
                            notes = conn.notifies(stop_after=1)
                            async with contextlib.aclosing(notes):
                                async for note in notes:
                                    self._dispatch(note)
                    finally:
                        self._reading = None
        except (psycopg.Error, OSError):
            self.drop(conn)  # waiters poll until attempt listens again
        finally:
            self._reader = None

    def _dispatch(self, note: Notify) -> None:
        self.notifications += 1
        route = self._routes.get(note.channel)
        if route is not None:
            route.notified(note.payload)
        elif note.channel in self._claimed:
            self._early[note.channel] = note.payload  # its attempt has not returned yet


# -- watches ---------------------------------------------------------------------------------


def watch_channel(schema: str, name: str) -> str:
    """The channel of ``name``'s announcements (a channel is an identifier: <= 63 bytes)."""
    digest = hashlib.sha256(f"{schema}\0{name}".encode()).hexdigest()
    return WATCH_CHANNEL + digest[:32]


class Announcements:
    """The `Route` of one name's channel: its open watches on this store, and the parts of a
    long announcement (see the ``announce`` function)."""

    def __init__(self, name: str, channel: str) -> None:
        self.name = name
        self.channel = channel
        self.watches: list[PostgresWatch] = []
        self._parts: list[str] = []

    def notified(self, payload: str) -> None:
        """Queue the change that ``payload`` announces."""
        if payload.startswith(("+", "$")):  # one part of a long one
            piece = payload.partition(" ")[2]
            if payload[0] == "+":
                self._parts.append(piece)
                return
            payload, self._parts = "".join(self._parts) + piece, []
        try:
            data = json.loads(payload)
            if "mark" in data:
                for watch in self.watches:
                    if watch.mark == data["mark"]:
                        watch.mark, watch.mark_at = None, len(watch.changes)
                return
            holder = None
            if "token" in data:
                value = data["value"]
                holder = LockInfo(
                    self.name, int(data["token"]), owner_of(data), float(data["expires"]), 0, value
                )
        except (ValueError, TypeError, KeyError):
            return  # not ours: anyone may NOTIFY any channel
        for watch in self.watches:
            if watch.mark is None:
                watch.changes.append(Change(watch.name, holder))
                watch.event.set()

    def reconnected(self) -> None:
        self._parts.clear()  # the rest of those will never come

    def dropped(self) -> None:
        self._parts.clear()
        for watch in self.watches:
            watch.event.set()  # to listen again and report the state (see next)


class PostgresWatch(Watch):
    """The changes of one name, announced on its channel to the store's listening connection.

    If that connection is lost or replaced, ``next`` listens and registers again and reports the
    state then as one change (the changes missed meanwhile are summed up in it, not each
    reported); while it cannot, ``next`` raises ``StoreUnavailable``.
    """

    def __init__(
        self,
        announcements: Announcements,
        listener: Listener,
        commands: Commands,
        q: Mapping[str, Composed],
    ) -> None:
        self._announcements = announcements
        self._listener = listener
        self._commands = commands
        self._q = q
        self.name = announcements.name
        self.channel = announcements.channel
        self.changes: list[Change] = []
        self.mark: str | None = ""
        """Our registration's own NOTIFY, until it comes: what comes before it is older."""
        self.mark_at = 0
        """Where in ``changes`` our mark came: the state read by the registration goes there."""
        self.pid = 0
        """Backend pid of the listening connection we registered."""
        self.generation = -1
        """Of the listening connection we listen on (see `Listener.listen`)."""
        self.closed = False
        self.event = anyio.Event()

    @property
    def woken(self) -> bool:
        return bool(self.changes) or self._listener.lost(self.generation)

    async def subscribe(self, *, report: bool) -> None:
        """Listen and register (see the ``watch`` function): changes after that are announced.
        If ``report``, queue the state then as one change, where it belongs: before what is
        announced after our mark."""
        self.mark = ""  # nothing counts until our new mark comes
        pid = await self._listener.listen(self.channel)
        generation = self._listener.generation

        async def register(conn: AsyncConnection[Any]) -> Row:
            self.mark = uuid.uuid4().hex  # a new one if sent again
            params = {
                "name": self.name,
                "channel": self.channel,
                "listener": pid,
                "mark": self.mark,
            }
            return await one(conn, self._q["watch"], params)

        row = await self._commands.run(register)
        assert row is not None
        self.pid, self.generation = pid, generation
        if report:
            token, value, host, pid, label, expires_in = row
            holder = None
            if token is not None:
                holder = LockInfo(
                    self.name, int(token), Owner(host, pid, label), expires_in, 0, value
                )
            at = len(self.changes) if self.mark is not None else self.mark_at
            self.changes.insert(at, Change(self.name, holder))

    async def next(self, timeout: float) -> list[Change]:
        deadline = anyio.current_time() + timeout
        while not self.closed:
            if not self.changes and self._listener.lost(self.generation):
                await self.subscribe(report=True)  # queues a change, or raises
            remaining = deadline - anyio.current_time()
            if self.changes or remaining <= 0:
                break
            await self._listener.sleep(self, remaining)
        changes, self.changes = self.changes, []
        return changes

    async def aclose(self) -> None:
        """Stop listening and unregister once the name's last watch here closes (best effort:
        what is left is dropped when the listening connection ends)."""
        if self.closed:
            return
        self.closed = True
        self.event.set()
        watches = self._announcements.watches
        if self in watches:
            watches.remove(self)
        if watches:
            return  # others here still watch the name
        self._listener.unroute(self.channel, self._announcements)
        await self._listener.unlisten(self.channel)
        listeners = [self.pid, self._listener.pid]
        unwatch = statement(self._q["unwatch"], {"name": self.name, "listeners": listeners})
        with contextlib.suppress(StoreUnavailable):
            await self._commands.run(unwatch)


# -- the store -------------------------------------------------------------------------------


class PostgresStore(Store, Elections, Records):
    scheme: ClassVar[str] = "postgresql"
    capabilities: ClassVar[Capabilities] = Capabilities(
        grade="correctness",
        machines="many",
        durable_tokens=True,
        store_judges_expiry=True,
        fair=True,
        native_wait=True,
        notes="expiry and lock-delay by the server's clock; waiters woken by LISTEN/NOTIFY"
        " (at the end of a lock-delay, by their retry time)",
    )

    def __init__(self, dsn: str, schema: str = DEFAULT_SCHEMA, shown: str | None = None) -> None:
        """``dsn``: libpq's connection string (or URL), everything in it; ``shown``: the URL
        to show, redacted here."""
        self.transport = Transport(dsn, shown)
        self.schema = schema
        ident = sql.Identifier(schema)
        self._q: dict[str, Composed] = {k: sql.SQL(v).format(s=ident) for k, v in QUERIES.items()}
        setup = sql.SQL(SCHEMA).format(s=ident)
        self.commands = Commands(
            self.transport,
            partial(
                ensure_schema,
                schema=schema,
                q=self._q,
                setup=setup,
                unavailable=self.transport.unavailable,
            ),
        )
        self.listener = Listener(self.transport.connect, self.transport.unavailable)

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> PostgresStore:
        """``postgresql://[user[:password]@]host[:port][/db][?schema=NAME&options]``: the
        common connection options (``tls``, ``ca``, ``cert``, ``key``, user info; keywords
        over the URL's) become libpq's; libpq's own parameters pass through (module doc)."""
        if psycopg is None:
            raise InvalidArgument(
                "the PostgreSQL store needs psycopg: pip install 'tenure[postgres]'"
            )
        dsn, schema = conninfo(url, options)
        return cls(dsn, schema, shown=url)

    @property
    def url(self) -> str:
        return self.transport.shown

    @property
    def notifications(self) -> int:
        """Notifications received (a release wakes one waiter: one notification)."""
        return self.listener.notifications

    @property
    def _dsn(self) -> str:  # read by testing/chaos/guards.py, until it uses connect() and holds()
        return self.transport.dsn

    def _call(self, query: str, params: dict[str, Any]) -> Call[Row]:
        return statement(self._q[query], params)

    async def _fetch(self, query: str, params: dict[str, Any]) -> Row:
        return await self.commands.fetch(self._q[query], params)

    # -- sessions ------------------------------------------------------------------------

    async def open_session(self, ttl: float, owner: Owner, lock_delay: float = 0.0) -> Session:
        # Repeated after a dead connection, it would leave an empty session that expires.
        params = {
            "ttl": ttl,
            "host": owner.host,
            "pid": owner.pid,
            "label": owner.label,
            "lock_delay": lock_delay,
        }
        row = await self._fetch("open", params)
        assert row is not None
        return PostgresSession(int(row[0]), ttl)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, PostgresSession)

        async def renew(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(self._q["renew"], {"id": session.id})
            return cur.rowcount == 1

        return await self.commands.run(renew)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, PostgresSession)
        await self._fetch("close", {"id": session.id})

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        """One round trip: the ``attempt`` function, or, for a waiter whose NOTIFY said it was
        handed the lock, one read that the lock is still its own and its session alive."""
        assert isinstance(session, PostgresSession)
        assert ticket is None or isinstance(ticket, Ticket)
        listener = self.listener
        mine = ticket
        if mine is not None and mine.handed is not None:
            token, mine.handed = mine.handed, None
            params = {"id": session.id, "name": name, "token": token, "seq": mine.seq}
            if await self._fetch("handed", params) is not None:
                listener.unroute(mine.channel)  # granted: the channel is spare again
                return Grant(token=token, renewed_session=False)
            # else: lost meanwhile (our session expired?): the full attempt says what now
        channel: str | None = None
        backend = 0
        if mine is not None:
            backend = await listener.listen(mine.channel)  # again, if the listener reconnected
        elif enqueue:
            channel = listener.spare_channel(listened_only=True)
            if channel is not None:
                listener.claim(channel)
        request = secrets.randbits(63)
        try:
            while True:
                if channel is not None:
                    backend = await listener.listen(channel)  # no round trip if listened already
                params = {
                    "id": session.id,
                    "name": name,
                    "seq": None if mine is None else mine.seq,
                    "channel": mine.channel if mine is not None else channel,
                    "listener": backend,
                    "request": request,
                }
                try:
                    row = await self._fetch("attempt", params)
                except StoreUnavailable:
                    # Granted or not, nobody would ever release it: release it by its request.
                    self.commands.owed.add(self._release_call(session.id, name, None, request))
                    raise
                assert row is not None
                state, token, host, pid, label, expires_in, queued, seq = row
                if state == "gone":
                    raise LeaseLost("the session expired")
                if state != "busy":
                    if ticket is not None:
                        listener.unroute(ticket.channel)  # the channel is spare again
                    return Grant(token=int(token), renewed_session=state == "granted")
                holder = None
                if token is not None:
                    holder = LockInfo(
                        name, int(token), Owner(host, pid, label), expires_in, int(queued)
                    )
                if mine is not None:
                    mine.seq, mine.listener = int(seq), backend
                elif channel is not None:
                    mine = Ticket(name, int(seq), channel, backend)
                elif enqueue:
                    # Busy, and we will wait: listen on a channel before our queue row exists,
                    # so a queued row always has a listener; then try again.
                    channel = listener.spare_channel(listened_only=False)
                    assert channel is not None
                    listener.claim(channel)
                    continue
                break
        finally:
            if channel is not None:
                listener.unclaim(channel)
        if mine is not None:
            listener.route(mine.channel, mine)
        if holder is not None:
            retry = max(0.0, holder.expires_in) + 0.001
        elif expires_in is not None:  # held back by lock-delay: nobody is notified at its end
            retry = expires_in + 0.001
        else:
            # Free but others ahead: poll gently, in case those ahead died or sleep (freed by
            # expiry, the lock is handed to nobody, so nobody is notified).
            retry = Busy.AHEAD_POLL
        return Busy(holder=holder, ticket=mine, retry_in=retry)

    async def wait(self, ticket: object, busy: Busy, timeout: float) -> None:
        """Sleep until our channel is notified, or ``timeout`` (see `Listener.sleep`)."""
        assert isinstance(ticket, Ticket)
        try:
            await self.listener.sleep(ticket, timeout)
        finally:
            ticket.woken = False

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, Ticket)
        # A release may have handed us the lock as we gave up: the function passes it on.
        leave = self._call("leave", {"name": ticket.name, "seq": ticket.seq})
        try:
            await self.commands.run(leave)
        except StoreUnavailable:
            self.commands.owed.add(leave)  # we may hold a lock handed to us: pass it on later
            raise
        finally:
            self.listener.unroute(ticket.channel, ticket)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, PostgresSession)
        release = self._release_call(session.id, name, token, None)
        try:
            await self.commands.run(release)
        except StoreUnavailable:
            self.commands.owed.add(release)  # free it as soon as the store answers again
            raise

    def _release_call(
        self, session_id: int, name: str, token: int | None, request: int | None
    ) -> Call[Row]:
        """One statement; hands the lock on (with its NOTIFY) only when someone waits."""
        params = {"id": session_id, "name": name, "token": token, "request": request}
        return self._call("release", params)

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        async def tx(conn: AsyncConnection[Any]) -> list[LockInfo]:
            cur = await conn.execute(self._q["locks"], {"name": name})
            return [
                LockInfo(
                    row[0], int(row[1]), Owner(row[2], row[3], row[4]), row[5], int(row[6]), row[7]
                )
                for row in await cur.fetchall()
            ]

        return await self.commands.run(tx)

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        async def tx(conn: AsyncConnection[Any]) -> list[HeldBack]:
            cur = await conn.execute(self._q["held_back"], {"name": name})
            return [HeldBack(row[0], int(row[1]), row[2]) for row in await cur.fetchall()]

        return await self.commands.run(tx)

    # -- records -------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        row = await self._fetch("read_record", {"key": key})
        return None if row is None else Record(key, row[0], int(row[1]))

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        if not 0 <= version < 2**63 - 1:
            return None  # never a record's version
        params = {"key": key, "value": value, "version": version, "request": secrets.randbits(63)}
        query = "create_record" if version == 0 else "replace_record"
        row = await self._fetch(query, params)
        return None if row is None else Record(key, value, int(row[0]))

    async def list_records(self, prefix: str) -> list[Record]:
        async def tx(conn: AsyncConnection[Any]) -> list[Record]:
            cur = await conn.execute(self._q["list_records"], {"prefix": prefix})
            return [
                Record(key, value, int(version)) for key, value, version in await cur.fetchall()
            ]

        return await self.commands.run(tx)

    # -- leader election ------------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        """One statement: the ``proclaim`` function (checks and sets under the name's lock)."""
        assert isinstance(session, PostgresSession)
        if "\0" in value:
            raise InvalidArgument("a value cannot contain NUL characters in PostgreSQL")
        params = {"id": session.id, "name": name, "token": token, "value": value}
        row = await self._fetch("proclaim", params)
        return row is not None and bool(row[0])

    async def watch(self, name: str) -> Watch:
        """LISTEN on the name's channel (on the store's listening connection), then register
        as its watcher (see the ``watch`` function): changes after that are announced."""
        channel = watch_channel(self.schema, name)
        announcements = self.listener.routed(channel)
        if not isinstance(announcements, Announcements):
            announcements = Announcements(name, channel)
            self.listener.route(channel, announcements)
        watch = PostgresWatch(announcements, self.listener, self.commands, self._q)
        announcements.watches.append(watch)
        try:
            await watch.subscribe(report=False)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await watch.aclose()
            raise
        return watch

    async def aclose(self) -> None:
        for channel, route in self.listener.routes():
            if isinstance(route, Announcements):
                for watch in route.watches:
                    watch.closed = True  # their registrations go with the listening connection
                self.listener.unroute(channel)
        await self.commands.drop()
        self.listener.close()


# -- the URL ----------------------------------------------------------------------------------


def conninfo(url: str, options: ConnectOptions) -> tuple[str, str]:
    """libpq's connection string for ``url`` and ``options`` (the common options become
    libpq's, libpq's own pass through), and the schema's name; one ``InvalidArgument`` for a
    mistake."""
    checked = parse_url(url, SCHEMES, STORE, "", fragment="no #fragment allowed")
    parts = checked.parts
    try:
        parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise checked.bad(str(exc)) from None
    common, rest = url_options(url, STORE)
    schema, libpq, passthrough = _split_query(rest, checked.bad)
    params = _libpq_params(options.over(common), libpq)
    host = parts.netloc.rpartition("@")[2]  # user and password go as parameters
    dsn = urlunsplit((parts.scheme, host, parts.path, urlencode(passthrough), ""))
    try:
        return psycopg.conninfo.make_conninfo(dsn, **params), schema  # checked by libpq
    except psycopg.Error as exc:
        pairs = [*params.items(), *passthrough]
        hidden = [value for key, value in pairs if key in SECRET_QUERY]
        raise checked.bad(scrub(str(exc), hidden)) from None


def _split_query(
    pairs: list[tuple[str, str]], bad: Callable[[str], InvalidArgument]
) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    """The schema (checked), the libpq parameters that have a common name, and the rest."""
    schemas: list[str] = []
    libpq: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in pairs:
        if key == "schema":
            schemas.append(value)
        elif key in LIBPQ_EQUIVALENTS:
            if libpq.get(key, value) != value:
                raise bad(f"{key} given twice")
            libpq[key] = value
        else:
            rest.append((key, value))
    if len(schemas) > 1:
        raise bad("schema given twice")
    return _check_schema(schemas[0] if schemas else DEFAULT_SCHEMA), libpq, rest


def _check_schema(schema: str) -> str:
    """``schema`` if it is a plain identifier of tenure's own, else one ``InvalidArgument``:
    it is spliced into SQL only through ``sql.Identifier``, but a name that needs quoting
    (or that PostgreSQL reserves) is a mistake to report, not to work around."""
    if not IDENTIFIER.fullmatch(schema):
        raise InvalidArgument(
            f"bad schema name {schema!r} in PostgreSQL store URL: use letters, digits"
            " and _ (not first), at most 63"
        )
    if schema.lower().startswith("pg_") or schema.lower() == "information_schema":
        raise InvalidArgument(f"bad schema name {schema!r}: reserved by PostgreSQL")
    return schema


def _libpq_params(options: ConnectOptions, libpq: dict[str, str]) -> dict[str, str]:
    """libpq's parameters for the common ``options`` merged with libpq's own names from the
    URL (``libpq``): one setting given under both names must agree; files are checked."""
    options = check(options, STORE)
    merged: dict[str, str | None] = {}
    for name, key in COMMON_TO_LIBPQ.items():
        ours, theirs = getattr(options, name), libpq.get(key)
        if ours is not None and theirs is not None and ours != theirs:
            what = f"{name} and {key}" if name != key else f"the two {name}s"
            raise InvalidArgument(f"{STORE} store: {what} disagree")
        merged[key] = ours if ours is not None else theirs
    if merged["password"] is None and os.environ.get(ENV_PASSWORD):
        merged["password"] = os.environ[ENV_PASSWORD]  # else libpq's PGPASSWORD or .pgpass
    root, cert = merged["sslrootcert"], merged["sslcert"]
    # libpq's own file names are checked as the common ones are: one line, before connecting.
    check(ConnectOptions(ca=None if root == "system" else root, cert=cert), STORE)
    merged["sslmode"] = _sslmode(options, libpq.get("sslmode"))
    if options.use_tls and root is None:
        merged["sslrootcert"] = _system_roots()
    return {key: value for key, value in merged.items() if value is not None}


def _sslmode(options: ConnectOptions, sslmode: str | None) -> str | None:
    """``tls=true`` is ``verify-full`` (always verify, as every store does), ``tls=false`` is
    ``disable``; ca, cert or key alone imply ``verify-full`` unless ``sslmode`` says more."""
    if options.tls is not None:
        wanted = "verify-full" if options.tls else "disable"
        if sslmode not in (None, wanted):
            raise InvalidArgument(f"{STORE} store: tls and sslmode disagree")
        return wanted
    if sslmode is None:
        return "verify-full" if options.use_tls else None
    if sslmode == "disable" and options.use_tls:
        raise InvalidArgument(f"{STORE} store: sslmode=disable contradicts ca, cert or key")
    return sslmode


def _system_roots() -> str | None:
    """The CA file of the system's roots that Python's ``ssl`` uses (and so every other
    store; ``$SSL_CERT_FILE`` if set); if it finds none, libpq's ``system`` (libpq >= 16),
    else None: libpq's own default, ``~/.postgresql/root.crt``."""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile:
        return cafile
    return "system" if psycopg.pq.version() >= 160000 else None


def _secrets_in(dsn: str) -> list[str]:
    """The secrets written in a connection string."""
    try:
        found = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return []
    return [str(found[key]) for key in SECRET_QUERY if found.get(key)]
