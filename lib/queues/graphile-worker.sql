-- kind: graphile-worker
-- library: graphile-worker
-- install: its own migration, which runMigrations() or the first run() of a worker runs; make it part of the worker's setup command (rehearse -s)
--
-- The adapter of graphile-worker 0.16 and 0.18 (schema graphile_worker;
-- idem-sandbox(1), QUEUE ADAPTERS, LIBRARY VERSIONS), whose last migrations
-- are 18 and 20: 19 and 20 change no table (20 makes add_job anew, with the
-- same arguments), so no section branches on the version. The queue's
-- name is the task identifier; a message is a job added with add_job()
-- and no job_key (a key would replace the job instead of adding a copy).
-- graphile-worker deletes a job once done, so idem.published and the
-- run's ledger keep what its tables do not.

-- @installed
SELECT to_regclass('graphile_worker._private_jobs') IS NOT NULL
   AND to_regclass('graphile_worker.migrations') IS NOT NULL
   AND to_regprocedure('graphile_worker.add_job(text, json, text, timestamptz, integer, text, integer, text[], text)') IS NOT NULL

-- @version
SELECT max(id)::text FROM graphile_worker.migrations

-- @publish
-- a copy already published with the same business key and payload is
-- passed over; with another, inserting it again in idem.published is a
-- unique violation
WITH input AS (
	SELECT u.job_id, u.copy, u.business_key, u.payload, u.ord
	FROM unnest($1::text[], $2::integer[], $3::text[], $4::jsonb[])
	     WITH ORDINALITY AS u(job_id, copy, business_key, payload, ord)
), known AS (
	SELECT i.ord, p.msg_id, p.enqueued_at
	FROM input i JOIN idem.published p ON p.kind = 'graphile-worker' AND p.queue = :'queue'
	     AND p.job_id = i.job_id AND p.copy = i.copy
	     AND p.business_key = i.business_key AND p.payload = i.payload
), added AS MATERIALIZED (
	SELECT i.ord, i.job_id, i.copy, i.business_key, i.payload,
	       (graphile_worker.add_job(:'queue', i.payload::json,
					max_attempts => $6::integer)).id::text AS msg_id
	FROM input i WHERE NOT EXISTS (SELECT FROM known k WHERE k.ord = i.ord)
	ORDER BY i.ord
), fresh AS (
	INSERT INTO idem.published (kind, queue, job_id, copy, msg_id, business_key, payload)
	SELECT 'graphile-worker', :'queue', a.job_id, a.copy, a.msg_id, a.business_key, a.payload
	FROM added a ORDER BY a.ord
	RETURNING job_id, copy, msg_id, enqueued_at
)
SELECT a.ord, f.msg_id, (extract(epoch FROM f.enqueued_at) * 1000000)::bigint, true
FROM fresh f JOIN added a USING (job_id, copy)
UNION ALL
SELECT k.ord, k.msg_id, (extract(epoch FROM k.enqueued_at) * 1000000)::bigint, false FROM known k

-- @consume
-- what graphile-worker's getJob does (0.16 as 0.18), for the queue's task: the
-- next available job that is due, locked (and its named queue, if any)
-- by a worker of idem's, its attempts counted. Its lease is the lock,
-- which only the rescue or expire ends: $1 is not used.
WITH j AS (
	SELECT jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id
	FROM graphile_worker._private_jobs AS jobs
	WHERE jobs.is_available = true AND jobs.run_at <= now()
	  AND jobs.task_id IN (SELECT id FROM graphile_worker._private_tasks WHERE identifier = :'queue')
	  AND (jobs.job_queue_id IS NULL OR jobs.job_queue_id IN (
		SELECT id FROM graphile_worker._private_job_queues AS job_queues
		WHERE job_queues.is_available = true
		FOR UPDATE SKIP LOCKED))
	ORDER BY jobs.priority ASC, jobs.run_at ASC
	LIMIT 1
	FOR UPDATE SKIP LOCKED
), q AS (
	UPDATE graphile_worker._private_job_queues AS job_queues
	SET locked_by = 'idem', locked_at = now()
	FROM j WHERE job_queues.id = j.job_queue_id
)
UPDATE graphile_worker._private_jobs AS jobs
SET attempts = jobs.attempts + 1, locked_by = 'idem', locked_at = now()
FROM j WHERE jobs.id = j.id AND $1::bigint IS NOT NULL
RETURNING jobs.id::text, jobs.attempts

-- @complete
-- what graphile-worker's completeJob does (0.16 as 0.18) to job $1: deletes it,
-- and unlocks its named queue; a row when it deleted it
WITH j AS (
	DELETE FROM graphile_worker._private_jobs AS jobs
	WHERE jobs.id = $1::text::bigint AND jobs.task_id IN
		(SELECT id FROM graphile_worker._private_tasks WHERE identifier = :'queue')
	RETURNING *
), q AS (
	UPDATE graphile_worker._private_job_queues AS job_queues
	SET locked_by = NULL, locked_at = NULL
	FROM j WHERE job_queues.id = j.job_queue_id AND job_queues.locked_by = j.locked_by
)
SELECT id::text FROM j

-- @observe
-- a delivery: a worker locks the job and counts the attempt; the ack: it
-- deletes the job it holds locked (removing a job that is not locked is
-- no ack)
CREATE FUNCTION idem_run.graphile_delivered() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.delivered('graphile-worker', NEW.id::text, NEW.attempts);
	RETURN NULL;
