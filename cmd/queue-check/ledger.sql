-- The part of the schema idem_run that the queue adapters' sections call,
-- as idem-sandbox(1), KILL POINTS AND LEDGER, states it (normative): the
-- delivery and ack rows, the leases held, the touches, and the functions
-- of the adapters' triggers and of their deliveries sections. kill-at(1)
-- installs the whole schema, with the kill points; queue-check(1) installs
-- this part, then the adapter's observe and hold-lease sections, in one
-- transaction, and holds no run lock: the sandbox is its own.
SET LOCAL client_min_messages = warning;
DROP SCHEMA IF EXISTS idem_run CASCADE;
CREATE SCHEMA idem_run;
COMMENT ON SCHEMA idem_run IS 'queue-check: the deliveries and acks of an adapter under check';
CREATE UNLOGGED TABLE idem_run.delivery (
	msg_id text NOT NULL,
	attempt integer NOT NULL,
	delivered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	backend_pid integer NOT NULL DEFAULT pg_backend_pid()
);
CREATE UNLOGGED TABLE idem_run.ack (
	msg_id text NOT NULL,
	acked_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	backend_pid integer NOT NULL DEFAULT pg_backend_pid(),
	xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE UNLOGGED TABLE idem_run.leased (
	msg_id text PRIMARY KEY,
	held boolean NOT NULL DEFAULT true,
	kept text
);
CREATE UNLOGGED TABLE idem_run.watch (since timestamptz NOT NULL);
CREATE UNLOGGED TABLE idem_run.touch (
	backend_pid integer NOT NULL DEFAULT pg_backend_pid(),
	at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION idem_run.acking(text, text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	INSERT INTO idem_run.ack (msg_id) VALUES ($1);
END
$$;
CREATE FUNCTION idem_run.acking_published(text, text) RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	k text;
BEGIN
	SELECT business_key INTO k FROM idem.published WHERE kind = $1 AND msg_id = $2;
	IF FOUND THEN
		PERFORM idem_run.acking($2, k);
	END IF;
END
$$;
CREATE FUNCTION idem_run.delivered(text, text, integer) RETURNS void LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF EXISTS (SELECT FROM idem.published WHERE kind = $1 AND msg_id = $2) THEN
		INSERT INTO idem_run.delivery (msg_id, attempt) VALUES ($2, $3);
	END IF;
END
$$;
CREATE FUNCTION idem_run.touched() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF EXISTS (SELECT FROM idem_run.watch) THEN
		INSERT INTO idem_run.touch DEFAULT VALUES;
	END IF;
	RETURN NULL;
END
$$;
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
