-- Revocations (tenure revoke), within version 4: a table no older client touches, so schema.py
-- creates it (and the function) on connecting when it is missing, as it does records. {s} is
-- the schema. One row per name: its latest revocation, read by the revoked grant's session at
-- its next renewal and shown with the name's lock-delay until free_at.
CREATE TABLE IF NOT EXISTS {s}.revocations (
    name text PRIMARY KEY, token bigint NOT NULL, session bigint NOT NULL,
    free_at timestamptz NOT NULL, host text NOT NULL, pid integer NOT NULL,
    label text NOT NULL, usr text NOT NULL, at float8 NOT NULL, reason text NOT NULL,
    at_once boolean NOT NULL);
CREATE INDEX IF NOT EXISTS revocations_session ON {s}.revocations (session);

-- Revoke p_name's grant (only the one with p_token, if given): delete its lock row, so the
-- session's renewals no longer extend it and its release frees nothing, and (unless p_now)
-- hold the name back until the session's expiry as it stands plus its lock-delay, as if the
-- session had ended now without a release. The holder's session row is locked (FOR SHARE):
-- a renewal racing with us committed before (and counts in free_at) or waits until we commit,
-- so the holder reads this revocation after any renewal it could confirm. r_token NULL: not
-- held. Sent again after a dead connection, a revocation already made answers again.
CREATE OR REPLACE FUNCTION {s}.revoke(
    p_name text, p_token bigint, p_now boolean, p_host text, p_pid integer, p_label text,
    p_user text, p_at float8, p_reason text, OUT r_token bigint, OUT r_free_in float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_session bigint;
    v_free_at timestamptz;
BEGIN
    PERFORM 1 FROM {s}.tokens t WHERE t.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT l.token, l.session, s.expires + s.lock_delay * interval '1 second'
      INTO r_token, v_session, v_free_at
      FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
     WHERE l.name = p_name AND s.expires > clock_timestamp()
       FOR SHARE OF s;
    IF NOT FOUND OR (p_token IS NOT NULL AND r_token <> p_token) THEN
        SELECT r.token, greatest(0, extract(epoch FROM r.free_at - clock_timestamp()))::float8
          INTO r_token, r_free_in
          FROM {s}.revocations r
         WHERE r.name = p_name AND r.at = p_at AND r.pid = p_pid AND r.host = p_host;
        RETURN;
    END IF;
    IF p_now THEN
        v_free_at := clock_timestamp();
    END IF;
    DELETE FROM {s}.locks WHERE name = p_name;
    IF p_now THEN
        DELETE FROM {s}.held WHERE name = p_name;
    ELSE
        INSERT INTO {s}.held AS h (name, token, free_at) VALUES (p_name, r_token, v_free_at)
        ON CONFLICT (name) DO UPDATE SET token = excluded.token,
            free_at = greatest(h.free_at, excluded.free_at);
    END IF;
    DELETE FROM {s}.revocations r  -- read by their sessions, which are gone, and shown no more
     WHERE r.free_at <= clock_timestamp()
       AND NOT EXISTS (SELECT 1 FROM {s}.sessions s WHERE s.id = r.session);
    INSERT INTO {s}.revocations AS r (name, token, session, free_at, host, pid, label, usr, at,
                                      reason, at_once)
         VALUES (p_name, r_token, v_session, v_free_at, p_host, p_pid, p_label, p_user, p_at,
                 p_reason, p_now)
    ON CONFLICT (name) DO UPDATE SET token = excluded.token, session = excluded.session,
        free_at = excluded.free_at, host = excluded.host, pid = excluded.pid,
        label = excluded.label, usr = excluded.usr, at = excluded.at, reason = excluded.reason,
        at_once = excluded.at_once;
    PERFORM {s}.announce(p_name);
    IF p_now THEN
        PERFORM {s}.hand_over(p_name);
    END IF;
    r_free_in := greatest(0, extract(epoch FROM v_free_at - clock_timestamp()))::float8;
END $$;
