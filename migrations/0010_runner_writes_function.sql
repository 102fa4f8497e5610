-- The group commit of runner writes is a function, planned once per connection.
--
-- Sent as a statement, it was planned anew on every call: PostgreSQL kept preferring a custom
-- plan for it (pg_prepared_statements showed 0 generic and 90 custom plans after 90 calls), as
-- it did for the claim's statements (0008). Planning this statement of six parts was about
-- half of each group commit: 50 completions took 2.03 ms, 1.16 ms with a generic plan; one
-- completion 0.92 ms, 0.40 ms. A run's slot stays taken until its commit returns, so every
-- instance waited that long longer for its end, and its successor for its start.
--
-- A generic plan knows neither the batch's size (it guesses 10 rows for each unnest) nor the
-- owner, so the statement is written so that any plan for it is linear in the batch:
--   - the rows are found by primary key: `instance_id = ANY(ids)`;
--   - the owner is compared as a column of the batch, not as a constant. Statistics say that
--     almost no row has a given owner (most rows are finished, with none), and with a
--     restriction that selective the planner drove the join from the instances side and
--     read the whole unnested batch again for each row it found: quadratic in the batch
--     (1.12 ms to complete 50 instances, against ~0.5 ms for the update itself);
--   - no status test (only a running instance has an owner: 0009); it let the planner start
--     from the instances_running index, with the same one-row estimate.
-- And no JIT, as for the claim (0008).
--
-- Parameters, in order (the statement names them $1..$22):
--   $1 owner id, $2 lease seconds, $3 the event-append advisory lock key;
--   checkpoints: $4 instance ids, $5 states (json text), $6 next actions, $7 next params (json
--     text), $8 progress, $9 messages, $10 stages, $11 pause labels (NULL: keep running),
--     $12 lease epochs, $13 attempts (for their events);
--   completions: $14 instance ids, $15 results (json text), $16 states (json text), $17 lease
--     epochs;
--   failed attempts: $18 instance ids, $19 errors, $20 retry delays in ms, $21 final flags,
--     $22 lease epochs.
--
-- What it does: many runners' writes in one statement and one transaction. Every write is
-- fenced by (owner, lease epoch); a write that matches nothing returns no row (its lease is
-- lost). Each instance appears at most once per batch.
--   - A checkpoint saves state and the next action and renews the lease; with a pause label
--     it parks the instance instead: paused, no owner, no lease, no slot (resuming makes it
--     pending again at the checkpointed action with fresh attempts).
--   - A failed attempt with attempts left (and not final) waits out its backoff as pending,
--     keeping the state and action of its last checkpoint; otherwise the instance ends failed.
--   - Instances that ended give up their entity locks. Events are appended under the append
--     lock once every row is written and every lock row deleted (the gate reads both counts;
--     waiting on a row while holding the append lock could deadlock), then the doorbell
--     rings.
-- One row per applied write: the instance as the write left it.

CREATE FUNCTION laneway.write_runner_batch(
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
        INSERT INTO laneway.events
               (instance_id, name, type, status, at, attempt, error, stage, checkpoint)
        SELECT w.instance_id, w.name, w.event_type, w.status, clock_timestamp(),
               w.event_attempt, w.last_error, w.stage, w.checkpoint
          FROM written AS w
         WHERE (SELECT CASE WHEN n.rows > 0 THEN pg_advisory_xact_lock($3) END
                  FROM (SELECT (SELECT count(*) FROM written) AS rows,
                               (SELECT count(*) FROM unlocked) AS released) AS n) IS NOT NULL
        RETURNING event_id
    ),
    rang AS (
        SELECT pg_notify('laneway_events', json_build_object('e', max(a.event_id))::text)
          FROM appended AS a
        HAVING count(*) > 0
    )
    SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
           w.checkpoint
      FROM written AS w
     WHERE (SELECT count(*) FROM rang) >= 0;
END;
$$;
