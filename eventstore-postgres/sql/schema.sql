-- The schema of one eventstore-postgres storage.
--
-- Every object name starts with the storage's prefix, written here as __prefix__ and replaced
-- before the script runs (e.g. tenant1_events). The script is idempotent: it creates what is
-- missing and replaces the lease functions with this version. Run it in one transaction.

-- The event log, ordered by (tx, position): tx is the writing transaction's id, so a reader
-- that only reads below the oldest running transaction never skips an event that commits
-- later with a lower position.
CREATE TABLE IF NOT EXISTS __prefix__events (
    position        bigserial   NOT NULL,
    tx              xid8        NOT NULL DEFAULT pg_current_xact_id(),
    id              uuid        NOT NULL,
    stream_context  text        NOT NULL,
    stream_purpose  text        NOT NULL,
    event_type      text        NOT NULL,
    payload         jsonb       NOT NULL,
    tags            text[]      NOT NULL,
    idempotency_key text,
    stored_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT __prefix__events_pkey PRIMARY KEY (position),
    CONSTRAINT __prefix__events_id_key UNIQUE (id)
);
CREATE INDEX IF NOT EXISTS __prefix__events_order_idx
    ON __prefix__events (tx, position);
CREATE INDEX IF NOT EXISTS __prefix__events_stream_idx
    ON __prefix__events (stream_context, stream_purpose, tx, position);
CREATE INDEX IF NOT EXISTS __prefix__events_type_idx
    ON __prefix__events (event_type, tx, position);
CREATE INDEX IF NOT EXISTS __prefix__events_tags_idx
    ON __prefix__events USING gin (tags);
