"""Waiting reasons: why each of a page of instances is not running, in one statement.

See laneway/store/queries/__init__.py for how statements are written. The room of a queue and
of a key come from laneway.queue_room() and laneway.key_room(), the functions the claim
decides with (laneway/store/sql/functions.sql), so a reason cannot disagree with a claim.
"""

from laneway.store.queries.workers import LIVE

# $1 instance ids (uuid[])
# One row per instance of $1 that is pending, paused or waiting; the first reason that holds, in
# the order a claim would meet them: paused at a checkpoint, sleeping, waiting for a signal,
# not due yet (a retry's backoff, or a
# delay), no live process has its workflow, none runs its version, its queue paused, full or out of tokens, its key
# full or out of tokens; else it is ready. `until` is when it may next become claimable, where
# known (for a full queue, when the first of its runs that a lost process holds expires).
# The facts behind the reason come along for its message.
WAITING_REASONS = f"""
SELECT i.instance_id, i.name, i.version, i.queue, i.concurrency_key, i.checkpoint, i.attempts,
       i.wait_signal, i.isolated, i.recoveries, r.code,
       CASE WHEN r.code = 'VERSION_UNAVAILABLE'
            THEN ARRAY(SELECT DISTINCT split_part(v.key, '@', 2)
                         FROM laneway.workers AS w, unnest(w.versions) AS v (key)
                        WHERE split_part(v.key, '@', 1) = i.name
                          AND {LIVE}
                        ORDER BY 1)
       END AS live_versions,
       CASE WHEN r.code IN ('AWAITING_REVIEW', 'SLEEPING', 'AWAITING_SIGNAL') THEN i.wake_at
            WHEN r.code IN ('DELAYED', 'RETRY_BACKOFF') THEN i.run_after
            WHEN r.code = 'RATE_LIMITED'
            THEN now() + room.token_in * interval '1 second'
            WHEN r.code = 'KEY_RATE_LIMITED'
            THEN now() + key_room.token_in * interval '1 second'
            WHEN r.code = 'QUEUE_FULL' THEN lost.expires
       END AS until,
       room.running, q.concurrency, q.rate_per_minute, key_room.running AS key_running,
       q.key_concurrency, q.key_rate_per_minute, lost.held AS lost_running
  FROM laneway.instances AS i
  JOIN laneway.queues AS q ON q.name = i.queue
 CROSS JOIN LATERAL laneway.queue_room(q.name, q.concurrency, q.rate_per_minute, q.tokens,
                                       q.tokens_at) AS room
  LEFT JOIN laneway.queue_keys AS k ON k.queue = i.queue AND k.key = i.concurrency_key
  LEFT JOIN LATERAL laneway.key_room(i.queue, i.concurrency_key, q.key_concurrency,
                                     q.key_rate_per_minute, COALESCE(k.tokens, 'Infinity'),
                                     COALESCE(k.tokens_at, now())) AS key_room
         ON i.concurrency_key IS NOT NULL
 CROSS JOIN LATERAL (
    SELECT CASE WHEN i.status = 'paused' THEN 'AWAITING_REVIEW'
                WHEN i.status = 'waiting' AND i.wait_signal IS NULL THEN 'SLEEPING'
                WHEN i.status = 'waiting' THEN 'AWAITING_SIGNAL'
                WHEN i.run_after > now() AND i.attempts > 0 THEN 'RETRY_BACKOFF'
                WHEN i.run_after > now() THEN 'DELAYED'
                WHEN NOT EXISTS (SELECT 1
                                   FROM laneway.workers AS w
                                  WHERE i.name = ANY(w.workflows)
                                    AND {LIVE}) THEN 'NO_WORKER'
                WHEN NOT EXISTS (SELECT 1
                                   FROM laneway.workers AS w
                                  WHERE i.name || '@' || i.version = ANY(w.versions)
                                    AND {LIVE}) THEN 'VERSION_UNAVAILABLE'
                WHEN q.paused THEN 'QUEUE_PAUSED'
                WHEN room.running >= q.concurrency THEN 'QUEUE_FULL'
                WHEN room.tokens_now < 1 THEN 'RATE_LIMITED'
                WHEN key_room.running >= q.key_concurrency THEN 'KEY_FULL'
                WHEN key_room.tokens_now < 1 THEN 'KEY_RATE_LIMITED'
                ELSE 'READY'
           END AS code) AS r
  -- A full queue's runs held by processes that stopped heartbeating (a kill -9): their slots
  -- come back when the first of their leases expires, which is when it may start.
  LEFT JOIN LATERAL (
    SELECT count(*) AS held, min(x.lease_expires_at) AS expires
      FROM laneway.instances AS x
     WHERE x.queue = i.queue
       AND x.status = 'running'
       AND NOT EXISTS (SELECT 1
                         FROM laneway.workers AS w
                        WHERE w.owner_id = x.owner_id
                          AND {LIVE})) AS lost
         ON r.code = 'QUEUE_FULL'
 WHERE i.instance_id = ANY($1::uuid[])
   AND i.status IN ('pending', 'paused', 'waiting')
"""
