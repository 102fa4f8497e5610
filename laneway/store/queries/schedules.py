"""Schedule statements: upsert, reads, enable and disable, and the due schedules' firing.

See laneway/store/queries/__init__.py for how statements are written.
"""

# ---------------------------------------------------------------------------------------------
# schedules

# $1 name, $2 workflow name, $3 params (json text), $4 every, $5 cron, $6 timezone,
# $7 next run at (counted from now, for a new schedule or a new timing)
# One statement, under the row's lock: a replacement with the same timing (the same interval,
# or the same cron expression in the same timezone) keeps its next run, so that a catch-up
# fire still due after downtime is not dropped by code that declares its schedules at every
# start; another timing is counted from now. A new schedule is enabled; a replacement keeps
# `enabled` as it was (only SET_SCHEDULE_ENABLED changes it).
UPSERT_SCHEDULE = """
INSERT INTO laneway.schedules AS s (name, workflow_name, params, every, cron, timezone,
                                    next_run_at)
VALUES ($1, $2, $3::text::jsonb, $4, $5, $6, $7)
ON CONFLICT (name) DO UPDATE
   SET workflow_name = EXCLUDED.workflow_name, params = EXCLUDED.params,
       every = EXCLUDED.every, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
       next_run_at = CASE WHEN s.every IS NOT DISTINCT FROM EXCLUDED.every
                           AND s.cron IS NOT DISTINCT FROM EXCLUDED.cron
                           AND (s.cron IS NULL OR s.timezone = EXCLUDED.timezone)
                          THEN s.next_run_at
                          ELSE EXCLUDED.next_run_at END,
       updated_at = now()
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


def not_skipped(first: int) -> str:
    """The condition that a row of laneway.schedules is not one of the schedules an engine
    skips (one it could not plan: the engine's ClaimLoop), given as four text[] from `$first`
    on: their names, intervals, cron expressions and timezones. A skipped schedule whose rule
    has changed since is looked at again."""
    names, every, cron, timezone = (f"${n}::text[]" for n in range(first, first + 4))
    return f"""NOT EXISTS (SELECT 1
                     FROM unnest({names}, {every}, {cron}, {timezone})
                          AS skipped (name, every, cron, timezone)
                    WHERE skipped.name = schedules.name
                      AND skipped.every IS NOT DISTINCT FROM schedules.every
                      AND skipped.cron IS NOT DISTINCT FROM schedules.cron
                      AND skipped.timezone = schedules.timezone)"""


# $1 max rows, $2 the workflow names registered here (text[]), $3-$6 the schedules it skips
# (not_skipped)
# Locked until the claiming transaction advances them, so two schedulers never fire the same
# occurrence; the fire's idempotency key makes a retried fire harmless too. Only schedules of
# workflows this engine has: one of a workflow no engine has stays due, and must neither be
# locked nor looked at again and again, nor stand before the others in the order. Nor one
# this engine could not plan (a timezone its tz database lacks): it stays due, as it is, for
# a process that can (a newer release) to fire on time.
LOCK_DUE_SCHEDULES = f"""
SELECT name, workflow_name, params, every, cron, timezone, enabled, next_run_at, created_at, updated_at
  FROM laneway.schedules
 WHERE enabled
   AND next_run_at <= now()
   AND workflow_name = ANY($2::text[])
   AND {not_skipped(3)}
 ORDER BY next_run_at
 LIMIT $1
   FOR UPDATE SKIP LOCKED
"""


def next_schedule_in(names: str, skipped: int) -> str:
    """Seconds until the next enabled schedule of the workflows `names` (an SQL text[]) is due
    (<= 0: due now; NULL: none is), leaving out the schedules given from `$skipped` on
    (not_skipped): an engine times only what it can fire."""
    return f"""
SELECT EXTRACT(EPOCH FROM s.next_run_at - now())::double precision
  FROM (SELECT next_run_at
          FROM laneway.schedules
         WHERE enabled
           AND workflow_name = ANY({names})
           AND {not_skipped(skipped)}
         ORDER BY next_run_at
         LIMIT 1) AS s
"""


# $1 the workflow names registered here (text[]), $2-$5 the schedules it skips (not_skipped)
NEXT_SCHEDULE_IN = next_schedule_in("$1::text[]", 2)

# $1 name, $2 next run at
ADVANCE_SCHEDULE = """
UPDATE laneway.schedules
   SET next_run_at = $2, updated_at = now()
 WHERE name = $1
"""
