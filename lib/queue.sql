-- The idem sandbox queue: at-least-once delivery with a visibility timeout,
-- in the manner of SQS and pgmq. The functions idem.send, idem.read,
-- idem.ack and the idem.sandbox marker are normative (idem-sandbox(1),
-- QUEUE); the tables behind them are not. Installed by idem-sandbox start.

CREATE SCHEMA idem;
COMMENT ON SCHEMA idem IS 'idem rehearsal sandbox: queue, delivery log, sandbox marker';

-- One row marks this database as a rehearsal sandbox; every idem program
-- that writes refuses a database without it. Its sandbox_id, with the
-- database's name, is how the programs of one pipeline know they reach one
-- database (idem-tsv(5), the database row).
CREATE TABLE idem.sandbox (
	sandbox boolean PRIMARY KEY DEFAULT true CHECK (sandbox),
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	created_by text NOT NULL DEFAULT 'idem-sandbox',
	schema_version integer NOT NULL DEFAULT 1,
	sandbox_id text NOT NULL DEFAULT md5(random()::text || clock_timestamp()::text)::uuid::text
);

-- A message is in the queue until acked, and in the archive after.
CREATE TABLE idem.message (
	msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue text NOT NULL,
	job_id text NOT NULL,
	copy integer NOT NULL DEFAULT 0 CHECK (copy >= 0),
	business_key text NOT NULL,
	payload jsonb NOT NULL,
	enqueued_at timestamptz NOT NULL DEFAULT statement_timestamp(),	-- one time per publishing statement
	visible_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	read_ct integer NOT NULL DEFAULT 0,
	acked_at timestamptz,
	CONSTRAINT message_publication UNIQUE (queue, job_id, copy)
) WITH (
	-- an ack leaves a dead entry in message_waiting, which every read
	-- passes until a vacuum removes it: vacuumed after every 2,000
	-- updates (reads and acks), a read does not slow with the number of
	-- messages acked before it
	autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0
);
CREATE INDEX message_waiting ON idem.message (queue, msg_id) WHERE acked_at IS NULL;

CREATE VIEW idem.queue AS
	SELECT msg_id, queue, job_id, copy, business_key, payload, enqueued_at,
	       visible_at, read_ct
	FROM idem.message WHERE acked_at IS NULL;

CREATE VIEW idem.archive AS
	SELECT msg_id, queue, job_id, copy, business_key, payload, enqueued_at,
	       read_ct, acked_at
	FROM idem.message WHERE acked_at IS NOT NULL;

-- One row per delivery: the attempt number, when it was taken, and when the
-- message becomes visible again unless acked.
CREATE TABLE idem.delivery (
	msg_id bigint NOT NULL REFERENCES idem.message,
	read_ct integer NOT NULL,
	delivered_at timestamptz NOT NULL,
	visible_at timestamptz NOT NULL,
	backend_pid integer NOT NULL DEFAULT pg_backend_pid(),
	PRIMARY KEY (msg_id, read_ct)
);

-- The queues a sandbox account may use (kill-at(1), THE SANDBOX ACCOUNT).
-- A role named here may publish to, read and ack the messages of its
-- queues only; a role not named here is not held to it.
CREATE TABLE idem.queue_account (
	queue text NOT NULL,
	account name NOT NULL,
	PRIMARY KEY (queue, account)
);

