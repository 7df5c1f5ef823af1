-- kind: pg-boss
-- library: pg-boss
-- install: its own migration, which new PgBoss(DATABASE_URL).start() runs; make it part of the worker's setup command (rehearse -s)
--
-- The adapter of pg-boss 10, 11 and 12 (schema pgboss; idem-sandbox(1),
-- QUEUE ADAPTERS, LIBRARY VERSIONS). A message is a row of pgboss.job of the
-- queue's name; its id is a UUID made from the job id and copy, so a rerun
-- makes the same ids. idem.published says which job and copy of the seed
-- each one is.
--
-- The majors are told apart by pgboss.version: 24 is pg-boss 10, whose job
-- rows keep their lease as expire_in (an interval), whose queues have a
-- partition of pgboss.job each, named in pgboss.queue.partition_name, and
-- whose statements name pgboss.job. 25 and up are pg-boss 11 and 12 (26 is
-- 11.1, 46 is 12.38): the lease is expire_seconds (whole seconds), the
-- retention retention_seconds and deletion_seconds, a queue's jobs are in
-- the table pgboss.queue.table_name names (job_common, the default
-- partition every queue shares, unless it was made with partition: true),
-- and pg-boss's statements name that table, not pgboss.job.

-- @installed
SELECT to_regclass('pgboss.version') IS NOT NULL AND to_regclass('pgboss.job') IS NOT NULL
   -- json in pg-boss 10, jsonb in 11 and 12
   AND (to_regprocedure('pgboss.create_queue(text, json)') IS NOT NULL
	OR to_regprocedure('pgboss.create_queue(text, jsonb)') IS NOT NULL)

-- @version
SELECT max(version)::text FROM pgboss.version

-- @prepare
-- the queue as createQueue() makes it, when the worker's setup did not
-- (its options a literal of no type, which is json to pg-boss 10's
-- create_queue and jsonb to 11's and 12's)
SELECT pgboss.create_queue(:'queue', '{"policy": "standard"}')
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
	-- timeout expired. The row is made by its columns' names, for the
	-- majors name them apart (a column a major does not have is passed
	-- over); the queue's, read as JSON for the same reason.
	INSERT INTO pgboss.job
	SELECT r.*
	FROM fresh f JOIN input i USING (job_id, copy)
	JOIN (SELECT q.*, to_jsonb(q) AS options FROM pgboss.queue q) q ON q.name = :'queue'
	CROSS JOIN (SELECT max(version) <= 24 AS pgboss_10 FROM pgboss.version) v
	CROSS JOIN LATERAL jsonb_populate_record(NULL::pgboss.job, jsonb_build_object(
		'id', f.msg_id, 'name', q.name, 'data', i.payload, 'priority', 0, 'state', 'created',
		'retry_limit', $6::integer - 1, 'retry_count', 0, 'retry_delay', coalesce(q.retry_delay, 0),
		'retry_backoff', coalesce(q.retry_backoff, false), 'start_after', now(),
		'created_on', now(), 'dead_letter', q.dead_letter, 'policy', q.policy) ||
	    CASE WHEN v.pgboss_10 THEN jsonb_build_object(
		'expire_in', $5::bigint * interval '1 millisecond',
		'keep_until', now() + coalesce((q.options->>'retention_minutes')::integer
					       * interval '1 minute', interval '14 days'))
	    ELSE jsonb_build_object(
		-- pg-boss 11 and 12: whole seconds, the timeout's rounded up
		'expire_seconds', ceil($5::bigint / 1000.0)::integer,
		'keep_until', now() + (q.options->>'retention_seconds')::integer * interval '1 second',
		'deletion_seconds', (q.options->>'deletion_seconds')::integer,
		'retry_delay_max', q.options->'retry_delay_max',
		'heartbeat_seconds', q.options->'heartbeat_seconds',
		'blocked', false, 'blocking', false, 'pending_dependencies', 0) END) r
)
SELECT i.ord, f.msg_id, (extract(epoch FROM f.enqueued_at) * 1000000)::bigint, true
FROM fresh f JOIN input i USING (job_id, copy)
UNION ALL
SELECT k.ord, k.msg_id, (extract(epoch FROM k.enqueued_at) * 1000000)::bigint, false FROM known k

-- @consume
-- what pg-boss's fetch (fetchNextJob, a batch of one) does, in 10 and,
-- but for 12's heartbeat, in 11 and 12: the next job created or to retry
-- and due, made active; a job started before counts a retry. Its lease
-- is the job's own expire_in (12: expire_seconds), which publish set: $1
-- is not used. Its attempt, as observe counts it.
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
-- what pg-boss's complete (completeJobs) does to the active job $1, in
-- 10 as in 12:
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
-- pg-boss 11 and 12 update the queue's own table, a partition, and a
-- statement on a partition does not fire pgboss.job's statement triggers
DO $$
DECLARE
	part regclass;
