-- Durable waits and human input (issue #19): sleeps, waits for signals with timeouts, and
-- review checkpoints with an input schema and an expiry.
--
-- A waiting instance is rows, not a task: status `waiting` holds no owner, no lease and no
-- slot (it is in none of the claim's indexes, which hold pending rows only), and survives
-- any process. Its columns:
--   - wake_at: when the database clock wakes it (a sleep's end, a signal wait's timeout, a
--     checkpoint's expiry); NULL when nothing will. instances_wake holds only rows that have
--     one, so the idle poll's look at the next wake-up, and the wake-up itself, read the few
--     rows due and never the waiting backlog;
--   - wait_signal: the name of the signal a waiting instance waits for;
--   - wait: what the handler asked for (engine/waits.py writes it): the wait's length, what
--     runs on a timeout, a checkpoint's input schema and what its expiry does.
-- laneway.signals keeps every signal sent to an instance. One that arrives before its wait is
-- kept (consumed_at NULL) until a wait of its name takes it; a wait takes the oldest first.
-- Whoever consumes one holds the instance's row lock (the sender's SELECT ... FOR UPDATE, the
-- runner's checkpoint, the wake-up's FOR UPDATE SKIP LOCKED), so a signal is consumed once,
-- and a signal sent while its wait is being written is seen by the statement after it.
-- An idempotency key is per instance: a second signal with it is not kept.
--
-- events.signal names the signal of `waiting` and `signalled` events (never the payload).
-- A waiting instance with a concurrency key keeps its key's row (key_held), and a waiting
-- singleton still counts as the one active instance of its key.

ALTER TABLE laneway.instances DROP CONSTRAINT instances_status_check;
ALTER TABLE laneway.instances
    ADD CONSTRAINT instances_status_check
    CHECK (status IN ('pending', 'running', 'paused', 'waiting', 'completed', 'failed',
                      'cancelled')) NOT VALID;
ALTER TABLE laneway.instances VALIDATE CONSTRAINT instances_status_check;

ALTER TABLE laneway.instances
    ADD COLUMN wake_at timestamptz,
    ADD COLUMN wait_signal text,
    ADD COLUMN wait jsonb;

CREATE INDEX instances_wake ON laneway.instances (wake_at) WHERE wake_at IS NOT NULL;

DROP INDEX laneway.instances_singleton_key;
CREATE UNIQUE INDEX instances_singleton_key
    ON laneway.instances (name, singleton_key)
    WHERE singleton_key IS NOT NULL AND status IN ('pending', 'running', 'paused', 'waiting');

-- Parked keyed rows (paused or waiting) keep their key: key_held looks them up here.
DROP INDEX laneway.instances_paused_keyed;
CREATE INDEX instances_parked_keyed
    ON laneway.instances (queue, concurrency_key)
    WHERE status IN ('paused', 'waiting') AND concurrency_key IS NOT NULL;

ALTER TABLE laneway.events ADD COLUMN signal text;

CREATE TABLE laneway.signals (
    signal_id       uuid PRIMARY KEY,
    instance_id     uuid NOT NULL,
    name            text NOT NULL,
    payload         jsonb,
    idempotency_key text,
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    sent_at         timestamptz NOT NULL DEFAULT now(),
    consumed_at     timestamptz
);

-- An instance's signals by name, oldest first: the kept one a wait takes, and retention's
-- delete by instance.
CREATE INDEX signals_instance ON laneway.signals (instance_id, name, seq);
CREATE UNIQUE INDEX signals_idempotency
    ON laneway.signals (instance_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The event append gains the events' signal names: a new argument, so a new function.
DROP FUNCTION laneway.append_events(bigint, uuid[], text[], text[], text[], integer[], text[],
                                    text[], text[], text);

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

-- The group commit gains the checkpoints' waits.
DROP FUNCTION laneway.write_runner_batch(text, double precision, bigint, uuid[], text[], text[],
                                         text[], double precision[], text[], text[], text[],
                                         bigint[], integer[], uuid[], text[], text[], bigint[],
                                         uuid[], text[], double precision[], boolean[],
                                         bigint[]);

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
    p_checkpoint_waits text[]
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
               attempts = CASE WHEN u.parked THEN 0 ELSE 1 END,
               owner_id = CASE WHEN NOT u.parked THEN i.owner_id END,
               lease_expires_at = CASE WHEN NOT u.parked
                                       THEN now() + $2 * interval '1 second' END,
               lease_renewed_at = now(), updated_at = now()
          FROM (SELECT u.*, $1 AS owner, u.wait_json::jsonb AS wait,
                       u.pause_label IS NOT NULL OR u.wait_json IS NOT NULL AS parked
                  FROM unnest($4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $23)
                       AS u (instance_id, state, next_action, next_params, progress, message,
                             stage, pause_label, epoch, attempt, wait_json)
                OFFSET 0) AS u
         WHERE i.instance_id = ANY($4)
           AND i.instance_id = u.instance_id
           AND i.owner_id = u.owner
           AND i.lease_epoch = u.epoch
        RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.stage, i.checkpoint,
                  i.wait_signal, u.attempt AS event_attempt
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
               CASE WHEN c.status IN ('paused', 'waiting') THEN c.status
                    ELSE 'checkpoint' END AS event_type,
               c.event_attempt, c.wait_signal AS signal
          FROM checkpointed AS c
        UNION ALL
        SELECT d.instance_id, d.name, d.queue, d.status, d.attempts, NULL, NULL, NULL,
               'completed', d.attempts, NULL
          FROM completed AS d
        UNION ALL
        SELECT f.instance_id, f.name, f.queue, f.status, f.attempts, f.last_error, NULL, NULL,
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
        HAVING count(*) > 0
    )
    SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
           w.checkpoint
      FROM written AS w
     WHERE (SELECT count(a.last_event_id) FROM appended AS a) >= 0;
END;
$$;
