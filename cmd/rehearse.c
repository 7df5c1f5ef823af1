/* rehearse: the whole rehearsal of a seed in one command. It starts the
 * embedded sandbox when no database is configured, sets up the worker,
 * runs seed-gen | count-effects --before | dup-publish | kill-at |
 * count-effects, writes the signed record with mkrecord, and checks it with
 * verify-record; it prints the pipeline it runs, as a user could paste it. */
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seed.h"
#include "sig.h"
#include "util.h"

static const char synopsis[] =
	"usage: rehearse [-d conninfo] [-w worker] [-k key] [-f allowed-signers] [-o dir]\n"
	"                [-c] [-K] seed\n";

/* run()'s stdout for a command whose report belongs on standard error */
#define TO_STDERR ((const char *)1)

static volatile sig_atomic_t interrupted;
static int record_made;		/* mkrecord has run: an interrupt leaves its record */
static pid_t running_group;
static char work[96], sandbox[128], stream_path[160];
static int keep_sandbox, started_sandbox;
static pid_t main_pid;

static void
on_signal(int sig)
{
	interrupted = sig;
	if (running_group > 0)
		kill(-running_group, sig);
}

/* Stops the sandbox this run started and removes its scratch files. */
static void
cleanup(void)
{
	static int done;

	if (done || getpid() != main_pid)
		return;
	done = 1;
	if (started_sandbox && !keep_sandbox) {
		pid_t pid = fork();

		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);

			if (null >= 0)
				dup2(null, 1);
			execlp("idem-sandbox", "idem-sandbox", "-D", sandbox, "--purge", "stop", (char *)NULL);
			_exit(127);
		}
		if (pid > 0)
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
	}
	if (stream_path[0])
		unlink(stream_path);
	if (work[0]) {
		char key[200];

		snprintf(key, sizeof(key), "%s/settings", work);
		unlink(key);
		snprintf(key, sizeof(key), "%s/record", work);
		unlink(key);

		snprintf(key, sizeof(key), "%s/throwaway_ed25519", work);
		unlink(key);
		strcat(key, ".pub");
		unlink(key);
		snprintf(key, sizeof(key), "%s/allowed_signers", work);
		unlink(key);
		rmdir(work);
	}
}

/* Runs a shell command line in its own process group, stdout to a file, to
 * standard error or inherited; returns its exit status (128+N for a
 * signal). */
