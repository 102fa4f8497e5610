"""Queue history statements: the once-a-minute roll-up of the event log, and the read.

See laneway/store/queries/__init__.py for how statements are written. The table and its
high-water mark are in migrations/0013_queue_history.sql, which says why an event id mark
counts every event exactly once.
"""

# ---------------------------------------------------------------------------------------------
# queue history

# Events of these kinds are counted; a `retrying` event counts as retried unless it is an
# operator's retry or a hand-back at shutdown (no attempt failed), which the store writes with
# these errors (laneway/store/instances.py retry_instance, laneway/store/leases.py release).
_NOT_AUTOMATIC_RETRIES = (
    "('retry requested', 'released: worker shutting down', "
    "'released: its runner lost the database')"
)

# How far back a roll-up counts: older events it reads are passed over uncounted (and
# retention does not wait for them: queries.PRUNE_FINISHED).
ROLL_UP_LOOKBACK = "interval '1 day'"

# $1 most events read per roll-up, $2 seconds of history kept
# One statement, one transaction: the progress row is locked (another roll-up in flight holds
# it: this one does nothing), the events after its mark are read in id order, and those up to
# the last one stamped before the current minute are added to their (queue, minute) rows; the
# mark moves past them. Events older than a day are passed over uncounted (bounded lookback).
# The pending depth is sampled now for the newest closed minute only (the minute that just
# ended), and overwrites that minute's earlier sample; other minutes keep what they have (0
# if no roll-up closed them). Rows older than $2 seconds are deleted. Returns `rolled` (this
# roll-up held the mark) and `more` (it stopped at $1 events: roll up again).
ROLL_UP_QUEUE_HISTORY = f"""
WITH progress AS (
    SELECT p.last_event_id
      FROM laneway.queue_history_progress AS p
     WHERE p.id
       FOR UPDATE SKIP LOCKED
),
bounds AS (
    SELECT date_trunc('minute', now()) AS open_minute,
           date_trunc('minute', now()) - interval '1 minute' AS closed_minute
),
candidates AS (
    SELECT e.event_id, e.instance_id, e.type, e.error, e.at
      FROM laneway.events AS e, progress AS p
     WHERE e.event_id > p.last_event_id
     ORDER BY e.event_id
     LIMIT $1
),
upto AS (
    SELECT max(c.event_id) AS event_id
      FROM candidates AS c, bounds AS b
     WHERE c.at < b.open_minute
),
counted AS (
    SELECT i.queue, date_trunc('minute', c.at) AS minute,
           count(*) FILTER (WHERE c.type = 'started') AS started,
           count(*) FILTER (WHERE c.type = 'completed') AS completed,
           count(*) FILTER (WHERE c.type = 'failed') AS failed,
           count(*) FILTER (WHERE c.type = 'retrying'
                              AND COALESCE(c.error, '') NOT IN {_NOT_AUTOMATIC_RETRIES})
               AS retried
      FROM candidates AS c
      JOIN upto AS u ON c.event_id <= u.event_id
      JOIN laneway.instances AS i ON i.instance_id = c.instance_id
      CROSS JOIN bounds AS b
     WHERE c.at >= b.open_minute - {ROLL_UP_LOOKBACK}
       AND c.type IN ('started', 'completed', 'failed', 'retrying')
     GROUP BY i.queue, date_trunc('minute', c.at)
),
sampled AS (
    SELECT i.queue, b.closed_minute AS minute, count(*) AS pending
      FROM laneway.instances AS i
      CROSS JOIN bounds AS b
     WHERE i.status = 'pending'
       AND EXISTS (SELECT 1 FROM progress)
     GROUP BY i.queue, b.closed_minute
),
merged AS (
    SELECT queue, minute, COALESCE(c.started, 0) AS started,
           COALESCE(c.completed, 0) AS completed, COALESCE(c.failed, 0) AS failed,
           COALESCE(c.retried, 0) AS retried, COALESCE(s.pending, 0) AS pending
      FROM counted AS c
      FULL JOIN sampled AS s USING (queue, minute)
),
written AS (
    INSERT INTO laneway.queue_history AS h
           (queue, minute, started, completed, failed, retried, pending)
    SELECT m.queue, m.minute, m.started, m.completed, m.failed, m.retried, m.pending
      FROM merged AS m
    ON CONFLICT (queue, minute) DO UPDATE
       SET started = h.started + EXCLUDED.started,
           completed = h.completed + EXCLUDED.completed,
           failed = h.failed + EXCLUDED.failed,
           retried = h.retried + EXCLUDED.retried,
           pending = CASE WHEN EXCLUDED.minute = (SELECT b.closed_minute FROM bounds AS b)
                          THEN EXCLUDED.pending ELSE h.pending END
),
advanced AS (
    UPDATE laneway.queue_history_progress AS p
       SET last_event_id = u.event_id, rolled_at = now()
      FROM upto AS u
     WHERE p.id
       AND u.event_id IS NOT NULL
),
pruned AS (
    DELETE FROM laneway.queue_history AS h
     WHERE h.minute < now() - $2::double precision * interval '1 second'
       AND EXISTS (SELECT 1 FROM progress)
)
SELECT EXISTS (SELECT 1 FROM progress) AS rolled,
       (SELECT count(*) FROM candidates) = $1
           AND (SELECT u.event_id FROM upto AS u) IS NOT NULL AS more
"""

# $1 queue name, $2 minutes
# The last $2 closed minutes of a queue, oldest first, a row for each (zeros where nothing was
# rolled up); no row at all when the queue does not exist.
QUEUE_HISTORY = """
SELECT s.minute, COALESCE(h.started, 0) AS started, COALESCE(h.completed, 0) AS completed,
       COALESCE(h.failed, 0) AS failed, COALESCE(h.retried, 0) AS retried,
       COALESCE(h.pending, 0) AS pending
  FROM laneway.queues AS q
 CROSS JOIN generate_series(date_trunc('minute', now()) - $2::integer * interval '1 minute',
                            date_trunc('minute', now()) - interval '1 minute',
                            interval '1 minute') AS s (minute)
  LEFT JOIN laneway.queue_history AS h
    ON h.queue = q.name AND h.minute = s.minute
 WHERE q.name = $1
 ORDER BY s.minute
"""
