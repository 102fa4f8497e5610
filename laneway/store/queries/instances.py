"""Instance statements: the column list every read returns, reads, and the API side's enqueue
(cancel, resume and retry are bulk.py's, one instance their batch of one).

See laneway/store/queries/__init__.py for how statements are written.
"""

# ---------------------------------------------------------------------------------------------
# instances: the columns every instance read returns (rows.instance_from_row reads them)

_COLUMN_NAMES = (
    "instance_id", "name", "queue", "status", "priority", "attempts", "max_attempts", "run_after",
    "created_at", "updated_at", "params", "state", "next_action", "next_params", "result",
    "last_error", "idempotency_key", "singleton_key", "owner_id", "lease_expires_at",
    "lease_epoch", "recoveries", "parent_id", "stage", "checkpoint", "progress", "message",
    "concurrency_key", "wake_at", "wait_signal", "wait", "attempt_base", "trace_context",
    "first_failed_trace", "version",
)  # fmt: skip
INSTANCE_COLUMNS = ", ".join(_COLUMN_NAMES)


# The same columns for a summary (a page the API lists): `state` and `next_params` come back
# NULL, so the server neither reads (detoasts) nor sends, and the pool's codec never decodes,
# up to 8 MiB per row that the API never shows; instance_from_row makes them {} and None.
# `wait` comes without its `retry` (a failing wait's handler params, up to 256 KiB), keeping
# what the API shows of it (the input schema).
# Without payloads, `params`, `result` and `wait` come back NULL too (None in the record): a page
# whose operation selects none of params, result and checkpointInputSchema (api/graphql/
# payload_fields.py). Each may hold 256 KiB (a wait its checkpoint's schema and default input),
# while the rest of a row is a few hundred bytes: a page of 500 read them all, up to 256 MB,
# to show ids and statuses.
_NOT_IN_SUMMARIES = frozenset({"state", "next_params"})
_PAYLOADS = frozenset({"params", "result", "wait"})


def _columns(*, summary: bool, payloads: bool) -> str:
    """The column list of a read: a summary's or a full record's, with or without payloads (a
    full record without them keeps `state` and `next_params`)."""
    left_out = (_NOT_IN_SUMMARIES if summary else frozenset()) | (
        frozenset() if payloads else _PAYLOADS
    )
    return ", ".join(
        f"NULL::jsonb AS {name}"
        if name in left_out
        else ("wait - 'retry' AS wait" if summary and name == "wait" else name)
        for name in _COLUMN_NAMES
    )


_SUMMARY_COLUMNS = _columns(summary=True, payloads=True)
_SUMMARY_COLUMNS_WITHOUT_PAYLOADS = _columns(summary=True, payloads=False)

# ---------------------------------------------------------------------------------------------
# instances: reads

# $1 instance id
GET_INSTANCE = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE instance_id = $1
"""

# The filter of a list of instances (model.InstanceFilter; store.instances.filter_args gives
# its values in this order): $1 workflow name, $2 queue, $3 statuses (text[]), $4 parent id,
# $5 concurrency key, $6 version, $7 created after, $8 created before (timestamptz, both
# exclusive); a NULL filter matches everything. Lists, pages and bulk actions share it.
INSTANCE_FILTER = """($1::text IS NULL OR name = $1)
   AND ($2::text IS NULL OR queue = $2)
   AND ($3::text[] IS NULL OR status = ANY($3::text[]))
   AND ($4::uuid IS NULL OR parent_id = $4)
   AND ($5::text IS NULL OR concurrency_key = $5)
   AND ($6::text IS NULL OR version = $6)
   AND ($7::timestamptz IS NULL OR created_at > $7)
   AND ($8::timestamptz IS NULL OR created_at < $8)"""

# INSTANCE_FILTER's $1 ... $8, $9 limit, $10 offset; {columns} is the full column list or the
# summaries'. In the keyset pages' order (queries/pages.py), so instances_page serves both.
_LIST_INSTANCES = f"""
SELECT {{columns}}
  FROM laneway.instances
 WHERE {INSTANCE_FILTER}
 ORDER BY created_at DESC, instance_id DESC
 LIMIT $9
