#!/usr/bin/env bats
# Hostile seeds and records: what a file may cost is bounded before it is
# built, and each refusal gives the reason that applies.

load helper

setup() {
	cd "$BATS_TEST_DIRNAME/.."
	out="$BATS_TEST_TMPDIR/out"
}

# The smallest seed, tests/fixtures/seeds/tiny.yaml, whose last line, 7,
# lists its job; its key "id", from column 11, is made "$1d" (as printf
# writes it).
bad_byte_seed() {
	sed '$d' tests/fixtures/seeds/tiny.yaml
	printf 'jobs: [ { '"$1"'d: j, payload: { k: k } } ]\n'
}

@test "hostile seeds are refused with the reason that applies, exit 2 and nothing written" {
	for seed in tests/fixtures/hostile/*.yaml; do
		[ "$(wc -c <"$seed")" -le 1024 ] || { echo "$seed is over 1 KB" >&2; return 1; }
		assert_refused "tests/golden/hostile/$(basename "$seed" .yaml).err" seed-gen "$seed"
	done
}

@test "a hostile seed is refused under a 200 MB address-space limit" {
	hard_limit
	for name in laughs merge-keys deep cycle; do
		assert_refused "tests/golden/hostile/$name.err" \
			timeout 60 $limit seed-gen "tests/fixtures/hostile/$name.yaml"
	done
}

@test "a payload shared through an alias is accepted" {
	seed-gen tests/fixtures/seeds/alias-payload.yaml >"$out"
	assert_equal "$(grep '^job' "$out" | cut -f 4 | sort -u)" '{"k":"one","lines":[{"n":1,"sku":"x"},{"n":2,"sku":"y"}]}'
	assert_equal "$(rows_of job "$out")" 2
}

@test "a bad byte in a seed is named by its line and column, not 1:1" {
	bad_byte_seed 'i\377' >"$BATS_TEST_TMPDIR/utf8.yaml"
	bad_byte_seed 'i\001' >"$BATS_TEST_TMPDIR/control.yaml"
	bad_byte_seed 'i\000' >"$BATS_TEST_TMPDIR/nul.yaml"
	# a character of two bytes before it is one column
	bad_byte_seed '\303\251\377' >"$BATS_TEST_TMPDIR/after-e.yaml"
	run seed-gen "$BATS_TEST_TMPDIR/utf8.yaml"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $BATS_TEST_TMPDIR/utf8.yaml:7:12: YAML: invalid leading UTF-8 octet (byte 0xFF)"
	run seed-gen "$BATS_TEST_TMPDIR/control.yaml"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $BATS_TEST_TMPDIR/control.yaml:7:12: YAML: control characters are not allowed (U+0001)"
	run seed-gen "$BATS_TEST_TMPDIR/nul.yaml"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $BATS_TEST_TMPDIR/nul.yaml:7:12: YAML: control characters are not allowed (U+0000)"
	run seed-gen "$BATS_TEST_TMPDIR/after-e.yaml"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $BATS_TEST_TMPDIR/after-e.yaml:7:12: YAML: invalid leading UTF-8 octet (byte 0xFF)"
}

@test "a seed of more nodes, or more bytes, than the limits is refused, named" {
	# the smallest seed, and a list, or a comment, at the end
	python3 - tests/fixtures/seeds/tiny.yaml "$BATS_TEST_TMPDIR" <<-'EOF'
	import sys
	head = open(sys.argv[1]).read()
	open(sys.argv[2] + "/nodes.yaml", "w").write(head + "cannot_reproduce: [" + "x," * 1000000 + "x]\n")
	open(sys.argv[2] + "/bytes.yaml", "w").write(head + "# " + "x" * (16 << 20) + "\n")
	EOF
	run seed-gen "$BATS_TEST_TMPDIR/nodes.yaml"
	[ "$status" -eq 2 ]
	# the 1000001st node: 7 lines of 2 to 8 nodes, then the list and its items
	[[ "$output" == "seed-gen: $BATS_TEST_TMPDIR/nodes.yaml:8:"*": more than 1000000 nodes (scalars, mappings and lists)" ]]
	run seed-gen "$BATS_TEST_TMPDIR/bytes.yaml"
	[ "$status" -eq 2 ]
	assert_equal "$output" "seed-gen: $BATS_TEST_TMPDIR/bytes.yaml: larger than 16777216 bytes"
}

# A throwaway key that allowed_signers trusts, to sign hostile records.
signed_record() {
	if [ ! -f "$BATS_TEST_TMPDIR/key" ]; then
		ssh-keygen -q -t ed25519 -N '' -C hostile -f "$BATS_TEST_TMPDIR/key"
		echo "eng@example.org namespaces=\"idem-record\" $(cat "$BATS_TEST_TMPDIR/key.pub")" \
			>"$BATS_TEST_TMPDIR/allowed_signers"
	fi
	cp "tests/fixtures/hostile/records/$1.yaml" "$BATS_TEST_TMPDIR/$1.yaml"
	ssh-keygen -q -Y sign -f "$BATS_TEST_TMPDIR/key" -n idem-record "$BATS_TEST_TMPDIR/$1.yaml"
}

@test "a signed record with aliases, deep nesting, a NUL or a key given twice is refused for that" {
	for name in laughs deep nul twice; do
		signed_record "$name"
	done
	cd "$BATS_TEST_TMPDIR"
	run verify-record -f allowed_signers laughs.yaml deep.yaml nul.yaml twice.yaml
	[ "$status" -eq 1 ]
	assert_equal "$output" "laughs.yaml: NOT verified
laughs.yaml: laughs.yaml:4:8: alias *a: aliases are not allowed in a record
deep.yaml: NOT verified
deep.yaml: deep.yaml:3:74: mappings and lists nested more than 64 deep
nul.yaml: NOT verified
nul.yaml: nul.yaml:3:12: a text holds a NUL character (\\0)
twice.yaml: NOT verified
twice.yaml: twice.yaml:4:1: key verdict given twice"
}

@test "a record whose signature fails is not parsed: only the signature is reported" {
	cp tests/fixtures/hostile/records/laughs.yaml "$BATS_TEST_TMPDIR/laughs.yaml"
	cd "$BATS_TEST_TMPDIR"
	ssh-keygen -q -t ed25519 -N '' -f stranger
	ssh-keygen -q -Y sign -f stranger -n idem-record laughs.yaml
	ssh-keygen -q -t ed25519 -N '' -f trusted
	echo "eng@example.org $(cat trusted.pub)" >allowed_signers
	run verify-record -f allowed_signers laughs.yaml
	[ "$status" -eq 1 ]
	assert_equal "${#lines[@]}" 2
	[[ "${lines[1]}" == "laughs.yaml: signature: key SHA256:"*" is not in allowed_signers (allowed_signers)" ]]
	# and with no signature at all
	rm laughs.yaml.sig
	run verify-record -f allowed_signers laughs.yaml
	[ "$status" -eq 1 ]
	assert_equal "$output" "laughs.yaml: NOT verified
laughs.yaml: no signature: laughs.yaml.sig: No such file or directory"
}

@test "hostile records are refused under a 200 MB address-space limit, signed or not" {
	hard_limit
	signed_record laughs
	cd "$BATS_TEST_TMPDIR"
	run timeout 60 $limit verify-record -f allowed_signers laughs.yaml
	[ "$status" -eq 1 ]
	assert_equal "${lines[1]}" "laughs.yaml: laughs.yaml:4:8: alias *a: aliases are not allowed in a record"
	rm laughs.yaml.sig
	run timeout 60 $limit verify-record -f allowed_signers laughs.yaml
	[ "$status" -eq 1 ]
	assert_equal "${lines[1]}" "laughs.yaml: no signature: laughs.yaml.sig: No such file or directory"
}

@test "the history audit reads a hostile record as verify-record does: its signature first" {
	signed_record laughs
	cd "$BATS_TEST_TMPDIR"
	new_repo repo
	mkdir records
	cp ../laughs.yaml records/signed.yaml
	cp ../laughs.yaml.sig records/signed.yaml.sig
	cp ../laughs.yaml records/unsigned.yaml
	git add records
	git commit -q -m "records: hostile"
	run verify-record -f ../allowed_signers --history -t
	[ "$status" -eq 1 ]
	assert_equal "$(grep '^audit	record' <<<"$output" | cut -f 3-)" "records/signed.yaml	FAIL	records/signed.yaml:4:8: alias *a: aliases are not allowed in a record
records/unsigned.yaml	FAIL	no signature: records/unsigned.yaml.sig: No such file or directory"
}

@test "a huge signature, key or allowed_signers file is refused by its size, not read" {
	hard_limit
	signed_record laughs
	cd "$BATS_TEST_TMPDIR"
	# sparse files of a gigabyte: reading any of them whole would pass the limit
	truncate -s 1G huge.yaml.sig huge_key huge_signers
	chmod 600 huge_key
	cp laughs.yaml huge.yaml
	run timeout 60 $limit verify-record -f allowed_signers huge.yaml
	[ "$status" -eq 1 ]
	assert_equal "${lines[1]}" "huge.yaml: no signature: huge.yaml.sig: larger than 65536 bytes"
	run timeout 60 $limit verify-record -f huge_signers laughs.yaml
	[ "$status" -eq 2 ]
	assert_equal "$output" "verify-record: huge_signers: larger than 16777216 bytes"
	echo x >stream.tsv
	run timeout 60 $limit mkrecord -k huge_key -o out stream.tsv
	[ "$status" -eq 2 ]
	[[ "$output" == *"huge_key: larger than 65536 bytes"* ]]
	[ ! -e out ]
}

# A hostile file of 1 KB is refused within 50 MB of
# resident memory, GNU time's peak (ASan's shadow memory counts there too,
# so a sanitized build skips it; the time is make bench's, BENCH=hostile).
@test "each hostile seed and record is refused within 50 MB, signed or not" {
	skip_if_sanitized "an ASan build's shadow memory is resident memory too"
	for seed in tests/fixtures/hostile/*.yaml; do
		/usr/bin/time -f %M -o "$BATS_TEST_TMPDIR/rss" seed-gen "$seed" >/dev/null 2>&1 || true
		[ "$(tail -n 1 "$BATS_TEST_TMPDIR/rss")" -lt 51200 ] ||
			{ echo "seed-gen $seed: $(tail -n 1 "$BATS_TEST_TMPDIR/rss") KiB" >&2; return 1; }
	done
	for name in laughs deep nul twice; do
		signed_record "$name"
	done
	cd "$BATS_TEST_TMPDIR"
	for record in laughs.yaml deep.yaml nul.yaml twice.yaml; do
		for signed in yes no; do
			[ "$signed" = yes ] || rm -f "$record.sig"
			run /usr/bin/time -f %M -o rss verify-record -f allowed_signers "$record"
			[ "$status" -eq 1 ]
			[ "$(tail -n 1 rss)" -lt 51200 ] || { echo "verify-record $record, signed $signed: $(tail -n 1 rss) KiB" >&2; return 1; }
		done
	done
}
