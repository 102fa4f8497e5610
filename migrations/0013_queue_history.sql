-- laneway.queue_history: per queue, per minute, what happened (issue #18, point 5).
--
-- Rolled up from laneway.events by the engine once a minute (queries.ROLL_UP_QUEUE_HISTORY),
-- not written per instance. laneway.queue_history_progress holds the one high-water mark:
-- the last event id already counted. Event ids become visible in id order (the append lock,
-- 0011), so every event after the mark is counted exactly once, by the roll-up that moves the
-- mark past it in the same transaction; a second roll-up skips the row while the first holds
-- it. Events already in the table when this migration ran are not rolled up.
--
-- pending is the depth sampled when a roll-up closes the minute (the newest closed minute at
-- that moment, a few seconds after its end); a minute no roll-up closed keeps 0. Rows older
-- than two days are deleted by the roll-up itself, so the table holds at most
-- 2 x 1440 rows per queue.

CREATE TABLE laneway.queue_history (
    queue text NOT NULL,
    minute timestamptz NOT NULL,
    started integer NOT NULL DEFAULT 0,
    completed integer NOT NULL DEFAULT 0,
    failed integer NOT NULL DEFAULT 0,
    retried integer NOT NULL DEFAULT 0,
    pending integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);

CREATE TABLE laneway.queue_history_progress (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),  -- one row: a key that cannot grow
    last_event_id bigint NOT NULL,
    rolled_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO laneway.queue_history_progress (id, last_event_id)
SELECT true, COALESCE(max(event_id), 0)
  FROM laneway.events;
