-- tenure's tables in one schema: {s} is its name (psycopg.sql.Identifier), and this text is a
-- format string (doubled braces are braces). Run in one transaction by schema.py, with
-- records.sql, functions.sql and version.sql after it. Every statement may meet an older
-- version of the schema: each creates what is missing and changes nothing that exists, so the
-- same text creates a schema and upgrades one in place (data kept, columns only added, with
-- NULL or a default).
--
-- sessions: one row per session, alive while expires (by the server's clock) is ahead.
-- held:     names that lock-delay holds back after their holder's session row was deleted.
-- tokens:   one fencing counter per name, never deleted; its row is the name's lock for every
--           call that changes the name.
-- locks:    the holder of each name: its token, session, the waiter it was handed to, the
--           request that granted it, and the holder's value (leader election).
-- waiters:  the queue, in seq order; channel and listener (a backend pid) wake each waiter.
-- watchers: who LISTENs for a name's changes (announce NOTIFYs only if someone does).
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.sessions (
    id bigserial PRIMARY KEY, expires timestamptz NOT NULL, ttl float8 NOT NULL,
    host text NOT NULL, pid integer NOT NULL, label text NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_expires ON {s}.sessions (expires);
-- Version 4 (lock-delay): each session's lock-delay; a version-3 client's sessions get 0.
ALTER TABLE {s}.sessions ADD COLUMN IF NOT EXISTS lock_delay float8 NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS {s}.held (
    name text PRIMARY KEY, token bigint NOT NULL, free_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.tokens (name text PRIMARY KEY, last bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.locks (
    name text PRIMARY KEY, token bigint NOT NULL, session bigint NOT NULL, waiter bigint);
-- Version 2: the request id of the grant. Version 3 (leader election): the holder's value.
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
