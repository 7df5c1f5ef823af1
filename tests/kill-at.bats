#!/usr/bin/env bats
# kill-at and idem-worker against the real sandbox: the matrix of guards and
# faults of idem-worker(1), a worker in another language, and no process
# left behind whatever happens to kill-at or its workers.

load helper
load sandbox-tests

# The seed of job a of one invoice line (tests/fixtures/seeds/matrix.yaml,
# whose short visibility timeout keeps retries quick) with the scenario
# named, none for none, and the expect row that goes with it; same-key
# adds job b of the same line.
seed_for() {
	local scenario=$1
	sed '/^expect:/d' "$BATS_TEST_DIRNAME/fixtures/seeds/matrix.yaml"
	case $scenario in
	same-key)
		echo '  - { id: b, payload: { invoice_id: inv-1, line_no: 1, amount_cents: 100, currency: EUR } }' ;;
	esac
	case $scenario in
	duplicate-publish) echo 'scenarios: [ { name: dup, jobs: [a], duplicates: 1, within: 50ms } ]' ;;
	after-commit | before-commit | external-call)
		echo "scenarios: [ { name: kill, jobs: [a], kill: $scenario, attempt: 1 } ]" ;;
	race) echo 'scenarios: [ { name: race, jobs: [a], race: before-write } ]' ;;
	lost-reply) echo 'scenarios: [ { name: lost, jobs: [a], vendor: lost-reply } ]' ;;
	late-reply) echo 'scenarios: [ { name: late, jobs: [a], vendor: late-reply, delay: 3s } ]' ;;
	forget-keys)
		echo 'scenarios: [ { name: forget, jobs: [a], vendor: forget-keys, forget_after: 24h, kill: external-call } ]' ;;
	esac
	case $scenario in
	external-call | lost-reply | late-reply | forget-keys)
		echo 'external: { name: payment charge, key: [invoice_id, line_no], honours_idempotency_key: true }'
		echo 'expect: { effects: 1, external: 1 }' ;;
	*) echo 'expect: { effects: 1 }' ;;
	esac
}

# Runs one cell of the matrix, with the external guard $external if set;
# sets effects and calls.
cell() {
	local guard=$1 scope=$2 scenario=$3
	queue_reset
	seed_for "$scenario" >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g "$guard" -k "$scope"
	# the sequential cells force no fault: drafts
	seed-gen $(case $scenario in none | same-key) echo --draft ;; esac) "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	# a baseline that fails (two jobs of one key in no scenario, without a
	# guard) is the finding, exit 1, with its effects in the table
	kill-at -D 20s -- idem-worker -g "$guard" -k "$scope" ${external:+-x "$external"} \
		<"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err" ||
		{ [ $? = 1 ] && grep -q '^baseline	failed	' "$out"; } || {
		cat "$err" >&2
		return 1
	}
	effects=$(sql "SELECT count(*) FROM demo.invoice_lines WHERE invoice_id = 'inv-1' AND line_no = 1")
	# the charges: the vendor double's, when the seed declares the call,
	# else idem-worker's stand-in table
	if grep -q '^external	' "$out"; then
		calls=$(awk -F '\t' '$1 == "call" && $12 == "yes"' "$out" | wc -l)
	else
		calls=$(sql "SELECT count(*) FROM demo.provider_calls")
	fi
}

# check GUARD SCOPE SCENARIO EFFECTS [CALLS]
check() {
	cell "$1" "$2" "$3"
	if [ "$effects" != "$4" ] || { [ -n "${5:-}" ] && [ "$calls" != "$5" ]; }; then
		echo "guard $1${external:+ -x $external}, key scope $2, $3: $effects effect rows and $calls vendor calls; expected $4 ${5:+and $5 calls}" >&2
		grep -E '^(kill|attempt|log)' "$out" >&2
		return 1
	fi
}

# xcheck EXTERNAL-GUARD GUARD SCOPE SCENARIO EFFECTS CALLS
xcheck() {
	local external=$1
	shift
	check "$@"
}

@test "matrix: no guard duplicates under every fault but a kill before commit" {
	check none business duplicate-publish 2
	check none business after-commit 2
	check none business before-commit 1
	check none business external-call 2 2
	check none business race 2
	check none business same-key 2
	check none business lost-reply 2 2
	check none business late-reply 2 2
	check none business forget-keys 2 2
}

