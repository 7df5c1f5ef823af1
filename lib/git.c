#include <sys/stat.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <git2.h>

#include "git.h"
#include "parallel.h"
#include "file.h"
#include "text.h"

/*
 * libgit2 built on mbed TLS, as Debian's is, parses the whole system CA
 * bundle in git_libgit2_init: a few milliseconds of CPU, more than the rest
 * of a signed commit, for programs that never open a connection. While the
 * library initialises, that parse is refused here (this definition comes
 * before mbed TLS's own in the lookup order); at any other time the call
 * goes through. A connection made later would find no trusted authority and
 * fail, never trust more. A libgit2 on OpenSSL never calls it.
 */
static int initialising;

int mbedtls_x509_crt_parse_file(void *chain, const char *path);

int
mbedtls_x509_crt_parse_file(void *chain, const char *path)
{
	static int (*real)(void *, const char *);

	if (initialising)
		return -0x2900;	/* MBEDTLS_ERR_X509_FILE_IO_ERROR */
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "mbedtls_x509_crt_parse_file");
	return real ? real(chain, path) : -0x2900;
}

static void
init(void)
{
	static int done;

	if (!done) {
		initialising = 1;
		git_libgit2_init();
		initialising = 0;
		/* the objects a commit of idem's names are the blobs it has
		 * just written and the trees and commit HEAD has: checking
		 * that each exists would read the header of every file of the
		 * tree, so every record ever committed, at each commit */
		git_libgit2_opts(GIT_OPT_ENABLE_STRICT_OBJECT_CREATION, 0);
		done = 1;
	}
}

static int
git_fail(struct idem_error *err, const char *what)
{
	const git_error *e = git_error_last();

	return idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", what, e && e->message ? e->message :
	    "libgit2 error");
}

/* The repository at or above path; errors name dir, what the caller was
 * asked for. */
