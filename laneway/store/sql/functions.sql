-- The current text of every function in the laneway schema, one place to read each.
--
-- The migrations in migrations/ are the schema's history and stay as they were applied; a
-- function changed by a later migration is restated there in full, so its text today is the
-- last of several copies. This file holds that text: tests/store/test_sql_current.py migrates
-- an empty database and checks that each function there is exactly the one here (and that
-- nothing is missing either way). A migration that changes a function changes this file too.
-- Nothing runs this file; the migrations build the schema.

-- laneway.append_events(): the one event append (0011; signals 0016). The claim, the group commit and the
-- store's statements all call it, once per statement, with their batch's events as arrays.
-- It takes the append lock before any event id is drawn and holds it to commit, so ids become
-- visible in id order (docs/event-ordering.md); callers call it only once their own rows are
-- written, so nobody waits on a row while holding that lock. Each row's `at` is the moment of
-- the append; `p_signals` names the signal of a `waiting` or `signalled` event. The NOTIFY is
-- a doorbell: the last id, and the ids of the instances cancelled here (comma-separated).
-- An empty batch appends nothing, takes no lock and rings nothing. Returns the last id.

CREATE OR REPLACE FUNCTION laneway.append_events(
    p_lock_key bigint,
    p_instance_ids uuid[],
    p_names text[],
    p_types text[],
    p_statuses text[],
    p_attempts integer[],
    p_errors text[],
    p_stages text[],
    p_checkpoints text[],
    p_cancelled_id text DEFAULT NULL,
    p_signals text[] DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    last_id bigint;
BEGIN
    IF coalesce(cardinality(p_instance_ids), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(p_lock_key);
    WITH appended AS (
        INSERT INTO laneway.events
               (instance_id, name, type, status, at, attempt, error, stage, checkpoint, signal)
        SELECT u.instance_id, u.name, u.type, u.status, clock_timestamp(), u.attempt, u.error,
               u.stage, u.checkpoint, u.signal
          FROM unnest(p_instance_ids, p_names, p_types, p_statuses, p_attempts, p_errors,
                      p_stages, p_checkpoints, p_signals)
               AS u (instance_id, name, type, status, attempt, error, stage, checkpoint, signal)
        RETURNING event_id
    )
    SELECT max(a.event_id) INTO last_id FROM appended AS a;
    PERFORM pg_notify('laneway_events',
                      json_strip_nulls(json_build_object('e', last_id, 'c', p_cancelled_id))::text);
    RETURN last_id;
END;
$$;

-- laneway.claim(): a whole claim in one round trip (0004; probe 0006; plans 0008; events 0011;
-- keys 0015; versions 0019: p_names holds run keys, 'name@version'; room 0023). Locks the
-- queues with due work and room first (a queue another claimer holds is skipped; a full one
-- is not locked, so a claim that finds every queue full writes nothing and commits without
-- a WAL flush),
-- then, in a snapshot taken after that lock, fills each queue's free slots (queue_room():
-- concurrency minus running instances across all processes, and for a rate-limited queue the
-- whole tokens in its bucket). With no keyed work due, the unkeyed rows in claim order; else
-- fair turns across the queue's lanes (each key with due work and room by key_room(), least
-- recently served first; the keys of the first due keyed rows in claim order; the unkeyed
-- lane), each lane read up to its share of the free slots, taken priority first. Tokens spent
-- are written back, the keys served move to the back of the turn order, each claimed instance
-- gets a `started` event, and the doorbell rings once. Then the keys at the front of the turn
-- order before the first one that could be served now are cleared away: those no instance
-- holds are deleted (migrations/0015 says why that is safe against a concurrent enqueue),
-- the others (full, out of tokens, no due work) move to the back.
-- Planned once per connection (force_generic_plan), so it is written to be an index path
-- whatever the estimates: the update finds its rows by primary key, every walk asks for rows in
-- an index's order with a LIMIT, and bitmap and sequential scans are off (a generic plan's
-- guesses for a small queue_keys chose a sort of all keys). No JIT: compiling cost ~50 ms where
-- the claim takes under 1 ms.
-- Instances that run alone (`isolated`, set by the recovery of expired leases: lost twice, or
-- at their last chance): a process running one claims nothing else; one is claimed only by a
-- process that runs nothing, and alone (laneway.isolation_kept(); migration 0029). A process's
-- claims do not overlap (0030: an owner's transaction-level advisory lock, tried, never waited
-- for), so a claim sees the instances its process's other claim took.

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

-- laneway.isolation_kept(): of a claim's picked instances, in claim order, the ones it takes
-- (0029). An instance whose worker was lost twice (or whose next loss dead-letters it) runs
-- alone, so that a step that kills its worker takes nothing else down with it: a process that
-- runs nothing takes it, and only it, when it comes first in claim order. A busy process
-- leaves it to one that is idle and takes the rest; but once it has been due for more than a
-- lease, a busy process takes nothing from it on in claim order, so that it drains and takes
-- it (it is not starved where every process stays busy). With no such instance among them
-- (nearly always), the ids as they came.

CREATE OR REPLACE FUNCTION laneway.isolation_kept(
    p_owner text,
    p_lease_seconds double precision,
    p_ids uuid[],
    p_isolated boolean[],
    p_due timestamp with time zone[]
) RETURNS uuid[]
LANGUAGE plpgsql
AS $$
DECLARE
    overdue bigint;
