#!/usr/bin/env bats
# The trust root of an audit given a base: the keys trusted are those of
# records/allowed_signers as the base branch holds it, and a pull request
# changes them only by a commit that a key the base trusts for git and for
# idem-approval signed. Each rule is run through the check step of the
# shipped workflow, and plain git (verify-commit against the base's file)
# and ssh-keygen -Y verify are the referees of who the base trusts.

load helper
load sandbox-tests
load records-helper

sandbox_file_setup() {
	invoice_line_run
	export WORKFLOW="$BATS_TEST_DIRNAME/../examples/github/idem-records.yml"
	export RUNNER="$BATS_TEST_DIRNAME/tools/run-workflow-step"
}

# A team's repository on main (the seed, allowed_signers with the engineer
# and an owner who may sign commits and approve records, one record),
# cloned, with a pull request's branch checked out.
setup() {
	owner="$BATS_TEST_TMPDIR/owner"
	ssh-keygen -q -t ed25519 -N '' -C owner -f "$owner"
	seed_repo "$BATS_TEST_TMPDIR/team" \
		"owner@example.org namespaces=\"git,idem-approval\" $(cat "$owner.pub")"
	mkrecord -k "$key" -c <"$RUN" >/dev/null
	git clone -q "$BATS_TEST_TMPDIR/team" "$BATS_TEST_TMPDIR/workspace"
	cd "$BATS_TEST_TMPDIR/workspace"
	as_engineer
	git checkout -q -b pull-request
	summary="$BATS_TEST_TMPDIR/step-summary"
	git show origin/main:records/allowed_signers >"$BATS_TEST_TMPDIR/base_signers"
	mallory="$BATS_TEST_TMPDIR/mallory"
	ssh-keygen -q -t ed25519 -N '' -C mallory -f "$mallory"
}

check_step() {
	GITHUB_WORKSPACE="$PWD" GITHUB_BASE_REF=main GITHUB_STEP_SUMMARY="$summary" \
		"$RUNNER" "$WORKFLOW" records "Check the records"
}

# A commit signed with the key $1; the rest are git commit's arguments.
commit_as() {
	git -c gpg.format=ssh -c user.signingkey="$1" commit -q -S "${@:2}"
}

# What the base trusts, as git itself reads a commit's signature.
base_git_trusts() {
	git -c gpg.format=ssh -c gpg.ssh.allowedSignersFile="$BATS_TEST_TMPDIR/base_signers" \
		verify-commit "$1" 2>/dev/null
}

# The record $1 approved by the owner, the approval committed by the owner.
approve() {
	mkrecord --approve "$1" -k "$owner" >/dev/null
	git add "$1.approval.sig"
	commit_as "$owner" -m "records: approved by the owner"
}

@test "a pull request that trusts its own key and signs a record with it fails, naming allowed_signers and the line" {
	line="mallory@example.org namespaces=\"git,idem-record,idem-approval\" $(cat "$mallory.pub")"
	echo "$line" >>records/allowed_signers
	git add records/allowed_signers
	commit_as "$mallory" -m "trust me"
	grant=$(git rev-parse HEAD)
	r=$(mkrecord -k "$mallory" -c <"$RUN")
	approve_forged() {
		mkrecord --approve "$r" -k "$mallory" >/dev/null
		git add "$r.approval.sig"
		commit_as "$mallory" -m "records: approved"
	}
	approve_forged
	n=$(wc -l <records/allowed_signers)
	run --separate-stderr check_step
	[ "$status" -eq 1 ]
	[[ "$output" == *"::error file=records/allowed_signers,line=$n::signers FAIL: changes records/allowed_signers, line $n added: mallory@example.org namespaces="*"; its signature: key SHA256:"*" is not in allowed_signers: only a key that records/allowed_signers at origin/main trusts for git and idem-approval may change it"* ]]
	# its commits, its record and its approval are not trusted either
	[[ "$output" == *"::error file=records::commit FAIL: key SHA256:"*" is not in allowed_signers: trust me"* ]]
	[[ "$output" == *"::error file=$r::record FAIL: signature: key SHA256:"*" is not in allowed_signers (records/allowed_signers at origin/main)"* ]]
	# the referees agree: the base's file trusts none of it
	run ! base_git_trusts "$grant"
	run ! ssh-keygen -Y verify -f "$BATS_TEST_TMPDIR/base_signers" -I mallory@example.org -n idem-record \
		-s "$r.sig" <"$r"
	run ! ssh-keygen -Y verify -f "$BATS_TEST_TMPDIR/base_signers" -I mallory@example.org -n idem-approval \
		-s "$r.approval.sig" <"$r"
	# while the work tree's file, which the pull request wrote, would trust all of it
	ssh-keygen -Y verify -f records/allowed_signers -I mallory@example.org -n idem-record \
		-s "$r.sig" <"$r" >/dev/null
	grep -qF '**FAIL** allowed_signers' "$summary"
}