BEGIN
	FOR part IN SELECT relid FROM pg_partition_tree('pgboss.job') WHERE isleaf LOOP
		EXECUTE format('CREATE TRIGGER idem_run_touch AFTER UPDATE ON %s '
			       'FOR EACH STATEMENT EXECUTE FUNCTION idem_run.touched()', part);
	END LOOP;
END
$$;
-- whether pgboss is pg-boss 10's (schema version 24), for the statements
-- that name its columns
CREATE FUNCTION idem_run.pgboss_10() RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
	SELECT max(version) <= 24 FROM pgboss.version
$$;
-- the expire section's statement, in the major's columns
CREATE FUNCTION idem_run.pgboss_expire(queue text, msg_ids text[]) RETURNS SETOF text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF idem_run.pgboss_10() THEN
		RETURN QUERY UPDATE pgboss.job SET expire_in = interval '0'
		WHERE name = queue AND id = ANY (msg_ids::uuid[]) AND state = 'active'
		RETURNING id::text;
	ELSE
		RETURN QUERY UPDATE pgboss.job SET expire_seconds = 0
		WHERE name = queue AND id = ANY (msg_ids::uuid[]) AND state = 'active'
		RETURNING id::text;
	END IF;
END
$$;
-- the rescue section's statement: pg-boss's own failJobsByTimeout, in the
-- major's columns and retry delay (12 deletes the job and inserts it again
-- as retry, with the same id; this updates it to the same values)
CREATE FUNCTION idem_run.pgboss_rescue(queue text) RETURNS SETOF text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF idem_run.pgboss_10() THEN
		RETURN QUERY UPDATE pgboss.job SET
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
		WHERE name = queue AND state = 'active' AND (started_on + expire_in) < now()
		RETURNING id::text;
	ELSE
		RETURN QUERY UPDATE pgboss.job SET
			state = CASE WHEN retry_count < retry_limit THEN 'retry'::pgboss.job_state
				     ELSE 'failed'::pgboss.job_state END,
			completed_on = CASE WHEN retry_count < retry_limit THEN NULL ELSE now() END,
			start_after = CASE
				WHEN retry_count = retry_limit THEN start_after
				WHEN NOT retry_backoff THEN now() + retry_delay * interval '1'
				ELSE now() + least(retry_delay_max, greatest(retry_delay, 1) * (
					2 ^ least(16, retry_count + 1) / 2 +
					2 ^ least(16, retry_count + 1) / 2 * random())) * interval '1s'
				END,
			heartbeat_on = NULL,
			output = '{ "value": { "message": "job timed out" } }'::jsonb
		WHERE name = queue AND state = 'active'
		  AND (started_on + expire_seconds * interval '1s') < now()
		RETURNING id::text;
	END IF;
END
$$;

-- @hold-lease
-- a delivery of a message held in idem_run.leased expires in a day, not
-- after the seed's visibility timeout: in the row fetch returns, for
-- pg-boss's worker times its handler out after expire_in on its own (a
-- day, for a Node timer waits at most 24 days); kill-at ends the lease
-- (expire). The job's own expire_in (pg-boss 10) or expire_seconds (11
-- and 12) is kept, and given back to its deliveries once the plan no
-- longer holds the message.
CREATE FUNCTION idem_run.pgboss_hold_lease() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	l idem_run.leased;
	pgboss_10 boolean := idem_run.pgboss_10();
BEGIN
	SELECT * INTO l FROM idem_run.leased WHERE msg_id = NEW.id::text;
	IF NOT FOUND THEN
		RETURN NEW;
	ELSIF l.held THEN
		IF l.kept IS NULL THEN
			UPDATE idem_run.leased
			SET kept = CASE WHEN pgboss_10 THEN to_jsonb(OLD)->>'expire_in'
					ELSE to_jsonb(OLD)->>'expire_seconds' END
			WHERE msg_id = l.msg_id;
		END IF;
		IF pgboss_10 THEN
			NEW.expire_in := interval '1 day';
		ELSE
			NEW.expire_seconds := 86400;
		END IF;
	ELSIF l.kept IS NOT NULL THEN
		IF pgboss_10 THEN
			NEW.expire_in := l.kept::interval;
		ELSE
			NEW.expire_seconds := l.kept::integer;
		END IF;
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER idem_run_hold_lease BEFORE UPDATE OF state ON pgboss.job FOR EACH ROW
WHEN (NEW.name = :'queue' AND NEW.state = 'active' AND OLD.state < 'active')
EXECUTE FUNCTION idem_run.pgboss_hold_lease();

-- @expire
-- the lease of the deliveries $1 has run out; the rescue that follows
-- fails them by timeout, as pg-boss's own expiry would: expire_in (10) or
-- expire_seconds (11 and 12) zero, by idem_run.pgboss_expire of observe
SELECT id FROM idem_run.pgboss_expire(:'queue', $1::text[]) AS id

