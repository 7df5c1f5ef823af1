#!/usr/bin/python3
"""A worker of one's own on idem's queue, with psycopg2: it takes a job with
idem.read(), writes one confirmation row per order in a transaction of its
own, then acks in a statement of its own, and reports each step to kill-at
(idem-step(7)). Its guard: the primary key on the business key, order_id,
and INSERT ... ON CONFLICT DO NOTHING."""
import os
import signal
import socket
import sys
import time

import psycopg2

_step = None


def step(name, job_id, attempt):
    """One line to kill-at, one line back; at a kill point, no answer comes."""
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


def work(cur, msg_id, job_id, attempt, payload):
    step("consumed", job_id, attempt)
    step("before-write", job_id, attempt)
    cur.execute("BEGIN")
    cur.execute("INSERT INTO shop.confirmations (order_id, job_id) VALUES (%s, %s) "
                "ON CONFLICT (order_id) DO NOTHING", (payload["order_id"], job_id))
    branch = "inserted" if cur.rowcount == 1 else "conflict-noop"
    print(f"branch={branch} job={job_id} attempt={attempt} msg_id={msg_id}",
          file=sys.stderr, flush=True)
    step("before-commit", job_id, attempt)
    cur.execute("COMMIT")
    step("after-commit", job_id, attempt)
    step("before-ack", job_id, attempt)
    cur.execute("SELECT idem.ack(%s)", (msg_id,))
    step("acked", job_id, attempt)


def main():
    queue = os.environ["IDEM_QUEUE"]
    vt = os.environ.get("IDEM_VISIBILITY_TIMEOUT_MS", "30000") + " milliseconds"
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    conn = psycopg2.connect(os.environ.get("DATABASE_URL", ""))
    conn.autocommit = True
    cur = conn.cursor()
    while not stopping:
        cur.execute("SELECT msg_id, job_id, read_ct, payload "
                    "FROM idem.read(%s, %s::interval)", (queue, vt))
        row = cur.fetchone()
        if row is None:
            time.sleep(0.05)
            continue
        work(cur, *row)
    conn.close()


if __name__ == "__main__":
    main()
