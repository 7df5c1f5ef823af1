/* rehearse: the whole rehearsal of a seed in one command. It starts the
 * embedded sandbox when no database is configured, sets up the worker's
 * schema (idem-worker's own, or a setup command given for another worker),
 * runs seed-gen | count-effects --before | dup-publish | kill-at |
 * count-effects, writes the signed record with mkrecord, and checks it with
 * verify-record; it prints the pipeline it runs, as a user could paste it.
 * Every program runs as its own child in a process group of its own; a
 * stage that fails stops the others at once, and an interrupt stops them
 * all; every exit then passes through one cleanup. */
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"
#include "role.h"
#include "seed.h"
#include "sig.h"
#include "env.h"
#include "error.h"
#include "file.h"
#include "text.h"
#include "record.h"
#include "yamljson.h"
#include "git.h"
#include "child.h"

static const char synopsis[] =
	"usage: rehearse [-d conninfo] [-w worker] [-s setup] [-k key]\n"
	"                [-f allowed-signers] [-o dir] [-W cause=duration] [-c] [-K] [--draft]\n"
	"                [--allow-dirty] seed\n";

#define STAGES 5

static char work[96], sandbox[128];
static char *stop_command;	/* stops and purges the sandbox this run started */
static int keep_sandbox, started_sandbox, sandbox_kept, reaper;
static pid_t main_pid;

static void
stop_if_interrupted(void)
{
	int sig = child_interrupted();

	if (sig) {
		idem_warn("interrupted; nothing recorded");
		exit(128 + sig);
	}
}

static void
stop_sandbox(void)
{
	struct child stop;
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

	if (child_run(&stop, "idem-sandbox --purge stop", stop_command, null, CHILD_HOLD) >= 0) {
		child_report_failure(&stop);
		idem_warn("the sandbox is left in %s: stop it with idem-sandbox -D %s --purge stop "
		    "&& rmdir %s", sandbox, sandbox, work);
		sandbox_kept = 1;
	}
	if (null >= 0)
		close(null);
}

