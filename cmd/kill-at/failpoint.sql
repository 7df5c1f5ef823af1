-- The kill points and the effect ledger of one run of kill-at(1): the
-- schema idem_run (idem-sandbox(1), KILL POINTS AND LEDGER), which
-- failpoint.c installs in one transaction: schema, the functions the
-- queue adapters call, the adapter's own observe section, then, when the
-- effect table exists, its functions and triggers.
--
-- Each section begins at a line "-- @name" and runs to the next, without
-- the blank lines and comments that end it: a comment above a section is
-- about that section. A section "-- @function NAME(ARGUMENTS) RETURNS
-- TYPE" is the body of a PL/pgSQL function idem_run.NAME, SECURITY
-- DEFINER, given to CREATE FUNCTION as a string literal once its
-- placeholders are filled, so that nothing filled in can end it.
--
-- A placeholder :name stands for a value the program fills in: the
-- advisory lock classes and the steps of failpoint.h (:slot_class,
-- :gate_class, :point_class, :slots, :last_slot, :before_write,
-- :before_commit, :after_commit, :ack_in_effect); the effect table
-- (:table) and the business key of its row NEW (:key), both quoted for
-- SQL; and a section filled (:after_commit_point, :wrote), alone on its
-- line, or no line when the run does not need it. Nothing but a function
-- body may hold :key.

