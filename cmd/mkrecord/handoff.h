/* handoff.h: what the handoff (templates/handoff.md) shows beside the
 * record's own fields: times from the run's start, durations in human
 * units, measures on one line each, commands folded to fit, and the
 * timeline (mkrecord(1), THE HANDOFF) */
#ifndef IDEM_HANDOFF_H
#define IDEM_HANDOFF_H

#include <stddef.h>

#include <jansson.h>

/* The longest line of a handoff outside tables: prose and commands are
 * folded to it where they have a blank to fold at. */
#define IDEM_HANDOFF_WIDTH 120

/* Who signed and where the files are, as the handoff names them. */
struct idem_handoff_files {
	const char *record;	/* the record's path, as mkrecord names it */
	const char *svg;	/* the timeline's file name, beside the handoff */
	const char *signers;	/* the allowed_signers file, or NULL */
	const char *principal;	/* the signer's principal there, or NULL */
	const char *fingerprint;	/* "SHA256:...", or NULL when unsigned */
};

/* Adds the conveniences to ctx, the record (idem-record(5)) the handoff
 * renders, in place: they are the template's, never the signed record's. */
void idem_handoff_context(json_t *ctx, const struct idem_handoff_files *files);

/* A command as lines of an indented code block: each line starts with
 * four blanks, and a shell pipeline (sql 0) is broken after "|" or "&&",
 * else at a blank with a backslash; SQL (sql 1) at a blank outside
 * quotes; continuation lines are indented four more. Caller frees. */
char *idem_handoff_block(const char *command, int sql, size_t width);

/* Markdown with every prose line longer than width folded at blanks; table
 * rows, code blocks and fenced blocks stay as they are; a list item's
 * continuation is indented under its text. Caller frees. */
char *idem_handoff_fold(const char *md, size_t width);

/* "SHA256:..." of an ed25519 public key, as ssh-keygen -l prints it. */
void idem_handoff_fingerprint(const unsigned char public_key[32], char out[64]);

#endif
