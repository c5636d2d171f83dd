-- The schema of one eventstore-postgres storage.
--
-- Every object name starts with the storage's prefix, written here as __prefix__ and replaced
-- before the script runs (e.g. tenant1_events). The script is idempotent: it creates what is
-- missing and replaces the lease functions with this version. Run it in one transaction.

-- The schema version this script creates; the last statement records it on the events
-- table. Over the tables of a newer version it refuses to run: it would put older lease
-- functions back (in a rolling upgrade, say, where an instance of the version before
-- restarts beside upgraded ones).
DO $version$
DECLARE
    v_recorded integer := substring(
        pg_catalog.obj_description(pg_catalog.to_regclass('__prefix__events'), 'pg_class')
        FROM 'eventstore-postgres schema_version=([0-9]{1,9})')::integer;
BEGIN
    IF v_recorded > 2 THEN
        RAISE EXCEPTION 'the tables of prefix __prefix__ record schema version %, newer than this script''s version 2: apply the DDL of that version instead', v_recorded
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$version$;

-- The event log, ordered by (tx, position): tx is the writing transaction's id, so a reader
-- that only reads below the oldest running transaction never skips an event that commits
-- later with a lower position.
--
-- Payloads are json, not jsonb: nothing queries into them, and a read sends json's stored
-- text as it is, where jsonb would be turned back into text for every event of every read
-- (a quarter of a small event's cost on the server). Tables created with jsonb keep working.
--
-- Streams, types, tags and idempotency keys are identifiers, compared byte by byte (collation
-- "C"), as lease names are: every append adds them to four indexes, and under the database's
-- collation each comparison on the way calls into the collation library (batches of 100 took
-- 6% longer on C.UTF-8, 11% on ICU's en-US). Reads only ask whether they are equal (a
-- context's range starts and ends at the context), which a database's default collation
-- answers as "C" does, so tables created before keep theirs and their indexes.
CREATE TABLE IF NOT EXISTS __prefix__events (
    position        bigserial   NOT NULL,
    tx              xid8        NOT NULL DEFAULT pg_current_xact_id(),
    id              uuid        NOT NULL,
    stream_context  text COLLATE "C" NOT NULL,
    stream_purpose  text COLLATE "C" NOT NULL,
    event_type      text COLLATE "C" NOT NULL,
    payload         json        NOT NULL,
    tags            text[] COLLATE "C" NOT NULL,
    idempotency_key text COLLATE "C",
    stored_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT __prefix__events_pkey PRIMARY KEY (position),
    CONSTRAINT __prefix__events_id_key UNIQUE (id)
);
CREATE INDEX IF NOT EXISTS __prefix__events_order_idx
    ON __prefix__events (tx, position);
-- One index walks a stream and a context with any purpose in read order: the purpose comes
-- after the order, checked on the index entry, so a context's few purposes share one index
-- and neither read sorts. It replaces the earlier (context, purpose, tx, position) index,
-- which left reads of a context with any purpose to sort.
DROP INDEX IF EXISTS __prefix__events_stream_idx;
CREATE INDEX IF NOT EXISTS __prefix__events_context_idx
    ON __prefix__events (stream_context, tx, position, stream_purpose);
CREATE INDEX IF NOT EXISTS __prefix__events_type_idx
    ON __prefix__events (event_type, tx, position);
-- Version 1 found tags through a GIN index on tags (__prefix__events_tags_idx), which knows
-- which events carry a tag but not in which order: every page of a tag read gathered and
-- sorted all of the tag's events in the stream. The tag index below replaces it. A store of
-- version 1 keeps it, since instances of version 1 still look for it during a rolling
-- upgrade; drop it once none runs any more, and appends no longer pay for it.
CREATE UNIQUE INDEX IF NOT EXISTS __prefix__events_idempotency_idx
    ON __prefix__events (stream_context, stream_purpose, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Each tag of each event, in the order reads want: a tag's events in a context (and, with the
-- purpose checked on the index entry, in a stream) by the primary key, in every stream by
-- the second index, each walked in (tx, position) order and stopped after a page. Rows are
-- written by the trigger below, for every insert into the events table, whoever makes it.
-- Stores of version 1 are filled from their events when the table is created.
CREATE TABLE IF NOT EXISTS __prefix__event_tags (
    tag            text COLLATE "C" NOT NULL,
    stream_context text COLLATE "C" NOT NULL,
    tx             xid8   NOT NULL,
    position       bigint NOT NULL,
    stream_purpose text COLLATE "C" NOT NULL,
    CONSTRAINT __prefix__event_tags_pkey
        PRIMARY KEY (tag, stream_context, tx, position, stream_purpose)
);
CREATE INDEX IF NOT EXISTS __prefix__event_tags_order_idx
    ON __prefix__event_tags (tag, tx, position);

-- One statement per insert, however many events it adds: the transition table holds them.
-- It runs with its owner's privileges, so that a role that may insert events need not be
-- granted the tag index: an application of version 1 keeps appending to a store upgraded
-- under it with the grants it had. Its search_path is pinned (below), as every function's.
CREATE OR REPLACE FUNCTION __prefix__index_event_tags()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
BEGIN
    INSERT INTO __prefix__event_tags (tag, stream_context, tx, position, stream_purpose)
    SELECT tag, added.stream_context, added.tx, added.position, added.stream_purpose
      FROM added_events AS added CROSS JOIN LATERAL pg_catalog.unnest(added.tags) AS tag;
    RETURN NULL;
END
$$;

DO $tag_index$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = '__prefix__events'::regclass
                      AND tgname = '__prefix__events_tags_trigger') THEN
        -- The events stored without the trigger: a store of version 1 upgrading, or one
        -- whose trigger was dropped (those already indexed are kept). The lock keeps appends
        -- out until the trigger is in place, so that none is missed.
        LOCK TABLE __prefix__events IN SHARE ROW EXCLUSIVE MODE;
        INSERT INTO __prefix__event_tags (tag, stream_context, tx, position, stream_purpose)
        SELECT tag, e.stream_context, e.tx, e.position, e.stream_purpose
          FROM __prefix__events AS e CROSS JOIN LATERAL pg_catalog.unnest(e.tags) AS tag
            ON CONFLICT DO NOTHING;
        -- The function named with its schema: a schema of temporary objects, where the schema
        -- check reads a scratch copy of this script, is never searched for functions.
        EXECUTE pg_catalog.format(
            'CREATE TRIGGER __prefix__events_tags_trigger AFTER INSERT ON __prefix__events '
            'REFERENCING NEW TABLE AS added_events FOR EACH STATEMENT '
            'EXECUTE FUNCTION %I.__prefix__index_event_tags()', pg_catalog.current_schema());
    END IF;
END
$tag_index$;

-- Runs the statement of one page of a read, which the storage writes with its values as the
-- elements of p_arguments ($1 in the statement): planned for those values, with sorts and
-- bitmap scans ruled out. Every read shape has an index that yields its events in order, and
-- a page stops after what it returns; but where a table has no statistics yet, or stale ones
-- (a store read right after its writes), the planner guesses that a context, a type or a
-- tag holds a few hundred events, gathers all of them in a bitmap and sorts them: every
-- page of a read then costs the whole context or tag. Nor does a page run in parallel:
-- starting a worker cost a page of 1,000 events as much as reading it (a tag read on a table
-- of five million events never analyzed took twice as long as on one of half a million).
-- It runs with the caller's privileges.
CREATE OR REPLACE FUNCTION __prefix__read_page(p_statement text, p_arguments text[])
RETURNS TABLE ("position" bigint, tx xid8, id uuid, stream_context text, stream_purpose text,
               event_type text, payload json, tags text[], idempotency_key text,
               stored_at timestamptz)
LANGUAGE plpgsql
SET enable_sort = off
SET enable_bitmapscan = off
SET max_parallel_workers_per_gather = 0
AS $$
BEGIN
    RETURN QUERY EXECUTE p_statement USING p_arguments;
END
$$;

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
-- tokens never reset or repeat. Every timestamp is PostgreSQL's now(). Lease names and
-- owners are identifiers, compared byte by byte (collation "C") whatever the database's
-- collation: under a linguistic one (ICU, en_US) every key comparison of every lookup would
-- call into the collation library.
CREATE TABLE IF NOT EXISTS __prefix__leases (
    lease_name    text COLLATE "C" NOT NULL,
    owner         text COLLATE "C" NOT NULL,
    priority      bigint      NOT NULL,
    fencing_token bigint      NOT NULL,
    acquired_at   timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    ttl           interval    NOT NULL,
    released      boolean     NOT NULL DEFAULT false,
    contender_priority_ceiling bigint,
    CONSTRAINT __prefix__leases_pkey PRIMARY KEY (lease_name),
    CONSTRAINT __prefix__leases_fencing_token_check CHECK (fencing_token > 0)
) WITH (fillfactor = 50); -- room on each page, so that renewals are HOT updates
-- Whether the last holder released the lease rather than letting it expire, so that the next
-- acquisition can say whether it took over an expired tenure. Added apart as well, for tables
-- created before the column existed.
ALTER TABLE __prefix__leases ADD COLUMN IF NOT EXISTS released boolean NOT NULL DEFAULT false;
-- No live contender but the holder has a priority above contender_priority_ceiling, so that
-- a renewal at that priority or above answers without looking for a contender that outranks
-- the holder (with equal priorities: every renewal). A registration above it raises it; a
-- change of holder sets it from the contenders left; it only ever errs high. NULL, as in rows
-- written before the column existed, means unknown: renewals look.
ALTER TABLE __prefix__leases ADD COLUMN IF NOT EXISTS contender_priority_ceiling bigint;

-- Everyone else who asked for a lease, live while now() <= heartbeat_at + ttl. The holder is
-- a contender through its lease row (same owner, priority, heartbeat and ttl), so a renewal
-- writes one row; a holder's registration would lapse or be withdrawn exactly when its lease
-- does, so it needs no row of its own. Every registration and every change of holder
-- forgets the lease's lapsed contenders, so a lease keeps no more rows than it had live
-- contenders at its last registration.
CREATE TABLE IF NOT EXISTS __prefix__lease_contenders (
    lease_name   text COLLATE "C" NOT NULL,
    owner        text COLLATE "C" NOT NULL,
    priority     bigint      NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    ttl          interval    NOT NULL,
    CONSTRAINT __prefix__lease_contenders_pkey PRIMARY KEY (lease_name, owner)
) WITH (fillfactor = 50);

-- Lease tables created before names and owners compared byte by byte are converted once:
-- the table stays as it is, its key indexes are rebuilt (under an exclusive lock, quickly
-- for tables of lease size). Where a view of the caller's depends on a column, the
-- conversion is left to the operator and the tables keep working as they are.
DO $collate$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['__prefix__leases', '__prefix__lease_contenders'] LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                    WHERE a.attrelid = pg_catalog.to_regclass(v_table)
                      AND a.attname IN ('lease_name', 'owner')
                      AND a.attcollation <> 'pg_catalog."C"'::regcollation) THEN
            BEGIN
                EXECUTE pg_catalog.format('ALTER TABLE %I ALTER COLUMN lease_name TYPE text '
                                          'COLLATE "C", ALTER COLUMN owner TYPE text '
                                          'COLLATE "C"', v_table);
            EXCEPTION WHEN feature_not_supported OR dependent_objects_still_exist THEN
                RAISE NOTICE 'left % comparing names by the database collation: %',
                    v_table, SQLERRM;
            END;
        END IF;
    END LOOP;
