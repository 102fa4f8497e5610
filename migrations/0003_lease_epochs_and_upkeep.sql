-- Lease epochs, recovery counting, lease timestamps, and upkeep settings for the hot tables.
--
-- lease_epoch grows on every claim; each runner write is fenced by (owner_id, lease_epoch), so
-- a write of an earlier claim never lands, even when the same process claimed the instance again.
-- recoveries counts leases that ran out (a worker lost mid-attempt); past the cap the instance
-- is dead-lettered (failed) instead of killing worker after worker.

ALTER TABLE laneway.instances
    ADD COLUMN lease_epoch       bigint NOT NULL DEFAULT 0,
    ADD COLUMN recoveries        integer NOT NULL DEFAULT 0,
    ADD COLUMN claimed_at        timestamptz,
    ADD COLUMN lease_renewed_at  timestamptz;

-- Instances are updated several times each (claim, checkpoints, completion): room on the page
-- keeps those updates HOT, and vacuum runs after 1% of the table changed, not 20%.
ALTER TABLE laneway.instances SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);
ALTER TABLE laneway.queues SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01);
ALTER TABLE laneway.events SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);
ALTER TABLE laneway.operations SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02
);
ALTER TABLE laneway.locks SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01);
