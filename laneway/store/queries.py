"""Every SQL statement Laneway runs, as named constants.

Each constant is preceded by a comment listing its `$n` parameters. JSON goes in as text
(already validated and encoded by the engine) and is cast in SQL; it comes out decoded by the
codec registered in pool.py. SQL is never built from input.
"""

# ---------------------------------------------------------------------------------------------
# migrations

# $1 advisory lock key
LOCK_MIGRATIONS = "SELECT pg_advisory_lock($1)"

# $1 advisory lock key
UNLOCK_MIGRATIONS = "SELECT pg_advisory_unlock($1)"

CREATE_MIGRATIONS_TABLE = """
CREATE SCHEMA IF NOT EXISTS laneway;
CREATE TABLE IF NOT EXISTS laneway.schema_migrations (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

APPLIED_MIGRATIONS = """
SELECT name
  FROM laneway.schema_migrations
 ORDER BY name
"""

# $1 migration name
RECORD_MIGRATION = """
INSERT INTO laneway.schema_migrations (name)
VALUES ($1)
"""

SCHEMA_VERSION = """
SELECT max(name)
  FROM laneway.schema_migrations
"""

# ---------------------------------------------------------------------------------------------
# clock

DB_NOW = "SELECT now()"

# ---------------------------------------------------------------------------------------------
# queues

# $1 queue name
ENSURE_QUEUE = """
INSERT INTO laneway.queues (name, tokens)
VALUES ($1, 1)
ON CONFLICT (name) DO NOTHING
"""

# $1 queue name, $2 concurrency, $3 rate per minute (NULL: unlimited)
CONFIGURE_QUEUE = """
INSERT INTO laneway.queues (name, concurrency, rate_per_minute, tokens, tokens_at)
VALUES ($1, $2, $3::double precision, GREATEST(COALESCE($3::double precision / 60.0, 1), 1), now())
ON CONFLICT (name) DO UPDATE
   SET concurrency = EXCLUDED.concurrency,
       rate_per_minute = EXCLUDED.rate_per_minute,
       tokens = LEAST(laneway.queues.tokens, EXCLUDED.tokens),
       updated_at = now()
"""

# $1 queue name (NULL: every queue)
QUEUE_STATS = """
SELECT q.name, q.concurrency, q.rate_per_minute, q.paused,
       COALESCE(
           (SELECT jsonb_object_agg(c.status, c.n)
              FROM (SELECT i.status, count(*) AS n
                      FROM laneway.instances AS i
                     WHERE i.queue = q.name
                     GROUP BY i.status) AS c),
           '{}'::jsonb) AS counts
  FROM laneway.queues AS q
 WHERE $1::text IS NULL OR q.name = $1
 ORDER BY q.name
"""

# ---------------------------------------------------------------------------------------------
# instances: the columns every instance read returns (instance_from_row in store.py reads them)

INSTANCE_COLUMNS = (
    "instance_id, name, queue, status, priority, attempts, max_attempts, run_after, created_at,"
    " updated_at, params, state, next_action, next_params, result, last_error, idempotency_key,"
    " singleton_key, owner_id, lease_expires_at, lease_epoch, recoveries, parent_id, stage,"
    " checkpoint, progress, message"
)

# ---------------------------------------------------------------------------------------------
# instances: reads

# $1 instance id
GET_INSTANCE = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE instance_id = $1
"""

# $1 workflow name, $2 queue, $3 statuses (text[]), $4 parent id, $5 limit, $6 offset
# (a NULL filter matches everything)
LIST_INSTANCES = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE ($1::text IS NULL OR name = $1)
   AND ($2::text IS NULL OR queue = $2)
   AND ($3::text[] IS NULL OR status = ANY($3::text[]))
   AND ($4::uuid IS NULL OR parent_id = $4)
 ORDER BY created_at DESC, seq DESC
 LIMIT $5
OFFSET $6
"""

# $1 idempotency key
FIND_BY_IDEMPOTENCY_KEY = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE idempotency_key = $1
"""

