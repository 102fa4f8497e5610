-- An instance has an owner exactly while it is running.
--
-- Every transition already kept this: a claim sets owner_id with status 'running', and each
-- way out of 'running' (completion, failure, retry, pause, cancel, release, lease recovery)
-- clears it. The constraint makes it a rule of the table, so that a runner's write fenced by
-- (owner_id, lease_epoch) alone can only ever land on a running instance, and those fences
-- need no status test (0010 says why they must not have one).
--
-- Rows that broke the rule before it was one (none are known) are mended first, so the
-- migration cannot fail on them: an owner left on an instance that is not running is cleared
-- (every write of that owner was fenced on the status until now, so none could land), and a
-- running instance without an owner gets one that no process has, so the lease reaper
-- recovers it as it recovers any lost worker's instance.
--
-- NOT VALID then VALIDATE: checking the existing rows does not block writes meanwhile.

UPDATE laneway.instances
   SET owner_id = NULL
 WHERE owner_id IS NOT NULL
   AND status <> 'running';

UPDATE laneway.instances
   SET owner_id = 'lost (migration 0009)',
       lease_expires_at = COALESCE(lease_expires_at, now())
 WHERE owner_id IS NULL
   AND status = 'running';

ALTER TABLE laneway.instances
    ADD CONSTRAINT instances_owner_while_running
    CHECK ((owner_id IS NOT NULL) = (status = 'running')) NOT VALID;

ALTER TABLE laneway.instances VALIDATE CONSTRAINT instances_owner_while_running;
