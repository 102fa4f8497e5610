-- The current text of every function in the laneway schema, one place to read each.
--
-- The migrations in migrations/ are the schema's history and stay as they were applied; a
-- function changed by a later migration is restated there in full, so its text today is the
-- last of several copies. This file holds that text: tests/store/test_sql_current.py migrates
-- an empty database and checks that each function there is exactly the one here (and that
-- nothing is missing either way). A migration that changes a function changes this file too.
-- Nothing runs this file; the migrations build the schema.

-- laneway.append_events(): the one event append (0011). The claim, the group commit and the
-- store's statements all call it, once per statement, with their batch's events as arrays.
-- It takes the append lock before any event id is drawn and holds it to commit, so ids become
-- visible in id order (docs/event-ordering.md); callers call it only once their own rows are
-- written, so nobody waits on a row while holding that lock. Each row's `at` is the moment of
-- the append. The NOTIFY is a doorbell: the last id, and the id of an instance cancelled here.
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
    p_cancelled_id text DEFAULT NULL
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
               (instance_id, name, type, status, at, attempt, error, stage, checkpoint)
        SELECT u.instance_id, u.name, u.type, u.status, clock_timestamp(), u.attempt, u.error,
               u.stage, u.checkpoint
          FROM unnest(p_instance_ids, p_names, p_types, p_statuses, p_attempts, p_errors,
                      p_stages, p_checkpoints)
               AS u (instance_id, name, type, status, attempt, error, stage, checkpoint)
        RETURNING event_id
    )
    SELECT max(a.event_id) INTO last_id FROM appended AS a;
    PERFORM pg_notify('laneway_events',
                      json_strip_nulls(json_build_object('e', last_id, 'c', p_cancelled_id))::text);
    RETURN last_id;
END;
$$;

-- laneway.claim(): a whole claim in one round trip (0004; probe 0006; plans 0008; events 0011).
-- Locks the queues with due work first (a queue another claimer holds is skipped), then, in a
-- snapshot taken after that lock, fills each queue's free slots: concurrency minus running
-- instances across all processes, and for a rate-limited queue the whole tokens in its bucket
-- (refilled at rate/60 per second, at most one second's worth or one token). Tokens spent are
-- written back, each claimed instance gets a `started` event, and the doorbell rings once.
-- Planned once per connection (force_generic_plan), so two places are written to be an index
-- path whatever the estimates: the update finds its rows by primary key, and the per-queue
-- probe asks for the first due instance in instances_claimable's order. No JIT: compiling cost
-- ~50 ms where the claim takes under 1 ms.

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
END;
$$;

-- laneway.write_runner_batch(): the group commit of many runners' writes (0010; events 0011).
-- Parameters, in order: $1 owner id, $2 lease seconds, $3 the event-append advisory lock key;
-- checkpoints $4..$13 (ids, states, next actions, next params, progress, messages, stages,
-- pause labels (NULL: keep running), lease epochs, attempts for their events); completions
-- $14..$17 (ids, results, states, lease epochs); failed attempts $18..$22 (ids, errors, retry
-- delays in ms, final flags, lease epochs).
-- Every write is fenced by (owner, lease epoch); a write that matches nothing returns no row.
-- A checkpoint saves state and the next action and renews the lease, or with a pause label
-- parks the instance (paused, no owner, no lease). A failed attempt with attempts left (and
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
    p_failure_epochs bigint[]
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
               status = CASE WHEN u.pause_label IS NULL THEN 'running' ELSE 'paused' END,
               checkpoint = u.pause_label,
               attempts = CASE WHEN u.pause_label IS NULL THEN 1 ELSE 0 END,
               owner_id = CASE WHEN u.pause_label IS NULL THEN i.owner_id END,
               lease_expires_at = CASE WHEN u.pause_label IS NULL
                                       THEN now() + $2 * interval '1 second' END,
               lease_renewed_at = now(), updated_at = now()
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                       AS u (instance_id, state, next_action, next_params, progress, message,
                             stage, pause_label, epoch, attempt)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($4)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.stage, i.checkpoint,
                  u.attempt AS event_attempt
    ),
    completed AS (
        UPDATE laneway.instances AS i
           SET status = 'completed', result = u.result::jsonb, state = u.state::jsonb,
               next_action = NULL, next_params = NULL, progress = 1, owner_id = NULL,
               lease_expires_at = NULL, updated_at = now(), finished_at = now()
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($14, $15, $16, $17) AS u (instance_id, result, state, epoch)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($14)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts
    ),
    failed AS (
        UPDATE laneway.instances AS i
           SET status = CASE WHEN i.attempts < i.max_attempts AND NOT u.final
                             THEN 'pending' ELSE 'failed' END,
               run_after = CASE WHEN i.attempts < i.max_attempts AND NOT u.final
                                THEN now() + u.delay_ms * interval '1 millisecond'
                                ELSE i.run_after END,
               finished_at = CASE WHEN i.attempts < i.max_attempts AND NOT u.final
                                  THEN NULL ELSE now() END,
               last_error = u.error, owner_id = NULL, lease_expires_at = NULL,
               updated_at = now()
          FROM (SELECT u.*, $1 AS owner
                  FROM unnest($18, $19, $20, $21, $22)
                       AS u (instance_id, error, delay_ms, final, epoch)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($18)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.last_error
    ),
    written AS (
        SELECT c.instance_id, c.name, c.queue, c.status, c.attempts, NULL::text AS last_error,
               c.stage, c.checkpoint,
               CASE WHEN c.status = 'paused' THEN 'paused' ELSE 'checkpoint' END AS event_type,
               c.event_attempt
          FROM checkpointed AS c
        UNION ALL
        SELECT d.instance_id, d.name, d.queue, d.status, d.attempts, NULL, NULL, NULL,
               'completed', d.attempts
          FROM completed AS d
        UNION ALL
        SELECT f.instance_id, f.name, f.queue, f.status, f.attempts, f.last_error, NULL, NULL,
               CASE WHEN f.status = 'pending' THEN 'retrying' ELSE 'failed' END, f.attempts
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
                   array_agg(w.stage), array_agg(w.checkpoint)) AS last_event_id
          FROM written AS w
         WHERE (SELECT count(*) FROM unlocked) >= 0
        HAVING count(*) > 0
    )
    SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
           w.checkpoint
      FROM written AS w
     WHERE (SELECT count(a.last_event_id) FROM appended AS a) >= 0;
END;
$$;