BEGIN
    IF NOT coalesce(true = ANY(p_isolated), false) THEN
        RETURN p_ids;
    END IF;
    IF p_isolated[1] AND NOT EXISTS (SELECT 1
                                       FROM laneway.instances AS i
                                      WHERE i.owner_id = p_owner
                                        AND i.status = 'running') THEN
        RETURN p_ids[1:1];
    END IF;
    SELECT min(u.n) INTO overdue
      FROM unnest(p_isolated, p_due) WITH ORDINALITY AS u (isolated, due, n)
     WHERE u.isolated
       AND u.due < now() - p_lease_seconds * interval '1 second';
    RETURN ARRAY(SELECT u.id
                   FROM unnest(p_ids, p_isolated) WITH ORDINALITY AS u (id, isolated, n)
                  WHERE NOT u.isolated
                    AND (overdue IS NULL OR u.n < overdue)
                  ORDER BY u.n);
END;
$$;

-- laneway.bucket_tokens(): the whole and partial tokens in a token bucket now (0015): `tokens`
-- as of `tokens_at`, refilled at rate/60 per second, at most one second's worth or one token.
-- NULL when there is no rate. Inlined where it is called.

CREATE OR REPLACE FUNCTION laneway.bucket_tokens(
    p_rate double precision,
    p_tokens double precision,
    p_tokens_at timestamptz
) RETURNS double precision
LANGUAGE sql
STABLE
AS $$
    SELECT CASE WHEN p_rate IS NULL THEN NULL
                ELSE LEAST(GREATEST(p_rate / 60.0, 1.0),
                           p_tokens + EXTRACT(EPOCH FROM now() - p_tokens_at) * p_rate / 60.0)
           END
$$;

-- laneway.queue_room() and laneway.key_room(): a queue's, or one key's, room now (0015): the
-- instances running across all processes, the tokens in its bucket, the free slots (what the
-- cap and the whole tokens allow; a key without a cap is capped by its queue only) and the
-- seconds until its next whole token (NULL without a rate). The claim, the waiting reasons and
-- the token wake-up read room from these only. Inlined where they are called.

CREATE OR REPLACE FUNCTION laneway.queue_room(
    p_queue text,
    p_concurrency integer,
    p_rate double precision,
    p_tokens double precision,
    p_tokens_at timestamptz
) RETURNS TABLE (running bigint, tokens_now double precision, slots integer,
                 token_in double precision)
LANGUAGE sql
STABLE
AS $$
    SELECT r.running, t.tokens_now,
           LEAST(p_concurrency - r.running, floor(COALESCE(t.tokens_now, 1e9)))::integer,
           CASE WHEN p_rate IS NOT NULL
                THEN GREATEST((1.0 - t.tokens_now) * 60.0 / p_rate, 0.0) END
      FROM (SELECT count(*) AS running
              FROM laneway.instances AS i
             WHERE i.queue = p_queue
               AND i.status = 'running') AS r,
           (SELECT laneway.bucket_tokens(p_rate, p_tokens, p_tokens_at) AS tokens_now) AS t
$$;

CREATE OR REPLACE FUNCTION laneway.key_room(
    p_queue text,
    p_key text,
    p_concurrency integer,
    p_rate double precision,
    p_tokens double precision,
    p_tokens_at timestamptz
) RETURNS TABLE (running bigint, tokens_now double precision, slots integer,
                 token_in double precision)
LANGUAGE sql
STABLE
AS $$
    SELECT r.running, t.tokens_now,
           LEAST(COALESCE(p_concurrency - r.running, 1e9),
                 floor(COALESCE(t.tokens_now, 1e9)))::integer,
           CASE WHEN p_rate IS NOT NULL
                THEN GREATEST((1.0 - t.tokens_now) * 60.0 / p_rate, 0.0) END
      FROM (SELECT count(*) AS running
              FROM laneway.instances AS i
             WHERE i.queue = p_queue
               AND i.concurrency_key = p_key
               AND i.status = 'running') AS r,
           (SELECT laneway.bucket_tokens(p_rate, p_tokens, p_tokens_at) AS tokens_now) AS t
$$;

-- laneway.queue_due() and laneway.key_due(): whether a queue has due pending work of these
-- workflows, unkeyed and keyed, or one key has (0015; run keys 0019): one probe each, in its
-- index's order.
-- Inlined where they are called.

CREATE OR REPLACE FUNCTION laneway.queue_due(
    p_queue text,
    p_names text[]
) RETURNS TABLE (unkeyed boolean, keyed boolean)
LANGUAGE sql
STABLE
AS $$
    SELECT (SELECT true
              FROM laneway.instances AS i
             WHERE i.queue = p_queue
               AND i.status = 'pending'
               AND i.concurrency_key IS NULL
               AND i.run_after <= now()
               AND i.name || '@' || i.version = ANY(p_names)
             ORDER BY i.priority DESC, i.run_after, i.seq
             LIMIT 1) IS NOT NULL,
           (SELECT true
              FROM laneway.instances AS i
             WHERE i.queue = p_queue
               AND i.status = 'pending'
               AND i.concurrency_key IS NOT NULL
               AND i.run_after <= now()
               AND i.name || '@' || i.version = ANY(p_names)
             ORDER BY i.concurrency_key, i.priority DESC, i.run_after, i.seq
             LIMIT 1) IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION laneway.key_due(
    p_queue text,
    p_key text,
    p_names text[]
) RETURNS TABLE (due boolean)
LANGUAGE sql
STABLE
AS $$
    SELECT (SELECT true
              FROM laneway.instances AS i
             WHERE i.queue = p_queue
               AND i.concurrency_key = p_key
               AND i.status = 'pending'
               AND i.run_after <= now()
               AND i.name || '@' || i.version = ANY(p_names)
             ORDER BY i.priority DESC, i.run_after, i.seq
             LIMIT 1) IS NOT NULL
