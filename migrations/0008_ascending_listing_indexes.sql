-- The listing indexes in ascending order; listings scan them backwards (newest first).
--
-- created_at only grows, so as DESC indexes every new entry went to the leftmost leaf of the
-- index (or of the workflow's range) and each full page split 50/50: half of every page stayed
-- empty for good, about twice the pages to write, cache and vacuum, on every enqueue and on
-- both updates of an instance's run. In ascending order new entries land at the end of the
-- range, where B-tree splits leave full pages behind (its rightmost and "increasing trailing
-- column" split heuristics). A B-tree scans backwards as cheaply as forwards, so
-- `ORDER BY created_at DESC, seq DESC` uses these as it used the old ones.
DROP INDEX laneway.instances_created;
DROP INDEX laneway.instances_name_created;
CREATE INDEX instances_created ON laneway.instances (created_at, seq);
CREATE INDEX instances_name_created ON laneway.instances (name, created_at);