static int
open_repo(git_repository **repo, const char *path, const char *dir, struct idem_error *err)
{
	init();
	if (git_repository_open_ext(repo, path, 0, NULL) != 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: not in a git repository", dir);
	if (git_repository_is_bare(*repo)) {
		git_repository_free(*repo);
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: a bare repository", dir);
	}
	return 0;
}

/* One repository kept open for the program: mkrecord reads the seed's
 * revision and commits the record in the same one, and an audit reads a
 * seed at every record's revision; opening it reads its configuration,
 * HEAD and more each time. */
static git_repository *kept_repo;
static char *kept_gitdir, *kept_dir;	/* its git directory; the last dir asked for */

void
idem_git_close(void)
{
	git_repository_free(kept_repo);
	free(kept_gitdir);
	free(kept_dir);
	kept_repo = NULL;
	kept_gitdir = NULL;
	kept_dir = NULL;
}

/* The repository that holds dir, the kept one when it is the same. The
 * caller does not free it. */
static int
kept(git_repository **repo, const char *dir, struct idem_error *err)
{
	git_buf gitdir = GIT_BUF_INIT;
	int rc = 0;

	*repo = kept_repo;
	if (kept_repo != NULL && strcmp(kept_dir, dir) == 0)
		return 0;
	init();
	if (git_repository_discover(&gitdir, dir, 0, NULL) != 0)
		return idem_error_set(err, IDEM_EXIT_ENV, "%s: not in a git repository", dir);
	if (kept_repo == NULL || strcmp(kept_gitdir, gitdir.ptr) != 0) {
		git_repository *opened;

		idem_git_close();
		if ((rc = open_repo(&opened, gitdir.ptr, dir, err)) == 0) {
			kept_repo = opened;
			kept_gitdir = idem_estrdup(gitdir.ptr);
		}
	}
	git_buf_dispose(&gitdir);
	if (rc == 0) {
		free(kept_dir);
		kept_dir = idem_estrdup(dir);
	}
	*repo = kept_repo;
	return rc;
}

/* The directory part of a path, "." when it has none. */
static void
dir_of(const char *file, char *out, size_t size)
{
	char *slash;

	snprintf(out, size, "%s", file);
	if ((slash = strrchr(out, '/')) == out)
		out[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	else
		snprintf(out, size, ".");
}

/* A path relative to the repository's work tree. */
static int
relative(git_repository *repo, const char *file, char *out, size_t size, struct idem_error *err)
{
	char dir[PATH_MAX], abs[PATH_MAX + 1];
	const char *workdir = git_repository_workdir(repo), *slash = strrchr(file, '/');
	const char *base = slash ? slash + 1 : file;
	size_t wlen = strlen(workdir);
	int n;

	idem_dir_of(file, dir, sizeof(dir));
	if (realpath(dir, abs) == NULL)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s:", file);
	strcat(abs, "/");
	if (strncmp(abs, workdir, wlen) != 0)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s is outside the work tree %s", file,
		    workdir);
	n = snprintf(out, size, "%s%s", abs + wlen, base);
	if (n < 0 || (size_t)n >= size)
		return idem_error_set(err, IDEM_EXIT_USAGE, "%s: path too long", file);
	return 0;
}

int
idem_git_revision(const char *file, struct idem_git_revision *rev, struct idem_error *err)
{
	git_repository *repo = NULL;
	git_object *head = NULL;
	git_tree_entry *entry = NULL;
	git_tree *tree = NULL;
	git_oid on_disk;
	char dir[PATH_MAX];
	int rc = -1;

	memset(rev, 0, sizeof(*rev));
	dir_of(file, dir, sizeof(dir));
	if (kept(&repo, dir, err) < 0)
		return -1;
	if (relative(repo, file, rev->path, sizeof(rev->path), err) < 0)
		goto out;
	if (git_odb_hashfile(&on_disk, file, GIT_OBJECT_BLOB) != 0) {
		git_fail(err, file);
		goto out;
	}
	rev->dirty = 1;
	if (git_revparse_single(&head, repo, "HEAD^{commit}") == 0) {
		git_oid_tostr(rev->commit, sizeof(rev->commit), git_object_id(head));
		if (git_commit_tree(&tree, (git_commit *)head) == 0 &&
		    git_tree_entry_bypath(&entry, tree, rev->path) == 0) {
			git_oid_tostr(rev->blob, sizeof(rev->blob), git_tree_entry_id(entry));
			rev->dirty = git_oid_cmp(git_tree_entry_id(entry), &on_disk) != 0;
		}
	}
	if (rev->blob[0] == '\0')
		git_oid_tostr(rev->blob, sizeof(rev->blob), &on_disk);
	rc = 0;
out:
	git_tree_entry_free(entry);
	git_tree_free(tree);
	git_object_free(head);
	return rc;
}

int
idem_git_seed_ready(const char *file, int allow_dirty, struct idem_git_revision *rev,
		    struct idem_error *err)
{
	char *q = idem_shell_quote(file);
	int rc = 0;

	if (idem_git_revision(file, rev, err) < 0) {
		if (strstr(err->text, ": not in a git repository") != NULL)
			idem_error_set(err, IDEM_EXIT_ENV, "%s: not in a git repository; run: git init "
			    "&& git add %s && git commit -m seed", file, q);
		rc = -1;
	} else if (rev->dirty && !allow_dirty && !*rev->commit) {
		rc = idem_error_set(err, IDEM_EXIT_USAGE, "%s: not committed, in a repository "
		    "without a commit; run: git add %s && git commit -m seed, or give --allow-dirty "
		    "and the record will say so", file, q);
	} else if (rev->dirty && !allow_dirty) {
		rc = idem_error_set(err, IDEM_EXIT_USAGE, "%s has changes not committed at %.12s; "
		    "run: git add %s && git commit -m seed, or give --allow-dirty and the record "
		    "will say so", file, rev->commit, q);
	}
	free(q);
	return rc;
}

char *
idem_git_read_at(const char *dir, const char *commit, const char *path, size_t *len,
		 struct idem_error *err)
{
	git_repository *repo = NULL;
	git_object *obj = NULL;
	git_tree *tree = NULL;
	git_tree_entry *entry = NULL;
	git_blob *blob = NULL;
	git_oid id;
	char *out = NULL;

	if (kept(&repo, dir, err) < 0)
		return NULL;
	if (git_oid_fromstr(&id, commit) != 0 || git_object_lookup(&obj, repo, &id, GIT_OBJECT_COMMIT) != 0) {
		idem_error_set(err, IDEM_EXIT_FINDING, "commit %s is not in the repository", commit);
		goto out;
	}
	if (git_commit_tree(&tree, (git_commit *)obj) != 0 ||
	    git_tree_entry_bypath(&entry, tree, path) != 0 ||
	    git_blob_lookup(&blob, repo, git_tree_entry_id(entry)) != 0) {
		idem_error_set(err, IDEM_EXIT_FINDING, "%s is not in commit %s", path, commit);
		goto out;
	}
	*len = (size_t)git_blob_rawsize(blob);
	out = idem_emalloc(*len + 1);
	memcpy(out, git_blob_rawcontent(blob), *len);
	out[*len] = '\0';
out:
	git_blob_free(blob);
	git_tree_entry_free(entry);
	git_tree_free(tree);
	git_object_free(obj);
	return out;
}

/* Adds a file as it is now to index, the commit's, and to repo_index,
 * the work tree's. */
static int
add_file(git_repository *repo, git_index *index, git_index *repo_index, const char *file,
	 struct idem_error *err)
{
	git_index_entry entry;
	struct stat st;
	char rel[1024], *data;
	size_t len;

	if (relative(repo, file, rel, sizeof(rel), err) < 0)
		return -1;
	if ((data = idem_read_file(file, &len, err)) == NULL)
		return -1;
	if (stat(file, &st) < 0) {
		free(data);
		return idem_error_set(err, IDEM_EXIT_ENV, "%s:", file);
	}
	memset(&entry, 0, sizeof(entry));
	entry.mode = GIT_FILEMODE_BLOB;
	entry.path = rel;
	if (git_blob_create_from_buffer(&entry.id, repo, data, len) != 0 ||
	    git_index_add(index, &entry) != 0) {
		free(data);
		return git_fail(err, rel);
	}
	free(data);
	/* the work tree's entry: the blob and mode just committed with the
	 * file's stat data, as git add would make it, without hashing and
	 * writing the blob a second time */
	entry.ctime.seconds = (int32_t)st.st_ctim.tv_sec;
	entry.ctime.nanoseconds = (uint32_t)st.st_ctim.tv_nsec;
	entry.mtime.seconds = (int32_t)st.st_mtim.tv_sec;
	entry.mtime.nanoseconds = (uint32_t)st.st_mtim.tv_nsec;
	entry.dev = (uint32_t)st.st_dev;
	entry.ino = (uint32_t)st.st_ino;
	entry.uid = (uint32_t)st.st_uid;
	entry.gid = (uint32_t)st.st_gid;
	entry.file_size = (uint32_t)st.st_size;
	if (git_index_add(repo_index, &entry) != 0)
		return git_fail(err, rel);
	return 0;
}

/* The commit of tree on parent (NULL for none), signed by key in its
 * gpgsig header; not yet on any branch. */
static int
signed_commit(git_repository *repo, const char *message, git_tree *tree, git_commit *parent,
	      const struct idem_key *key, git_oid *commit_id, struct idem_error *err)
{
	git_signature *who = NULL;
	git_buf buffer = GIT_BUF_INIT;
	char *armor = NULL;
	int rc = -1;

	if (git_signature_default(&who, repo) != 0 &&
	    git_signature_now(&who, "idem", "idem@localhost") != 0) {
		git_fail(err, "author");
		goto out;
	}
	if (git_commit_create_buffer(&buffer, repo, who, who, NULL, message, tree,
	    parent ? 1 : 0, parent ? (const git_commit **)&parent : NULL) != 0) {
		git_fail(err, "making the commit");
		goto out;
	}
	if ((armor = idem_sig_sign(key, "git", buffer.ptr, buffer.size)) == NULL) {
		idem_error_set(err, IDEM_EXIT_USAGE, "the signature of the commit does not verify "
		    "under the key's public key: the key is damaged");
		goto out;
	}
	/* libgit2 adds its own final newline to the header */
	armor[strlen(armor) - 1] = '\0';
	if (git_commit_create_with_signature(commit_id, repo, buffer.ptr, armor, NULL) != 0) {
		git_fail(err, "signing the commit");
		goto out;
	}
	rc = 0;
out:
	free(armor);
	git_buf_dispose(&buffer);
	git_signature_free(who);
	return rc;
}

int
idem_git_commit(const char *const *files, size_t nfiles, const char *message,
		const struct idem_key *key, char commit_out[41], struct idem_error *err)
{
	git_repository *repo = NULL;
	git_index *index = NULL, *repo_index = NULL;
	git_reference *head_ref = NULL, *moved = NULL;
	git_commit *parent = NULL;
	git_tree *tree = NULL, *parent_tree = NULL;
	git_oid tree_id, commit_id, parent_id;
	const char *branch;
	char dir[PATH_MAX];
	size_t i;
	int rc = -1, have_parent;

	dir_of(files[0], dir, sizeof(dir));
	if (kept(&repo, dir, err) < 0)
		return -1;
	/* the branch HEAD names, born or not */
	if (git_reference_lookup(&head_ref, repo, "HEAD") != 0 ||
	    git_reference_type(head_ref) != GIT_REFERENCE_SYMBOLIC) {
		idem_error_set(err, IDEM_EXIT_ENV, "HEAD is detached; check out a branch to commit a record");
		goto out;
	}
	branch = git_reference_symbolic_target(head_ref);
	have_parent = git_reference_name_to_id(&parent_id, repo, branch) == 0;
	if (git_index_new(&index) != 0) {
		git_fail(err, "making an index");
		goto out;
	}
	if (have_parent) {
		if (git_commit_lookup(&parent, repo, &parent_id) != 0 ||
		    git_commit_tree(&parent_tree, parent) != 0 || git_index_read_tree(index, parent_tree) != 0) {
			git_fail(err, "reading HEAD");
			goto out;
		}
	}
	/* the kept repository's index as the file now holds it */
	if (git_repository_index(&repo_index, repo) != 0 || git_index_read(repo_index, 0) != 0) {
		git_fail(err, "reading the index");
		goto out;
	}
	for (i = 0; i < nfiles; i++)
		if (add_file(repo, index, repo_index, files[i], err) < 0)
			goto out;
	if (git_index_write_tree_to(&tree_id, index, repo) != 0 ||
	    git_tree_lookup(&tree, repo, &tree_id) != 0) {
		git_fail(err, "writing the tree");
		goto out;
	}
	if (signed_commit(repo, message, tree, have_parent ? parent : NULL, key, &commit_id,
	    err) < 0)
		goto out;
	/* compare and swap: a commit made meanwhile is never lost */
	if (have_parent ?
	    git_reference_create_matching(&moved, repo, branch, &commit_id, 1, &parent_id, message) :
	    git_reference_create(&moved, repo, branch, &commit_id, 0, message)) {
		git_fail(err, "moving the branch (did someone else commit meanwhile?)");
		goto out;
	}
	/* the commit stands: an index left behind shows the files as changed,
	 * which git status explains, rather than a commit without its files */
	if (git_index_write(repo_index) != 0)
		idem_warn("the commit is made, but the index was not updated: %s",
		    git_error_last() ? git_error_last()->message : "libgit2 error");
	git_oid_tostr(commit_out, 41, &commit_id);
	rc = 0;
out:
	git_tree_free(tree);
	git_tree_free(parent_tree);
	git_commit_free(parent);
	git_reference_free(moved);
	git_reference_free(head_ref);
	git_index_free(index);
	git_index_free(repo_index);
	return rc;
}

/* The id of what a commit's tree holds at path: a subtree, a blob, or
 * zeros when nothing is there. */
static void
entry_id(git_commit *commit, const char *path, git_oid *out)
{
	git_tree *tree = NULL;
	git_tree_entry *entry = NULL;

	memset(out, 0, sizeof(*out));
	if (git_commit_tree(&tree, commit) != 0)
		return;
	if (*path == '\0')
		git_oid_cpy(out, git_tree_id(tree));
	else if (git_tree_entry_bypath(&entry, tree, path) == 0)
		git_oid_cpy(out, git_tree_entry_id(entry));
	git_tree_entry_free(entry);
	git_tree_free(tree);
}

/* What the walk learned of the last parent it looked at: a linear history
 * visits that parent next, and its subtree need not be looked up twice. */
struct remembered {
	git_oid commit, entry;
	int valid;
};

/* Whether a commit changed anything under path: the id of the subtree
 * differs from the first parent's, which costs two tree lookups and no
 * diff however many files the directory holds. */
static int
touches(git_commit *commit, const char *path, struct remembered *last)
{
	git_commit *parent = NULL;
	git_oid mine, theirs;
	int changed;

	if (last->valid && git_oid_equal(&last->commit, git_commit_id(commit)))
		git_oid_cpy(&mine, &last->entry);
	else
		entry_id(commit, path, &mine);
	last->valid = 0;
	if (git_commit_parentcount(commit) == 0 || git_commit_parent(&parent, commit, 0) != 0)
		return !git_oid_is_zero(&mine);
	entry_id(parent, path, &theirs);
	git_oid_cpy(&last->commit, git_commit_id(parent));
	git_oid_cpy(&last->entry, &theirs);
	last->valid = 1;
	changed = git_oid_cmp(&mine, &theirs) != 0;
	git_commit_free(parent);
	return changed;
}

/* A commit's signature and the bytes it signs, to be checked against
 * the signers its place in the history trusts. */
struct signed_commit {
	size_t check;			/* index of its idem_git_commit_check */
	char *armor, *data;
	size_t armor_len, data_len;
	const struct idem_signers *signers;
};

struct checker {
	struct signed_commit *pending;
	size_t npending, first, step;
	struct idem_git_commit_check *out;
};

static void *
check_some(void *arg)
{
	struct checker *k = arg;
	size_t i;

	for (i = k->first; i < k->npending; i += k->step) {
		struct signed_commit *p = &k->pending[i];
		struct idem_git_commit_check *c = &k->out[p->check];
		struct idem_sig sig;
		struct idem_error why;

		if (idem_sig_parse(&sig, p->armor, p->armor_len, "git", &why) < 0) {
			snprintf(c->reason, sizeof(c->reason), "%s", why.text);
		} else if ((c->principal = idem_signers_find(p->signers, sig.public_key, "git", c->when,
		    &why)) == NULL) {
			snprintf(c->reason, sizeof(c->reason), "%s", why.text);
		} else if (idem_sig_check(&sig, "git", p->data, p->data_len, &why) < 0) {
			snprintf(c->reason, sizeof(c->reason), "%s", why.text);
			free(c->principal);
			c->principal = NULL;
		}
	}
	return NULL;
}

/* Checks the signatures on every core: each is independent of the others. */
static void
check_all(struct signed_commit *pending, size_t npending, struct idem_git_commit_check *out)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nthreads = cores > 1 ? (size_t)(cores > IDEM_PARALLEL_MAX ? IDEM_PARALLEL_MAX :
	    cores) : 1, t, i;
	struct checker k[IDEM_PARALLEL_MAX];

	if (npending < 64)
		nthreads = 1;
	for (t = 0; t < nthreads; t++)
		k[t] = (struct checker){ pending, npending, t, nthreads, out };
	idem_parallel(check_some, k, sizeof(k[0]), nthreads);
	for (i = 0; i < npending; i++) {
		free(pending[i].armor);
		free(pending[i].data);
	}
	free(pending);
}

