"""Waits and signals: sending a signal, consuming kept signals, and the wake-up of instances
whose wake time came (a sleep's end, a signal wait's timeout, a checkpoint's expiry); for
tests, timers made due at once.

See laneway/store/queries/__init__.py for how statements are written, and
migrations/0016_waits.sql for the columns and why a signal is consumed once.
"""

# The seconds until the next wake-up of a waiting or paused instance (<= 0: due now; NULL: none
# will wake): the first row of instances_wake, never the waiting rows. The idle poll's too.
NEXT_WAKE_IN = """
SELECT EXTRACT(EPOCH FROM w.wake_at - now())::double precision
  FROM (SELECT wake_at
          FROM laneway.instances
         WHERE wake_at IS NOT NULL
         ORDER BY wake_at
         LIMIT 1) AS w
"""

# $1 instance id
# What a resume checks its input against, without reading the instance's state: its status,
# the checkpoint it is paused at, that checkpoint's input schema (NULL: none), and whether it
# expired (no engine has woken it yet; then the expiry decides, not a resume).
PAUSE_OF = """
SELECT status, checkpoint, wait -> 'input_schema' AS input_schema,
       (wait ->> 'max_input_bytes')::bigint AS max_input_bytes,
       COALESCE(wake_at < now(), false) AS expired
  FROM laneway.instances
 WHERE instance_id = $1
"""

# $1 instance id
# The sender's lock on the instance: whoever consumes a signal holds it (0016 says why).
LOCK_INSTANCE = """
SELECT status
  FROM laneway.instances
 WHERE instance_id = $1
   FOR UPDATE
"""

# $1 instance id, $2 idempotency key
FIND_SIGNAL = """
SELECT signal_id
  FROM laneway.signals
 WHERE instance_id = $1
   AND idempotency_key = $2
"""

# $1 signal id, $2 instance id, $3 name, $4 payload (json text), $5 idempotency key
INSERT_SIGNAL = """
INSERT INTO laneway.signals (signal_id, instance_id, name, payload, idempotency_key)
VALUES ($1, $2, $3, $4::jsonb, $5)
"""

# $1 instance ids (uuid[])
# Each of these instances that waits for a signal takes the oldest kept signal of that name,
# if there is one: the signal is consumed, and the instance goes on (pending) with its payload
# as the params of the action it waits to run. Run after a signal is inserted (by its sender)
# and after a wait is written (by the group commit), each holding the instances' row locks.
# A wait whose timeout passed takes nothing, though no engine has woken it yet: its timeout
# decides (the signal stays kept); a wait of no time, written now, still takes a kept one.
CONSUME_SIGNALS = """
WITH waiting AS (
    SELECT i.instance_id, i.wait_signal
      FROM laneway.instances AS i
     WHERE i.instance_id = ANY($1::uuid[])
       AND i.status = 'waiting'
       AND i.wait_signal IS NOT NULL
       AND (i.wake_at IS NULL OR i.wake_at >= now())
       FOR UPDATE
),
kept AS (
    SELECT w.instance_id, s.signal_id, s.name, s.payload
      FROM waiting AS w
     CROSS JOIN LATERAL (
        SELECT s.signal_id, s.name, s.payload
          FROM laneway.signals AS s
         WHERE s.instance_id = w.instance_id
           AND s.name = w.wait_signal
           AND s.consumed_at IS NULL
         ORDER BY s.seq
         LIMIT 1) AS s
),
taken AS (
    UPDATE laneway.signals AS s
       SET consumed_at = now()
      FROM kept AS k
     WHERE s.signal_id = k.signal_id
    RETURNING s.signal_id
)
UPDATE laneway.instances AS i
   SET status = 'pending', next_params = k.payload, wake_at = NULL, wait_signal = NULL,
       wait = NULL, run_after = now(), updated_at = now()
  FROM kept AS k
 WHERE i.instance_id = k.instance_id
   AND (SELECT count(*) FROM taken) >= 0
RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, k.name AS signal
"""

# What a wait of instance `i` becomes once its wake time came: a sleep, and a signal wait with
# an on_timeout action, go on pending; one without fails; a checkpoint's expiry resumes
# (pending), cancels or fails. NULL for an instance that does not wait. (The waiting reasons
# read it too: queries/waiting.py.)
WOKEN_STATUS = """CASE WHEN i.status = 'waiting' AND i.wait_signal IS NULL THEN 'pending'
                WHEN i.status = 'waiting' AND i.wait ->> 'on_timeout' IS NOT NULL THEN 'pending'
                WHEN i.status = 'waiting' THEN 'failed'
                WHEN i.status = 'paused' AND i.wait -> 'expiry' ->> 'then' = 'resume'
                THEN 'pending'
                WHEN i.status = 'paused' AND i.wait -> 'expiry' ->> 'then' = 'cancel'
                THEN 'cancelled'
                WHEN i.status = 'paused' THEN 'failed'
           END"""

