#!/usr/bin/env bats
# A volume record: mkrecord's memory stays flat from 20,000 to 200,000
# jobs, the record keeps a sample and the anomalies and names its full
# evidence file by hash, and verify-record detects a changed row in it.

load helper

setup() {
	signing_repo "$BATS_TEST_TMPDIR/repo"
	git add records/allowed_signers
	signed_commit -m "allowed signers"
}

# The stream of a run of $1 generated jobs as the pipeline would write it,
# without running the pipeline: seed-gen's rows, then a publish, an
# attempt acked and a count of 1 for every job, except every 1000th job,
# killed at after-commit on its first attempt and acked on its second.
volume_stream() {
	cp "$(sized_seed bench-volume "$1")" seed.yaml
	git add seed.yaml
	git commit -q -m "seed of $1 jobs"
	seed-gen --draft seed.yaml | awk -F '\t' -v OFS='\t' '
	$1 != "job" { print; next }
	{ print; n++; job[n] = $2; key[n] = $3 }
	END {
		t = "2026-12-01T10:00:00.000000Z"; t2 = "2026-12-01T10:00:01.000000Z"
		for (i = 1; i <= n; i++) print "count", "before", "key", key[i], 1, 0
		print "count", "before", "total", "effects", n, 0
		print "count", "before", "total", "missing", 0, n
		for (i = 1; i <= n; i++) print "publish", job[i], 0, i, t, "published"
		for (i = 1000; i <= n; i += 1000) {
			print "kill", "-k", job[i], 1, "after-commit", 100, t, "database"
			kills++
		}
		for (i = 1; i <= n; i++) {
			if (i % 1000 == 0)
				print "attempt", job[i], i, 1, 100, t, t, "\\N", 1, "inserted", t, 0
			print "attempt", job[i], i, i % 1000 == 0 ? 2 : 1, 100, t, i % 1000 ? t : "\\N", t2,
			    i % 1000 ? 1 : 0, i % 1000 ? "inserted" : "conflict-noop", i % 1000 ? t : "\\N", 0
		}
		for (i = 1000; i <= n; i += 1000) print "recover", job[i], i, t, t2, 1000
		for (i = 1; i <= n; i++) print "count", "after", "key", key[i], 1, 1
		split("effects duplicates missing unexpected conflicts pending", names, " ")
		split(n " 0 0 0 0 0", values, " ")
		for (i = 1; i <= 6; i++) print "count", "after", "total", names[i], i == 1 ? n : 0, values[i]
		print "measure", "duplicate_effects_per_1000_jobs", "0.000", 0, n, "per 1000 accepted jobs", t, t2
		print "measure", "reconciled_jobs_per_100_failures", "100.000", kills, kills, "per 100 failures (kills)", t, t2
	}' >stream.tsv
	# the digest of the count rows of the after phase, as count-effects makes it
	digest=$(awk -F '\t' -v OFS='\t' '$1 == "count" && $2 == "after" { print "count", $3, $4, $5, $6 }' stream.tsv |
		sha256sum | cut -d ' ' -f 1)
	printf 'digest\tafter\t%s\t%s\n' "$digest" "$(grep -c '^count	after' stream.tsv)" >>stream.tsv
}

# Peak resident memory of mkrecord -k -c on the stream, in KiB. Under
# AddressSanitizer, freed memory would stay in its quarantine and count.
peak_kib() {
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0 /usr/bin/time -f '%M' -o "$BATS_TEST_TMPDIR/rss" mkrecord -k "$key" -c <stream.tsv >"$BATS_TEST_TMPDIR/record" || return 1
	cat "$BATS_TEST_TMPDIR/rss"
}

@test "mkrecord's memory does not grow with the jobs: 200,000 jobs take what 20,000 take" {
	# AddressSanitizer's redzones, tens of bytes on each allocation, grow
	# with the anomalies a volume record lists as well as with its leaks
	skip_if_sanitized "an ASan build's peak memory counts its redzones"
	volume_stream 20000
	small=$(peak_kib)
	volume_stream 200000
	large=$(peak_kib)
	echo "peak RSS: 20000 jobs $small KiB, 200000 jobs $large KiB"
	# ten times the jobs; an unbounded record holds them all, and grows by
	# hundreds of MiB, while a bounded one stays within a few MiB
	[ "$large" -lt $((small + 16384)) ]
	[ "$large" -lt 131072 ]
}

@test "a volume record lists a sample and the anomalies, verifies, and names its evidence file" {
	volume_stream 200000
	r=$(mkrecord -k "$key" -c <stream.tsv)
	run verify-record -f records/allowed_signers "$r"
	[ "$status" -eq 0 ]
	[ "$output" = "$r: verified, signed by eng@example.org; verdict pass" ]
	evidence=records/$(sed -n '/^evidence_file:/,/^[a-z]/s/^  path: "\(.*\)"$/\1/p' "$r")
	[ -f "$evidence" ]
	# named by its hash, committed with the record
	[ "$(sha256sum "$evidence" | cut -d ' ' -f 1).tsv.gz" = "$(basename "$evidence")" ]
	git ls-files --error-unmatch "$evidence" "$r"
	# every attempt row is in it, and no payload
	[ "$(zcat "$evidence" | grep -c '^attempt	')" -eq 200200 ]
	[ "$(zcat "$evidence" | grep -c '^job	')" -eq 0 ]
	# the record: the totals, 100 sampled jobs and the 200 killed and
	# retried, each with its two attempts
	grep -q '^  total: 200200$' "$r"
	grep -q '^  listed: 500$' "$r"
	grep -q '^  sample_jobs: 100$' "$r"
	[ "$(grep -c '^- job: ' "$r")" -eq 500 ]
	[ "$(grep -c '^  outcome: "killed at after-commit"$' "$r")" -eq 200 ]
	# the rate carries its interval: 0 of 200000 is at most 0.019207 per 1000
	grep -A 12 'name: "duplicate_effects_per_1000_jobs"' "$r" | grep -q '^    high: 0.019207$'
	# the record is read whole by the audit, well within its limits
	[ "$(wc -c <"$r")" -lt 1048576 ]
}

@test "a row changed in the evidence file is found, even compressed again" {
	volume_stream 20000
	r=$(mkrecord -k "$key" -c <stream.tsv)
	evidence=records/$(sed -n '/^evidence_file:/,/^[a-z]/s/^  path: "\(.*\)"$/\1/p' "$r")
	zcat "$evidence" | sed 's/^\(count	after	key	\["invoice_id-000042",42\]	1	\)1$/\12/' |
		gzip -n >"$BATS_TEST_TMPDIR/changed.gz"
	run ! cmp -s <(zcat "$evidence") <(zcat "$BATS_TEST_TMPDIR/changed.gz")
	chmod u+w "$evidence"
	cp "$BATS_TEST_TMPDIR/changed.gz" "$evidence"
	run verify-record -f records/allowed_signers "$r"
	[ "$status" -eq 1 ]
	[ "${lines[0]}" = "$r: NOT verified" ]
	[[ "${lines[1]}" == "$r: evidence: $evidence has SHA-256 "*", the record says "*": not the evidence that was signed" ]]
	# and without it, the record cannot be checked
	rm "$evidence"
	run verify-record -f records/allowed_signers "$r"
	[ "$status" -eq 1 ]
	[ "${lines[1]}" = "$r: evidence: $evidence: No such file or directory" ]
}