/* A directory as a path from the top of the work tree, "" for the top. */
static int
dir_pathspec(git_repository *repo, const char *dir, char *out, size_t size, struct idem_error *err)
{
	char probe[PATH_MAX + 2];

	snprintf(probe, sizeof(probe), "%s/x", dir);
	if (relative(repo, probe, out, size, err) < 0)
		return -1;
	out[strlen(out) - 1] = '\0';
	if (*out && out[strlen(out) - 1] == '/')
		out[strlen(out) - 1] = '\0';
	return 0;
}

/* The repository holding dir, and dir as a pathspec in it; no repository
 * on failure. */
static int
open_dir(git_repository **repo, const char *dir, char *pathspec, size_t size,
	 struct idem_error *err)
{
	if (open_repo(repo, dir, dir, err) < 0)
		return -1;
	if (dir_pathspec(*repo, dir, pathspec, size, err) < 0) {
		git_repository_free(*repo);
		*repo = NULL;
		return -1;
	}
	return 0;
}

/* The signers a commit is checked against: those of the last trust
 * whose commit it descends from, else the first. */
static const struct idem_signers *
trusted_at(git_repository *repo, const git_oid *id, const struct idem_git_trust *trust,
	   size_t ntrust)
{
	git_oid from;
	size_t i;

	for (i = ntrust; i-- > 1;)
		if (git_oid_fromstr(&from, trust[i].from) == 0 &&
		    git_graph_descendant_of(repo, id, &from) == 1)
			return trust[i].signers;
	return trust[0].signers;
}

