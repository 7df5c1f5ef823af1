/* approve.h: the approve mode of mkrecord (mkrecord(1) --approve): the
 * owner's approval of a record, signed, beside it, and with -c committed */
#ifndef IDEM_APPROVE_H
#define IDEM_APPROVE_H

/* Approves the record at path with the key at key_path (NULL: a usage
 * error), committing the approval when do_commit is set; prints the
 * approval's path and returns 0, or exits. */
int idem_approve(const char *record, const char *key_path, int do_commit);

#endif
