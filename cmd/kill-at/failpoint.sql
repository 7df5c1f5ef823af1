-- The kill points and the effect ledger of one run of kill-at(1): kill-at's
-- own part of the schema idem_run (idem-sandbox(1), KILL POINTS AND
-- LEDGER), which failpoint.c installs in one transaction: first the part
-- the queue adapters call, lib/ledger.sql, which queue-check(1) installs
-- too; then the kill points here; the adapter's own observe and hold-lease
-- sections; then, when the effect table exists, its functions and
-- triggers.
--
-- Each section begins at a line "-- @name" and runs to the next, without
-- the blank lines and comments that end it: a comment above a section is
-- about that section. A section "-- @function NAME(ARGUMENTS) RETURNS
-- TYPE" is the body of a PL/pgSQL function idem_run.NAME, SECURITY
-- DEFINER, given to CREATE FUNCTION as a string literal once its
-- placeholders are filled, so that nothing filled in can end it
-- (lib/sql.h).
--
-- A placeholder :name stands for a value the program fills in: the
-- advisory lock classes and the steps of failpoint.h (:slot_class,
-- :gate_class, :point_class, :slots, :last_slot, :before_write,
-- :before_commit, :after_commit, :ack_in_effect); the effect table
-- (:table) and the business key of its row NEW (:key), both quoted for
-- SQL; and a section filled (:after_commit_point, in ledger.sql's
-- acking, with after-commit-point below; :wrote), alone on its line, or
-- no line when the run does not need it. Nothing but a function body may
-- hold :key.

-- @kill-points
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

-- the point after-commit, at the hook :after_commit_point of acking
-- (lib/ledger.sql), before the ack's row: $2 is the business key, a the
-- variable acking declares for it
-- @after-commit-point
	SELECT id INTO a FROM idem_run.armed WHERE step = :after_commit AND business_key = $2;
	IF FOUND THEN
		PERFORM idem_run.hold(a, CASE WHEN current_setting('idem_run.wrote', true) = 'on' THEN :ack_in_effect ELSE :after_commit END);
	END IF;

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
