"""Queue statements: created on first use, caps and token buckets set, counts read.

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
