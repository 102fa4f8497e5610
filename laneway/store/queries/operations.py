"""Template operations (recorded when they finish, fenced by the owner) and entity locks.

See laneway/store/queries/__init__.py for how statements are written.
"""

# ---------------------------------------------------------------------------------------------
# template operations

# $1 operation id, $2 instance id, $3 owner id, $4 stage, $5 position, $6 type, $7 status,
# $8 attempts, $9 error, $10 data (json text), $11 metadata (json text), $12 seconds it took,
# $13 lease epoch
# Written when the operation finishes, fenced by the owner: a crash mid-stage re-runs only the
# operations that have no completed row.
RECORD_OPERATION = """
INSERT INTO laneway.operations (operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at)
SELECT $1, i.instance_id, $4, $5, $6, $7, $8, $9, $10::text::jsonb, $11::text::jsonb,
       clock_timestamp() - $12::double precision * interval '1 second', clock_timestamp()
  FROM laneway.instances AS i
 WHERE i.instance_id = $2
   AND i.owner_id = $3
   AND i.lease_epoch = $13
   AND i.status = 'running'
ON CONFLICT (instance_id, stage, position) DO UPDATE
   SET type = EXCLUDED.type, status = EXCLUDED.status, attempts = EXCLUDED.attempts,
       error = EXCLUDED.error, data = EXCLUDED.data, metadata = EXCLUDED.metadata,
       started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at
RETURNING operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at
"""

# $1 instance id
LIST_OPERATIONS = """
SELECT operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at
  FROM laneway.operations
 WHERE instance_id = $1
 ORDER BY finished_at, stage, position
"""

# $1 instance ids (uuid[])
LIST_OPERATIONS_OF = """
SELECT operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at
  FROM laneway.operations
 WHERE instance_id = ANY($1::uuid[])
 ORDER BY instance_id, finished_at, stage, position
"""

# ---------------------------------------------------------------------------------------------
# entity locks

# $1 entity type, $2 entity id, $3 owner instance, $4 ttl seconds
# Free, expired, or already ours: take it with a new, larger fencing token.
ACQUIRE_LOCK = """
INSERT INTO laneway.locks (entity_type, entity_id, owner_instance, fencing_token, expires_at)
VALUES ($1, $2, $3, nextval('laneway.lock_tokens'),
        clock_timestamp() + $4::double precision * interval '1 second')
ON CONFLICT (entity_type, entity_id) DO UPDATE
   SET owner_instance = EXCLUDED.owner_instance, fencing_token = EXCLUDED.fencing_token,
       acquired_at = now(), expires_at = EXCLUDED.expires_at
 WHERE laneway.locks.expires_at <= clock_timestamp()
    OR laneway.locks.owner_instance = EXCLUDED.owner_instance
RETURNING entity_type, entity_id, owner_instance, fencing_token, expires_at
"""

# $1 entity type, $2 entity id, $3 fencing token
RELEASE_LOCK = """
DELETE FROM laneway.locks
 WHERE entity_type = $1
   AND entity_id = $2
   AND fencing_token = $3
RETURNING fencing_token
"""

# $1 entity type, $2 entity id
GET_LOCK = """
SELECT entity_type, entity_id, owner_instance, fencing_token, expires_at
  FROM laneway.locks
 WHERE entity_type = $1
   AND entity_id = $2
   AND expires_at > clock_timestamp()
"""