# $1 workflow name, $2 singleton key
FIND_ACTIVE_SINGLETON = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE name = $1
   AND singleton_key = $2
   AND status IN ('pending', 'running', 'paused')
"""

# $1 registered workflow names (text[])
UNREGISTERED_PENDING = """
SELECT name, count(*) AS pending
  FROM laneway.instances
 WHERE status = 'pending'
   AND run_after <= now()
   AND name <> ALL($1::text[])
 GROUP BY name
 ORDER BY name
 LIMIT 20
"""

# ---------------------------------------------------------------------------------------------
# instances: writes by the API side (each returns the row it changed)

# The tail of both enqueue statements: the `enqueued` events of the rows `inserted` returned
# (ids drawn under the append lock, as in APPEND_EVENTS) and the doorbell; $12 is the lock key.
# The lock is taken only once every row is inserted (the count reads them all): an insert may
# wait for another transaction (a key conflict still in flight), and waiting while holding the
# append lock could deadlock with a transaction that holds that row and wants the lock.
_ENQUEUED_EVENTS = """
appended AS (
    INSERT INTO laneway.events (instance_id, name, type, status, at, attempt)
    SELECT inserted.instance_id, inserted.name, 'enqueued', inserted.status, clock_timestamp(), 0
      FROM inserted
     WHERE (SELECT pg_advisory_xact_lock($12)
              FROM (SELECT count(*) FROM inserted) AS all_inserted) IS NOT NULL
    RETURNING event_id
)
SELECT inserted.instance_id, inserted.run_after, inserted.created_at, inserted.params,
       (SELECT pg_notify('laneway_events', json_build_object('e', max(event_id))::text)
          FROM appended) AS rang
  FROM inserted
"""

# The single enqueue's insert ($1 ... $11 one value each, $12 the lock key), and what both
# enqueue statements return per row: the id and only what the database fills in (run_after and
# created_at from its clock, params in jsonb's key order). The caller knows the rest (a new
# row is pending, and updated_at is created_at: store.new_instance_record; tests compare the
# records with the rows read back), so no row comes back with 27 columns to decode.
_INSERT_INSTANCE = """
    INSERT INTO laneway.instances (instance_id, name, queue, priority, max_attempts, run_after, params, next_action, next_params, idempotency_key, singleton_key, parent_id)
    VALUES ($1, $2, $3, $4, $5, now() + $6::float8 * interval '1 millisecond', $7::jsonb, $8,
            $7::jsonb, $9, $10, $11)"""
_RETURNING_FILLED_IN = (  # name and status for the `enqueued` events; the rest comes back
    "RETURNING instance_id, name, status, run_after, created_at, params"
)

# $1 instance ids, $2 workflow names, $3 queues, $4 priorities, $5 max attempts, $6 delays in
# ms, $7 params (json text[]), $8 first actions, $9 idempotency keys, $10 singleton keys,
# $11 parent ids: one row per element; $12 the event-append advisory lock key.
# One statement, so one round trip and one implicit transaction: the rows, their events and
# the doorbell. A row whose keys conflict is skipped (not returned, no event).
ENQUEUE_INSTANCES = f"""
WITH inserted AS (
    INSERT INTO laneway.instances (instance_id, name, queue, priority, max_attempts, run_after, params, next_action, next_params, idempotency_key, singleton_key, parent_id)
    SELECT u.instance_id, u.name, u.queue, u.priority, u.max_attempts,
           now() + u.delay_ms * interval '1 millisecond', u.params::jsonb, u.first_action,
           u.params::jsonb, u.idempotency_key, u.singleton_key, u.parent_id
      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::float8[],
                  $7::text[], $8::text[], $9::text[], $10::text[], $11::uuid[])
           AS u (instance_id, name, queue, priority, max_attempts, delay_ms, params,
                 first_action, idempotency_key, singleton_key, parent_id)
    ON CONFLICT DO NOTHING
    {_RETURNING_FILLED_IN}
),
{_ENQUEUED_EVENTS}"""

# The same for one instance: no arrays to unpack. The single call is the common one, and its
# latency is the enqueue rate of a client that enqueues one at a time.
ENQUEUE_INSTANCE = f"""
WITH inserted AS ({_INSERT_INSTANCE}
    ON CONFLICT DO NOTHING
    {_RETURNING_FILLED_IN}
),
{_ENQUEUED_EVENTS}"""
# An instance without idempotency or singleton key can only conflict on its fresh id, so it
# skips ON CONFLICT's speculative insertion (a probe of every unique index before the insert
# and a confirmation record after it).
ENQUEUE_INSTANCE_WITHOUT_KEYS = f"""
WITH inserted AS ({_INSERT_INSTANCE}
    {_RETURNING_FILLED_IN}
),
{_ENQUEUED_EVENTS}"""

# $1 instance id
CANCEL_INSTANCE = f"""
UPDATE laneway.instances
   SET status = 'cancelled', owner_id = NULL, lease_expires_at = NULL,
       updated_at = now(), finished_at = now()
 WHERE instance_id = $1
   AND status NOT IN ('completed', 'failed', 'cancelled')
