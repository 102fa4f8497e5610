-- laneway.claim(), its queue probe rewritten (the rest is as in 0004).
--
-- 0004 asked "does this queue have due work?" with EXISTS, which the planner may turn into a
-- semi-join that reads every pending instance (a bitmap scan of the whole backlog, then a
-- hash per queue): 5-6 ms per claim with 20,000 pending, whatever the claim's size, which
-- made that probe the largest cost of a claim. A scalar subquery with LIMIT 1 stays a
-- correlated probe of instances_claimable per queue: one index entry, under 0.1 ms.

CREATE OR REPLACE FUNCTION laneway.claim(
    p_owner text,
    p_names text[],
    p_limit integer,
    p_lease_seconds double precision,
    p_events_lock_key bigint
) RETURNS SETOF laneway.instances
LANGUAGE plpgsql
AS $$
DECLARE
    locked text[];
BEGIN
    -- A queue another process is claiming from is skipped this round. NO KEY UPDATE: claimers
    -- exclude each other, while enqueues (whose foreign key check takes KEY SHARE) never wait.
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
          FROM picked
         WHERE i.instance_id = picked.instance_id
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