$$;

-- laneway.key_held(): whether some instance still needs a key's queue_keys row (0015; waiting
-- 0016): one pending, running, paused or waiting with the key. The claim deletes only keys no instance holds.
-- Inlined where it is called.

CREATE OR REPLACE FUNCTION laneway.key_held(
    p_queue text,
    p_key text
) RETURNS TABLE (held boolean)
LANGUAGE sql
STABLE
AS $$
    SELECT EXISTS (SELECT 1
                     FROM laneway.instances AS i
                    WHERE i.queue = p_queue
                      AND i.concurrency_key = p_key
                      AND i.status = 'pending')
        OR EXISTS (SELECT 1
                     FROM laneway.instances AS i
                    WHERE i.queue = p_queue
                      AND i.concurrency_key = p_key
                      AND i.status = 'running')
        OR EXISTS (SELECT 1
                     FROM laneway.instances AS i
                    WHERE i.queue = p_queue
                      AND i.concurrency_key = p_key
                      AND i.status IN ('paused', 'waiting'))
$$;

-- laneway.hold_key(): makes or holds the queue_keys row of a key that is getting a pending
-- instance (0015): an enqueue's or a retry's; FOR KEY SHARE to commit, so a claim deleting
-- idle keys skips it, or the row is made anew after that delete.

