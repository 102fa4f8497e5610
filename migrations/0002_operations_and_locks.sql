-- Template operations (one row per operation outcome) and entity locks with fencing tokens.

CREATE TABLE laneway.operations (
    operation_id      uuid PRIMARY KEY,
    instance_id       uuid NOT NULL REFERENCES laneway.instances (instance_id) ON DELETE CASCADE,
    stage             text NOT NULL,
    position          integer NOT NULL,
    type              text NOT NULL,
    status            text NOT NULL CHECK (status IN ('completed', 'failed', 'skipped')),
    attempts          integer NOT NULL DEFAULT 0,
    error             text,
    data              jsonb,
    metadata          jsonb,
    started_at        timestamptz,
    finished_at       timestamptz,
    -- one row per operation slot of a stage; a re-run (fix cycle, retry) overwrites it
    UNIQUE (instance_id, stage, position)
);

CREATE SEQUENCE laneway.lock_tokens;

CREATE TABLE laneway.locks (
    entity_type       text NOT NULL,
    entity_id         text NOT NULL,
    owner_instance    uuid NOT NULL,
    fencing_token     bigint NOT NULL,
    acquired_at       timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    PRIMARY KEY (entity_type, entity_id)
);

CREATE INDEX locks_owner ON laneway.locks (owner_instance);
