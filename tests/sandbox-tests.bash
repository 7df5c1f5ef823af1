# The frame of a test file whose tests share one sandbox: it starts once
# for the file and stops after it; each test begins in the source tree with
# an empty queue, and $out and $err name files of its own. A file that needs
# more in its setup defines setup() after loading this, beginning with
# sandbox_test_setup.

setup_file() {
	sandbox_up
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