CREATE OR REPLACE FUNCTION laneway.hold_key(
    p_queue text,
    p_key text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    LOOP
        PERFORM 1
           FROM laneway.queue_keys AS k
          WHERE k.queue = p_queue
            AND k.key = p_key
            FOR KEY SHARE;
        IF FOUND THEN
            RETURN true;
        END IF;
        INSERT INTO laneway.queue_keys (queue, key)
        VALUES (p_queue, p_key)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        -- Another transaction made the row and committed meanwhile: hold that one.
    END LOOP;
END;
$$;

-- laneway.write_runner_batch(): the group commit of many runners' writes (0010; events 0011;
-- waits 0016; failures and attempt budgets 0017; traces 0018; operations 0021; answers 0026;
-- a failure's stage on the instance 0032; the first traced step's context 0033; operations'
-- fix cycles 0034; a failure's report on the instance 0036; a running stage's report 0037).
-- Parameters, in order: $1 owner id, $2 lease seconds, $3 the event-append advisory lock key;
-- checkpoints $4..$13 (ids, states, next actions, next params, progress, messages, stages,
-- pause labels (NULL: keep running), lease epochs, attempts for their events); completions
-- $14..$17 (ids, results, states, lease epochs); failed attempts $18..$22 (ids, errors, retry
-- delays in ms, final flags, lease epochs); $23 the checkpoints' waits (json text[], NULL: none);
-- the failed attempts' exception types, messages, tracebacks, stages and operations $24..$28;
-- $29 their spans' trace contexts (W3C traceparent; the first is kept, for retries' links).
-- Then (0021) the completions' stages and messages (the last step's report, NULL: keep) and the
-- operation outcomes to record: instance ids, lease epochs, operation ids, stages, positions,
-- types, statuses, attempts, errors, data and metadata (json text), seconds run, seconds ago.
-- Then (0033) the checkpoints' and the completions' spans' trace contexts (W3C traceparent,
-- NULL: none). An instance kept no trace context when its enqueue was not traced; the first
-- step that is (a checkpoint, a completion or a failed attempt: $29) leaves its span's context
-- with it instead, so that its later steps, in whatever process, join that one trace.
-- Then (0034) the operation outcomes' fix cycles (0: the stage's first pass; NULL counts as 0).
-- Then (0036) the failed attempts' reports, progress and status line: a template's, of the stage
-- it failed in; NULL keeps the instance's, as a handler map's failure does (its report is saved
-- by its checkpoints only). Both default to NULL, so a call without them (a process of 0.3.8 or
-- earlier, still running while a rollout migrates) resolves to this function and keeps the
-- instance's.
-- Then (0037) the reports of template stages still running, one per instance (the latest of
-- the batch's writes of its operation outcomes): instance ids, lease epochs, stages, progress
-- and status lines. Each replaces the instance's stage, progress and message (NULL: keep) and
-- its updated_at, as a checkpoint's report does, with no event; fenced as every write, and
-- skipped for an instance whose checkpoint, completion or failed attempt is in the batch,
-- whose own report wins. All five default to NULL (none), so that a call without them (a
-- process of 0.3.10 or earlier) resolves to this function and keeps the instance's report.
-- Every write is fenced by (owner, lease epoch); a write that matches nothing returns no row.
-- A checkpoint saves state and the next action and renews the lease, or parks the instance
-- (no owner, no lease): paused with a pause label, waiting with a wait (a sleep or a wait for a
-- signal). A wait's json (engine/waits.py writes it) gives `seconds` until its wake time
-- (wake_at), the `signal` it waits for (wait_signal) and what happens then; the instance keeps
-- it as `wait`, which a paused one has too when its checkpoint has an input schema or expires.
-- `attempts` counts every attempt of the instance and never goes back; a step's attempts are
-- those since `attempt_base`: a checkpoint that goes on starts the next step's budget at this
-- attempt, one that parks the instance at the next claim. A failed attempt with attempts left (and
-- not final) waits out its backoff as pending; otherwise the instance ends failed. Instances
-- that ended give up their entity locks; the events are appended once every row is written
-- and every lock row deleted. One row per applied write.
-- Planned once per connection, so any plan must be linear in the batch: rows by primary key,
-- the owner as a column of the batch (not a constant), no status test (only a running
-- instance has an owner: 0009). No JIT.

CREATE OR REPLACE FUNCTION laneway.write_runner_batch(
    p_owner text,
    p_lease_seconds double precision,
    p_events_lock_key bigint,
    p_checkpoint_ids uuid[],
    p_checkpoint_states text[],
    p_checkpoint_next_actions text[],
    p_checkpoint_next_params text[],
    p_checkpoint_progress double precision[],
    p_checkpoint_messages text[],
    p_checkpoint_stages text[],
    p_checkpoint_pause_labels text[],
    p_checkpoint_epochs bigint[],
    p_checkpoint_attempts integer[],
    p_completion_ids uuid[],
    p_completion_results text[],
    p_completion_states text[],
    p_completion_epochs bigint[],
    p_failure_ids uuid[],
    p_failure_errors text[],
    p_failure_delays_ms double precision[],
    p_failure_final boolean[],
    p_failure_epochs bigint[],
    p_checkpoint_waits text[],
    p_failure_types text[],
    p_failure_messages text[],
    p_failure_tracebacks text[],
    p_failure_stages text[],
    p_failure_operations text[],
    p_failure_traces text[],
    p_completion_stages text[],
    p_completion_messages text[],
    p_operation_instance_ids uuid[],
    p_operation_epochs bigint[],
    p_operation_ids uuid[],
    p_operation_stages text[],
    p_operation_positions integer[],
    p_operation_types text[],
    p_operation_statuses text[],
    p_operation_attempts integer[],
    p_operation_errors text[],
    p_operation_data text[],
    p_operation_metadata text[],
    p_operation_seconds double precision[],
    p_operation_ago double precision[],
    p_checkpoint_traces text[],
    p_completion_traces text[],
    p_operation_fix_cycles integer[],
    p_failure_progress double precision[] DEFAULT NULL,
    p_failure_report_messages text[] DEFAULT NULL,
    p_report_ids uuid[] DEFAULT NULL,
    p_report_epochs bigint[] DEFAULT NULL,
    p_report_stages text[] DEFAULT NULL,
    p_report_progress double precision[] DEFAULT NULL,
    p_report_messages text[] DEFAULT NULL
) RETURNS TABLE (
    instance_id uuid,
    name text,
    queue text,
    status text,
    attempts integer,
    last_error text,
    stage text,
    checkpoint text
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH checkpointed AS (
        UPDATE laneway.instances AS i
           SET state = u.state::jsonb, next_action = u.next_action,
               next_params = u.next_params::jsonb,
               progress = COALESCE(u.progress, i.progress),
               message = COALESCE(u.message, i.message),
               stage = COALESCE(u.stage, i.stage),
               status = CASE WHEN u.pause_label IS NOT NULL THEN 'paused'
                             WHEN u.wait IS NOT NULL THEN 'waiting'
                             ELSE 'running' END,
               checkpoint = u.pause_label,
               wait = u.wait,
               wait_signal = u.wait ->> 'signal',
               wake_at = now() + (u.wait ->> 'seconds')::double precision * interval '1 second',
               attempt_base = CASE WHEN u.parked THEN i.attempts ELSE i.attempts - 1 END,
               owner_id = CASE WHEN NOT u.parked THEN i.owner_id END,
               lease_expires_at = CASE WHEN NOT u.parked
                                       THEN now() + $2 * interval '1 second' END,
               trace_context = COALESCE(i.trace_context, u.trace),  -- its first step's (0033)
               lease_renewed_at = now(), updated_at = now()
          FROM (SELECT u.*, $1 AS owner, u.wait_json::jsonb AS wait,
                       u.pause_label IS NOT NULL OR u.wait_json IS NOT NULL AS parked
                  FROM unnest($4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $23, $45)
                       AS u (instance_id, state, next_action, next_params, progress, message,
                             stage, pause_label, epoch, attempt, wait_json, trace)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($4)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.stage, i.checkpoint,
                  i.wait_signal
    ),
    completed AS (
        UPDATE laneway.instances AS i
           SET status = 'completed', result = u.result::jsonb, state = u.state::jsonb,
               next_action = NULL, next_params = NULL, progress = 1, owner_id = NULL,
               stage = COALESCE(u.stage, i.stage), message = COALESCE(u.message, i.message),
               trace_context = COALESCE(i.trace_context, u.trace),
               lease_expires_at = NULL, updated_at = now(), finished_at = now()
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($14, $15, $16, $17, $30, $31, $46)
                       AS u (instance_id, result, state, epoch, stage, message, trace)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($14)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.stage
    ),
    failed AS (
        UPDATE laneway.instances AS i
           SET status = CASE WHEN i.attempts - i.attempt_base < i.max_attempts AND NOT u.final
                             THEN 'pending' ELSE 'failed' END,
               run_after = CASE WHEN i.attempts - i.attempt_base < i.max_attempts AND NOT u.final
                                THEN now() + u.delay_ms * interval '1 millisecond'
                                ELSE i.run_after END,
               finished_at = CASE WHEN i.attempts - i.attempt_base < i.max_attempts
                                       AND NOT u.final
                                  THEN NULL ELSE now() END,
               last_error = u.error, owner_id = NULL, lease_expires_at = NULL,
               stage = COALESCE(u.stage, i.stage),  -- where it failed (0032)
               progress = COALESCE(u.progress, i.progress),  -- and how far it got there (0036)
               message = COALESCE(u.report, i.message),
               first_failed_trace = COALESCE(i.first_failed_trace, u.trace),
               trace_context = COALESCE(i.trace_context, u.trace),
               updated_at = now()
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($18, $19, $20, $21, $22, $24, $25, $26, $27, $28, $29, $48,
                              $49)
                       AS u (instance_id, error, delay_ms, final, epoch, type, message,
                             traceback, stage, operation, trace, progress, report)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($18)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.last_error, u.type,
                  u.message, u.traceback, COALESCE(u.stage, i.stage) AS stage, u.operation
    ),
    operated AS (
        -- Template operations' outcomes (0021), fenced as the writes are (the snapshot is
        -- the one before this statement's updates, so an instance completed here still
        -- counts as running for its last operations). Each row's times are as the runner
        -- saw them: finished `ago` seconds before this write, after running `seconds`; and
        -- the fix cycle whose pass wrote it (0034).
        INSERT INTO laneway.operations AS o
               (operation_id, instance_id, stage, position, type, status, attempts, error, data,
                metadata, started_at, finished_at, fix_cycle)
        SELECT u.operation_id, i.instance_id, u.stage, u.position, u.type, u.status,
               u.attempts, u.error, u.data::jsonb, u.metadata::jsonb,
               clock_timestamp() - (u.ago + u.seconds) * interval '1 second',
               clock_timestamp() - u.ago * interval '1 second', COALESCE(u.fix_cycle, 0)
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42, $43, $44,
                              $47)
                       AS u (instance_id, epoch, operation_id, stage, position, type, status,
                             attempts, error, data, metadata, seconds, ago, fix_cycle)
                OFFSET 0) AS u
          JOIN laneway.instances AS i ON i.instance_id = u.instance_id
         WHERE i.instance_id = ANY($32)
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        ON CONFLICT (instance_id, stage, position) DO UPDATE
           SET type = EXCLUDED.type, status = EXCLUDED.status, attempts = EXCLUDED.attempts,
               error = EXCLUDED.error, data = EXCLUDED.data, metadata = EXCLUDED.metadata,
               started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
               fix_cycle = EXCLUDED.fix_cycle
        RETURNING o.instance_id
    ),
    reported AS (
        -- The running stage's report (0037), carried by its operations' outcomes written
        -- while it runs: fenced as the writes are, and left to the step's own write where the
        -- instance has one here (its report wins, and one statement cannot update a row
        -- twice). No event: a report is not a step of the instance's lifecycle.
        UPDATE laneway.instances AS i
           SET stage = COALESCE(u.stage, i.stage),
               progress = COALESCE(u.progress, i.progress),
               message = COALESCE(u.message, i.message),
               updated_at = now()
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($50, $51, $52, $53, $54)
                       AS u (instance_id, epoch, stage, progress, message)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($50)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
           AND i.instance_id <> ALL($4)
           AND i.instance_id <> ALL($14)
           AND i.instance_id <> ALL($18)
        RETURNING i.instance_id
    ),
    recorded AS (
        -- Every failed attempt keeps its exception, for `failures` (0017).
        INSERT INTO laneway.failures
               (instance_id, attempt, type, message, traceback, stage, operation)
        SELECT f.instance_id, f.attempts, f.type, f.message, f.traceback, f.stage, f.operation
          FROM failed AS f
        RETURNING laneway.failures.instance_id
    ),
    written AS (
        SELECT c.instance_id, c.name, c.queue, c.status, c.attempts, NULL::text AS last_error,
               c.stage, c.checkpoint,
               CASE WHEN c.status IN ('paused', 'waiting') THEN c.status
                    ELSE 'checkpoint' END AS event_type,
               c.attempts AS event_attempt, c.wait_signal AS signal
          FROM checkpointed AS c
        UNION ALL
        SELECT d.instance_id, d.name, d.queue, d.status, d.attempts, NULL, d.stage, NULL,
               'completed', d.attempts, NULL
          FROM completed AS d
        UNION ALL
        SELECT f.instance_id, f.name, f.queue, f.status, f.attempts, f.last_error, f.stage, NULL,
               CASE WHEN f.status = 'pending' THEN 'retrying' ELSE 'failed' END, f.attempts, NULL
          FROM failed AS f
    ),
    unlocked AS (
        DELETE FROM laneway.locks AS l
         WHERE l.owner_instance IN (SELECT w.instance_id FROM written AS w
                                     WHERE w.status IN ('completed', 'failed'))
        RETURNING l.owner_instance
    ),
    appended AS (
        -- One call once every row is written and every lock row deleted: the one-time filter
        -- runs `unlocked` to its end first, and the aggregate reads every written row.
        SELECT laneway.append_events(
                   $3, array_agg(w.instance_id), array_agg(w.name), array_agg(w.event_type),
                   array_agg(w.status), array_agg(w.event_attempt), array_agg(w.last_error),
                   array_agg(w.stage), array_agg(w.checkpoint), NULL,
                   array_agg(w.signal)) AS last_event_id
          FROM written AS w
         WHERE (SELECT count(*) FROM unlocked) >= 0
           AND (SELECT count(*) FROM recorded) >= 0
           AND (SELECT count(*) FROM operated) >= 0
           AND (SELECT count(*) FROM reported) >= 0
        HAVING count(*) > 0
    )
    -- An instance with operation rows and no other write here answers as it was (running);
    -- one whose step's write carries them answers with that write's row alone (0026).
    SELECT i.instance_id, i.name, i.queue, i.status, i.attempts, NULL::text, i.stage,
           i.checkpoint
      FROM laneway.instances AS i
     WHERE i.instance_id = ANY(ARRAY(SELECT DISTINCT o.instance_id FROM operated AS o
                                      WHERE o.instance_id <> ALL($4)
                                        AND o.instance_id <> ALL($14)
                                        AND o.instance_id <> ALL($18)))
       AND (SELECT count(a.last_event_id) FROM appended AS a) >= 0
    UNION ALL
    SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
           w.checkpoint
      FROM written AS w
     WHERE (SELECT count(a.last_event_id) FROM appended AS a) >= 0;
