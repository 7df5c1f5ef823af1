#!/usr/bin/python3
"""A team's worker on its own jobs table (schema.sql), no queue library:
psycopg2, one job at a time. It claims the oldest job of its queue that is
not done and not leased, with FOR UPDATE SKIP LOCKED, leasing it until
now() + the lease and counting the attempt; writes the job's invoice line
in a transaction of its own; then marks the job done in a statement of its
own. It reports each step to kill-at (idem-step(7)) and logs each branch.

Its guard against writing a line twice, by --guard or JOBS_GUARD:
  unique             INSERT ... ON CONFLICT DO NOTHING on the business key,
                     which the constraint invoice_lines_once enforces;
  check-then-insert  look for the line first and insert when there is none:
                     no constraint, so two attempts at once both insert (a
                     bad guard, kept to show the rehearsal catching it; set
                     up the table with psql -v guard=check-then-insert)."""
import argparse
import os
import signal
import socket
import sys
import time

import psycopg2

_step = None


def step(name, job_id, attempt):
    """One line to kill-at, one line back; at a kill point, no answer comes.
    Without IDEM_STEP_SOCK, as in production, it does nothing."""
    global _step
    path = os.environ.get("IDEM_STEP_SOCK")
    if not path:
        return
    if _step is None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        _step = (sock, sock.makefile("rb"))
    esc = lambda s: (str(s).replace("\\", "\\\\").replace("\t", "\\t")
                     .replace("\n", "\\n").replace("\r", "\\r"))
    _step[0].sendall(f"step\t{esc(name)}\t{esc(job_id)}\t{attempt}\n".encode())
    if _step[1].readline() != b"go\n":
        raise ConnectionError(f"step {name}: the controller hung up")


def branch(name, job_id, attempt, payload):
    # msg_id= is the job's id in work.jobs: kill-at gives the line to the
    # attempt of that message, whatever the seed calls the job
    print(f"branch={name} attempt={attempt} msg_id={job_id} "
          f"invoice={payload['invoice_id']} line={payload['line_no']}",
          file=sys.stderr, flush=True)


CLAIM = """
UPDATE work.jobs
SET locked_until = now() + %(lease_ms)s * interval '1 millisecond',
    attempts = attempts + 1
WHERE id = (SELECT id FROM work.jobs
            WHERE queue = %(queue)s AND done_at IS NULL
              AND (locked_until IS NULL OR locked_until < now())
            ORDER BY id
            FOR UPDATE SKIP LOCKED
            LIMIT 1)
RETURNING id, attempts, payload"""


def write_line(cur, guard, job_id, attempt, p):
    """The effect, in a transaction of its own."""
    key = (p["invoice_id"], p["line_no"])
    cur.execute("BEGIN")
    if guard == "check-then-insert":
        cur.execute("SELECT 1 FROM billing.invoice_lines "
                    "WHERE invoice_id = %s AND line_no = %s", key)
        if cur.fetchone() is not None:
            branch("found-existing", job_id, attempt, p)
            cur.execute("COMMIT")
            return
        step("before-write", job_id, attempt)
        cur.execute("INSERT INTO billing.invoice_lines "
                    "(invoice_id, line_no, amount_cents, job_id) VALUES (%s, %s, %s, %s)",
                    key + (p["amount_cents"], job_id))
        branch("inserted", job_id, attempt, p)
    else:
        step("before-write", job_id, attempt)
        cur.execute("INSERT INTO billing.invoice_lines "
                    "(invoice_id, line_no, amount_cents, job_id) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (invoice_id, line_no) DO NOTHING",
                    key + (p["amount_cents"], job_id))
        branch("inserted" if cur.rowcount == 1 else "conflict-noop", job_id, attempt, p)
    step("before-commit", job_id, attempt)
    cur.execute("COMMIT")


def work(cur, guard, job_id, attempt, payload):
    step("consumed", job_id, attempt)
    write_line(cur, guard, job_id, attempt, payload)
    step("after-commit", job_id, attempt)
    step("before-ack", job_id, attempt)
    cur.execute("UPDATE work.jobs SET done_at = now(), locked_until = NULL "
                "WHERE id = %s AND done_at IS NULL", (job_id,))
    step("acked", job_id, attempt)


def main():
    ap = argparse.ArgumentParser(description="work the jobs of one queue of work.jobs")
    ap.add_argument("--guard", choices=("unique", "check-then-insert"),
                    default=os.environ.get("JOBS_GUARD", "unique"))
    ap.add_argument("--queue", default=os.environ.get("IDEM_QUEUE", "invoice-line"))
    ap.add_argument("--lease-ms", type=int,
                    default=int(os.environ.get("IDEM_VISIBILITY_TIMEOUT_MS", "30000")))
    args = ap.parse_args()
    if args.guard not in ("unique", "check-then-insert"):
        ap.error(f"JOBS_GUARD: {args.guard}: unique or check-then-insert")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    conn = psycopg2.connect(os.environ.get("DATABASE_URL", ""))
    conn.autocommit = True
    cur = conn.cursor()
    while not stopping:
        # the claim is a statement, so a transaction, of its own: the
        # attempt counts even when the work that follows is rolled back
        cur.execute(CLAIM, {"lease_ms": args.lease_ms, "queue": args.queue})
        row = cur.fetchone()
        if row is None:
            time.sleep(0.05)
            continue
        work(cur, args.guard, *row)
    conn.close()


if __name__ == "__main__":
    main()