END
$collate$;

-- Lease changes are notified on the channel __prefix__lease_changes, one JSON object per
-- change: {"lease", "kind", ...} with kind released (owner, token, successor), acquired
-- (owner, token, after_expiry), step_down_requested (holder, token, contender),
-- contender_joined (owner, priority) or contender_left (owner); each carries its place among
-- the changes its transaction notified (n), as identical ones would be delivered once. pg_notify delivers them when
-- the transaction commits, never when it rolls back. A renewal, and a standby's refresh of
-- its registration, notify nothing. A change too long for a notification (names full of
-- characters JSON escapes) is sent as {"kind": "missed"}: listeners learn only that something
-- changed.

-- The base of the fencing tokens this server grants: the timeline it writes WAL on, less one,
-- in the bits above the 40 of a lease's own count. A promotion moves a replica to a new
-- timeline, so every token it grants is larger than any the old primary could have granted,
-- even those that never reached the replica; on a server never promoted (timeline 1) the
-- base is 0 and tokens start at 1. Comparisons stay plain integer comparisons.
CREATE OR REPLACE FUNCTION __prefix__token_base()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1)
           << 40
$$;

-- Stores made by earlier versions have a request_leases that returns fewer columns, which
-- CREATE OR REPLACE cannot change: that one is dropped first (grants on it are lost with it;
-- grant again after upgrading, as docs/POSTGRES.md says).
DO $upgrade$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p
                WHERE p.oid = pg_catalog.to_regprocedure(
                          '__prefix__request_leases(text[], text[], bigint[], interval[], text)')
                  AND NOT 'lease_took_over' = ANY (p.proargnames)) THEN
        DROP FUNCTION __prefix__request_leases(text[], text[], bigint[], interval[], text);
    END IF;