RETURNING {INSTANCE_COLUMNS}
"""

# $1 instance id
RESUME_INSTANCE = f"""
UPDATE laneway.instances
   SET status = 'pending', checkpoint = NULL, run_after = now(), updated_at = now()
 WHERE instance_id = $1
   AND status = 'paused'
RETURNING {INSTANCE_COLUMNS}
"""

# $1 instance id
RETRY_INSTANCE = f"""
UPDATE laneway.instances
   SET status = 'pending', attempts = 0, recoveries = 0, run_after = now(), finished_at = NULL,
       updated_at = now()
 WHERE instance_id = $1
   AND status = 'failed'
RETURNING {INSTANCE_COLUMNS}
"""

# ---------------------------------------------------------------------------------------------
# claims and leases

# $1 registered workflow names (text[])
# The idle poll: one cheap look at whether anything needs doing, so an idle process sends one
# statement per poll instead of a transaction per kind of work.
DUE_WORK = """
SELECT EXISTS (SELECT 1
                 FROM laneway.instances
                WHERE status = 'running'
                  AND lease_expires_at < now()) AS expired_leases,
       EXISTS (SELECT 1
                 FROM laneway.schedules
                WHERE enabled
                  AND next_run_at <= now()) AS due_schedules,
       EXISTS (SELECT 1
                 FROM laneway.queues AS q
                WHERE NOT q.paused
                  AND (SELECT true  -- one probe per queue, not a scan of the whole backlog
                         FROM laneway.instances AS i
                        WHERE i.queue = q.name
                          AND i.status = 'pending'
                          AND i.run_after <= now()
                          AND i.name = ANY($1::text[])
                        LIMIT 1)) AS claimable
"""

# $1 owner id, $2 registered workflow names (text[]), $3 at most this many instances,
# $4 lease seconds, $5 the event-append advisory lock key
# The whole claim (queue locks, caps and token buckets, the rows, their `started` events and
# the doorbell) in one round trip: see migrations/0004_claim_function.sql for why it is a
# function and what it does.
CLAIM = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.claim($1, $2::text[], $3, $4, $5)
"""

