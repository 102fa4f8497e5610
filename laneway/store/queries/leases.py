"""Claims, leases and runner writes: the claim, lease recovery, renewal and release, the group
commit, retention and the entity locks of instances that ended.

See laneway/store/queries/__init__.py for how statements are written.
"""

from laneway.store.queries.history_rollup import ROLL_UP_LOOKBACK
from laneway.store.queries.instances import INSTANCE_COLUMNS
from laneway.store.queries.schedules import next_schedule_in
from laneway.store.queries.waits import NEXT_WAKE_IN


def _indented(statement: str) -> str:
    return statement.strip().replace("\n", "\n        ")


# ---------------------------------------------------------------------------------------------
# claims and leases

# $1 the run keys registered here ('name@version', text[]), $2 their workflow names (text[]),
# $3-$6 the schedules the engine skips (queries/schedules.py's not_skipped)
# The idle poll: one cheap look at whether anything needs doing, so an idle process sends one
# statement per poll instead of a transaction per kind of work. Due work is the claim's own
# probe (laneway.queue_due), one per queue, not a scan of the backlog; the next wake-up of a
# waiting or paused instance is the first row of instances_wake, never the waiting rows.
DUE_WORK = f"""
SELECT EXISTS (SELECT 1
                 FROM laneway.instances
                WHERE status = 'running'
                  AND lease_expires_at < now()) AS expired_leases,
       ({_indented(next_schedule_in("$2::text[]", 3))}) AS next_schedule_in,
       EXISTS (SELECT 1
                 FROM laneway.queues AS q
                CROSS JOIN LATERAL laneway.queue_due(q.name, $1::text[]) AS due
                WHERE NOT q.paused
                  AND (due.unkeyed OR due.keyed)) AS claimable,
       ({_indented(NEXT_WAKE_IN)}) AS next_wake_in
"""

# $1 the run keys registered here ('name@version', text[])
# After a claim that came back short: whether any queue is rate-limited at all (per queue or
# per key), and in how many seconds the next whole token is due where it is what holds work
# back (0 when one is there now; NULL when nothing waits on a token), so the engine wakes for
# it instead of at its next poll. A queue waits on its own token when it has due work and a
# free slot; a key waits on its token, and on its queue's if the queue has a rate too, when it
# has due work and a free slot of its own. Room and due work come from the claim's functions
# (laneway/store/sql/functions.sql); this only reads.
NEXT_TOKEN_DUE = """
SELECT EXISTS (SELECT 1
                 FROM laneway.queues
                WHERE (rate_per_minute IS NOT NULL OR key_rate_per_minute IS NOT NULL)
                  AND NOT paused) AS rate_limited,
       (SELECT min(w.due_in)
          FROM laneway.queues AS q
         CROSS JOIN LATERAL laneway.queue_room(q.name, q.concurrency, q.rate_per_minute,
                                               q.tokens, q.tokens_at) AS room
         CROSS JOIN LATERAL laneway.queue_due(q.name, $1::text[]) AS due
         CROSS JOIN LATERAL (
            SELECT room.token_in AS due_in
             WHERE due.unkeyed AND room.token_in IS NOT NULL
            UNION ALL
            SELECT GREATEST(COALESCE(room.token_in, 0.0), COALESCE(min(key_room.token_in), 0.0))
              FROM laneway.queue_keys AS k
             CROSS JOIN LATERAL laneway.key_room(k.queue, k.key, q.key_concurrency,
                                                 q.key_rate_per_minute, k.tokens,
                                                 k.tokens_at) AS key_room
             CROSS JOIN LATERAL laneway.key_due(k.queue, k.key, $1::text[]) AS key_due
             WHERE due.keyed
               AND k.queue = q.name
               AND key_due.due
               AND key_room.running < COALESCE(q.key_concurrency, 2147483647)
            HAVING count(*) > 0
               AND (room.token_in IS NOT NULL OR count(key_room.token_in) > 0)
         ) AS w
         WHERE (q.rate_per_minute IS NOT NULL OR q.key_rate_per_minute IS NOT NULL)
           AND NOT q.paused
           AND room.running < q.concurrency)::double precision AS next_token_in
"""

