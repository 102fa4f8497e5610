"""Worker registry statements: a live process's heartbeat, its clean removal, the live list.

See laneway/store/queries/__init__.py for how statements are written. A row is live while its
last heartbeat is younger than two of its own heartbeat intervals (LIVE below); one older than
three is deleted by the next heartbeat of any process (_AGED_OUT).
"""

# ---------------------------------------------------------------------------------------------
# workers

# A live row (of `laneway.workers AS w`): its process missed fewer than two heartbeats. Only
# what is shown reads it: the live workers list and the waiting reasons (NO_WORKER,
# VERSION_UNAVAILABLE, and a full queue's or key's runs "held by a process that stopped
# heartbeating").
# A heartbeat is a third of a lease (the renewal comes just before it), so a killed process
# shows as stopped a third of a lease before its leases expire; one that missed a single beat
# may just be late. Who owns an instance is never decided here: the recovery and the fencing
# of writes go by the lease alone.
LIVE = "w.last_seen_at >= now() - 2 * w.heartbeat_seconds * interval '1 second'"
# A row the heartbeats delete: three heartbeats missed, so that a live process slow to beat
# is listed again at its next beat with the start it registered.
_AGED_OUT = "w.last_seen_at < now() - 3 * w.heartbeat_seconds * interval '1 second'"

# $1 owner id, $2 role, $3 host, $4 pid, $5 workflows (text[]), $6 running, $7 concurrency,
# $8 heartbeat seconds, $9 versions ('name@version', text[])
# One statement per heartbeat: this process's row written (started_at kept from the first
# one), and the rows of processes that missed three heartbeats deleted; a row another
# heartbeat is deleting is skipped, so two heartbeats never wait on each other.
HEARTBEAT_WORKER = f"""
WITH aged_out AS (
    DELETE FROM laneway.workers
     WHERE owner_id IN (SELECT w.owner_id
                          FROM laneway.workers AS w
                         WHERE w.owner_id <> $1
                           AND {_AGED_OUT}
                           FOR UPDATE SKIP LOCKED)
)
INSERT INTO laneway.workers
       (owner_id, role, host, pid, workflows, running, concurrency, heartbeat_seconds,
        started_at, last_seen_at, versions)
VALUES ($1, $2, $3, $4, $5::text[], $6, $7, $8::double precision, now(), now(), $9::text[])
ON CONFLICT (owner_id) DO UPDATE
   SET role = EXCLUDED.role, host = EXCLUDED.host, pid = EXCLUDED.pid,
       workflows = EXCLUDED.workflows, running = EXCLUDED.running,
       concurrency = EXCLUDED.concurrency, heartbeat_seconds = EXCLUDED.heartbeat_seconds,
       last_seen_at = now(), versions = EXCLUDED.versions
RETURNING (SELECT max(m.name) FROM laneway.schema_migrations AS m) AS newest_migration
"""

# $1 owner id
REMOVE_WORKER = """
DELETE FROM laneway.workers
 WHERE owner_id = $1
"""

# $1 owner id
# The live row of an owner id, and how long ago (by the database's clock) it was last seen:
# what a starting engine reads before its first heartbeat takes that row over (presence.py).
# The columns of a WorkerRecord (rows.worker_from_row).
_WORKER_COLUMNS = """w.owner_id, w.role, w.host, w.pid, w.workflows, w.versions, w.running,
       w.concurrency, w.heartbeat_seconds, w.started_at, w.last_seen_at"""

LIVE_WORKER = f"""
SELECT {_WORKER_COLUMNS},
       extract(epoch FROM now() - w.last_seen_at)::double precision AS seen_seconds_ago
  FROM laneway.workers AS w
 WHERE w.owner_id = $1
   AND {LIVE}
"""

LIVE_WORKERS = f"""
SELECT {_WORKER_COLUMNS}
  FROM laneway.workers AS w
 WHERE {LIVE}
 ORDER BY w.role, w.host, w.started_at, w.owner_id
"""