# $1 max rows, $2 recovery cap
# A lease that ran out means its worker is gone: the attempt counts (so an instance that keeps
# failing ends failed), and the instance goes back to pending from its checkpoint. Recoveries
# are counted apart from attempts (checkpoints reset attempts): an instance whose worker was
# already lost `$2` times is dead-lettered, so a step that kills its worker cannot take down
# worker after worker. The first recovery is claimable at once (a crashed worker's instances
# resume without delay); later ones wait a random 0-1 s, 0-2 s, 0-4 s ... (at most 30 s), so
# instances that keep dying together with a poison pill on one worker are spread out instead
# of being claimed in one batch and killed with it again, until only the poison is left.
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
           CASE WHEN i.recoveries >= $2::integer
                THEN 'dead-lettered: its worker was lost ' || (i.recoveries + 1)
                     || ' times (recovery cap ' || $2::integer || '), last during attempt ' || i.attempts
                WHEN i.attempts >= i.max_attempts
                THEN 'lease expired: worker lost during attempt ' || i.attempts || ' of '
                     || i.max_attempts
           END AS final_error
      FROM laneway.instances AS i
      JOIN expired USING (instance_id)
)
UPDATE laneway.instances AS i
   SET status = CASE WHEN j.final_error IS NULL THEN 'pending' ELSE 'failed' END,
       last_error = COALESCE(j.final_error,
                             'lease expired: worker lost during attempt ' || i.attempts),
       finished_at = CASE WHEN j.final_error IS NULL THEN NULL ELSE now() END,
       recoveries = i.recoveries + 1,
       run_after = now() + CASE WHEN i.recoveries = 0 THEN interval '0'
                                ELSE random() * LEAST(power(2, i.recoveries - 1), 30)
                                     * interval '1 second' END,
       owner_id = NULL, lease_expires_at = NULL, updated_at = now()
  FROM judged AS j
 WHERE i.instance_id = j.instance_id
RETURNING i.instance_id, i.name, i.queue, i.status, i.attempts, i.last_error
"""

# The instances of a batch that owner $1 still holds: ids $2 (uuid[]) with their lease epochs
# $3 (bigint[]). Fenced as the group commit is, and written the same way so that the plan stays
# linear in the batch whatever the statistics (migrations/0010 says why: rows by primary key,
# the owner as a column of the batch, no status test).
_STILL_HELD = """
  FROM (SELECT u.*, $1::text AS owner
          FROM unnest($2::uuid[], $3::bigint[]) AS u (instance_id, epoch)
        OFFSET 0) AS u
 WHERE i.instance_id = ANY($2::uuid[])
   AND i.instance_id = u.instance_id
   AND i.owner_id = u.owner
   AND i.lease_epoch = u.epoch"""

# $1 owner id, $2 instance ids (uuid[]), $3 lease epochs (bigint[]), $4 lease seconds
RENEW_LEASES = f"""
UPDATE laneway.instances AS i
   SET lease_expires_at = now() + $4::double precision * interval '1 second',
       lease_renewed_at = now()
{_STILL_HELD}
RETURNING i.instance_id
"""

# $1 owner id, $2 instance ids (uuid[]), $3 lease epochs (bigint[])
# Graceful shutdown: the interrupted attempt does not count, and another process may claim the
# instance at once instead of after the lease.
RELEASE_INSTANCES = f"""
UPDATE laneway.instances AS i
   SET status = 'pending', attempts = GREATEST(i.attempts - 1, 0), owner_id = NULL,
       lease_expires_at = NULL, run_after = now(), updated_at = now()
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
#   $22 lease epochs.
# The group commit of many runners' writes, fenced by owner and lease epoch: one call, one
# round trip, one transaction; one row per applied write. The statement is a function
# (migrations/0010, which says what each write does) so that it is planned once per
# connection, not on every call.
WRITE_RUNNER_BATCH = """
SELECT instance_id, name, queue, status, attempts, last_error, stage, checkpoint
  FROM laneway.write_runner_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                                  $15, $16, $17, $18, $19, $20, $21, $22)
"""

