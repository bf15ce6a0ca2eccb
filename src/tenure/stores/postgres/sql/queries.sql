-- The statements of the store's calls, one each, by name: schema.py reads each block below its
-- "-- name:" line, drops the comment lines and joins the rest into one line. {s} is the schema
-- (psycopg.sql.Identifier); every value is a named parameter.

-- name: version
SELECT value FROM {s}.meta WHERE key = 'schema'

-- name: has_table
-- By name, as parameters (not to_regclass of a text, which would fold case).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
 WHERE schemaname = %(schema)s AND tablename = %(table)s)

-- name: open
-- Forget expired sessions (counters stay; trigger hold_back keeps what lock-delay holds back)
-- and ended delays, and open ours.
WITH dead AS (DELETE FROM {s}.sessions WHERE expires <= clock_timestamp() RETURNING id),
 w AS (DELETE FROM {s}.waiters WHERE session IN (SELECT id FROM dead)),
 l AS (DELETE FROM {s}.locks WHERE session IN (SELECT id FROM dead)),
 h AS (DELETE FROM {s}.held WHERE free_at <= clock_timestamp())
 INSERT INTO {s}.sessions (expires, ttl, host, pid, label, lock_delay)
 VALUES (clock_timestamp() + %(ttl)s * interval '1 second',
 %(ttl)s, %(host)s, %(pid)s, %(label)s, %(lock_delay)s) RETURNING id

-- name: renew
UPDATE {s}.sessions SET expires = clock_timestamp() + ttl * interval '1 second'
 WHERE id = %(id)s AND expires > clock_timestamp()

-- name: attempt
SELECT * FROM {s}.attempt(%(id)s::bigint, %(name)s::text, %(seq)s::bigint,
 %(channel)s::text, %(listener)s::integer, %(request)s::bigint)

-- name: handed
-- A waiter told by NOTIFY that it was handed the lock: still ours, session alive?
SELECT 1 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
 WHERE l.name = %(name)s AND l.token = %(token)s AND l.session = %(id)s
 AND l.waiter = %(seq)s AND s.expires > clock_timestamp()

-- name: release
SELECT {s}.release(%(id)s::bigint, %(name)s::text, %(token)s::bigint, %(request)s::bigint)

-- name: leave
SELECT {s}.leave(%(name)s::text, %(seq)s::bigint)

-- name: proclaim
SELECT {s}.proclaim(%(id)s::bigint, %(name)s::text, %(token)s::bigint, %(value)s::text)

-- name: watch
SELECT * FROM {s}.watch(%(name)s::text, %(channel)s::text, %(listener)s::integer,
 %(mark)s::text)

-- name: unwatch
DELETE FROM {s}.watchers
 WHERE name = %(name)s AND listener = ANY(%(listeners)s::integer[])

-- name: close
SELECT {s}.close_session(%(id)s::bigint)

-- name: read_record
SELECT value, version FROM {s}.records WHERE key = %(key)s

-- name: create_record
-- Create; a row left by this very request (sent again after a dead connection) is written
-- again as it is and answered again; any other row refuses it.
INSERT INTO {s}.records AS r (key, value, version, request)
 VALUES (%(key)s, %(value)s, 1, %(request)s)
 ON CONFLICT (key) DO UPDATE SET value = excluded.value
 WHERE r.version = 1 AND r.request = excluded.request
 RETURNING r.version

-- name: replace_record
-- Replace at the version read; or answer again a replacement made by this very request.
UPDATE {s}.records SET value = %(value)s, version = %(version)s::bigint + 1,
 request = %(request)s
 WHERE key = %(key)s AND (version = %(version)s::bigint
 OR (version = %(version)s::bigint + 1 AND request = %(request)s))
 RETURNING version

-- name: list_records
SELECT key, value, version FROM {s}.records WHERE starts_with(key, %(prefix)s)
 ORDER BY key COLLATE "C"

-- name: locks
SELECT l.name, l.token, s.host, s.pid, s.label,
 extract(epoch FROM s.expires - clock_timestamp())::float8,
 (SELECT count(*) FROM {s}.waiters w WHERE w.name = l.name), l.value
 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
 WHERE s.expires > clock_timestamp() AND (%(name)s::text IS NULL OR l.name = %(name)s)
 ORDER BY l.name

-- name: held_back
-- As attempt judges it: a swept session's names in held, an unswept one's lock row.
SELECT DISTINCT ON (x.name) x.name, x.token,
 extract(epoch FROM x.free_at - clock_timestamp())::float8
 FROM (SELECT h.name, h.token, h.free_at FROM {s}.held h
 UNION ALL SELECT l.name, l.token, s.expires + s.lock_delay * interval '1 second'
 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
 WHERE s.expires <= clock_timestamp()) x
 WHERE x.free_at > clock_timestamp() AND (%(name)s::text IS NULL OR x.name = %(name)s)
 ORDER BY x.name, x.free_at DESC

-- name: revoke
SELECT * FROM {s}.revoke(%(name)s::text, %(token)s::bigint, %(now)s::boolean, %(host)s::text,
 %(pid)s::integer, %(label)s::text, %(user)s::text, %(at)s::float8, %(reason)s::text)

-- name: revoked
SELECT name, token, host, pid, label, usr, at, reason, at_once,
 greatest(0, extract(epoch FROM free_at - clock_timestamp()))::float8
 FROM {s}.revocations WHERE session = %(id)s

-- name: revocation
SELECT name, token, host, pid, label, usr, at, reason, at_once,
 greatest(0, extract(epoch FROM free_at - clock_timestamp()))::float8
 FROM {s}.revocations WHERE name = %(name)s AND token = %(token)s

-- name: lock_name
-- The name's row, locked as every change of the name locks it (see proclaim): no grant of the
-- name commits between this and the end of the transaction, and the next statement's snapshot
-- sees every grant committed before.
SELECT 1 FROM {s}.tokens WHERE name = %(name)s FOR UPDATE

-- name: put_held_record
-- Write the record only if session id, alive, holds name with token; a row back: written.
WITH held AS (
 SELECT 1 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
  WHERE l.name = %(name)s AND l.token = %(token)s AND l.session = %(id)s
    AND s.expires > clock_timestamp())
INSERT INTO {s}.records AS r (key, value, version) SELECT %(key)s, %(value)s, 1 FROM held
 ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = r.version + 1,
 request = NULL
 RETURNING 1

-- name: delete_held_record
-- Delete the record only if session id, alive, holds name with token; true: it held.
WITH held AS (
 SELECT 1 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
  WHERE l.name = %(name)s AND l.token = %(token)s AND l.session = %(id)s
    AND s.expires > clock_timestamp()),
 gone AS (DELETE FROM {s}.records WHERE key = %(key)s AND EXISTS (SELECT 1 FROM held))
SELECT EXISTS (SELECT 1 FROM held)
