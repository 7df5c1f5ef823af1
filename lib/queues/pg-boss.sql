-- kind: pg-boss
-- library: pg-boss
-- install: its own migration, which new PgBoss(DATABASE_URL).start() runs; make it part of the worker's setup command (rehearse -s)
--
-- The adapter of pg-boss 10 (schema pgboss; idem-sandbox(1), QUEUE
-- ADAPTERS). A message is a row of pgboss.job of the queue's name; its id
-- is a UUID made from the job id and copy, so a rerun makes the same ids.
-- idem.published says which job and copy of the seed each one is.

-- @installed
SELECT to_regclass('pgboss.version') IS NOT NULL AND to_regclass('pgboss.job') IS NOT NULL
   AND to_regprocedure('pgboss.create_queue(text, json)') IS NOT NULL

-- @version
SELECT max(version)::text FROM pgboss.version

-- @prepare
-- the queue as createQueue() makes it, when the worker's setup did not
SELECT pgboss.create_queue(:'queue', '{}'::json)
WHERE NOT EXISTS (SELECT FROM pgboss.queue WHERE name = :'queue')

-- @publish
-- a copy already published with the same business key and payload is
-- passed over; with another, inserting it again in idem.published is a
-- unique violation
WITH input AS (
	SELECT u.job_id, u.copy, u.business_key, u.payload, u.ord,
	       md5('pg-boss' || chr(9) || :'queue' || chr(9) || u.job_id || chr(9) || u.copy)::uuid AS id
	FROM unnest($1::text[], $2::integer[], $3::text[], $4::jsonb[])
	     WITH ORDINALITY AS u(job_id, copy, business_key, payload, ord)
), known AS (
	SELECT i.ord, p.msg_id, p.enqueued_at
	FROM input i JOIN idem.published p ON p.kind = 'pg-boss' AND p.queue = :'queue'
	     AND p.job_id = i.job_id AND p.copy = i.copy
	     AND p.business_key = i.business_key AND p.payload = i.payload
), fresh AS (
	INSERT INTO idem.published (kind, queue, job_id, copy, msg_id, business_key, payload)
	SELECT 'pg-boss', :'queue', i.job_id, i.copy, i.id::text, i.business_key, i.payload
	FROM input i WHERE NOT EXISTS (SELECT FROM known k WHERE k.ord = i.ord)
	ORDER BY i.ord
	RETURNING job_id, copy, msg_id, enqueued_at
), jobs AS (
	-- the columns pg-boss's own send() sets, with the seed's retry policy:
	-- max_attempts attempts, a job active longer than the visibility
	-- timeout expired
	INSERT INTO pgboss.job (id, name, data, retry_limit, retry_delay, retry_backoff,
				expire_in, keep_until, dead_letter, policy)
	SELECT f.msg_id::uuid, q.name, i.payload, $6::integer - 1, coalesce(q.retry_delay, 0),
	       coalesce(q.retry_backoff, false), $5::bigint * interval '1 millisecond',
	       now() + coalesce(q.retention_minutes * interval '1 minute', interval '14 days'),
	       q.dead_letter, q.policy
	FROM fresh f JOIN input i USING (job_id, copy) JOIN pgboss.queue q ON q.name = :'queue'
)
SELECT i.ord, f.msg_id, (extract(epoch FROM f.enqueued_at) * 1000000)::bigint, true
FROM fresh f JOIN input i USING (job_id, copy)
UNION ALL
SELECT k.ord, k.msg_id, (extract(epoch FROM k.enqueued_at) * 1000000)::bigint, false FROM known k

-- @consume
-- what pg-boss 10's fetch (fetchNextJob, a batch of one) does: the next
-- job created or to retry and due, made active; a job started before
-- counts a retry. Its lease is the job's own expire_in, which publish
-- set: $1 is not used. Its attempt, as observe counts it.
WITH next AS (
	SELECT id FROM pgboss.job
	WHERE name = :'queue' AND state < 'active' AND start_after < now()
	ORDER BY priority DESC, created_on, id
	LIMIT 1
	FOR UPDATE SKIP LOCKED
)
UPDATE pgboss.job j SET state = 'active', started_on = now(),
	retry_count = CASE WHEN j.started_on IS NOT NULL THEN j.retry_count + 1 ELSE j.retry_count END
FROM next
WHERE j.name = :'queue' AND j.id = next.id AND $1::bigint IS NOT NULL
RETURNING j.id::text, j.retry_count + 1