# The last event id the statement's function drew (laneway.drawn_event_id(), read once): a
# plpgsql function's rows all exist before the first is read, so it is the id of the
# function's last event, which its doorbell carries.
_DRAWN = "(SELECT laneway.drawn_event_id())"

# $1 owner id, $2 the run keys registered here ('name@version', text[]), $3 at most this
# many instances, $4 lease seconds, $5 the event-append advisory lock key
# The whole claim (queue locks, caps and token buckets, the rows, their `started` events and
# the doorbell) in one round trip: laneway/store/sql/functions.sql says why it is a function
# and what it does. Each row also carries the id its doorbell rang with (_DRAWN).
CLAIM = f"""
SELECT {INSTANCE_COLUMNS}, {_DRAWN} AS last_event_id
  FROM laneway.claim($1, $2::text[], $3, $4, $5)
"""

# $1 max rows, $2 recovery cap
# A lease that ran out means its worker is gone: the attempt counts (so an instance that keeps
# failing ends failed), and the instance goes back to pending from its checkpoint. lastError
# reads `WorkerLost: …`, or `DeadLettered: …` at the recovery cap. Recoveries
# are counted apart from attempts (checkpoints reset attempts): an instance whose worker was
# already lost `$2` times is dead-lettered, so a step that kills its worker cannot take down
# worker after worker. The first recovery is claimable at once (a crashed worker's instances
# resume without delay, in their place in the queue: run_after stays the due time they were
# claimed at, as a hand-back's does); later ones wait a random 0-1 s, 0-2 s, 0-4 s ... (at most
# 30 s), so instances that keep dying together with a poison pill on one worker are spread out
# instead of being claimed in one batch and killed with it again. An instance lost twice, or
# whose next loss dead-letters it, is marked `isolated`: it runs alone on a process that runs
# nothing else (laneway.claim, migrations/0029), so a poison pill cannot take an innocent
# instance to the cap with it. The lost attempt is recorded in the stage that was running, as a
# failed one is (migrations/0032), on the instance, its failure and its event: a template's
# step is the stage it is named after, so its next action, which its last checkpoint saved as
# the step began (the last report, in `stage`, names the stage before). A template is known by
# its operation rows (any process recovers any lease, whether it runs the workflow or not); a
# handler map, or a template lost before any operation outcome of its was written, keeps the
# stage its last report gave. A stage moved on drops the status line, which named the stage
# before ("s1: 2 of 2 operations done"); the progress stays, as the stage before ended where
# this one begins. A stage with operation outcomes written while it ran reported itself with
# them (migration 0037): its name is the stage already, and its status line and progress stay,
# as far as it got ("s2: 1 of 2 operations done"), which its operation rows keep (its next run
# reuses them).
RECOVER_EXPIRED_LEASES = """
WITH expired AS (
    SELECT instance_id
      FROM laneway.instances
     WHERE status = 'running'
       AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
judged AS (
    SELECT i.instance_id,
           CASE WHEN EXISTS (SELECT 1
                               FROM laneway.operations AS o
                              WHERE o.instance_id = i.instance_id)
                THEN COALESCE(i.next_action, i.stage)
                ELSE i.stage
           END AS stage,
           CASE WHEN i.recoveries >= $2::integer
                THEN 'DeadLettered: its worker was lost ' || (i.recoveries + 1)
                     || CASE WHEN i.recoveries = 0 THEN ' time' ELSE ' times' END
                     || ' (recovery cap ' || $2::integer || '), last during attempt ' || i.attempts
                WHEN i.attempts - i.attempt_base >= i.max_attempts
                THEN 'WorkerLost: lease expired during attempt ' || i.attempts || ' ('
                     || (i.attempts - i.attempt_base) || ' of ' || i.max_attempts
                     || ' of its step)'
           END AS final_error
      FROM laneway.instances AS i
      JOIN expired USING (instance_id)
)
UPDATE laneway.instances AS i
   SET status = CASE WHEN j.final_error IS NULL THEN 'pending' ELSE 'failed' END,
       last_error = COALESCE(j.final_error,
                             'WorkerLost: lease expired during attempt ' || i.attempts),
       finished_at = CASE WHEN j.final_error IS NULL THEN NULL ELSE now() END,
       recoveries = i.recoveries + 1,
       isolated = i.isolated OR i.recoveries + 1 >= LEAST($2::integer, 2),
       stage = j.stage,
       message = CASE WHEN j.stage IS DISTINCT FROM i.stage THEN NULL ELSE i.message END,
       run_after = CASE WHEN i.recoveries = 0 THEN LEAST(i.run_after, now())
                        ELSE now() + random() * LEAST(power(2, i.recoveries - 1), 30)
                                   * interval '1 second' END,
       owner_id = NULL, lease_expires_at = NULL, updated_at = now()
  FROM judged AS j
 WHERE i.instance_id = j.instance_id
RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.last_error, i.stage
"""