# $1 keep finished instances this many seconds, $2 at most this many instances
# Retention: instances that ended longer ago than the retention period go, with their events
# and operation rows (their locks went when they ended). Oldest first, a bounded batch per
# sweep; rows another sweep is deleting are skipped.
PRUNE_FINISHED = """
WITH doomed AS (
    SELECT instance_id
      FROM laneway.instances
     WHERE status IN ('completed', 'failed', 'cancelled')
       AND finished_at < now() - $1::double precision * interval '1 second'
     ORDER BY finished_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
),
events_gone AS (
    DELETE FROM laneway.events
     WHERE instance_id IN (SELECT instance_id FROM doomed)
),
operations_gone AS (
    DELETE FROM laneway.operations
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

# ---------------------------------------------------------------------------------------------
# template operations

# $1 operation id, $2 instance id, $3 owner id, $4 stage, $5 position, $6 type, $7 status,
# $8 attempts, $9 error, $10 data (json text), $11 metadata (json text), $12 seconds it took,
# $13 lease epoch
# Written when the operation finishes, fenced by the owner: a crash mid-stage re-runs only the
# operations that have no completed row.
RECORD_OPERATION = """
INSERT INTO laneway.operations (operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at)
SELECT $1, i.instance_id, $4, $5, $6, $7, $8, $9, $10::text::jsonb, $11::text::jsonb,
       clock_timestamp() - $12::double precision * interval '1 second', clock_timestamp()
  FROM laneway.instances AS i
 WHERE i.instance_id = $2
   AND i.owner_id = $3
   AND i.lease_epoch = $13
   AND i.status = 'running'
ON CONFLICT (instance_id, stage, position) DO UPDATE
   SET type = EXCLUDED.type, status = EXCLUDED.status, attempts = EXCLUDED.attempts,
       error = EXCLUDED.error, data = EXCLUDED.data, metadata = EXCLUDED.metadata,
       started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at
RETURNING operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at
"""

# $1 instance id
LIST_OPERATIONS = """
SELECT operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at
  FROM laneway.operations
 WHERE instance_id = $1
 ORDER BY finished_at, stage, position
"""

# $1 instance ids (uuid[])
LIST_OPERATIONS_OF = """
SELECT operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at
  FROM laneway.operations
 WHERE instance_id = ANY($1::uuid[])
 ORDER BY instance_id, finished_at, stage, position
"""

# ---------------------------------------------------------------------------------------------
# entity locks

# $1 entity type, $2 entity id, $3 owner instance, $4 ttl seconds
# Free, expired, or already ours: take it with a new, larger fencing token.
ACQUIRE_LOCK = """
INSERT INTO laneway.locks (entity_type, entity_id, owner_instance, fencing_token, expires_at)
VALUES ($1, $2, $3, nextval('laneway.lock_tokens'),
        clock_timestamp() + $4::double precision * interval '1 second')
ON CONFLICT (entity_type, entity_id) DO UPDATE
   SET owner_instance = EXCLUDED.owner_instance, fencing_token = EXCLUDED.fencing_token,
       acquired_at = now(), expires_at = EXCLUDED.expires_at
 WHERE laneway.locks.expires_at <= clock_timestamp()
    OR laneway.locks.owner_instance = EXCLUDED.owner_instance
RETURNING entity_type, entity_id, owner_instance, fencing_token, expires_at
"""

# $1 entity type, $2 entity id, $3 fencing token
RELEASE_LOCK = """
DELETE FROM laneway.locks
 WHERE entity_type = $1
   AND entity_id = $2
   AND fencing_token = $3
RETURNING fencing_token
"""

# $1 entity type, $2 entity id
GET_LOCK = """
SELECT entity_type, entity_id, owner_instance, fencing_token, expires_at
  FROM laneway.locks
 WHERE entity_type = $1
   AND entity_id = $2
   AND expires_at > clock_timestamp()
"""

# ---------------------------------------------------------------------------------------------
# events

# $1 advisory lock key, $2 instance ids, $3 workflow names, $4 types, $5 statuses, $6 attempts,
# $7 errors, $8 stages, $9 checkpoints, $10 id of an instance cancelled here (NULL: none)
# The one-time filter takes the lock before any identity value is drawn and holds it until
# commit, so event ids become visible in id order. `at` is the moment of the append (not the
# transaction start), so a start recorded after a claim saw a completion is stamped after it.
# The NOTIFY is a doorbell: ids only.
APPEND_EVENTS = """
WITH appended AS (
    INSERT INTO laneway.events (instance_id, name, type, status, at, attempt, error, stage, checkpoint)
    SELECT u.instance_id, u.name, u.type, u.status, clock_timestamp(), u.attempt, u.error, u.stage,
           u.checkpoint
      FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::integer[], $7::text[],
                  $8::text[], $9::text[])
           AS u (instance_id, name, type, status, attempt, error, stage, checkpoint)
     WHERE (SELECT pg_advisory_xact_lock($1)) IS NOT NULL
    RETURNING event_id
)
SELECT pg_notify('laneway_events',
                 json_strip_nulls(json_build_object('e', max(event_id), 'c', $10::text))::text),
       max(event_id) AS last_event_id
  FROM appended
