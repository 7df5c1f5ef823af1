-- kind: jobs-table
-- library: the team's jobs table work.jobs
-- install: the worker's own schema, examples/jobs-table/schema.sql; make it the setup command (rehearse -s 'psql -Xq -v ON_ERROR_STOP=1 -f examples/jobs-table/schema.sql')
--
-- The adapter of a team's own queue: no library, a table work.jobs that
-- its workers claim with UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP
-- LOCKED LIMIT 1), setting a lease (locked_until) and counting the attempt
-- (attempts), and complete by setting done_at (schema.sql, worker.py). A
-- message is a row of work.jobs of the seed's queue (the column queue);
-- its msg_id is the row's id as text. Written from idem-sandbox(1), QUEUE
-- ADAPTERS and KILL POINTS AND LEDGER; idem(7), WRITING AN ADAPTER, walks
-- through it.
--
-- The table keeps no delivery log and no seed job id: the triggers of
-- observe write the run's deliveries and acks (idem_run.delivered(),
-- idem_run.acking_published()), and idem.published says which job and
-- copy of the seed each row is. The functions below are made in the
-- schema idem_run, so that kill-at's DROP SCHEMA idem_run CASCADE at the
-- end of the run takes them and their triggers away.

-- @installed
SELECT to_regclass('work.jobs') IS NOT NULL
   AND (SELECT count(*) FROM pg_attribute
        WHERE attrelid = to_regclass('work.jobs') AND NOT attisdropped
          AND attname IN ('id', 'queue', 'payload', 'attempts', 'locked_until', 'done_at')) = 6

-- @version
-- the table has no version of its own: its shape is its version, the
-- columns and their types, so a change of the table makes the records
-- made before it stale (verify-record --history)
SELECT 'work.jobs ' || left(md5(string_agg(attname || ' ' || format_type(atttypid, atttypmod),
                                           ', ' ORDER BY attnum)), 12)
FROM pg_attribute
WHERE attrelid = to_regclass('work.jobs') AND attnum > 0 AND NOT attisdropped

-- @publish
-- a row of work.jobs per message, as the team's code enqueues one (queue
-- and payload; the rest by default), its id taken first so that each
-- element knows its row; a copy already published with the same business
-- key and payload is passed over, with another inserting it again in
-- idem.published is a unique violation. The table has no per-job lease
-- or attempt limit: the visibility timeout ($5) is the worker's lease,
-- given to it by kill-at, and the attempts ($6) are not limited.
WITH input AS (
	SELECT u.job_id, u.copy, u.business_key, u.payload, u.ord
	FROM unnest($1::text[], $2::integer[], $3::text[], $4::jsonb[])
	     WITH ORDINALITY AS u(job_id, copy, business_key, payload, ord)
), known AS (
	SELECT i.ord, p.msg_id, p.enqueued_at
	FROM input i JOIN idem.published p ON p.kind = 'jobs-table' AND p.queue = :'queue'
	     AND p.job_id = i.job_id AND p.copy = i.copy
	     AND p.business_key = i.business_key AND p.payload = i.payload
), added AS MATERIALIZED (
	SELECT i.ord, i.job_id, i.copy, i.business_key, i.payload,
	       nextval(pg_get_serial_sequence('work.jobs', 'id')) AS id
	FROM input i WHERE NOT EXISTS (SELECT FROM known k WHERE k.ord = i.ord)
	ORDER BY i.ord
), jobs AS (
	INSERT INTO work.jobs (id, queue, payload)
	SELECT a.id, :'queue', a.payload FROM added a ORDER BY a.ord
), fresh AS (
	INSERT INTO idem.published (kind, queue, job_id, copy, msg_id, business_key, payload)
	SELECT 'jobs-table', :'queue', a.job_id, a.copy, a.id::text, a.business_key, a.payload
	FROM added a ORDER BY a.ord
	RETURNING job_id, copy, msg_id, enqueued_at
)
SELECT a.ord, f.msg_id, (extract(epoch FROM f.enqueued_at) * 1000000)::bigint, true
FROM fresh f JOIN added a USING (job_id, copy)
UNION ALL
SELECT k.ord, k.msg_id, (extract(epoch FROM k.enqueued_at) * 1000000)::bigint, false FROM known k

-- @observe
-- a delivery: a claim counts the attempt (attempts grows); the ack: the
-- completion sets done_at, in the worker's own statement. Every statement
-- that claims or completes is an UPDATE of work.jobs.
CREATE FUNCTION idem_run.jobs_table_delivered() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.delivered('jobs-table', NEW.id::text, NEW.attempts);
	RETURN NULL;
END
$$;
CREATE TRIGGER idem_run_delivered AFTER UPDATE OF attempts ON work.jobs FOR EACH ROW
WHEN (NEW.attempts > OLD.attempts AND NEW.queue = :'queue')
EXECUTE FUNCTION idem_run.jobs_table_delivered();
CREATE FUNCTION idem_run.jobs_table_ack() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.acking_published('jobs-table', NEW.id::text);
	RETURN NULL;