END;
$$;

-- laneway.write_runner_batch_and_claim(): a group commit that frees room, and the claim of that
-- room, in one round trip and one transaction (0024). The batch's arguments are those of
-- laneway.write_runner_batch(), then the run keys registered here and how many instances this
-- process may take (0: none, the commit alone), then the failed attempts' reports (0036) and the
-- running stages' reports (0037): last, with their defaults, so that a call without them, from
-- a process of an earlier release, still resolves. The claim's statements come after the batch's in the same transaction, so the
-- room the batch freed is there for them; both append their events and ring their own
-- doorbell. The batch's rows come first, each with the event id its doorbell rang with and no
-- `claimed`; then one row per claimed instance, with its id and the instance row as
-- `claimed`. The transaction holds the event-append lock from the batch's
-- append to its commit, so the claim runs under it: every lock the claim takes is taken with
-- SKIP LOCKED or on rows only a claimer of a locked queue writes, so it waits on nobody who
-- could be waiting for that lock.

CREATE OR REPLACE FUNCTION laneway.write_runner_batch_and_claim(
    p_owner text,
    p_lease_seconds double precision,
    p_events_lock_key bigint,
    p_checkpoint_ids uuid[],
    p_checkpoint_states text[],
    p_checkpoint_next_actions text[],
    p_checkpoint_next_params text[],
    p_checkpoint_progress double precision[],
    p_checkpoint_messages text[],
    p_checkpoint_stages text[],
    p_checkpoint_pause_labels text[],
    p_checkpoint_epochs bigint[],
    p_checkpoint_attempts integer[],
    p_completion_ids uuid[],
    p_completion_results text[],
    p_completion_states text[],
    p_completion_epochs bigint[],
    p_failure_ids uuid[],
    p_failure_errors text[],
    p_failure_delays_ms double precision[],
    p_failure_final boolean[],
    p_failure_epochs bigint[],
    p_checkpoint_waits text[],
    p_failure_types text[],
    p_failure_messages text[],
    p_failure_tracebacks text[],
    p_failure_stages text[],
    p_failure_operations text[],
    p_failure_traces text[],
    p_completion_stages text[],
    p_completion_messages text[],
    p_operation_instance_ids uuid[],
    p_operation_epochs bigint[],
    p_operation_ids uuid[],
    p_operation_stages text[],
    p_operation_positions integer[],
    p_operation_types text[],
    p_operation_statuses text[],
    p_operation_attempts integer[],
    p_operation_errors text[],
    p_operation_data text[],
    p_operation_metadata text[],
    p_operation_seconds double precision[],
    p_operation_ago double precision[],
    p_checkpoint_traces text[],
    p_completion_traces text[],
    p_operation_fix_cycles integer[],
    p_names text[],
    p_limit integer,
    p_failure_progress double precision[] DEFAULT NULL,
    p_failure_report_messages text[] DEFAULT NULL,
    p_report_ids uuid[] DEFAULT NULL,
    p_report_epochs bigint[] DEFAULT NULL,
    p_report_stages text[] DEFAULT NULL,
    p_report_progress double precision[] DEFAULT NULL,
    p_report_messages text[] DEFAULT NULL
) RETURNS TABLE (
    instance_id uuid,
    name text,
    queue text,
    status text,
    attempts integer,
    last_error text,
    stage text,
    checkpoint text,
    last_event_id bigint,
    claimed laneway.instances
)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
           w.checkpoint, (SELECT laneway.drawn_event_id()), NULL::laneway.instances
      FROM laneway.write_runner_batch(
               p_owner, p_lease_seconds, p_events_lock_key, p_checkpoint_ids,
               p_checkpoint_states, p_checkpoint_next_actions, p_checkpoint_next_params,
               p_checkpoint_progress, p_checkpoint_messages, p_checkpoint_stages,
               p_checkpoint_pause_labels, p_checkpoint_epochs, p_checkpoint_attempts,
               p_completion_ids, p_completion_results, p_completion_states,
               p_completion_epochs, p_failure_ids, p_failure_errors, p_failure_delays_ms,
               p_failure_final, p_failure_epochs, p_checkpoint_waits, p_failure_types,
               p_failure_messages, p_failure_tracebacks, p_failure_stages,
               p_failure_operations, p_failure_traces, p_completion_stages,
               p_completion_messages, p_operation_instance_ids, p_operation_epochs,
               p_operation_ids, p_operation_stages, p_operation_positions, p_operation_types,
               p_operation_statuses, p_operation_attempts, p_operation_errors,
               p_operation_data, p_operation_metadata, p_operation_seconds, p_operation_ago,
               p_checkpoint_traces, p_completion_traces, p_operation_fix_cycles,
               p_failure_progress, p_failure_report_messages, p_report_ids, p_report_epochs,
               p_report_stages, p_report_progress, p_report_messages) AS w;
    IF p_limit > 0 AND cardinality(p_names) > 0 THEN
        RETURN QUERY
        SELECT NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::integer, NULL::text,
               NULL::text, NULL::text, (SELECT laneway.drawn_event_id()), c
          FROM laneway.claim(p_owner, p_names, p_limit, p_lease_seconds, p_events_lock_key) AS c;
    END IF;
