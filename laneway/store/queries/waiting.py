"""Waiting reasons: why each of a page of instances is not running, in one statement.

See laneway/store/queries/__init__.py for how statements are written. The room of a queue and
of a key come from laneway.queue_room() and laneway.key_room(), the functions the claim
decides with (laneway/store/sql/functions.sql), so a reason cannot disagree with a claim.
"""

from laneway.store.queries.waits import WOKEN_STATUS
from laneway.store.queries.workers import LIVE

# What keeps a live process from claiming an ordinary instance (migration 0029, laneway.claim()
# and laneway.isolation_kept()). `alone`: it runs an isolated instance (one whose worker was
# lost twice, or at its last chance) and claims nothing beside it. `ahead_*`: the claim-order
# place of the first isolated instance its claim would pick that has been due for more than a
# lease (its heartbeat is a third of its lease): it takes nothing behind that one until it has
# drained and run it. A claim picks, of each queue with room, its lanes' first rows in claim
# order, as many as the room (and the process's concurrency) allows: those rows are read once
# here (`isolated_first`, of every workflow, so rows of workflows a process lacks may hide one
# from it; at most _PICKS_READ of each lane), and the order across keys' turns is read as
# priority, due time, creation order.
# The estimated cost stays small on purpose: past jit_above_cost a planner's guess on a fresh
# database (no statistics) would compile the statement for seconds.
_PICKS_READ = 100  # a constant LIMIT: a planner's guess at a computed one is a tenth of a table


def _lane(keyed: str) -> str:
    """The first _PICKS_READ due rows of one lane of queue `dq` in claim order: the unkeyed
    (`keyed` "IS NULL") or the keyed ("IS NOT NULL"), each read apart so each uses its index."""
    return f"""(SELECT f.name, f.version, f.priority, f.run_after, f.seq, f.isolated,
                f.concurrency_key,
                row_number() OVER (ORDER BY f.priority DESC, f.run_after, f.seq) AS place
           FROM laneway.instances AS f
          WHERE f.queue = dq.name
            AND f.status = 'pending'
            AND f.concurrency_key {keyed}
            AND f.run_after <= now()
          ORDER BY f.priority DESC, f.run_after, f.seq
          LIMIT {_PICKS_READ})"""


_LIVE_WORKERS = f"""
isolated_first AS MATERIALIZED (
    SELECT o.name, o.version, o.priority, o.run_after, o.seq
      FROM laneway.queues AS dq
     CROSS JOIN LATERAL laneway.queue_room(dq.name, dq.concurrency, dq.rate_per_minute,
                                           dq.tokens, dq.tokens_at) AS room
     CROSS JOIN LATERAL (
        SELECT GREATEST(LEAST(room.slots, (SELECT max(w.concurrency)
                                             FROM laneway.workers AS w
                                            WHERE {LIVE})), 0) AS picks) AS pick
     CROSS JOIN LATERAL (
        {_lane("IS NULL")}
        UNION ALL
        {_lane("IS NOT NULL")}) AS o
      LEFT JOIN laneway.queue_keys AS ok ON ok.queue = dq.name AND ok.key = o.concurrency_key
     WHERE NOT dq.paused
       AND o.isolated
       AND o.place <= pick.picks
       AND (o.concurrency_key IS NULL
            OR (SELECT kr.slots
                  FROM laneway.key_room(dq.name, o.concurrency_key, dq.key_concurrency,
                                        dq.key_rate_per_minute, COALESCE(ok.tokens, 'Infinity'),
                                        COALESCE(ok.tokens_at, now())) AS kr) > 0)
),
live AS MATERIALIZED (
    SELECT w.versions, w.running, w.concurrency,
           EXISTS (SELECT 1
                     FROM laneway.instances AS a
                    WHERE a.owner_id = w.owner_id
                      AND a.status = 'running'
                      AND a.isolated) AS alone,
           ahead.priority AS ahead_priority, ahead.run_after AS ahead_run_after,
           ahead.seq AS ahead_seq
      FROM laneway.workers AS w
      LEFT JOIN LATERAL (
        SELECT c.priority, c.run_after, c.seq
          FROM isolated_first AS c
         WHERE c.name || '@' || c.version = ANY(w.versions)
           AND c.run_after < now() - 3 * w.heartbeat_seconds * interval '1 second'
         ORDER BY c.priority DESC, c.run_after, c.seq
         LIMIT 1) AS ahead ON true
     WHERE {LIVE}
)"""