int
idem_git_history(const char *dir, const char *since, const struct idem_git_trust *trust,
		 size_t ntrust, struct idem_git_commit_check **out, size_t *n, struct idem_error *err)
{
	git_repository *repo = NULL;
	git_revwalk *walk = NULL;
	char pathspec[1024];
	struct signed_commit *pending = NULL;
	struct remembered last = { .valid = 0 };
	size_t npending = 0;
	git_oid id;
	int rc = -1;

	*out = NULL;
	*n = 0;
	if (open_dir(&repo, dir, pathspec, sizeof(pathspec), err) < 0)
		return -1;
	if (git_revwalk_new(&walk, repo) != 0 || git_revwalk_push_head(walk) != 0) {
		git_fail(err, "walking the history");
		goto out;
	}
	git_revwalk_sorting(walk, GIT_SORT_TOPOLOGICAL | GIT_SORT_TIME);
	if (since != NULL) {
		git_object *base = NULL;

		if (git_revparse_single(&base, repo, since) != 0 || git_revwalk_hide(walk, git_object_id(base)) != 0) {
			git_object_free(base);
			idem_error_set(err, IDEM_EXIT_USAGE, "--since %s: no such revision", since);
			goto out;
		}
		git_object_free(base);
	}
	for (;;) {
		git_commit *commit = NULL;
		git_buf armor = GIT_BUF_INIT, data = GIT_BUF_INIT;
		struct idem_git_commit_check *c;
		int walked = git_revwalk_next(&id, walk);

		if (walked == GIT_ITEROVER)
			break;
		/* a history that cannot be read whole (a shallow clone) is no audit */
		if (walked != 0 || git_commit_lookup(&commit, repo, &id) != 0) {
			git_fail(err, "walking the history (a shallow clone? the audit needs it whole)");
			check_all(pending, npending, *out);
			goto out;
		}
		if (!touches(commit, pathspec, &last)) {
			git_commit_free(commit);
			continue;
		}
		*out = idem_ereallocarray(*out, *n + 1, sizeof(**out));
		c = &(*out)[(*n)++];
		memset(c, 0, sizeof(*c));
		git_oid_tostr(c->id, sizeof(c->id), &id);
		snprintf(c->summary, sizeof(c->summary), "%s", git_commit_summary(commit) ?
		    git_commit_summary(commit) : "");
		c->when = (time_t)git_commit_committer(commit)->when.time;
		if (git_commit_extract_signature(&armor, &data, repo, &id, NULL) != 0) {
			snprintf(c->reason, sizeof(c->reason), "commit is not signed");
		} else {
			pending = idem_ereallocarray(pending, npending + 1, sizeof(*pending));
			pending[npending].check = *n - 1;
			pending[npending].armor = idem_emalloc(armor.size + 1);
			memcpy(pending[npending].armor, armor.ptr, armor.size);
			pending[npending].armor_len = armor.size;
			pending[npending].data = idem_emalloc(data.size + 1);
			memcpy(pending[npending].data, data.ptr, data.size);
			pending[npending].data_len = data.size;
			pending[npending].signers = trusted_at(repo, &id, trust, ntrust);
			npending++;
		}
		git_buf_dispose(&armor);
		git_buf_dispose(&data);
		git_commit_free(commit);
	}
	check_all(pending, npending, *out);
	rc = 0;
out:
	git_revwalk_free(walk);
	git_repository_free(repo);
	return rc;
}

