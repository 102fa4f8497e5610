-- A template's report moves while its stage runs: the running stage's name, progress and
-- status line go to the instance with its operations' outcomes written mid-stage.
--
-- A template instance showed, in workflowInstance, `laneway status` and the dashboard, the
-- report of the stage before the one running (`stage: "first"`, `message: "first: 1 of 1
-- operations done"`) until the running stage ended, however long it took and however many of
-- its operations had finished: a stage's report was saved only by its step's own write (its
-- checkpoint, its completion or its failure), while the outcomes of the operations that
-- finished before (a sequence's, written before the next one starts; a parallel stage's,
-- written soon after while their siblings run on) went alone. Such a write now carries the
-- stage's report as of then (`analyze: 2 of 3 operations done (1 failed)`, in the words its
-- end uses), and the group commit stores it on the instance in the same statement: five more
-- arrays ($50..$54: instance ids, lease epochs, stages, progress, status lines; one report per
-- instance, the latest). The update is fenced as every write is (owner and lease epoch), and
-- skips an instance whose checkpoint, completion or failed attempt is in the same batch: that
-- write's report wins (and one statement cannot update a row twice). It makes no event (a
-- report is not a step of the instance's lifecycle) and moves updated_at, which users read as
-- the time of the instance's last change.
--
-- Rolling deploys: the five are new last parameters with DEFAULT NULL, of
-- laneway.write_runner_batch() and of laneway.write_runner_batch_and_claim() (after the
-- failures' reports of 0036), and the old signatures are dropped. A call with the old
-- arguments, from a process of 0.3.9 or 0.3.10 still running while the rollout migrates, then
-- resolves to the new function (its prepared statements are planned again against it) and
-- writes as it did, keeping the instance's report until its stage's step writes one; the fix
-- is the new processes'. The old functions could not stay beside the new ones: a call with the
-- old arguments would match both, the new one by its defaults, and PostgreSQL refuses such a
-- call as ambiguous (`function ... is not unique`). They are dropped IF EXISTS: a database
-- whose record of this migration was deleted by hand (a downgrade the docs do not allow, and
-- then an upgrade again) has the new functions already, and this migration applies again.
-- Both functions are restated in full; laneway/store/sql/functions.sql has their text.

DROP FUNCTION IF EXISTS laneway.write_runner_batch_and_claim(
    text, double precision, bigint, uuid[], text[], text[], text[], double precision[],
    text[], text[], text[], bigint[], integer[], uuid[], text[], text[], bigint[], uuid[], text[],
    double precision[], boolean[], bigint[], text[], text[], text[], text[], text[], text[],
    text[], text[], text[], uuid[], bigint[], uuid[], text[], integer[], text[], text[],
    integer[], text[], text[], text[], double precision[], double precision[], text[], text[],
    integer[], text[], integer, double precision[], text[]);

DROP FUNCTION IF EXISTS laneway.write_runner_batch(
    text, double precision, bigint, uuid[], text[], text[], text[], double precision[],
    text[], text[], text[], bigint[], integer[], uuid[], text[], text[], bigint[], uuid[], text[],
    double precision[], boolean[], bigint[], text[], text[], text[], text[], text[], text[],
    text[], text[], text[], uuid[], bigint[], uuid[], text[], integer[], text[], text[],
    integer[], text[], text[], text[], double precision[], double precision[], text[], text[],
    integer[], double precision[], text[]);

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
