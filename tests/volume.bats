#!/usr/bin/env bats
# Memory that does not grow with the number of jobs: the same pipeline at
# 20,000 and at 200,000 generated jobs, each program's peak resident size
# read by GNU time, compared run against run. The worker's part is done by
# SQL (one effect per job, every message acked); kill-at, with idem-worker,
# is measured on its own, at 2,000 and 20,000 jobs.

load helper
load sandbox-tests

sandbox_file_setup() {
	psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE SCHEMA vol' \
		-c 'CREATE TABLE vol.lines (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			invoice_id text NOT NULL, line_no integer NOT NULL, UNIQUE (invoice_id, line_no))' \
		-c 'CREATE TABLE vol.flags (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			job_id text NOT NULL, flag boolean NOT NULL UNIQUE)'
}

setup() {
	sandbox_test_setup
	# ASan keeps freed memory in quarantine and shadows the rest: its peak
	# grows with whatever was ever allocated, so only a plain build is measured
	skip_if_sanitized "an ASan build's peak memory counts its quarantine"
}

# Runs seed-gen, count-effects --before, dup-publish, the worker's part
# ($2, SQL) and count-effects on the seed $1, each from a file, and leaves
# "program KiB" lines in $BATS_TEST_TMPDIR/rss.$3.
pipeline() {
	local seed=$1 worker=$2 run=$3 dir="$BATS_TEST_TMPDIR/$3"
	mkdir -p "$dir"
	queue_reset
	psql -X -q -c 'TRUNCATE vol.lines, vol.flags'
	rss() { /usr/bin/time -f "$1 %M" -a -o "$BATS_TEST_TMPDIR/rss.$run" "${@:2}"; }
	rss seed-gen seed-gen "$seed" >"$dir/1"
	rss before count-effects --before "$dir/1" >"$dir/2"
	rss dup-publish dup-publish -s 0 "$dir/2" >"$dir/3"
	psql -X -q -v ON_ERROR_STOP=1 -c "$worker" -c 'UPDATE idem.message SET acked_at = clock_timestamp()'
	rss after count-effects "$dir/3" >"$dir/4"
	# the runs did their work: every job published, counted as expected
	assert_equal "$(grep -c '^publish	' "$dir/3")" "$(sql 'SELECT count(*) FROM idem.message')"
	grep -q '^count	after	total	effects	' "$dir/4"
}

kib() {
	awk -v p="$1" '$1 == p { print $2 }' "$BATS_TEST_TMPDIR/rss.$2"
}

# Fails naming the program when its peak at 200k jobs is above its peak at
# 20k plus the allowance $2 (KiB).
assert_bounded() {
	local small big
	small=$(kib "$1" 20k)
	big=$(kib "$1" 200k)
	echo "$1: $small KiB at 20000 jobs, $big KiB at 200000, allowance $2 KiB" >&2
	[ "$big" -le $((small + $2)) ] || { echo "$1 grows with the number of jobs" >&2; return 1; }
}

# What the stream reader keeps per job: a 64-bit hash of its id, to refuse
# an id given twice (idem-tsv(5)), in a set at most 3/4 full; up to 32
# bytes a job while it doubles, the old set and the new one both held.
# The rest of the allowance is fixed.
reader_kib=$(( (200000 - 20000) * 32 / 1024 ))
fixed_kib=4096

@test "at 200,000 jobs with as many keys, seed-gen and dup-publish need no more memory than at 20,000; count-effects only its entry per key" {
	local n worker
	worker="INSERT INTO vol.lines (invoice_id, line_no)
		SELECT payload->>'invoice_id', (payload->>'line_no')::integer FROM idem.message WHERE copy = 0"
	for n in 20000 200000; do
		pipeline "$(sized_seed volume-lines $n)" "$worker" $((n / 1000))k
	done
	assert_bounded seed-gen $((fixed_kib + reader_kib))
	assert_bounded dup-publish $((fixed_kib + reader_kib))
	# count-effects keeps one entry per business key: 200 bytes each
	assert_bounded before $((fixed_kib + reader_kib + (200000 - 20000) * 200 / 1024))
	assert_bounded after $((fixed_kib + reader_kib + (200000 - 20000) * 200 / 1024))
}

@test "at 200,000 jobs over two business keys, count-effects needs no more memory than at 20,000" {
	local n worker
	# a key of one boolean field: every job has one of two keys
	worker="INSERT INTO vol.flags (job_id, flag)
		SELECT DISTINCT ON (payload->>'flag') job_id, (payload->>'flag')::boolean FROM idem.message"
	for n in 20000 200000; do
		pipeline "$(sized_seed volume-flags $n)" "$worker" $((n / 1000))k
	done
	assert_equal "$(grep -c '^count	after	key	' "$BATS_TEST_TMPDIR/200k/4")" 2
	assert_bounded seed-gen $((fixed_kib + reader_kib))
	assert_bounded before $((fixed_kib + reader_kib))
	assert_bounded dup-publish $((fixed_kib + reader_kib))
	assert_bounded after $((fixed_kib + reader_kib))
}

# kill-at with idem-worker, no fault, 4 workers: its peak at 10,000 jobs
# against its peak at 1,000 (the 2.5 KB a job it once kept would show as
# 22 MB there; the allowance is 5 MB). What it may keep per job: the stream
# reader's hash (above) and the ids of the run's messages, as the text
# of the arrays it passes to the queue's sections, a few copies of some
# 10 bytes; the rows it saw wait in temporary files and the database
# joins them.
@test "at 10,000 jobs kill-at needs no more memory than at 1,000 but for its few bytes per message id" {
	local n dir small big
	idem-worker --setup --guard unique
	for n in 1000 10000; do
		dir="$BATS_TEST_TMPDIR/kill-$n"
		mkdir -p "$dir"
		queue_reset
		psql -X -q -c 'TRUNCATE demo.invoice_lines, demo.pending_calls, demo.provider_calls'
		seed-gen --draft "$(sized_seed volume-kill $n)" | dup-publish -s 0 >"$dir/published"
		/usr/bin/time -f "%M" -o "$dir/rss" \
			kill-at -n 4 -D 10m -- idem-worker --guard unique <"$dir/published" >"$dir/out"
		# the run did its work: every job's attempt, every effect once
		assert_equal "$(rows_of attempt "$dir/out")" "$n"
		assert_equal "$(sql 'SELECT count(*) FROM demo.invoice_lines')" "$n"
	done
	small=$(cat "$BATS_TEST_TMPDIR/kill-1000/rss")
	big=$(cat "$BATS_TEST_TMPDIR/kill-10000/rss")
	echo "kill-at: $small KiB at 1000 jobs, $big KiB at 10000" >&2
	[ "$big" -le $((small + fixed_kib + (10000 - 1000) * (32 + 64) / 1024)) ] ||
		{ echo "kill-at grows with the number of jobs" >&2; return 1; }
}
