-- The group commit with its claim reads its doorbell's event id once per part, not once per
-- row. laneway.drawn_event_id() runs in an exception block (a subtransaction each call) and
-- looks its sequence up: called for each of a batch's rows and each claimed row, it cost about
-- a fifth of a capped lane's commit (20 calls for a cohort of 10). As a scalar subquery it is
-- read once, when the first row is read, by which time the function's rows, and so its events,
-- all exist (a plpgsql function's rows are all made before the first is read), as the
-- standalone claim's and batch's statements read it (laneway/store/queries/leases.py).
-- laneway.write_runner_batch_and_claim() is restated in full (functions.sql has it).

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
    p_names text[],
    p_limit integer
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
               p_operation_data, p_operation_metadata, p_operation_seconds, p_operation_ago) AS w;
    IF p_limit > 0 AND cardinality(p_names) > 0 THEN
        RETURN QUERY
        SELECT NULL::uuid, NULL::text, NULL::text, NULL::text, NULL::integer, NULL::text,
               NULL::text, NULL::text, (SELECT laneway.drawn_event_id()), c
          FROM laneway.claim(p_owner, p_names, p_limit, p_lease_seconds, p_events_lock_key) AS c;
    END IF;
END;
$$;
