-- Laneway's first schema: queues, instances, events, schedules.
-- Everything lives in the `laneway` schema; times come from the database clock.

CREATE SCHEMA IF NOT EXISTS laneway;

CREATE TABLE laneway.queues (
    name              text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    concurrency       integer NOT NULL DEFAULT 100 CHECK (concurrency >= 1),
    rate_per_minute   double precision CHECK (rate_per_minute > 0),
    paused            boolean NOT NULL DEFAULT false,
    -- token bucket: `tokens` as of `tokens_at`; refilled lazily by claims at rate_per_minute/60 per second
    tokens            double precision NOT NULL DEFAULT 0,
    tokens_at         timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE laneway.instances (
    instance_id       uuid PRIMARY KEY,
    seq               bigint GENERATED ALWAYS AS IDENTITY,
    name              text NOT NULL,
    queue             text NOT NULL REFERENCES laneway.queues (name),
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled')),
    priority          integer NOT NULL DEFAULT 0,
    attempts          integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    run_after         timestamptz NOT NULL DEFAULT now(),
    params            jsonb,
    state             jsonb NOT NULL DEFAULT '{}'::jsonb,
    next_action       text,
    next_params       jsonb,
    result            jsonb,
    last_error        text,
    idempotency_key   text,
    singleton_key     text,
    owner_id          text,
    lease_expires_at  timestamptz,
    parent_id         uuid,
    stage             text,
    checkpoint        text,
    progress          double precision,
    message           text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

-- A second enqueue with the same key returns the first instance.
CREATE UNIQUE INDEX instances_idempotency_key
    ON laneway.instances (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- At most one non-terminal instance per (workflow, singleton key).
CREATE UNIQUE INDEX instances_singleton_key
    ON laneway.instances (name, singleton_key)
    WHERE singleton_key IS NOT NULL AND status IN ('pending', 'running', 'paused');

-- Claims read only claimable rows, in claim order; finished rows never enter this index.
CREATE INDEX instances_claimable
    ON laneway.instances (queue, priority DESC, run_after, seq)
    WHERE status = 'pending';

-- Running rows: counted against queue caps, scanned for expired leases.
CREATE INDEX instances_running
    ON laneway.instances (queue, lease_expires_at)
    WHERE status = 'running';

-- Listing newest first, optionally by workflow.
CREATE INDEX instances_created ON laneway.instances (created_at DESC, seq DESC);
CREATE INDEX instances_name_created ON laneway.instances (name, created_at DESC);
CREATE INDEX instances_parent ON laneway.instances (parent_id) WHERE parent_id IS NOT NULL;

-- The event log. Appends take a transaction-level advisory lock first, so ids become
-- visible in id order and a reader resuming "after id X" never skips a late commit.
CREATE TABLE laneway.events (
    event_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id       uuid NOT NULL,
    name              text NOT NULL,
    type              text NOT NULL,
    status            text NOT NULL,
    at                timestamptz NOT NULL DEFAULT now(),
    attempt           integer,
    error             text,
    stage             text,
    checkpoint        text
);

CREATE INDEX events_instance ON laneway.events (instance_id, event_id);

CREATE TABLE laneway.schedules (
    name              text PRIMARY KEY,
    workflow_name     text NOT NULL,
    params            jsonb,
    every             text,
    cron              text,
    timezone          text NOT NULL DEFAULT 'UTC',
    enabled           boolean NOT NULL DEFAULT true,
    next_run_at       timestamptz NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK ((every IS NULL) <> (cron IS NULL))
);

CREATE INDEX schedules_due ON laneway.schedules (next_run_at) WHERE enabled;
