-- Checkpoints and lease renewals as HOT updates: instances_running without lease_expires_at.
--
-- 0003 gave laneway.instances room on its pages (fillfactor 80) so that the updates of a running
-- instance stay HOT, but instances_running had lease_expires_at in its key from 0001 on, and
-- every checkpoint and every heartbeat renewal moves the lease. An update that changes an
-- indexed column is never HOT: each one wrote a new entry into every index of the table (the
-- primary key, both page indexes and this one), for a row whose status did not change. That is
-- a multi-step workflow's every step, and every running instance's renewal every ten seconds.
--
-- What the index serves does not need the column: the claim counts running instances per queue
-- and per key (laneway.queue_room, laneway.key_room: the (queue, concurrency_key) prefix), and
-- the expired-lease probe and recovery (queries/leases.py) read the running rows, which the
-- queues' caps keep few, and test their lease on the row. With it gone, a checkpoint that
-- keeps its instance running, and a renewal, change no indexed column (status is written
-- unchanged, wake_at stays NULL), so they are HOT when the page has room (about 7 in 10 of a
-- no-op 3-step workflow's checkpoints: 14 % less WAL per instance), and long steps' heartbeats
-- no longer grow the indexes.
--
-- The new index is built before the old one goes, in this migration's transaction: writes to
-- laneway.instances wait for the build (one scan of the table).

CREATE INDEX instances_running_by_key
    ON laneway.instances (queue, concurrency_key)
    WHERE status = 'running';
DROP INDEX laneway.instances_running;
ALTER INDEX laneway.instances_running_by_key RENAME TO instances_running;
