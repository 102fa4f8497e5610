-- An instance has an owner exactly while it is running.
--
-- Every transition already kept this: a claim sets owner_id with status 'running', and each
-- way out of 'running' (completion, failure, retry, pause, cancel, release, lease recovery)
-- clears it. The constraint makes it a rule of the table, so that a runner's write fenced by
-- (owner_id, lease_epoch) alone can only ever land on a running instance, and those fences
-- need no status test (0010 says why they must not have one).
--
-- NOT VALID then VALIDATE: checking the existing rows does not block writes meanwhile.

ALTER TABLE laneway.instances
    ADD CONSTRAINT instances_owner_while_running
    CHECK ((owner_id IS NOT NULL) = (status = 'running')) NOT VALID;

ALTER TABLE laneway.instances VALIDATE CONSTRAINT instances_owner_while_running;