/* Whether path is dir or under it. */
static int
under(const char *path, const char *dir)
{
	size_t len = strlen(dir);

	return len > 0 && strncmp(path, dir, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

/* What the cleanup leaves of the scratch directory: the sandbox left
 * running; with -K, the stream and each program's standard error too. */
static int
kept(const char *path)
{
	size_t len = strlen(work), name_len;
	const char *name = path + len + 1;

	if (strcmp(path, work) == 0)
		return keep_sandbox || sandbox_kept;
	if (sandbox_kept && under(path, sandbox))
		return 1;
	if (!keep_sandbox || !under(path, work) || strchr(name, '/') != NULL)
		return 0;
	name_len = strlen(name);
	return (name_len > 4 && strcmp(name + name_len - 4, ".tsv") == 0) ||
	    (name_len > 7 && strcmp(name + name_len - 7, ".stderr") == 0);
}

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (!kept(path) && remove(path) < 0 && errno != ENOENT)
		idem_warn("%s:", path);
	return 0;
}

/* With -K: where the scratch directory is, what it holds, and how to
 * throw it away. */
static void
say_kept(void)
{
	int running = started_sandbox && access(sandbox, F_OK) == 0;

	if (!keep_sandbox)
		return;
	fprintf(stderr, "rehearse: kept in %s: %sthe stream (stream.tsv), what each stage "
	    "read (NAME.in.tsv) and each program's standard error (NAME.stderr); throw it away "
	    "with: %s%s%srm -r %s\n", work,
	    running ? "the sandbox (sandbox), " : "", running ? "idem-sandbox -D " : "",
	    running ? sandbox : "", running ? " --purge stop && " : "", work);
}

/*
 * Every exit passes here once the scratch directory is made, whatever
 * ended the run: the sandbox this run started is stopped and purged (not
 * with -K), every process of the run is waited for, the scratch directory
 * is removed; then an interrupted run ends by its signal, as a shell
 * expects of a program it interrupted.
 */
static void
clean_up(void)
{
	sigset_t set;
	int sig;

	if (getpid() != main_pid)
		return;
	if (started_sandbox && !keep_sandbox)
		stop_sandbox();
	sandbox_kept |= started_sandbox && keep_sandbox;
	if (reaper)
		child_wait_all();
	nftw(work, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	say_kept();
	if ((sig = child_interrupted()) != 0) {
		fflush(NULL);
		signal(sig, SIG_DFL);
		sigemptyset(&set);
		sigaddset(&set, sig);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(sig);
	}
}

/* The setup of idem-worker's schema, for the guard and key scope its
 * command names; nothing for another worker. */
static char *
setup_for(const char *worker)
{
	char *copy = idem_estrdup(worker), *tok, *save = NULL, *out = NULL;
	size_t len = 0;
	FILE *f;
	int first = 1, keep = 0;

	if ((f = open_memstream(&out, &len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save), first = 0) {
		if (first) {
			const char *base = strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok;

			if (strcmp(base, "idem-worker") != 0) {
				fclose(f);
				free(out);
				free(copy);
				return NULL;
			}
			fputs(tok, f);
			continue;
		}
		if (keep) {
			fprintf(f, " %s", tok);
			keep = 0;
		} else if (strcmp(tok, "-g") == 0 || strcmp(tok, "--guard") == 0 ||
		    strcmp(tok, "-k") == 0 || strcmp(tok, "--key-scope") == 0) {
			fprintf(f, " %s", tok);
			keep = 1;
		} else if (strncmp(tok, "--guard=", 8) == 0 || strncmp(tok, "--key-scope=", 12) == 0) {
			fprintf(f, " %s", tok);
		}
	}
	fputs(" --setup", f);
	fclose(f);
	free(copy);
	return out;
}

static void
start_sandbox(void)
{
	char *command, settings_path[200], *settings, *q_sandbox, *conninfo;
	struct idem_error err;
	struct child start;
	size_t len;
	int fd;

	snprintf(sandbox, sizeof(sandbox), "%s/sandbox", work);
	snprintf(settings_path, sizeof(settings_path), "%s/settings", work);
	q_sandbox = idem_shell_quote(sandbox);
	if (asprintf(&command, "idem-sandbox -D %s start", q_sandbox) < 0 ||
	    asprintf(&stop_command, "idem-sandbox -D %s --purge stop", q_sandbox) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_sandbox);
	fprintf(stderr, "+ eval \"$(%s)\"\n", command);
	if ((fd = open(settings_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", settings_path);
	started_sandbox = 1;
	/* an interrupt waits for the start to end: a server half started
	 * would race its own stop */
	if (child_run(&start, "idem-sandbox start", command, fd, CHILD_HOLD) >= 0) {
		close(fd);
		stop_if_interrupted();
		child_report_failure(&start);
		exit(IDEM_EXIT_ENV);
	}
	close(fd);
	free(command);
	stop_if_interrupted();
	if ((settings = idem_read_file(settings_path, &len, &err)) == NULL)
		idem_die_error(&err);
	idem_env_export_settings(settings);
	free(settings);
	if (asprintf(&conninfo, "host=%s port=%s dbname=%s user=%s", getenv("PGHOST"),
	    getenv("PGPORT"), getenv("PGDATABASE"), getenv("PGUSER")) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	setenv("IDEM_DATABASE", conninfo, 1);
	free(conninfo);
}

/* A key for this run only, and an allowed signers file that lists it. */
static void
make_throwaway_key(char **key, char **signers)
{
	char *q_work, *command, *pub, *line;
	struct idem_error err;
	struct child keygen;
	size_t len;

	q_work = idem_shell_quote(work);
	if (asprintf(&command, "ssh-keygen -q -t ed25519 -N '' -C rehearse-throwaway -f "
	    "%s/throwaway_ed25519", q_work) < 0 ||
	    asprintf(key, "%s/throwaway_ed25519", work) < 0 ||
	    asprintf(signers, "%s/allowed_signers", work) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_work);
	if (child_run(&keygen, "ssh-keygen", command, -1, CHILD_STOP) >= 0) {
		stop_if_interrupted();
		child_report_failure(&keygen);
		exit(IDEM_EXIT_ENV);
	}
	stop_if_interrupted();
	free(command);
	if (asprintf(&command, "%s.pub", *key) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if ((pub = idem_read_file(command, &len, &err)) == NULL)
		idem_die_error(&err);
	pub[strcspn(pub, "\n")] = '\0';
	if (asprintf(&line, "rehearse-throwaway namespaces=\"idem-record,git\" %s\n", pub) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (idem_write_file_atomic(*signers, line, strlen(line), &err) < 0)
		idem_die_error(&err);
	free(line);
	free(pub);
	free(command);
	fprintf(stderr, "rehearse: signing with a throwaway key made for this run; give -k "
	    "and list its public key in allowed_signers for a record others can trust\n");
}

/* A waiting time of -W, checked now rather than after the run, added to
 * the words for mkrecord -w. */
static void
add_wait(char **waits, const char *spec)
{
	const char *eq = strchr(spec, '=');
	char *quoted, *more;
	size_t c;

	if (eq == NULL)
		idem_die(IDEM_EXIT_USAGE, "-W %s: expected cause=duration", spec);
	for (c = 0; idem_wait_causes[c] && (strlen(idem_wait_causes[c]) != (size_t)(eq - spec) ||
	    strncmp(idem_wait_causes[c], spec, (size_t)(eq - spec)) != 0); c++)
		;
	if (idem_wait_causes[c] == NULL)
		idem_die(IDEM_EXIT_USAGE, "-W %s: the cause is one of reviewer-queue, "
		    "sandbox-availability, vendor-limit, owner-approval", spec);
	if (idem_parse_duration_ms(eq + 1) < 0)
		idem_die(IDEM_EXIT_USAGE, "-W %s: expected a duration such as 2h", spec);
	quoted = idem_shell_quote(spec);
	if (asprintf(&more, "%s -w %s", *waits ? *waits : "", quoted) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(quoted);
	free(*waits);
	*waits = more;
}

/* The environment the setup command changes, to put back after it. */
struct setup_env {
	char *values[4];
};

static const char *const setup_vars[4] = { "PGUSER", "DATABASE_URL", "IDEM_DATABASE_URL",
	"IDEM_DATABASE" };

/* The setup command runs as the seed's sandbox account, with the rights
 * of a setup (kill-at confines it before the workers start). */
static void
account_for_setup(const struct idem_seed *seed, struct setup_env *saved)
{
	struct idem_queue q;
	struct idem_role role;
	struct idem_error err;
	PGconn *conn;
	int i;

	for (i = 0; i < 4; i++)
		saved->values[i] = getenv(setup_vars[i]) ? idem_estrdup(getenv(setup_vars[i])) : NULL;
	if (idem_queue_open_seed(&q, seed->queue_kind, seed->queue, seed->queue_adapter_path,
	    seed->queue_adapter_sha256, &err) < 0 ||
	    (conn = idem_pg_connect(NULL, &err)) == NULL)
		idem_die_error(&err);
	if (idem_role_open(&role, conn, seed->sandbox_account, &q, seed->effect_table, &err) < 0 ||
	    idem_role_for_setup(&role, conn, &err) < 0)
		idem_die_error(&err);
	idem_role_setenv(&role, conn);
	fprintf(stderr, "rehearse: the setup runs as the sandbox account %s\n", seed->sandbox_account);
	idem_role_close(&role);
	PQfinish(conn);
	idem_queue_close(&q);
}

static void
restore_env(struct setup_env *saved)
{
	int i;

	for (i = 0; i < 4; i++) {
		if (saved->values[i] != NULL)
			setenv(setup_vars[i], saved->values[i], 1);
		else
			unsetenv(setup_vars[i]);
		free(saved->values[i]);
	}
}

/* What the options ask for. */
struct options {
	const char *conninfo, *worker, *setup_command, *key, *signers, *dir, *seed_path;
	char *waits;		/* the words for mkrecord -w, or NULL */
	char *throwaway_key, *throwaway_signers;	/* made when -k is not given */
	int commit;
	int draft;		/* --draft: seed-gen --draft, for a seed that is not ready */
	int allow_dirty;	/* --allow-dirty: mkrecord's, for a seed not committed */
};

/* The shell text of the run's commands. */
struct commands {
	char *setup;		/* the worker's setup, or NULL */
	char *seed_gen, *kill_at, *pipeline;
	char *record;		/* mkrecord, reading the stream the pipeline wrote */
	char stream_path[160];
};

static void
parse_options(int argc, char *argv[], struct options *opt)
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "worker", required_argument, NULL, 'w' },
		{ "setup", required_argument, NULL, 's' },
		{ "key", required_argument, NULL, 'k' },
		{ "allowed-signers", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "commit", no_argument, NULL, 'c' },
		{ "keep-sandbox", no_argument, NULL, 'K' },
		{ "wait", required_argument, NULL, 'W' },
		{ "draft", no_argument, NULL, 'D' },
		{ "allow-dirty", no_argument, NULL, 'A' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(opt, 0, sizeof(*opt));
	opt->dir = "records";
	while ((c = getopt_long(argc, argv, "d:w:s:k:f:o:W:cKhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': opt->conninfo = optarg; break;
		case 'w': opt->worker = optarg; break;
		case 's': opt->setup_command = optarg; break;
		case 'k': opt->key = optarg; break;
		case 'f': opt->signers = optarg; break;
		case 'o': opt->dir = optarg; break;
		case 'c': opt->commit = 1; break;
		case 'K': keep_sandbox = 1; break;
		case 'W': add_wait(&opt->waits, optarg); break;
		case 'D': opt->draft = 1; break;
		case 'A': opt->allow_dirty = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("rehearse " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind + 1 != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (opt->commit && opt->key == NULL)
		idem_die(IDEM_EXIT_USAGE, "-c: commit with a key of yours (-k), not a throwaway one");
	opt->seed_path = argv[optind];
}

/* The directory of -o: one mkrecord can write a record in, or make. */
static void
check_output_dir(const char *dir)
{
	char parent[PATH_MAX], *q_dir;
	struct stat st;

	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			idem_die(IDEM_EXIT_USAGE, "-o %s: not a directory", dir);
		if (access(dir, W_OK | X_OK) < 0)
			idem_die(IDEM_EXIT_ENV, "-o %s: no record can be written there:", dir);
		return;
	}
	if (errno != ENOENT)
		idem_die(IDEM_EXIT_ENV, "-o %s:", dir);
	snprintf(parent, sizeof(parent), "%s", dir);
	while (strlen(parent) > 1 && parent[strlen(parent) - 1] == '/')
		parent[strlen(parent) - 1] = '\0';
	if (strrchr(parent, '/') == NULL)
		snprintf(parent, sizeof(parent), ".");
	else if (strrchr(parent, '/') == parent)
		parent[1] = '\0';
	else
		*strrchr(parent, '/') = '\0';
	if (access(parent, W_OK | X_OK) == 0)
		return;
	q_dir = idem_shell_quote(dir);
	idem_die(errno == ENOENT ? IDEM_EXIT_USAGE : IDEM_EXIT_ENV, "-o %s: %s%s; run: mkdir -p %s",
	    dir, errno == ENOENT ? "no such directory, nor its parent " : "cannot be made in ", parent,
	    q_dir);
}

/* The seed and the key, refused before anything runs; the worker the seed
 * names when -w does not. */
static void
load_inputs(struct options *opt, struct idem_seed *seed)
{
	struct idem_git_revision rev;
	struct stat st;
	struct idem_key probe;
	struct idem_error err;
	char missing[256];

	if (idem_seed_load(seed, opt->seed_path, &err) < 0)
		idem_die_error(&err);
	/* seed-gen would refuse it: before anything starts */
	if (!opt->draft && !idem_seed_ready(seed, missing, sizeof(missing)))
		idem_die(IDEM_EXIT_USAGE, "%s: not ready: %s", opt->seed_path, missing);
	/* mkrecord would refuse it after the whole run; a named pipe is
	 * read once, by seed-gen, and left to mkrecord */
	if ((stat(opt->seed_path, &st) < 0 || S_ISREG(st.st_mode)) &&
	    idem_git_seed_ready(opt->seed_path, opt->allow_dirty, &rev, &err) < 0)
		idem_die_error(&err);
	/* and its adapter file, which the record keeps as it keeps the seed */
	if (seed->queue_adapter_path != NULL &&
	    idem_git_seed_ready(seed->queue_adapter_path, opt->allow_dirty, &rev, &err) < 0)
		idem_die_error(&err);
	check_output_dir(opt->dir);
	if (opt->key != NULL) {
		if (idem_key_load(&probe, opt->key, &err) < 0)
			idem_die_error(&err);
		idem_key_wipe(&probe);
	}
	if (opt->worker == NULL)
		opt->worker = seed->worker_command ? seed->worker_command : "idem-worker --guard unique";
}

/* The scratch directory, and the cleanup that every exit passes through
 * from now on. */
static void
make_scratch(void)
{
	struct idem_error err;
	char tmp_dir[128];

	/* what the run starts and leaves behind comes back to rehearse, to be
	 * waited for; with -K the sandbox's server must outlive it */
	if (!keep_sandbox)
		reaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
	/* as root, the sandbox's server user must pass through */
	if (idem_make_temp_dir(work, sizeof(work), "rehearse", 0711, &err) < 0)
		idem_die_error(&err);
	main_pid = getpid();
	atexit(clean_up);
	if (keep_sandbox)
		child_keep_logs(work);
	/* whatever the programs leave in TMPDIR goes with the scratch directory */
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/tmp", work);
	if (mkdir(tmp_dir, 0700) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", tmp_dir);
	setenv("TMPDIR", tmp_dir, 1);
}

/* -d, else IDEM_DATABASE, else the PG* environment when it names a
 * database, else a sandbox started for this run. */
static void
choose_database(const char *conninfo)
{
	struct idem_error err;

	if (conninfo != NULL)
		setenv("IDEM_DATABASE", conninfo, 1);
	else if (getenv("IDEM_DATABASE") && *getenv("IDEM_DATABASE"))
		fprintf(stderr, "rehearse: using the database of IDEM_DATABASE\n");
	else if (!getenv("PGHOST") && !getenv("PGSERVICE") && !getenv("PGDATABASE"))
		start_sandbox();
	else
		fprintf(stderr, "rehearse: using the database of the PG* environment\n");
	/* before any setup writes to it; the setup and every stage get its URI */
	if (idem_pg_setenv_url(NULL, &err) < 0)
		idem_die_error(&err);
}

/* The commands of the run; the pipeline is printed as a user could paste
 * it. */
static void
make_commands(const struct options *opt, struct commands *cmd)
{
	char *q_seed, *q_key, *q_dir, *q_pipeline, *q_stream;

	q_seed = idem_shell_quote(opt->seed_path);
	/* -s as given, "" for none; else idem-worker's own */
	if (opt->setup_command != NULL)
		cmd->setup = *opt->setup_command ? idem_estrdup(opt->setup_command) : NULL;
	else
		cmd->setup = setup_for(opt->worker);
	if (asprintf(&cmd->seed_gen, "seed-gen %s%s", opt->draft ? "--draft " : "", q_seed) < 0 ||
	    asprintf(&cmd->kill_at, "kill-at -- %s", opt->worker) < 0 ||
	    asprintf(&cmd->pipeline, "%s%s%s | count-effects --before | dup-publish | %s | count-effects",
	    cmd->setup ? cmd->setup : "", cmd->setup ? " && " : "", cmd->seed_gen, cmd->kill_at) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	q_key = idem_shell_quote(opt->key);
	q_dir = idem_shell_quote(opt->dir);
	q_pipeline = idem_shell_quote(cmd->pipeline);
	snprintf(cmd->stream_path, sizeof(cmd->stream_path), "%s/stream.tsv", work);
	q_stream = idem_shell_quote(cmd->stream_path);
	if (asprintf(&cmd->record, "mkrecord -k %s -o %s%s%s%s -r %s < %s", q_key, q_dir,
	    opt->commit ? " -c" : "", opt->allow_dirty ? " --allow-dirty" : "",
	    opt->waits ? opt->waits : "", q_pipeline, q_stream) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	fprintf(stderr, "+ %s | mkrecord -k %s -o %s%s%s%s\n", cmd->pipeline, q_key, q_dir,
	    opt->commit ? " -c" : "", opt->allow_dirty ? " --allow-dirty" : "",
	    opt->waits ? opt->waits : "");
	free(q_stream);
	free(q_pipeline);
	free(q_dir);
	free(q_key);
	free(q_seed);
}

static void
free_commands(struct commands *cmd)
{
	free(cmd->setup);
	free(cmd->seed_gen);
	free(cmd->kill_at);
	free(cmd->pipeline);
	free(cmd->record);
}

/* The worker's setup, as the seed's sandbox account when it names one;
 * given by -s, it is shell text of any shape that bash runs, not exec.
 * Returns 0, or the status of its failure. */
static int
run_setup(const struct idem_seed *seed, const char *setup, int given)
{
	int as_account = seed->sandbox_account != NULL && *seed->sandbox_account;
	struct setup_env saved;
	struct child set_up;
	char *q_setup, *in_bash = NULL;
	int failed;

	if (setup == NULL)
		return 0;
	if (as_account)
		account_for_setup(seed, &saved);
	if (given) {
		q_setup = idem_shell_quote(setup);
		if (asprintf(&in_bash, "bash -c %s", q_setup) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(q_setup);
	}
	failed = child_run(&set_up, setup, in_bash ? in_bash : setup, -1, CHILD_STOP) >= 0;
	free(in_bash);
	if (as_account)
		restore_env(&saved);
	stop_if_interrupted();
	return failed ? child_report_failure(&set_up) : 0;
}

/* The stages, into the stream file. Returns 0 with the status the counts
 * call for, or the status of the stage that failed. */
static int
run_pipeline(const struct commands *cmd, int *counts_status)
{
	struct child stages[STAGES];
	int fd, i;

	memset(stages, 0, sizeof(stages));
	stages[0].name = "seed-gen";
	stages[0].command = cmd->seed_gen;
	stages[1].name = stages[1].command = "count-effects --before";
	stages[2].name = stages[2].command = "dup-publish";
	stages[3].name = "kill-at";
	stages[3].command = cmd->kill_at;
	/* kill-at's 1, a failed baseline or a deadline, leaves a whole stream */
	stages[3].may_find = 1;
	stages[4].name = stages[4].command = "count-effects";
	if ((fd = open(cmd->stream_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", cmd->stream_path);
	i = child_run_pipeline(stages, STAGES, fd, CHILD_STOP, 1);
	close(fd);
	stop_if_interrupted();
	/* count-effects' 1 is the finding the record must show */
	if (i >= 0)
		return child_report_failure(&stages[i]);
	*counts_status = child_status(&stages[STAGES - 1]);
	if (child_status(&stages[3]) == IDEM_EXIT_FINDING)
		*counts_status = IDEM_EXIT_FINDING;
	return 0;
}

/* mkrecord finishes whole, signals or not: once it writes, a record
 * exists. Returns 0 with the record's path, or the status the run ends
 * with. */
static int
make_record(const char *command, char **record_path)
{
	char record_out[200];
	struct child mkrecord;
	struct idem_error err;
	size_t len;
	int fd, i, sig;

	snprintf(record_out, sizeof(record_out), "%s/record", work);
	if ((fd = open(record_out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		idem_die(IDEM_EXIT_ENV, "%s:", record_out);
	i = child_run(&mkrecord, "mkrecord", command, fd, CHILD_FINISH);
	close(fd);
	if (!mkrecord.ended || i >= 0) {
		stop_if_interrupted();
		return child_report_failure(&mkrecord);
	}
	if ((*record_path = idem_read_file(record_out, &len, &err)) == NULL)
		idem_die_error(&err);
	(*record_path)[strcspn(*record_path, "\n")] = '\0';
	if ((sig = child_interrupted()) != 0) {
		idem_warn("interrupted; the record was made and is not verified: %s", *record_path);
		return 128 + sig;
	}
	return 0;
}

/* Why the record says fail, read back from it; NULL when it cannot say.
 * Caller frees. */
static char *
record_why(const char *record_path)
{
	struct idem_error err;
	size_t len;
	char *text = idem_read_file(record_path, &len, &err), *why = NULL;
	json_t *record = text ? idem_yaml_to_json(text, len, record_path, &err) : NULL;

	if (record != NULL)
		why = idem_record_why(record);
	json_decref(record);
	free(text);
	return why;
}

/* verify-record on the record, whose path is then the output. Returns the
 * status the run ends with: verify-record's, else the counts'. */
static int
check_record(const char *signers, const char *record_path, int counts_status)
{
	char *q_signers, *q_record, *command, *why;
	struct child verify;
	int status, sig;

	q_signers = signers ? idem_shell_quote(signers) : NULL;
	q_record = idem_shell_quote(record_path);
	if (asprintf(&command, "verify-record%s%s %s", q_signers ? " -f " : "",
	    q_signers ? q_signers : "", q_record) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_signers);
	free(q_record);
	fprintf(stderr, "+ %s\n", command);
	child_run(&verify, "verify-record", command, -1, CHILD_STOP);
	free(command);
	if ((sig = child_interrupted()) != 0) {
		idem_warn("interrupted while verifying the record: %s", record_path);
		return 128 + sig;
	}
	status = child_status(&verify);
	if (counts_status == IDEM_EXIT_FINDING) {
		why = record_why(record_path);
		fprintf(stderr, "rehearse: the record says fail: %s; %s\n",
		    why ? why : "a finding, named above", record_path);
		free(why);
	}
	printf("%s\n", record_path);
	return status == 0 ? counts_status : status;
}

int
main(int argc, char *argv[])
{
	struct options opt;
	struct commands cmd;
	struct idem_seed seed;
	char *record_path = NULL;
	int status, counts_status = 0;

	argv0 = "rehearse";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &opt);
	load_inputs(&opt, &seed);
	idem_env_prefer_self();
	child_catch_signals();
	make_scratch();
	choose_database(opt.conninfo);
	if (opt.key == NULL) {
		make_throwaway_key(&opt.throwaway_key, &opt.throwaway_signers);
		opt.key = opt.throwaway_key;
		opt.signers = opt.throwaway_signers;
	}
	make_commands(&opt, &cmd);
	if ((status = run_setup(&seed, cmd.setup, opt.setup_command != NULL)) == 0 &&
	    (status = run_pipeline(&cmd, &counts_status)) == 0 &&
	    (status = make_record(cmd.record, &record_path)) == 0)
		status = check_record(opt.signers, record_path, counts_status);
	idem_seed_free(&seed);
	free(record_path);
	free_commands(&cmd);
	free(opt.waits);
	free(opt.throwaway_key);
	free(opt.throwaway_signers);
	idem_close_stdout();
	return status;
}
