/* git.h: what idem does in git, through libgit2 */
#ifndef IDEM_GIT_H
#define IDEM_GIT_H

#include <stddef.h>
#include <time.h>

#include "sig.h"
#include "error.h"

/* Where a file stands in the repository that holds it: the blob id of its
 * path in HEAD, the HEAD commit, and whether the file differs from that
 * blob (or is not committed at all). */
struct idem_git_revision {
	char blob[41], commit[41];
	int dirty;
	char path[1024];		/* relative to the work tree */
};
int idem_git_revision(const char *file, struct idem_git_revision *rev, struct idem_error *err);
/* The same, for a seed a record is made of: refused, with the commands
 * that fix it, outside a git repository or, unless allow_dirty, when it is
 * not committed as it is. */
int idem_git_seed_ready(const char *file, int allow_dirty, struct idem_git_revision *rev,
			struct idem_error *err);

/* The contents of path at a commit, in the repository that holds dir.
 * This, idem_git_revision and idem_git_commit keep the repository they
 * open for the next call in the same one, until idem_git_close. */
char *idem_git_read_at(const char *dir, const char *commit, const char *path, size_t *len,
		       struct idem_error *err);
void idem_git_close(void);

/* Commits files (paths under the work tree of the repository holding
 * them) on the current branch, signed with SSHSIG namespace "git" in the
 * gpgsig header, moving the branch only if it still points where it did.
 * Only these files change: other staged work stays staged. */
int idem_git_commit(const char *const *files, size_t nfiles, const char *message,
		    const struct idem_key *key, char commit_out[41], struct idem_error *err);

/* Which allowed signers a commit is checked against: trust[0].signers,
 * unless it descends from the commit trust[i].from (i >= 1, the last such
 * i), whose signers then count. */
struct idem_git_trust {
	char from[41];
	const struct idem_signers *signers;
};

/* Every commit reachable from HEAD (or in since..HEAD) that changed a path
 * under dir, newest first, with its signature checked against the signers
 * its place in the history trusts (ntrust >= 1). */
struct idem_git_commit_check {
	char id[41];
	char summary[256];
	time_t when;
	char *principal;		/* who signed, or NULL */
	char reason[1024];		/* why not, when not */
};
int idem_git_history(const char *dir, const char *since,
		     const struct idem_git_trust *trust, size_t ntrust,
		     struct idem_git_commit_check **out, size_t *n, struct idem_error *err);

/* A file through since..HEAD: what since holds at its path, and each
 * commit that changed it, oldest first, with its signature and the bytes
 * it signs (armor NULL when unsigned), and the file at its first parent
 * and at it (NULL where absent; each with a NUL past its length). */
struct idem_git_file_change {
	char id[41], summary[256];
	time_t when;
	char *armor, *data, *before, *after;
	size_t armor_len, data_len, before_len, after_len;
};
struct idem_git_file_history {
	char path[1024];		/* relative to the work tree */
	char base[41];			/* since, as a commit id */
	char *at_base;			/* NULL when since has no such file */
	size_t at_base_len;
	struct idem_git_file_change *changes;
	size_t nchanges;
};
int idem_git_file_history(const char *file, const char *since, struct idem_git_file_history *h,
			  struct idem_error *err);
void idem_git_file_history_free(struct idem_git_file_history *h);

/* The names of the files directly in dir whose contents differ between
 * HEAD and its merge base with since (a pull request's base branch): what
 * the commits since then added, changed or removed there, in name order;
 * with whole, every such file of the repository, as a path from the top
 * of its work tree. Caller frees each name and the list (idem_free_list). */
int idem_git_changed(const char *dir, const char *since, int whole, char ***names, size_t *n,
		     struct idem_error *err);

/* The committer time of the newest commit reachable from HEAD that changed
 * file; *committed is 0, and *when unset, when the file in the work tree is
 * not what HEAD holds at its path (not committed, or changed since). */
int idem_git_last_change(const char *file, time_t *when, int *committed, struct idem_error *err);

#endif
