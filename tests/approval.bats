#!/usr/bin/env bats
# The owner's approval of a record: an SSHSIG in namespace idem-approval
# over the record's exact bytes, made by mkrecord --approve, with the real
# ssh-keygen as referee and verify-record's audit saying who approved it.

load helper
load sandbox-tests
load records-helper

sandbox_file_setup() {
	invoice_line_run
}

setup() {
	team_repo "$BATS_TEST_TMPDIR/repo"
}

record() {
	mkrecord -k "$key" -c <"$RUN"
}

# What the audit says of one record, in its tab-separated form.
audit_of() {
	verify-record --history -t "${@:2}" | awk -F '\t' -v r="$1" '$1 == "audit" && $3 == r { print $4 "\t" $5 }'
}

today_of_commit() {
	TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%d -- "$1"
}

@test "an approval made with the owner's key verifies with ssh-keygen, and the audit names the owner and the day" {
	r=$(record)
	run -0 verify-record --history
	[[ "$output" == *"record  $r"*" ok     pass, signed by eng@example.org; awaiting approval"* ]]
	run -0 mkrecord --approve "$r" -k "$owner"
	assert_equal "$output" "$r.approval.sig"
	ssh-keygen -Y verify -f records/allowed_signers -I owner@example.org -n idem-approval -s "$r.approval.sig" <"$r"
	# not committed yet: approved, and the audit says the approval is not in git
	assert_equal "$(audit_of "$r")" "ok	pass, signed by eng@example.org; approved by owner@example.org, approval not committed"
	git add "$r.approval.sig"
	signed_commit -m "records: approved"
	assert_equal "$(audit_of "$r")" "ok	pass, signed by eng@example.org; approved by owner@example.org on $(today_of_commit "$r.approval.sig")"
	run -0 verify-record --history --require-approval
}

@test "an approval that ssh-keygen -Y sign makes in namespace idem-approval counts too" {
	r=$(record)
	cp "$r" "$BATS_TEST_TMPDIR/copy"
	ssh-keygen -q -Y sign -f "$owner" -n idem-approval "$BATS_TEST_TMPDIR/copy"
	mv "$BATS_TEST_TMPDIR/copy.sig" "$r.approval.sig"
	run -0 verify-record "$r"
	[[ "$(audit_of "$r")" == *"; approved by owner@example.org, approval not committed" ]]
}

@test "an engineer's key cannot approve: ssh-keygen and verify-record both refuse it (namespace)" {
	r=$(record)
	run -0 mkrecord --approve "$r" -k "$key"
	run ssh-keygen -Y verify -f records/allowed_signers -I eng@example.org -n idem-approval -s "$r.approval.sig" <"$r"
	[ "$status" -ne 0 ]
	fp=$(ssh-keygen -l -f "$key.pub" | cut -d ' ' -f 2)
	want="awaiting approval ($r.approval.sig: key $fp is not allowed to sign in this namespace (namespace idem-approval) (records/allowed_signers))"
	assert_equal "$(audit_of "$r")" "ok	pass, signed by eng@example.org; $want"
	run -1 verify-record --history -a -t
	grep -qxF "audit	record	$r	FAIL	$want" <<<"$output"
	# nor can the owner's approval stand in for the record's signature
	mkrecord --approve "$r" -k "$owner" >/dev/null
	cp "$r.approval.sig" "$r.sig"
	run -1 verify-record "$r"
	[[ "$output" == *"signature: signature is for namespace \"idem-approval\", not \"idem-record\""* ]]
}

@test "a record edited after its approval awaits approval again: the approval signs the exact bytes" {
	r=$(record)
	mkrecord --approve "$r" -k "$owner" >/dev/null
	git add "$r.approval.sig"
	signed_commit -m "records: approved"
	[[ "$(audit_of "$r")" == *"; approved by owner@example.org on "* ]]
	# the engineer changes the review date and signs the record again
	sed -i 's/^next_review: .*/next_review: "2099-01-01"/' "$r"
	resign "$r"
	git add "$r" "$r.sig"
	signed_commit -m "records: a later review"
	run -0 verify-record "$r"
	run ssh-keygen -Y verify -f records/allowed_signers -I owner@example.org -n idem-approval -s "$r.approval.sig" <"$r"
	[ "$status" -ne 0 ]
	want="awaiting approval ($r.approval.sig: it does not verify against the record as it is: it approves another version)"
	assert_equal "$(audit_of "$r")" "ok	pass, signed by eng@example.org; $want"
	run -1 verify-record --history --require-approval -g
	[[ "$output" == *"::error file=$r::record FAIL: $want"* ]]
	# approved again, it counts again
	mkrecord --approve "$r" -k "$owner" >/dev/null
	run -0 verify-record --history --require-approval
}

@test "--require-approval asks it of the current record of each rehearsal only" {
	old=$(record)
	new=$(record)
	[ "$old" != "$new" ]
	mkrecord --approve "$old" -k "$owner" >/dev/null
	run -1 verify-record --history -a -t
	grep -qxF "audit	record	$new	FAIL	awaiting approval" <<<"$output"
	rm "$old.approval.sig"
	mkrecord --approve "$new" -k "$owner" >/dev/null
	run -0 verify-record --history -a -t
	grep -qxF "audit	record	$old	ok	pass, signed by eng@example.org; awaiting approval" <<<"$output"
}

@test "mkrecord --approve -c commits the approval with a commit signed by the owner's key" {
	r=$(record)
	# an owner who commits approvals needs the git namespace as well
	sed -i 's/namespaces="idem-approval"/namespaces="idem-approval,git"/' records/allowed_signers
	git add records/allowed_signers
	signed_commit -m "the owner commits approvals"
	run -0 mkrecord --approve "$r" -k "$owner" -c
	assert_equal "$(git status --porcelain)" ""
	git log -1 --format=%s | grep -qxF "approval: $(basename "$r") approved"
	assert_equal "$(git_ssh log -1 --format=%G?)" G
	run -0 verify-record --history -a
	[[ "$output" == *"approved by owner@example.org on $(today_of_commit "$r.approval.sig")"* ]]
}

@test "mkrecord --approve: no key, another form's options, a record that is not there" {
	r=$(record)
	run -2 mkrecord --approve "$r"
	assert_equal "$output" "mkrecord: --approve: an approval is signed: give -k key"
	run -2 mkrecord --approve "$r" -k "$owner" -o elsewhere
	[[ "$output" == "usage: mkrecord"* ]]
	run -2 mkrecord --approve records/none.yaml -k "$owner"
	assert_equal "$output" "mkrecord: records/none.yaml: No such file or directory"
	[ ! -e records/none.yaml.approval.sig ]
	run -2 verify-record -a "$r"
	[[ "$output" == "usage: verify-record"* ]]
}