OFFSET $10
"""
LIST_INSTANCES = _LIST_INSTANCES.format(columns=INSTANCE_COLUMNS)
# The same page without `params`, `result` and `wait` (NULL: see _PAYLOADS).
LIST_INSTANCES_WITHOUT_PAYLOADS = _LIST_INSTANCES.format(
    columns=_columns(summary=False, payloads=False)
)
# The same page as summaries: without `state` and `next_params` (see _SUMMARY_COLUMNS), and
# then also without `params`, `result` and `wait`.
LIST_INSTANCE_SUMMARIES = _LIST_INSTANCES.format(columns=_SUMMARY_COLUMNS)
LIST_INSTANCE_SUMMARIES_WITHOUT_PAYLOADS = _LIST_INSTANCES.format(
    columns=_SUMMARY_COLUMNS_WITHOUT_PAYLOADS
)
_LISTS = {
    (False, True): LIST_INSTANCES,
    (False, False): LIST_INSTANCES_WITHOUT_PAYLOADS,
    (True, True): LIST_INSTANCE_SUMMARIES,
    (True, False): LIST_INSTANCE_SUMMARIES_WITHOUT_PAYLOADS,
}


def list_instances_statement(summaries: bool, payloads: bool) -> str:
    """The list of instances as summaries or full records, with or without their payloads:
    one of the four statements above, each built once, at import."""
    return _LISTS[summaries, payloads]


# $1 idempotency key: the instance that holds it as its own, or the one it is bound to
# (laneway.idempotency_aliases, 0035); never both (laneway.bind_idempotency_key).
FIND_BY_IDEMPOTENCY_KEY = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE idempotency_key = $1
 UNION ALL
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE instance_id = (SELECT a.instance_id FROM laneway.idempotency_aliases AS a WHERE a.key = $1)
 LIMIT 1
"""

# $1 idempotency key, $2 the instance its request gave way to (its singleton key's holder):
# the key is bound to that instance unless it is taken already; returns the instance the key
# answers with, NULL if $2 is gone (laneway/store/sql/functions.sql).
BIND_IDEMPOTENCY_KEY = "SELECT laneway.bind_idempotency_key($1, $2)"

# $1 workflow name, $2 singleton key
FIND_ACTIVE_SINGLETON = f"""
SELECT {INSTANCE_COLUMNS}
  FROM laneway.instances
 WHERE name = $1
   AND singleton_key = $2
   AND status IN ('pending', 'running', 'paused', 'waiting')
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
# instances: enqueue by the API side

# The tail of both enqueue statements: the `enqueued` events of the rows `inserted` returned,
# appended with the doorbell by laneway.append_events; $12 is the append lock's key. The call
# aggregates `inserted`, so it comes once every row is inserted: an insert may wait for another
# transaction (a key conflict still in flight), and waiting while holding the append lock
# could deadlock with a transaction that holds that row and wants the lock.
_ENQUEUED_EVENTS = """
appended AS (
    SELECT laneway.append_events($12, array_agg(inserted.instance_id), array_agg(inserted.name),
                                 array_agg('enqueued'::text), array_agg(inserted.status),
                                 array_agg(0), NULL, NULL, NULL) AS last_event_id
      FROM inserted
    HAVING count(*) > 0
)
SELECT inserted.instance_id, inserted.run_after, inserted.created_at, inserted.params,
       (SELECT appended.last_event_id FROM appended) AS last_event_id
  FROM inserted