@test "a pull request whose key line the owner added, in a commit the owner signed, passes" {
	line="newcomer@example.org namespaces=\"git,idem-record\" $(cat "$mallory.pub")"
	echo "$line" >>records/allowed_signers
	git add records/allowed_signers
	commit_as "$owner" -m "signers: the newcomer may sign records"
	grant=$(git rev-parse HEAD)
	r=$(mkrecord -k "$mallory" -c <"$RUN")
	approve "$r"
	run --separate-stderr check_step
	[ "$status" -eq 0 ]
	assert_equal "$output" ""
	grep -qF "$r" "$summary"
	grep -qF -- '- **approval:** approved by owner@example.org' "$summary"
	grep -qF "signed by owner@example.org, who may approve: its lines count from this commit on" "$summary"
	# the referees agree: the base trusts the owner for commits and approvals
	base_git_trusts "$grant"
	ssh-keygen -Y find-principals -f "$BATS_TEST_TMPDIR/base_signers" -n idem-approval \
		-s "$r.approval.sig" | grep -qxF owner@example.org
}

@test "a key the base trusts for commits but not for approvals cannot change allowed_signers" {
	echo "mallory@example.org namespaces=\"git,idem-record\" $(cat "$mallory.pub")" >>records/allowed_signers
	git add records/allowed_signers
	signed_commit -m "the engineer trusts a friend"
	id=$(git rev-parse HEAD)
	base_git_trusts "$id"
	run -1 verify-record --history -t --since origin/main
	grep -qF "audit	signers	$id	FAIL	changes records/allowed_signers, line 3 added: mallory@example.org" <<<"$output"
	grep -qF "its signer may not approve: key SHA256:" <<<"$output"
	# the engineer's own commit is still signed by a trusted key
	grep -qF "audit	commit	$id	ok	signed by eng@example.org" <<<"$output"
}

@test "a line removed by anyone but an owner fails too, naming the line" {
	sed -i '/^owner@example.org/d' records/allowed_signers
	git add records/allowed_signers
	signed_commit -m "no more owner"
	id=$(git rev-parse HEAD)
	run -1 verify-record --history -t --since origin/main
	grep -qF "audit	signers	$id	FAIL	changes records/allowed_signers, line 2 removed: owner@example.org" <<<"$output"
}

@test "a granted key counts from the owner's commit on, not before it" {
	echo "note" >records/NOTE
	git add records/NOTE
	commit_as "$mallory" -m "records: before the grant"
	before=$(git rev-parse HEAD)
	echo "newcomer@example.org namespaces=\"git,idem-record\" $(cat "$mallory.pub")" >>records/allowed_signers
	git add records/allowed_signers
	commit_as "$owner" -m "signers: the newcomer"
	echo "more" >>records/NOTE
	git add records/NOTE
	commit_as "$mallory" -m "records: after the grant"
	after=$(git rev-parse HEAD)
	run -1 verify-record --history -t --since origin/main
	grep -qF "audit	commit	$before	FAIL	key SHA256:" <<<"$output"
	grep -qF "audit	commit	$after	ok	signed by newcomer@example.org: records: after the grant" <<<"$output"
	# git agrees once told of the grant, and not with the base's file
	run ! base_git_trusts "$after"
	git -c gpg.format=ssh -c gpg.ssh.allowedSignersFile=records/allowed_signers verify-commit "$after" 2>/dev/null
}

@test "-f keeps the root outside the repository; a base without allowed_signers trusts nobody" {
	echo "mallory@example.org namespaces=\"git,idem-record\" $(cat "$mallory.pub")" >>records/allowed_signers
	git add records/allowed_signers
	commit_as "$mallory" -m "trust me"
	cp records/allowed_signers "$BATS_TEST_TMPDIR/kept-elsewhere"
	run -0 verify-record --history -c -t --since origin/main -f "$BATS_TEST_TMPDIR/kept-elsewhere"
	run ! grep -q "	signers	" <<<"$output"
	# a base from before the file was committed
	first=$(git rev-list --max-parents=0 HEAD)
	run -1 verify-record --history -c -t --since "$first"
	grep -qF "audit	signers	records/allowed_signers	FAIL	records/allowed_signers at $first: not in $first, so no key is trusted; give one with -f" <<<"$output"
}

@test "an approval signed by a key the pull request added does not count" {
	echo "mallory@example.org namespaces=\"idem-approval\" $(cat "$mallory.pub")" >>records/allowed_signers
	git add records/allowed_signers
	signed_commit -m "a second approver"
	r=$(mkrecord -k "$key" -c <"$RUN")
	mkrecord --approve "$r" -k "$mallory" >/dev/null
	git add "$r.approval.sig"
	signed_commit -m "records: approved"
	run -1 verify-record --history -a -t --since origin/main
	grep -qF "audit	signers	" <<<"$output"
	grep -qF "audit	record	$r	FAIL	awaiting approval ($r.approval.sig: key SHA256:" <<<"$output"
	# ssh-keygen agrees with the base's file, and would not with the work tree's
	! ssh-keygen -Y verify -f "$BATS_TEST_TMPDIR/base_signers" -I mallory@example.org -n idem-approval \
		-s "$r.approval.sig" <"$r" 2>/dev/null
	ssh-keygen -Y verify -f records/allowed_signers -I mallory@example.org -n idem-approval \
		-s "$r.approval.sig" <"$r" >/dev/null
}