-- True when the session's role may use the queue; else an error,
-- insufficient_privilege, naming the queue.
CREATE FUNCTION idem.may_use(queue text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF EXISTS (SELECT FROM idem.queue_account a WHERE a.account = session_user)
	   AND NOT EXISTS (SELECT FROM idem.queue_account a
			   WHERE a.account = session_user AND a.queue = may_use.queue) THEN
		RAISE EXCEPTION 'permission denied for queue %', may_use.queue
			USING ERRCODE = 'insufficient_privilege';
	END IF;
	RETURN true;
END
$$;

-- Publishes many messages in one call. A message is identified by
-- (queue, job_id, copy): publishing it again returns the existing msg_id
-- with published false, and publishing it with another business key or
-- payload is an error, so a rerun never publishes anything twice. Returns
-- one row per input element; ord is its position in the arrays, from 1.
CREATE FUNCTION idem.send_batch(queue text, job_ids text[], business_keys text[],
				payloads jsonb[], copies integer[])
RETURNS TABLE (ord bigint, msg_id bigint, enqueued_at timestamptz, published boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- planned for each call's arrays: a plan kept for arrays of unknown length
-- takes a batch of thousands for ten rows, and joins them with every
-- message of the queue in a nested loop, for minutes
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
	fresh record;
	clash record;
	inserted bigint[] := '{}';
BEGIN
	PERFORM idem.may_use(send_batch.queue);
	FOR fresh IN
		WITH input AS (
			SELECT u.job_id, u.business_key, u.payload, u.copy, u.ord
			FROM unnest(send_batch.job_ids, send_batch.business_keys, send_batch.payloads,
				    send_batch.copies) WITH ORDINALITY AS u(job_id, business_key, payload, copy, ord)
		), added AS (
			INSERT INTO idem.message AS m (queue, job_id, copy, business_key, payload)
			SELECT send_batch.queue, i.job_id, i.copy, i.business_key, i.payload
			FROM input i ORDER BY i.ord
			ON CONFLICT ON CONSTRAINT message_publication DO NOTHING
			RETURNING m.job_id, m.copy, m.msg_id, m.enqueued_at
		)
		SELECT DISTINCT ON (a.msg_id) i.ord, a.msg_id, a.enqueued_at
		FROM input i JOIN added a ON a.job_id = i.job_id AND a.copy = i.copy
		ORDER BY a.msg_id, i.ord
	LOOP
		ord := fresh.ord;
		msg_id := fresh.msg_id;
		enqueued_at := fresh.enqueued_at;
		published := true;
		inserted := inserted || fresh.ord;
		RETURN NEXT;
	END LOOP;
	IF cardinality(inserted) = cardinality(send_batch.job_ids) THEN
		RETURN;
	END IF;
	-- the rest are in the queue already, from before or from earlier in this
	-- call: the same message, or an error
	SELECT i.job_id, i.copy INTO clash
	FROM unnest(send_batch.job_ids, send_batch.business_keys, send_batch.payloads,
		    send_batch.copies) WITH ORDINALITY AS i(job_id, business_key, payload, copy, ord)
	JOIN idem.message o ON o.queue = send_batch.queue AND o.job_id = i.job_id
			   AND o.copy = i.copy
	-- a hashed set of the inserted, not a search of the array per row
	WHERE i.ord NOT IN (SELECT unnest(inserted))
	  AND (o.payload <> i.payload OR o.business_key <> i.business_key)
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'job % copy % is already in queue % with another business key or payload',
			clash.job_id, clash.copy, send_batch.queue
			USING ERRCODE = 'unique_violation';
	END IF;
	RETURN QUERY
	SELECT i.ord, o.msg_id, o.enqueued_at, false
	FROM unnest(send_batch.job_ids, send_batch.copies) WITH ORDINALITY AS i(job_id, copy, ord)
	JOIN idem.message o ON o.queue = send_batch.queue AND o.job_id = i.job_id
			   AND o.copy = i.copy
	WHERE i.ord NOT IN (SELECT unnest(inserted));
END
$$;

-- What idem published into a queue of another library (idem-sandbox(1),
-- QUEUE ADAPTERS): the library's tables do not say which job and copy of a
-- seed a message is, and some delete a job once it is done. A message is
-- (kind, queue, job_id, copy), published once; msg_id is the library's id.
CREATE TABLE idem.published (
	kind text NOT NULL,
	queue text NOT NULL,
	job_id text NOT NULL,
	copy integer NOT NULL CHECK (copy >= 0),
	msg_id text NOT NULL,
	business_key text NOT NULL,
	payload jsonb NOT NULL,
	enqueued_at timestamptz NOT NULL DEFAULT statement_timestamp(),
	PRIMARY KEY (kind, queue, job_id, copy),
	CONSTRAINT published_msg UNIQUE (kind, msg_id)
);

-- What a queue holds, for a publisher that may not read messages: which
-- job and copy each msg_id is, and when it was published; no business key,
-- no payload, no delivery state.
CREATE VIEW idem.publication AS
	SELECT msg_id, queue, job_id, copy, enqueued_at FROM idem.message;

CREATE FUNCTION idem.send(queue text, job_id text, business_key text, payload jsonb,
			  copy integer DEFAULT 0)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
	SELECT b.msg_id FROM idem.send_batch($1, ARRAY[$2], ARRAY[$3], ARRAY[$4], ARRAY[$5]) b
$$;

-- Takes up to qty visible messages, oldest first, hides them for vt, counts
-- the attempt in read_ct and logs the delivery.
-- The oldest come from message_waiting, in its order, whatever the
-- statistics say: the primary key gives the same order too, but through
-- every acked message first, which once the table is analyzed the planner
-- may prefer, and a read then costs as much as all the acks before it.
-- The queue is bounded on both sides rather than equated, so that it stays
-- in the order asked for, which only message_waiting gives without a sort,
-- and sorting, incremental or not, is off (and so is JIT, which the cost
-- of the sort of the rows taken would otherwise call for).
CREATE FUNCTION idem.read(queue text, vt interval, qty integer DEFAULT 1)
RETURNS TABLE (msg_id bigint, job_id text, business_key text, payload jsonb,
	       read_ct integer, enqueued_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
	SET enable_sort = off SET enable_incremental_sort = off SET jit = off
AS $$
#variable_conflict use_column
DECLARE
	taken_at timestamptz := clock_timestamp();
BEGIN
	PERFORM idem.may_use(read.queue);
	IF read.qty IS NULL OR read.qty < 1 THEN
		RAISE EXCEPTION 'idem.read: qty must be at least 1' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF read.vt IS NULL OR read.vt < interval '0' THEN
		RAISE EXCEPTION 'idem.read: vt must not be negative' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN QUERY
	WITH picked AS (
		SELECT m.msg_id FROM idem.message m
		WHERE m.queue >= read.queue AND m.queue <= read.queue
		AND m.acked_at IS NULL AND m.visible_at <= taken_at
		ORDER BY m.queue, m.msg_id
		LIMIT read.qty
		FOR UPDATE SKIP LOCKED
	), taken AS (
		UPDATE idem.message m
		SET visible_at = taken_at + read.vt, read_ct = m.read_ct + 1
		FROM picked WHERE m.msg_id = picked.msg_id
		RETURNING m.msg_id, m.job_id, m.business_key, m.payload, m.read_ct,
			  m.enqueued_at, m.visible_at
	), logged AS (
		INSERT INTO idem.delivery (msg_id, read_ct, delivered_at, visible_at)
		SELECT t.msg_id, t.read_ct, taken_at, t.visible_at FROM taken t
	)
	SELECT t.msg_id, t.job_id, t.business_key, t.payload, t.read_ct, t.enqueued_at
	FROM taken t ORDER BY t.msg_id;
END
$$;

-- Removes the message from the queue into the archive with its ack time;
-- false when it was acked already (or never existed).
CREATE FUNCTION idem.ack(msg_id bigint)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
	WITH acked AS (
		UPDATE idem.message m SET acked_at = clock_timestamp()
		WHERE m.msg_id = $1 AND m.acked_at IS NULL AND idem.may_use(m.queue)
		RETURNING 1
	)
	SELECT EXISTS (SELECT FROM acked)
$$;

-- Roles: the publisher only sends, the worker reads, acks and owns its
-- effect tables, the reviewer only reads.
DO $$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['idem_publisher', 'idem_worker', 'idem_reviewer'] LOOP
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
			EXECUTE format('CREATE ROLE %I LOGIN', r);
		END IF;
	END LOOP;
	EXECUTE format('GRANT CONNECT ON DATABASE %I TO idem_publisher, idem_reviewer',
		       current_database());
	EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO idem_worker', current_database());
END
$$;

REVOKE ALL ON SCHEMA idem FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA idem FROM PUBLIC;
GRANT USAGE ON SCHEMA idem TO idem_publisher, idem_worker, idem_reviewer;
GRANT SELECT ON idem.sandbox TO idem_publisher, idem_worker, idem_reviewer;
GRANT EXECUTE ON FUNCTION idem.send(text, text, text, jsonb, integer),
	idem.send_batch(text, text[], text[], jsonb[], integer[]) TO idem_publisher;
GRANT SELECT ON idem.publication TO idem_publisher;
-- Bulk publishing with COPY; the unique (queue, job_id, copy) still holds.
GRANT INSERT (queue, job_id, copy, business_key, payload) ON idem.message TO idem_publisher;
GRANT EXECUTE ON FUNCTION idem.read(text, interval, integer), idem.ack(bigint) TO idem_worker;
GRANT SELECT ON ALL TABLES IN SCHEMA idem TO idem_reviewer;
ALTER DEFAULT PRIVILEGES FOR ROLE idem_worker GRANT USAGE ON SCHEMAS TO idem_reviewer;
ALTER DEFAULT PRIVILEGES FOR ROLE idem_worker GRANT SELECT ON TABLES TO idem_reviewer;

INSERT INTO idem.sandbox DEFAULT VALUES;
