-- kind: idem
-- library: idem's sandbox queue
-- install: idem-sandbox start installs it with the sandbox
--
-- The adapter of idem's own queue (idem-sandbox(1), QUEUE ADAPTERS). Each
-- section begins at a line "-- @name"; :'queue' stands for the queue's name
-- as a quoted literal, and $1, $2, ... for the parameters the section's
-- caller passes, as QUEUE ADAPTERS lists them.

-- @installed
SELECT to_regclass('idem.message') IS NOT NULL AND to_regprocedure('idem.send_batch(text, text[], text[], jsonb[], integer[])') IS NOT NULL

-- @version
SELECT schema_version::text FROM idem.sandbox

-- @publish
SELECT b.ord, b.msg_id::text, (extract(epoch FROM b.enqueued_at) * 1000000)::bigint, b.published
FROM idem.send_batch(:'queue', $1, $3, $4, $2) b

-- @copy
COPY idem.message (queue, job_id, copy, business_key, payload) FROM STDIN

-- @published-after
SELECT job_id, copy, msg_id, enqueued_at
FROM idem.publication WHERE queue = :'queue' AND msg_id > $1 ORDER BY msg_id

-- @published-span
SELECT lo.msg_id, hi.msg_id,
       (extract(epoch FROM lo.enqueued_at) * 1000000)::bigint,
       (extract(epoch FROM hi.enqueued_at) * 1000000)::bigint
FROM (SELECT) one
LEFT JOIN LATERAL (SELECT msg_id, enqueued_at FROM idem.publication
                   WHERE queue = :'queue' AND msg_id > $1 ORDER BY msg_id LIMIT 1) lo ON true
LEFT JOIN LATERAL (SELECT msg_id, enqueued_at FROM idem.publication
                   WHERE queue = :'queue' AND msg_id > $1 ORDER BY msg_id DESC LIMIT 1) hi ON true

-- @consume
-- what a worker's fetch does: the next visible message, hidden for the
-- lease ($1, milliseconds); its attempt
SELECT msg_id::text, read_ct FROM idem.read(:'queue', $1::bigint * interval '1 millisecond', 1)

-- @complete
-- the ack of message $1: a row when this call acked it
SELECT $1::text WHERE idem.ack($1::text::bigint)

-- @observe
CREATE FUNCTION idem_run.idem_ack() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.acking(OLD.msg_id::text, OLD.business_key);
	RETURN NEW;
END
$$;
CREATE TRIGGER idem_run_ack BEFORE UPDATE OF acked_at ON idem.message FOR EACH ROW
WHEN (OLD.acked_at IS NULL AND NEW.acked_at IS NOT NULL AND OLD.queue = :'queue')
EXECUTE FUNCTION idem_run.idem_ack();
CREATE TRIGGER idem_run_touch AFTER UPDATE ON idem.message
FOR EACH STATEMENT EXECUTE FUNCTION idem_run.touched();

-- @hold-lease
-- a delivery of a message held in idem_run.leased is hidden until
-- kill-at ends its lease, not until now() + the worker's visibility
-- timeout
CREATE FUNCTION idem_run.idem_hold_lease() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF EXISTS (SELECT FROM idem_run.leased WHERE msg_id = NEW.msg_id::text AND held) THEN
		NEW.visible_at := 'infinity';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER idem_run_hold_lease BEFORE UPDATE OF read_ct ON idem.message FOR EACH ROW
WHEN (NEW.read_ct > OLD.read_ct AND OLD.queue = :'queue')
EXECUTE FUNCTION idem_run.idem_hold_lease();

-- @expire
-- the lease of the deliveries $1 ends now: the queue delivers them again
UPDATE idem.message SET visible_at = clock_timestamp()
WHERE msg_id = ANY ($1::text[]::bigint[]) AND acked_at IS NULL AND read_ct > 0
RETURNING msg_id::text

-- @deliveries
SELECT d.msg_id::text, m.job_id, m.business_key, d.read_ct,
       (extract(epoch FROM d.delivered_at) * 1000000)::bigint, d.backend_pid,
       CASE WHEN d.read_ct = m.read_ct THEN (extract(epoch FROM m.acked_at) * 1000000)::bigint END
FROM idem.delivery d JOIN idem.message m USING (msg_id)
WHERE d.msg_id = ANY ($1::text[]::bigint[]) ORDER BY d.delivered_at, d.msg_id

-- @deliveries-of-key
SELECT d.msg_id::text, m.job_id, d.read_ct, d.backend_pid
FROM idem.delivery d JOIN idem.message m USING (msg_id)
WHERE m.business_key = $1 AND m.queue = :'queue'
ORDER BY d.delivered_at DESC, d.msg_id DESC

-- @unacked
SELECT count(*) FROM idem.message WHERE msg_id = ANY ($1::text[]::bigint[]) AND acked_at IS NULL

-- @unacked-list
SELECT msg_id::text, job_id, copy, read_ct FROM idem.message
WHERE msg_id = ANY ($1::text[]::bigint[]) AND acked_at IS NULL ORDER BY msg_id

-- @hold-back
-- the messages of the faults, hidden while the baseline runs
UPDATE idem.message SET visible_at = 'infinity'
WHERE msg_id = ANY ($1::text[]::bigint[]) AND acked_at IS NULL AND read_ct = 0

-- @let-go
UPDATE idem.message SET visible_at = clock_timestamp()
WHERE msg_id = ANY ($1::text[]::bigint[]) AND visible_at = 'infinity'

-- @account
-- the sandbox account's rights on the queue ($1, the role): publish and
-- consume through idem's functions, on this queue only; read on the
-- delivery log
SELECT s FROM (VALUES
	(1, format('GRANT USAGE ON SCHEMA idem TO %I', $1::text)),
	(2, format('GRANT SELECT ON idem.sandbox, idem.delivery TO %I', $1::text)),
	(3, format('GRANT EXECUTE ON FUNCTION idem.read(text, interval, integer), idem.ack(bigint), '
		   'idem.send(text, text, text, jsonb, integer), '
		   'idem.send_batch(text, text[], text[], jsonb[], integer[]) TO %I', $1::text)),
	-- this rehearsal's queue, and no other
	(4, format('DELETE FROM idem.queue_account WHERE account = %L AND queue <> %L; '
		   'INSERT INTO idem.queue_account (queue, account) VALUES (%L, %L) '
		   'ON CONFLICT DO NOTHING', $1::text, :'queue', :'queue', $1::text))
) v(n, s) ORDER BY n

-- @denied
-- what the sandbox account may not do: purge the queue or its archive,
-- or read the messages of every queue
SELECT o, p FROM (VALUES ('idem.message', 'TRUNCATE'), ('idem.message', 'DELETE'),
	('idem.message', 'UPDATE'), ('idem.message', 'SELECT'), ('idem.delivery', 'TRUNCATE'),
	('idem.delivery', 'DELETE'), ('idem.published', 'TRUNCATE'), ('idem.published', 'DELETE'),
	('idem.queue_account', 'INSERT')) v(o, p)