END;
$$;

-- laneway.event_partitions() (0022): the range partitions of laneway.events and their bounds,
-- oldest first (the default partition has none and is not listed). The bounds are read back
-- from the catalog, the one place that cannot disagree with what PostgreSQL routes by.
CREATE OR REPLACE FUNCTION laneway.event_partitions()
RETURNS TABLE (name text, lower timestamptz, upper timestamptz)
LANGUAGE sql
STABLE
AS $$
SELECT c.relname::text, b.bound[1]::timestamptz, b.bound[2]::timestamptz
  FROM pg_inherits AS i
  JOIN pg_class AS c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)')
       AS b (bound)
 WHERE i.inhparent = 'laneway.events'::regclass
   AND b.bound IS NOT NULL
 ORDER BY 2
$$;

-- laneway.add_event_partition() (0022): a partition of laneway.events for [p_from, p_to), named by
-- its lower bound in UTC; returns its name, or NULL when a partition overlaps that range already
-- (another engine added it). It is built as a table of its own and attached, which locks the parent
-- only against other DDL (SHARE UPDATE EXCLUSIVE), never against appends or reads. Events the
-- default partition took for that range move into it first (attaching checks that the default holds
-- none); that check locks the default partition for a moment, hence the short lock_timeout: the
-- upkeep tries again at its next round.
-- As the schema's owner, whoever calls it (SECURITY DEFINER, 0031: a least-privilege role's
-- engine keeps the partitions too).
CREATE OR REPLACE FUNCTION laneway.add_event_partition(p_from timestamptz, p_to timestamptz)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET lock_timeout = '500ms'
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part text := 'events_' || to_char(p_from AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
BEGIN
    IF EXISTS (SELECT 1
                 FROM laneway.event_partitions() AS p
                WHERE p.lower < p_to
                  AND p.upper > p_from) THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE laneway.%I (LIKE laneway.events INCLUDING DEFAULTS'
                   ' INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)'
                   ' WITH (autovacuum_vacuum_scale_factor = 0.01,'
                   ' autovacuum_analyze_scale_factor = 0.02)', part);
    EXECUTE format('WITH moved AS (DELETE FROM laneway.events_default'
                   ' WHERE at >= $1 AND at < $2 RETURNING *)'
                   ' INSERT INTO laneway.%I SELECT * FROM moved', part)
      USING p_from, p_to;
    EXECUTE format('ALTER TABLE laneway.events ATTACH PARTITION laneway.%I'
                   ' FOR VALUES FROM (%L) TO (%L)', part, p_from, p_to);
    RETURN part;
END;
$$;

-- laneway.retire_event_partition() (0022, 0028): detach the partition p_name if it ended over an
-- hour ago (no append can still be landing in it) and no instance that still exists has an event in
-- it; returns whether it went. The check reads the partition before any strong lock is taken.
-- DETACH ... CONCURRENTLY is refused while a default partition exists, so the detach takes the
-- parent's ACCESS EXCLUSIVE lock, held only for the detach (catalog work, no row is touched) and
-- its commit, and waited for at most lock_timeout. The drop is a transaction of its own, with
-- no lock on the parent (laneway.drop_detached_event_partitions): the commit of a drop unlinks
-- the partition's files, which took ~0.3 s for a day of 1,000,000 events on a slow disk, and
-- appends waited that long while the detach's lock was held through it.
-- As the schema's owner, whoever calls it (SECURITY DEFINER, 0031: a least-privilege role's
-- engine keeps the partitions too).
CREATE OR REPLACE FUNCTION laneway.retire_event_partition(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET lock_timeout = '500ms'
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    live boolean;
BEGIN
    IF NOT EXISTS (SELECT 1
                     FROM laneway.event_partitions() AS p
                    WHERE p.name = p_name
                      AND p.upper <= now() - interval '1 hour') THEN
        RETURN false;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM laneway.%I AS e'
                   ' JOIN laneway.instances AS i ON i.instance_id = e.instance_id)', p_name)
       INTO live;
    IF live THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE laneway.events DETACH PARTITION laneway.%I', p_name);
    RETURN true;
