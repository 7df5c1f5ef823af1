#!/usr/bin/env bats
# allowed_signers, case by case, with ssh-keygen -Y verify of OpenSSH as the
# referee: every line of the tables of tests/fixtures/allowed-signers goes
# through ssh-keygen and through idem's own check (signers-check, which
# verify-record's code path runs with the identity and the time given), at
# the same instant, and both must give the verdict the table expects. The
# lines of lines.table go through verify-record itself too. No PostgreSQL:
# only keys, a record and its signature.

load helper

setup_file() {
	cd "$BATS_TEST_DIRNAME/.."
	# the project's own passing record, signed by the test fixture key
	RECORD=$(grep -l '^verdict: "pass"$' records/*.yaml | head -n 1)
	export RECORD
	export KEY_TEXT=$(cut -d' ' -f1-2 tests/fixtures/keys/idem-test-fixture-NOT-SECRET_ed25519.pub)
	ssh-keygen -q -t ed25519 -N '' -f "$BATS_FILE_TMPDIR/other"
	export OTHER_TEXT=$(cut -d' ' -f1-2 "$BATS_FILE_TMPDIR/other.pub")
	export TRAILING=$(blob_variant trailing) B64CR=$(blob_variant cr) FLIPPED=$(blob_variant flipped)
	export LONG=$(printf 'x%.0s' $(seq 1023)) LONG1022=$(printf 'x%.0s' $(seq 1022))
}

# The key's base64 changed as a line of allowed_signers might hold it.
blob_variant() {
	python3 - "${KEY_TEXT#ssh-ed25519 }" "$1" <<-'EOF'
		import base64, sys
		text, how = sys.argv[1], sys.argv[2]
		blob = base64.b64decode(text)
		if how == "trailing":   # one byte more than an ed25519 key blob holds
		    print(base64.b64encode(blob + b"\0").decode())
		elif how == "cr":       # a carriage return inside the base64
		    print(text[:20] + "\r" + text[20:])
		elif how == "flipped":  # another key: one bit of it changed
		    print(base64.b64encode(blob[:-1] + bytes([blob[-1] ^ 1])).decode())
	EOF
}

# Expands a table line: \n, \r, \t and the placeholders.
expand() {
	local line=$1
	line=${line//@KEY@/$KEY_TEXT}
	line=${line//@OTHER@/$OTHER_TEXT}
	line=${line//@B64@/${KEY_TEXT#ssh-ed25519 }}
	line=${line//@TRAILING@/$TRAILING}
	line=${line//@B64CR@/$B64CR}
	line=${line//@FLIPPED@/$FLIPPED}
	line=${line//@LONG@/$LONG}
	line=${line//@LONG1022@/$LONG1022}
	line=${line//@PAST@/$PAST}
	line=${line//@FUTURE@/$FUTURE}
	line=${line//@PASTHM@/$PASTHM}
	line=${line//@FUTUREHM@/$FUTUREHM}
	line=${line//@PASTHMS@/$PASTHMS}
	line=${line//@FUTUREHMS@/$FUTUREHMS}
	printf '%b' "$line"
}

# ssh-keygen's verdict and ours, for one identity, at one instant (epoch
# seconds), in one time zone: "yes" or "no".
referee() {
	TZ=$1 ssh-keygen -Y verify -f "$BATS_TEST_TMPDIR/allowed" -I "$2" -n idem-record \
		-s "$RECORD.sig" -Overify-time="$(date -u -d "@$3" +%Y%m%d%H%M%SZ)" <"$RECORD" \
		>/dev/null 2>&1 && echo yes || echo no
}

ours() {
	local status=0
	TZ=$1 test_tool signers-check -I "$2" -f "$BATS_TEST_TMPDIR/allowed" -n idem-record -s "$RECORD.sig" \
		-t "$3" <"$RECORD" >/dev/null 2>"$BATS_TEST_TMPDIR/check.err" || status=$?
	case $status in
	0) echo yes ;;
	1) echo no ;;
	*) echo "error $status: $(cat "$BATS_TEST_TMPDIR/check.err")" ;;
	esac
}

trim() {
	local s=$1
	s=${s#"${s%%[![:space:]]*}"}
	printf '%s' "${s%"${s##*[![:space:]]}"}"
}

# Runs a table on standard input: "expected | identity | time zone | epoch
# | line", where expected is "yes" or "no", or, with verify-record in the
# run, "yes/no" for ssh-keygen -I identity and then verify-record, which
# asks for no identity; a line whose expected begins with # is a comment.
# Every disagreement is listed; any one fails the test.
run_table() {
	local with_verify_record=$1 failed=0 n=0 expected identity tz when line want_any got_any
	while IFS='|' read -r expected identity tz when line; do
		expected=$(trim "$expected")
		[ -n "$expected" ] && [ "${expected#\#}" = "$expected" ] || continue
		identity=$(expand "$(trim "$identity")")
		tz=$(trim "$tz")
		when=$(trim "$when")
		[ "$when" = now ] && when=$NOW
		line=${line# }
		n=$((n + 1))
		expand "$line" >"$BATS_TEST_TMPDIR/allowed"
		echo >>"$BATS_TEST_TMPDIR/allowed"
		want_any=${expected#*/}
		expected=${expected%/*}
		ssh=$(referee "$tz" "$identity" "$when")
		idem=$(ours "$tz" "$identity" "$when")
		if [ "$ssh" != "$expected" ] || [ "$idem" != "$expected" ]; then
			echo "case $n: expected $expected, ssh-keygen $ssh, idem $idem: -I '$identity' TZ=$tz: $line" >&2
			failed=1
		fi
		[ "$with_verify_record" = yes ] || continue
		got_any=$(TZ=$tz verify-record -f "$BATS_TEST_TMPDIR/allowed" "$RECORD" 2>/dev/null || true)
		case $got_any in
		*": verified, signed by "*)
			# verify-record names the principals; ssh-keygen must accept one of them
			local principals=${got_any##*signed by } p backed=no
			principals=${principals%; verdict *}
			IFS=, read -r -a names <<<"$principals"
			for p in "${names[@]}"; do
				[ "$(referee "$tz" "$p" "$NOW")" = yes ] && backed=yes
			done
			if [ "$backed" = no ]; then
				echo "case $n: verify-record accepts for '$principals', which ssh-keygen refuses: $line" >&2
				failed=1
			fi
			got_any=yes ;;
		*"NOT verified"*) got_any=no ;;
		*) got_any="an error" ;;
		esac
		if [ "$got_any" != "$want_any" ]; then
			echo "case $n: verify-record: expected $want_any, got $got_any: $line" >&2
			failed=1
		fi
	done
	[ "$n" -gt 0 ] || { echo "no case ran" >&2; return 1; }
	return $failed
}

# Dates around now, as the time options write them, in local time.
around_now() {
	NOW=$(date +%s)
	PAST=$(date -d "@$((NOW - 3 * 86400))" +%Y%m%d)
	FUTURE=$(date -d "@$((NOW + 3 * 86400))" +%Y%m%d)
	PASTHM=$(date -d "@$((NOW - 3 * 86400))" +%Y%m%d%H%M)
	FUTUREHM=$(date -d "@$((NOW + 3 * 86400))" +%Y%m%d%H%M)
	PASTHMS=$(date -d "@$((NOW - 3 * 86400))" +%Y%m%d%H%M%S)
	FUTUREHMS=$(date -d "@$((NOW + 3 * 86400))" +%Y%m%d%H%M%S)
}

@test "allowed_signers lines: ssh-keygen, idem and verify-record give the same verdicts" {
	around_now
	run_table yes <"$BATS_TEST_DIRNAME/fixtures/allowed-signers/lines.table"
}

@test "valid-after and valid-before at exact instants, in local time, in UTC, across summer time" {
	run_table no <"$BATS_TEST_DIRNAME/fixtures/allowed-signers/times.table"
}

@test "verify-record names a line it skips and goes on to the next, as ssh-keygen does" {
	around_now
	{
		echo "eng namespaces=\"git\",namespaces=\"idem-record\" $KEY_TEXT"
		echo "eng valid-after=\"$FUTURE\",valid-before=\"$PAST\" $KEY_TEXT"
		echo "eng namespaces=\"*,!idem-record\" $KEY_TEXT"
	} >"$BATS_TEST_TMPDIR/allowed"
	run --separate-stderr verify-record -f "$BATS_TEST_TMPDIR/allowed" "$RECORD"
	[ "$status" -eq 1 ]
	assert_equal "$stderr" "verify-record: $BATS_TEST_TMPDIR/allowed:1: multiple \"namespaces\" clauses: line skipped, as ssh-keygen skips it
verify-record: $BATS_TEST_TMPDIR/allowed:2: \"valid-before\" time is before \"valid-after\": line skipped, as ssh-keygen skips it"
	[[ "$output" == *"signature: key SHA256:"*" is not allowed to sign in this namespace (namespace idem-record) ($BATS_TEST_TMPDIR/allowed)"* ]]
	echo "eng $KEY_TEXT" >>"$BATS_TEST_TMPDIR/allowed"
	run --separate-stderr verify-record -f "$BATS_TEST_TMPDIR/allowed" "$RECORD"
	[ "$status" -eq 0 ]
	assert_equal "$output" "$RECORD: verified, signed by eng; verdict pass"
	# an allowed_signers file that cannot be read stops everything
	run verify-record -f "$BATS_TEST_TMPDIR/none" "$RECORD"
	[ "$status" -eq 2 ]
}

@test "a cert-authority line, and a line that names nobody, are each named as the reason" {
	echo "eng cert-authority $KEY_TEXT" >"$BATS_TEST_TMPDIR/allowed"
	run verify-record -f "$BATS_TEST_TMPDIR/allowed" "$RECORD"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is a cert-authority key, which signs only certificates (namespace idem-record)"* ]]
	echo "!* $KEY_TEXT" >"$BATS_TEST_TMPDIR/allowed"
	run verify-record -f "$BATS_TEST_TMPDIR/allowed" "$RECORD"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is on a line whose principals allow none of its names (namespace idem-record)"* ]]
}

@test "the armor of a signature: what ssh-keygen -Y verify refuses, idem refuses too" {
	echo "eng $KEY_TEXT" >"$BATS_TEST_TMPDIR/allowed"
	local sig=$BATS_TEST_TMPDIR/sig failed=0 how ssh idem
	for how in lf crlf crlf-begin crlf-body no-break-after-begin no-final-newline; do
		case $how in
		lf) cp "$RECORD.sig" "$sig" ;;
		crlf) sed 's/$/\r/' "$RECORD.sig" >"$sig" ;;
		crlf-begin) sed '1s/$/\r/' "$RECORD.sig" >"$sig" ;;
		crlf-body) sed '2,$s/$/\r/' "$RECORD.sig" >"$sig" ;;
		no-break-after-begin) { head -n 1 "$RECORD.sig" | tr -d '\n'; tail -n +2 "$RECORD.sig"; } >"$sig" ;;
		no-final-newline) printf '%s' "$(cat "$RECORD.sig")" >"$sig" ;;
		esac
		ssh=$(ssh-keygen -Y verify -f "$BATS_TEST_TMPDIR/allowed" -I eng -n idem-record \
			-s "$sig" <"$RECORD" >/dev/null 2>&1 && echo yes || echo no)
		idem=$(test_tool signers-check -I eng -f "$BATS_TEST_TMPDIR/allowed" -n idem-record -s "$sig" \
			-t "$(date +%s)" <"$RECORD" >/dev/null 2>&1 && echo yes || echo no)
		if [ "$ssh" != "$idem" ]; then
			echo "$how: ssh-keygen $ssh, idem $idem" >&2
			failed=1
		fi
	done
	return $failed
}
