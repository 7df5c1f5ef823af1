#!/usr/bin/env bats
# verify-record(1) lists every reason verify-record can give: each message
# of the code, its literal parts between the printf conversions, is in the
# rendered page.

load helper

# The page as a reader sees it, white space folded.
page() {
	MANWIDTH=1000 man -l "$BATS_TEST_DIRNAME/../man/verify-record.1" 2>/dev/null | tr -s ' \t\n' ' '
}

# The formats of the messages that give a reason: a record's, a stale
# record's and the verdict policy's.
formats() {
	local src=("$BATS_TEST_DIRNAME"/../cmd/verify-record/*.c)

	grep -ho 'reason(c, "[^"]*"' "${src[@]}" | sed 's/^reason(c, "//; s/"$//'
	grep -ho 'stale_reason(out, size, "[^"]*"' "${src[@]}" | sed 's/^stale_reason(out, size, "//; s/"$//'
	grep -ho 'stale_text(out, size, "[^"]*"' "${src[@]}" | sed 's/^stale_text(out, size, "\(.*\)"$/the seed'"'"'s \1 is/'
	sed -n '/^verdict_policy(/,/^}/p' "${src[@]}" | grep -o 'snprintf(out, size, "[^"]*"' |
		sed 's/^snprintf(out, size, "//; s/"$//'
	grep -ho '"the seed[^"]*"' "${src[@]}" | sed 's/^"//; s/"$//'
}

@test "every reason verify-record gives is in verify-record(1)" {
	text=$(page)
	n=0 missing=
	while IFS= read -r format; do
		n=$((n + 1))
		# the literal parts between conversions such as %s, %lld, %zu
		while IFS= read -r part; do
			part=$(printf '%s' "$part" | sed 's/^[ ,:;()]*//; s/[ ,:;()]*$//')
			[ "${#part}" -ge 4 ] || continue
			[[ "$text" == *"$part"* ]] || missing="$missing
$format: \"$part\""
		done < <(printf '%s\n' "$format" | sed 's/%[0-9.]*[a-z]*[sdu]/\n/g')
	done < <(formats)
	[ "$n" -ge 30 ]
	if [ -n "$missing" ]; then
		echo "not in verify-record(1):$missing"
		false
	fi
}
