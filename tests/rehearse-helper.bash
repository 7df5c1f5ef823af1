# Shared by the rehearse tests: a private TMPDIR that marks every process a
# rehearsal starts, and a git work tree for seeds and records.

# Sets root, the source tree, and T, rehearse's TMPDIR: every process it
# starts inherits a TMPDIR under it (as root, the sandbox's server user
# passes through). Makes the work tree $repo, with seeds/ and
# records/allowed_signers listing $key, an ed25519 key of the engineer, and
# goes there; commit_signed commits it.
rehearse_setup() {
	root=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
	T=$(mktemp -d /tmp/idem-rehearse-test.XXXXXX)
	chmod 711 "$T"
	unset PGHOST PGPORT PGDATABASE PGUSER PGSERVICE IDEM_SANDBOX IDEM_DATABASE
	repo="$BATS_TEST_TMPDIR/repo"
	mkdir -p "$repo/seeds" "$repo/records"
	cd "$repo"
	git init -q -b main .
	git config user.name "Test Engineer"
	git config user.email "eng@example.org"
	key="$BATS_TEST_TMPDIR/key"
	ssh-keygen -q -t ed25519 -N '' -C test-key -f "$key"
	echo "eng@example.org namespaces=\"idem-record,git\" $(cat "$key.pub")" >records/allowed_signers
}

# Commits everything in the work tree, signed with $key.
commit_signed() {
	git add .
	git -c gpg.format=ssh -c user.signingkey="$key" commit -q -S -m "$1"
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