@test "matrix: check-then-insert holds sequentially and loses the race" {
	check check-then-insert business duplicate-publish 1
	check check-then-insert business after-commit 1
	check check-then-insert business before-commit 1
	check check-then-insert business external-call 1 1
	check check-then-insert business race 2
	check check-then-insert business same-key 1
	check check-then-insert business lost-reply 1 1
	grep -q 'branch=pending-reconciled job=a attempt=2 ' "$out"
	check check-then-insert business late-reply 1 1
	check check-then-insert business forget-keys 1 1
}

@test "matrix: an in-memory guard forgets on restart and is not shared" {
	check memory business duplicate-publish 1
	check memory business after-commit 2
	check memory business before-commit 1
	check memory business external-call 2 2
	check memory business race 2
	check memory business same-key 2
	check memory business lost-reply 2 2
	check memory business late-reply 2 2
	check memory business forget-keys 2 2
}

@test "matrix: a unique constraint on the business key holds everywhere" {
	check unique business duplicate-publish 1 1
	check unique business after-commit 1 1
	check unique business before-commit 1 1
	check unique business external-call 1 1
	grep -q 'branch=pending-reconciled ' "$out"
	assert_equal "$(sql "SELECT status FROM demo.pending_calls")" reconciled
	check unique business race 1 1
	grep -q 'branch=conflict-noop' "$out"
	check unique business same-key 1 1
	check unique business lost-reply 1 1
	# the retry asked the vendor, which had the charge whose answer was lost
	grep -q 'branch=pending-reconciled job=a attempt=2 ' "$out"
	check unique business late-reply 1 1
	assert_equal "$(awk -F '\t' '$1 == "call" && $5 == "POST" { print $11 }' "$out")" late
	check unique business forget-keys 1 1
}

@test "matrix: a unique constraint on the job id lets two jobs of one event through" {
	check unique job duplicate-publish 1
	check unique job after-commit 1
	check unique job before-commit 1
	check unique job external-call 1 1
	check unique job race 1
	check unique job same-key 2
	check unique job lost-reply 1 1
	check unique job late-reply 1 1
	check unique job forget-keys 1 1
}

@test "matrix: an outbox row in the effect's transaction holds like a unique key" {
	check outbox business duplicate-publish 1
	check outbox business after-commit 1
	check outbox business before-commit 1
	check outbox business external-call 1 1
	check outbox business race 1
	check outbox business same-key 1
	check outbox business lost-reply 1 1
	check outbox business late-reply 1 1
	check outbox business forget-keys 1 1
}

@test "matrix: the external guard decides the charges, whatever guards the line" {
	xcheck idempotency-key none business external-call 2 1
	# the double took the business key as the idempotency key, and replayed
	assert_equal "$(awk -F '\t' '$1 == "call" { print $7, $11 }' "$out" | tr '\n' ,)" \
		'["inv-1",1] killed,["inv-1",1] replayed,'
	assert_equal "$(sql "SELECT count(*) FROM demo.pending_calls")" 0
	xcheck pending-row none business external-call 2 1
	grep -q 'branch=pending-reconciled job=a attempt=2 ' "$out"
	assert_equal "$(sql "SELECT status, owner FROM demo.pending_calls")" 'reconciled|billing-oncall'
	xcheck none unique business external-call 1 2
	assert_equal "$(sql "SELECT count(*) FROM demo.pending_calls")" 0
	xcheck none unique business duplicate-publish 1 2
	xcheck idempotency-key unique business external-call 1 1
	xcheck idempotency-key unique business same-key 1 1
	xcheck idempotency-key unique job same-key 2 2
	# the answer that never came back: a stable key is replayed, until the
	# vendor forgets it; a key made per call is charged again at once
	xcheck idempotency-key unique business lost-reply 1 1
	assert_equal "$(awk -F '\t' '$1 == "call" { print $7, $11 }' "$out" | tr '\n' ,)" \
		'["inv-1",1] lost,["inv-1",1] replayed,'
	xcheck idempotency-key unique business late-reply 1 1
	xcheck idempotency-key unique business forget-keys 1 2
	assert_equal "$(awk -F '\t' '$1 == "forgot" { print $3, $4 }' "$out")" '["inv-1",1] ["inv-1",1]'
	xcheck call-key unique business lost-reply 1 2
	assert_equal "$(awk -F '\t' '$1 == "call" { print $7 }' "$out" | sort -u | grep -c '^call-')" 2
	xcheck call-key unique business late-reply 1 2
	xcheck call-key unique business forget-keys 1 2
	xcheck call-key unique business external-call 1 2
	xcheck none unique business lost-reply 1 2
	xcheck pending-row unique business lost-reply 1 1
	xcheck pending-row unique business late-reply 1 1
	# without -x, none and memory call with no guard, the others with a pending row
	check none business external-call 2 2
	assert_equal "$(sql "SELECT count(*) FROM demo.pending_calls")" 0
	check unique business external-call 1 1
	assert_equal "$(sql "SELECT count(*) FROM demo.pending_calls")" 1
}

