"""Bulk action statements: what a filter selects for cancel, retry or resume, the keyset walk
over it, and the batch writes (the single cancel, resume and retry are their batch of one).

See laneway/store/queries/__init__.py for how statements are written.
"""

from laneway.store.queries.instances import INSTANCE_COLUMNS, INSTANCE_FILTER

# ---------------------------------------------------------------------------------------------
# bulk actions: the selection

# INSTANCE_FILTER's $1 ... $8, $9 the statuses the action applies to (text[]), $10 how many ids
# to sample
# What a bulk action (or its dry run) reports before it changes anything: how many instances
# the filter selects in those statuses, the newest of them (in list order), and what bounds
# the walk: the last event id the count's snapshot sees, and the database clock after it.
# Event ids become visible in id order (the append lock, held to commit: laneway.append_events
# and the copy's LOCK_EVENT_APPENDS), and an instance's insert and each change of its status
# append its event in the same transaction, so what the count saw of an instance (whether it
# existed, and in what status) is what its events up to that id say. The clock is only an
# outer bound: a row's created_at is its transaction's start, which may come before the count
# though the row was committed after it.
BULK_MATCH = f"""
SELECT (SELECT COALESCE(max(event_id), 0) FROM laneway.events) AS last_event_id,
       (SELECT count(*)
          FROM laneway.instances
         WHERE {INSTANCE_FILTER}
           AND status = ANY($9::text[])) AS matched,
       ARRAY(SELECT instance_id
               FROM laneway.instances
              WHERE {INSTANCE_FILTER}
                AND status = ANY($9::text[])
              ORDER BY created_at DESC, instance_id DESC
              LIMIT $10) AS sample_ids,
       clock_timestamp() AS at
"""

# (no parameters) Inside a transaction, for BULK_BATCH: its statements are planned for their
# values every time, and with no sort, so that the read is the walk over an index in
# (created_at, instance_id) order that stops at the batch's last row. Planned from estimates
# instead, BULK_BATCH went by them: after a large enqueue, before autovacuum has analyzed
# the table, or in a generic plan (asyncpg prepares each statement once, and PostgreSQL may keep
# one plan for any values), the planner guesses that few rows match, and prefers a bitmap scan
# of every row after the cursor and a sort of them to the walk, in every batch: a walk then
# cost the square of what it read. Without a sort to choose, the walk is the only plan left
# (instances_page, or instances_name_page for a name), and each batch costs its rows.
BULK_WALK_PLANS = """
SELECT set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('enable_sort', 'off', true)
"""

# INSTANCE_FILTER's $1 ... $8 (its statuses NULL: $14 has them), $9 the statuses the action
# applies to (text[]), $10 and $11 the key (created_at, instance_id) of the last row the
# previous batch read (NULL: from the start), $12 the batch size, $13 BULK_MATCH's last event
# id, $14 the statuses the count took (the filter's among $9; text[]), $15 whether a row must be
# unchanged since the count (retry, resume)
# The next batch of a bulk action, oldest first, unlocked (the batch write re-checks each row's
# status under its lock), with the pause's label and input schema for a resume: the next $12
# rows the filter selects in $9 (read), each with whether the count took it (taken). A row's
# last event up to $13 is the last the count saw (BULK_MATCH), so its status is the one the
# row was counted in, and a row created after the count has none. A cancel takes a row counted
# in $14 that is in $9 now, whatever it did since (pending and running ones move all the time;
# one a retry brought back from failed since was not counted). A retry or a resume takes one
# with no event after $13, so still in the status it was counted in (a resting one: one that
# failed or paused since is left for the next call; a row with no event at all, which no writer
# leaves, passes as before). Each probe reads one instance's few entries of events_instance per
# partition, for each row read, so its cost does not depend on how many events came after $13
# (the walk's own among them). Both are scalar subqueries, not EXISTS, which the planner may
# turn into one hashed scan of every event up to $13 per batch.
# The walk goes on from the last row read, taken or not: a row not taken now is not taken
# later (its events up to $13 do not change, and one after $13 stays), so each row is looked
# at once, as when the batch was the first $12 rows taken. The rows are read in a subquery of
# their own, limited before the probes, and the keyset is one row comparison with no
# `IS NULL OR` (no cursor: before any key a row can have, its created_at being a transaction's
# start), an index condition: run after BULK_WALK_PLANS, the read is a walk over instances_page
# from the cursor that stops at $12 rows. With the probe among the conditions, the cursor a
# filter and the plan left to the estimates, a batch could read every row left from the first
# on and probe each of them before a sort kept $12: a walk cost the square of what it matched.
BULK_BATCH = f"""
SELECT r.instance_id, r.created_at, r.checkpoint, r.input_schema,
       CASE WHEN $15::boolean
            THEN r.status = ANY($14::text[])
                 AND (SELECT COALESCE(max(e.event_id), 0)
                        FROM laneway.events AS e
                       WHERE e.instance_id = r.instance_id) <= $13::bigint
            ELSE COALESCE((SELECT e.status = ANY($14::text[])
                             FROM laneway.events AS e
                            WHERE e.instance_id = r.instance_id
                              AND e.event_id <= $13::bigint
                            ORDER BY e.event_id DESC
                            LIMIT 1), false)
       END AS taken
  FROM (SELECT instance_id, created_at, status, checkpoint, wait -> 'input_schema' AS input_schema
          FROM laneway.instances
         WHERE {INSTANCE_FILTER}
           AND status = ANY($9::text[])
           AND (created_at, instance_id)
               > (COALESCE($10::timestamptz, '-infinity'),
                  COALESCE($11::uuid, '00000000-0000-0000-0000-000000000000'))
         ORDER BY created_at, instance_id
         LIMIT $12) AS r
 ORDER BY r.created_at, r.instance_id
"""