/* The tree a commit holds at path ("" for its root), NULL when there is
 * none. */
static git_tree *
subtree_at(git_repository *repo, git_commit *commit, const char *path)
{
	git_tree *root = NULL, *sub = NULL;
	git_tree_entry *entry = NULL;

	if (git_commit_tree(&root, commit) != 0)
		return NULL;
	if (*path == '\0')
		return root;
	if (git_tree_entry_bypath(&entry, root, path) == 0 &&
	    git_tree_entry_type(entry) == GIT_OBJECT_TREE)
		git_tree_lookup(&sub, repo, git_tree_entry_id(entry));
	git_tree_entry_free(entry);
	git_tree_free(root);
	return sub;
}

int
idem_git_changed(const char *dir, const char *since, int whole, char ***names, size_t *n,
		 struct idem_error *err)
{
	git_repository *repo = NULL;
	git_object *head = NULL, *given = NULL, *base_commit = NULL;
	git_tree *before = NULL, *after = NULL;
	git_diff *diff = NULL;
	git_oid base;
	char pathspec[1024];
	size_t i;
	int rc = -1;

	*names = NULL;
	*n = 0;
	if (open_dir(&repo, dir, pathspec, sizeof(pathspec), err) < 0)
		return -1;
	if (whole)
		pathspec[0] = '\0';
	if (git_revparse_single(&head, repo, "HEAD^{commit}") != 0) {
		git_fail(err, "HEAD");
		goto out;
	}
	if (git_revparse_single(&given, repo, since) != 0 ||
	    git_object_peel(&base_commit, given, GIT_OBJECT_COMMIT) != 0) {
		idem_error_set(err, IDEM_EXIT_USAGE, "--since %s: no such revision", since);
		goto out;
	}
	if (git_merge_base(&base, repo, git_object_id(base_commit), git_object_id(head)) != 0) {
		idem_error_set(err, IDEM_EXIT_USAGE, "--since %s: no common ancestor with HEAD", since);
		goto out;
	}
	git_object_free(base_commit);
	if (git_object_lookup(&base_commit, repo, &base, GIT_OBJECT_COMMIT) != 0) {
		base_commit = NULL;
		git_fail(err, "the merge base");
		goto out;
	}
	before = subtree_at(repo, (git_commit *)base_commit, pathspec);
	after = subtree_at(repo, (git_commit *)head, pathspec);
	if (git_diff_tree_to_tree(&diff, repo, before, after, NULL) != 0) {
		git_fail(err, "comparing with the merge base");
		goto out;
	}
	for (i = 0; i < git_diff_num_deltas(diff); i++) {
		const git_diff_delta *d = git_diff_get_delta(diff, i);
		const char *path = d->status == GIT_DELTA_DELETED ? d->old_file.path : d->new_file.path;

		if (!whole && strchr(path, '/') != NULL)
			continue;
		*names = idem_ereallocarray(*names, *n + 1, sizeof(char *));
		(*names)[(*n)++] = idem_estrdup(path);
	}
	rc = 0;
out:
	git_diff_free(diff);
	git_tree_free(before);
	git_tree_free(after);
	git_object_free(base_commit);
	git_object_free(given);
	git_object_free(head);
	git_repository_free(repo);
	return rc;
}