@test "a kill lands exactly at its step; the retry comes once the killed worker is gone, not after the visibility timeout, and is acked" {
	check unique business after-commit 1
	assert_equal "$(rows_of kill "$out")" 1
	grep -q "^kill	kill	a	1	after-commit	[0-9]*	[^	]*	socket$" "$out"
	assert_equal "$(awk -F '\t' '$1 == "step" && $8 == "kill" { print $5, $6, $7, $9 }' "$out")" "after-commit a 1 socket"
	# nothing after the kill point in attempt 1
	assert_equal "$(awk -F '\t' '$1 == "step" && $6 == "a" && $7 == 1 { s = $5 } END { print s }' "$out")" after-commit
	# attempt 2 ran clean and acked
	awk -F '\t' '$1 == "attempt" && $2 == "a" && $4 == 2 && $8 != "\\N" && $10 ~ /conflict-noop/ { ok = 1 } END { exit !ok }' "$out"
	# kill-at ended the killed delivery's lease once the worker was gone,
	# after the kill and before the retry's delivery: the retry did not
	# wait for the visibility timeout
	assert_equal "$(awk -F '\t' '$1 == "lease" { print $3, $4, $5, $6 }' "$out")" "1 a 1 kill"
	killed=$(awk -F '\t' '$1 == "kill" { print $7 }' "$out")
	ended=$(awk -F '\t' '$1 == "lease" { print $2 }' "$out")
	second=$(awk -F '\t' '$1 == "attempt" && $4 == 2 { print $6 }' "$out")
	[[ "$killed" < "$ended" && "$ended" < "$second" ]]
	# recovery: from the kill to the clean retry's ack, after the kill
	ms=$(awk -F '\t' '$1 == "recover" { print $6 }' "$out")
	[ "$ms" -gt 0 ] && [ "$ms" -lt 30000 ]
}

@test "commit times come from PostgreSQL's commit timestamps" {
	check unique business before-commit 1
	want=$(sql "SELECT to_char(pg_xact_commit_timestamp(xmin) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM demo.invoice_lines")
	assert_equal "$(awk -F '\t' '$1 == "attempt" && $4 == 2 { print $7 }' "$out")" "$want"
	# the killed attempt committed nothing
	assert_equal "$(awk -F '\t' '$1 == "attempt" && $4 == 1 { print $7, $9 }' "$out")" '\N 0'
}

@test "the race is held and released in a recorded order" {
	check unique business race 1
	assert_equal "$(awk -F '\t' '$1 == "step" && $5 == "before-write" { print $8 }' "$out" | tr '\n' ' ')" "hold hold release release "
	# the two holders are two workers
	assert_equal "$(awk -F '\t' '$1 == "step" && $8 == "release" { print $3 }' "$out" | sort -u | wc -l)" 2
}

@test "the stream passes through unchanged, then the evidence rows" {
	check unique business duplicate-publish 1
	n=$(wc -l <"$BATS_TEST_TMPDIR/published")
	head -n "$n" "$out" | cmp - "$BATS_TEST_TMPDIR/published"
	# no step rows: no kill point or race, so idem-worker, which reads the
	# plan, sent no step
	assert_equal "$(awk -F '\t' 'NR > 1 && !/^#/ { print $1 }' "$out" | sort -u | tr '\n' ' ')" \
		"attempt baseline database expect job log publish queue receiver scenario seed worker "
	# the worker row first of kill-at's own, the receiver row last
	assert_equal "$(sed -n "$((n + 1))p" "$out" | cut -f 1)" worker
	assert_equal "$(tail -n 1 "$out" | cut -f 1,6,7)" "$(printf 'receiver\t0\tset')"
}