CREATE UNIQUE INDEX IF NOT EXISTS __prefix__events_idempotency_idx
    ON __prefix__events (stream_context, stream_purpose, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Where each reader got to. The foreign key keeps a bookmark from naming an unknown event.
CREATE TABLE IF NOT EXISTS __prefix__bookmarks (
    reader     text        NOT NULL,
    event_id   uuid        NOT NULL,
    tags       text[]      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT __prefix__bookmarks_pkey PRIMARY KEY (reader),
    CONSTRAINT __prefix__bookmarks_event_id_fkey FOREIGN KEY (event_id)
        REFERENCES __prefix__events (id)
);

-- One row per lease name, never deleted: a release backdates heartbeat_at, so fencing
-- tokens never reset or repeat. Every timestamp is PostgreSQL's now().
CREATE TABLE IF NOT EXISTS __prefix__leases (
    lease_name    text        NOT NULL,
    owner         text        NOT NULL,
    priority      bigint      NOT NULL,
    fencing_token bigint      NOT NULL,
    acquired_at   timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    ttl           interval    NOT NULL,
    CONSTRAINT __prefix__leases_pkey PRIMARY KEY (lease_name),
    CONSTRAINT __prefix__leases_fencing_token_check CHECK (fencing_token > 0)
) WITH (fillfactor = 50); -- room on each page, so that renewals are HOT updates

-- Everyone else who asked for a lease, live while now() <= heartbeat_at + ttl. The holder is
-- a contender through its lease row (same owner, priority, heartbeat and ttl), so a renewal
-- writes one row; a holder's registration would lapse or be withdrawn exactly when its lease
-- does, so it needs no row of its own. Every registration and every change of holder
-- forgets the lease's lapsed contenders, so a lease keeps no more rows than it had live
-- contenders at its last registration.
CREATE TABLE IF NOT EXISTS __prefix__lease_contenders (
    lease_name   text        NOT NULL,
    owner        text        NOT NULL,
    priority     bigint      NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    ttl          interval    NOT NULL,
    CONSTRAINT __prefix__lease_contenders_pkey PRIMARY KEY (lease_name, owner)
) WITH (fillfactor = 50);

-- Acquire, renew or contend for a batch of leases in one call, answering each request as if
-- it ran alone, in order. Each lease is serialized by a transaction-scoped advisory lock in a
-- key space of its own, so lease traffic never waits on an append or a read.
CREATE OR REPLACE FUNCTION __prefix__request_leases(
    p_names text[],
    p_owners text[],
    p_priorities bigint[],
    p_ttls interval[],
    p_lock_timeout text
)
RETURNS TABLE (lease_status text, lease_token bigint, lease_owner text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now constant timestamptz := now();
    v_lock_space constant integer := hashtext('__prefix__leases');
    v_key integer;
    v_lease __prefix__leases%ROWTYPE;
    v_step_down boolean;
    i integer;
BEGIN
    -- Every statement below must see what committed while the lock was awaited: under
    -- REPEATABLE READ or SERIALIZABLE it would keep the snapshot taken before the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '__prefix__request_leases needs READ COMMITTED isolation, not %',
                current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = 'set default_transaction_isolation to read committed for this pool';
    END IF;
    IF array_length(p_names, 1) = 1 THEN
        PERFORM pg_advisory_xact_lock(v_lock_space, hashtext(p_names[1]))
           FROM (SELECT set_config('lock_timeout', p_lock_timeout, true)) AS setting;
    ELSE
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
        -- Every lock up front, in key order, so that two overlapping batches never deadlock.
        FOR v_key IN SELECT DISTINCT hashtext(n) FROM unnest(p_names) AS n ORDER BY 1 LOOP
            PERFORM pg_advisory_xact_lock(v_lock_space, v_key);
        END LOOP;
    END IF;

    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        -- The common case in one statement: the caller renews the live lease it holds.
        UPDATE __prefix__leases AS l
           SET priority = p_priorities[i], heartbeat_at = v_now, ttl = p_ttls[i]
         WHERE l.lease_name = p_names[i] AND l.owner = p_owners[i]
           AND l.heartbeat_at + l.ttl >= v_now
        RETURNING l.fencing_token, l.owner, EXISTS (
            SELECT 1 FROM __prefix__lease_contenders AS c
             WHERE c.lease_name = p_names[i]
               AND c.owner <> p_owners[i]
               AND c.priority > p_priorities[i]
               AND c.heartbeat_at + c.ttl >= v_now
        )
        INTO lease_token, lease_owner, v_step_down;

        IF NOT FOUND THEN
            SELECT * INTO v_lease FROM __prefix__leases AS l WHERE l.lease_name = p_names[i];
            IF NOT FOUND THEN
                INSERT INTO __prefix__leases AS l
                    (lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at, ttl)
                VALUES (p_names[i], p_owners[i], p_priorities[i], 1, v_now, v_now, p_ttls[i])
                RETURNING * INTO STRICT v_lease;
            ELSIF v_lease.heartbeat_at + v_lease.ttl < v_now THEN
                -- Nobody holds it live: the caller takes it under the next token, even when
                -- it was the caller's own lease, so that two tenures never share a token.
                UPDATE __prefix__leases AS l
                   SET owner = p_owners[i], priority = p_priorities[i],
                       fencing_token = l.fencing_token + 1,
                       acquired_at = v_now, heartbeat_at = v_now, ttl = p_ttls[i]
                 WHERE l.lease_name = p_names[i]
                RETURNING * INTO STRICT v_lease;
                -- The lease row now stands for the caller as a contender. A change of holder
                -- is rare: the moment to forget contenders long gone too.
                DELETE FROM __prefix__lease_contenders AS c
                 WHERE c.lease_name = p_names[i]
                   AND (c.owner = p_owners[i] OR c.heartbeat_at + c.ttl < v_now);
            ELSE
                -- Someone else holds it live: register or refresh the caller as a contender,
                -- and forget this lease's lapsed contenders, so that instances which came
                -- and went under identities of their own leave no rows behind while one
                -- leader holds the lease for months.
                WITH lapsed AS (
                    DELETE FROM __prefix__lease_contenders AS c
                     WHERE c.lease_name = p_names[i] AND c.owner <> p_owners[i]
                       AND c.heartbeat_at + c.ttl < v_now
                )
                INSERT INTO __prefix__lease_contenders AS c
                    (lease_name, owner, priority, heartbeat_at, ttl)
                VALUES (p_names[i], p_owners[i], p_priorities[i], v_now, p_ttls[i])
                ON CONFLICT (lease_name, owner) DO UPDATE
                    SET priority = excluded.priority, heartbeat_at = excluded.heartbeat_at,
                        ttl = excluded.ttl;
                lease_status := 'standby';
                lease_token := v_lease.fencing_token;
                lease_owner := v_lease.owner;
                RETURN NEXT;
                CONTINUE;
            END IF;
            lease_token := v_lease.fencing_token;
            lease_owner := v_lease.owner;
            SELECT EXISTS (
                SELECT 1 FROM __prefix__lease_contenders AS c
                 WHERE c.lease_name = p_names[i]
                   AND c.owner <> p_owners[i]
                   AND c.priority > p_priorities[i]
                   AND c.heartbeat_at + c.ttl >= v_now
            ) INTO v_step_down;
        END IF;
        lease_status := CASE WHEN v_step_down THEN 'step_down_requested' ELSE 'leader' END;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Release a lease the owner holds live (backdating its heartbeat so that anyone may take it
-- at once, keeping the row and its token) and withdraw the owner as a contender either way.
-- Returns whether the owner held the lease.
CREATE OR REPLACE FUNCTION __prefix__release_lease(
    p_name text,
    p_owner text,
    p_lock_timeout text
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now constant timestamptz := now();
    v_released boolean;
BEGIN
    -- Every statement below must see what committed while the lock was awaited: under
    -- REPEATABLE READ or SERIALIZABLE it would keep the snapshot taken before the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '__prefix__release_lease needs READ COMMITTED isolation, not %',
                current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = 'set default_transaction_isolation to read committed for this pool';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('__prefix__leases'), hashtext(p_name))
       FROM (SELECT set_config('lock_timeout', p_lock_timeout, true)) AS setting;
    DELETE FROM __prefix__lease_contenders AS c
     WHERE c.lease_name = p_name AND c.owner = p_owner;
    UPDATE __prefix__leases AS l
       SET heartbeat_at = v_now - l.ttl - interval '1 millisecond'
     WHERE l.lease_name = p_name AND l.owner = p_owner AND l.heartbeat_at + l.ttl >= v_now
    RETURNING true INTO v_released;
    RETURN coalesce(v_released, false);
END
$$;
