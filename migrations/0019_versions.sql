-- Workflow versions side by side (issue #21, point 1): every instance records the version of
-- its workflow it started with, and a worker claims only the (name, version) pairs it has
-- registered, so runs in flight finish on the code they started with while new ones start on
-- the new code. A workflow that declares no version is version '1', and so is every instance
-- from before this migration: the column is never NULL.

ALTER TABLE laneway.instances
    ADD COLUMN version text NOT NULL DEFAULT '1';

-- What each live process runs, as 'name@version' (a workflow name has no '@':
-- laneway/engine/names.py), beside the names it has always listed.
ALTER TABLE laneway.workers
    ADD COLUMN versions text[] NOT NULL DEFAULT '{}';