@test "the plan names the steps a kill point may match; a worker reading it sends only those" {
	seed_for after-commit >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 20s -- sh -c 'cp "$IDEM_STEP_PLAN" "$0"; exec idem-worker' "$BATS_TEST_TMPDIR/plan" \
		<"$BATS_TEST_TMPDIR/published" >"$out"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/plan")" "$(printf 'after-commit\ta')"
	# the killed attempt's step and the retry's, and no other
	assert_equal "$(awk -F '\t' '$1 == "step" { print $5, $7, $8 }' "$out" | tr '\n' ,)" \
		"after-commit 1 kill,after-commit 2 go,"
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
}

@test "a worker that ignores the plan sends every step and is killed at the same step with the same counts" {
	seed_for after-commit >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 20s -- env -u IDEM_STEP_PLAN idem-worker <"$BATS_TEST_TMPDIR/published" >"$out"
	assert_equal "$(awk -F '\t' '$1 == "step" && $7 == 1 { print $5, $8 }' "$out" | tr '\n' ,)" \
		"consumed go,before-write go,before-commit go,after-commit kill,"
	# (the acked step of the last ack may come after kill-at saw the ack
	# and stopped)
	[[ "$(awk -F '\t' '$1 == "step" && $7 == 2 { print $5 }' "$out" | tr '\n' ' ')" == \
		"consumed before-write before-commit after-commit before-ack "* ]]
	assert_equal "$(rows_of kill "$out")" 1
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
}

@test "a race's plan names its step and the acked step of every job of its key" {
	seed_for race >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 20s -n 2 -- sh -c 'cp "$IDEM_STEP_PLAN" "$0.$IDEM_WORKER"; exec idem-worker' \
		"$BATS_TEST_TMPDIR/plan" <"$BATS_TEST_TMPDIR/published" >"$out"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/plan.0")" "$(printf 'before-write\ta\nacked\ta')"
	cmp "$BATS_TEST_TMPDIR/plan.0" "$BATS_TEST_TMPDIR/plan.1"
}

# The field $1 of the worker row of $out.
worker_field() {
	awk -F '\t' -v f="$1" '$1 == "worker" { print $f }' "$out"
}

@test "the worker row names the argument vector, the executable and its sha256" {
	check unique business none 1
	assert_equal "$(rows_of worker "$out")" 1
	assert_equal "$(worker_field 2)" '["idem-worker","-g","unique","-k","business"]'
	assert_equal "$(worker_field 3)" "$(command -v idem-worker)"
	assert_equal "$(worker_field 4)" "$(sha256sum "$(command -v idem-worker)" | cut -d ' ' -f 1)"
	assert_equal "$(worker_field 5)" '\N'
	assert_equal "$(worker_field 6)" '\N'
}

@test "the worker row names the script an interpreter ran, with its sha256" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish |
		kill-at -D 20s -- python3 tests/fixtures/workers/py_worker.py >"$out"
	assert_equal "$(worker_field 2)" '["python3","tests/fixtures/workers/py_worker.py"]'
	assert_equal "$(worker_field 3)" "$(command -v python3)"
	assert_equal "$(worker_field 4)" "$(sha256sum "$(command -v python3)" | cut -d ' ' -f 1)"
	assert_equal "$(worker_field 5)" tests/fixtures/workers/py_worker.py
	assert_equal "$(worker_field 6)" "$(sha256sum tests/fixtures/workers/py_worker.py | cut -d ' ' -f 1)"
}

@test "a worker in Python speaks the protocol and is killed at after-commit like idem-worker" {
	command -v python3 >/dev/null
	seed_for after-commit >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 20s -- python3 tests/fixtures/workers/py_worker.py <"$BATS_TEST_TMPDIR/published" >"$out"
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
	pid=$(awk -F '\t' '$1 == "kill" { print $6 }' "$out")
	grep -q "^log	[^	]*	0	$pid	branch=inserted job=a attempt=1 .* worker=python$" "$out"
	awk -F '\t' '$1 == "attempt" && $4 == 2 && $10 == "conflict-noop" { ok = 1 } END { exit !ok }' "$out"
}

