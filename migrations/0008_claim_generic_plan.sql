-- laneway.claim() plans its two statements once per connection, not once per call.
--
-- PL/pgSQL caches a plan per statement, but like any prepared statement it re-plans with the
-- call's values (a "custom plan") while it judges that cheaper than the generic plan. For the
-- claim's statements it always does: the generic plan's unknown LIMITs and arrays look no
-- cheaper than a custom one, so every claim paid for planning both statements again. Planning
-- them was most of a claim's time (1.2-1.4 ms of 1.3-1.7 ms for one due instance on a 2-core
-- box; 0.3 ms with the generic plan), so an idle worker took that long to start a newly
-- enqueued instance, and a busy one spent it on every cohort it claimed. The generic plans
-- are the same index scans as the custom ones (instances_claimable for the probe and the pick,
-- instances_running for the count, the primary key for the update), from an empty table to
-- 1,000,000 finished and 20,000 pending instances.
ALTER FUNCTION laneway.claim(text, text[], integer, double precision, bigint)
    SET plan_cache_mode = force_generic_plan;
