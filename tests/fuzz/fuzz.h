/* fuzz.h: what every harness shares: the libFuzzer entry point and a
 * private scratch file for parsers that read from a path. */
#ifndef IDEM_FUZZ_H
#define IDEM_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data to a file of mode 0600 in a private directory made on first
 * use, and returns its path; aborts when the file cannot be written. */
const char *fuzz_scratch_file(const uint8_t *data, size_t size);

/* Stops the run with a message, so libFuzzer keeps the input as a crasher. */
void fuzz_fail(const char *what) __attribute__((noreturn));

#endif