@test "the seed's worker command runs when none is given" {
	seed_for after-commit | sed 's/^rehearsal: matrix$/&\nworker: { command: "idem-worker -g unique -o from-seed" }/' >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish | kill-at -D 20s >"$out"
	assert_equal "$(sql "SELECT owner FROM demo.pending_calls")" from-seed
	assert_equal "$(awk -F '\t' '$1 == "worker" { print $2 }' "$out")" \
		'["/bin/sh","-c","exec idem-worker -g unique -o from-seed"]'
	assert_equal "$(awk -F '\t' '$1 == "worker" { print $3 }' "$out")" "$(command -v idem-worker)"
}

@test "a step never reached: exit 1 at the deadline, naming it; no process left" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	run --separate-stderr kill-at -D 1s -k no-such-step:a:1 -- idem-worker -o marker-deadline <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"kill-at: deadline: step no-such-step of job a, attempt 1, never reached (scenario -k)"* ]]
	assert_equal "$(pgrep -f marker-deadline || true)" ""
	# and in the stream, for the record
	assert_equal "$(awk -F '\t' '$1 == "missed"' <<<"$output")" "$(printf 'missed\tkill\t-k\ta\t1\tno-such-step')"
}

@test "a race never met is a missed row of its scenario and business key" {
	seed_for race >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	# workers that never speak the step protocol never reach the race
	run --separate-stderr kill-at -D 500ms -- sh -c 'while :; do sleep 0.05; done # marker-norace' <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"never met by two workers"* ]]
	key=$(awk -F '\t' '$1 == "job" { print $3 }' "$BATS_TEST_TMPDIR/published")
	assert_equal "$(awk -F '\t' '$1 == "missed"' <<<"$output")" "$(printf 'missed\trace\trace\t%s\t\\N\tbefore-write' "$key")"
}

@test "a worker that ignores SIGTERM is killed; the unacked message is named" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	run --separate-stderr kill-at -D 500ms -- sh -c 'trap "" TERM; while :; do sleep 0.05; done # marker-stubborn' <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"kill-at: deadline: message "*" (job a, copy 0) never acked after 0 deliveries"* ]]
	for i in $(seq 40); do
		[ -z "$(pgrep -f marker-stubborn)" ] && break
		sleep 0.05
	done
	assert_equal "$(pgrep -f marker-stubborn || true)" ""
}

@test "kill -9 of kill-at leaves no worker and no step socket behind" {
	seed_for after-commit >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	mkdir "$BATS_TEST_TMPDIR/tmp"
	TMPDIR="$BATS_TEST_TMPDIR/tmp" kill-at -n 3 -D 60s -- sh -c 'sleep 600 & sleep 600; # marker-orphans' <"$BATS_TEST_TMPDIR/published" >/dev/null 2>&1 &
	controller=$!
	until [ "$(pgrep -f -c marker-orphans || true)" -ge 3 ]; do sleep 0.05; done
	until [ "$(pgrep -c -x sleep -P "$(pgrep -d, -f marker-orphans)" || true)" -ge 6 ]; do sleep 0.05; done
	kill -9 "$controller"
	wait "$controller" || true
	for i in $(seq 50); do
		[ -z "$(pgrep -f marker-orphans)" ] && break
		sleep 0.05
	done
	assert_equal "$(pgrep -f marker-orphans || true)" ""
	assert_equal "$(pgrep -x sleep -a | grep -c 'sleep 600' || true)" 0
	# nor its step socket: the watchdog removes what kill-at could not
	for i in $(seq 50); do
		[ -z "$(ls -A "$BATS_TEST_TMPDIR/tmp")" ] && break
		sleep 0.05
	done
	assert_equal "$(ls -A "$BATS_TEST_TMPDIR/tmp")" ""
}

