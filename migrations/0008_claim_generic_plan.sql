-- laneway.claim() plans its two statements once per connection, not once per call.
--
-- PL/pgSQL caches a plan per statement but, like any prepared statement, re-plans with each
-- call's values (a "custom plan") for as long as the generic plan does not look cheaper; for
-- the claim's statements it never did, so every claim planned both again. Planning was most of
-- a claim's time: EXPLAIN ANALYZE of a claim of one due instance took 1.24-1.36 ms, 0.32 ms
-- with the generic plan, so an idle worker took that much longer to start a new instance and a
-- busy one paid it on every cohort it claimed.
--
-- A generic plan is made without the call's values (LIMIT p_limit is a guess of 10 % of the
-- rows), so two places are written to be an index path whatever the estimates; otherwise a
-- backlog of 1,000,000 pending instances turned the update into a hash join over a sequential
-- scan of the table (600-800 ms per claim):
--   - the update finds the picked rows by primary key (= ANY of their ids), not by a join;
--   - the per-queue probe asks for the first due instance in instances_claimable's order, which
--     that index gives without a sort (a plain LIMIT 1 could become a sequential scan that
--     reads past every row of other queues).
-- And no JIT: a generic plan's guessed row counts can pass jit_above_cost, and compiling took
-- ~50 ms where the claim itself takes under 1 ms (JIT never pays for a statement this short).
-- The rest is as in 0006.

CREATE OR REPLACE FUNCTION laneway.claim(
    p_owner text,
    p_names text[],
    p_limit integer,
    p_lease_seconds double precision,
    p_events_lock_key bigint
) RETURNS SETOF laneway.instances
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
    locked text[];
BEGIN
    -- A queue another process is claiming from is skipped this round. NO KEY UPDATE: claimers
    -- exclude each other; enqueues never lock the queue row (no foreign key since 0007).
    SELECT array_agg(q.name ORDER BY q.name) INTO locked
      FROM (SELECT q.name
              FROM laneway.queues AS q
             WHERE NOT q.paused
               AND (SELECT true
                      FROM laneway.instances AS i
                     WHERE i.queue = q.name
                       AND i.status = 'pending'
                       AND i.run_after <= now()
                       AND i.name = ANY(p_names)
                     ORDER BY i.priority DESC, i.run_after, i.seq
                     LIMIT 1)
             ORDER BY q.name
               FOR NO KEY UPDATE OF q SKIP LOCKED) AS q;
    IF locked IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH allowance AS (
        SELECT q.name, q.rate_per_minute, t.tokens_now,
               LEAST(q.concurrency - (SELECT count(*)
                                        FROM laneway.instances AS r
                                       WHERE r.queue = q.name
                                         AND r.status = 'running'),
                     COALESCE(floor(t.tokens_now)::integer, p_limit)) AS slots
          FROM laneway.queues AS q
         CROSS JOIN LATERAL (
            SELECT CASE WHEN q.rate_per_minute IS NULL THEN NULL
                        ELSE LEAST(GREATEST(q.rate_per_minute / 60.0, 1.0),
                                   q.tokens + EXTRACT(EPOCH FROM now() - q.tokens_at)
                                              * q.rate_per_minute / 60.0)
                   END AS tokens_now) AS t
         WHERE q.name = ANY(locked)
    ),
    picked AS (
        SELECT p.instance_id, p.priority, p.run_after, p.seq
          FROM allowance AS a
         CROSS JOIN LATERAL (
            SELECT i.instance_id, i.priority, i.run_after, i.seq
              FROM laneway.instances AS i
             WHERE i.queue = a.name
               AND i.status = 'pending'
               AND i.run_after <= now()
               AND i.name = ANY(p_names)
             ORDER BY i.priority DESC, i.run_after, i.seq
             LIMIT GREATEST(a.slots, 0)
               FOR UPDATE SKIP LOCKED) AS p
         ORDER BY p.priority DESC, p.run_after, p.seq
         LIMIT p_limit
    ),
    claimed AS (
        UPDATE laneway.instances AS i
           SET status = 'running', owner_id = p_owner, attempts = i.attempts + 1,
               lease_epoch = i.lease_epoch + 1, claimed_at = now(), lease_renewed_at = now(),
               lease_expires_at = now() + p_lease_seconds * interval '1 second',
               updated_at = now()
         WHERE i.instance_id = ANY(ARRAY(SELECT picked.instance_id FROM picked))
        RETURNING i.*
    ),
    spent AS (
        UPDATE laneway.queues AS q
           SET tokens = a.tokens_now - c.n, tokens_at = now()
          FROM allowance AS a,
               (SELECT claimed.queue, count(*) AS n FROM claimed GROUP BY claimed.queue) AS c
         WHERE q.name = a.name
           AND c.queue = a.name
           AND a.rate_per_minute IS NOT NULL
    ),
    appended AS (
        INSERT INTO laneway.events (instance_id, name, type, status, at, attempt)
        SELECT claimed.instance_id, claimed.name, 'started', claimed.status, clock_timestamp(),
               claimed.attempts
          FROM claimed
         WHERE (SELECT CASE WHEN c.n > 0 THEN pg_advisory_xact_lock(p_events_lock_key) END
                  FROM (SELECT count(*) AS n FROM claimed) AS c) IS NOT NULL
        RETURNING event_id
    ),
    rang AS (
        SELECT pg_notify('laneway_events', json_build_object('e', max(event_id))::text)
          FROM appended
        HAVING count(*) > 0
    )
    SELECT claimed.*
      FROM claimed
     WHERE (SELECT count(*) FROM rang) >= 0
     ORDER BY claimed.priority DESC, claimed.run_after, claimed.seq;
END;
$$;
