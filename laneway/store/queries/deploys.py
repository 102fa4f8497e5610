"""Deploy statements: what is in flight, by workflow version and by the actions it may run
next, for the deploy preflight (laneway/engine/preflight.py).

See laneway/store/queries/__init__.py for how statements are written.
"""

# No parameters.
# The instances not yet ended, counted per (name, version), and per (name, version, action)
# for each action such an instance may run next: its next action (the one running, or the
# one after its pause or wait), and a wait's on_timeout handler. `action` is NULL on the rows
# of a whole (name, version) (GROUPING); an instance whose two actions are one counts once.
# Reads every unfinished row: a preflight runs once per deploy, not on a hot path.
IN_FLIGHT_ACTIONS = """
SELECT i.name, i.version, a.action, GROUPING(a.action) = 1 AS whole,
       count(DISTINCT i.instance_id) AS instances
  FROM laneway.instances AS i
 CROSS JOIN LATERAL (VALUES (i.next_action), (i.wait ->> 'on_timeout')) AS a (action)
 WHERE i.status IN ('pending', 'running', 'paused', 'waiting')
 GROUP BY GROUPING SETS ((i.name, i.version), (i.name, i.version, a.action))
HAVING GROUPING(a.action) = 1 OR a.action IS NOT NULL
 ORDER BY i.name, i.version, a.action NULLS FIRST
"""

# $1 workflow name, $2 version, $3 action (NULL: any), $4 at most this many
# The newest unfinished instances of a (name, version) that may run `action` next.
IN_FLIGHT_SAMPLE = """
SELECT i.instance_id
  FROM laneway.instances AS i
 WHERE i.name = $1
   AND i.version = $2
   AND i.status IN ('pending', 'running', 'paused', 'waiting')
   AND ($3::text IS NULL OR i.next_action = $3 OR i.wait ->> 'on_timeout' = $3)
 ORDER BY i.created_at DESC, i.instance_id DESC
 LIMIT $4
"""