@test "SIGINT to kill-at is passed to the workers, which are then gone" {
	seed_for after-commit >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	kill-at -D 60s -- sh -c 'trap "echo got-term; exit 0" TERM; while :; do sleep 0.05; done # marker-int' <"$BATS_TEST_TMPDIR/published" >"$out" 2>"$err" &
	controller=$!
	until pgrep -f '^sh -c trap.*marker-int' >/dev/null; do sleep 0.05; done
	kill -INT "$controller"
	rc=0
	wait "$controller" || rc=$?
	assert_equal "$rc" 130
	grep -q 'stopped by signal 2' "$err"
	assert_equal "$(pgrep -f marker-int || true)" ""
	[ ! -s "$out" ]
}

@test "kill-at refuses a race with one worker, and a stream without publish rows" {
	seed_for race >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" >"$BATS_TEST_TMPDIR/stream"
	run kill-at -n 1 -- idem-worker <"$BATS_TEST_TMPDIR/stream"
	[ "$status" -eq 2 ]
	[[ "$output" == "kill-at: stdin: no publish rows: put dup-publish before kill-at" ]]
	dup-publish <"$BATS_TEST_TMPDIR/stream" >"$BATS_TEST_TMPDIR/published"
	run kill-at -n 1 -- idem-worker <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 2 ]
	[[ "$output" == "kill-at: -n 1: a race needs two workers" ]]
	run kill-at -k after-commit:zz:1 -- idem-worker <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 2 ]
	[[ "$output" == "kill-at: -k after-commit:zz:1: no job zz in the stream" ]]
}

@test "idem-worker without a step socket runs as in production" {
	seed_for duplicate-publish >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish -s 0 >/dev/null
	env -u IDEM_STEP_SOCK idem-worker -g unique -q rehearsal_matrix --once 2>"$err"
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
	assert_equal "$(sql "SELECT count(*) FROM idem.queue")" 0
	assert_equal "$(grep -o 'branch=[a-z-]*' "$err" | tr '\n' ' ')" "branch=inserted branch=called branch=conflict-noop branch=already-called "
}

@test "idem-worker --no-step never connects to IDEM_STEP_SOCK, even when it is set" {
	seed_for duplicate-publish >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish -s 0 >/dev/null
	# nothing listens there: a worker that tries to connect fails
	run -3 env IDEM_STEP_SOCK="$BATS_TEST_TMPDIR/nobody.sock" idem-worker -q rehearsal_matrix --once
	[[ "$output" == "idem-worker: step consumed: the controller hung up: No such file or directory" ]]
	run -0 env IDEM_STEP_SOCK="$BATS_TEST_TMPDIR/nobody.sock" idem-worker --no-step -q rehearsal_matrix --once
	[[ "${lines[0]}" == "branch=inserted job=a attempt=1 "* ]]
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
}

@test "idem-worker refuses an unknown external guard and a vendor URL that is not HTTP" {
	run --separate-stderr idem-worker -x retry-harder -q q --once
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "idem-worker: -x retry-harder: expected none, idempotency-key, pending-row or call-key"
	run --separate-stderr env IDEM_VENDOR_URL=ftp://127.0.0.1:21 idem-worker -q q --once
	[ "$status" -eq 2 ]
	assert_equal "$stderr" "idem-worker: IDEM_VENDOR_URL=ftp://127.0.0.1:21: expected an http:// or https:// URL"
	# --setup makes no call: it does not look at the vendor
	IDEM_VENDOR_URL=ftp://127.0.0.1:21 idem-worker --setup
}

@test "a vendor that cannot be reached fails the attempt: no ack, the pending row pending; the retry reconciles" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish -s 0 >/dev/null
	port=$(free_port)
	IDEM_VENDOR_URL="http://127.0.0.1:$port/" idem-worker -q rehearsal_matrix -t 1h --once 2>"$err"
	grep -q "^idem-worker: POST http://127.0.0.1:$port/v1/charges: " "$err"
	assert_equal "$(grep -o 'branch=[a-z-]*' "$err" | tr '\n' ' ')" "branch=inserted branch=vendor-error "
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
	assert_equal "$(sql "SELECT status FROM demo.pending_calls")" pending
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE acked_at IS NULL")" 1
	# its visibility timeout ends; the retry, at a vendor that answers (the
	# stand-in), finds the pending row and asks before it calls
	sql "UPDATE idem.message SET visible_at = clock_timestamp()" >/dev/null
	idem-worker -q rehearsal_matrix --once 2>"$err"
	assert_equal "$(grep -o 'branch=[a-z-]*' "$err" | tr '\n' ' ')" "branch=conflict-noop branch=pending-reconciled-called "
	assert_equal "$(sql "SELECT count(*) FROM demo.provider_calls")" 1
	assert_equal "$(sql "SELECT count(*) FROM idem.message WHERE acked_at IS NULL")" 0
}

