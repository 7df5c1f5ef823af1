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
# an engineer's key ($key) allowed to sign records and commits, and an
# owner's key ($owner) allowed to approve records only.
team_repo() {
	key="$BATS_TEST_TMPDIR/engineer"
	owner="$BATS_TEST_TMPDIR/owner"
	ssh-keygen -q -t ed25519 -N '' -C engineer -f "$key"
	ssh-keygen -q -t ed25519 -N '' -C owner -f "$owner"
	new_repo "$1"
	cp "$IDEM_TEST_ROOT/seed.yaml" seed.yaml
	git add seed.yaml
	git commit -q -m "seed"
	mkdir records
	{
		echo "eng@example.org namespaces=\"idem-record,git\" $(cat "$key.pub")"
		echo "owner@example.org namespaces=\"idem-approval\" $(cat "$owner.pub")"
	} >records/allowed_signers
	git add records/allowed_signers
	signed_commit -m "allowed signers"
}

# A commit signed with the engineer's key.
signed_commit() {
	git -c gpg.format=ssh -c user.signingkey="$key" commit -q -S "$@"
}
