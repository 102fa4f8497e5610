-- One claim at a time per process: the isolation of 0029 without its gap.
--
-- A process claims in two places: its claim loop, and the claim riding on its group commit.
-- Each locks the queues it claims from (SKIP LOCKED), so on one queue they never overlap; on
-- two queues they could, and then neither saw the other's claim, uncommitted: one could take
-- an instance that must run alone while the other took instances to run beside it, or both
-- take one each. laneway.claim() now first tries a transaction-level advisory lock of its
-- owner (classid 7461, the owner id's hashtext) and takes nothing when another claim of the
-- same process holds it, as it skips a queue another claimer holds. It never waits, so no
-- order of locks can deadlock with the group commit's writes and event append before it; a
-- claim that finds the lock free runs its statements after the other claim committed, and
-- sees what that one took. Two owner ids with the same hash only skip each other's claim
-- when they coincide. laneway.claim() is restated in full; laneway/store/sql/functions.sql
-- has its text.

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
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    locked text[];
    keyed boolean;
    unkeyed_queues text[];  -- the locked queues with unkeyed work due
    front_queue text;
    front record;
    front_held boolean;
    front_servable boolean;
    front_full_bucket boolean;
    idle_queues text[];
    idle_keys text[];
    stuck_queues text[];
    stuck_keys text[];
BEGIN
    -- One claim at a time per process (0030): a claim of this process already under way (its
    -- loop's, or the one riding on its group commit) has this claim take nothing, as a queue
    -- another claimer holds is skipped below. So every claim sees what the process's last one
    -- committed: which instances it runs, and whether one of them runs alone. Never waits.
    IF NOT pg_try_advisory_xact_lock(7461, hashtext(p_owner)) THEN
        RETURN;
    END IF;
    -- A queue another process is claiming from is skipped this round. NO KEY UPDATE: claimers
    -- exclude each other; enqueues never lock the queue row (no foreign key since 0007).
    SELECT array_agg(q.name ORDER BY q.name), bool_or(q.keyed),
           array_agg(q.name) FILTER (WHERE q.unkeyed)
      INTO locked, keyed, unkeyed_queues
      FROM (SELECT q.name, due.keyed, due.unkeyed
              FROM laneway.queues AS q
             CROSS JOIN LATERAL laneway.queue_due(q.name, p_names) AS due
             WHERE NOT q.paused
               AND (due.unkeyed OR due.keyed)
               AND NOT EXISTS (SELECT 1  -- this process runs an instance alone: nothing else
                                 FROM laneway.instances AS alone
                                WHERE alone.owner_id = p_owner
                                  AND alone.status = 'running'
                                  AND alone.isolated)
               AND (SELECT room.slots
                      FROM laneway.queue_room(q.name, q.concurrency, q.rate_per_minute,
                                              q.tokens, q.tokens_at) AS room) > 0
             ORDER BY q.name
               FOR NO KEY UPDATE OF q SKIP LOCKED) AS q;
    IF locked IS NULL THEN
        RETURN;
    END IF;
    IF NOT keyed THEN
        -- No keyed work due: the unkeyed lane alone, in claim order, as before keys.
        RETURN QUERY
        WITH allowance AS (
            SELECT q.name, q.rate_per_minute, room.tokens_now,
                   GREATEST(LEAST(room.slots, p_limit), 0) AS slots
              FROM laneway.queues AS q
             CROSS JOIN LATERAL laneway.queue_room(q.name, q.concurrency, q.rate_per_minute,
                                                   q.tokens, q.tokens_at) AS room
             WHERE q.name = ANY(locked)
        ),
        picked AS (
            SELECT p.instance_id, p.priority, p.run_after, p.seq, p.isolated
              FROM allowance AS a
             CROSS JOIN LATERAL (
                SELECT i.instance_id, i.priority, i.run_after, i.seq, i.isolated
                  FROM laneway.instances AS i
                 WHERE i.queue = a.name
                   AND i.status = 'pending'
                   AND i.concurrency_key IS NULL
                   AND i.run_after <= now()
                   AND i.name || '@' || i.version = ANY(p_names)
                 ORDER BY i.priority DESC, i.run_after, i.seq
                 LIMIT a.slots
                   FOR UPDATE SKIP LOCKED) AS p
             ORDER BY p.priority DESC, p.run_after, p.seq
             LIMIT p_limit
        ),
        kept AS (
            SELECT laneway.isolation_kept(
                       p_owner, p_lease_seconds,
                       array_agg(picked.instance_id ORDER BY picked.priority DESC,
                                 picked.run_after, picked.seq),
                       array_agg(picked.isolated ORDER BY picked.priority DESC,
                                 picked.run_after, picked.seq),
                       array_agg(picked.run_after ORDER BY picked.priority DESC,
                                 picked.run_after, picked.seq)) AS ids
              FROM picked
        ),
        claimed AS (
            UPDATE laneway.instances AS i
               SET status = 'running', owner_id = p_owner, attempts = i.attempts + 1,
                   lease_epoch = i.lease_epoch + 1, claimed_at = now(),
                   lease_renewed_at = now(),
                   lease_expires_at = now() + p_lease_seconds * interval '1 second',
                   updated_at = now()
             WHERE i.instance_id = ANY((SELECT kept.ids FROM kept)::uuid[])
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
            SELECT laneway.append_events(
                       p_events_lock_key, array_agg(c.instance_id), array_agg(c.name),
                       array_agg('started'::text), array_agg(c.status), array_agg(c.attempts),
                       NULL, NULL, NULL) AS last_event_id
              FROM claimed AS c
            HAVING count(*) > 0
        )
        SELECT claimed.*
          FROM claimed
         WHERE (SELECT count(appended.last_event_id) FROM appended) >= 0
         ORDER BY claimed.priority DESC, claimed.run_after, claimed.seq;
    ELSE
        RETURN QUERY
        WITH allowance AS (
            SELECT q.name, q.rate_per_minute, q.key_concurrency, q.key_rate_per_minute,
                   q.unkeyed_served_at, room.tokens_now,
                   q.name = ANY(unkeyed_queues) AS unkeyed_due,  -- as the lock found it
                   GREATEST(LEAST(room.slots, p_limit), 0) AS slots
              FROM laneway.queues AS q
             CROSS JOIN LATERAL laneway.queue_room(q.name, q.concurrency, q.rate_per_minute,
                                                   q.tokens, q.tokens_at) AS room
             WHERE q.name = ANY(locked)
        ),
        lanes AS (
            -- Per queue, the keys whose turn it is: the keys with due work and room, least
            -- recently served first, at most as many as the queue has free slots; and the keys
            -- of its first due keyed rows in claim order (priority first), so a higher priority
            -- in a key whose turn is far off still goes first.
            SELECT a.name AS queue, k.key, k.served_at, kr.tokens_now,
                   LEAST(kr.slots, a.slots) AS room
              FROM allowance AS a
             CROSS JOIN LATERAL (
                SELECT w.key
                  FROM (SELECT w.key
                          FROM laneway.queue_keys AS w
                         CROSS JOIN LATERAL laneway.key_room(w.queue, w.key, a.key_concurrency,
                                                             a.key_rate_per_minute, w.tokens,
                                                             w.tokens_at) AS wr
                         CROSS JOIN LATERAL laneway.key_due(w.queue, w.key, p_names) AS due
                         WHERE w.queue = a.name
                           AND wr.slots > 0
                           AND due.due
                         ORDER BY w.served_at, w.key
                         LIMIT a.slots) AS w
                UNION
                SELECT t.concurrency_key
                  FROM (SELECT i.concurrency_key
                          FROM laneway.instances AS i
                         WHERE i.queue = a.name
                           AND i.status = 'pending'
                           AND i.concurrency_key IS NOT NULL
                           AND i.run_after <= now()
                           AND i.name || '@' || i.version = ANY(p_names)
                         ORDER BY i.priority DESC, i.run_after, i.seq
                         LIMIT a.slots) AS t) AS chosen
             CROSS JOIN LATERAL (
                SELECT k.key, k.served_at, k.tokens, k.tokens_at
                  FROM laneway.queue_keys AS k
                 WHERE k.queue = a.name
                   AND k.key = chosen.key
                 LIMIT 1) AS k  -- one row by primary key; the LIMIT keeps it a lookup per key
             CROSS JOIN LATERAL laneway.key_room(a.name, k.key, a.key_concurrency,
                                                 a.key_rate_per_minute, k.tokens,
                                                 k.tokens_at) AS kr
             WHERE kr.slots > 0
        ),
        shares AS (
            -- A lane's fair share of its queue's free slots, rounded up: all a claim reads of it.
            SELECT a.name, a.slots, a.unkeyed_due, a.unkeyed_served_at,
                   ceil(a.slots::numeric
                        / GREATEST((SELECT count(*) FROM lanes AS l WHERE l.queue = a.name)
                                   + CASE WHEN a.unkeyed_due THEN 1 ELSE 0 END, 1)
                   )::integer AS share
              FROM allowance AS a
        ),
        candidates AS (
            SELECT p.instance_id, p.priority, p.run_after, p.seq, p.isolated, l.queue, l.key,
                   l.served_at
              FROM lanes AS l
              JOIN shares AS s ON s.name = l.queue
             CROSS JOIN LATERAL (
                SELECT i.instance_id, i.priority, i.run_after, i.seq, i.isolated
                  FROM laneway.instances AS i
                 WHERE i.queue = l.queue
                   AND i.concurrency_key = l.key
                   AND i.status = 'pending'
                   AND i.run_after <= now()
                   AND i.name || '@' || i.version = ANY(p_names)
                 ORDER BY i.priority DESC, i.run_after, i.seq
                 LIMIT LEAST(l.room, s.share)
                   FOR UPDATE SKIP LOCKED) AS p
            UNION ALL
            SELECT p.instance_id, p.priority, p.run_after, p.seq, p.isolated, s.name, NULL,
                   s.unkeyed_served_at
              FROM shares AS s
             CROSS JOIN LATERAL (
                SELECT i.instance_id, i.priority, i.run_after, i.seq, i.isolated
                  FROM laneway.instances AS i
                 WHERE i.queue = s.name
                   AND i.status = 'pending'
                   AND i.concurrency_key IS NULL
                   AND i.run_after <= now()
                   AND i.name || '@' || i.version = ANY(p_names)
                 ORDER BY i.priority DESC, i.run_after, i.seq
                 LIMIT CASE WHEN s.unkeyed_due THEN s.share ELSE 0 END
                   FOR UPDATE SKIP LOCKED) AS p
        ),
        turns AS (
            -- Each lane's rows take turns within a priority: the first row of every lane, least
            -- recently served lane first, then the second of every lane, and so on.
            SELECT c.*,
                   row_number() OVER (PARTITION BY c.queue
                                      ORDER BY c.priority DESC, c.turn, c.served_at,
                                               c.key NULLS FIRST) AS place
              FROM (SELECT c.*,
                           row_number() OVER (PARTITION BY c.queue, c.key, c.priority
                                              ORDER BY c.run_after, c.seq) AS turn
                      FROM candidates AS c) AS c
        ),
        picked AS (
            SELECT t.instance_id, t.priority, t.place, t.run_after, t.seq, t.isolated
              FROM turns AS t
              JOIN shares AS s ON s.name = t.queue
             WHERE t.place <= s.slots
             ORDER BY t.priority DESC, t.place, t.run_after, t.seq
             LIMIT p_limit
        ),
        kept AS (
            SELECT laneway.isolation_kept(
                       p_owner, p_lease_seconds,
                       array_agg(picked.instance_id ORDER BY picked.priority DESC, picked.place,
                                 picked.run_after, picked.seq),
                       array_agg(picked.isolated ORDER BY picked.priority DESC, picked.place,
                                 picked.run_after, picked.seq),
                       array_agg(picked.run_after ORDER BY picked.priority DESC, picked.place,
                                 picked.run_after, picked.seq)) AS ids
              FROM picked
        ),
        claimed AS (
            UPDATE laneway.instances AS i
               SET status = 'running', owner_id = p_owner, attempts = i.attempts + 1,
                   lease_epoch = i.lease_epoch + 1, claimed_at = now(), lease_renewed_at = now(),
                   lease_expires_at = now() + p_lease_seconds * interval '1 second',
                   updated_at = now()
             WHERE i.instance_id = ANY((SELECT kept.ids FROM kept)::uuid[])
            RETURNING i.*
        ),
        spent AS (
            -- The queue's bucket, and when its unkeyed lane was last served (where keys compete).
            UPDATE laneway.queues AS q
               SET tokens = COALESCE(a.tokens_now - c.n, q.tokens),
                   tokens_at = CASE WHEN a.rate_per_minute IS NULL THEN q.tokens_at ELSE now() END,
                   unkeyed_served_at = CASE WHEN c.unkeyed > 0 THEN now()
                                            ELSE q.unkeyed_served_at END
              FROM allowance AS a,
                   (SELECT claimed.queue, count(*) AS n,
                           count(*) FILTER (WHERE claimed.concurrency_key IS NULL) AS unkeyed
                      FROM claimed
                     GROUP BY claimed.queue) AS c
             WHERE q.name = a.name
               AND c.queue = a.name
               AND (a.rate_per_minute IS NOT NULL
                    OR (c.unkeyed > 0 AND EXISTS (SELECT 1 FROM lanes AS l WHERE l.queue = a.name)))
        ),
        served AS (
            -- Each key served moves to the back of the turn order, its bucket spent.
            UPDATE laneway.queue_keys AS k
               SET served_at = now(),
                   tokens = COALESCE(l.tokens_now - c.n, k.tokens),
                   tokens_at = CASE WHEN l.tokens_now IS NULL THEN k.tokens_at ELSE now() END
              FROM lanes AS l,
                   (SELECT claimed.queue, claimed.concurrency_key, count(*) AS n
                      FROM claimed
                     WHERE claimed.concurrency_key IS NOT NULL
                     GROUP BY claimed.queue, claimed.concurrency_key) AS c
             WHERE k.queue = l.queue
               AND k.key = l.key
               AND c.queue = l.queue
               AND c.concurrency_key = l.key
        ),
        appended AS (
            -- One call once every claimed row is updated (the aggregate reads them all first).
            SELECT laneway.append_events(
                       p_events_lock_key, array_agg(c.instance_id), array_agg(c.name),
                       array_agg('started'::text), array_agg(c.status), array_agg(c.attempts),
                       NULL, NULL, NULL) AS last_event_id
              FROM claimed AS c
            HAVING count(*) > 0
        )
        SELECT claimed.*
          FROM claimed
         WHERE (SELECT count(appended.last_event_id) FROM appended) >= 0
         ORDER BY claimed.priority DESC, claimed.run_after, claimed.seq;
    END IF;

    -- The front of each queue's turn order, after this claim: every key before the first one
    -- that could be served now (room and due work) is either held by no instance any more
    -- (it goes) or cannot be served now: full, out of tokens, or with no due work here (it
    -- moves to the back). So no claim walks past the same idle or stuck keys again, and a
    -- queue's idle keys go as soon as claims reach them. At most 1,000 keys per claim; the
    -- walk stops at the first servable key, so it is one key when the front is in order.
    FOREACH front_queue IN ARRAY locked LOOP
        FOR front IN
            SELECT f.key, f.tokens, f.tokens_at, q.key_concurrency, q.key_rate_per_minute
              FROM laneway.queue_keys AS f
              JOIN laneway.queues AS q ON q.name = f.queue
             WHERE f.queue = front_queue
             ORDER BY f.served_at, f.key
             LIMIT 1000
        LOOP
            SELECT held.held, kr.slots > 0 AND due.due,
                   COALESCE(kr.tokens_now >= GREATEST(front.key_rate_per_minute / 60.0, 1.0),
                            true)
              INTO front_held, front_servable, front_full_bucket
              FROM laneway.key_held(front_queue, front.key) AS held,
                   laneway.key_room(front_queue, front.key, front.key_concurrency,
                                    front.key_rate_per_minute, front.tokens,
                                    front.tokens_at) AS kr,
                   laneway.key_due(front_queue, front.key, p_names) AS due;
            EXIT WHEN front_servable;
            IF NOT front_held AND front_full_bucket THEN
                idle_queues := idle_queues || front_queue;
                idle_keys := idle_keys || front.key;
            ELSE
                stuck_queues := stuck_queues || front_queue;
                stuck_keys := stuck_keys || front.key;
            END IF;
        END LOOP;
    END LOOP;
    IF stuck_keys IS NOT NULL THEN
        UPDATE laneway.queue_keys AS k
           SET served_at = now()
          FROM unnest(stuck_queues, stuck_keys) AS d (queue, key)
         WHERE k.queue = d.queue
           AND k.key = d.key;
    END IF;
    IF idle_keys IS NOT NULL THEN
        SELECT array_agg(k.queue), array_agg(k.key) INTO idle_queues, idle_keys
          FROM (SELECT k.queue, k.key
                  FROM unnest(idle_queues, idle_keys) AS d (queue, key)
                  JOIN laneway.queue_keys AS k ON k.queue = d.queue AND k.key = d.key
                   FOR UPDATE OF k SKIP LOCKED) AS k;
    END IF;
    IF idle_keys IS NOT NULL THEN
        DELETE FROM laneway.queue_keys AS k
         USING unnest(idle_queues, idle_keys) AS d (queue, key)
         CROSS JOIN LATERAL laneway.key_held(d.queue, d.key) AS held
         WHERE k.queue = d.queue
           AND k.key = d.key
           AND NOT held.held;
    END IF;
END;
$$;