# ---------------------------------------------------------------------------------------------
# bulk actions: the batch writes (each returns the rows it changed)

# $1 instance ids (uuid[])
# The status is checked by the UPDATE itself: under READ COMMITTED a row that a worker is
# completing is re-read after its lock is released, so a row that just ended is left alone.
# A pause or wait it was in ends with it, as a resume, a signal or an expiry ends one: its
# checkpoint label (the label while paused), wait and awaited signal go.
CANCEL_INSTANCES = f"""
UPDATE laneway.instances
   SET status = 'cancelled', owner_id = NULL, lease_expires_at = NULL, wake_at = NULL,
       checkpoint = NULL, wait = NULL, wait_signal = NULL,
       updated_at = now(), finished_at = now()
 WHERE instance_id = ANY($1::uuid[])
   AND status NOT IN ('completed', 'failed', 'cancelled')
RETURNING {INSTANCE_COLUMNS}
"""

# $1 instance ids (uuid[]), $2 their resume inputs (json text[]; NULL: none, the pause's params
# stay the next action's), $3 the checkpoint labels the inputs were checked against (text[])
# An input replaces the next action's params. The label guards against a resume checked
# against another pause of the same instance: it must still be paused where it was read. A
# checkpoint that expired is not resumed, though no engine has woken it yet: its expiry decides.
RESUME_INSTANCES = f"""
UPDATE laneway.instances
   SET status = 'pending', checkpoint = NULL, wait = NULL, wake_at = NULL,
       next_params = CASE WHEN u.new_input IS NULL THEN next_params ELSE u.new_input::jsonb END,
       run_after = now(), updated_at = now()
  FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u (id, new_input, paused_at)
 WHERE instance_id = ANY($1::uuid[])
   AND instance_id = u.id
   AND status = 'paused'
   AND checkpoint IS NOT DISTINCT FROM u.paused_at
   AND (wake_at IS NULL OR wake_at >= now())
RETURNING {INSTANCE_COLUMNS}
"""

# $1 instance ids (uuid[])
# A fresh budget of attempts from the next one, the count going on. A keyed instance's key row
# is made or held again (laneway.hold_key): it may have gone while the instance was failed.
# The keys are held first in one order (as ENQUEUE_INSTANCES does), so two batches cannot each
# hold a key the other waits for; the per-row hold covers a row that failed meanwhile.
RETRY_INSTANCES = f"""
WITH held AS (
    SELECT count(laneway.hold_key(k.queue, k.concurrency_key)) AS n
      FROM (SELECT DISTINCT queue, concurrency_key
              FROM laneway.instances
             WHERE instance_id = ANY($1::uuid[])
               AND status = 'failed'
               AND concurrency_key IS NOT NULL
             ORDER BY queue, concurrency_key) AS k
)
UPDATE laneway.instances AS i
   SET status = 'pending', attempt_base = attempts, recoveries = 0, isolated = false,
       run_after = now(),
       finished_at = NULL, updated_at = now()
 WHERE instance_id = ANY($1::uuid[])
   AND status = 'failed'
   AND (SELECT held.n FROM held) >= 0
   AND (concurrency_key IS NULL OR laneway.hold_key(queue, concurrency_key))
   -- A singleton comes back only while no unfinished instance holds its key, and of the
   -- batch's failed instances with one key only the first: the key's unique index allows one.
   AND (i.singleton_key IS NULL
        OR (NOT EXISTS (SELECT 1
                          FROM laneway.instances AS holder
                         WHERE holder.name = i.name
                           AND holder.singleton_key = i.singleton_key
                           AND holder.status IN ('pending', 'running', 'paused', 'waiting'))
            AND NOT EXISTS (SELECT 1
                              FROM laneway.instances AS twin
                             WHERE twin.instance_id = ANY($1::uuid[])
                               AND twin.status = 'failed'
                               AND twin.name = i.name
                               AND twin.singleton_key = i.singleton_key
                               AND twin.instance_id < i.instance_id)))
RETURNING {INSTANCE_COLUMNS}
"""
