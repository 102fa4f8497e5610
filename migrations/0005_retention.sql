-- Finished instances in the order they finished, for the retention sweep (laneway.instances
-- only ever grows otherwise; RELIABILITY F11, K-01).
CREATE INDEX instances_finished
    ON laneway.instances (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