@test "with -g memory, a job whose charge failed is not remembered: its retry charges again" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g memory
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish -s 0 >/dev/null
	port=$(free_port)
	IDEM_VENDOR_URL="http://127.0.0.1:$port" idem-worker -g memory -q rehearsal_matrix -t 100ms 2>"$err" &
	worker=$!
	for i in $(seq 200); do
		grep -q 'job=a attempt=2 ' "$err" && break
		sleep 0.05
	done
	kill -TERM "$worker"
	wait "$worker"
	grep -q '^branch=inserted job=a attempt=2 ' "$err"
	grep -q '^branch=vendor-error job=a attempt=2 ' "$err"
	! grep -q 'branch=memory-skip' "$err"
}

@test "under kill-at, idem-worker --no-step sends no step: the run has no step row and the right counts" {
	seed_for duplicate-publish >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish |
		kill-at -D 20s -- idem-worker --no-step >"$out"
	assert_equal "$(rows_of step "$out")" 0
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 1
	assert_equal "$(awk -F '\t' '$1 == "attempt" { print $10 }' "$out" | tr '\n' ,)" \
		"inserted called,conflict-noop already-called,"
}

@test "--race holds two deliveries of one key even without a race scenario" {
	seed_for duplicate-publish | sed 's/within: 50ms/within: 0ms/' >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g check-then-insert
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish | kill-at -D 20s -n 2 -r before-write -- idem-worker -g check-then-insert >"$out"
	assert_equal "$(awk -F '\t' '$1 == "step" && $5 == "before-write" { print $8 }' "$out" | tr '\n' ' ')" "hold hold release release "
	assert_equal "$(sql "SELECT count(*) FROM demo.invoice_lines")" 2
}

@test "a worker command that cannot be started is exit 3, with the reason" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	run kill-at -D 20s -- /no/such/worker <"$BATS_TEST_TMPDIR/published"
	[ "$status" -eq 3 ]
	[[ "$output" == *"/no/such/worker: No such file or directory"* ]]
	[[ "$output" == *"kill-at: worker 0 could not be started (status 127): /no/such/worker" ]]
}

@test "the outbox guard, declared where it lives, is found and enforced; undeclared, the effect table has none" {
	seed_for duplicate-publish >"$BATS_TEST_TMPDIR/seed.yaml"
	echo 'guard: { table: demo.outbox, key: [key] }' >>"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g outbox
	run --separate-stderr bash -c "seed-gen '$BATS_TEST_TMPDIR/seed.yaml' | count-effects --before | dup-publish |
		kill-at -D 20s -- idem-worker -g outbox | count-effects"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$out"
	grep -q "^guard	none	\\\\N	none: best effort	\\\\N$" "$out"
	grep -q "^guard	constraint	outbox_pkey	PRIMARY KEY (key)	\\\\N	demo.outbox$" "$out"
	grep -q "^probe	enforced	23505	.*	demo.outbox$" "$out"
	# without the declaration, as before: the effect table's guard alone
	sed -i '/^guard:/d' "$BATS_TEST_TMPDIR/seed.yaml"
	queue_reset
	idem-worker --setup -g outbox
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | count-effects --before | dup-publish |
		kill-at -D 20s -- idem-worker -g outbox | count-effects >"$out"
	assert_equal "$(awk -F '\t' '$1 == "guard" || $1 == "probe" { print $1, $2 }' "$out")" "guard none
probe not-enforced"
}

@test "the kill points are gone before the rows go on, so count-effects reading them as they come does not hold their removal" {
	seed_for after-commit >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	# rows of other invoices, more than the socket holds: count-effects
	# reads its count of them, and holds the table, until its input ends
	sql "INSERT INTO demo.invoice_lines (job_id, invoice_id, line_no, amount_cents, currency)
		SELECT 'other', 'other-' || i, 1, 1, 'EUR' FROM generate_series(1, 100000) i" >/dev/null
	seed-gen "$BATS_TEST_TMPDIR/seed.yaml" | count-effects --before | dup-publish |
		kill-at -D 20s -- idem-worker -g unique 2>"$err" | count-effects >"$out"
	run grep "removing the kill points" "$err"
	[ "$status" -eq 1 ]
	assert_equal "$(sql "SELECT count(*) FROM pg_namespace WHERE nspname = 'idem_run'")" 0
	assert_equal "$(awk -F '\t' '$1 == "kill" { print $5 }' "$out")" after-commit
	grep -q "^count	after	total	effects	" "$out"
}

