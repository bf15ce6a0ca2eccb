-- The embedded store's tables (schema 3). Run at every open: it creates what is missing, and
-- schema.py upgrades a file of schema 1 or 2 (which has tenure_locks and tenure_sessions
-- without their newer columns).
CREATE TABLE IF NOT EXISTS tenure_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    boot TEXT NOT NULL, expires REAL NOT NULL, ttl REAL NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, label TEXT NOT NULL,
    lock_delay REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tenure_tokens (name TEXT PRIMARY KEY, last INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_locks (
    name TEXT PRIMARY KEY, token INTEGER NOT NULL, session INTEGER NOT NULL,
    waiter INTEGER, value TEXT);
CREATE TABLE IF NOT EXISTS tenure_waiters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL, session INTEGER NOT NULL, wake TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tenure_waiters_name ON tenure_waiters (name, seq);
CREATE TABLE IF NOT EXISTS tenure_observers (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, wake TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tenure_observers_name ON tenure_observers (name);
-- token NULL means freed; prev is the seq of the name's previous event (0: none), so a watch
-- can tell that pruning removed events it had not read yet.
CREATE TABLE IF NOT EXISTS tenure_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, prev INTEGER NOT NULL, name TEXT NOT NULL,
    token INTEGER, value TEXT, host TEXT, pid INTEGER, label TEXT, expires REAL, waiters INTEGER);
CREATE INDEX IF NOT EXISTS tenure_events_name ON tenure_events (name, seq);
CREATE TABLE IF NOT EXISTS tenure_records (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_held (
    name TEXT PRIMARY KEY, token INTEGER NOT NULL, boot TEXT NOT NULL, until REAL NOT NULL);
-- The latest revocation of each name (tenure revoke): read by the revoked grant's session at
-- its next renewal, and shown with the name's lock-delay until ``until``.
CREATE TABLE IF NOT EXISTS tenure_revocations (
    name TEXT PRIMARY KEY, token INTEGER NOT NULL, session INTEGER NOT NULL, boot TEXT NOT NULL,
    until REAL NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, label TEXT NOT NULL,
    user TEXT NOT NULL, at REAL NOT NULL, reason TEXT NOT NULL, at_once INTEGER NOT NULL);
INSERT OR IGNORE INTO tenure_meta (key, value) VALUES ('schema', '3');