-- @complete
-- what pg-boss 10's complete (completeJobs) does to the active job $1:
-- a row when it completed it
UPDATE pgboss.job SET completed_on = now(), state = 'completed', output = NULL
WHERE name = :'queue' AND id = $1::text::uuid AND state = 'active'
RETURNING id::text

-- @observe
-- a delivery: fetch sets the job active (retry_count counts the attempts
-- before); the ack: complete sets it completed, in pg-boss's own statement
CREATE FUNCTION idem_run.pgboss_delivered() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.delivered('pg-boss', NEW.id::text, NEW.retry_count + 1);
	RETURN NULL;
END
$$;
CREATE TRIGGER idem_run_delivered AFTER UPDATE OF state ON pgboss.job FOR EACH ROW
WHEN (NEW.name = :'queue' AND NEW.state = 'active' AND OLD.state < 'active')
EXECUTE FUNCTION idem_run.pgboss_delivered();
CREATE FUNCTION idem_run.pgboss_ack() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.acking_published('pg-boss', NEW.id::text);
	RETURN NULL;
END
$$;
CREATE TRIGGER idem_run_ack AFTER UPDATE OF state ON pgboss.job FOR EACH ROW
WHEN (NEW.name = :'queue' AND NEW.state = 'completed' AND OLD.state = 'active')
EXECUTE FUNCTION idem_run.pgboss_ack();
CREATE TRIGGER idem_run_touch AFTER UPDATE ON pgboss.job
FOR EACH STATEMENT EXECUTE FUNCTION idem_run.touched();

-- @hold-lease
-- a delivery of a message held in idem_run.leased expires in a day, not
-- after the seed's visibility timeout: in the row fetch returns, for
-- pg-boss's worker times its handler out after expire_in on its own (a
-- day, for a Node timer waits at most 24 days); kill-at ends the lease
-- (expire). The job's own expire_in is kept, and given back to its
-- deliveries once the plan no longer holds the message.
CREATE FUNCTION idem_run.pgboss_hold_lease() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	l idem_run.leased;
BEGIN
	SELECT * INTO l FROM idem_run.leased WHERE msg_id = NEW.id::text;
	IF NOT FOUND THEN
		RETURN NEW;
	ELSIF l.held THEN
		IF l.kept IS NULL THEN
			UPDATE idem_run.leased SET kept = OLD.expire_in::text WHERE msg_id = l.msg_id;
		END IF;
		NEW.expire_in := interval '1 day';
	ELSIF l.kept IS NOT NULL THEN
		NEW.expire_in := l.kept::interval;
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER idem_run_hold_lease BEFORE UPDATE OF state ON pgboss.job FOR EACH ROW
WHEN (NEW.name = :'queue' AND NEW.state = 'active' AND OLD.state < 'active')
EXECUTE FUNCTION idem_run.pgboss_hold_lease();

-- @expire
-- the lease of the deliveries $1 has run out; the rescue that follows
-- fails them by timeout, as pg-boss's own expiry would
UPDATE pgboss.job SET expire_in = interval '0'
WHERE name = :'queue' AND id = ANY ($1::text[]::uuid[]) AND state = 'active'
RETURNING id::text

-- @rescue
-- pg-boss's own expiry (failJobsByTimeout, without the dead letter), run
-- by kill-at as often as it looks instead of at pg-boss's maintenance
UPDATE pgboss.job SET
	state = CASE WHEN retry_count < retry_limit THEN 'retry'::pgboss.job_state
		     ELSE 'failed'::pgboss.job_state END,
	completed_on = CASE WHEN retry_count < retry_limit THEN NULL ELSE now() END,
	start_after = CASE
		WHEN retry_count = retry_limit THEN start_after
		WHEN NOT retry_backoff THEN now() + retry_delay * interval '1'
		ELSE now() + (retry_delay * 2 ^ least(16, retry_count + 1) / 2 +
			      retry_delay * 2 ^ least(16, retry_count + 1) / 2 * random()) * interval '1'
		END,
	output = '{ "value": { "message": "job failed by timeout in active state" } }'::jsonb
WHERE name = :'queue' AND state = 'active' AND (started_on + expire_in) < now()
RETURNING id::text

-- @deliveries
-- from the run's own rows, which the triggers of observe keep
SELECT * FROM idem_run.ledger_deliveries('pg-boss', $1)