END
$$;
CREATE TRIGGER idem_run_delivered AFTER UPDATE OF attempts ON graphile_worker._private_jobs
FOR EACH ROW WHEN (NEW.attempts > OLD.attempts AND NEW.locked_at IS NOT NULL)
EXECUTE FUNCTION idem_run.graphile_delivered();
CREATE FUNCTION idem_run.graphile_ack() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	PERFORM idem_run.acking_published('graphile-worker', OLD.id::text);
	RETURN NULL;
END
$$;
CREATE TRIGGER idem_run_ack AFTER DELETE ON graphile_worker._private_jobs
FOR EACH ROW WHEN (OLD.locked_at IS NOT NULL)
EXECUTE FUNCTION idem_run.graphile_ack();
CREATE TRIGGER idem_run_touch AFTER UPDATE OR DELETE ON graphile_worker._private_jobs
FOR EACH STATEMENT EXECUTE FUNCTION idem_run.touched();

-- @rescue
-- graphile-worker's own release of stale locks (resetLockedAt), after the
-- seed's visibility timeout ($1, milliseconds) instead of 4 hours; the
-- lock is the lease, so the messages held in idem_run.leased, whose
-- leases kill-at ends (expire), are passed over: no hold-lease section
UPDATE graphile_worker._private_jobs j
SET locked_at = NULL, locked_by = NULL, run_at = greatest(j.run_at, now())
FROM graphile_worker._private_tasks t
WHERE t.id = j.task_id AND t.identifier = :'queue'
  AND j.locked_at < now() - $1::bigint * interval '1 millisecond'
  AND NOT EXISTS (SELECT FROM idem_run.leased l WHERE l.msg_id = j.id::text AND l.held)
RETURNING j.id::text

-- @expire
-- the lease of the deliveries $1 ends now: their locks released, as the
-- rescue does
UPDATE graphile_worker._private_jobs
SET locked_at = NULL, locked_by = NULL, run_at = greatest(run_at, now())
WHERE id = ANY ($1::text[]::bigint[]) AND locked_at IS NOT NULL
RETURNING id::text

-- @deliveries
-- from the run's own rows, which the triggers of observe keep
SELECT * FROM idem_run.ledger_deliveries('graphile-worker', $1)

-- @deliveries-of-key
SELECT * FROM idem_run.ledger_deliveries_of_key('graphile-worker', :'queue', $1)

-- @unacked
SELECT count(*) FROM graphile_worker._private_jobs WHERE id = ANY ($1::text[]::bigint[])

-- @unacked-list
SELECT j.id::text, p.job_id, p.copy, j.attempts
FROM graphile_worker._private_jobs j
JOIN idem.published p ON p.kind = 'graphile-worker' AND p.msg_id = j.id::text
WHERE j.id = ANY ($1::text[]::bigint[]) ORDER BY p.job_id, p.copy

-- @hold-back
-- the messages of the faults, not run while the baseline runs
UPDATE graphile_worker._private_jobs SET run_at = 'infinity'
WHERE id = ANY ($1::text[]::bigint[]) AND locked_at IS NULL AND attempts = 0

-- @let-go
UPDATE graphile_worker._private_jobs SET run_at = now()
WHERE id = ANY ($1::text[]::bigint[]) AND run_at = 'infinity'

-- @setup-schemas
-- the setup command runs graphile-worker's migration in a schema it owns
SELECT format('ALTER SCHEMA graphile_worker OWNER TO %I', $1::text)
WHERE to_regnamespace('graphile_worker') IS NOT NULL

-- @account
-- the sandbox account's rights ($1, the role): what graphile-worker's
-- own statements do to take, complete (a DELETE of the job it holds
-- locked: its ack) and fail jobs, and to publish; no TRUNCATE
SELECT s FROM (VALUES
	(1, format('GRANT USAGE ON SCHEMA graphile_worker TO %I', $1::text)),
	(2, format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA graphile_worker TO %I',
		   $1::text)),
	(3, format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA graphile_worker TO %I',
		   $1::text)),
	-- its private tables keep row level security on, with no policy: a
	-- role that does not own them sees no row, unless a policy lets it
	-- see the rows of its own task
	(4, format('DROP POLICY IF EXISTS %1$I ON graphile_worker._private_tasks; '
		   'CREATE POLICY %1$I ON graphile_worker._private_tasks TO %2$I '
		   'USING (identifier = %3$L) WITH CHECK (identifier = %3$L)',
		   'idem_account_' || $1::text, $1::text, :'queue')),
	(5, format('DROP POLICY IF EXISTS %1$I ON graphile_worker._private_jobs; '
		   'CREATE POLICY %1$I ON graphile_worker._private_jobs TO %2$I '
		   'USING (task_id IN (SELECT id FROM graphile_worker._private_tasks '
		   'WHERE identifier = %3$L))', 'idem_account_' || $1::text, $1::text, :'queue')),
	(6, format('DROP POLICY IF EXISTS %1$I ON graphile_worker._private_job_queues; '
		   'CREATE POLICY %1$I ON graphile_worker._private_job_queues TO %2$I USING (true)',
		   'idem_account_' || $1::text, $1::text)),
	(7, format('DROP POLICY IF EXISTS %1$I ON graphile_worker._private_known_crontabs; '
		   'CREATE POLICY %1$I ON graphile_worker._private_known_crontabs TO %2$I USING (true)',
		   'idem_account_' || $1::text, $1::text))
) v(n, s) WHERE to_regnamespace('graphile_worker') IS NOT NULL ORDER BY n

-- @denied
SELECT o, p FROM (VALUES ('graphile_worker._private_jobs', 'TRUNCATE'),
	('graphile_worker._private_job_queues', 'TRUNCATE'),
	('graphile_worker._private_tasks', 'TRUNCATE'), ('idem.message', 'SELECT')) v(o, p)