END
$$;
CREATE TRIGGER idem_run_ack AFTER UPDATE OF done_at ON work.jobs FOR EACH ROW
WHEN (OLD.done_at IS NULL AND NEW.done_at IS NOT NULL AND NEW.queue = :'queue')
EXECUTE FUNCTION idem_run.jobs_table_ack();
CREATE TRIGGER idem_run_touch AFTER UPDATE ON work.jobs
FOR EACH STATEMENT EXECUTE FUNCTION idem_run.touched();

-- @hold-lease
-- a claim of a message held in idem_run.leased leases it until kill-at
-- ends the lease (expire), not until now() + the worker's lease: the
-- worker sets locked_until in its claim, and this trigger, before the
-- claim's row is written, makes it infinity. The worker's own lease comes
-- back with the next claim once the plan no longer holds the message.
CREATE FUNCTION idem_run.jobs_table_hold_lease() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF EXISTS (SELECT FROM idem_run.leased WHERE msg_id = NEW.id::text AND held) THEN
		NEW.locked_until := 'infinity';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER idem_run_hold_lease BEFORE UPDATE OF attempts ON work.jobs FOR EACH ROW
WHEN (NEW.attempts > OLD.attempts AND NEW.queue = :'queue')
EXECUTE FUNCTION idem_run.jobs_table_hold_lease();

-- @expire
-- the lease of the deliveries $1 ends now: no lease, so the next claim
-- takes the job; no rescue section, for the claim itself takes a job
-- whose lease has run out
UPDATE work.jobs SET locked_until = NULL
WHERE id = ANY ($1::text[]::bigint[]) AND queue = :'queue' AND done_at IS NULL AND attempts > 0
RETURNING id::text

-- @deliveries
-- from the run's own rows, which the triggers of observe keep
SELECT * FROM idem_run.ledger_deliveries('jobs-table', $1)

-- @deliveries-of-key
SELECT * FROM idem_run.ledger_deliveries_of_key('jobs-table', :'queue', $1)

-- @unacked
SELECT count(*) FROM work.jobs WHERE id = ANY ($1::text[]::bigint[]) AND done_at IS NULL

-- @unacked-list
SELECT j.id::text, p.job_id, p.copy, j.attempts
FROM work.jobs j JOIN idem.published p ON p.kind = 'jobs-table' AND p.msg_id = j.id::text
WHERE j.id = ANY ($1::text[]::bigint[]) AND j.done_at IS NULL
ORDER BY p.job_id, p.copy

-- @hold-back
-- the messages never claimed, leased until infinity: no claim takes them
UPDATE work.jobs SET locked_until = 'infinity'
WHERE id = ANY ($1::text[]::bigint[]) AND queue = :'queue' AND done_at IS NULL AND attempts = 0

-- @let-go
-- only those hold-back leased: a claimed message's lease is hold-lease's
UPDATE work.jobs SET locked_until = NULL
WHERE id = ANY ($1::text[]::bigint[]) AND attempts = 0 AND locked_until = 'infinity'

-- @consume
-- the worker's claim, for a controller that works the queue itself: $1
-- the lease in milliseconds; the message and its attempt
UPDATE work.jobs
SET locked_until = now() + $1::bigint * interval '1 millisecond', attempts = attempts + 1
WHERE id = (SELECT id FROM work.jobs
	    WHERE queue = :'queue' AND done_at IS NULL
	      AND (locked_until IS NULL OR locked_until < now())
	    ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id::text, attempts

-- @complete
-- the worker's completion of the message $1: a row when it completed it
UPDATE work.jobs SET done_at = now(), locked_until = NULL
WHERE id = $1::text::bigint AND done_at IS NULL
RETURNING id::text

-- @setup-schemas
-- the setup command makes the schema work again, as its owner
SELECT format('ALTER SCHEMA work OWNER TO %I', $1::text)
WHERE to_regnamespace('work') IS NOT NULL

-- @account
-- the sandbox account's rights ($1, the role): claim and complete (SELECT
-- and UPDATE, with FOR UPDATE), enqueue (INSERT, the id's sequence); no
-- DELETE or TRUNCATE, for a job is done by done_at, never deleted. A row
-- policy keeps the role to the rows of its queue: the jobs of every
-- queue share the table.
SELECT s FROM (VALUES
	(1, format('GRANT USAGE ON SCHEMA work TO %I', $1::text)),
	(2, format('GRANT SELECT, INSERT, UPDATE ON work.jobs TO %I', $1::text)),
	(3, format('GRANT USAGE, SELECT ON SEQUENCE work.jobs_id_seq TO %I', $1::text)),
	(4, format('ALTER TABLE work.jobs ENABLE ROW LEVEL SECURITY; '
		   'DROP POLICY IF EXISTS %1$I ON work.jobs; '
		   'CREATE POLICY %1$I ON work.jobs TO %2$I USING (queue = %3$L) WITH CHECK (queue = %3$L)',
		   'idem_account_' || $1::text, $1::text, :'queue'))
) v(n, s) ORDER BY n

-- @denied
-- what the account may not do: purge the queue, delete a job (its history),
-- read every idem queue's messages
SELECT o, p FROM (VALUES ('work.jobs', 'TRUNCATE'), ('work.jobs', 'DELETE'),
	('idem.message', 'SELECT')) v(o, p)
