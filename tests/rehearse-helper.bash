# Shared by the rehearse tests: a private TMPDIR that marks every process a
# rehearsal starts, and a git work tree for seeds and records.

# Sets root, the source tree, and T, rehearse's TMPDIR: every process it
# starts inherits a TMPDIR under it (as root, the sandbox's server user
# passes through). Makes the work tree $repo (signing_repo: $key allowed in
# records/allowed_signers) with seeds/, and goes there; commit_signed
# commits it.
rehearse_setup() {
	root=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
	T=$(mktemp -d /tmp/idem-rehearse-test.XXXXXX)
	chmod 711 "$T"
	unset PGHOST PGPORT PGDATABASE PGUSER PGSERVICE IDEM_SANDBOX IDEM_DATABASE
	repo="$BATS_TEST_TMPDIR/repo"
	signing_repo "$repo"
	mkdir seeds
}

# Commits everything in the work tree, signed with $key.
commit_signed() {
	git add .
	signed_commit -m "$1"
}

# The processes of this test's rehearsals, with their command lines.
ours() {
	local environ pid command
	for environ in $(grep -l -s -a "TMPDIR=$T" /proc/[0-9]*/environ); do
		pid=${environ#/proc/}
		pid=${pid%/environ}
		command=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || true
		echo "$pid ${command% }"
	done
}

# The example seed, its waits shortened, as seeds/invoice-line.yaml of the
# work tree.
quick_example_seed() {
	sed 's/visibility_timeout: 2s/visibility_timeout: 300ms/; s/within: 2s/within: 100ms/' \
		"$root/seeds/invoice-line.yaml" >seeds/invoice-line.yaml
}