"""

# The single enqueue's insert ($1 ... $11, $13 the trace context and $14 the version, one
# value each, $12 the lock key), and what both
# enqueue statements return per row: the id and only what the database fills in (run_after and
# created_at from its clock, params in jsonb's key order). The caller knows the rest (a new
# row is pending, and updated_at is created_at: rows.new_instance_record; tests compare the
# records with the rows read back), so no row comes back with 27 columns to decode.
_INSERT_INSTANCE = """
    INSERT INTO laneway.instances (instance_id, name, queue, priority, max_attempts, run_after, params, next_action, next_params, idempotency_key, singleton_key, parent_id, trace_context, version)
    {values}"""
_INSTANCE_VALUES = """$1, $2, $3, $4, $5, now() + $6::float8 * interval '1 millisecond', $7::jsonb, $8,
            $7::jsonb, $9, $10, $11, $13, $14"""
# A row with an idempotency key goes in only while no other instance has that key bound to it
# (laneway.idempotency_key_free, which also orders the key's bindings and inserts under the
# key's bucket lock); a row without one never calls it, nor takes a lock.
_INSERT_KEYED_INSTANCE = _INSERT_INSTANCE.format(
    values=f"""SELECT {_INSTANCE_VALUES}
     WHERE CASE WHEN $9::text IS NULL THEN true
                ELSE laneway.idempotency_key_free($9::text) END"""
)
_INSERT_INSTANCE_WITHOUT_KEYS = _INSERT_INSTANCE.format(values=f"VALUES ({_INSTANCE_VALUES})")
_RETURNING_FILLED_IN = (  # name and status for the `enqueued` events; the rest comes back
    "RETURNING instance_id, name, status, run_after, created_at, params"
)

# $1 instance ids, $2 workflow names, $3 queues, $4 priorities, $5 max attempts, $6 delays in
# ms, $7 params (json text[]), $8 first actions, $9 idempotency keys, $10 singleton keys,
# $11 parent ids, $13 concurrency keys, $14 trace contexts, $15 versions: one row per element; $12 the
# event-append advisory lock key.
# One statement, so one round trip and one implicit transaction: the rows, their events and
# the doorbell. A row whose keys conflict is skipped (not returned, no event). The queue_keys
# row of every concurrency key is made or held first (laneway.hold_key), in one order, so two
# batches cannot each hold a key the other waits for; the rows go in in the order given,
# which is the store's lock order (store/key_order.py `in_lock_order`) for the same reason.
# So are the idempotency keys' bucket locks, all of them (laneway.lock_idempotency_keys), by
# the first row with a key, before its laneway.idempotency_key_free (CASE takes its WHENs in
# order; `keys_locked` runs once): the rows' own locks are then held already. A batch without
# idempotency keys never runs it.
ENQUEUE_INSTANCES = f"""
WITH held AS (
    SELECT count(laneway.hold_key(k.queue, k.concurrency_key)) AS n
      FROM (SELECT DISTINCT u.queue, u.concurrency_key
              FROM unnest($3::text[], $13::text[]) AS u (queue, concurrency_key)
             WHERE u.concurrency_key IS NOT NULL
             ORDER BY u.queue, u.concurrency_key) AS k
),
keys_locked AS (
    SELECT laneway.lock_idempotency_keys($9::text[]) AS n
),
inserted AS (
    INSERT INTO laneway.instances (instance_id, name, queue, priority, max_attempts, run_after, params, next_action, next_params, idempotency_key, singleton_key, parent_id, concurrency_key, trace_context, version)
    SELECT u.instance_id, u.name, u.queue, u.priority, u.max_attempts,
           now() + u.delay_ms * interval '1 millisecond', u.params::jsonb, u.first_action,
           u.params::jsonb, u.idempotency_key, u.singleton_key, u.parent_id, u.concurrency_key,
           u.trace_context, u.version
      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::integer[], $5::integer[], $6::float8[],
                  $7::text[], $8::text[], $9::text[], $10::text[], $11::uuid[], $13::text[],
                  $14::text[], $15::text[])
           AS u (instance_id, name, queue, priority, max_attempts, delay_ms, params,
                 first_action, idempotency_key, singleton_key, parent_id, concurrency_key,
                 trace_context, version)
     WHERE (SELECT held.n FROM held) >= 0
       AND CASE WHEN u.idempotency_key IS NULL THEN true
                WHEN (SELECT keys_locked.n FROM keys_locked) < 0 THEN false
                ELSE laneway.idempotency_key_free(u.idempotency_key) END
    ON CONFLICT DO NOTHING
    {_RETURNING_FILLED_IN}
),
{_ENQUEUED_EVENTS}"""

# The same for one instance: no arrays to unpack. The single call is the common one, and its
# latency is the enqueue rate of a client that enqueues one at a time.
ENQUEUE_INSTANCE = f"""
WITH inserted AS ({_INSERT_KEYED_INSTANCE}
    ON CONFLICT DO NOTHING
    {_RETURNING_FILLED_IN}
),
{_ENQUEUED_EVENTS}"""
# An instance without idempotency or singleton key can only conflict on its fresh id, so it
# skips ON CONFLICT's speculative insertion (a probe of every unique index before the insert
# and a confirmation record after it).
ENQUEUE_INSTANCE_WITHOUT_KEYS = f"""
WITH inserted AS ({_INSERT_INSTANCE_WITHOUT_KEYS}
    {_RETURNING_FILLED_IN}
),
{_ENQUEUED_EVENTS}"""

# The batch enqueue of instances without keys (store/instances.py `_copy_in`): COPY, the bulk
# path, with no ON CONFLICT (a fresh id cannot conflict) and no statement to plan. These are
# the columns each copy writes; the others take their defaults (status pending, created_at and
# updated_at the transaction's now()).
COPIED_INSTANCE_COLUMNS = (
    "instance_id", "name", "queue", "priority", "max_attempts", "run_after", "params",
    "next_action", "next_params", "parent_id", "trace_context", "version",
)  # fmt: skip
COPIED_EVENT_COLUMNS = ("instance_id", "name", "type", "status", "at", "attempt")

# $1 the append lock's key. Taken after the instances are in (as laneway.append_events is
# reached in the statements above) and held to the commit, so event ids commit in order.
LOCK_EVENT_APPENDS = "SELECT pg_advisory_xact_lock($1)"

# The doorbell after copied events: the last event id this session drew (the events' identity
# sequence, as the copy just used it), as laneway.append_events rings it.
RING_AFTER_COPIED_EVENTS = """
SELECT last_event_id, pg_notify('laneway_events', json_build_object('e', last_event_id)::text)
  FROM (SELECT lastval() AS last_event_id) AS copied
"""