int
idem_git_last_change(const char *file, time_t *when, int *committed, struct idem_error *err)
{
	git_repository *repo = NULL;
	git_revwalk *walk = NULL;
	git_object *head = NULL;
	struct remembered last = { .valid = 0 };
	char dir[PATH_MAX], path[1024];
	git_oid on_disk, at_head, id;
	int rc = -1;

	*committed = 0;
	dir_of(file, dir, sizeof(dir));
	if (open_repo(&repo, dir, dir, err) < 0)
		return -1;
	if (relative(repo, file, path, sizeof(path), err) < 0)
		goto out;
	if (git_odb_hashfile(&on_disk, file, GIT_OBJECT_BLOB) != 0) {
		git_fail(err, file);
		goto out;
	}
	rc = 0;
	if (git_revparse_single(&head, repo, "HEAD^{commit}") != 0)
		goto out;
	entry_id((git_commit *)head, path, &at_head);
	if (!git_oid_equal(&at_head, &on_disk))
		goto out;
	if (git_revwalk_new(&walk, repo) != 0 || git_revwalk_push_head(walk) != 0) {
		rc = git_fail(err, "walking the history");
		goto out;
	}
	git_revwalk_sorting(walk, GIT_SORT_TOPOLOGICAL | GIT_SORT_TIME);
	while (git_revwalk_next(&id, walk) == 0) {
		git_commit *commit = NULL;
		int changed;

		if (git_commit_lookup(&commit, repo, &id) != 0)
			break;
		if ((changed = touches(commit, path, &last)) != 0) {
			*when = (time_t)git_commit_committer(commit)->when.time;
			*committed = 1;
		}
		git_commit_free(commit);
		if (changed)
			break;
	}
out:
	git_revwalk_free(walk);
	git_object_free(head);
	git_repository_free(repo);
	return rc;
}

