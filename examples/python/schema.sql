-- The worker's own table, made anew: one confirmation per order. The
-- primary key on the business key is the guard that count-effects finds
-- and probes.
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS shop CASCADE;
CREATE SCHEMA shop;
CREATE TABLE shop.confirmations (
    order_id text PRIMARY KEY,
    job_id text NOT NULL);