-- @rescue
-- pg-boss's own expiry (failJobsByTimeout, without the dead letter), run
-- by kill-at as often as it looks instead of at pg-boss's maintenance; the
-- major's statement, by idem_run.pgboss_rescue of observe
SELECT id FROM idem_run.pgboss_rescue(:'queue') AS id

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
-- partition of every other queue is not granted at all. The rows of
-- pg-boss's own queue __pgboss__send-it are the role's too: the start()
-- of a worker makes that queue and works it for pg-boss's scheduler
-- (pg-boss 12 stops when it may not; 10 goes on). The queue's own
-- partition is the one for its name; in pg-boss 11 and 12, a queue made
-- without partition: true has none, and its jobs are in the default
-- partition, job_common, with those of every such queue. Those majors
-- name that table in their statements, where row level security is the
-- table's own, not pgboss.job's.
WITH part AS (
	SELECT relid AS oid, pg_get_expr(c.relpartbound, c.oid) AS bound
	FROM pg_partition_tree(to_regclass('pgboss.job')) t JOIN pg_class c ON c.oid = t.relid
	WHERE t.isleaf AND t.level > 0
), own AS (
	SELECT oid FROM part WHERE bound = format('FOR VALUES IN (%L)', :'queue')
	UNION ALL
	SELECT oid FROM part WHERE bound = 'DEFAULT'
	  AND NOT EXISTS (SELECT FROM part WHERE bound = format('FOR VALUES IN (%L)', :'queue'))
)
SELECT s FROM (
	SELECT 1, format('GRANT USAGE ON SCHEMA pgboss TO %I', $1::text)
	UNION ALL
	SELECT 2, format('REVOKE ALL ON ALL TABLES IN SCHEMA pgboss FROM %I', $1::text)
	UNION ALL
	SELECT 3, format('GRANT SELECT, INSERT, UPDATE ON %s TO %I',
			 string_agg(c.oid::regclass::text, ', ' ORDER BY c.relname), $1::text)
	FROM pg_class c
	WHERE c.relnamespace = to_regnamespace('pgboss') AND c.relkind IN ('r', 'p')
	  AND (NOT c.relispartition OR c.oid IN (SELECT oid FROM own))
	HAVING count(*) > 0
	UNION ALL
	SELECT 4, format('ALTER TABLE %1$s ENABLE ROW LEVEL SECURITY; '
			 'DROP POLICY IF EXISTS %2$I ON %1$s; '
			 'CREATE POLICY %2$I ON %1$s TO %3$I USING (name IN (%4$L, %5$L)) '
			 'WITH CHECK (name IN (%4$L, %5$L))',
			 c.oid::regclass::text, 'idem_account_' || $1::text, $1::text, :'queue',
			 '__pgboss__send-it')
	FROM pg_class c
	WHERE c.relnamespace = to_regnamespace('pgboss') AND c.relkind IN ('r', 'p')
	  AND ((NOT c.relispartition
		AND c.relname IN ('job', 'archive', 'queue', 'schedule', 'subscription'))
	       OR c.oid IN (SELECT oid FROM own WHERE pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'))
) v(n, s) WHERE to_regnamespace('pgboss') IS NOT NULL ORDER BY n

-- @denied
-- and reading the jobs of every other queue, in their own partitions
-- (pgboss.archive is pg-boss 10's only: 11 and 12 keep finished jobs in
-- the job tables; job_common, where a queue of theirs not partitioned
-- is, holds other queues' rows too, which row level security hides)
WITH part AS (
	SELECT relid AS oid, pg_get_expr(c.relpartbound, c.oid) AS bound
	FROM pg_partition_tree(to_regclass('pgboss.job')) t JOIN pg_class c ON c.oid = t.relid
	WHERE t.isleaf AND t.level > 0
)
SELECT o, p FROM (
	SELECT 1, o, p FROM (VALUES ('pgboss.job', 'TRUNCATE'), ('pgboss.job', 'DELETE'),
		('pgboss.archive', 'TRUNCATE'), ('pgboss.archive', 'DELETE'),
		('pgboss.queue', 'TRUNCATE'), ('pgboss.queue', 'DELETE'),
		('idem.message', 'SELECT')) v(o, p)
	WHERE o <> 'pgboss.archive' OR to_regclass('pgboss.archive') IS NOT NULL
	UNION ALL
	SELECT 2, oid::regclass::text, 'SELECT' FROM part
	WHERE bound <> format('FOR VALUES IN (%L)', :'queue')
	  AND NOT (bound = 'DEFAULT'
		   AND NOT EXISTS (SELECT FROM part WHERE bound = format('FOR VALUES IN (%L)', :'queue')))
) v(n, o, p) ORDER BY n, o