/* What a commit holds at path, with a NUL past it; NULL when nothing. */
static char *
blob_at(git_repository *repo, git_commit *commit, const char *path, size_t *len)
{
	git_oid id;
	git_blob *blob = NULL;
	char *out = NULL;

	*len = 0;
	entry_id(commit, path, &id);
	if (git_oid_is_zero(&id) || git_blob_lookup(&blob, repo, &id) != 0)
		return NULL;
	*len = (size_t)git_blob_rawsize(blob);
	out = idem_emalloc(*len + 1);
	memcpy(out, git_blob_rawcontent(blob), *len);
	out[*len] = '\0';
	git_blob_free(blob);
	return out;
}

/* One commit that changed the file, kept with its signature and the file
 * before and after it. */
static void
keep_change(git_repository *repo, git_commit *commit, const char *path,
	    struct idem_git_file_change *c)
{
	git_buf armor = GIT_BUF_INIT, data = GIT_BUF_INIT;
	git_commit *parent = NULL;
	git_oid id;

	memset(c, 0, sizeof(*c));
	git_oid_cpy(&id, git_commit_id(commit));
	git_oid_tostr(c->id, sizeof(c->id), &id);
	snprintf(c->summary, sizeof(c->summary), "%s", git_commit_summary(commit) ?
	    git_commit_summary(commit) : "");
	c->when = (time_t)git_commit_committer(commit)->when.time;
	if (git_commit_extract_signature(&armor, &data, repo, &id, NULL) == 0) {
		c->armor = idem_emalloc(armor.size + 1);
		memcpy(c->armor, armor.ptr, armor.size);
		c->armor[c->armor_len = armor.size] = '\0';
		c->data = idem_emalloc(data.size + 1);
		memcpy(c->data, data.ptr, data.size);
		c->data[c->data_len = data.size] = '\0';
	}
	git_buf_dispose(&armor);
	git_buf_dispose(&data);
	if (git_commit_parentcount(commit) > 0 && git_commit_parent(&parent, commit, 0) == 0)
		c->before = blob_at(repo, parent, path, &c->before_len);
	c->after = blob_at(repo, commit, path, &c->after_len);
	git_commit_free(parent);
}

