-- The server-side functions (version 2 on; bodies replaced by each version, signatures kept,
-- so clients of an older version still connected keep working). {s} is the schema.
--
-- Why one call is one statement and still atomic and serialised: each function below runs
-- as one statement in autocommit, i.e. in a transaction of its own, so it commits or rolls
-- back as a whole. It is VOLATILE and plpgsql, and the connection is READ COMMITTED (set at
-- connect), so every statement inside it takes a fresh snapshot: after the first one has
-- locked the name's row in tokens (FOR UPDATE, waiting for whoever holds it to commit),
-- the following statements see everything that the previous holder of that row lock
-- committed. Every call that changes a name's lock or queue (attempt, release, leave,
-- close_session) locks that row first, so they are serialised per name exactly as the
-- multi-statement transactions of schema version 1 were. (A single CTE could not do this:
-- all its parts share the snapshot taken before it waited for the row lock.)

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
