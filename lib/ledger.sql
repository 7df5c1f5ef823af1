-- The part of the schema idem_run that the queue adapters call, as
-- idem-sandbox(1), KILL POINTS AND LEDGER, states it (normative): the
-- delivery and ack rows, the leases held, the touches, and the functions
-- of the adapters' triggers and of their deliveries sections. One
-- definition for the two programs that install it, each in one
-- transaction, before the adapter's observe and hold-lease sections:
-- kill-at(1), then its own part, the kill points (cmd/kill-at/failpoint.sql);
-- queue-check(1) alone, holding no run lock: the sandbox is its own. Each
-- comments on the schema in its own part.
--
-- The file is made of sections as failpoint.sql is (lib/sql.h): each
-- section begins at a line "-- @name" and runs to the next; a section
-- "-- @function NAME(ARGUMENTS) RETURNS TYPE" is the body of a PL/pgSQL
-- function idem_run.NAME, SECURITY DEFINER (idem_sql_put). Both programs
-- install every section, in order.
--
-- One placeholder, :after_commit_point in acking, alone on its line: the
-- hook of kill-at's point after-commit, which kill-at fills with its
-- section after-commit-point (failpoint.sql: it calls idem_run.hold and
-- reads the variable a declared here) when the run may arm that point,
-- and with nothing otherwise; queue-check always with nothing. An
-- unfilled point leaves no line: an ack costs nothing for it.

-- @schema
SET LOCAL client_min_messages = warning;
DROP SCHEMA IF EXISTS idem_run CASCADE;
CREATE SCHEMA idem_run;
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