# $1 instance ids, $2 attempts, $3 types, $4 messages, $5 stages (one element per failure)
# The failed attempts that were no handler's exception (a lost worker, a wait's timeout), for
# `failures` beside the group commit's own.
RECORD_FAILURES = """
INSERT INTO laneway.failures (instance_id, attempt, type, message, stage)
SELECT *
  FROM unnest($1::uuid[], $2::integer[], $3::text[], $4::text[], $5::text[])
"""

# $1 instance ids (uuid[]), $2 at most this many per instance
# The newest failed attempts of each instance, newest first, one index walk each.
FAILURES_OF = """
SELECT f.instance_id, f.attempt, f.at, f.type, f.message, f.traceback, f.stage, f.operation
  FROM unnest($1::uuid[]) AS ids (instance_id)
 CROSS JOIN LATERAL (
    SELECT *
      FROM laneway.failures AS f
     WHERE f.instance_id = ids.instance_id
     ORDER BY f.seq DESC
     LIMIT $2) AS f
 ORDER BY f.instance_id, f.seq DESC
"""

# The instances of a batch that owner $1 still holds: ids $2 (uuid[]) with their lease epochs
# $3 (bigint[]). Fenced as the group commit is, and written the same way so that the plan stays
# linear in the batch whatever the statistics (laneway.write_runner_batch in
# laneway/store/sql/functions.sql says why: rows by primary key, the owner as a column of the
# batch, no status test).
_STILL_HELD = """
  FROM (SELECT u.*, $1::text AS owner
          FROM unnest($2::uuid[], $3::bigint[]) AS u (instance_id, epoch)
        OFFSET 0) AS u
 WHERE i.instance_id = ANY($2::uuid[])
   AND i.instance_id = u.instance_id
   AND i.owner_id = u.owner
   AND i.lease_epoch = u.epoch"""

# $1 owner id, $2 instance ids (uuid[]), $3 lease epochs (bigint[]), $4 lease seconds
# The ids still held: those renewed, and those held that a transaction has locked meanwhile,
# which are not waited for (SKIP LOCKED). A renewal that waited could deadlock with this
# process's own group commit, which locks the same rows in another order (checkpoints, then
# completions, then failures): PostgreSQL then ended one of them, and a renewal lost that way
# several heartbeats in a row let leases run out under running steps. A row locked meanwhile
# is being written (a checkpoint extends its lease, an end needs none), or briefly held by a
# signal or a cancel; the next heartbeat renews it, well before its lease runs out.
RENEW_LEASES = f"""
WITH held AS (
    SELECT i.instance_id
      FROM (SELECT u.*, $1::text AS owner
              FROM unnest($2::uuid[], $3::bigint[]) AS u (instance_id, epoch)
            OFFSET 0) AS u
      JOIN laneway.instances AS i ON i.instance_id = u.instance_id
     WHERE i.instance_id = ANY($2::uuid[])
       AND i.owner_id = u.owner
       AND i.lease_epoch = u.epoch
),
free AS (
    SELECT i.instance_id
      FROM laneway.instances AS i
     WHERE i.instance_id IN (SELECT instance_id FROM held)
       FOR UPDATE SKIP LOCKED
),
renewed AS (
    UPDATE laneway.instances AS i
       SET lease_expires_at = now() + $4::double precision * interval '1 second',
           lease_renewed_at = now()
    {_STILL_HELD}
       AND i.instance_id IN (SELECT instance_id FROM free)
    RETURNING i.instance_id
)
SELECT instance_id FROM renewed
UNION ALL
SELECT instance_id FROM held WHERE instance_id NOT IN (SELECT instance_id FROM free)
"""