-- @deliveries-of-key
SELECT * FROM idem_run.ledger_deliveries_of_key('pg-boss', :'queue', $1)

-- @unacked
SELECT count(*) FROM pgboss.job
WHERE name = :'queue' AND id = ANY ($1::text[]::uuid[]) AND state <> 'completed'

-- @unacked-list
SELECT j.id::text, p.job_id, p.copy, j.retry_count + CASE WHEN j.started_on IS NULL THEN 0 ELSE 1 END
FROM pgboss.job j JOIN idem.published p ON p.kind = 'pg-boss' AND p.msg_id = j.id::text
WHERE j.name = :'queue' AND j.id = ANY ($1::text[]::uuid[]) AND j.state <> 'completed'
ORDER BY p.job_id, p.copy

-- @hold-back
-- the messages of the faults, not started while the baseline runs
UPDATE pgboss.job SET start_after = 'infinity'
WHERE name = :'queue' AND id = ANY ($1::text[]::uuid[]) AND state = 'created'

-- @let-go
UPDATE pgboss.job SET start_after = now()
WHERE name = :'queue' AND id = ANY ($1::text[]::uuid[]) AND start_after = 'infinity'

-- @setup-schemas
-- the setup command runs pg-boss's migration in a schema it owns
SELECT format('ALTER SCHEMA pgboss OWNER TO %I', $1::text)
WHERE to_regnamespace('pgboss') IS NOT NULL

-- @account
-- the sandbox account's rights ($1, the role): what pg-boss's own
-- statements do to fetch, complete and fail jobs, and to publish; no
-- DELETE or TRUNCATE (pg-boss's maintenance, which deletes, is not the
-- worker's). Its queue only: every queue's jobs share pgboss.job, so row
-- level security keeps the role to the rows of its queue, and the
-- partition of every other queue is not granted at all.
SELECT s FROM (
	SELECT 1, format('GRANT USAGE ON SCHEMA pgboss TO %I', $1::text)
	UNION ALL
	SELECT 2, format('REVOKE ALL ON ALL TABLES IN SCHEMA pgboss FROM %I', $1::text)
	UNION ALL
	SELECT 3, format('GRANT SELECT, INSERT, UPDATE ON %s TO %I',
			 string_agg(c.oid::regclass::text, ', ' ORDER BY c.relname), $1::text)
	FROM pg_class c
	WHERE c.relnamespace = to_regnamespace('pgboss') AND c.relkind IN ('r', 'p')
	  AND (NOT c.relispartition
	       OR pg_get_expr(c.relpartbound, c.oid) = format('FOR VALUES IN (%L)', :'queue'))
	HAVING count(*) > 0
	UNION ALL
	SELECT 4, format('ALTER TABLE %1$s ENABLE ROW LEVEL SECURITY; '
			 'DROP POLICY IF EXISTS %2$I ON %1$s; '
			 'CREATE POLICY %2$I ON %1$s TO %3$I USING (name = %4$L) WITH CHECK (name = %4$L)',
			 c.oid::regclass::text, 'idem_account_' || $1::text, $1::text, :'queue')
	FROM pg_class c
	WHERE c.relnamespace = to_regnamespace('pgboss') AND c.relkind IN ('r', 'p')
	  AND NOT c.relispartition
	  AND c.relname IN ('job', 'archive', 'queue', 'schedule', 'subscription')
) v(n, s) WHERE to_regnamespace('pgboss') IS NOT NULL ORDER BY n

-- @denied
-- and reading the jobs of every other queue, in their own partitions
SELECT o, p FROM (
	SELECT 1, o, p FROM (VALUES ('pgboss.job', 'TRUNCATE'), ('pgboss.job', 'DELETE'),
		('pgboss.archive', 'TRUNCATE'), ('pgboss.archive', 'DELETE'),
		('pgboss.queue', 'TRUNCATE'), ('pgboss.queue', 'DELETE'),
		('idem.message', 'SELECT')) v(o, p)
	UNION ALL
	SELECT 2, c.oid::regclass::text, 'SELECT'
	FROM pg_class c
	WHERE c.relnamespace = to_regnamespace('pgboss') AND c.relispartition
	  AND pg_get_expr(c.relpartbound, c.oid) <> format('FOR VALUES IN (%L)', :'queue')
) v(n, o, p) ORDER BY n, o