# $1 at most this many instances
# Instances whose wake time came, oldest first, in one batch (rows another process is waking
# are skipped): a sleep ends (pending, its action next); a signal wait times out (pending with
# its on_timeout action and no params, or failed without one); a checkpoint expires (pending
# with its default input as the next params, cancelled, or failed; a failed one's next action is
# the handler that asked for the wait, so that a retry waits again). A woken instance is due
# from its wake time, so wake-ups keep their order in the claim. A wake time left on an
# instance that no longer waits (none should be) is cleared, so the next look does not see it.
# One row per instance: what it became (its lastError says why a failed one failed), and
# whether it was woken at all.
WAKE_DUE = f"""
WITH due AS (
    SELECT instance_id
      FROM laneway.instances
     WHERE wake_at <= now()
     ORDER BY wake_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
judged AS (
    SELECT i.instance_id,
           {WOKEN_STATUS} AS new_status,
           CASE WHEN i.status = 'waiting' AND i.wait_signal IS NOT NULL
                THEN 'SignalTimeout: timed out after '
                     || trim_scale((i.wait ->> 'seconds')::numeric)
                     || ' s waiting for signal '
                     || quote_literal(i.wait_signal)
                WHEN i.status = 'paused'
                THEN 'CheckpointExpired: checkpoint ' || quote_literal(COALESCE(i.checkpoint, ''))
                     || ' expired after ' || trim_scale((i.wait ->> 'seconds')::numeric) || ' s'
           END AS reason
      FROM laneway.instances AS i
      JOIN due USING (instance_id)
)
UPDATE laneway.instances AS i
   SET status = COALESCE(j.new_status, i.status),
       next_action = CASE WHEN j.new_status = 'pending' AND i.wait_signal IS NOT NULL
                          THEN i.wait ->> 'on_timeout'
                          WHEN j.new_status = 'failed' AND i.wait ? 'retry'
                          THEN i.wait -> 'retry' ->> 'action'
                          ELSE i.next_action END,
       next_params = CASE WHEN j.new_status = 'pending' AND i.wait_signal IS NOT NULL THEN NULL
                          WHEN j.new_status = 'pending' AND i.status = 'paused'
                          THEN i.wait -> 'expiry' -> 'input'
                          WHEN j.new_status = 'failed' AND i.wait ? 'retry'
                          THEN i.wait -> 'retry' -> 'params'
                          ELSE i.next_params END,
       last_error = CASE WHEN j.new_status = 'failed' THEN j.reason ELSE i.last_error END,
       run_after = CASE WHEN j.new_status = 'pending' THEN i.wake_at ELSE i.run_after END,
       finished_at = CASE WHEN j.new_status IN ('failed', 'cancelled') THEN now()
                          ELSE i.finished_at END,
       checkpoint = CASE WHEN j.new_status IS NULL THEN i.checkpoint END,
       wait = CASE WHEN j.new_status IS NULL THEN i.wait END,
       wait_signal = CASE WHEN j.new_status IS NULL THEN i.wait_signal END,
       wake_at = NULL,
       updated_at = CASE WHEN j.new_status IS NULL THEN i.updated_at ELSE now() END
  FROM judged AS j
 WHERE i.instance_id = j.instance_id
RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.last_error, i.stage,
          i.checkpoint, j.new_status IS NOT NULL AS woken
"""

# $1 instance ids (uuid[]; NULL: every instance)
# For tests only (laneway.testing.make_timers_due): the timers of these instances that are still
# to come become due now, as if the time had passed. A pending instance's run_after (a retry's
# backoff, a delayed start) and a waiting or paused instance's wake_at (a sleep's end, a signal
# wait's timeout, a checkpoint's expiry) move to now, and nothing else changes: the claim and
# WAKE_DUE then take them as they take any due instance, statuses, events and all. An instance
# with no timer to come, a running one and one that ended are left as they are.
MAKE_TIMERS_DUE = """
UPDATE laneway.instances
   SET run_after = CASE WHEN status = 'pending' AND run_after > now() THEN now()
                        ELSE run_after END,
       wake_at = CASE WHEN status IN ('waiting', 'paused') AND wake_at > now() THEN now()
                      ELSE wake_at END
 WHERE ($1::uuid[] IS NULL OR instance_id = ANY($1::uuid[]))
   AND ((status = 'pending' AND run_after > now())
        OR (status IN ('waiting', 'paused') AND wake_at > now()))
RETURNING instance_id
"""