# $1 owner id, $2 instance ids (uuid[]), $3 lease epochs (bigint[])
# Graceful shutdown: the interrupted attempt is given back to its step's budget (the count goes
# on), and another process may claim the instance at once instead of after the lease. It keeps
# its place: a claim takes the earliest run_after first, and run_after stays the due time it
# was claimed at (never later than now), so it does not go behind what was enqueued after it.
RELEASE_INSTANCES = f"""
UPDATE laneway.instances AS i
   SET status = 'pending', attempt_base = i.attempt_base + 1, owner_id = NULL,
       lease_expires_at = NULL, run_after = LEAST(i.run_after, now()), updated_at = now()
{_STILL_HELD}
RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts
"""

# ---------------------------------------------------------------------------------------------
# runner writes, fenced by owner id and batched (one statement for many instances)

# $1 owner id, $2 lease seconds, $3 the event-append advisory lock key;
# checkpoints: $4 instance ids, $5 states (json text[]), $6 next actions, $7 next params (json
#   text[]), $8 progress (float8[]), $9 messages, $10 stages, $11 pause labels (NULL: keep
#   running), $12 lease epochs, $13 attempts (for their events);
# completions: $14 instance ids, $15 results (json text[]), $16 states (json text[]),
#   $17 lease epochs;
# failed attempts: $18 instance ids, $19 errors, $20 retry delays in ms, $21 final flags,
#   $22 lease epochs;
# $23 the checkpoints' waits (json text[], NULL: none); the failed attempts' exception types,
#   messages, tracebacks, stages and operations $24..$28, and their spans' trace contexts $29.
# $30 the completions' stages, $31 their messages (the last step's report; NULL: keep);
# $32 the operation outcomes (templates) as one JSON array (text; NULL: none), an array per
#   outcome: [instance id, lease epoch, operation id (ids as 32 hex digits), stage, position,
#   type, status, attempts, error, data, metadata (JSON values), microseconds it ran,
#   microseconds since it finished, fix cycle (of the pass that wrote it)];
# $33 the checkpoints' and $34 the completions' spans' trace contexts (W3C traceparent, NULL:
#   none), kept only by an instance that has none (its enqueue was not traced);
# $35 the failed attempts' progress (float8[]) and $36 their status lines: a template's stage's
#   report where it failed (NULL: keep the instance's, as a handler map's failure does);
# the reports of template stages still running, carried by their operation outcomes (one per
#   instance; NULL: none): $37 instance ids, $38 lease epochs, $39 stages, $40 progress
#   (float8[]), $41 status lines.
# The group commit of many runners' writes, fenced by owner and lease epoch: one call, one
# round trip, one transaction; one row per applied write. The statement is a function
# (laneway/store/sql/functions.sql says what each write does) so that it is planned once per
# connection, not on every call. The outcomes come as one text, not as the function's fourteen
# arrays: the driver checks every element of an array it sends (a few thousand CPU
# instructions each, ~14 per outcome), a text it sends as it is. The statement takes them
# apart into those arrays, element i of each from outcome i (one aggregate pass over the
# outcomes feeds every array_agg the same rows in the same order); no outcome, NULL arrays,
# which the function reads as none.
_BATCH_ARGS = ", ".join(
    [f"${n}" for n in range(1, 32)]
    + [f"o.{column}" for column in ("instance_ids", "epochs", "operation_ids", "stages")]
    + [f"o.{column}" for column in ("positions", "types", "statuses", "attempts", "errors")]
    + [f"o.{column}" for column in ("data", "metadata", "seconds", "ago")]
    + ["$33", "$34", "o.fix_cycles"]
)  # in laneway.write_runner_batch's order, then its reports (_REPORT_ARGS)
# The function's last parameters (0036's two, 0037's five), after the claim's in
# write_runner_batch_and_claim.
_REPORT_ARGS = "$35, $36, $37, $38, $39, $40, $41"
_OUTCOMES = """
(SELECT array_agg((u ->> 0)::uuid) AS instance_ids, array_agg((u ->> 1)::bigint) AS epochs,
        array_agg((u ->> 2)::uuid) AS operation_ids, array_agg(u ->> 3) AS stages,
        array_agg((u ->> 4)::integer) AS positions, array_agg(u ->> 5) AS types,
        array_agg(u ->> 6) AS statuses, array_agg((u ->> 7)::integer) AS attempts,
        array_agg(u ->> 8) AS errors, array_agg((u -> 9)::text) AS data,
        array_agg((u -> 10)::text) AS metadata,
        array_agg((u ->> 11)::double precision / 1000000) AS seconds,
        array_agg((u ->> 12)::double precision / 1000000) AS ago,
        array_agg((u ->> 13)::integer) AS fix_cycles
   FROM jsonb_array_elements($32::text::jsonb) AS e (u)) AS o"""
