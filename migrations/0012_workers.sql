-- laneway.workers: the live registry of processes that run an engine (issue #18, point 4).
--
-- One row per engine, keyed by its owner id (the same id its leases carry). The engine writes
-- its row when its loop starts and again at every lease heartbeat (one statement, a few
-- seconds apart: heartbeat_seconds), and deletes it when it stops cleanly. A process that
-- stops heartbeating is not live once last_seen_at is older than three of its own heartbeats;
-- every heartbeat deletes such rows of other processes, so the table stays as small as the
-- fleet. The times are the database's clock, like every lease.

CREATE TABLE laneway.workers (
    owner_id text PRIMARY KEY,
    role text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    workflows text[] NOT NULL DEFAULT '{}',
    running integer NOT NULL DEFAULT 0,
    concurrency integer NOT NULL,
    heartbeat_seconds double precision NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
