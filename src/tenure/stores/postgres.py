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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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


class PostgresWatch(Watch):
    """The changes of one name, announced on its channel to the store's listening connection.

    If that connection is lost or replaced, ``next`` listens and registers again and reports the
    state then as one change (the changes missed meanwhile are summed up in it, not each
    reported); while it cannot, ``next`` raises ``StoreUnavailable``.
    """

    def __init__(self, store: PostgresStore, name: str) -> None:
        self.store = store
        self.name = name
        digest = hashlib.sha256(f"{store.schema}\0{name}".encode()).hexdigest()
        self.channel = WATCH_CHANNEL + digest[:32]  # a channel is an identifier: <= 63 bytes
        self.changes: list[Change] = []
        self.mark: str | None = ""
        """Our registration's own NOTIFY, until it comes: what comes before it is older."""
        self.mark_at = 0
        """Where in ``changes`` our mark came: the state read by the registration goes there."""
        self.listener = 0
        """Backend pid of the listening connection we registered."""
        self.generation = -1
        """Of the listening connection we listen on (see ``PostgresStore._listen``)."""
        self.closed = False
        self.event = anyio.Event()

    @property
    def woken(self) -> bool:
        return bool(self.changes) or self.store._lost_listener(self)

    async def next(self, timeout: float) -> list[Change]:
        return await self.store._next(self, timeout)

    async def aclose(self) -> None:
        await self.store._unwatch(self)


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
        self._dsn = dsn
        self._shown = redact(shown if shown is not None else dsn)
        self._secrets = _secrets_in(dsn)  # never in a message
        self._add_connect_timeout = "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn)
        self.schema = schema
        ident = sql.Identifier(schema)
        self._q: dict[str, Composed] = {k: sql.SQL(v).format(s=ident) for k, v in QUERIES.items()}
        self._setup = sql.SQL(SCHEMA).format(s=ident)
        self._lock = anyio.Lock()  # one command at a time on the command connection
        self._conn: AsyncConnection[Any] | None = None
        self._listen_lock = anyio.Lock()  # LISTEN and reading notifications take turns
        self._listen_conn: AsyncConnection[Any] | None = None
        self._listen_pid = 0
        self._listening: set[str] = set()  # channels LISTENed on the current connection
        self._listen_generation = 0  # counts listening connections: a watch knows its own
        self._watches: dict[str, list[PostgresWatch]] = {}  # channel -> its open watches
        self._parts: dict[str, list[str]] = {}  # channel -> parts of a long announcement
        self._tickets: dict[str, Ticket] = {}  # channel -> the ticket waiting on it
        self._claimed: set[str] = set()  # channels picked by an attempt not yet returned
        self._early: dict[str, str] = {}  # channel -> a payload that came before its ticket
        self._waiting: set[Ticket | PostgresWatch] = set()  # inside wait() or Watch.next()
        self._reader: Ticket | PostgresWatch | None = None  # reading notifications for all
        self._reading: anyio.CancelScope | None = None
        self._listen_pending = 0
        self._owed: list[Callable[[AsyncConnection[Any]], Awaitable[object]]] = []
        """Releases and leaves whose outcome is in doubt (the store went away): done again,
        idempotently, one statement each, before the next call, so no lock stays held by
        nobody."""
        self.notifications = 0
        """Notifications received (a release wakes one waiter: one notification)."""

    @classmethod
    def from_url(cls, url: str, options: ConnectOptions = NO_OPTIONS) -> PostgresStore:
        """``postgresql://[user[:password]@]host[:port][/db][?schema=NAME&options]``: the
        common connection options (``tls``, ``ca``, ``cert``, ``key``, user info; keywords
        over the URL's) become libpq's; libpq's own parameters pass through (module doc)."""
        if psycopg is None:
            raise InvalidArgument(
                "the PostgreSQL store needs psycopg: pip install 'tenure[postgres]'"
            )
        shown = redact(url)
        try:
            parts = urlsplit(url)
            parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
        except ValueError as exc:
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: {exc}") from None
        if parts.fragment:
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: no #fragment allowed")
        common, rest = url_options(url, STORE)
        schema, libpq, passthrough = _split_query(rest, shown)
        params = _libpq_params(options.over(common), libpq)
        host = parts.netloc.rpartition("@")[2]  # user and password go as parameters
        dsn = urlunsplit((parts.scheme, host, parts.path, urlencode(passthrough), ""))
        try:
            conninfo = psycopg.conninfo.make_conninfo(dsn, **params)  # checked by libpq
        except psycopg.Error as exc:
            pairs = [*params.items(), *passthrough]
            hidden = [value for key, value in pairs if key in SECRET_QUERY]
            reason = scrub(str(exc), hidden)
            raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: {reason}") from None
        return cls(conninfo, schema, shown=url)

    @property
    def url(self) -> str:
        return self._shown

    # -- plumbing -------------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {CALL_TIMEOUT:g}s"
        else:
            reason = scrub(str(exc) or type(exc).__name__, self._secrets)
        return StoreUnavailable(f"PostgreSQL store {self._shown}: {reason}")

    async def _connect(self) -> AsyncConnection[Any]:
        if self._add_connect_timeout:
            return await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            )
        return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)

    async def _command_connection(self) -> AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        self._conn = None
        conn = await self._connect()
        try:
            # Every call relies on READ COMMITTED (see FUNCTIONS), whatever the server's
            # default; a client paused inside a transaction must not hold a name's row for long.
            await conn.execute(
                "SET default_transaction_isolation = 'read committed';"
                " SET idle_in_transaction_session_timeout = 10000"
            )
            await self._ensure_schema(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    async def _ensure_schema(self, conn: AsyncConnection[Any]) -> None:
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
        try:
            version = await self._version(conn)
        except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
            version = 0
        if version < SCHEMA_VERSION:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                has_meta = await self._one(conn, self._q["has_table"], self._table("meta"))
                version = await self._version(conn) if has_meta and has_meta[0] else 0
                if version < SCHEMA_VERSION:
                    await conn.execute(self._setup)
            version = await self._version(conn)
        if version != SCHEMA_VERSION:
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: schema {self.schema!r} has version {version},"
                f" this tenure knows version {SCHEMA_VERSION}"
            )
        has_records = await self._one(conn, self._q["has_table"], self._table("records"))
        if not (has_records and has_records[0]):
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                await conn.execute(self._q["records"])

    def _table(self, table: str) -> dict[str, str]:
        return {"schema": self.schema, "table": table}

    async def _version(self, conn: AsyncConnection[Any]) -> int:
        row = await (await conn.execute(self._q["version"])).fetchone()
        return int(row[0]) if row is not None else 0

    async def _drop_command_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    async def _run(self, fn: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
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
                    reused = self._conn is not None
                    conn = await self._command_connection()
                    retries = 0
                    while True:
                        try:
                            while self._owed:
                                await self._owed[0](conn)
                                del self._owed[0]
                            return await fn(conn)
                        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                            if retries == RETRIES:
                                raise
                            retries += 1
                            await anyio.sleep(0.001 * 2**retries)
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            await self._drop_command_connection()
                            reused = False
                            conn = await self._command_connection()
            except StoreUnavailable:
                raise
            except (psycopg.Error, TimeoutError, OSError) as exc:
                await self._drop_command_connection()
                raise self._unavailable(exc) from exc
            except BaseException:
                await self._drop_command_connection()
                raise

    @staticmethod
    async def _one(
        conn: AsyncConnection[Any], query: Composed, params: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        cur = await conn.execute(query, params)
        return await cur.fetchone() if cur.description is not None else None

    async def _fetch(
        self, query: str, params: dict[str, Any], conn: AsyncConnection[Any]
    ) -> tuple[Any, ...] | None:
        return await self._one(conn, self._q[query], params)

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
        row = await self._run(partial(self._fetch, "open", params))
        assert row is not None
        return PostgresSession(int(row[0]), ttl)

    async def keep_alive(self, session: Session) -> bool:
        assert isinstance(session, PostgresSession)

        async def renew(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(self._q["renew"], {"id": session.id})
            return cur.rowcount == 1

        return await self._run(renew)

    async def close_session(self, session: Session) -> None:
        assert isinstance(session, PostgresSession)
        await self._run(partial(self._fetch, "close", {"id": session.id}))

    # -- locks ---------------------------------------------------------------------------

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        """One round trip: the ``attempt`` function, or, for a waiter whose NOTIFY said it was
        handed the lock, one read that the lock is still its own and its session alive."""
        assert isinstance(session, PostgresSession)
        assert ticket is None or isinstance(ticket, Ticket)
        mine = ticket
        if mine is not None and mine.handed is not None:
            token, mine.handed = mine.handed, None
            params = {"id": session.id, "name": name, "token": token, "seq": mine.seq}
            if await self._run(partial(self._fetch, "handed", params)) is not None:
                self._tickets.pop(mine.channel, None)  # granted: the channel is spare again
                return Grant(token=token, renewed_session=False)
            # else: lost meanwhile (our session expired?): the full attempt says what now
        channel: str | None = None
        listener = 0
        if mine is not None:
            listener = await self._listen(mine.channel)  # again, if the listener reconnected
        elif enqueue:
            channel = self._spare_channel(listened_only=True)
            if channel is not None:
                self._claimed.add(channel)
        request = secrets.randbits(63)
        try:
            while True:
                if channel is not None:
                    listener = await self._listen(channel)  # no round trip if listened already
                params = {
                    "id": session.id,
                    "name": name,
                    "seq": None if mine is None else mine.seq,
                    "channel": mine.channel if mine is not None else channel,
                    "listener": listener,
                    "request": request,
                }
                try:
                    row = await self._run(partial(self._fetch, "attempt", params))
                except StoreUnavailable:
                    # Granted or not, nobody would ever release it: release it by its request.
                    self._owed.append(partial(self._release, session.id, name, None, request))
                    raise
                assert row is not None
                state, token, host, pid, label, expires_in, queued, seq = row
                if state == "gone":
                    raise LeaseLost("the session expired")
                if state != "busy":
                    if ticket is not None:
                        self._tickets.pop(ticket.channel, None)  # the channel is spare again
                    return Grant(token=int(token), renewed_session=state == "granted")
                holder = None
                if token is not None:
                    holder = LockInfo(
                        name, int(token), Owner(host, pid, label), expires_in, int(queued)
                    )
                if mine is not None:
                    mine.seq, mine.listener = int(seq), listener
                elif channel is not None:
                    mine = Ticket(name, int(seq), channel, listener)
                elif enqueue:
                    # Busy, and we will wait: listen on a channel before our queue row exists,
                    # so a queued row always has a listener; then try again.
                    channel = self._spare_channel(listened_only=False)
                    assert channel is not None
                    self._claimed.add(channel)
                    continue
                break
        finally:
            if channel is not None:
                self._claimed.discard(channel)
        if mine is not None:
            self._tickets[mine.channel] = mine
            early = self._early.pop(mine.channel, None)
            if early is not None:  # its NOTIFY came before we got here
                self._wake(mine, early)
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
        """Sleep until our channel is notified, or ``timeout``.

        Notifications come on the store's one listening connection; whichever waiter finds
        nobody reading becomes the reader and passes on the others' wake-ups. If the listener
        is broken this is plain sleep: polling, until ``attempt`` listens again.
        """
        assert isinstance(ticket, Ticket)
        try:
            await self._sleep(ticket, timeout)
        finally:
            ticket.woken = False

    async def _sleep(self, waiter: Ticket | PostgresWatch, timeout: float) -> None:
        """Until ``waiter`` is woken (a waiter's or a watch's notification), or ``timeout``."""
        self._waiting.add(waiter)
        try:
            with anyio.move_on_after(timeout):
                while not waiter.woken:
                    conn = self._listen_conn
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

    async def _read_until(self, waiter: Ticket | PostgresWatch, conn: AsyncConnection[Any]) -> None:
        self._reader = waiter
        try:
            async with self._listen_lock:
                if conn is not self._listen_conn:
                    return
                with anyio.CancelScope() as scope:
                    self._reading = scope
                    if self._listen_pending:
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
            self._drop_listener(conn)  # waiters poll until attempt listens again
        finally:
            self._reader = None

    def _dispatch(self, note: Notify) -> None:
        self.notifications += 1
        watches = self._watches.get(note.channel)
        if watches is not None:
            self._announced(note.channel, note.payload, watches)
            return
        ticket = self._tickets.get(note.channel)
        if ticket is not None:
            self._wake(ticket, note.payload)
        elif note.channel in self._claimed:
            self._early[note.channel] = note.payload  # its attempt has not returned yet

    @staticmethod
    def _wake(ticket: Ticket, payload: str) -> None:
        """``payload`` is 'seq token' of the hand-over: ours if the seq is our place."""
        seq, _, token = payload.partition(" ")
        if seq == str(ticket.seq) and token.isdigit():
            ticket.handed = int(token)
        ticket.woken = True
        ticket.event.set()

    def _spare_channel(self, *, listened_only: bool) -> str | None:
        """A channel already listened on and free; else a new one (None if ``listened_only``)."""
        conn = self._listen_conn
        if conn is not None and not conn.closed:
            for channel in self._listening:
                if (
                    channel.startswith(WAITER_CHANNEL)
                    and channel not in self._tickets
                    and channel not in self._claimed
                ):
                    return channel
        return None if listened_only else f"{WAITER_CHANNEL}{uuid.uuid4().hex}"

    async def _listen(self, channel: str) -> int:
        """LISTEN on ``channel`` (connecting the listener if needed); its backend pid."""
        conn = self._listen_conn
        if conn is not None and not conn.closed and channel in self._listening:
            return self._listen_pid
        self._listen_pending += 1
        try:
            if self._reading is not None:
                self._reading.cancel()  # the reader gives the connection up for a moment
            async with self._listen_lock:
                with anyio.fail_after(CALL_TIMEOUT):
                    conn = self._listen_conn
                    reused = conn is not None and not conn.closed
                    while True:
                        if conn is None or conn.closed:
                            self._listening = set()
                            self._parts.clear()  # the rest of those will never come
                            conn = await self._connect()
                            self._listen_conn = conn
                            self._listen_pid = conn.info.backend_pid
                            self._listen_generation += 1
                        listen = sql.SQL("LISTEN {}").format(sql.Identifier(channel))
                        try:
                            await conn.execute(listen)
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            self._drop_listener(conn)  # died while idle: once more, afresh
                            conn, reused = None, False
                            continue
                        self._listening.add(channel)
                        return self._listen_pid
        except (psycopg.Error, TimeoutError, OSError) as exc:
            if conn is not None:
                self._drop_listener(conn)
            raise self._unavailable(exc) from exc
        finally:
            self._listen_pending -= 1

    def _drop_listener(self, conn: AsyncConnection[Any]) -> None:
        if self._listen_conn is conn:
            self._listen_conn = None
            self._listening = set()
            self._parts.clear()
            for watches in self._watches.values():
                for watch in watches:
                    watch.event.set()  # to listen again and report the state (see next)
        if not conn.closed:
            conn.pgconn.finish()  # what AsyncConnection.close() does, without awaiting

    async def leave(self, ticket: object) -> None:
        assert isinstance(ticket, Ticket)
        # A release may have handed us the lock as we gave up: the function passes it on.
        leave = partial(self._fetch, "leave", {"name": ticket.name, "seq": ticket.seq})
        try:
            await self._run(leave)
        except StoreUnavailable:
            self._owed.append(leave)  # we may hold a lock handed to us: pass it on later
            raise
        finally:
            if self._tickets.get(ticket.channel) is ticket:
                del self._tickets[ticket.channel]
            self._early.pop(ticket.channel, None)

    async def release(self, session: Session, name: str, token: int) -> None:
        assert isinstance(session, PostgresSession)
        release = partial(self._release, session.id, name, token, None)
        try:
            await self._run(release)
        except StoreUnavailable:
            self._owed.append(release)  # free it as soon as the store answers again
            raise

    async def _release(
        self,
        session_id: int,
        name: str,
        token: int | None,
        request: int | None,
        conn: AsyncConnection[Any],
    ) -> None:
        """One statement; hands the lock on (with its NOTIFY) only when someone waits."""
        params = {"id": session_id, "name": name, "token": token, "request": request}
        await conn.execute(self._q["release"], params)

    async def locks(self, name: str | None = None) -> list[LockInfo]:
        async def tx(conn: AsyncConnection[Any]) -> list[LockInfo]:
            cur = await conn.execute(self._q["locks"], {"name": name})
            return [
                LockInfo(
                    row[0], int(row[1]), Owner(row[2], row[3], row[4]), row[5], int(row[6]), row[7]
                )
                for row in await cur.fetchall()
            ]

        return await self._run(tx)

    async def held_back(self, name: str | None = None) -> list[HeldBack]:
        async def tx(conn: AsyncConnection[Any]) -> list[HeldBack]:
            cur = await conn.execute(self._q["held_back"], {"name": name})
            return [HeldBack(row[0], int(row[1]), row[2]) for row in await cur.fetchall()]

        return await self._run(tx)

    # -- records -------------------------------------------------------------------------

    async def read_record(self, key: str) -> Record | None:
        row = await self._run(partial(self._fetch, "read_record", {"key": key}))
        return None if row is None else Record(key, row[0], int(row[1]))

    async def write_record(self, key: str, value: str, version: int) -> Record | None:
        if not 0 <= version < 2**63 - 1:
            return None  # never a record's version
        params = {"key": key, "value": value, "version": version, "request": secrets.randbits(63)}
        query = "create_record" if version == 0 else "replace_record"
        row = await self._run(partial(self._fetch, query, params))
        return None if row is None else Record(key, value, int(row[0]))

    async def list_records(self, prefix: str) -> list[Record]:
        async def tx(conn: AsyncConnection[Any]) -> list[Record]:
            cur = await conn.execute(self._q["list_records"], {"prefix": prefix})
            return [
                Record(key, value, int(version)) for key, value, version in await cur.fetchall()
            ]

        return await self._run(tx)

    # -- leader election ------------------------------------------------------------------

    async def proclaim(self, session: Session, name: str, token: int, value: str) -> bool:
        """One statement: the ``proclaim`` function (checks and sets under the name's lock)."""
        assert isinstance(session, PostgresSession)
        if "\0" in value:
            raise InvalidArgument("a value cannot contain NUL characters in PostgreSQL")
        params = {"id": session.id, "name": name, "token": token, "value": value}
        row = await self._run(partial(self._fetch, "proclaim", params))
        return row is not None and bool(row[0])

    async def watch(self, name: str) -> Watch:
        """LISTEN on the name's channel (on the store's listening connection), then register
        as its watcher (see the ``watch`` function): changes after that are announced."""
        watch = PostgresWatch(self, name)
        self._watches.setdefault(watch.channel, []).append(watch)
        try:
            await self._subscribe(watch, report=False)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._unwatch(watch)
            raise
        return watch

    async def _subscribe(self, watch: PostgresWatch, *, report: bool) -> None:
        """Listen and register; if ``report``, queue the state then as one change, where it
        belongs: before what is announced after our mark."""
        watch.mark = ""  # nothing counts until our new mark comes
        listener = await self._listen(watch.channel)
        generation = self._listen_generation

        async def register(conn: AsyncConnection[Any]) -> tuple[Any, ...] | None:
            watch.mark = uuid.uuid4().hex  # a new one if sent again
            params = {
                "name": watch.name,
                "channel": watch.channel,
                "listener": listener,
                "mark": watch.mark,
            }
            return await self._one(conn, self._q["watch"], params)

        row = await self._run(register)
        assert row is not None
        watch.listener, watch.generation = listener, generation
        if report:
            token, value, host, pid, label, expires_in = row
            holder = None
            if token is not None:
                holder = LockInfo(
                    watch.name, int(token), Owner(host, pid, label), expires_in, 0, value
                )
            at = len(watch.changes) if watch.mark is not None else watch.mark_at
            watch.changes.insert(at, Change(watch.name, holder))

    def _lost_listener(self, watch: PostgresWatch) -> bool:
        """Whether the connection ``watch`` listens on is gone (or replaced: not listening)."""
        conn = self._listen_conn
        return conn is None or conn.closed or watch.generation != self._listen_generation

    async def _next(self, watch: PostgresWatch, timeout: float) -> list[Change]:
        deadline = anyio.current_time() + timeout
        while not watch.closed:
            if not watch.changes and self._lost_listener(watch):
                await self._subscribe(watch, report=True)  # queues a change, or raises
            remaining = deadline - anyio.current_time()
            if watch.changes or remaining <= 0:
                break
            await self._sleep(watch, remaining)
        changes, watch.changes = watch.changes, []
        return changes

    def _announced(self, channel: str, payload: str, watches: list[PostgresWatch]) -> None:
        """Queue the change that ``payload`` announces (see the ``announce`` function)."""
        if payload.startswith(("+", "$")):  # one part of a long one
            piece = payload.partition(" ")[2]
            if payload[0] == "+":
                self._parts.setdefault(channel, []).append(piece)
                return
            payload = "".join(self._parts.pop(channel, [])) + piece
        try:
            data = json.loads(payload)
            if "mark" in data:
                for watch in watches:
                    if watch.mark == data["mark"]:
                        watch.mark, watch.mark_at = None, len(watch.changes)
                return
            holder = None
            if "token" in data:
                owner = Owner(str(data["host"]), int(data["pid"]), str(data["label"]))
                value = data["value"]
                holder = LockInfo(
                    watches[0].name, int(data["token"]), owner, float(data["expires"]), 0, value
                )
        except (ValueError, TypeError, KeyError):
            return  # not ours: anyone may NOTIFY any channel
        for watch in watches:
            if watch.mark is None:
                watch.changes.append(Change(watch.name, holder))
                watch.event.set()

    async def _unwatch(self, watch: PostgresWatch) -> None:
        """Stop listening and unregister once the name's last watch here closes (best effort:
        what is left is dropped when the listening connection ends)."""
        if watch.closed:
            return
        watch.closed = True
        watch.event.set()
        watches = self._watches.get(watch.channel, [])
        if watch in watches:
            watches.remove(watch)
        if watches:
            return  # others here still watch the name
        self._watches.pop(watch.channel, None)
        self._parts.pop(watch.channel, None)
        await self._unlisten(watch.channel)
        listeners = [watch.listener, self._listen_pid]
        unwatch = partial(self._fetch, "unwatch", {"name": watch.name, "listeners": listeners})
        with contextlib.suppress(StoreUnavailable):
            await self._run(unwatch)

    async def _unlisten(self, channel: str) -> None:
        conn = self._listen_conn
        if conn is None or conn.closed or channel not in self._listening:
            return
        self._listen_pending += 1
        try:
            if self._reading is not None:
                self._reading.cancel()  # the reader gives the connection up for a moment
            async with self._listen_lock:
                if conn is self._listen_conn and not conn.closed:
                    with anyio.fail_after(CALL_TIMEOUT):
                        await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
                    self._listening.discard(channel)
        except (psycopg.Error, TimeoutError, OSError):
            self._drop_listener(conn)
        finally:
            self._listen_pending -= 1

    async def aclose(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.closed = True  # their registrations go with the listening connection
        self._watches.clear()
        await self._drop_command_connection()
        if self._listen_conn is not None:
            self._drop_listener(self._listen_conn)


def _split_query(
    pairs: list[tuple[str, str]], shown: str
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
                raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: {key} given twice")
            libpq[key] = value
        else:
            rest.append((key, value))
    if len(schemas) > 1:
        raise InvalidArgument(f"bad PostgreSQL store URL {shown!r}: schema given twice")
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
