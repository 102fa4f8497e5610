-- An idempotency key bound to an instance that holds another key as its own, or none.
--
-- An enqueue whose idempotency key was free but whose singleton key was held returned the
-- holder and bound the key to nothing: once the holder ended, the same request tried again
-- created a new instance under that key, and one key answered with two instances (an outside
-- audit). The key is now bound to the holder here: instances.idempotency_key holds one key per
-- instance, the instance's own, and the holder usually has one already.
--
-- The keys here and the instances' own keys are one namespace, with no index over both: an
-- instance takes its own key only if laneway.idempotency_key_free() finds no binding, and
-- laneway.bind_idempotency_key() binds a key only if no instance holds it. Both take the key's
-- advisory lock (held to commit) before they read, each read with a snapshot of its own (a
-- volatile function's statements each take one), so whichever comes second sees what the
-- first committed. A binding goes with its instance (retention deletes it by the cascade).
--
-- A key's lock is its bucket's, one of 64 (laneway.idempotency_key_bucket), not the key's
-- own: each advisory lock is an entry in the server's shared lock table (6,400 by default:
-- max_locks_per_transaction times max_connections), held to commit, and a lock per key let a
-- few batches of 1,000 keys fill it, failing every other transaction on the server. A bucket
-- is held by one transaction at a time, so the keys take at most 64 entries server-wide, plus
-- one per waiting transaction; 64 is the default max_locks_per_transaction, one transaction's
-- nominal share. Keys of one bucket queue behind each other, the price of the bound. A batch
-- locks its keys' buckets once, first, in ascending order (laneway.lock_idempotency_keys), so
-- two batches never each hold a bucket the other waits for.

CREATE TABLE laneway.idempotency_aliases (
    key          text PRIMARY KEY,
    instance_id  uuid NOT NULL REFERENCES laneway.instances (instance_id) ON DELETE CASCADE
);

-- The cascade's lookup when retention deletes instances.
CREATE INDEX idempotency_aliases_instance_id ON laneway.idempotency_aliases (instance_id);

CREATE FUNCTION laneway.idempotency_key_bucket(
    p_key text
) RETURNS integer
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT hashtext(p_key) & 63
$$;

CREATE FUNCTION laneway.lock_idempotency_keys(
    p_keys text[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    bucket integer;
    locked integer := 0;
BEGIN
    FOR bucket IN
        SELECT DISTINCT laneway.idempotency_key_bucket(k.key)
          FROM unnest(p_keys) AS k (key)
         WHERE k.key IS NOT NULL
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(7462, bucket);
        locked := locked + 1;
    END LOOP;
    RETURN locked;
END;
$$;

CREATE FUNCTION laneway.idempotency_key_free(
    p_key text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7462, laneway.idempotency_key_bucket(p_key));
    RETURN NOT EXISTS (SELECT 1 FROM laneway.idempotency_aliases AS a WHERE a.key = p_key);
END;
$$;

CREATE FUNCTION laneway.bind_idempotency_key(
    p_key text,
    p_instance_id uuid
) RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    bound uuid;
BEGIN
    PERFORM pg_advisory_xact_lock(7462, laneway.idempotency_key_bucket(p_key));
    SELECT i.instance_id INTO bound FROM laneway.instances AS i WHERE i.idempotency_key = p_key;
    IF NOT FOUND THEN
        SELECT a.instance_id INTO bound FROM laneway.idempotency_aliases AS a WHERE a.key = p_key;
    END IF;
    IF FOUND THEN
        RETURN bound;
    END IF;
    INSERT INTO laneway.idempotency_aliases (key, instance_id)
    SELECT p_key, i.instance_id
      FROM laneway.instances AS i
     WHERE i.instance_id = p_instance_id
       FOR KEY SHARE
    RETURNING instance_id INTO bound;
    RETURN bound;
END;
$$;