END
$upgrade$;

-- One lease request (an elector's renewal), the rules step by step: the common case, the
-- holder renewing at the same priority, is one statement. lease_took_over says whether it
-- acquired a lease another owner let expire without a release. The lease is serialized by
-- a transaction-scoped advisory lock in a key space of its own, so lease traffic never waits
-- on an append or a read; only the storage's plain renewal, one UPDATE of a live lease by
-- its holder, takes the row's lock instead. request_leases answers batches with the same
-- rules, set by set.
CREATE OR REPLACE FUNCTION __prefix__request_lease(
    p_name text,
    p_owner text,
    p_priority bigint,
    p_ttl interval,
    p_lock_timeout text,
    OUT lease_status text,
    OUT lease_token bigint,
    OUT lease_owner text,
    OUT lease_took_over boolean
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now constant timestamptz := now();
    v_lowest constant bigint := -9223372036854775808; -- a ceiling when there are no contenders
    v_lease __prefix__leases%ROWTYPE;
    v_step_down boolean;
    v_gone record;
    v_lapsed text[];
    v_refreshed boolean;
    v_ranked_as bigint;
    v_after_expiry boolean;
    v_changes json[];
    v_notified bigint;
BEGIN
    -- Every statement below must see what committed while the lock was awaited: under
    -- REPEATABLE READ or SERIALIZABLE it would keep the snapshot taken before the lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '__prefix__request_lease needs READ COMMITTED isolation, not %',
                current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = 'set default_transaction_isolation to read committed for this pool';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('__prefix__leases'), hashtext(p_name))
       FROM (SELECT set_config('lock_timeout', p_lock_timeout, true)) AS setting;
    lease_took_over := false;
    -- The common case in one statement: the caller renews the live lease it holds, at the
    -- same priority. It changes nothing anyone waits for, so it notifies nothing.
    -- Heartbeats never move back: a request by the same owner that started later (a later
    -- now()) may have committed first, and its heartbeat stays.
    UPDATE __prefix__leases AS l
       SET heartbeat_at = greatest(l.heartbeat_at, v_now), ttl = p_ttl
     WHERE l.lease_name = p_name AND l.owner = p_owner
       AND l.priority = p_priority AND l.heartbeat_at + l.ttl >= v_now AND NOT l.released
    RETURNING l.fencing_token, l.owner,
        CASE WHEN l.contender_priority_ceiling <= p_priority THEN false
             ELSE EXISTS (
                 SELECT 1 FROM __prefix__lease_contenders AS c
                  WHERE c.lease_name = p_name
                    AND c.owner <> p_owner
                    AND c.priority > p_priority
                    AND c.heartbeat_at + c.ttl >= v_now) END
    INTO lease_token, lease_owner, v_step_down;

    IF NOT FOUND THEN
        SELECT * INTO v_lease FROM __prefix__leases AS l WHERE l.lease_name = p_name;
        -- A plain renewal (one UPDATE sent without this function) takes the row's lock but
        -- not the advisory one, and may make a lease live that looked expired: the row is
        -- locked and read again before it is taken. A released lease is free at once, even
        -- to a request that started before the release.
        IF FOUND AND (v_lease.released OR v_lease.heartbeat_at + v_lease.ttl < v_now) THEN
            SELECT * INTO STRICT v_lease FROM __prefix__leases AS l
             WHERE l.lease_name = p_name FOR UPDATE;
        END IF;
        IF v_lease.lease_name IS NULL THEN
            INSERT INTO __prefix__leases AS l
                (lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at, ttl,
                 contender_priority_ceiling)
            VALUES (p_name, p_owner, p_priority, __prefix__token_base() + 1,
                    v_now, v_now, p_ttl,
                    (SELECT coalesce(max(c.priority), v_lowest)
                       FROM __prefix__lease_contenders AS c
                      WHERE c.lease_name = p_name AND c.owner <> p_owner
                        AND c.heartbeat_at + c.ttl >= v_now))
            RETURNING * INTO STRICT v_lease;
            v_changes := v_changes
                || json_build_object('lease', p_name, 'kind', 'contender_joined',
                       'owner', p_owner, 'priority', p_priority)
                || json_build_object('lease', p_name, 'kind', 'acquired',
                       'owner', p_owner, 'token', v_lease.fencing_token,
                       'after_expiry', false);
        ELSIF v_lease.released OR v_lease.heartbeat_at + v_lease.ttl < v_now THEN
            -- A holder that let its lease expire lapsed as a contender with it; one that
            -- released it withdrew then.
            IF NOT v_lease.released THEN
                v_changes := v_changes
                    || json_build_object('lease', p_name, 'kind', 'contender_left',
                           'owner', v_lease.owner);
            END IF;
            -- The lease row now stands for the caller as a contender. A change of holder
            -- is rare: the moment to forget contenders long gone too. The condition is
            -- checked again on a row this waits for: a batch's plain refresh (sent without
            -- the advisory lock) may make a lapsed contender live, and it then stays, for
            -- the ceiling and the answer below, which read the rows left.
            v_ranked_as := NULL;
            FOR v_gone IN
                DELETE FROM __prefix__lease_contenders AS c
                 WHERE c.lease_name = p_name
                   AND (c.owner = p_owner OR c.heartbeat_at + c.ttl < v_now)
                RETURNING c.owner, c.priority, c.heartbeat_at + c.ttl >= v_now AS live
            LOOP
                IF v_gone.live THEN
                    v_ranked_as := v_gone.priority;
                ELSE
                    v_changes := v_changes
                        || json_build_object('lease', p_name, 'kind', 'contender_left',
                               'owner', v_gone.owner);
                END IF;
            END LOOP;
            IF v_ranked_as IS DISTINCT FROM p_priority THEN
                v_changes := v_changes
                    || json_build_object('lease', p_name, 'kind', 'contender_joined',
                           'owner', p_owner, 'priority', p_priority);
            END IF;
            v_after_expiry := NOT v_lease.released;
            lease_took_over := v_after_expiry AND v_lease.owner <> p_owner;
            -- Nobody holds it live: the caller takes it under the next token, even when
            -- it was the caller's own lease, so that two tenures never share a token; after
            -- a promotion, above every token of the timeline before.
            UPDATE __prefix__leases AS l
               SET owner = p_owner, priority = p_priority,
                   fencing_token = greatest(l.fencing_token, __prefix__token_base()) + 1,
                   acquired_at = v_now, heartbeat_at = v_now, ttl = p_ttl,
                   released = false,
                   contender_priority_ceiling = (
                       SELECT coalesce(max(c.priority), v_lowest)
                         FROM __prefix__lease_contenders AS c WHERE c.lease_name = p_name)
             WHERE l.lease_name = p_name
            RETURNING * INTO STRICT v_lease;
            v_changes := v_changes
                || json_build_object('lease', p_name, 'kind', 'acquired',
                       'owner', p_owner, 'token', v_lease.fencing_token,
                       'after_expiry', v_after_expiry);
        ELSIF v_lease.owner = p_owner THEN
            -- The holder renews under another priority; or under the same one, when a plain
            -- renewal of its own made the lease live again while this request looked.
            IF v_lease.priority <> p_priority THEN
                v_changes := v_changes
                    || json_build_object('lease', p_name, 'kind', 'contender_joined',
                           'owner', p_owner, 'priority', p_priority);
            END IF;
            UPDATE __prefix__leases AS l
               SET priority = p_priority, heartbeat_at = greatest(l.heartbeat_at, v_now),
                   ttl = p_ttl
             WHERE l.lease_name = p_name
            RETURNING * INTO STRICT v_lease;
        ELSE
            -- Someone else holds it live: refresh the caller's registration, and forget
            -- this lease's lapsed contenders, so that instances which came and went under
            -- identities of their own leave no rows behind while one leader holds the
            -- lease for months. A plain refresh (live, same priority) is one statement.
            WITH lapsed AS (
                DELETE FROM __prefix__lease_contenders AS c
                 WHERE c.lease_name = p_name AND c.heartbeat_at + c.ttl < v_now
                RETURNING c.owner
            ), refreshed AS (
                UPDATE __prefix__lease_contenders AS c
                   SET heartbeat_at = greatest(c.heartbeat_at, v_now), ttl = p_ttl
                 WHERE c.lease_name = p_name AND c.owner = p_owner
                   AND c.priority = p_priority AND c.heartbeat_at + c.ttl >= v_now
                RETURNING c.owner
            )
            SELECT (SELECT array_agg(lapsed.owner) FROM lapsed),
                   EXISTS (SELECT 1 FROM refreshed)
              INTO v_lapsed, v_refreshed;
            IF v_lapsed IS NOT NULL THEN
                SELECT v_changes || array_agg(json_build_object('lease', p_name,
                           'kind', 'contender_left', 'owner', gone))
                  INTO v_changes
                  FROM unnest(v_lapsed) AS gone;
            END IF;
            IF NOT v_refreshed THEN
                -- New, lapsed, or under another priority: registered anew.
                INSERT INTO __prefix__lease_contenders AS c
                    (lease_name, owner, priority, heartbeat_at, ttl)
                VALUES (p_name, p_owner, p_priority, v_now, p_ttl)
                ON CONFLICT (lease_name, owner) DO UPDATE
                    SET priority = excluded.priority,
                        heartbeat_at = greatest(c.heartbeat_at, excluded.heartbeat_at),
                        ttl = excluded.ttl;
                IF v_lease.contender_priority_ceiling < p_priority THEN
                    UPDATE __prefix__leases AS l
                       SET contender_priority_ceiling = p_priority
                     WHERE l.lease_name = p_name;
                END IF;
                v_changes := v_changes
                    || json_build_object('lease', p_name, 'kind', 'contender_joined',
                           'owner', p_owner, 'priority', p_priority);
                IF p_priority > v_lease.priority THEN
                    v_changes := v_changes
                        || json_build_object('lease', p_name,
                               'kind', 'step_down_requested', 'holder', v_lease.owner,
                               'token', v_lease.fencing_token, 'contender', p_owner);
                END IF;
            END IF;
            lease_status := 'standby';
            lease_token := v_lease.fencing_token;
            lease_owner := v_lease.owner;
        END IF;
        IF lease_status IS NULL THEN
            lease_token := v_lease.fencing_token;
            lease_owner := v_lease.owner;
            SELECT EXISTS (
                SELECT 1 FROM __prefix__lease_contenders AS c
                 WHERE c.lease_name = p_name
                   AND c.owner <> p_owner
                   AND c.priority > p_priority
                   AND c.heartbeat_at + c.ttl >= v_now
            ) INTO v_step_down;
        END IF;
    END IF;
    lease_status := coalesce(lease_status,
        CASE WHEN v_step_down THEN 'step_down_requested' ELSE 'leader' END);

    -- A transaction delivers identical notifications on a channel once, and one transaction
    -- (a batch that asks for one lease many times, or a caller's own) may make the same change
    -- twice: each change carries its place among those the transaction notified ("n").
    IF v_changes IS NOT NULL THEN
        v_notified := coalesce(nullif(current_setting('eventstore.notified_changes', true), ''),
                               '0')::bigint;
        PERFORM pg_notify('__prefix__lease_changes',
                    CASE WHEN octet_length(numbered::text) < 8000 THEN numbered::text
                         ELSE '{"kind": "missed"}' END)
           FROM unnest(v_changes) WITH ORDINALITY AS change(body, n),
                LATERAL (SELECT change.body::jsonb
                                || jsonb_build_object('n', v_notified + change.n)) AS c(numbered);
        PERFORM set_config('eventstore.notified_changes',
                           (v_notified + cardinality(v_changes))::text, true);
    END IF;
END
$$;

-- Acquire, renew or contend for a batch of leases in one call, answering each request as if
-- it ran alone, in order; lease_index is the request's place in the batch, from 1, and
-- lease_took_over says whether it acquired a lease another owner let expire without a
-- release. Each lease is serialized by a transaction-scoped advisory lock in a key space of
-- its own, so lease traffic never waits on an append or a read.
--
-- One request goes to request_lease, step by step. A batch runs the rules set by set: the
-- renewals and plain standby refreshes in one statement, the rest in another (for each
-- layer, below). The answers, rows and notifications are the same either way: the tests
-- compare the two on random batches. The storage sends a batch's plain requests to
-- request_plain_leases first (below), and only the rest here.
CREATE OR REPLACE FUNCTION __prefix__request_leases(
    p_names text[],
    p_owners text[],
    p_priorities bigint[],
    p_ttls interval[],
    p_lock_timeout text
)
RETURNS TABLE (lease_index integer, lease_status text, lease_token bigint, lease_owner text,
               lease_took_over boolean)
LANGUAGE plpgsql VOLATILE
-- Planned for what a batch is, whatever the statistics say: a lookup by key per request. With
-- statistics, a join of a thousand requests to the lease table is costed cheaper as a scan of
-- the whole table into a hash, which on a large table takes many times longer. And no JIT:
-- the planner takes a batch's plan for an expensive one and would compile it to machine code
-- on every call (about a second). The settings hold for this function's statements only.
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
DECLARE
    v_now constant timestamptz := now();
    v_lowest constant bigint := -9223372036854775808; -- a ceiling when there are no contenders
    v_count constant integer := coalesce(array_length(p_names, 1), 0);
    v_lock_space constant integer := hashtext('__prefix__leases');
    v_changes json[];
    v_notified bigint;
    v_base bigint;
    v_layers integer;
    v_keys integer;
    v_layer_of integer[];
    v_asked bigint;
    v_handled boolean[];
    v_indexes integer[];
    v_statuses text[];
    v_tokens bigint[];
    v_owners text[];
    v_took_over boolean[];
    v_layer_changes json[];
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
    IF v_count = 0 THEN
        RETURN;
    END IF;

    IF v_count = 1 THEN
        v_layers := 1; -- request_lease takes the lease's lock
    ELSE
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
        -- Every lock up front, in key order, so that two overlapping batches never deadlock.
        SELECT count(*) INTO v_keys
          FROM (SELECT pg_advisory_xact_lock(v_lock_space, keys.key)
                  FROM (SELECT DISTINCT hashtext(n) AS key FROM unnest(p_names) AS n
                         ORDER BY 1) AS keys) AS locked;
        -- A lease asked for more than once is answered in layers: its first request in the
        -- first, its second in the second, and so on. Each statement then meets a lease at
        -- most once, and a later request sees what an earlier one did. As many keys as
        -- requests: no lease repeats, one layer.
        IF v_keys = v_count THEN
            v_layers := 1;
        ELSE
            SELECT array_agg(layers.layer ORDER BY layers.i), max(layers.layer)
              INTO v_layer_of, v_layers
              FROM (SELECT r.i, row_number() OVER (PARTITION BY r.n ORDER BY r.i) AS layer
                      FROM unnest(p_names) WITH ORDINALITY AS r(n, i)) AS layers;
        END IF;
    END IF;

    -- Step by step: one request, or a batch that asks for one lease so often that layers
    -- would cost more than steps.
    IF v_count = 1 OR v_layers > 4 THEN
        FOR i IN 1 .. v_count LOOP
            RETURN QUERY
                SELECT i, r.lease_status, r.lease_token, r.lease_owner, r.lease_took_over
                  FROM __prefix__request_lease(p_names[i], p_owners[i], p_priorities[i],
                                               p_ttls[i], p_lock_timeout) AS r;
        END LOOP;
    ELSE
        v_base := __prefix__token_base();
        FOR v_layer IN 1 .. v_layers LOOP
            -- The common cases first, in one statement that reads each lease once: a caller
            -- renewing the live lease it holds at the same priority, and a standby refreshing
            -- its live registration at the same priority while none of the lease's
            -- contenders has lapsed (else it forgets them, below). Neither notifies anything.
            WITH asked AS (
                SELECT r.i::integer AS i, r.n, r.o, r.p, r.t
                  FROM unnest(p_names, p_owners, p_priorities, p_ttls)
                       WITH ORDINALITY AS r(n, o, p, t, i)
                 WHERE v_layers = 1 OR v_layer_of[r.i] = v_layer
            ), live AS (
                SELECT a.*, l.owner AS holder, l.priority AS holder_priority,
                       l.fencing_token AS token
                  FROM asked AS a
                  CROSS JOIN LATERAL (
                      SELECT * FROM __prefix__leases AS l
                       WHERE l.lease_name = a.n AND l.heartbeat_at + l.ttl >= v_now
                         AND NOT l.released LIMIT 1
                  ) AS l
            ), renewed AS (
                UPDATE __prefix__leases AS l
                   SET heartbeat_at = greatest(l.heartbeat_at, v_now), ttl = k.t
                  FROM live AS k
                 WHERE k.holder = k.o AND k.holder_priority = k.p AND l.lease_name = k.n
                RETURNING k.i, l.fencing_token, l.owner,
                    CASE WHEN l.contender_priority_ceiling <= k.p THEN 'leader'
                         WHEN EXISTS (
                             SELECT 1 FROM __prefix__lease_contenders AS c
                              WHERE c.lease_name = k.n AND c.owner <> k.o AND c.priority > k.p
                                AND c.heartbeat_at + c.ttl >= v_now)
                         THEN 'step_down_requested' ELSE 'leader' END AS status
            ), refreshed AS (
                UPDATE __prefix__lease_contenders AS c
                   SET heartbeat_at = greatest(c.heartbeat_at, v_now), ttl = k.t
                  FROM live AS k
                 WHERE k.holder <> k.o AND c.lease_name = k.n AND c.owner = k.o
                   AND c.priority = k.p AND c.heartbeat_at + c.ttl >= v_now
                   AND NOT EXISTS (
                       SELECT 1 FROM __prefix__lease_contenders AS x
                        WHERE x.lease_name = k.n AND x.heartbeat_at + x.ttl < v_now)
                RETURNING k.i, k.token AS fencing_token, k.holder AS owner, 'standby' AS status
            ), handled AS (
                SELECT * FROM renewed UNION ALL SELECT * FROM refreshed
            )
            SELECT array_agg(h.i), array_agg(h.status), array_agg(h.fencing_token),
                   array_agg(h.owner), array_agg(false), (SELECT count(*) FROM asked)
              INTO v_indexes, v_statuses, v_tokens, v_owners, v_took_over, v_asked
              FROM handled AS h;
            IF v_indexes IS NOT NULL THEN
                RETURN QUERY SELECT * FROM unnest(v_indexes, v_statuses, v_tokens, v_owners,
                                                  v_took_over);
            END IF;
            CONTINUE WHEN coalesce(cardinality(v_indexes), 0) = v_asked;
            -- The rest, set by set.
            v_handled := array_fill(false, ARRAY[v_count]);
            FOREACH i IN ARRAY coalesce(v_indexes, '{}') LOOP
                v_handled[i] := true;
            END LOOP;
            -- The rows of the leases that look expired are locked first (see request_lease):
            -- a plain renewal that made one live meanwhile leaves it unlocked, and the next
            -- statement reads it live.
            PERFORM FROM __prefix__leases AS l
             WHERE l.lease_name = ANY (
                       SELECT r.n FROM unnest(p_names) WITH ORDINALITY AS r(n, i)
                        WHERE (v_layers = 1 OR v_layer_of[r.i] = v_layer) AND NOT v_handled[r.i])
               AND (l.released OR l.heartbeat_at + l.ttl < v_now)
               FOR UPDATE;
            WITH asked AS (
                SELECT r.i::integer AS i, r.n, r.o, r.p, r.t
                  FROM unnest(p_names, p_owners, p_priorities, p_ttls)
                       WITH ORDINALITY AS r(n, o, p, t, i)
                 WHERE (v_layers = 1 OR v_layer_of[r.i] = v_layer) AND NOT v_handled[r.i]
            ), decided AS (
                -- Each lease and its contenders, read with one index lookup per request
                -- (LIMIT and the aggregate keep the planner from scanning a whole table,
                -- whatever its statistics say): who holds it, who outranks the caller, the
                -- caller's own live registration, and who lapsed.
                SELECT a.*, l.owner AS holder, l.priority AS holder_priority,
                       l.fencing_token AS token, coalesce(l.released, false) AS released,
                       CASE WHEN l.lease_name IS NULL THEN 'new'
                            WHEN l.released OR l.heartbeat_at + l.ttl < v_now
                            THEN 'expired'
                            WHEN l.owner = a.o THEN 'holder'
                            ELSE 'standby' END AS kind,
                       coalesce(g.outranked, false) AS outranked,
                       g.ranked_as,
                       coalesce(g.lapsed, '{}') AS lapsed,
                       coalesce(g.lapsed_priorities, '{}') AS lapsed_priorities,
                       coalesce(g.registered, false) AS registered,
                       l.contender_priority_ceiling AS ceiling_before,
                       coalesce(g.others_top, v_lowest) AS ceiling
                  FROM asked AS a
                  LEFT JOIN LATERAL (
                      SELECT * FROM __prefix__leases AS l WHERE l.lease_name = a.n LIMIT 1
                  ) AS l ON true
                  CROSS JOIN LATERAL (
                      SELECT bool_or(c.owner <> a.o AND c.priority > a.p
                                     AND c.heartbeat_at + c.ttl >= v_now) AS outranked,
                             max(c.priority) FILTER (WHERE c.owner = a.o
                                                     AND c.heartbeat_at + c.ttl >= v_now)
                                 AS ranked_as,
                             array_agg(c.owner ORDER BY c.owner COLLATE "C")
                                 FILTER (WHERE c.heartbeat_at + c.ttl < v_now) AS lapsed,
                             array_agg(c.priority ORDER BY c.owner COLLATE "C")
                                 FILTER (WHERE c.heartbeat_at + c.ttl < v_now)
                                 AS lapsed_priorities,
                             bool_or(c.owner = a.o) AS registered,
                             max(c.priority) FILTER (WHERE c.owner <> a.o
                                                     AND c.heartbeat_at + c.ttl >= v_now)
                                 AS others_top
                        FROM __prefix__lease_contenders AS c
                       WHERE c.lease_name = a.n
                  ) AS g
            ), forgotten AS (
                -- A new holder's lease row stands for it as a contender; lapsed contenders
                -- are forgotten when a lease changes hands or a standby asks. A standby's own
                -- lapsed row is registered anew below instead. Deleted by key, and only
                -- while still lapsed in the row's newest version: a batch's plain refresh
                -- (sent without the advisory lock) may have renewed one since this
                -- statement's snapshot, and it stays.
                DELETE FROM __prefix__lease_contenders AS c
                 USING decided AS d
                 WHERE (d.kind = 'expired' AND (d.registered OR cardinality(d.lapsed) > 0)
                        OR d.kind = 'standby' AND cardinality(d.lapsed) > 0)
                   AND c.lease_name = d.n
                   AND c.owner = ANY (CASE d.kind
                                          WHEN 'expired' THEN d.lapsed || d.o
                                          ELSE array_remove(d.lapsed, d.o) END)
                   AND (d.kind = 'expired' AND c.owner = d.o OR c.heartbeat_at + c.ttl < v_now)
                RETURNING d.i, c.owner, c.heartbeat_at + c.ttl >= v_now AS live
            ), survivors AS (
                -- The contenders a new holder found lapsed that were refreshed before they
                -- could be forgotten: live after all, they count for its priority ceiling and
                -- its answer.
                SELECT d.i, s.owner, s.priority
                  FROM decided AS d, unnest(d.lapsed, d.lapsed_priorities) AS s(owner, priority)
                 WHERE d.kind = 'expired' AND s.owner <> d.o
                   AND NOT EXISTS (SELECT 1 FROM forgotten AS f
                                    WHERE f.i = d.i AND f.owner = s.owner)
            ), renewed AS (
                -- Heartbeats never move back: a request by the same owner that started later
                -- (a later now()) may have committed first, and its heartbeat stays.
                UPDATE __prefix__leases AS l
                   SET priority = d.p, heartbeat_at = greatest(l.heartbeat_at, v_now), ttl = d.t
                  FROM decided AS d
                 WHERE d.kind = 'holder' AND l.lease_name = d.n
            ), taken AS (
                -- Nobody holds it live: the caller takes it under the next token, even when it
                -- was the caller's own lease; after a promotion, above every token before.
                UPDATE __prefix__leases AS l
                   SET owner = d.o, priority = d.p,
                       fencing_token = greatest(l.fencing_token, v_base) + 1,
                       acquired_at = v_now, heartbeat_at = v_now, ttl = d.t, released = false,
                       contender_priority_ceiling = greatest(d.ceiling, (
                           SELECT max(s.priority) FROM survivors AS s WHERE s.i = d.i))
                  FROM decided AS d
                 WHERE d.kind = 'expired' AND l.lease_name = d.n
            ), created AS (
                INSERT INTO __prefix__leases AS l
                    (lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at, ttl,
                     contender_priority_ceiling)
                SELECT d.n, d.o, d.p, v_base + 1, v_now, v_now, d.t, d.ceiling
                  FROM decided AS d
                 WHERE d.kind = 'new'
            ), raised AS (
                -- A standby registered above the ceiling raises it.
                UPDATE __prefix__leases AS l
                   SET contender_priority_ceiling = d.p
                  FROM decided AS d
                 WHERE d.kind = 'standby' AND d.ceiling_before < d.p AND l.lease_name = d.n
            ), registered AS (
                -- New, lapsed, under another priority or plainly refreshed: one upsert.
                INSERT INTO __prefix__lease_contenders AS c
                    (lease_name, owner, priority, heartbeat_at, ttl)
                SELECT d.n, d.o, d.p, v_now, d.t
                  FROM decided AS d
                 WHERE d.kind = 'standby'
                ON CONFLICT (lease_name, owner) DO UPDATE
                    SET priority = excluded.priority,
                        heartbeat_at = greatest(c.heartbeat_at, excluded.heartbeat_at),
                        ttl = excluded.ttl
            ), answered AS (
                SELECT d.*,
                       CASE d.kind WHEN 'new' THEN v_base + 1
                                   WHEN 'expired' THEN greatest(d.token, v_base) + 1
                                   ELSE d.token END AS granted,
                       d.ranked_as IS DISTINCT FROM d.p AS joined
                  FROM decided AS d
            ), changes AS (
                -- The notifications of each request, in the order request by request gives:
                -- of the lapsed contenders, those forgotten, and a standby's own.
                SELECT d.i, 1 AS step, '' AS owner,
                       json_build_object('lease', d.n, 'kind', 'contender_left',
                           'owner', d.holder) AS change
                  FROM answered AS d
                 WHERE d.kind = 'expired' AND NOT d.released
                UNION ALL
                SELECT d.i, 2, f.owner, json_build_object('lease', d.n,
                           'kind', 'contender_left', 'owner', f.owner)
                  FROM answered AS d JOIN forgotten AS f ON f.i = d.i
                 WHERE NOT f.live
                UNION ALL
                SELECT d.i, 2, d.o, json_build_object('lease', d.n, 'kind', 'contender_left',
                           'owner', d.o)
                  FROM answered AS d
                 WHERE d.kind = 'standby' AND d.o = ANY (d.lapsed)
                UNION ALL
                SELECT d.i, 3, '', json_build_object('lease', d.n, 'kind', 'contender_joined',
                           'owner', d.o, 'priority', d.p)
                  FROM answered AS d
                 WHERE d.kind = 'new' OR (d.kind IN ('expired', 'standby') AND d.joined)
                    OR (d.kind = 'holder' AND d.holder_priority <> d.p)
                UNION ALL
                SELECT d.i, 4, '', json_build_object('lease', d.n, 'kind', 'acquired',
                           'owner', d.o, 'token', d.granted,
                           'after_expiry', d.kind = 'expired' AND NOT d.released)
                  FROM answered AS d
                 WHERE d.kind IN ('new', 'expired')
                UNION ALL
                SELECT d.i, 5, '', json_build_object('lease', d.n, 'kind', 'step_down_requested',
                           'holder', d.holder, 'token', d.token, 'contender', d.o)
                  FROM answered AS d
                 WHERE d.kind = 'standby' AND d.joined AND d.p > d.holder_priority
            )
            SELECT array_agg(d.i),
                   array_agg(CASE WHEN d.kind = 'standby' THEN 'standby'
                                  WHEN d.outranked OR EXISTS (
                                      SELECT 1 FROM survivors AS s
                                       WHERE s.i = d.i AND s.priority > d.p)
                                  THEN 'step_down_requested'
                                  ELSE 'leader' END),
                   array_agg(d.granted),
                   array_agg(CASE WHEN d.kind = 'standby' THEN d.holder ELSE d.o END),
                   array_agg(d.kind = 'expired' AND NOT d.released AND d.holder <> d.o),
                   (SELECT array_agg(c.change ORDER BY c.i, c.step, c.owner COLLATE "C")
                      FROM changes AS c)
              INTO v_indexes, v_statuses, v_tokens, v_owners, v_took_over, v_layer_changes
              FROM answered AS d;
            RETURN QUERY SELECT * FROM unnest(v_indexes, v_statuses, v_tokens, v_owners,
                                              v_took_over);
            v_changes := v_changes || v_layer_changes;
        END LOOP;
    END IF;

    -- A transaction delivers identical notifications on a channel once, and a batch that
    -- registers a contender at 1, then 2, then 1 again makes two identical changes: each
    -- carries its place among the changes the transaction notified ("n"; the requests made
    -- step by step above count theirs alike), so that listeners hear what the same requests
    -- made one by one would have told them.
    IF v_changes IS NOT NULL THEN
        v_notified := coalesce(nullif(current_setting('eventstore.notified_changes', true), ''),
                               '0')::bigint;
        PERFORM pg_notify('__prefix__lease_changes',
                    CASE WHEN octet_length(numbered::text) < 8000 THEN numbered::text
                         ELSE '{"kind": "missed"}' END)
           FROM unnest(v_changes) WITH ORDINALITY AS change(body, n),
                LATERAL (SELECT change.body::jsonb
                                || jsonb_build_object('n', v_notified + change.n)) AS c(numbered);
        PERFORM set_config('eventstore.notified_changes',
                           (v_notified + cardinality(v_changes))::text, true);
    END IF;
END
$$;

-- A batch's plain requests, answered without the leases' advisory locks: a holder renewing
-- its live lease at the same priority (as the storage's plain renewal: not released, no
-- contender can outrank it, its expiry not brought forward), and a standby refreshing its
-- live registration at the same priority, its expiry not brought forward, while none of the
-- lease's contenders has lapsed. Either only makes something live for longer, so every
-- decision that found it live stays right; the functions above check a contender still
-- lapsed on the row they write before they forget it, and lock a lease row they found
-- expired before they take it. Returns, for each request it served, its place (from 1), the
-- lease's token and holder, and whether it was a standby's; changes nothing else and
-- notifies nothing. Under another isolation than READ COMMITTED, where a write could not
-- check its conditions again on a row it waited for, it serves nothing (request_leases then
-- refuses the batch). Planned like request_leases, for what a batch is.
CREATE OR REPLACE FUNCTION __prefix__request_plain_leases(
    p_names text[],
    p_owners text[],
    p_priorities bigint[],
    p_ttls interval[],
    p_lock_timeout text
)
RETURNS TABLE (lease_index integer, lease_token bigint, lease_owner text,
               lease_standby boolean)
LANGUAGE plpgsql VOLATILE
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    RETURN QUERY
    WITH asked AS (
        SELECT r.i::integer AS i, r.n, r.o, r.p, r.t
          FROM unnest(p_names, p_owners, p_priorities, p_ttls)
               WITH ORDINALITY AS r(n, o, p, t, i)
    ), live AS (
        SELECT a.*, l.owner AS holder, l.fencing_token AS token
          FROM asked AS a
          CROSS JOIN LATERAL (
              SELECT * FROM __prefix__leases AS l
               WHERE l.lease_name = a.n AND l.heartbeat_at + l.ttl >= now()
                 AND NOT l.released
               LIMIT 1
          ) AS l
    ), renewed AS (
        UPDATE __prefix__leases AS l
           SET heartbeat_at = greatest(l.heartbeat_at, now()), ttl = k.t
          FROM live AS k
         WHERE k.holder = k.o AND l.lease_name = k.n AND l.owner = k.o AND l.priority = k.p
           AND l.heartbeat_at + l.ttl >= now() AND NOT l.released
           AND greatest(l.heartbeat_at, now()) + k.t >= l.heartbeat_at + l.ttl
           AND l.contender_priority_ceiling <= k.p
        RETURNING k.i, l.fencing_token, l.owner, false
    ), refreshed AS (
        UPDATE __prefix__lease_contenders AS c
           SET heartbeat_at = greatest(c.heartbeat_at, now()), ttl = k.t
          FROM live AS k
         WHERE k.holder <> k.o AND c.lease_name = k.n AND c.owner = k.o AND c.priority = k.p
           AND c.heartbeat_at + c.ttl >= now()
           AND greatest(c.heartbeat_at, now()) + k.t >= c.heartbeat_at + c.ttl
           AND NOT EXISTS (
               SELECT 1 FROM __prefix__lease_contenders AS x
                WHERE x.lease_name = k.n AND x.heartbeat_at + x.ttl < now())
        RETURNING k.i, k.token, k.holder, true
    )
    SELECT * FROM renewed UNION ALL SELECT * FROM refreshed;
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
    v_withdrawn boolean;
    v_token bigint;
    v_changes json[];
    v_change json;
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
    v_withdrawn := FOUND;
    UPDATE __prefix__leases AS l
       SET heartbeat_at = v_now - l.ttl - interval '1 millisecond', released = true
     WHERE l.lease_name = p_name AND l.owner = p_owner AND l.heartbeat_at + l.ttl >= v_now
       AND NOT l.released
    RETURNING l.fencing_token INTO v_token;
    IF v_token IS NOT NULL THEN
        v_changes := v_changes
            || json_build_object('lease', p_name, 'kind', 'released', 'owner', p_owner,
                   'token', v_token,
                   -- The live contender that should lead next: the highest priority, then
                   -- the smallest owner id.
                   'successor', (
                       SELECT c.owner FROM __prefix__lease_contenders AS c
                        WHERE c.lease_name = p_name AND c.heartbeat_at + c.ttl >= v_now
                        ORDER BY c.priority DESC, c.owner COLLATE "C"
                        LIMIT 1));
    END IF;
    IF v_token IS NOT NULL OR v_withdrawn THEN
        v_changes := v_changes
            || json_build_object('lease', p_name, 'kind', 'contender_left', 'owner', p_owner);
    END IF;

    IF v_changes IS NOT NULL THEN
        FOREACH v_change IN ARRAY v_changes LOOP
            PERFORM pg_notify('__prefix__lease_changes',
                CASE WHEN octet_length(v_change::text) < 8000 THEN v_change::text
                     ELSE '{"kind": "missed"}' END);
        END LOOP;
    END IF;
    RETURN v_token IS NOT NULL;
END
$$;



-- Several releases by one owner in one transaction, so that they commit (and notify) once.
-- Every lock up front, in the key order of request_leases, so that this never deadlocks with
-- an overlapping batch; release_lease then takes each lock again, which it already holds.
CREATE OR REPLACE FUNCTION __prefix__release_leases(
    p_names text[],
    p_owner text,
    p_lock_timeout text
)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_key integer;
    v_name text;
    v_released integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    FOR v_key IN SELECT DISTINCT hashtext(n) FROM unnest(p_names) AS n ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(hashtext('__prefix__leases'), v_key);
    END LOOP;
    FOR v_name IN SELECT DISTINCT n FROM unnest(p_names) AS n LOOP
        IF __prefix__release_lease(v_name, p_owner, p_lock_timeout) THEN
            v_released := v_released + 1;
        END IF;
    END LOOP;
    RETURN v_released;
END
$$;


-- A fence checked inside the caller's own transaction, for code that writes a read model of
-- its own next to the store: it holds the lease's lock in shared mode until that transaction
-- ends, so no takeover can commit between this check and the caller's writes. Raises
-- 'fenced' (SQLSTATE EF001) when the lease is unknown, not live, or holds another token.
CREATE OR REPLACE FUNCTION __prefix__check_fence(
    p_name text,
    p_token bigint,
    p_lock_timeout text DEFAULT '10s'
)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_lease __prefix__leases%ROWTYPE;
    -- The caller's own, set again once the lease lock is granted: the caller's transaction
    -- goes on with its writes.
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '__prefix__check_fence needs READ COMMITTED isolation, not %',
                current_setting('transaction_isolation')
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('__prefix__leases'), hashtext(p_name))
       FROM (SELECT set_config('lock_timeout', p_lock_timeout, true)) AS setting;
    PERFORM set_config('lock_timeout', v_lock_timeout, true);
    -- A statement after the lock: it sees what committed while the lock was awaited.
    SELECT * INTO v_lease FROM __prefix__leases AS l WHERE l.lease_name = p_name;
    IF NOT FOUND OR v_lease.fencing_token <> p_token
       OR v_lease.heartbeat_at + v_lease.ttl < clock_timestamp() THEN
        RAISE EXCEPTION 'fenced: lease % with token % does not hold (current token %)',
                p_name, p_token, v_lease.fencing_token
            USING ERRCODE = 'EF001';
    END IF;
END
$$;

-- Each function runs with search_path pinned to the schema it lives in, then pg_temp (last,
-- so that no temporary object stands in either; pg_catalog is searched first): a same-named
-- table or function in another schema earlier in a caller's path never stands in for what
-- the functions use. CREATE OR REPLACE clears the setting, so it is set again each time.
DO $pin$
DECLARE
    v_function text;
BEGIN
    FOREACH v_function IN ARRAY ARRAY[
        '__prefix__token_base()',
        '__prefix__index_event_tags()',
        '__prefix__read_page(text, text[])',
        '__prefix__request_lease(text, text, bigint, interval, text)',
        '__prefix__request_leases(text[], text[], bigint[], interval[], text)',
        '__prefix__request_plain_leases(text[], text[], bigint[], interval[], text)',
        '__prefix__release_lease(text, text, text)',
        '__prefix__release_leases(text[], text, text)',
        '__prefix__check_fence(text, bigint, text)'
    ] LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp',
                                  pg_catalog.current_schema(), v_function,
                                  pg_catalog.current_schema());
    END LOOP;
END
$pin$;

-- The schema version these objects are (see the start of the script).
COMMENT ON TABLE __prefix__events IS 'eventstore-postgres schema_version=2 oldest_compatible=1';
