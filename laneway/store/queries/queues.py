"""Queue statements: created on first use, caps set (by an operator, or as code's defaults)
with their token buckets, paused and resumed, counts read.

See laneway/store/queries/__init__.py for how statements are written.
"""

# ---------------------------------------------------------------------------------------------
# queues

# $1 queue name
ENSURE_QUEUE = """
INSERT INTO laneway.queues (name, tokens)
VALUES ($1, 1)
ON CONFLICT (name) DO NOTHING
"""

# A queue's caps written with their source: the row is created when missing (its bucket full,
# at most one second's worth or one token) or updated, the bucket never growing past the new
# cap. `{source}`, `{only_if}` and the `{key_*}` parts are constants below, never input.
_WRITE_QUEUE_SETTINGS = """
INSERT INTO laneway.queues (name, concurrency, rate_per_minute, tokens, tokens_at, settings_source{key_columns})
VALUES ($1, $2, $3::double precision, GREATEST(COALESCE($3::double precision / 60.0, 1), 1), now(),
        '{source}'{key_values})
ON CONFLICT (name) DO UPDATE
   SET concurrency = EXCLUDED.concurrency,
       rate_per_minute = EXCLUDED.rate_per_minute,
       tokens = LEAST(laneway.queues.tokens, EXCLUDED.tokens),
       settings_source = '{source}',{key_updates}
       updated_at = now()
{only_if}"""

# An operator's settings (configureQueue, Engine.configure_queue): always written, and from
# then on code never overrides them (settings_source 'operator', migration 0014).
# $1 queue name, $2 concurrency, $3 rate per minute (NULL: unlimited), $4 concurrency per key
# (NULL: no cap per key), $5 rate per minute per key (NULL: unlimited)
CONFIGURE_QUEUE = _WRITE_QUEUE_SETTINGS.format(
    source="operator",
    only_if="",
    key_columns=", key_concurrency, key_rate_per_minute",
    key_values=", $4::integer, $5::double precision",
    key_updates="""
       key_concurrency = EXCLUDED.key_concurrency,
       key_rate_per_minute = EXCLUDED.key_rate_per_minute,""",
)

# A template's queue_settings, written at engine start: code declares defaults. One statement,
# so two starting engines cannot read-then-write past each other: the row lock of ON CONFLICT
# re-checks the WHERE on the newest row, so an operator's settings are never overwritten and
# each write sets both caps together (the last start's pair wins, never a mix). Unchanged
# settings from code are not rewritten (the bucket and updated_at stay as they are).
# $1 queue name, $2 concurrency, $3 rate per minute (NULL: unlimited)
APPLY_CODE_QUEUE_SETTINGS = _WRITE_QUEUE_SETTINGS.format(
    source="code",
    key_columns="",
    key_values="",
    key_updates="",
    only_if=""" WHERE laneway.queues.settings_source = 'default'
    OR (laneway.queues.settings_source = 'code'
        AND (laneway.queues.concurrency, laneway.queues.rate_per_minute)
            IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.rate_per_minute))
""",
)

# An operator's pause or resume (pauseQueue, resumeQueue): the queue's row is created when
# missing (default caps, as ENSURE_QUEUE makes it), else its flag set; a row is returned only
# when the flag changed, so a repeated call writes nothing. The claim skips a paused queue
# (laneway.claim() locks only unpaused rows, and a pause waits for a claim that holds the row);
# no cap or settings_source is touched, so neither configureQueue nor code's defaults undo it.
# $1 queue name, $2 paused
SET_QUEUE_PAUSED = """
INSERT INTO laneway.queues (name, tokens, paused)
VALUES ($1, 1, $2)
ON CONFLICT (name) DO UPDATE
   SET paused = EXCLUDED.paused,
       updated_at = now()
 WHERE laneway.queues.paused IS DISTINCT FROM EXCLUDED.paused
RETURNING name
"""

# The doorbell of a queue with new room (resumed, or its caps changed by an operator): no event
# is new (the newest event id, as committed), but every listening claim loop claims again at
# once instead of at its next poll.
RING_FOR_QUEUE_ROOM = """
SELECT pg_notify('laneway_events', json_build_object('e', COALESCE(max(event_id), 0))::text)
  FROM laneway.events
"""

# Each queue with its caps and its instances counted per status. The counts cost one pass
# over laneway.instances at most, however many queues there are: pending and running rows are
# counted through the claim's and the running partial indexes (live rows only, however many
# finished ones retention keeps), every other status by one GROUP BY over the table (paused
# and waiting rows without a concurrency key have no index, the finished ones none by queue,
# so they share that pass). A correlated count per queue would scan the table once per queue
# instead. tests/store/test_queue_stats.py checks the plan.
# $1 queue name (NULL: every queue)
QUEUE_STATS = """
WITH counted (queue, status, n) AS (
    SELECT queue, 'pending', count(*)
      FROM laneway.instances
     WHERE status = 'pending' AND concurrency_key IS NULL
       AND ($1::text IS NULL OR queue = $1)
     GROUP BY queue
    UNION ALL
    SELECT queue, 'pending', count(*)
      FROM laneway.instances
     WHERE status = 'pending' AND concurrency_key IS NOT NULL
       AND ($1::text IS NULL OR queue = $1)
     GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*)
      FROM laneway.instances
     WHERE status = 'running'
       AND ($1::text IS NULL OR queue = $1)
     GROUP BY queue
    UNION ALL
    SELECT queue, status, count(*)
      FROM laneway.instances
     WHERE status NOT IN ('pending', 'running')
       AND ($1::text IS NULL OR queue = $1)
     GROUP BY queue, status
), per_queue AS (
    SELECT queue, jsonb_object_agg(status, n) AS counts
      FROM (SELECT queue, status, sum(n)::bigint AS n FROM counted GROUP BY queue, status) AS c
     GROUP BY queue
)
SELECT q.name, q.concurrency, q.rate_per_minute, q.paused, q.settings_source,
       q.key_concurrency, q.key_rate_per_minute,
       COALESCE(per_queue.counts, '{}'::jsonb) AS counts
  FROM laneway.queues AS q
  LEFT JOIN per_queue ON per_queue.queue = q.name
 WHERE $1::text IS NULL OR q.name = $1
 ORDER BY q.name
"""

# The age of the oldest ready (pending and due) instance of each queue that has one: a
# cluster-wide metric, read every few seconds at most.
OLDEST_READY = """
SELECT queue, EXTRACT(EPOCH FROM now() - min(run_after))::double precision AS age_seconds
  FROM laneway.instances
 WHERE status = 'pending'
   AND run_after <= now()
 GROUP BY queue
"""