END;
$$;

-- laneway.drop_detached_event_partitions() (0028): drop every event partition that was detached
-- (a table named as laneway.add_event_partition names them that is no partition any more:
-- retire_event_partition's, or one a crash left between its detach and this drop); returns
-- their names. Only the detached tables are locked.
-- As the schema's owner, whoever calls it (SECURITY DEFINER, 0031: a least-privilege role's
-- engine keeps the partitions too).
CREATE OR REPLACE FUNCTION laneway.drop_detached_event_partitions()
RETURNS SETOF text
LANGUAGE plpgsql
SECURITY DEFINER
SET lock_timeout = '500ms'
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part text;
BEGIN
    FOR part IN
        SELECT c.relname::text
          FROM pg_class AS c
         WHERE c.relnamespace = 'laneway'::regnamespace
           AND c.relkind = 'r'
           AND NOT c.relispartition
           AND c.relname ~ '^events_[0-9]{8}t[0-9]{6}$'
         ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE laneway.%I', part);
        RETURN NEXT part;
    END LOOP;
END;
$$;

-- laneway.analyze_events() (0031): ANALYZE the partitioned event log (the parent as a whole, and
-- each partition, a bounded sample each; PostgreSQL 15 has no ANALYZE ONLY). Autovacuum never
-- analyses a partitioned parent, whose statistics the planner uses for joins over the whole log.
CREATE OR REPLACE FUNCTION laneway.analyze_events()
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    ANALYZE laneway.events;
END;
$$;

