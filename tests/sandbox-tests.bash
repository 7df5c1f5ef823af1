# The frame of every test file whose tests share one sandbox: it starts
# once for the file and stops after it; each test begins in the source tree
# with an empty queue, and $out and $err name files of its own.
#
# A file that needs more once its sandbox is up (a schema, the example
# run, a variable for every test) defines sandbox_file_setup after loading
# this. A file that needs more in each test's setup defines setup(),
# beginning with sandbox_test_setup; one whose tests must not begin that
# way defines a setup() of its own without it.

setup_file() {
	sandbox_up
	if declare -F sandbox_file_setup >/dev/null; then
		sandbox_file_setup
	fi
}

teardown_file() {
	sandbox_down
}

sandbox_test_setup() {
	cd "$BATS_TEST_DIRNAME/.."
	queue_reset
	out="$BATS_TEST_TMPDIR/out"
	err="$BATS_TEST_TMPDIR/err"
}

setup() {
	sandbox_test_setup
}