int
idem_git_file_history(const char *file, const char *since, struct idem_git_file_history *h,
		      struct idem_error *err)
{
	git_repository *repo = NULL;
	git_revwalk *walk = NULL;
	git_object *given = NULL, *base = NULL;
	struct remembered last = { .valid = 0 };
	char dir[PATH_MAX];
	git_oid id;
	int rc = -1, walked;

	memset(h, 0, sizeof(*h));
	dir_of(file, dir, sizeof(dir));
	if (open_repo(&repo, dir, dir, err) < 0)
		return -1;
	if (relative(repo, file, h->path, sizeof(h->path), err) < 0)
		goto out;
	if (git_revparse_single(&given, repo, since) != 0 ||
	    git_object_peel(&base, given, GIT_OBJECT_COMMIT) != 0) {
		idem_error_set(err, IDEM_EXIT_USAGE, "--since %s: no such revision", since);
		goto out;
	}
	git_oid_tostr(h->base, sizeof(h->base), git_object_id(base));
	h->at_base = blob_at(repo, (git_commit *)base, h->path, &h->at_base_len);
	if (git_revwalk_new(&walk, repo) != 0 || git_revwalk_push_head(walk) != 0 ||
	    git_revwalk_hide(walk, git_object_id(base)) != 0) {
		git_fail(err, "walking the history");
		goto out;
	}
	git_revwalk_sorting(walk, GIT_SORT_TOPOLOGICAL | GIT_SORT_REVERSE);
	while ((walked = git_revwalk_next(&id, walk)) == 0) {
		git_commit *commit = NULL;

		if (git_commit_lookup(&commit, repo, &id) != 0)
			break;
		last.valid = 0;
		if (touches(commit, h->path, &last)) {
			h->changes = idem_ereallocarray(h->changes, h->nchanges + 1, sizeof(*h->changes));
			keep_change(repo, commit, h->path, &h->changes[h->nchanges++]);
		}
		git_commit_free(commit);
	}
	if (walked != GIT_ITEROVER) {
		git_fail(err, "walking the history (a shallow clone? the audit needs it whole)");
		goto out;
	}
	rc = 0;
out:
	git_revwalk_free(walk);
	git_object_free(base);
	git_object_free(given);
	git_repository_free(repo);
	return rc;
}

void
idem_git_file_history_free(struct idem_git_file_history *h)
{
	size_t i;

	for (i = 0; i < h->nchanges; i++) {
		free(h->changes[i].armor);
		free(h->changes[i].data);
		free(h->changes[i].before);
		free(h->changes[i].after);
	}
	free(h->changes);
	free(h->at_base);
	memset(h, 0, sizeof(*h));
}
