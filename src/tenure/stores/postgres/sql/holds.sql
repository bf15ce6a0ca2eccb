-- The public guard (PostgresStore.holds): true while the lock named {name} is held with the
-- token {token}, as the store judges a holder: the lock's row carries the token and its
-- session is live by the server's clock. {s} is the schema; {name} and {token} are named
-- parameters. Inside a caller's write, in READ COMMITTED (PostgresStore.connect sets it):
-- FOR SHARE locks that row until the caller commits; every grant, hand-over, release and sweep
-- writes it (upsert or delete), so none can commit between this check and the caller's commit:
-- holding the token at the check is holding it at commit. A grant committed meanwhile is seen,
-- as READ COMMITTED re-reads a row changed under the lock (its token then differs: false).
EXISTS (
    SELECT 1 FROM {s}.locks l JOIN {s}.sessions s ON s.id = l.session
     WHERE l.name = {name} AND l.token = {token} AND s.expires > clock_timestamp()
       FOR SHARE OF l)