@test "kill-at pointed at another database than the stream's refuses, naming both, before any worker starts" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish >"$BATS_TEST_TMPDIR/published"
	id=$(sql 'SELECT sandbox_id FROM idem.sandbox')
	psql -X -q -d postgres -c 'DROP DATABASE IF EXISTS other' -c "CREATE DATABASE other TEMPLATE $PGDATABASE"
	run --separate-stderr env PGDATABASE=other kill-at -D 20s -- sh -c 'touch "$0"' "$BATS_TEST_TMPDIR/ran" \
		<"$BATS_TEST_TMPDIR/published"
	psql -X -q -d postgres -c 'DROP DATABASE other'
	[ "$status" -eq 2 ]
	assert_equal "$output" ""
	assert_equal "$stderr" "kill-at: the PG* environment points at database other of sandbox $id, but the stream's database row names database $PGDATABASE of sandbox $id: one pipeline uses one database"
	[ ! -e "$BATS_TEST_TMPDIR/ran" ]
}

@test "a declared kill point never reached: the handoff's headline says so, not the counts" {
	# a step of the worker's own, far from every standard one, that
	# idem-worker never sends
	seed_for after-commit | sed 's/kill: after-commit/kill: ledger-flushed/' >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique
	seed-gen --draft "$BATS_TEST_TMPDIR/seed.yaml" | dup-publish |
		{ kill-at -D 1s -- idem-worker -g unique || true; } | count-effects >"$BATS_TEST_TMPDIR/run" || true
	grep -q "^missed	kill	kill	a	1	ledger-flushed$" "$BATS_TEST_TMPDIR/run"
	signing_repo "$BATS_TEST_TMPDIR/repo"
	cp "$BATS_TEST_TMPDIR/seed.yaml" seed.yaml
	sed -i "s|^seed	[^	]*	|seed	seed.yaml	|" "$BATS_TEST_TMPDIR/run"
	git add seed.yaml && git commit -q -m seed
	mkrecord -k "$key" -f md <"$BATS_TEST_TMPDIR/run" >"$BATS_TEST_TMPDIR/handoff.md"
	assert_equal "$(head -n 1 "$BATS_TEST_TMPDIR/handoff.md")" \
		"# Rehearsal matrix: fail: kill point never reached: step ledger-flushed of job a, attempt 1 (scenario kill)"
}

@test "a worker that dies before its first delivery: kill-at says how it ended and its last lines, once" {
	seed_for none >"$BATS_TEST_TMPDIR/seed.yaml"
	idem-worker --setup -g unique -k business
	printf 'import sys\nprint("starting", file=sys.stderr)\nimport no_such_module_x\n' >"$BATS_TEST_TMPDIR/worker.py"
	run --separate-stderr bash -c 'seed-gen --draft "$1" | dup-publish | kill-at -D 20s -- python3 "$2" | count-effects' \
		_ "$BATS_TEST_TMPDIR/seed.yaml" "$BATS_TEST_TMPDIR/worker.py"
	echo "$stderr" >&2
	[ "$status" -eq 2 ] || [ "$status" -eq 3 ]
	# its last lines, bounded, then one message: how it ended and its last line
	[[ "$stderr" == *"ModuleNotFoundError: No module named 'no_such_module_x'"$'\n'"kill-at: worker 0 exited with status 1 before its first delivery, again after 20 restarts; giving up; its last words: ModuleNotFoundError: No module named 'no_such_module_x'" ]]
	[ "$(grep -c '^starting$' <<<"$stderr")" -le 1 ]
	[ "$(wc -l <<<"$stderr")" -le 6 ]
	# count-effects, after it, keeps quiet about the empty stream
	[[ "$stderr" != *"empty stream"* ]]
	[ -z "$output" ]
}