"""

# $1 after event id, $2 limit
EVENTS_AFTER = """
SELECT event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint
  FROM laneway.events
 WHERE event_id > $1
 ORDER BY event_id
 LIMIT $2
"""

# $1 instance id, $2 after event id, $3 limit
INSTANCE_EVENTS_AFTER = """
SELECT event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint
  FROM laneway.events
 WHERE instance_id = $1
   AND event_id > $2
 ORDER BY event_id
 LIMIT $3
"""

# $1 instance id, $2 limit: the newest events of one instance, oldest first
LATEST_INSTANCE_EVENTS = """
SELECT event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint
  FROM (SELECT event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint
          FROM laneway.events
         WHERE instance_id = $1
         ORDER BY event_id DESC
         LIMIT $2) AS newest
 ORDER BY event_id
"""

LATEST_EVENT_ID = """
SELECT COALESCE(max(event_id), 0)
  FROM laneway.events
"""

# ---------------------------------------------------------------------------------------------
# schedules

# $1 name, $2 workflow name, $3 params (json text), $4 every, $5 cron, $6 timezone,
# $7 next run at
UPSERT_SCHEDULE = """
INSERT INTO laneway.schedules (name, workflow_name, params, every, cron, timezone, next_run_at)
VALUES ($1, $2, $3::text::jsonb, $4, $5, $6, $7)
ON CONFLICT (name) DO UPDATE
   SET workflow_name = EXCLUDED.workflow_name, params = EXCLUDED.params,
       every = EXCLUDED.every, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
       next_run_at = EXCLUDED.next_run_at, enabled = true, updated_at = now()
RETURNING name, workflow_name, params, every, cron, timezone, enabled, next_run_at, created_at, updated_at
"""

# $1 name
GET_SCHEDULE = """
SELECT name, workflow_name, params, every, cron, timezone, enabled, next_run_at, created_at, updated_at
  FROM laneway.schedules
 WHERE name = $1
"""

LIST_SCHEDULES = """
SELECT name, workflow_name, params, every, cron, timezone, enabled, next_run_at, created_at, updated_at
  FROM laneway.schedules
 ORDER BY name
"""

# $1 name, $2 enabled, $3 next run at (used when the schedule is enabled)
SET_SCHEDULE_ENABLED = """
UPDATE laneway.schedules
   SET enabled = $2,
       next_run_at = CASE WHEN $2 AND NOT enabled THEN $3 ELSE next_run_at END,
       updated_at = now()
 WHERE name = $1
RETURNING name, workflow_name, params, every, cron, timezone, enabled, next_run_at, created_at, updated_at
"""

# $1 name
DELETE_SCHEDULE = """
DELETE FROM laneway.schedules
 WHERE name = $1
RETURNING name
"""

# $1 max rows
# Locked until the claiming transaction advances them, so two schedulers never fire the same
# occurrence; the fire's idempotency key makes a retried fire harmless too.
LOCK_DUE_SCHEDULES = """
SELECT name, workflow_name, params, every, cron, timezone, enabled, next_run_at, created_at, updated_at
  FROM laneway.schedules
 WHERE enabled
   AND next_run_at <= now()
 ORDER BY next_run_at
 LIMIT $1
   FOR UPDATE SKIP LOCKED
"""

# $1 name, $2 next run at
ADVANCE_SCHEDULE = """
UPDATE laneway.schedules
   SET next_run_at = $2, updated_at = now()
 WHERE name = $1
"""
