"""The event log: the append (laneway.append_events, with its doorbell) and the reads.

See laneway/store/queries/__init__.py for how statements are written.
"""

# ---------------------------------------------------------------------------------------------
# events

# The columns every event read returns (rows.event_from_row reads them).
EVENT_COLUMNS = (
    "event_id, instance_id, name, type, status, at, attempt, error, stage, checkpoint, signal"
)

# $1 advisory lock key, $2 instance ids, $3 workflow names, $4 types, $5 statuses, $6 attempts,
# $7 errors, $8 stages, $9 checkpoints, $10 id of an instance cancelled here (NULL: none),
# $11 signal names
# Every event is appended by laneway.append_events (laneway/store/sql/functions.sql), here and
# inside the enqueue, claim and group-commit statements: under the append lock, so event ids
# become visible in id order, stamped with the moment of the append, then the doorbell (ids
# only). Returns the last id.
APPEND_EVENTS = """
SELECT laneway.append_events($1, $2::uuid[], $3::text[], $4::text[], $5::text[], $6::integer[],
                             $7::text[], $8::text[], $9::text[], $10::text, $11::text[])
"""

# $1 after event id, $2 limit
EVENTS_AFTER = f"""
SELECT {EVENT_COLUMNS}
  FROM laneway.events
 WHERE event_id > $1
 ORDER BY event_id
 LIMIT $2
"""

# The reads of one instance's events give nothing once the instance is gone: retention deletes
# the instance before its events, which wait for their day's partition to be dropped
# (queries.partitions). The EXISTS is uncorrelated, so it runs once, on the primary key,
# before the scan of the events_instance index.

# $1 instance id, $2 after event id, $3 limit
INSTANCE_EVENTS_AFTER = f"""
SELECT {EVENT_COLUMNS}
  FROM laneway.events
 WHERE instance_id = $1
   AND event_id > $2
   AND EXISTS (SELECT 1 FROM laneway.instances WHERE instance_id = $1)
 ORDER BY event_id
 LIMIT $3
"""

# $1 instance id, $2 limit: the newest events of one instance, oldest first
LATEST_INSTANCE_EVENTS = f"""
SELECT {EVENT_COLUMNS}
  FROM (SELECT {EVENT_COLUMNS}
          FROM laneway.events
         WHERE instance_id = $1
           AND EXISTS (SELECT 1 FROM laneway.instances WHERE instance_id = $1)
         ORDER BY event_id DESC
         LIMIT $2) AS newest
 ORDER BY event_id
"""

LATEST_EVENT_ID = """
SELECT COALESCE(max(event_id), 0)
  FROM laneway.events
"""

# The highest event id the database has drawn (committed or not; 0 before the first): no
# event has, or will ever have, an id above it and below the next one drawn.
LAST_DRAWN_EVENT_ID = """
SELECT COALESCE(pg_sequence_last_value(
           pg_get_serial_sequence('laneway.events', 'event_id')::regclass), 0)
"""
