# Shared by the tests of records, of approvals and of the pull-request check:
# one real rehearsal of the example seed, and a team's repository to record it in.

# Runs the example seed (shorter waits) once against idem-worker with the
# unique guard on the file's sandbox: $IDEM_TEST_ROOT/seed.yaml and the
# run's stream, $RUN.
invoice_line_run() {
	cd "$BATS_TEST_DIRNAME/.."
	sed 's/visibility_timeout: 2s/visibility_timeout: 1s/; s/within: 2s/within: 100ms/' \
		seeds/invoice-line.yaml >"$IDEM_TEST_ROOT/seed.yaml"
	queue_reset
	idem-worker --setup -g unique
	export RUN="$IDEM_TEST_ROOT/run.tsv"
	(cd "$IDEM_TEST_ROOT" && seed-gen seed.yaml | count-effects --before | dup-publish |
		kill-at -- idem-worker --guard unique | count-effects >"$RUN")
}

# A repository in $1, made the current directory, with the seed committed,
# then records/allowed_signers, the lines given added to the engineer's, in
# a commit signed by the engineer's key, $key (signing_repo).
seed_repo() {
	signing_repo "$1"
	cp "$IDEM_TEST_ROOT/seed.yaml" seed.yaml
	git add seed.yaml
	git commit -q -m "seed"
	[ $# -lt 2 ] || printf '%s\n' "${@:2}" >>records/allowed_signers
	git add records/allowed_signers
	signed_commit -m "allowed signers"
}

# The repository of seed_repo in $1, where an owner's key ($owner) is
# allowed too, to approve records only.
team_repo() {
	owner="$BATS_TEST_TMPDIR/owner"
	ssh-keygen -q -t ed25519 -N '' -C owner -f "$owner"
	seed_repo "$1" "owner@example.org namespaces=\"idem-approval\" $(cat "$owner.pub")"
}