-- @schema
SET LOCAL client_min_messages = warning;
DROP SCHEMA IF EXISTS idem_run CASCADE;
CREATE SCHEMA idem_run;
COMMENT ON SCHEMA idem_run IS 'kill-at: kill points and effect ledger of the run in progress';
CREATE UNLOGGED TABLE idem_run.armed (
	id integer PRIMARY KEY,
	step integer NOT NULL,
	business_key text NOT NULL,
	UNIQUE (business_key, step)
);
CREATE UNLOGGED TABLE idem_run.ledger (
	xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
	backend_pid integer NOT NULL DEFAULT pg_backend_pid(),
	operation text NOT NULL,
	business_key text,
	written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- what the queue's tables may not keep: each delivery and ack
CREATE UNLOGGED TABLE idem_run.delivery (
	msg_id text NOT NULL,
	attempt integer NOT NULL,
	delivered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	backend_pid integer NOT NULL DEFAULT pg_backend_pid()
);
CREATE INDEX ON idem_run.delivery (msg_id);
CREATE UNLOGGED TABLE idem_run.ack (
	msg_id text NOT NULL,
	acked_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	backend_pid integer NOT NULL DEFAULT pg_backend_pid(),
	xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX ON idem_run.ack (msg_id);
-- the acks are counted from the last count's horizon on
CREATE INDEX ON idem_run.ack (xid);
-- the messages whose leases the plan holds, while held: a delivery of one
-- keeps its lease until kill-at ends it (the adapter's hold-lease and
-- expire sections); kept is the library's own lease setting, where the
-- hold changes it, to give back once the plan is done with the message
CREATE UNLOGGED TABLE idem_run.leased (
	msg_id text PRIMARY KEY,
	held boolean NOT NULL DEFAULT true,
	kept text
);
-- the statements on the queue's table, by server process, while kill-at
-- watches for the end of an attempt released from a stall (a row in
-- watch): its ack, or its next fetch
CREATE UNLOGGED TABLE idem_run.watch (since timestamptz NOT NULL);
CREATE UNLOGGED TABLE idem_run.touch (
	backend_pid integer NOT NULL DEFAULT pg_backend_pid(),
	at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- a session at an armed point takes a slot for its transaction (the
-- last, shared, when every other is taken) and waits on the slot's gate
-- while it holds the point's lock
-- @function hold(armed integer, step integer) RETURNS void
DECLARE
	slot integer := nullif(current_setting('idem_run.slot', true), '')::integer;
BEGIN
	IF slot IS NULL THEN
		slot := :slots;
		FOR i IN 0..:last_slot LOOP
			IF pg_try_advisory_xact_lock(:slot_class, i) THEN slot := i; EXIT; END IF;
		END LOOP;
		PERFORM set_config('idem_run.slot', slot::text, true);
	END IF;
	PERFORM pg_advisory_lock_shared(:point_class + step, armed);
	PERFORM pg_advisory_lock_shared(:gate_class, slot);
	PERFORM pg_advisory_unlock_shared(:gate_class, slot);
	PERFORM pg_advisory_unlock_shared(:point_class + step, armed);
END

-- the ack of a message ($1) of a business key ($2), which the adapter's
-- trigger calls inside the ack's transaction; the point of after-commit
-- only when the run may arm it: an unarmed point costs the writer nothing
-- @function acking(text, text) RETURNS void
DECLARE
	a integer;
BEGIN
:after_commit_point
	INSERT INTO idem_run.ack (msg_id) VALUES ($1);
END

-- @after-commit-point
	SELECT id INTO a FROM idem_run.armed WHERE step = :after_commit AND business_key = $2;
	IF FOUND THEN
		PERFORM idem_run.hold(a, CASE WHEN current_setting('idem_run.wrote', true) = 'on' THEN :ack_in_effect ELSE :after_commit END);
	END IF;

-- for the queues whose messages idem.published names: the kind ($1) and
-- the library's id ($2); messages idem did not publish are not the run's
-- @function acking_published(text, text) RETURNS void
DECLARE
	k text;
BEGIN
	SELECT business_key INTO k FROM idem.published WHERE kind = $1 AND msg_id = $2;
	IF FOUND THEN
		PERFORM idem_run.acking($2, k);
	END IF;
END

-- @function delivered(text, text, integer) RETURNS void
BEGIN
	IF EXISTS (SELECT FROM idem.published WHERE kind = $1 AND msg_id = $2) THEN
		INSERT INTO idem_run.delivery (msg_id, attempt) VALUES ($2, $3);
	END IF;
END

-- a statement on the queue's table, of any rows or none, which the
-- adapter's observe section reports: kept only while kill-at watches
-- @function touched() RETURNS trigger
BEGIN
	IF EXISTS (SELECT FROM idem_run.watch) THEN
		INSERT INTO idem_run.touch DEFAULT VALUES;
	END IF;
	RETURN NULL;
END

-- the deliveries of the queues whose tables keep none, as the adapters'
-- deliveries and deliveries-of-key sections read them
-- @ledger-deliveries
CREATE FUNCTION idem_run.ledger_deliveries(kind text, msg_ids text[])
RETURNS TABLE (msg_id text, job_id text, business_key text, attempt integer,
	delivered_at bigint, backend_pid integer, acked_at bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT d.msg_id, p.job_id, p.business_key, d.attempt,
	(extract(epoch FROM d.delivered_at) * 1000000)::bigint, d.backend_pid,
	CASE WHEN d.attempt = max(d.attempt) OVER (PARTITION BY d.msg_id) THEN
		(SELECT (extract(epoch FROM min(a.acked_at)) * 1000000)::bigint
		FROM idem_run.ack a WHERE a.msg_id = d.msg_id) END
FROM idem_run.delivery d JOIN idem.published p ON p.kind = $1 AND p.msg_id = d.msg_id
WHERE d.msg_id = ANY ($2) ORDER BY d.delivered_at, d.msg_id
$$;
CREATE FUNCTION idem_run.ledger_deliveries_of_key(kind text, queue text, business_key text)
RETURNS TABLE (msg_id text, job_id text, attempt integer, backend_pid integer)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
SELECT d.msg_id, p.job_id, d.attempt, d.backend_pid
FROM idem_run.delivery d JOIN idem.published p ON p.kind = $1 AND p.msg_id = d.msg_id
WHERE p.queue = $2 AND p.business_key = $3
ORDER BY d.delivered_at DESC, d.msg_id DESC
$$;

-- @function before_write() RETURNS trigger
DECLARE
	a integer;
BEGIN
	SELECT id INTO a FROM idem_run.armed WHERE step = :before_write AND business_key = :key;
	IF FOUND THEN
		PERFORM idem_run.hold(a, :before_write);
	END IF;
	RETURN NEW;
END

-- the ledger row; when the run may arm after-commit, the wrote section
-- tells an ack later in the same transaction that it is the effect's
-- @function record_write() RETURNS trigger
BEGIN
	INSERT INTO idem_run.ledger (operation, business_key) VALUES (TG_OP, :key);
:wrote
	RETURN NULL;
END

-- @wrote
	PERFORM set_config('idem_run.wrote', 'on', true);

-- once per point and transaction, however many rows it wrote
-- @function before_commit() RETURNS trigger
DECLARE
	a integer;
	held text := coalesce(current_setting('idem_run.held', true), '');
BEGIN
	SELECT id INTO a FROM idem_run.armed WHERE step = :before_commit AND business_key = :key;
	IF FOUND AND NOT a::text = ANY (string_to_array(held, ',')) THEN
		PERFORM set_config('idem_run.held', concat_ws(',', nullif(held, ''), a::text), true);
		PERFORM idem_run.hold(a, :before_commit);
	END IF;
	RETURN NULL;
END

-- @ledger-trigger
CREATE TRIGGER idem_run_ledger AFTER INSERT OR UPDATE ON :table
FOR EACH ROW EXECUTE FUNCTION idem_run.record_write();

-- @before-write-trigger
CREATE TRIGGER idem_run_before_write BEFORE INSERT OR UPDATE ON :table
FOR EACH ROW EXECUTE FUNCTION idem_run.before_write();

-- @before-commit-trigger
CREATE CONSTRAINT TRIGGER idem_run_before_commit AFTER INSERT OR UPDATE ON :table
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION idem_run.before_commit();