def _lost_runs(code: str) -> str:
    """For an instance whose reason `r.code` is `code` (else none are read): how many running
    rows of its queue (QUEUE_FULL) or of its key (KEY_FULL) a process that is not live holds,
    when the first of their leases expires, and `until` then: that time, or now once it has
    passed (a live process's next poll recovers the run). Read by instances_running (queue,
    concurrency_key); the test of `r.code`, of no row of `x`, is made once per instance."""
    key = "\n       AND x.concurrency_key = i.concurrency_key" if code == "KEY_FULL" else ""
    return f"""
    SELECT count(*) AS held, min(x.lease_expires_at) AS expires,
           min(GREATEST(x.lease_expires_at, now())) AS until
      FROM laneway.instances AS x
     WHERE r.code = '{code}'
       AND x.queue = i.queue{key}
       AND x.status = 'running'
       AND NOT EXISTS (SELECT 1
                         FROM laneway.workers AS w
                        WHERE w.owner_id = x.owner_id
                          AND {LIVE})"""


# $1 instance ids (uuid[])
# One row per instance of $1 that is pending, paused or waiting; the first reason that holds, in
# the order a claim would meet them: paused at a checkpoint, sleeping, waiting for a signal
# (once its wake time came, a wait is read as what its wake-up makes it: a pending instance due
# then, or one a live process ends, NO_WORKER while none is live), not due yet (a retry's
# backoff, or a delay), no live process has its workflow, none runs its
# version, every one that does runs an isolated instance alone or drains to run one ahead of it
# (NO_WORKER too: none takes it now), its queue paused, full or out of tokens, its key full or
# out of tokens; else it is ready. `until` is when it may next become claimable, where known
# (for a full queue or key, when the first of its runs that a lost process holds expires, or now
# once that lease has expired). The facts behind the reason come along for its message.
WAITING_REASONS = f"""
WITH {_LIVE_WORKERS}
SELECT i.instance_id, i.name, i.version, i.queue, i.concurrency_key, i.checkpoint, i.attempts,
       i.wait_signal, i.isolated, i.recoveries, i.status, i.wake_at, wake.overdue AS wake_passed,
       wake.ends AS wake_ends, r.code,
       CASE WHEN r.code = 'VERSION_UNAVAILABLE'
            THEN ARRAY(SELECT DISTINCT split_part(v.key, '@', 2)
                         FROM laneway.workers AS w, unnest(w.versions) AS v (key)
                        WHERE split_part(v.key, '@', 1) = i.name
                          AND {LIVE}
                        ORDER BY 1)
       END AS live_versions,
       CASE WHEN r.code IN ('AWAITING_REVIEW', 'SLEEPING', 'AWAITING_SIGNAL')
             AND NOT wake.overdue THEN i.wake_at
            WHEN r.code IN ('DELAYED', 'RETRY_BACKOFF') THEN i.run_after
            -- A token a rate of 1e-12 a minute brings is ~10^14 s away, past what an interval
            -- holds ("interval out of range"): shown as at most a century ahead.
            WHEN r.code = 'RATE_LIMITED'
            THEN now() + LEAST(room.token_in, 3155760000) * interval '1 second'
            WHEN r.code = 'KEY_RATE_LIMITED'
            THEN now() + LEAST(key_room.token_in, 3155760000) * interval '1 second'
            WHEN r.code = 'QUEUE_FULL' THEN lost.until
            WHEN r.code = 'KEY_FULL' THEN key_lost.until
       END AS until,
       room.running, q.concurrency, q.rate_per_minute, key_room.running AS key_running,
       q.key_concurrency, q.key_rate_per_minute, lost.held + key_lost.held AS lost_running,
       COALESCE(lost.expires, key_lost.expires) AS lost_expires,
       fit.alone AS workers_alone, fit.making_way AS workers_making_way,
       fit.free AS workers_free, fit.open_running AS workers_running,
       fit.open_concurrency AS workers_concurrency
  FROM laneway.instances AS i
  JOIN laneway.queues AS q ON q.name = i.queue
 CROSS JOIN LATERAL laneway.queue_room(q.name, q.concurrency, q.rate_per_minute, q.tokens,
                                       q.tokens_at) AS room
  LEFT JOIN laneway.queue_keys AS k ON k.queue = i.queue AND k.key = i.concurrency_key
  LEFT JOIN LATERAL laneway.key_room(i.queue, i.concurrency_key, q.key_concurrency,
                                     q.key_rate_per_minute, COALESCE(k.tokens, 'Infinity'),
                                     COALESCE(k.tokens_at, now())) AS key_room
         ON i.concurrency_key IS NOT NULL
 -- A wait whose wake time came (a sleep's end, a signal wait's timeout, a checkpoint's expiry)
 -- is woken by the next poll of any live process, whatever it runs (WAKE_DUE in
 -- queries/waits.py, whose WOKEN_STATUS `ends` reads: NULL, it goes on pending; else it ends
 -- failed or cancelled). `due_at`: when it is due for a claim; a wait the wake-up makes
 -- pending is due from its wake time, as it will be then; NULL while it waits.
 CROSS JOIN LATERAL (
    SELECT o.overdue, o.ends,
           CASE WHEN i.status = 'pending' THEN i.run_after
                WHEN o.overdue AND o.ends IS NULL THEN i.wake_at
           END AS due_at
      FROM (SELECT COALESCE(i.status IN ('waiting', 'paused') AND i.wake_at <= now(), false)
                       AS overdue,
                   NULLIF({WOKEN_STATUS}, 'pending') AS ends) AS o) AS wake
 -- The live processes that run its version: how many run an instance alone, how many of the
 -- others drain for one ahead of it in claim order (neither takes it now), and how many of the
 -- rest (`open`) had room at their last heartbeat, with the runs and room they had then.
 CROSS JOIN LATERAL (
    SELECT count(*) AS workers,
           count(*) FILTER (WHERE s.alone) AS alone,
           count(*) FILTER (WHERE s.making_way) AS making_way,
           count(*) FILTER (WHERE s.open AND s.running < s.concurrency) AS free,
           sum(s.running) FILTER (WHERE s.open) AS open_running,
           sum(s.concurrency) FILTER (WHERE s.open) AS open_concurrency
      FROM (SELECT l.alone, d.making_way, NOT (l.alone OR d.making_way) AS open, l.running,
                   l.concurrency
              FROM live AS l
             CROSS JOIN LATERAL (
                SELECT COALESCE(NOT l.alone
                                AND (-l.ahead_priority, l.ahead_run_after, l.ahead_seq)
                                    < (-i.priority, wake.due_at, i.seq), false) AS making_way) AS d
             WHERE i.name || '@' || i.version = ANY(l.versions)) AS s) AS fit
 CROSS JOIN LATERAL (
    SELECT CASE WHEN wake.overdue AND wake.ends IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM live)  -- read for `fit` anyway
                THEN 'NO_WORKER'
                WHEN wake.due_at IS NULL AND i.status = 'paused' THEN 'AWAITING_REVIEW'
                WHEN wake.due_at IS NULL AND i.wait_signal IS NULL THEN 'SLEEPING'
                WHEN wake.due_at IS NULL THEN 'AWAITING_SIGNAL'
                WHEN wake.due_at > now() AND i.attempts > 0 THEN 'RETRY_BACKOFF'
                WHEN wake.due_at > now() THEN 'DELAYED'
                WHEN NOT EXISTS (SELECT 1
                                   FROM laneway.workers AS w
                                  WHERE i.name = ANY(w.workflows)
                                    AND {LIVE}) THEN 'NO_WORKER'
                WHEN NOT EXISTS (SELECT 1
                                   FROM laneway.workers AS w
                                  WHERE i.name || '@' || i.version = ANY(w.versions)
                                    AND {LIVE}) THEN 'VERSION_UNAVAILABLE'
                WHEN fit.alone + fit.making_way = fit.workers THEN 'NO_WORKER'
                WHEN q.paused THEN 'QUEUE_PAUSED'
                WHEN room.running >= q.concurrency THEN 'QUEUE_FULL'
                WHEN room.tokens_now < 1 THEN 'RATE_LIMITED'
                WHEN key_room.running >= q.key_concurrency THEN 'KEY_FULL'
                WHEN key_room.tokens_now < 1 THEN 'KEY_RATE_LIMITED'
                ELSE 'READY'
           END AS code) AS r
  -- A full queue's (or key's) runs held by processes that stopped heartbeating (a kill -9):
  -- their slots come back when the first of their leases expires, which is when it may start.
  CROSS JOIN LATERAL ({_lost_runs("QUEUE_FULL")}) AS lost
  CROSS JOIN LATERAL ({_lost_runs("KEY_FULL")}) AS key_lost
 WHERE i.instance_id = ANY($1::uuid[])
   AND i.status IN ('pending', 'paused', 'waiting')
"""
