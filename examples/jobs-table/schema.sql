-- A team's own queue, no library: a jobs table that workers claim with
-- SELECT ... FOR UPDATE SKIP LOCKED and a lease in locked_until, and the
-- effect it drives, one invoice line per job. Made anew at every run.
--
-- A job is done when done_at is set, not when its row is deleted: the row
-- stays as the history of the job (attempts, when it was done), and the
-- adapter sees the completion as one update of done_at (adapter.sql).
--
-- The guard: invoice_lines_once, a unique constraint on the business key
-- (invoice_id, line_no), which count-effects finds and probes. Set up with
-- psql -v guard=check-then-insert, the table is made without it, for the
-- worker's check-then-insert mode: a check and an insert, nothing in the
-- database to stop two of them at once.
\if :{?guard}
\else
\set guard unique
\endif
SELECT :'guard' = 'unique' AS constrained,
       :'guard' IN ('unique', 'check-then-insert') AS known \gset
\if :known
\else
\warn 'schema.sql: guard must be unique or check-then-insert'
SELECT 1/0;
\endif
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS work CASCADE;
DROP SCHEMA IF EXISTS billing CASCADE;

CREATE SCHEMA work;
CREATE TABLE work.jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    payload jsonb NOT NULL,
    attempts integer NOT NULL DEFAULT 0,    -- claims so far; the attempt is attempts after a claim
    locked_until timestamptz,               -- the lease: claimed and not done until then
    done_at timestamptz,                    -- set once the job's work is done: its completion
    created_at timestamptz NOT NULL DEFAULT now());
-- the claim's index: the jobs not done of a queue, oldest first
CREATE INDEX jobs_ready ON work.jobs (queue, id) WHERE done_at IS NULL;

CREATE SCHEMA billing;
CREATE TABLE billing.invoice_lines (
    line_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    invoice_id text NOT NULL,
    line_no integer NOT NULL,
    amount_cents integer NOT NULL,
    job_id bigint NOT NULL,                 -- work.jobs.id of the job that wrote it
    created_at timestamptz NOT NULL DEFAULT clock_timestamp());
\if :constrained
ALTER TABLE billing.invoice_lines
    ADD CONSTRAINT invoice_lines_once UNIQUE (invoice_id, line_no);
\endif
