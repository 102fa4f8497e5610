"""Template operations (their reads; the group commit records them) and entity locks.

See laneway/store/queries/__init__.py for how statements are written.
"""

# ---------------------------------------------------------------------------------------------
# template operations

# $1 instance id
LIST_OPERATIONS = """
SELECT operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at, fix_cycle
  FROM laneway.operations
 WHERE instance_id = $1
 ORDER BY finished_at, stage, position
"""

# $1 instance ids (uuid[])
LIST_OPERATIONS_OF = """
SELECT operation_id, instance_id, stage, position, type, status, attempts, error, data, metadata, started_at, finished_at, fix_cycle
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
