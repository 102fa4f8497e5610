-- Keyset pages of instances (issue #21, point 4): workflowInstancesConnection walks instances
-- newest first in (created_at, instance_id) descending order, each page starting right after
-- the previous page's last row, so a deep page reads the same number of index entries as the
-- first. (created_at alone ties within a transaction, a batch enqueue's rows all share it; the
-- id breaks the tie, and the ids are unique and never change, so the order is total.)
--
-- Every index costs each enqueue and each status change (a status change is never a HOT
-- update: status is in the claim indexes' predicates, so every index gets a new entry), so the
-- two indexes here replace the two that served the offset list, one for one:
--
-- instances_page (created_at DESC, instance_id DESC) replaces instances_created
--   (created_at DESC, seq DESC). It serves a page with no name filter, and the offset list
--   too, which now orders by (created_at DESC, instance_id DESC) as well. The other filters
--   (queue, status, parent, key, version) are checked on the rows the walk meets: the cost of
--   a page is then the rows skipped to find `first` matches, which depends on how rare the
--   match is, never on how deep the page is.
-- instances_name_page (name, created_at DESC, instance_id DESC) replaces
--   instances_name_created (name, created_at DESC): a page of one workflow, the dashboard's
--   usual filter, whose rows may be rare among all; with the id in the key the cursor's
--   tie-break is part of the index condition, not a filter.
--
-- Not added: an index by queue (a workflow's instances are mostly in its own queue, so the
-- name index covers most of what a queue filter asks), and none by status (the rows change
-- status several times in their life, and a status filter's matches are usually common:
-- active or completed instances; a rare one, such as failed, costs a longer walk per page,
-- still the same at any depth).

DROP INDEX laneway.instances_created;
DROP INDEX laneway.instances_name_created;

CREATE INDEX instances_page ON laneway.instances (created_at DESC, instance_id DESC);
CREATE INDEX instances_name_page ON laneway.instances (name, created_at DESC, instance_id DESC);