static int
run(const char *command, const char *out_path)
{
	pid_t pid;
	int status;

	fflush(NULL);
	if ((pid = fork()) < 0)
		idem_die(IDEM_EXIT_ENV, "fork:");
	if (pid == 0) {
		setpgid(0, 0);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		if (out_path == TO_STDERR) {
			dup2(2, 1);
		} else if (out_path != NULL) {
			int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

			if (fd < 0 || dup2(fd, 1) < 0)
				_exit(126);
			close(fd);
		}
		execl("/bin/bash", "bash", "-o", "pipefail", "-c", command, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	running_group = pid;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			idem_die(IDEM_EXIT_ENV, "waitpid:");
	running_group = 0;
	if (interrupted && !record_made) {
		idem_warn("interrupted; nothing recorded");
		cleanup();
		exit(128 + interrupted);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/*
 * Runs the pipeline and learns each stage's status from bash's PIPESTATUS:
 * count-effects' 1 at the end is the finding to record; any other stage's
 * failure stops the rehearsal with that stage's status, naming it.
 */
static int
run_stages(const char *pipeline, const char *out_path)
{
	static const char *const stages[] = { "seed-gen", "count-effects --before", "dup-publish",
		"kill-at", "count-effects" };
	char *command, status_path[200], *text, *q_status;
	struct idem_error err;
	int codes[8], n = 0, i;
	size_t len;
	char *p;

	snprintf(status_path, sizeof(status_path), "%s/status", work);
	q_status = idem_shell_quote(status_path);
	if (asprintf(&command, "%s; echo \"${PIPESTATUS[*]}\" > %s", pipeline, q_status) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	run(command, out_path);
	free(command);
	free(q_status);
	if ((text = idem_read_file(status_path, &len, &err)) == NULL)
		idem_die_error(&err);
	unlink(status_path);
	for (p = text; n < 8 && *p; ) {
		codes[n++] = (int)strtol(p, &p, 10);
		while (*p == ' ' || *p == '\n')
			p++;
	}
	free(text);
	if (n != 5) {
		/* the setup before the pipeline failed, with its own message */
		cleanup();
		idem_die(n > 0 && codes[0] ? codes[0] : IDEM_EXIT_ENV,
		    "setting up the worker failed with status %d; nothing recorded", n > 0 ? codes[0] : -1);
	}
	for (i = 0; i < 4; i++)
		if (codes[i] != 0) {
			cleanup();
			idem_die(codes[i], "%s failed with status %d; nothing recorded", stages[i], codes[i]);
		}
	if (codes[4] != 0 && codes[4] != IDEM_EXIT_FINDING) {
		cleanup();
		idem_die(codes[4], "count-effects failed with status %d; nothing recorded", codes[4]);
	}
	return codes[4];
}

/* The sandbox's settings, "NAME='value'; export NAME;" per line. */
static void
export_settings(const char *text)
{
	char *copy = idem_estrdup(text), *line, *save = NULL;

	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *end;

		if (eq == NULL || eq[1] != '\'' || (end = strstr(eq + 2, "';")) == NULL)
			continue;
		*eq = '\0';
		*end = '\0';
		setenv(line, eq + 2, 1);
	}
	free(copy);
}

static void
start_sandbox(void)
{
	char *command, settings_path[200], *settings, *q_sandbox;
	struct idem_error err;
	size_t len;

	snprintf(sandbox, sizeof(sandbox), "%s/sandbox", work);
	snprintf(settings_path, sizeof(settings_path), "%s/settings", work);
	q_sandbox = idem_shell_quote(sandbox);
	if (asprintf(&command, "idem-sandbox -D %s start", q_sandbox) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	fprintf(stderr, "+ eval \"$(%s)\"\n", command);
	started_sandbox = 1;
	if (run(command, settings_path) != 0) {
		unlink(settings_path);
		cleanup();
		idem_die(IDEM_EXIT_ENV, "the sandbox did not start");
	}
	if ((settings = idem_read_file(settings_path, &len, &err)) == NULL)
		idem_die_error(&err);
	export_settings(settings);
	unlink(settings_path);
	{
		char *conninfo;

		if (asprintf(&conninfo, "host=%s port=%s dbname=%s user=%s", getenv("PGHOST"),
		    getenv("PGPORT"), getenv("PGDATABASE"), getenv("PGUSER")) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		setenv("IDEM_DATABASE", conninfo, 1);
		free(conninfo);
	}
	free(settings);
	free(command);
	free(q_sandbox);
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

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dbname", required_argument, NULL, 'd' },
		{ "worker", required_argument, NULL, 'w' },
		{ "key", required_argument, NULL, 'k' },
		{ "allowed-signers", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "commit", no_argument, NULL, 'c' },
		{ "keep-sandbox", no_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conninfo = NULL, *worker = NULL, *key = NULL, *signers = NULL, *dir = "records";
	char *throwaway_key = NULL, *throwaway_signers = NULL;
	char *setup, *pipeline, *record_cmd, *verify_cmd, *q_seed, *q_key, *q_dir;
	char *q_pipeline, *q_signers, *q_record, *q_stream, record_out[200], *record_path;
	char self[PATH_MAX], *path;
	struct idem_seed seed;
	struct idem_error err;
	struct sigaction sa;
	size_t len;
	ssize_t n;
	int c, commit = 0, status, counts_status;

	argv0 = "rehearse";
	argv[0] = (char *)argv0;
	while ((c = getopt_long(argc, argv, "d:w:k:f:o:cKhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': conninfo = optarg; break;
		case 'w': worker = optarg; break;
		case 'k': key = optarg; break;
		case 'f': signers = optarg; break;
		case 'o': dir = optarg; break;
		case 'c': commit = 1; break;
		case 'K': keep_sandbox = 1; break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("rehearse " IDEM_VERSION); idem_close_stdout(); return 0;
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (optind + 1 != argc)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
	if (commit && key == NULL)
		idem_die(IDEM_EXIT_USAGE, "-c: commit with a key of yours (-k), not a throwaway one");
	if (idem_seed_load(&seed, argv[optind], &err) < 0)
		idem_die_error(&err);
	if (key != NULL) {
		struct idem_key probe;

		if (idem_key_load(&probe, key, &err) < 0)
			idem_die_error(&err);
		idem_key_wipe(&probe);
	}
	if (worker == NULL)
		worker = seed.worker_command ? seed.worker_command : "idem-worker --guard unique";

	/* the programs beside this one come first */
	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		if (asprintf(&path, "%s:%s", self, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin") < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		setenv("PATH", path, 1);
		free(path);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* as root, the sandbox's server user must pass through */
	if (idem_make_temp_dir(work, sizeof(work), "rehearse", 0711, &err) < 0)
		idem_die_error(&err);
	/* whatever ends the run, the sandbox stops and the scratch goes */
	main_pid = getpid();
	atexit(cleanup);
	if (conninfo != NULL)
		setenv("IDEM_DATABASE", conninfo, 1);
	else if (getenv("IDEM_DATABASE") && *getenv("IDEM_DATABASE"))
		fprintf(stderr, "rehearse: using the database of IDEM_DATABASE\n");
	else if (!getenv("PGHOST") && !getenv("PGSERVICE") && !getenv("PGDATABASE"))
		start_sandbox();
	else
		fprintf(stderr, "rehearse: using the database of the PG* environment\n");

	if (key == NULL) {
		char *make_key;

		char *q_work = idem_shell_quote(work);

		if (asprintf(&make_key, "ssh-keygen -q -t ed25519 -N '' -C rehearse-throwaway -f %s/throwaway_ed25519 "
		    "&& printf 'rehearse-throwaway namespaces=\"idem-record,git\" %%s\\n' \"$(cat %s/throwaway_ed25519.pub)\" "
		    "> %s/allowed_signers", q_work, q_work, q_work) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		free(q_work);
		if (run(make_key, NULL) != 0) {
			cleanup();
			idem_die(IDEM_EXIT_ENV, "could not make a throwaway key with ssh-keygen");
		}
		free(make_key);
		fprintf(stderr, "rehearse: signing with a throwaway key made for this run; give -k "
		    "and list its public key in allowed_signers for a record others can trust\n");
		key = throwaway_key = strcat(strcpy(idem_emalloc(strlen(work) + 32), work),
		    "/throwaway_ed25519");
		signers = throwaway_signers = strcat(strcpy(idem_emalloc(strlen(work) + 32), work),
		    "/allowed_signers");
	}

	q_seed = idem_shell_quote(argv[optind]);
	setup = setup_for(worker);
	if (asprintf(&pipeline, "%s%sseed-gen %s | count-effects --before | dup-publish | "
	    "kill-at -- %s | count-effects", setup ? setup : "", setup ? " && " : "", q_seed,
	    worker) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	q_key = idem_shell_quote(key);
	q_dir = idem_shell_quote(dir);
	q_pipeline = idem_shell_quote(pipeline);
	snprintf(stream_path, sizeof(stream_path), "%s/stream.tsv", work);
	q_stream = idem_shell_quote(stream_path);
	if (asprintf(&record_cmd, "mkrecord -k %s -o %s%s -r %s < %s", q_key, q_dir,
	    commit ? " -c" : "", q_pipeline, q_stream) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	free(q_stream);

	fprintf(stderr, "+ %s | mkrecord -k %s -o %s%s\n", pipeline, q_key, q_dir, commit ? " -c" : "");
	counts_status = run_stages(pipeline, stream_path);
	snprintf(record_out, sizeof(record_out), "%s/record", work);
	/* mkrecord finishes whole, signals or not: from here a record exists */
	record_made = 1;
	if ((status = run(record_cmd, record_out)) != 0) {
		unlink(record_out);
		cleanup();
		idem_die(status, "mkrecord failed with status %d", status);
	}
	if ((record_path = idem_read_file(record_out, &len, &err)) == NULL)
		idem_die_error(&err);
	unlink(record_out);
	record_path[strcspn(record_path, "\n")] = '\0';
	q_signers = q_record = verify_cmd = NULL;
	if (interrupted) {
		idem_warn("interrupted; the record was made and is not verified: %s", record_path);
		status = 128 + interrupted;
		goto out;
	}
	q_signers = signers ? idem_shell_quote(signers) : NULL;
	q_record = idem_shell_quote(record_path);
	if (asprintf(&verify_cmd, "verify-record%s%s %s", q_signers ? " -f " : "",
	    q_signers ? q_signers : "", q_record) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	fprintf(stderr, "+ %s\n", verify_cmd);
	status = run(verify_cmd, TO_STDERR);
	if (interrupted) {
		idem_warn("interrupted while verifying the record: %s", record_path);
		status = 128 + interrupted;
		goto out;
	}
	if (counts_status == IDEM_EXIT_FINDING)
		fprintf(stderr, "rehearse: the counts differ from the seed's expect; the record says "
		    "fail: %s\n", record_path);
	printf("%s\n", record_path);
	if (status == 0)
		status = counts_status;
out:
	cleanup();
	idem_seed_free(&seed);
	free(record_path);
	free(q_record);
	free(q_seed);
	free(q_key);
	free(q_dir);
	free(q_pipeline);
	free(q_signers);
	free(pipeline);
	free(setup);
	free(record_cmd);
	free(verify_cmd);
	free(throwaway_key);
	free(throwaway_signers);
	idem_close_stdout();
	return status;
}