-- laneway.drawn_event_id(): the last event id this session drew, NULL when it drew none yet
-- (0023). The claim and the group commit return it beside their rows: it is the id their
-- doorbell rang with, so the claimer can tell its own NOTIFY from other transactions' news.
-- (A statement that appended nothing gets an id of an earlier one, whose NOTIFY has come
-- already: it matches nothing later.)
CREATE OR REPLACE FUNCTION laneway.drawn_event_id()
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    RETURN currval(pg_get_serial_sequence('laneway.events', 'event_id'));
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RETURN NULL;
END;
$$;

-- laneway.idempotency_key_bucket(): the advisory lock an idempotency key is written under
-- (0035): the pair 7462 (apart from the owners' 7461 and the one-number keys) and one of 64
-- buckets, not the key's own hash. Every advisory lock is an entry in the server's shared lock
-- table (6,400 by default), held to commit, and a lock per key let a few batches of 1,000 keys
-- fill it, failing every other transaction. A bucket is held by one transaction at a time, so
-- the keys take at most 64 entries server-wide, plus one per waiting transaction; 64 is the
-- default max_locks_per_transaction, one transaction's nominal share. Keys that share a bucket
-- queue behind each other, the price of the bound.
CREATE OR REPLACE FUNCTION laneway.idempotency_key_bucket(
    p_key text
) RETURNS integer
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT hashtext(p_key) & 63
$$;

-- laneway.lock_idempotency_keys(): locks the buckets of `p_keys` (NULLs have none), each once,
-- in ascending order, to commit; how many. The batch enqueue takes them all before its first
-- row's laneway.idempotency_key_free(), so two batches never each hold a bucket the other
-- waits for (row order is the keys' order, not their buckets'), and a row's own lock then is
-- one already held: neither a wait nor another entry in the lock table.
CREATE OR REPLACE FUNCTION laneway.lock_idempotency_keys(
    p_keys text[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    bucket integer;
    locked integer := 0;
BEGIN
    FOR bucket IN
        SELECT DISTINCT laneway.idempotency_key_bucket(k.key)
          FROM unnest(p_keys) AS k (key)
         WHERE k.key IS NOT NULL
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(7462, bucket);
        locked := locked + 1;
    END LOOP;
    RETURN locked;
END;
$$;

-- laneway.idempotency_key_free(): whether an instance may take `p_key` as its own idempotency
-- key: no binding of it to another instance exists (0035). The enqueue statements call it for
-- each row with a key, before the row's insert; the instance's own keys are the unique index's
-- (the insert's ON CONFLICT). It takes the key's bucket lock (to commit;
-- laneway.idempotency_key_bucket; a batch holds it already) before it reads, and reads with a
-- snapshot of its own, so a binding that laneway.bind_idempotency_key() committed while this
-- waited for the lock is seen.
CREATE OR REPLACE FUNCTION laneway.idempotency_key_free(
    p_key text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7462, laneway.idempotency_key_bucket(p_key));
    RETURN NOT EXISTS (SELECT 1 FROM laneway.idempotency_aliases AS a WHERE a.key = p_key);
END;
$$;

-- laneway.bind_idempotency_key(): binds `p_key` to instance `p_instance_id` (0035), when an
-- enqueue with that key gives way to the instance holding its singleton key, unless an
-- instance holds the key as its own or a binding has it already; the instance the key answers
-- with: that one, or p_instance_id, or NULL if p_instance_id is gone (deleted meanwhile: the
-- enqueue tries again). Under the key's bucket lock, as laneway.idempotency_key_free().
CREATE OR REPLACE FUNCTION laneway.bind_idempotency_key(
    p_key text,
    p_instance_id uuid
) RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    bound uuid;
BEGIN
    PERFORM pg_advisory_xact_lock(7462, laneway.idempotency_key_bucket(p_key));
    SELECT i.instance_id INTO bound FROM laneway.instances AS i WHERE i.idempotency_key = p_key;
    IF NOT FOUND THEN
        SELECT a.instance_id INTO bound FROM laneway.idempotency_aliases AS a WHERE a.key = p_key;
    END IF;
    IF FOUND THEN
        RETURN bound;
    END IF;
    INSERT INTO laneway.idempotency_aliases (key, instance_id)
    SELECT p_key, i.instance_id
      FROM laneway.instances AS i
     WHERE i.instance_id = p_instance_id
       FOR KEY SHARE
    RETURNING instance_id INTO bound;
    RETURN bound;
END;
$$;