WRITE_RUNNER_BATCH = f"""
SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
       w.checkpoint, {_DRAWN} AS last_event_id
  FROM {_OUTCOMES.strip()},
       laneway.write_runner_batch({_BATCH_ARGS}, {_REPORT_ARGS}) AS w
"""

# The 41 above, then $42 the run keys registered here ('name@version', text[]) and $43 at most
# this many instances to claim: the group commit and, in its transaction, the claim of the
# room it freed (laneway/store/sql/functions.sql). The batch's rows first (`claimed` NULL),
# then one row per claimed instance (`claimed` its row); each with its doorbell's event id.
WRITE_RUNNER_BATCH_AND_CLAIM = f"""
SELECT w.instance_id, w.name, w.queue, w.status, w.attempts, w.last_error, w.stage,
       w.checkpoint, w.last_event_id, w.claimed
  FROM {_OUTCOMES.strip()},
       laneway.write_runner_batch_and_claim({_BATCH_ARGS}, $42, $43, {_REPORT_ARGS}) AS w
"""

# $1 keep finished instances this many seconds, $2 at most this many instances
# Retention: instances that ended longer ago than the retention period go, with their
# operation rows, signals and failures (their locks went when they ended), and the idempotency
# keys bound to them (laneway.idempotency_aliases, by its foreign key's cascade). Oldest first, a
# bounded batch per sweep; rows another sweep is deleting are skipped. Their events go with
# their day's partition, detached and dropped whole once no instance that still exists has
# events in it (queries.RETIRE_EVENT_PARTITION); only those in the default partition (appended
# while no partition covered their time) are deleted here, row by row.
# An instance that ended within the roll-up's lookback waits until the queue history
# roll-up's mark (laneway.queue_history_progress) is past every event of it: the roll-up
# reads each event's queue from its instance, and would pass over the events of one deleted
# before it (queries.ROLL_UP_QUEUE_HISTORY). A mark read here was committed by a roll-up that
# counted every event up to it, whichever process ran it. One that ended before the lookback
# is not probed (the roll-up passes its events over anyway): with a retention of a day or
# more, as by default, no candidate is, and a sweep costs what it did; with a shorter one,
# each candidate of the last day is one probe of the per-instance event index.
PRUNE_FINISHED = f"""
WITH doomed AS (
    SELECT i.instance_id
      FROM laneway.instances AS i
     WHERE i.status IN ('completed', 'failed', 'cancelled')
       AND i.finished_at < now() - $1::double precision * interval '1 second'
       AND NOT (i.finished_at >= now() - {ROLL_UP_LOOKBACK}
                AND EXISTS (SELECT 1
                              FROM laneway.events AS e
                             WHERE e.instance_id = i.instance_id
                               AND e.event_id > (SELECT p.last_event_id
                                                   FROM laneway.queue_history_progress AS p
                                                  WHERE p.id)))
     ORDER BY i.finished_at
     LIMIT $2
       FOR UPDATE OF i SKIP LOCKED
),
events_gone AS (
    DELETE FROM laneway.events_default
     WHERE instance_id IN (SELECT instance_id FROM doomed)
),
operations_gone AS (
    DELETE FROM laneway.operations
     WHERE instance_id IN (SELECT instance_id FROM doomed)
),
signals_gone AS (
    DELETE FROM laneway.signals
     WHERE instance_id IN (SELECT instance_id FROM doomed)
),
failures_gone AS (
    DELETE FROM laneway.failures
     WHERE instance_id IN (SELECT instance_id FROM doomed)
)
DELETE FROM laneway.instances
 WHERE instance_id IN (SELECT instance_id FROM doomed)
RETURNING instance_id
"""

# $1 terminal instance ids (uuid[]): their entity locks go with them
RELEASE_INSTANCE_LOCKS = """
DELETE FROM laneway.locks
 WHERE owner_instance = ANY($1::uuid[])
"""
